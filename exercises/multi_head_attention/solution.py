"""Exercises multi-head-attention-ex3 and -ex5: split the features into heads and merge them
back, then scaled multi-head attention.

Replace the `raise NotImplementedError(...)` lines below with your code, then run
`.venv/bin/python -m pytest exercises/multi_head_attention` from the repository root.
"""

from __future__ import annotations

import torch


def my_split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(B, L, d_model)`` -> ``(B, h, L, d_head)``; head ``i`` gets features
    ``i·d_head .. (i+1)·d_head - 1`` of every token."""
    raise NotImplementedError(
        "implement my_split_heads(x, num_heads): (B, L, d_model) -> (B, h, L, d_head), head "
        "i holding features i*d_head .. (i+1)*d_head - 1 of every token "
        "(see exercises/multi_head_attention/README.md)"
    )


def my_merge_heads(heads: torch.Tensor) -> torch.Tensor:
    """``(B, h, L, d_head)`` -> ``(B, L, h·d_head)``, the inverse of :func:`my_split_heads`."""
    raise NotImplementedError(
        "implement my_merge_heads(heads): (B, h, L, d_head) -> (B, L, h*d_head), the inverse "
        "of my_split_heads"
    )


def my_multi_head_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            num_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled attention in ``num_heads`` heads of already projected inputs.

    Args:
        q: ``(B, L, d_model)``.
        k, v: ``(B, S, d_model)``.
        num_heads: ``h``; each head has ``d_head = d_model / h`` features.

    Returns:
        ``(output, weights)``: ``(B, L, d_model)`` and ``(B, h, L, S)``.
    """
    raise NotImplementedError(
        "implement my_multi_head_attention(q, k, v, num_heads): split into heads, "
        "softmax(q k^T / sqrt(d_head)) per head, times v, heads merged; return (output, "
        "weights) (see exercises/multi_head_attention/README.md)"
    )
