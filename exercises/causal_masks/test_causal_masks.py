"""Tests of exercise causal-masks-ex3. Run from the repository root:
`.venv/bin/python -m pytest exercises/causal_masks`."""

import torch

from attnbook.checks import check_masked_softmax
from attnbook.masks import causal_mask

from .solution import my_masked_softmax


def test_causal_weights_are_exactly_zero_above_the_diagonal():
    scores = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    weights = my_masked_softmax(scores, causal_mask(4))
    above = weights.triu(diagonal=1)
    assert (above == 0).all(), (
        f"a query must give exactly 0 to later keys; got {above.tolist()} above the diagonal"
    )
    assert torch.allclose(weights.sum(dim=-1), torch.ones(4)), (
        f"each row's allowed weights must sum to 1; got row sums {weights.sum(dim=-1).tolist()}"
    )


def test_a_row_with_no_allowed_key_is_all_zeros():
    mask = torch.tensor([[True, False, True], [False, False, False]])
    weights = my_masked_softmax(torch.zeros(2, 3), mask)
    assert not weights.isnan().any(), f"no NaN allowed; got {weights.tolist()}"
    assert (weights[1] == 0).all(), (
        f"row 1 allows no key, so its weights must all be 0 (not uniform, not NaN); got "
        f"{weights[1].tolist()}"
    )


def test_against_the_package():
    check_masked_softmax(my_masked_softmax)
