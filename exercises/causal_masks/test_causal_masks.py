"""Tests of exercises causal-masks-ex3 and causal-masks-ex5. Run from the repository root:
`.venv/bin/python -m pytest exercises/causal_masks`."""

import torch

from attnbook.checks import check_causal_mask, check_masked_softmax
from attnbook.masks import causal_mask

from .solution import my_causal_mask, my_masked_softmax


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


def test_masked_softmax_against_the_package():
    check_masked_softmax(my_masked_softmax)


def test_four_tokens_see_themselves_and_the_past():
    mask = my_causal_mask(4)
    expected = [[True, False, False, False], [True, True, False, False],
                [True, True, True, False], [True, True, True, True]]
    assert isinstance(mask, torch.Tensor) and mask.dtype == torch.bool, (
        f"the mask is a boolean tensor; got {type(mask).__name__} "
        f"{getattr(mask, 'dtype', '')}"
    )
    assert mask.tolist() == expected, (
        f"query i may see keys 0 .. i, itself included: expected {expected}, got "
        f"{mask.int().tolist()}"
    )


def test_one_new_token_sees_every_cached_key():
    mask = my_causal_mask(1, 5)
    assert mask.tolist() == [[True] * 5], (
        f"one new token after 4 cached ones is the last token: it may see all 5 keys; got "
        f"{mask.int().tolist()}"
    )


def test_causal_mask_against_the_package():
    check_causal_mask(my_causal_mask)
