"""Reference solution of exercises/dot_product_similarity: the package's raw attention."""

from __future__ import annotations

import torch

from attnbook.attention import raw_self_attention


def batched_raw_attention(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    output, weights = raw_self_attention(x)  # (B, L, E), (B, L, L)
    return output, weights
