"""The checker of the chapter ``whisper``: :func:`check_dtw`.

The reference is the package's :func:`~attnbook.whisper.dtw`. A path is judged by what makes
it a warping path, one rule at a time, so that a hint can name the rule a wrong answer
breaks: it starts at ``(0, 0)``, ends at ``(n - 1, m - 1)``, moves one row down, one column
right or both at every step (never back, never skipping a cell), and costs no more than the
cheapest such path. Where several paths tie for the cheapest, any of them passes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .._validate import require_function
from ..whisper import dtw
from .harness import Checks, Mismatch, call_reader, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_dtw"]

_STEP_HINT = (
    "each step of a warping path moves one row down, one column right, or both: from "
    "(i, j) to (i + 1, j), (i, j + 1) or (i + 1, j + 1). Walking back from the last cell, "
    "go to the cheapest of (i - 1, j - 1), (i - 1, j) and (i, j - 1)."
)
_TABLE_HINT = (
    "total[i, j] = cost[i, j] + min(total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]): "
    "all three predecessors, with total = inf outside the matrix except a start of 0 before "
    "(0, 0); then walk back from the last cell to the cheapest predecessor each time."
)


def _as_path(call: str, got: object) -> np.ndarray:
    """The reader's path as an integer array ``(k, 2)``."""
    if isinstance(got, torch.Tensor):
        got = got.tolist()
    try:
        path = np.array(list(got), dtype=float)
    except (TypeError, ValueError):
        raise Mismatch(f"{call} returned {type(got).__name__}, not a list of (row, "
                       f"column) pairs", hint="return [(0, 0), ..., (n - 1, m - 1)]: "
                       "a list of tuples, or an array of shape (k, 2).") from None
    if path.ndim != 2 or path.shape[1] != 2 or not len(path):
        raise Mismatch(f"{call} returned shape {path.shape}, not (k, 2): a list of "
                       f"(row, column) pairs", hint="one (row, column) pair per cell of the "
                       "path, from (0, 0) to the last cell.")
    if not np.array_equal(path, np.round(path)):
        raise Mismatch(f"{call} returned non-integer positions: {path[:4].tolist()}",
                       hint="each pair is a cell's (row, column) index.")
    return path.astype(int)


def check_dtw(dtw_fn: Callable) -> None:
    """Check ``dtw_fn(cost) -> path``: the cheapest monotone path through a cost matrix.

    The exercise ``whisper-ex1`` of the chapter ``whisper``: ``cost`` is a float64 array
    ``(n, m)``; the path is a list of ``(row, column)`` pairs (or an array ``(k, 2)``) from
    ``(0, 0)`` to ``(n - 1, m - 1)``, each step ``(1, 0)``, ``(0, 1)`` or ``(1, 1)``, whose
    cells cost as little in total as any such path (the reference is
    :func:`attnbook.whisper.dtw`; ties between equally cheap paths pass).

    The matrices tempt the usual mistakes: a cheap cell up and to the left of a path's way
    (a path that goes back), a cheap cell two columns on (one that skips), a cheap corner
    away from ``(0, 0)`` (one that starts elsewhere), a table filled with only the diagonal
    and one other predecessor, and the single row and column, where only one path exists.
    """
    dtw_fn = require_function("dtw_fn", dtw_fn)
    checks = Checks("check_dtw")
    name = name_of(dtw_fn)

    def run(label: str, cost: np.ndarray) -> None:
        call = f"{name}({label})"
        got = call_reader(call, dtw_fn, cost.copy(), names=("cost",))
        path = _as_path(call, got)
        n, m = cost.shape
        if (n, m) != (1, 1) and tuple(path[0]) == (n - 1, m - 1) and tuple(path[-1]) == (0, 0):
            raise Mismatch(f"the path runs from ({n - 1}, {m - 1}) back to (0, 0)",
                           hint="walking back from the last cell collects the path in "
                                "reverse: reverse it before returning (`path[::-1]`).")
        if tuple(path[0]) != (0, 0):
            raise Mismatch(f"the path starts at {tuple(path[0])}, not (0, 0)",
                           hint="a warping path pins both ends: the first pair is (0, 0), "
                                "the first token with the first audio position.")
        if tuple(path[-1]) != (n - 1, m - 1):
            raise Mismatch(f"the path ends at {tuple(path[-1])}, not ({n - 1}, {m - 1})",
                           hint="a warping path pins both ends: the last pair is "
                                "(n - 1, m - 1), the last token with the last audio "
                                "position.")
        steps = np.diff(path, axis=0)
        for index, step in enumerate(steps):
            if tuple(step) not in {(1, 0), (0, 1), (1, 1)}:
                kind = ("goes back" if (step < 0).any() else
                        "skips a cell" if (step > 1).any() else "stays in place")
                raise Mismatch(
                    f"the path {kind}: from {tuple(path[index])} to "
                    f"{tuple(path[index + 1])}", hint=_STEP_HINT)
        theirs = dtw(cost)
        best = float(cost[theirs[:, 0], theirs[:, 1]].sum())
        total = float(cost[path[:, 0], path[:, 1]].sum())
        if total > best + 1e-9 * max(1.0, abs(best)):
            raise Mismatch(
                f"the path costs {total:.4g}, but a path costing {best:.4g} exists",
                [f"yours:    {[tuple(p) for p in path.tolist()]}",
                 f"cheapest: {[tuple(p) for p in theirs.tolist()]}"],
                hint=_TABLE_HINT)

    rng = np.random.default_rng(20261130)
    back = np.full((3, 4), 5.0)
    back[0, 0] = back[1, 1] = back[2, 3] = 0.0
    back[0, 2] = back[1, 3] = -1.0  # cheap, but reached only by moving back or skipping
    skip = np.full((2, 5), 1.0)
    skip[0, 0], skip[1, 2], skip[0, 3] = 0.0, 0.0, -0.5
    corner = np.full((3, 3), 1.0)
    corner[0, 0], corner[1, 1], corner[2, 2] = 3.0, 0.0, 0.0
    corner[0, 1] = -2.0  # a path may not start here instead of (0, 0)
    checks.run_all(run, [
        ("the chapter's 2 x 3 example", "[[0, 5, 5], [5, 0, 0]]",
         np.array([[0.0, 5.0, 5.0], [5.0, 0.0, 0.0]])),
        ("a random 6 x 9 cost matrix", "cost (6, 9)", rng.random((6, 9))),
        ("cheap cells that only a path going back or skipping reaches", "cost (3, 4)", back),
        ("a cheap cell two columns on", "cost (2, 5)", skip),
        ("an expensive start and a cheap cell beside it", "cost (3, 3)", corner),
        ("a tall 12 x 3 matrix", "cost (12, 3)", rng.random((12, 3))),
        ("a single row: only one path", "cost (1, 5)", rng.random((1, 5))),
        ("a single column: only one path", "cost (4, 1)", rng.random((4, 1))),
        ("one cell", "cost (1, 1)", np.array([[2.0]])),
    ])
