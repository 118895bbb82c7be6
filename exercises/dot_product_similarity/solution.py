"""Exercise dot-product-similarity-ex3: raw self-attention on a batch of sequences.

Replace the `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/dot_product_similarity` from the repository root.
"""

from __future__ import annotations

import torch


def batched_raw_attention(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw self-attention ``softmax(x x^T) x`` on every sequence of a batch, unscaled.

    Args:
        x: token vectors, ``(B, L, E)``.

    Returns:
        ``(output, weights)`` of shapes ``(B, L, E)`` and ``(B, L, L)``.
    """
    raise NotImplementedError(
        "implement batched_raw_attention(x): for x of shape (B, L, E) return "
        "(output, weights) = (softmax(x x^T) x, softmax(x x^T)), unscaled, with "
        "shapes (B, L, E) and (B, L, L) (see exercises/dot_product_similarity/README.md)"
    )
