"""Exercise training-attention-ex3: the required attention map of the repeat task.

Replace the `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/training_attention` from the repository root.
"""

from __future__ import annotations

import torch


def repeat_pattern(L: int, period: int) -> torch.Tensor:
    """The ``(L, L)`` required map of ``RepeatTask(length=L, period=period)``.

    Args:
        L: the input length.
        period: the length of the prefix that repeats.

    Returns:
        A float tensor ``(L, L)``: row ``t`` spreads 1 evenly over the keys ``j <= t`` with
        ``t + 1 - j`` a multiple of ``period``; a row with no such key is all zeros.
    """
    raise NotImplementedError(
        "implement repeat_pattern(L, period): the (L, L) float map whose row t spreads 1 "
        "evenly over the keys j <= t with t + 1 - j a multiple of period, all zeros on rows "
        "with no such key (see exercises/training_attention/README.md)"
    )
