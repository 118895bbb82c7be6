"""``attnbook.masks``: causal and padding masks, checked against their definitions and SDPA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnbook.attention import attention
from attnbook.masks import causal_mask, padding_mask


def randn(*shape: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


# --------------------------------------------------------------------------- causal_mask


@pytest.mark.parametrize("L", [1, 2, 5, 8])
def test_causal_mask_square(L):
    mask = causal_mask(L)
    assert mask.dtype == torch.bool
    assert mask.shape == (L, L)
    assert torch.equal(mask, torch.ones(L, L).tril().bool())


@pytest.mark.parametrize(("L", "S"), [(1, 4), (3, 5), (5, 3), (4, 1), (4, 4)])
def test_causal_mask_rectangular(L, S):
    mask = causal_mask(L, S)
    assert mask.dtype == torch.bool
    assert mask.shape == (L, S)
    assert torch.equal(mask, torch.ones(L, S).tril().bool())


def test_causal_mask_definition_elementwise():
    L, S = 4, 6
    mask = causal_mask(L, S)
    for i in range(L):
        for j in range(S):
            assert bool(mask[i, j]) == (j <= i)


def test_causal_mask_device():
    assert causal_mask(3, device="cpu").device == torch.device("cpu")
    assert causal_mask(3, 2, device=torch.device("cpu")).device.type == "cpu"


def test_causal_mask_every_row_has_a_key():
    # The diagonal is included, so no query row is fully masked.
    assert causal_mask(5, 3).any(dim=-1).all()


@pytest.mark.parametrize(("L", "S"), [(5, 5), (3, 6), (6, 3)])
@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
def test_causal_mask_in_attention_matches_sdpa_is_causal(L, S, return_weights):
    gen = torch.Generator().manual_seed(0)
    q, k, v = randn(2, L, 4, gen=gen), randn(2, S, 4, gen=gen), randn(2, S, 3, gen=gen)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out, w = attention(q, k, v, causal_mask(L, S), return_weights=return_weights)
    torch.testing.assert_close(out, expected)
    if return_weights:
        assert (w[..., ~causal_mask(L, S)] == 0).all()


def test_causal_attention_ignores_the_future():
    gen = torch.Generator().manual_seed(1)
    x = randn(1, 6, 4, gen=gen)
    changed = x.clone()
    changed[:, 4:] = randn(1, 2, 4, gen=gen)  # change only the last two tokens
    before, _ = attention(x, x, x, causal_mask(6))
    after, _ = attention(changed, changed, changed, causal_mask(6))
    torch.testing.assert_close(after[:, :4], before[:, :4], atol=0, rtol=0)
    assert not torch.allclose(after[:, 4:], before[:, 4:])


# --------------------------------------------------------------------------- padding_mask


def expected_padding(lengths: list[int], max_len: int) -> torch.Tensor:
    rows = [[j < n for j in range(max_len)] for n in lengths]
    return torch.tensor(rows, dtype=torch.bool).reshape(len(lengths), 1, max_len)


@pytest.mark.parametrize(
    ("lengths", "max_len"),
    [([3, 1, 4], None), ([3, 1, 4], 6), ([2], None), ([0, 2], None), ([0, 0], 3),
     ((5, 5), None), ([1, 2, 3, 4], 4)],
)
def test_padding_mask_from_ints(lengths, max_len):
    mask = padding_mask(lengths, max_len)
    expected_len = max(lengths) if max_len is None else max_len
    assert mask.dtype == torch.bool
    assert mask.shape == (len(lengths), 1, expected_len)
    assert torch.equal(mask, expected_padding(list(lengths), expected_len))
    assert mask.sum(dim=-1).flatten().tolist() == list(lengths)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_padding_mask_from_tensor(dtype):
    lengths = torch.tensor([2, 5, 0], dtype=dtype)
    mask = padding_mask(lengths, 6)
    assert mask.device == lengths.device
    assert torch.equal(mask, expected_padding([2, 5, 0], 6))


def test_padding_mask_empty_batch_with_max_len():
    mask = padding_mask([], max_len=3)
    assert mask.shape == (0, 1, 3)
    assert mask.dtype == torch.bool


@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
def test_padding_mask_in_attention_equals_attention_on_the_real_tokens(return_weights):
    gen = torch.Generator().manual_seed(2)
    lengths = [3, 6, 1]
    q, k, v = randn(3, 4, 5, gen=gen), randn(3, 6, 5, gen=gen), randn(3, 6, 2, gen=gen)
    out, w = attention(q, k, v, padding_mask(lengths), return_weights=return_weights)
    for b, n in enumerate(lengths):
        expected = F.scaled_dot_product_attention(q[b], k[b, :n], v[b, :n])
        torch.testing.assert_close(out[b], expected)
        if return_weights:
            assert (w[b, :, n:] == 0).all()
            torch.testing.assert_close(w[b].sum(-1), torch.ones(4, dtype=torch.float64))


def test_padding_mask_zero_length_sequence_gives_zero_output():
    gen = torch.Generator().manual_seed(3)
    q, k, v = randn(2, 3, 4, gen=gen), randn(2, 5, 4, gen=gen), randn(2, 5, 4, gen=gen)
    for return_weights in (True, False):
        out, _ = attention(q, k, v, padding_mask([0, 5]), return_weights=return_weights)
        assert (out[0] == 0).all()
        assert not torch.isnan(out).any()
        torch.testing.assert_close(out[1], F.scaled_dot_product_attention(q[1], k[1], v[1]))


def test_padding_and_causal_combine_with_and():
    gen = torch.Generator().manual_seed(4)
    x = randn(2, 5, 4, gen=gen)
    mask = padding_mask([3, 5]) & causal_mask(5)  # (2, 5, 5)
    assert mask.shape == (2, 5, 5)
    out, w = attention(x, x, x, mask)
    for b, n in enumerate([3, 5]):
        expected = F.scaled_dot_product_attention(x[b, :n], x[b, :n], x[b, :n], is_causal=True)
        torch.testing.assert_close(out[b, :n], expected)
        assert (w[b][~mask[b]] == 0).all()
