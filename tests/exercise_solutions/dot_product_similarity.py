"""Solution of exercises/dot_product_similarity, written from scratch in plain torch."""

from __future__ import annotations

import torch


def batched_raw_attention(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(x x^T) x for x (B, L, E); returns (output (B, L, E), weights (B, L, L))."""
    scores = x @ x.transpose(-2, -1)  # (B, L, L)
    weights = torch.softmax(scores, dim=-1)  # (B, L, L)
    return weights @ x, weights
