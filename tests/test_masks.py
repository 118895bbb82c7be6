"""``attnbook.masks``: causal and padding masks, checked against their definitions and SDPA."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbook.attention import attention
from attnbook.masks import causal_mask, padding_mask


def randn(*shape: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


# --------------------------------------------------------------------------- causal_mask


@pytest.mark.parametrize(("L", "S", "offset"), [
    (1, None, 0), (5, None, 0), (4, 6, 0), (6, 4, 0), (4, 1, 0),  # query i sees keys 0..i
    (3, 7, 4), (2, 5, 3), (4, 4, -1), (3, 3, 5),  # shifted: keys 0..i + offset
])
def test_causal_mask_is_its_definition(L, S, offset):
    mask = causal_mask(L, S, offset=offset) if offset else causal_mask(L, S)
    S = L if S is None else S
    assert mask.dtype == torch.bool and mask.shape == (L, S)
    assert mask.tolist() == [[j <= i + offset for j in range(S)] for i in range(L)]


def test_causal_mask_with_offset_is_the_last_rows_of_a_longer_one():
    # A cache of S keys and the last L queries: query i stands at position S - L + i.
    L, S = 3, 7
    assert torch.equal(causal_mask(L, S, offset=S - L), causal_mask(S)[S - L:])


def test_causal_mask_device():
    assert causal_mask(3, device="cpu").device == torch.device("cpu")
    assert causal_mask(3, 2, device=torch.device("cpu")).device.type == "cpu"


def test_causal_mask_takes_any_integer_type():
    assert torch.equal(causal_mask(np.int64(4), np.int32(3), offset=np.int8(1)),
                       causal_mask(4, 3, offset=1))


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


# --------------------------------------------------------------------------- bad input

BAD_CALLS = [
    *(pytest.param(lambda L=L: causal_mask(L), TypeError, f"L must be an int, got {kind}",
                   id=f"causal-L-{kind}")
      for L, kind in [(3.0, "float"), ("3", "str"), (torch.tensor(3), "Tensor"),
                      (True, "bool"), (None, "NoneType")]),
    pytest.param(lambda: causal_mask(3, 2.5), TypeError, "S must be an int, got float",
                 id="causal-S-float"),
    pytest.param(lambda: causal_mask(0), ValueError, "L must be at least 1, got 0",
                 id="causal-L-zero"),
    pytest.param(lambda: causal_mask(-2), ValueError, "L must be at least 1, got -2",
                 id="causal-L-negative"),
    pytest.param(lambda: causal_mask(3, 0), ValueError, "S must be at least 1, got 0",
                 id="causal-S-zero"),
    pytest.param(lambda: causal_mask(3, offset=1.0), TypeError,
                 "offset must be an int, got float", id="causal-offset-float"),
    pytest.param(lambda: padding_mask([3, -1]), ValueError,
                 "lengths must be non-negative, got -1 in [3, -1]", id="padding-negative"),
    pytest.param(lambda: padding_mask(torch.tensor([-2, 4])), ValueError,
                 "lengths must be non-negative, got -2", id="padding-negative-tensor"),
    pytest.param(lambda: padding_mask([2, 5, 7], max_len=4), ValueError,
                 "lengths [5, 7] exceed max_len=4", id="padding-beyond-max-len"),
    pytest.param(lambda: padding_mask([1, 2.5]), TypeError,
                 "lengths must hold ints, got float (2.5)", id="padding-float"),
    pytest.param(lambda: padding_mask(torch.tensor([1.0, 2.0])), TypeError,
                 "lengths must hold integers, got a tensor of dtype torch.float32",
                 id="padding-float-tensor"),
    pytest.param(lambda: padding_mask(torch.tensor([[1], [2]])), ValueError,
                 "lengths must be one-dimensional (B,), got shape (2, 1)", id="padding-2d"),
    *(pytest.param(lambda lengths=lengths: padding_mask(lengths), TypeError,
                   "lengths must be a sequence of ints or a 1-D tensor",
                   id=f"padding-lengths-{type(lengths).__name__}")
      for lengths in (3, "34", None)),
    pytest.param(lambda: padding_mask([]), ValueError, "lengths is empty: pass max_len",
                 id="padding-empty"),
    pytest.param(lambda: padding_mask([1, 2], max_len=4.0), TypeError,
                 "max_len must be an int, got float", id="padding-max-len-float"),
    pytest.param(lambda: padding_mask([], max_len=-1), ValueError,
                 "max_len must be at least 0, got -1", id="padding-max-len-negative"),
]


@pytest.mark.parametrize(("call", "error", "message"), BAD_CALLS)
def test_bad_input_is_refused_naming_the_argument(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()
