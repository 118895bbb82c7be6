"""Exercise whisper-ex1: dynamic time warping, the cheapest monotone path through a cost
matrix, as Whisper uses it to time words.

Replace the `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/whisper` from the repository root.
"""

from __future__ import annotations

import numpy as np


def my_dtw(cost: np.ndarray) -> list[tuple[int, int]]:
    """The cheapest monotone path through a cost matrix.

    Args:
        cost: ``(n, m)`` floats: row ``i`` a text token, column ``j`` an audio position.

    Returns:
        The path as ``(row, column)`` pairs from ``(0, 0)`` to ``(n - 1, m - 1)``, each
        step one row down, one column right, or both, whose cells cost as little in total
        as any such path.
    """
    raise NotImplementedError(
        "implement my_dtw(cost): fill total[i, j], the cheapest cost of a path ending at "
        "(i, j), then walk back from the last cell (see exercises/whisper/README.md)"
    )
