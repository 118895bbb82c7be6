"""The checker of the chapter ``training-attention``: :func:`check_repeat_pattern`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..masks import causal_mask
from ..training import RepeatTask
from .compare import Mismatch, Mistake, as_tensor, describe, diagnose, expect_close, number, values
from .harness import Checks, call_reader, error_hints, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_repeat_pattern"]


def _congruent(L: int, period: int, shift: int) -> Tensor:
    """``(L, L)`` boolean: ``t + shift - j`` is a multiple of ``period``, for every key ``j``,
    earlier or later. Wrong answers are built from it; the right one is
    :meth:`~attnbook.training.RepeatTask.required_pattern`."""
    query = torch.arange(L)[:, None]  # (L, 1)
    key = torch.arange(L)[None, :]  # (1, L)
    return (query + shift - key) % period == 0  # (L, L)


def _spread(keys: Tensor) -> Tensor:
    """A boolean ``(L, L)`` map as weights: ``1/k`` on each of a row's ``k`` keys."""
    keys = keys.float()
    return keys / keys.sum(-1, keepdim=True).clamp(min=1)


def _wrapped_nearest(L: int, period: int) -> Tensor:
    """``R[t, t + 1 - period] = 1`` for every row, Python's negative indices included."""
    wrapped = torch.zeros(L, L)
    rows = torch.arange(L)
    wrapped[rows, (rows + 1 - period) % L] = 1.0
    return wrapped


_repeat_pattern_hint = error_hints(
    (ZeroDivisionError, "",
     "a row t < period - 1 has no key holding its target: leave it at zero instead of "
     "dividing by its number of keys, 0."),
    (IndexError, "",
     "keys run from 0 to L - 1: key t + 1 - period exists only from row t = period - 1 on."),
)


def check_repeat_pattern(pattern_fn: Callable) -> None:
    """Check ``pattern_fn(L, period) -> map``: the required map of the repeat task.

    The exercise of the chapter ``training-attention``: the ``(L, L)`` float map of
    ``RepeatTask(length=L, period=period)``, whose row ``t`` spreads 1 evenly over the keys
    ``j <= t`` with ``t + 1 - j`` a multiple of ``period`` (the keys holding the token
    ``x_{t+1}``), and whose rows ``t < period - 1``, which no key can answer, stay zero. The
    reference is :meth:`attnbook.training.RepeatTask.required_pattern`, and the row sums
    must be 1 exactly where :meth:`~attnbook.training.RepeatTask.answerable` is True.

    Checks the chapter's task (``L = 16``, period 8), prefixes that repeat three and four
    times, period 2, ``period = L``, the smallest task and a longer one.
    """
    pattern_fn = require_function("pattern_fn", pattern_fn)
    checks = Checks("check_repeat_pattern", _repeat_pattern_hint)
    name = name_of(pattern_fn)
    hint = ("row t spreads 1 evenly over the keys j <= t with t + 1 - j a multiple of "
            "period, the keys that hold x_(t+1); rows t < period - 1 stay zero.")

    def run(L: int, period: int) -> None:
        call = f"{name}({L}, {period})"
        task = RepeatTask(length=L, period=period)
        expected = task.required_pattern()  # (L, L), float32
        required = expected > 0  # (L, L): the keys that hold the answer
        mistakes: list[Mistake] = [
            ("key j holds x_j, and query t must predict x_(t+1): take the keys with "
             "t + 1 - j a multiple of period. With t - j you point at copies of the query's "
             "own token.", lambda: _spread(_congruent(L, period, 0) & causal_mask(L))),
            ("only keys j <= t: the causal mask hides the later ones, and key t + 1 holds "
             "the very token to predict.", lambda: _spread(_congruent(L, period, 1))),
            ("for t < period - 1 the index t + 1 - period is negative, and R[t, -k] "
             "silently writes to column L - k, a later key: leave those rows at zero.",
             lambda: _wrapped_nearest(L, period)),
            ("every earlier copy holds the answer: spread 1 evenly over key t + 1 - period "
             "and its copies further back, t + 1 - 2·period and so on, as long as they are "
             ">= 0.", lambda: _spread(required & ~causal_mask(L, offset=-period))),
            ("spread 1 evenly: divide each row by its number of keys, so that a row with k "
             "keys gets 1/k on each.", lambda: required.float()),
            ("rows are queries and columns keys: R[t, j] is the weight query t gives to key "
             "j, and you built the transpose.", lambda: expected.T),
        ]
        got = call_reader(call, pattern_fn, L, period, names=("L", "period"))
        got = as_tensor(f"the map {call}", got, expected, hint)
        if got.shape == expected.shape and not got.is_floating_point():
            raise Mismatch(
                f"the map {call} has dtype {got.dtype}, expected a floating dtype such as "
                f"torch.float32", [f"expected: {describe(expected)}",
                                   f"got:      {describe(got)}"],
                "the weights are fractions (1/2 when two keys hold the answer): build the "
                "map with `torch.zeros(L, L)`, a float tensor, or call `.float()`.")
        if got.shape == expected.shape and torch.isfinite(got.detach()).all():
            sums = got.detach().cpu().double().sum(-1)  # (L,)
            answerable = task.answerable().double()  # (L,)
            if not torch.allclose(sums, answerable, atol=1e-5, rtol=0):
                t = int(((sums - answerable).abs() > 1e-5).nonzero()[0])
                if t < period - 1:
                    fallback = ("rows t < period - 1 have no key holding their target: "
                                "leave them all zero.")
                elif sums[t] > 1:
                    fallback = "spread 1 evenly: divide each row by its number of keys."
                else:
                    fallback = ("from t = period - 1 on, row t has at least the key "
                                "t + 1 - period: its weights sum to 1.")
                raise Mismatch(
                    f"wrong row sums of the map {call}: row {t} sums to "
                    f"{number(float(sums[t]))}, expected {number(float(answerable[t]))}",
                    [f"expected row sums: {values(answerable, L)}",
                     f"got row sums:      {values(sums, L)}",
                     f"rows 0 to {period - 2} cannot be answered: their target is a fresh "
                     f"random token (RepeatTask.answerable() is False there)"],
                    diagnose(got, mistakes, 1e-6, 1e-5) or fallback)
        expect_close(
            f"the map {call}", got, expected, atol=1e-6, rtol=1e-5, check_dtype=False,
            hint=hint, mistakes=mistakes,
            nan_hint="a row with no key divides 0 by 0, which is NaN: leave such rows at "
                     "zero (divide by the number of keys clamped to at least 1, "
                     "`counts.clamp(min=1)`).")

    checks.run_all(run, [
        ("the chapter's task, L=16 and period=8: the prefix repeats twice", 16, 8),
        ("L=9, period=4: rows 7 and 8 have their answer at two keys", 9, 4),
        ("L=12, period=3: the last row has its answer at four keys", 12, 3),
        ("L=7, period=2", 7, 2),
        ("period = L = 6: only the last row can be answered", 6, 6),
        ("the smallest task, L=3 and period=2", 3, 2),
        ("a longer input, L=25 and period=5", 25, 5),
    ])
