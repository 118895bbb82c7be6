"""Reference solution of exercises/training_attention: the package's required map."""

from __future__ import annotations

import torch

from attnbook.training import RepeatTask


def repeat_pattern(L: int, period: int) -> torch.Tensor:
    return RepeatTask(length=L, period=period).required_pattern()  # (L, L)
