"""Solution of exercises/efficient_attention: one pass, a running maximum and sum."""

from __future__ import annotations

import math
from collections.abc import Iterator


def online_normalizer(stream: Iterator[float]) -> tuple[float, float]:
    """(m, ell) of the scores in ``stream``, read once, in order."""
    m, ell = float("-inf"), 0.0
    for z in stream:
        m_new = max(m, z)
        ell = ell * math.exp(m - m_new) + math.exp(z - m_new)
        m = m_new
    return m, ell
