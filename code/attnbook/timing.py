"""Timing computations fairly, and turning the measured ratio into words.

The book times things to show a reader what one machine measured, never to assert a
verdict: the build runs on laptops, on ARM, under load and with other thread counts, so the
chapters glue the numbers and the words, and the timing goals live in ``make bench``. This
module is the one place the chapters and ``benchmarks/`` take their timings from:

- :func:`time_in_turns` runs several zero-argument callables in turns, so a machine that
  slows down half-way through slows all of them alike, and summarises each one's times.
- :func:`one_thread` pins PyTorch to one thread inside a ``with`` block, then restores the
  caller's count.
- :func:`times_phrase` writes "3.2 times faster" or "1.5 times slower" from a ratio, so the
  prose stays true whichever way the measurement falls.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import torch

from ._validate import require_choice, require_int, require_real

__all__ = ["one_thread", "time_in_turns", "times_phrase"]

_CLOCKS: dict[str, Callable[[], float]] = {
    "wall": time.perf_counter,  # elapsed time, as a user waiting for the result sees it
    "process": time.process_time,  # processor time of this program: waiting is not counted
}
_SUMMARIES: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median,  # robust to a few slow rounds
    "min": min,  # the best the machine managed: noise only ever adds time
}


@contextmanager
def one_thread() -> Iterator[None]:
    """Run PyTorch on one thread inside the block, then restore the caller's thread count.

    Small matrices gain nothing from threads, and on a machine busy with other work extra
    threads mostly wait for each other.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def time_in_turns(runs: Mapping[str, Callable[[], object]], *, rounds: int = 5,
                  inner: int = 1, warmup: int = 1, clock: str = "wall",
                  summary: str = "median", pause_gc: bool = True) -> dict[str, float]:
    """Seconds per call of each callable in ``runs``, measured in turns.

    Each round calls every callable ``inner`` times in a row, one callable after another, so a
    change in the machine's speed (another program, a clock change) falls on all of them. Each
    callable first runs ``warmup`` times untimed (first calls allocate and dispatch more).

    Args:
        runs: name -> zero-argument callable; the result of each call is discarded.
        rounds: how many timed rounds (>= 1). The summary is taken over the rounds.
        inner: calls per round (>= 1); the round's time is divided by it. Raise it for
            calls too short for the clock to resolve.
        warmup: untimed calls of each callable before the first round (>= 0).
        clock: ``"wall"`` (elapsed time, :func:`time.perf_counter`) or ``"process"``
            (processor time of this program, :func:`time.process_time`, which does not
            count time spent waiting for other programs, but adds up every thread's work).
        summary: ``"median"`` (robust to a few slow rounds) or ``"min"`` (the best round).
        pause_gc: switch Python's garbage collector off while timing, as :mod:`timeit`
            does, so a collection pause is not charged to whichever call it fell in.

    Returns:
        name -> seconds per call, as Python floats, in the order of ``runs``.
    """
    if not isinstance(runs, Mapping) or not runs:
        raise TypeError("runs must be a non-empty mapping of name -> zero-argument callable, "
                        f"got {type(runs).__name__}")
    for name, run in runs.items():
        if not callable(run):
            raise TypeError(f"runs[{name!r}] must be callable, got {type(run).__name__}")
    rounds = require_int("rounds", rounds)
    inner = require_int("inner", inner)
    warmup = require_int("warmup", warmup, minimum=0)
    now = require_choice("clock", clock, _CLOCKS)
    summarise = require_choice("summary", summary, _SUMMARIES)

    for run in runs.values():
        for _ in range(warmup):
            run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    gc_was_enabled = gc.isenabled()
    if pause_gc:
        gc.collect()
        gc.disable()
    try:
        for _ in range(rounds):
            for name, run in runs.items():
                start = now()
                for _ in range(inner):
                    run()
                times[name].append((now() - start) / inner)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: float(summarise(seconds)) for name, seconds in times.items()}


def times_phrase(ratio: float, faster: str = "faster", slower: str = "slower",
                 same: str = "about as fast", *, digits: int = 1) -> str:
    """Words for a measured ratio: ``"3.2 times faster"``, ``"1.5 times slower"`` when
    ``ratio < 1`` (then the inverse is quoted), or ``same`` when the factor rounds to 1.

    ``ratio`` is the other method's time over this one's: above 1, this one was faster.
    ``faster``, ``slower`` and ``same`` replace the words (for example "cheaper").
    """
    ratio = require_real("ratio", ratio)
    if ratio <= 0:
        raise ValueError(f"ratio must be a finite number > 0, got {ratio}")
    for name, word in (("faster", faster), ("slower", slower), ("same", same)):
        if not isinstance(word, str) or not word:
            raise TypeError(f"{name} must be a non-empty str, got {word!r}")
    digits = require_int("digits", digits, minimum=0)
    factor, word = (ratio, faster) if ratio >= 1 else (1 / ratio, slower)
    if round(factor, digits) == 1:
        return same
    return f"{factor:.{digits}f} times {word}"
