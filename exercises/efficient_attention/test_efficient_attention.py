"""Tests of exercise efficient-attention-ex3. Run from the repository root:
`.venv/bin/python -m pytest exercises/efficient_attention`."""

import math

from attnbook.checks import check_online_normalizer

from .solution import online_normalizer


def test_three_scores_by_hand():
    m, row_sum = online_normalizer(iter([0.0, math.log(3.0), 0.0]))
    assert math.isclose(m, math.log(3.0)), f"m is the largest score, ln 3; got {m}"
    assert math.isclose(row_sum, 5 / 3), (
        f"row_sum = e^(0 - ln 3) + e^0 + e^(0 - ln 3) = 1/3 + 1 + 1/3 = 5/3; got {row_sum}"
    )


def test_scores_near_1000_stay_finite():
    scores = [1000.0, 1001.0, 999.0]
    m, row_sum = online_normalizer(iter(scores))
    assert m == 1001.0, f"m is the largest score, 1001; got {m}"
    expected = math.exp(-1.0) + 1.0 + math.exp(-2.0)
    assert math.isclose(row_sum, expected), (
        f"row_sum must be e^(1000 - 1001) + e^0 + e^(999 - 1001) = {expected}: every term "
        f"relative to the final maximum (rescale the sum so far when the maximum rises); "
        f"got {row_sum}"
    )


def test_a_row_that_begins_masked():
    m, row_sum = online_normalizer(iter([float("-inf"), float("-inf"), 0.0, math.log(3.0)]))
    assert math.isclose(m, math.log(3.0)) and math.isclose(row_sum, 4 / 3), (
        f"the masked keys add exp(-inf) = 0, so m = ln 3 and row_sum = 1/3 + 1 = 4/3; got "
        f"({m}, {row_sum}). NaN? While m is -inf, shift by 0 rather than by m_new."
    )
    m, row_sum = online_normalizer(iter([float("-inf")] * 3))
    assert (m, row_sum) == (float("-inf"), 0.0), (
        f"every key masked: m = -inf and row_sum = 0.0; got ({m}, {row_sum})"
    )


def test_against_the_package():
    check_online_normalizer(online_normalizer)
