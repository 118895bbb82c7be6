"""The checker of the chapter ``efficient-attention``: :func:`check_online_normalizer`."""

from __future__ import annotations

import math
import tracemalloc
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from .._validate import require_function
from .compare import Mismatch, as_scalar, expect_close, expect_number, expect_pair, randn, values
from .harness import Checks, call_reader, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_online_normalizer"]


_ONLINE_OVERFLOW_HINT = (
    "exp overflowed: e^z does not fit in a float once z is above about 709. Update the "
    "maximum first, `m_new = max(m, z)`, then exponentiate only z - m_new and m - m_new, "
    "so that no term exceeds 1."
)
_LOW_PRECISION_HINT = (
    "the scores are Python floats, that is float64; a float32 tensor such as "
    "`torch.tensor(z)` rounds them. Compute with `math.exp` and `max`, or in torch.float64."
)


_ONE_PASS_HINT = (
    "the point of the exercise is one pass in constant memory: FlashAttention keeps one "
    "block of a row at a time and never the whole row, and here a block is one score. Keep "
    "only m and row_sum, update both for each z in one `for z in stream:` loop, and keep no "
    "list, array or tensor of the scores."
)
_EMPTY_ROW_HINT = (
    "every score of this row is -inf, so its maximum is -inf: start m at float('-inf') (not "
    "0, and not a large negative number such as -1e30) and let `max(m, z)` keep it there."
)
_GUARD_HINT = (
    "a row that begins with -inf (a masked key, as in left padding) reads its first scores "
    "while m_new is still -inf, so `exp(m - m_new)` and `exp(z - m_new)` are "
    "exp(-inf + inf) = exp(nan) = nan, and row_sum stays nan from then on. "
    "Guard it as step 2.2 of the chapter's algorithm does: shift by 0 while m_new is "
    "-inf (`shift = m_new if m_new > float('-inf') else 0.0`), or skip the scores that are "
    "-inf (`if z == float('-inf'): continue`). A row of only -inf then ends with m = -inf "
    "and row_sum = 0."
)
#: A reader holding more of the scores read so far than this is storing the stream: a
#: one-pass loop holds the current score and the running maximum, at most a few.
_MOST_SCORES_HELD = 4
#: Scores in the row that measures the reader's memory, and the most it may allocate at
#: once (a list of them takes about 300 kB; a one-pass loop a few kB at most).
_LONG_ROW = 10_000
_MOST_BYTES = 48 * 1024


class _ReadTwice(RuntimeError):
    """The reader's code asked a stream for more scores after reading it to the end."""


class _StoredTheStream(RuntimeError):
    """The reader's code kept the scores it had read instead of one running state."""


class _Score(float):
    """A score that can be watched: the stream sees whether the reader still holds it."""

    __slots__ = ("__weakref__",)


class _OnePassStream(Iterator[float]):
    """The scores of one row, read once, in order, and only as far as they are needed.

    Asking for a score after the end raises :class:`_ReadTwice` (a generator would quietly
    give nothing, and the reader's second loop would sum nothing). Reading a score while
    the last :data:`_MOST_SCORES_HELD` + 1 scores given out are all still alive somewhere
    (a ``list(stream)``, ``sorted(stream)`` or ``tee``) raises :class:`_StoredTheStream`.
    Copies (``[float(z) for z in stream]``, ``np.fromiter``) are new objects: the memory
    check of :func:`check_online_normalizer` catches those.
    """

    def __init__(self, scores: Sequence[float]) -> None:
        self._scores = scores
        self._read = 0
        self._ended = False
        self._given: deque[weakref.ref] = deque(maxlen=_MOST_SCORES_HELD + 1)

    def __iter__(self) -> _OnePassStream:
        return self

    def __next__(self) -> float:
        if self._ended:
            raise _ReadTwice(
                f"the stream was read to its end ({len(self._scores)} scores) and then "
                f"asked for more: it can be read only once")
        if self._read == len(self._scores):
            self._ended = True
            raise StopIteration
        held = sum(ref() is not None for ref in self._given)
        if held > _MOST_SCORES_HELD:
            raise _StoredTheStream(
                f"the last {held} scores read were all still held when score "
                f"{self._read + 1} was asked for: the scores are being stored, not streamed")
        score = _Score(self._scores[self._read])
        self._given.append(weakref.ref(score))
        self._read += 1
        return score


def _online_normalizer_hint(error: Exception) -> str | None:
    message = str(error)
    if isinstance(error, _ReadTwice | _StoredTheStream):
        return _ONE_PASS_HINT
    if isinstance(error, OverflowError):
        return _ONLINE_OVERFLOW_HINT
    if isinstance(error, TypeError) and any(
            text in message for text in ("len()", "subscriptable", "reversed")):
        return ("the scores arrive as an iterator: read them once, in order, with "
                "`for z in stream:`. It has no length and no indexing, and it cannot go back.")
    if isinstance(error, TypeError) and "Tensor" in message:
        return ("the scores are Python floats: use `math.exp` and `max`, not `torch.exp` "
                "and `torch.maximum` (or turn each one into a float64 tensor first).")
    if isinstance(error, ValueError) and "empty" in message:
        return ("the stream can be read only once: after `max(stream)` nothing is left. "
                "Keep the maximum and the sum up to date in one loop.")
    if isinstance(error, ValueError) and "math domain" in message:
        return ("m + log(row_sum) is only defined when row_sum > 0: a row of only -inf has "
                "row_sum = 0 and no log-sum-exp. Return (m, row_sum) and leave the log to "
                "the caller.")
    return None


def _without_rescaling(row: Tensor) -> Tensor:
    """``row_sum`` when the old terms are never rescaled: ``sum_j exp(z_j - max(z_0..z_j))``."""
    return torch.exp(row - row.cummax(0).values).sum()


def _rescaled_upwards(scores: Sequence[float]) -> float:
    """``row_sum`` when the rescaling factor is ``exp(m_new - m_old)`` instead of its inverse."""
    m, row_sum = -math.inf, 0.0
    for z in scores:
        m_new = max(m, z)
        row_sum = (row_sum * math.exp(m_new - m) if row_sum else 0.0) + math.exp(z - m_new)
        m = m_new
    return row_sum


def check_online_normalizer(normalizer_fn: Callable) -> None:
    """Check ``normalizer_fn(stream) -> (m, row_sum)``: the one-pass online normaliser.

    The exercise of the chapter ``efficient-attention`` (Milakov and Gimelshein's online
    softmax): ``stream`` is an iterator over the scores ``z_j`` of one row, Python floats,
    which can be read only once; the answer is the pair of numbers ``m = max_j z_j`` and
    ``row_sum = sum_j exp(z_j - m)``, the row sum (the chapter's ``r``). Then
    ``exp(z_j - m) / row_sum`` is the softmax and ``m + log(row_sum)`` the log-sum-exp of the
    row, which are compared with
    :func:`torch.softmax` and :func:`torch.logsumexp`.

    Checks rows of 1 to 1000 scores (random, rising so that the maximum moves at every
    step, falling, all equal), scores near 1000 and of order 1e4 where ``exp(z)`` overflows,
    scores all below -1000, masked scores ``-inf`` after the first one, rows that begin with
    ``-inf`` (left padding: the guard of the chapter's step 2.2) and a row of only ``-inf``,
    whose answer is ``m = -inf`` and ``row_sum = 0``. The stream can be read once: a second
    pass fails, and so does storing the scores (more than a few of them still held while
    the next one is read, or memory that grows with a row of 100,000 scores), with a
    message that says the point is one pass.
    """
    normalizer_fn = require_function("normalizer_fn", normalizer_fn)
    checks = Checks("check_online_normalizer", _online_normalizer_hint)
    call = f"{name_of(normalizer_fn)}(stream)"
    pair_hint = ("return the pair `(m, row_sum)` of two numbers, for instance "
                 "`return m, row_sum`.")

    def run(row: Tensor, *, measure_memory: bool = False) -> None:
        row = row.double()  # (S,)
        scores = row.tolist()
        stream = _OnePassStream(scores)
        if not measure_memory:
            result = call_reader(call, normalizer_fn, stream, names=("stream",))
        else:
            result, peak = _with_peak_memory(
                lambda: call_reader(call, normalizer_fn, stream, names=("stream",)))
            if peak > _MOST_BYTES:
                raise Mismatch(
                    f"{call} used {peak / 1e6:.1f} MB at its peak on a row of "
                    f"{len(scores):,} scores: its memory grows with the row",
                    [f"a one-pass loop needs a few kB at most; the limit here is "
                     f"{_MOST_BYTES // 1024} kB"],
                    "the scores are being stored (a list, an array, a tensor, even of "
                    "copies): " + _ONE_PASS_HINT)
        got_m, got_row_sum = expect_pair(call, result, "m", "row_sum")
        low = [str(getattr(v, "dtype", "")).removeprefix("torch.")
               in ("float32", "float16", "bfloat16") for v in (got_m, got_row_sum)]
        got_m = as_scalar("m", got_m, pair_hint)
        got_row_sum = as_scalar("row_sum", got_row_sum, pair_hint)
        m = float(row.max())
        empty = m == -math.inf  # every score is -inf: no maximum, nothing to sum
        row_sum = 0.0 if empty else float(torch.exp(row - m).sum())
        masked = -math.inf in scores
        note = f"the row: {len(scores)} scores {values(scores)}"
        expect_number(
            "m", got_m, m, atol=1e-12, rtol=1e-12, note=note,
            hint=_EMPTY_ROW_HINT if empty else _LOW_PRECISION_HINT if low[0] else
            "m is the largest score of the row: update it with every score, "
            "`m = max(m, z)`, starting from float('-inf').",
            nan_hint="start m at float('-inf') and update it with `m = max(m, z)`: it is "
                     "then the largest score, finite as soon as one score is.",
            mistakes=[
                ("return the pair (m, row_sum) in that order: the maximum first, then the sum.",
                 lambda: row_sum),
                ("start the running maximum at float('-inf'), not 0: when every score is "
                 "negative, 0 is above all of them.", lambda: max(m, 0.0)),
                ("m must be the maximum of all the scores: update it with every score, "
                 "`m = max(m, z)`, not only with the first.", lambda: scores[0]),
                ("m is the running maximum, not the last score read: `m = max(m, z)`.",
                 lambda: scores[-1])])
        expect_number(
            "row_sum", got_row_sum, row_sum, atol=1e-12, rtol=1e-9, note=note,
            hint=_LOW_PRECISION_HINT if low[1] else
            "row_sum is the sum of exp(z_j - m) over the whole row, with m the final maximum."
            + (" A row of only -inf has row_sum = 0." if empty else ""),
            nan_hint=_GUARD_HINT if masked else _ONLINE_OVERFLOW_HINT,
            mistakes=[
                ("when a score beats the maximum, rescale the sum so far: "
                 "`row_sum = row_sum * exp(m_old - m_new) + exp(z - m_new)`. Without it the "
                 "old terms stay relative to the old maximum.", lambda: _without_rescaling(row)),
                ("the rescaling factor is exp(m_old - m_new), at most 1: the old terms "
                 "shrink when the maximum rises.", lambda: _rescaled_upwards(scores)),
                ("row_sum is the sum of exp(z_j - m), relative to the maximum m, not of "
                 "exp(z_j): that is what keeps every term at most 1.",
                 lambda: torch.exp(row).sum())])
        if empty:  # no softmax and no log-sum-exp: they need row_sum > 0
            return
        # What (m, row_sum) are for: the softmax and the log-sum-exp of the row.
        expect_close("the softmax exp(z - m) / row_sum", torch.exp(row - got_m) / got_row_sum,
                     torch.softmax(row, dim=0), atol=1e-12, rtol=1e-9, note=note,
                     hint="the weights exp(z_j - m) / row_sum must be torch.softmax of the row.")
        expect_number("the log-sum-exp m + log(row_sum)", got_m + math.log(got_row_sum),
                      float(torch.logsumexp(row, dim=0)), atol=1e-9, rtol=1e-12, note=note,
                      hint="m + log(row_sum) must be torch.logsumexp of the row.",
                      nan_hint="m + log(row_sum) must be torch.logsumexp of the row.")

    with checks.case("100 random scores, randn (100,)"):
        run(randn(100, seed=81, dtype=torch.float64))
    with checks.case("a single score: m = z and row_sum = 1"):
        run(torch.tensor([0.7]))
    with checks.case("20 rising scores: the maximum moves at every step"):
        run(torch.linspace(-3.0, 6.0, 20, dtype=torch.float64))
    with checks.case("20 falling scores: the maximum never moves after the first"):
        run(torch.linspace(6.0, -3.0, 20, dtype=torch.float64))
    with checks.case("5 equal scores 2.0: row_sum = 5"):
        run(torch.full((5,), 2.0, dtype=torch.float64))
    with checks.case("100 scores near 1000, 1000 + randn (100,): exp(z) overflows"):
        run(1000.0 + randn(100, seed=82, dtype=torch.float64))
    with checks.case("1000 huge scores, 1e4 · randn (1000,)"):
        run(randn(1000, seed=83, dtype=torch.float64, scale=1e4))
    with checks.case("very negative scores, -2000 + randn (50,)"):
        run(-2000.0 + randn(50, seed=84, dtype=torch.float64))
    with checks.case("masked keys: scores of -inf after the first score"):
        scores = randn(8, seed=85, dtype=torch.float64)
        scores[[1, 4, 5, 7]] = -math.inf
        run(scores)
    with checks.case("left padding: a row that begins with 3 scores of -inf"):
        scores = randn(10, seed=86, dtype=torch.float64)
        scores[:3] = -math.inf
        run(scores)
    with checks.case("a row of only -inf (every key masked): m = -inf and row_sum = 0"):
        run(torch.full((5,), -math.inf, dtype=torch.float64))
    with checks.case(f"{_LONG_ROW:,} scores in constant memory: nothing of the row is kept"):
        run(randn(_LONG_ROW, seed=87, dtype=torch.float64), measure_memory=True)
    checks.passed()


def _with_peak_memory(call: Callable[[], object]) -> tuple[object, int]:
    """``call()`` and the most memory that Python allocated at once while it ran."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if started:
            tracemalloc.stop()
    return result, peak - before
