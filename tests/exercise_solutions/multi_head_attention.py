"""Solution of exercises/multi_head_attention, written from scratch in plain torch."""

from __future__ import annotations

import math

import torch


def my_split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, d_model) -> (B, h, L, d_head): head i holds features i·d_head .. of each token."""
    B, L, d_model = x.shape
    x = x.reshape(B, L, num_heads, d_model // num_heads)  # (B, L, h, d_head)
    return x.transpose(1, 2)  # (B, h, L, d_head)


def my_merge_heads(heads: torch.Tensor) -> torch.Tensor:
    """(B, h, L, d_head) -> (B, L, h·d_head), the inverse of my_split_heads."""
    B, h, L, d_head = heads.shape
    return heads.transpose(1, 2).reshape(B, L, h * d_head)  # (B, L, d_model)


def my_multi_head_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            num_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled attention in num_heads heads: ((B, L, d_model), (B, h, L, S))."""
    q_h, k_h, v_h = (my_split_heads(t, num_heads) for t in (q, k, v))  # (B, h, *, d_head)
    scores = q_h @ k_h.transpose(-2, -1) / math.sqrt(q_h.shape[-1])  # (B, h, L, S)
    weights = torch.softmax(scores, dim=-1)
    return my_merge_heads(weights @ v_h), weights
