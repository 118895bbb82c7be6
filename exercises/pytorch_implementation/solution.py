"""Exercise pytorch-implementation-ex1: single-head self-attention, without scaling.

Replace the `raise NotImplementedError(...)` lines below with your code, then run
`.venv/bin/python -m pytest exercises/pytorch_implementation` from the repository root.
"""

from __future__ import annotations

import torch
from torch import nn


class MySimpleAttention(nn.Module):
    """``softmax(Q K^T) V`` with three ``nn.Linear(n_embd, n_embd)`` projections, no scaling.

    Args:
        n_embd: the width of the token vectors.
    """

    def __init__(self, n_embd: int) -> None:
        super().__init__()
        raise NotImplementedError(
            "implement MySimpleAttention.__init__: create self.query, self.key and "
            "self.value, each an nn.Linear(n_embd, n_embd) "
            "(see exercises/pytorch_implementation/README.md)"
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x``: ``(..., L, n_embd)`` -> ``(output (..., L, n_embd), weights (..., L, L))``."""
        raise NotImplementedError(
            "implement MySimpleAttention.forward(x): return (output, weights) with "
            "weights = softmax(Q K^T) over the keys, no scaling, and output = weights V"
        )
