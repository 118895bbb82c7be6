"""Reference solution of exercises/scaling: the package's softmax."""

from __future__ import annotations

import torch

from attnbook.attention import masked_softmax


def my_softmax(scores: torch.Tensor) -> torch.Tensor:
    return masked_softmax(scores)
