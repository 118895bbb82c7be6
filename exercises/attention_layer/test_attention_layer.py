"""Tests of exercises attention-layer-ex1 and attention-layer-ex2. Run from the repository
root: `.venv/bin/python -m pytest exercises/attention_layer`."""

import torch

from attnbook.checks import check_padded_causal_mask, check_peeks_ahead
from attnbook.layers import MultiHeadAttention

from .solution import padded_causal_mask, peeks_ahead


def test_two_padded_sequences_by_hand():
    mask = padded_causal_mask(torch.tensor([3, 1]), 3)
    assert isinstance(mask, torch.Tensor) and mask.dtype == torch.bool, (
        f"the mask is a boolean tensor; got {type(mask).__name__} {getattr(mask, 'dtype', '')}"
    )
    assert mask.shape == (2, 1, 3, 3), (
        f"expected shape (B, 1, L, L) = (2, 1, 3, 3), got {tuple(mask.shape)}"
    )
    full = [[True, False, False], [True, True, False], [True, True, True]]
    assert mask[0, 0].tolist() == full, (
        f"sequence 0 has 3 real tokens: the causal mask, query i sees keys 0 .. i; expected "
        f"{full}, got {mask[0, 0].int().tolist()}"
    )
    only_key_0 = [[True, False, False]] * 3
    assert mask[1, 0].tolist() == only_key_0, (
        f"sequence 1 has 1 real token: keys 1 and 2 are pads, so every query, padded ones "
        f"included, sees key 0 only; expected {only_key_0}, got {mask[1, 0].int().tolist()}"
    )


def test_the_mask_broadcasts_over_heads_and_leaves_no_row_empty():
    lengths, L, heads = torch.tensor([5, 2]), 5, 3
    scores = torch.randn(2, heads, L, L, generator=torch.Generator().manual_seed(0))
    mask = padded_causal_mask(lengths, L)
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)  # (B, h, L, L)
    assert not weights.isnan().any(), (
        "a row of weights is NaN: it allows no key at all. Key 0 is real and at or before "
        "every query, so every row must allow it"
    )
    assert (weights[1, :, :, 2:] == 0).all(), (
        f"sequence 1 has 2 real tokens: keys 2 .. 4 are pads and get weight exactly 0 in "
        f"every head; got {weights[1, 0, :, 2:].tolist()} in head 0"
    )


def test_padded_causal_mask_against_the_package():
    check_padded_causal_mask(padded_causal_mask)


def _causal_layer():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return MultiHeadAttention(8, 2, causal=True).eval()


def test_a_causal_layer_does_not_peek():
    layer = _causal_layer()
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))
    before = x.clone()
    found = peeks_ahead(layer, x)
    assert torch.equal(x, before), "peeks_ahead changed x in place: work on `x.clone()`"
    assert found is None, (
        f"a causal layer never lets a later token change an earlier output, so the answer "
        f"is None; got {found!r}"
    )


def test_a_layer_fed_its_input_one_token_early_peeks_at_position_1():
    layer = _causal_layer()

    def shifted(x):  # position t sees token t + 1
        return layer(x.roll(-1, dims=1))

    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(2))
    found = peeks_ahead(shifted, x)
    assert found == 1, (
        f"the output at position 0 of the shifted layer depends on token 1, so the answer is "
        f"1; got {found!r}"
    )


def test_peeks_ahead_on_layers_with_known_leaks():
    check_peeks_ahead(peeks_ahead)
