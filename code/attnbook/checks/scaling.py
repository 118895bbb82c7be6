"""The checker of the chapter ``scaling``: :func:`check_stable_softmax`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from .compare import expect_close, randn
from .harness import Checks, call_reader, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_stable_softmax"]


_KEEPDIM_HINT = (
    "a reduction without keepdim=True drops the last dimension, so the row maxima or sums "
    "no longer line up with their rows (and shapes such as (3, 5) and (3,) do not even "
    "broadcast): `scores.amax(dim=-1, keepdim=True)` and `exps.sum(dim=-1, keepdim=True)`."
)
_CLAMP_HINT = (
    "right for small scores, wrong for huge ones: if you clamp the scores (or the "
    "exponents) to keep exp finite, every score beyond the clamp looks the same, and the "
    "softmax changes. Subtracting the row's maximum keeps exp finite and changes nothing."
)
_LOGSUMEXP_HINT = (
    "exp(s - logsumexp(s)) is the softmax in exact arithmetic, and this check does not "
    "accept it in float32 at large scores: logsumexp(s) is rounded to float32, whose "
    "numbers near 1e4 are about 0.001 apart, and that rounding error in the exponent "
    "becomes a relative error of up to about 5e-4 in every weight. The row's maximum is one "
    "of the scores, so s - max is exact where it matters: subtract it, then divide by the "
    "sum."
)


def _softmax_hint(error: Exception) -> str | None:
    message = str(error)
    if isinstance(error, RuntimeError) and "must match the size" in message:
        return _KEEPDIM_HINT
    if isinstance(error, IndexError) and "Dimension out of range" in message:
        return ("count dimensions from the end: the softmax runs over dim=-1, the last one, "
                "whatever the number of dimensions (a single row (S,) has no dim 1).")
    return None


_OVERFLOW_HINT = (
    "exp overflowed (or every exp underflowed to 0, and 0/0 is NaN). Subtract each row's "
    "maximum, `scores.amax(dim=-1, keepdim=True)`, before `torch.exp`: the softmax does "
    "not change, and the largest exponent becomes exp(0) = 1."
)


def check_stable_softmax(softmax_fn: Callable) -> None:
    """Check ``softmax_fn(scores) -> weights``: a numerically stable row softmax.

    The exercise of the chapter ``scaling``: a softmax over the last dimension of scores of
    any shape ``(..., S)`` that never overflows, returning the same shape and dtype. The
    reference is :func:`torch.softmax` (the softmax inside
    :func:`attnbook.attention.masked_softmax`).

    Checks small and batched scores, scores of size 1e4, rows at very different levels,
    very negative rows, and float16 and float64. Besides the overflow, its hints name the
    maximum of the whole tensor, the wrong dimension, a missing ``keepdim``, a clamp, a
    computation in float32 on float64 scores, and the form ``exp(s - logsumexp(s))``,
    which it does not accept in float32 at large scores (and says why).
    """
    softmax_fn = require_function("softmax_fn", softmax_fn)
    checks = Checks("check_stable_softmax", _softmax_hint)
    call = f"{name_of(softmax_fn)}(scores)"

    def run(scores: Tensor, huge: bool = False) -> None:
        got = call_reader(call, softmax_fn, scores.clone(), names=("scores",))
        reference = torch.softmax(scores.double(), dim=-1).to(scores.dtype)
        exps = (scores.double() - scores.double().amax(dim=-1, keepdim=True)).exp()
        naive = scores.exp()
        global_max = (scores - scores.max()).exp()
        expect_close(
            "the weights", got, reference,
            hint=_CLAMP_HINT if huge else
            "softmax(s)_j = exp(s_j - m) / sum_k exp(s_k - m) over the last dimension, "
            "with m the row's maximum.",
            nan_hint=_OVERFLOW_HINT,
            mistakes=[
                (_OVERFLOW_HINT, lambda: naive / naive.sum(dim=-1, keepdim=True)),
                ("subtract each row's own maximum (`amax(dim=-1, keepdim=True)`), not the "
                 "maximum of the whole tensor: rows far below it underflow to 0/0.",
                 lambda: global_max / global_max.sum(dim=-1, keepdim=True)),
                ("normalise over the last dimension (dim=-1), so that each row sums to 1.",
                 lambda: torch.softmax(scores.double(), dim=0)),
                ("normalise over the last dimension (dim=-1), so that each row sums to 1.",
                 lambda: torch.softmax(scores.double(), dim=-2)),
                ("divide each row by its own sum: `exps.sum(dim=-1, keepdim=True)`; without "
                 "keepdim the sums line up with the wrong dimension.",
                 lambda: exps / exps.sum(dim=-1)),
                (_KEEPDIM_HINT, lambda: (scores.double() - scores.double().amax(dim=-1)).exp()
                 / exps.sum(dim=-1, keepdim=True)),
                (_LOGSUMEXP_HINT,
                 lambda: torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True)))])

    with checks.case("random scores (3, 5), float32"):
        run(randn(3, 5, seed=31))
    with checks.case("one row of scores (6,)"):
        run(randn(6, seed=32))
    with checks.case("a batch of scores (2, 3, 4, 6): softmax over the last dimension"):
        run(randn(2, 3, 4, 6, seed=33))
    with checks.case("huge scores, 1e4 · randn (64, 10), float32"):
        run(randn(64, 10, seed=34, scale=1e4), huge=True)
    with checks.case("one row near +1e4 and one near -1e4, shape (2, 5)"):
        run(randn(2, 5, seed=35) + torch.tensor([[1e4], [-1e4]]), huge=True)
    with checks.case("very negative scores, all below -1000, shape (3, 4)"):
        run(randn(3, 4, seed=36) - 2000.0)
    with checks.case("float16 scores (12, 0) and (-3, 11): exp(12) does not fit in float16"):
        run(torch.tensor([[12.0, 0.0], [-3.0, 11.0]], dtype=torch.float16))
    with checks.case("float64 scores (5, 7)"):
        run(randn(5, 7, seed=37, dtype=torch.float64, scale=30.0))
    checks.passed()
