"""attnbook.timing: turns, summaries, the thread pin, and the words for a ratio."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

import attnbook.timing as timing_module
from attnbook.timing import one_thread, time_in_turns, times_phrase


def test_every_callable_runs_warmup_plus_rounds_times_inner() -> None:
    calls = {"a": 0, "b": 0}

    def bump(name: str):
        def run() -> None:
            calls[name] += 1
        return run

    # Any integer type counts, as everywhere in the package.
    result = time_in_turns({"a": bump("a"), "b": bump("b")}, rounds=np.int64(3), inner=4,
                           warmup=2)
    assert list(result) == ["a", "b"]
    assert calls == {"a": 2 + 3 * 4, "b": 2 + 3 * 4}
    assert all(isinstance(seconds, float) and seconds >= 0 for seconds in result.values())


def test_turns_interleave_the_callables() -> None:
    order: list[str] = []
    time_in_turns({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                  rounds=3, warmup=0)
    assert order == ["a", "b"] * 3


def test_summary_min_is_at_most_median_on_the_same_fake_clock(monkeypatch) -> None:
    # A fake clock whose rounds take 3, 1, 2 units: median 2, min 1. Each timed call reads
    # the clock twice (start, end).
    readings = iter([0, 3, 10, 11, 20, 22] * 2)
    monkeypatch.setitem(timing_module._CLOCKS, "wall", lambda: next(readings))
    median = time_in_turns({"x": lambda: None}, rounds=3, warmup=0)
    smallest = time_in_turns({"x": lambda: None}, rounds=3, warmup=0, summary="min")
    assert median == {"x": 2.0}
    assert smallest == {"x": 1.0}


def test_gc_is_paused_while_timing_and_restored() -> None:
    seen: list[bool] = []
    assert gc.isenabled()
    time_in_turns({"x": lambda: seen.append(gc.isenabled())}, rounds=2, warmup=0)
    assert seen == [False, False]
    assert gc.isenabled()
    time_in_turns({"x": lambda: seen.append(gc.isenabled())}, rounds=1, warmup=0,
                  pause_gc=False)
    assert seen[-1] is True


def test_gc_is_restored_when_a_callable_raises() -> None:
    def boom() -> None:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        time_in_turns({"x": boom}, warmup=0)
    assert gc.isenabled()


def test_one_thread_pins_and_restores() -> None:
    before = torch.get_num_threads()
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(KeyError), one_thread():
        raise KeyError("inside")
    assert torch.get_num_threads() == before


@pytest.mark.parametrize(("ratio", "words"), [
    (3.24, "3.2 times faster"),
    (0.5, "2.0 times slower"),
    (1.04, "about as fast"),
    (0.96, "about as fast"),
])
def test_times_phrase(ratio: float, words: str) -> None:
    assert times_phrase(ratio) == words


def test_times_phrase_custom_words_and_digits() -> None:
    assert times_phrase(0.25, "cheaper", "dearer", "as cheap") == "4.0 times dearer"
    assert times_phrase(1.0, "cheaper", "dearer", "as cheap") == "as cheap"
    assert times_phrase(12.345, digits=0) == "12 times faster"


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"runs": {}}, TypeError, "runs must be a non-empty mapping"),
    ({"runs": [lambda: None]}, TypeError, "runs must be a non-empty mapping"),
    ({"runs": {"x": 3}}, TypeError, r"runs\['x'\] must be callable"),
    ({"runs": {"x": lambda: None}, "rounds": 0}, ValueError, "rounds must be at least 1, got 0"),
    ({"runs": {"x": lambda: None}, "inner": 1.5}, TypeError, "inner must be an int"),
    ({"runs": {"x": lambda: None}, "rounds": True}, TypeError, "rounds must be an int, got bool"),
    ({"runs": {"x": lambda: None}, "warmup": -1}, ValueError, "warmup must be at least 0, got -1"),
    ({"runs": {"x": lambda: None}, "clock": "cpu"}, ValueError, "clock must be one of"),
    ({"runs": {"x": lambda: None}, "summary": "mean"}, ValueError, "summary must be one of"),
])
def test_time_in_turns_rejects_bad_input(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        time_in_turns(**kwargs)


@pytest.mark.parametrize(("args", "error", "match"), [
    ((0.0,), ValueError, "ratio must be a finite number > 0"),
    ((float("nan"),), ValueError, "ratio must be finite"),
    ((True,), TypeError, "ratio must be a real number"),
    ((2.0, ""), TypeError, "faster must be a non-empty str"),
])
def test_times_phrase_rejects_bad_input(args: tuple, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        times_phrase(*args)
