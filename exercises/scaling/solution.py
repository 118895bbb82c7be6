"""Exercise scaling-ex2: a numerically stable softmax.

Replace the `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/scaling` from the repository root.
"""

from __future__ import annotations

import torch


def my_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension that never overflows; no ``torch.softmax``.

    Args:
        scores: ``(..., S)``, any floating dtype.

    Returns:
        Weights of the same shape and dtype; every row sums to 1.
    """
    raise NotImplementedError(
        "implement my_softmax(scores): a softmax over the last dimension that stays finite "
        "for scores of any size, returning the shape and dtype of scores, without "
        "torch.softmax (see exercises/scaling/README.md)"
    )
