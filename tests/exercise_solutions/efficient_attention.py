"""Solution of exercises/efficient_attention: one pass, a running maximum and sum."""

from __future__ import annotations

import math
from collections.abc import Iterator


def online_normalizer(stream: Iterator[float]) -> tuple[float, float]:
    """(m, row_sum) of the scores in ``stream``, read once, in order."""
    m, row_sum = float("-inf"), 0.0
    for z in stream:
        m_new = max(m, z)
        shift = m_new if m_new > float("-inf") else 0.0  # all -inf so far: exp(-inf) = 0
        row_sum = row_sum * math.exp(m - shift) + math.exp(z - shift)
        m = m_new
    return m, row_sum
