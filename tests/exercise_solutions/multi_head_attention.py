"""Reference solution of exercises/multi_head_attention: the package's split and merge."""

from __future__ import annotations

import torch

from attnbook.layers import MultiHeadAttention


def my_split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    return MultiHeadAttention(x.shape[-1], num_heads).split_heads(x)  # (B, h, L, d_head)


def my_merge_heads(heads: torch.Tensor) -> torch.Tensor:
    num_heads, d_head = heads.shape[-3], heads.shape[-1]
    return MultiHeadAttention(num_heads * d_head, num_heads).merge_heads(heads)  # (B, L, d)
