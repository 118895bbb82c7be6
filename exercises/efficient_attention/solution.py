"""Exercise efficient-attention-ex3: the online normaliser (running maximum and sum).

Replace the `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/efficient_attention` from the repository root.
"""

from __future__ import annotations

import math  # noqa: F401  (math.exp is all you need)
from collections.abc import Iterator


def online_normalizer(stream: Iterator[float]) -> tuple[float, float]:
    """``(m, row_sum)`` of the scores in ``stream``, read once, in order.

    Args:
        stream: an iterator over the scores ``z_j`` of one row, Python floats. It can be
            read only once.

    Returns:
        ``m``, the largest score, and the row sum ``row_sum = sum_j exp(z_j - m)``; for a
        row of only ``-inf``, ``(-inf, 0.0)``.
    """
    raise NotImplementedError(
        "implement online_normalizer(stream): read the scores once, keeping the running "
        "maximum m and the running row sum row_sum of exp(z - m), and return (m, row_sum) "
        "(see exercises/efficient_attention/README.md)"
    )
