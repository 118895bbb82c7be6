"""Solution of exercises/pytorch_implementation, written from scratch in plain torch."""

from __future__ import annotations

import torch
from torch import nn


class MySimpleAttention(nn.Module):
    """softmax(Q K^T) V with three nn.Linear(n_embd, n_embd) projections and no scaling."""

    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.query = nn.Linear(n_embd, n_embd)
        self.key = nn.Linear(n_embd, n_embd)
        self.value = nn.Linear(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., L, n_embd) -> output (..., L, n_embd), weights (..., L, L)."""
        q, k, v = self.query(x), self.key(x), self.value(x)  # each (..., L, n_embd)
        weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)  # (..., L, L)
        return weights @ v, weights
