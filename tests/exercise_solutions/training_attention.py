"""Solution of exercises/training_attention, written from scratch with loops."""

from __future__ import annotations

import torch


def repeat_pattern(L: int, period: int) -> torch.Tensor:
    """The (L, L) map of the keys j <= t that hold token t + 1, each row spread evenly."""
    R = torch.zeros(L, L)
    for t in range(L):
        keys = [j for j in range(t + 1) if (t + 1 - j) % period == 0]
        for j in keys:
            R[t, j] = 1 / len(keys)
    return R
