"""Tests of exercise scaling-ex2. Run from the repository root:
`.venv/bin/python -m pytest exercises/scaling`."""

import torch

from attnbook.checks import check_stable_softmax

from .solution import my_softmax


def test_a_row_by_hand():
    weights = my_softmax(torch.tensor([0.0, 0.0, 0.0, 0.0]))
    assert torch.allclose(weights, torch.full((4,), 0.25)), (
        f"four equal scores must give four equal weights of 0.25; got {weights.tolist()}"
    )


def test_huge_scores_stay_finite():
    scores = torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, -1001.0, -2000.0]])
    weights = my_softmax(scores)
    assert torch.isfinite(weights).all(), (
        f"exp(1000) overflows and exp(-1000) underflows: subtract each row's maximum first. "
        f"Got {weights.tolist()}"
    )
    assert torch.allclose(weights.sum(dim=-1), torch.ones(2)), (
        f"every row must sum to 1; got row sums {weights.sum(dim=-1).tolist()}"
    )


def test_against_the_package():
    check_stable_softmax(my_softmax)
