"""Tests of exercise whisper-ex1. Run from the repository root:
`.venv/bin/python -m pytest exercises/whisper`."""

import numpy as np

from attnbook.checks import check_dtw

from .solution import my_dtw


def test_my_dtw_by_hand():
    got = [tuple(int(x) for x in pair) for pair in my_dtw(np.array([[0.0, 5.0, 5.0],
                                                                     [5.0, 0.0, 0.0]]))]
    assert got == [(0, 0), (1, 1), (1, 2)], (
        f"from (0, 0), one diagonal step to (1, 1) and one step right to (1, 2) cost 0, "
        f"and every other path passes a 5; got {got}"
    )


def test_my_dtw_single_row():
    got = [tuple(int(x) for x in pair) for pair in my_dtw(np.ones((1, 4)))]
    assert got == [(0, 0), (0, 1), (0, 2), (0, 3)], (
        f"a single row leaves one path: every cell, left to right; got {got}"
    )


def test_my_dtw_against_the_package():
    check_dtw(my_dtw)
