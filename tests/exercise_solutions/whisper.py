"""Solutions of the chapter `whisper`, written from scratch in plain NumPy.

exercises/whisper holds the chapter's checked exercise: my_dtw (whisper-ex1).
"""

from __future__ import annotations

import numpy as np


def my_dtw(cost) -> list[tuple[int, int]]:
    """The cheapest monotone path through cost (n, m), from (0, 0) to (n - 1, m - 1)."""
    cost = np.asarray(cost, dtype=float)
    n, m = cost.shape
    total = np.full((n, m), np.inf)
    for i in range(n):
        for j in range(m):
            before = [total[i - a, j - b] for a, b in ((1, 1), (1, 0), (0, 1))
                      if i - a >= 0 and j - b >= 0]
            total[i, j] = cost[i, j] + (min(before) if before else 0.0)
    path = [(n - 1, m - 1)]
    while path[-1] != (0, 0):
        i, j = path[-1]
        options = [(i - a, j - b) for a, b in ((1, 1), (1, 0), (0, 1))
                   if i - a >= 0 and j - b >= 0]
        path.append(min(options, key=lambda cell: total[cell]))
    return path[::-1]
