"""``attnbook.attention`` against PyTorch's SDPA as the oracle, plus its properties.

Every expected value comes from an independent computation: ``F.scaled_dot_product_attention``
in float64 (weights from SDPA with the identity as values) or a formula written out here.
"""

from __future__ import annotations

import math
import re
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbook.attention import AttentionOutput, attention, masked_softmax, raw_self_attention

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]

#: (atol, rtol) of a result in this dtype against the float64 oracle.
TOL = {
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (4e-2, 4e-2),
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-10, 1e-10),
}

#: name -> (q shape, k shape, v shape)
SHAPES = {
    "no_batch": ((5, 4), (5, 4), (5, 4)),
    "batched": ((2, 5, 4), (2, 5, 4), (2, 5, 4)),
    "two_batch_dims": ((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4)),
    "L_ne_S": ((2, 3, 4), (2, 6, 4), (2, 6, 4)),
    "Ev_ne_E": ((2, 5, 4), (2, 5, 4), (2, 5, 7)),
    "q_unbatched_kv_batched": ((5, 4), (2, 6, 4), (2, 6, 3)),
    "mixed_broadcast": ((3, 1, 5, 4), (1, 2, 6, 4), (6, 2)),
}

MASK_KINDS = ["none", "causal", "random", "padding", "fully_masked_row"]


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, gen: torch.Generator, dtype: torch.dtype = torch.float64,
          requires_grad: bool = False) -> torch.Tensor:
    """Seeded normal values drawn in float64, then rounded to ``dtype``."""
    t = torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
    return t.requires_grad_(requires_grad)


def batch_of(*shapes: tuple[int, ...]) -> torch.Size:
    return torch.broadcast_shapes(*(s[:-2] for s in shapes))


def make_mask(kind: str, batch: torch.Size, L: int, S: int, gen: torch.Generator
              ) -> torch.Tensor | None:
    """A boolean mask (True = may attend) of the given kind, built without the package."""
    if kind == "none":
        return None
    if kind == "causal":
        return torch.ones(L, S).tril().bool()  # (L, S)
    if kind == "padding":
        lead = tuple(batch) or (1,)
        lengths = torch.randint(1, S + 1, lead, generator=gen)
        lengths.view(-1)[0] = max(1, S - 2)  # at least one sequence really is padded
        return torch.arange(S) < lengths[..., None, None]  # (*batch, 1, S)
    mask = torch.rand(*batch, L, S, generator=gen) < 0.6  # (*batch, L, S)
    # Every row keeps at least one key...
    mask[..., torch.arange(L), torch.arange(L) % S] = True
    if kind == "fully_masked_row":
        # ...except row 1, which keeps none; row 0 keeps every key.
        mask[..., 1, :] = False
        mask[..., 0, :] = True
    return mask


def oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Output and weights from SDPA in float64; rows with no allowed key are zeros."""
    q, k, v = (t.detach().double() for t in (q, k, v))
    shapes = [q.shape, k.shape, v.shape] + ([mask.shape] if mask is not None else [])
    batch = batch_of(*shapes)
    q, k, v = (t.expand(*batch, *t.shape[-2:]) for t in (q, k, v))
    S = k.shape[-2]
    eye = torch.eye(S, dtype=torch.float64).expand(*batch, S, S)
    # SDPA with the identity as values returns the attention weights themselves.
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask, scale=scale)
    if mask is not None:
        has_key = mask.any(dim=-1, keepdim=True)
        output = torch.where(has_key, output, 0.0)
        weights = torch.where(has_key, weights, 0.0)
    return output, weights


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(actual.double(), expected.double(), atol=atol, rtol=rtol)


def manual_softmax_attention(q, k, v, mask=None, scale=1.0):
    """``softmax(scale * q k^T) v`` written out with exp and sums (float64)."""
    scores = scale * torch.einsum("...le,...se->...ls", q.double(), k.double())
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    scores = scores - scores.amax(dim=-1, keepdim=True)
    e = scores.exp()
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights @ v.double(), weights


# --------------------------------------------------------------------------- oracle


@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("shape_name", list(SHAPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_sdpa(dtype, shape_name, mask_kind, return_weights):
    gen = generator(zlib.crc32(f"{shape_name}/{mask_kind}".encode()))
    q_shape, k_shape, v_shape = SHAPES[shape_name]
    q, k, v = (randn(*s, gen=gen, dtype=dtype) for s in (q_shape, k_shape, v_shape))
    L, S = q_shape[-2], k_shape[-2]
    mask = make_mask(mask_kind, batch_of(q_shape, k_shape, v_shape), L, S, gen)

    result = attention(q, k, v, mask, return_weights=return_weights)
    expected_out, expected_w = oracle(q, k, v, mask)

    assert isinstance(result, AttentionOutput)
    assert result.output.dtype == dtype
    assert result.output.shape == expected_out.shape
    assert torch.isfinite(result.output).all()
    assert_close(result.output, expected_out, dtype)
    if return_weights:
        assert result.weights is not None
        assert result.weights.dtype == dtype
        assert result.weights.shape == expected_w.shape
        assert_close(result.weights, expected_w, dtype)
    else:
        assert result.weights is None
    if mask_kind == "fully_masked_row":
        assert (result.output[..., 1, :] == 0).all()
        if return_weights:
            assert (result.weights[..., 1, :] == 0).all()


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_fused_path_agrees_with_weights_path(shape_name, mask_kind):
    gen = generator(7)
    q_shape, k_shape, v_shape = SHAPES[shape_name]
    q, k, v = (randn(*s, gen=gen) for s in (q_shape, k_shape, v_shape))
    mask = make_mask(mask_kind, batch_of(q_shape, k_shape, v_shape), q_shape[-2],
                     k_shape[-2], gen)
    with_weights = attention(q, k, v, mask, return_weights=True)
    fused = attention(q, k, v, mask, return_weights=False)
    assert fused.weights is None
    torch.testing.assert_close(fused.output, with_weights.output, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mask_broadcasts_over_more_batch_dims_than_q(dtype):
    gen = generator(3)
    q, k, v = randn(5, 4, gen=gen, dtype=dtype), randn(6, 4, gen=gen, dtype=dtype), \
        randn(6, 3, gen=gen, dtype=dtype)
    mask = make_mask("fully_masked_row", torch.Size([2, 3]), 5, 6, gen)  # (2, 3, 5, 6)
    expected_out, expected_w = oracle(q, k, v, mask)
    for return_weights in (True, False):
        out, w = attention(q, k, v, mask, return_weights=return_weights)
        assert out.shape == (2, 3, 5, 3)
        assert_close(out, expected_out, dtype)
        if return_weights:
            assert_close(w, expected_w, dtype)


@pytest.mark.parametrize("mask_shape", [(5, 1), (1, 6), (1, 1), (2, 1, 6), (2, 5, 1)])
@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
def test_masks_with_size_one_dims_broadcast(mask_shape, return_weights):
    gen = generator(11)
    q, k, v = randn(2, 5, 4, gen=gen), randn(2, 6, 4, gen=gen), randn(2, 6, 3, gen=gen)
    mask = torch.rand(*mask_shape, generator=gen) < 0.5
    mask.view(-1)[-1] = False  # a (possibly broadcast) forbidden key or row...
    mask.view(-1)[0] = True  # ...and an allowed one
    out, w = attention(q, k, v, mask, return_weights=return_weights)
    expected_out, expected_w = oracle(q, k, v, mask)
    torch.testing.assert_close(out, expected_out)
    if return_weights:
        torch.testing.assert_close(w, expected_w)


# --------------------------------------------------------------------------- scale


def test_default_scale_is_one_over_sqrt_e():
    gen = generator(1)
    q, k, v = randn(2, 5, 9, gen=gen), randn(2, 6, 9, gen=gen), randn(2, 6, 3, gen=gen)
    expected_out, expected_w = manual_softmax_attention(q, k, v, scale=1 / 3)
    out, w = attention(q, k, v)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(w, expected_w)


@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
def test_scale_one_is_unscaled_and_differs_from_default(return_weights):
    gen = generator(2)
    q, k, v = randn(2, 5, 4, gen=gen), randn(2, 6, 4, gen=gen), randn(2, 6, 3, gen=gen)
    expected_out, expected_w = manual_softmax_attention(q, k, v, scale=1.0)
    unscaled = attention(q, k, v, scale=1.0, return_weights=return_weights)
    default = attention(q, k, v, return_weights=return_weights)
    torch.testing.assert_close(unscaled.output, expected_out)
    if return_weights:
        torch.testing.assert_close(unscaled.weights, expected_w)
        assert not torch.allclose(unscaled.weights, default.weights, atol=1e-3)
    assert not torch.allclose(unscaled.output, default.output, atol=1e-3)


@pytest.mark.parametrize("scale", [0.5, 2, np.float32(0.25), np.float64(3.0)],
                         ids=["float", "int", "np.float32", "np.float64"])
@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
def test_custom_scale_matches_sdpa(scale, return_weights):
    gen = generator(4)
    q, k, v = randn(2, 5, 4, gen=gen), randn(2, 6, 4, gen=gen), randn(2, 6, 3, gen=gen)
    mask = make_mask("random", torch.Size([2]), 5, 6, gen)
    expected_out, expected_w = oracle(q, k, v, mask, scale=float(scale))
    out, w = attention(q, k, v, mask, scale=scale, return_weights=return_weights)
    torch.testing.assert_close(out, expected_out)
    if return_weights:
        torch.testing.assert_close(w, expected_w)


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rows_sum_to_one_or_zero(dtype, mask_kind):
    gen = generator(8)
    q, k, v = randn(2, 3, 5, 4, gen=gen, dtype=dtype), randn(2, 3, 6, 4, gen=gen, dtype=dtype), \
        randn(2, 3, 6, 4, gen=gen, dtype=dtype)
    mask = make_mask(mask_kind, torch.Size([2, 3]), 5, 6, gen)
    _, w = attention(q, k, v, mask)
    sums = w.double().sum(dim=-1)
    expected = torch.ones_like(sums) if mask is None else \
        mask.any(dim=-1).double().expand_as(sums)
    atol = TOL[dtype][0] * 6
    torch.testing.assert_close(sums, expected, atol=atol, rtol=0)
    assert (w >= 0).all()


@pytest.mark.parametrize("mask_kind", ["causal", "random", "padding", "fully_masked_row"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_weights_are_exactly_zero(dtype, mask_kind):
    gen = generator(9)
    q, k, v = randn(2, 5, 4, gen=gen, dtype=dtype), randn(2, 6, 4, gen=gen, dtype=dtype), \
        randn(2, 6, 4, gen=gen, dtype=dtype)
    q = q * 2  # sharp rows: near-zero allowed weights must not be confused with masked ones
    mask = make_mask(mask_kind, torch.Size([2]), 5, 6, gen)
    _, w = attention(q, k, v, mask)
    forbidden = ~mask.expand_as(w)
    assert forbidden.any()
    assert (w[forbidden] == 0).all()
    if dtype in (torch.float32, torch.float64):
        assert (w[~forbidden] > 0).all()


@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fully_masked_row_gives_zeros_not_nan(dtype, return_weights):
    gen = generator(10)
    q, k, v = randn(2, 4, 3, gen=gen, dtype=dtype), randn(2, 5, 3, gen=gen, dtype=dtype), \
        randn(2, 5, 3, gen=gen, dtype=dtype)
    mask = torch.ones(2, 4, 5, dtype=torch.bool)
    mask[0, 2] = False
    mask[1] = False  # a whole batch element sees nothing
    out, w = attention(q, k, v, mask, return_weights=return_weights)
    assert not torch.isnan(out).any()
    assert (out[0, 2] == 0).all() and (out[1] == 0).all()
    assert (out[0, [0, 1, 3]] != 0).any()
    if return_weights:
        assert (w[0, 2] == 0).all() and (w[1] == 0).all()


def test_permutation_equivariance_self_attention():
    gen = generator(12)
    x = randn(2, 6, 4, gen=gen)
    perm = torch.randperm(6, generator=gen)
    for return_weights in (True, False):
        out, w = attention(x, x, x, return_weights=return_weights)
        xp = x[:, perm]
        out_p, w_p = attention(xp, xp, xp, return_weights=return_weights)
        torch.testing.assert_close(out_p, out[:, perm])
        if return_weights:
            torch.testing.assert_close(w_p, w[:, perm][:, :, perm])


def test_permuting_keys_and_values_together_leaves_output_unchanged():
    gen = generator(13)
    q, k, v = randn(2, 5, 4, gen=gen), randn(2, 6, 4, gen=gen), randn(2, 6, 3, gen=gen)
    perm = torch.randperm(6, generator=gen)
    out, w = attention(q, k, v)
    out_p, w_p = attention(q, k[:, perm], v[:, perm])
    torch.testing.assert_close(out_p, out)
    torch.testing.assert_close(w_p, w[..., perm])


def test_attention_output_is_a_named_tuple():
    gen = generator(14)
    q = randn(3, 2, gen=gen)
    result = attention(q, q, q)
    out, w = result
    assert result._fields == ("output", "weights")
    assert result.output is out and result.weights is w


def test_inputs_are_not_modified():
    gen = generator(15)
    q, k, v = randn(2, 5, 4, gen=gen), randn(2, 6, 4, gen=gen), randn(2, 6, 3, gen=gen)
    mask = make_mask("fully_masked_row", torch.Size([2]), 5, 6, gen)
    copies = [t.clone() for t in (q, k, v, mask)]
    attention(q, k, v, mask)
    attention(q, k, v, mask, return_weights=False)
    for original, copy in zip((q, k, v, mask), copies, strict=True):
        assert torch.equal(original, copy)


# --------------------------------------------------------------------------- gradients


def _grads(fn, tensors, cotangent):
    tensors = [t.detach().clone().requires_grad_(True) for t in tensors]
    out = fn(*tensors)
    (out * cotangent).sum().backward()
    return [t.grad for t in tensors]


@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "random", "padding"])
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_gradients_match_sdpa(shape_name, mask_kind, return_weights):
    gen = generator(16)
    q_shape, k_shape, v_shape = SHAPES[shape_name]
    q, k, v = (randn(*s, gen=gen) for s in (q_shape, k_shape, v_shape))
    batch = batch_of(q_shape, k_shape, v_shape)
    mask = make_mask(mask_kind, batch, q_shape[-2], k_shape[-2], gen)
    out_shape = batch_of(q_shape, k_shape, v_shape,
                         *([mask.shape] if mask is not None else [])) + \
        (q_shape[-2], v_shape[-1])
    cotangent = torch.randn(out_shape, generator=gen, dtype=torch.float64)

    def ours(q, k, v):
        return attention(q, k, v, mask, return_weights=return_weights).output

    def sdpa(q, k, v):
        b = out_shape[:-2]
        q, k, v = (t.expand(*b, *t.shape[-2:]) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    for got, expected in zip(_grads(ours, (q, k, v), cotangent),
                             _grads(sdpa, (q, k, v), cotangent), strict=True):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
def test_gradients_with_fully_masked_row_match_sdpa_on_the_other_rows(return_weights):
    gen = generator(17)
    q, k, v = randn(2, 5, 4, gen=gen), randn(2, 6, 4, gen=gen), randn(2, 6, 3, gen=gen)
    mask = make_mask("random", torch.Size([]), 5, 6, gen)  # (5, 6)
    mask[2] = False
    rows = [0, 1, 3, 4]
    cotangent = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)

    def ours(q, k, v):
        return attention(q, k, v, mask, return_weights=return_weights).output

    def sdpa_other_rows(q, k, v):
        # Row 2 contributes a constant zero, so only the other rows carry gradient.
        return F.scaled_dot_product_attention(q[:, rows], k, v, attn_mask=mask[rows])

    gq, gk, gv = _grads(ours, (q, k, v), cotangent)
    eq, ek, ev = _grads(sdpa_other_rows, (q, k, v), cotangent[:, rows])
    assert (gq[:, 2] == 0).all()
    torch.testing.assert_close(gq[:, rows], eq[:, rows])
    torch.testing.assert_close(gk, ek)
    torch.testing.assert_close(gv, ev)


@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradients_finite_with_fully_masked_row(dtype, return_weights):
    gen = generator(18)
    q, k, v = (randn(2, 4, 3, gen=gen, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = torch.ones(4, 4).tril().bool()
    mask[1] = False
    mask_b = mask.expand(2, 4, 4).clone()
    mask_b[1] = False  # every row of the second batch element is fully masked
    out, _ = attention(q, k, v, mask_b, return_weights=return_weights)
    out.sum().backward()
    for t in (q, k, v):
        assert t.grad is not None
        assert torch.isfinite(t.grad).all()
    assert (q.grad[1] == 0).all() and (k.grad[1] == 0).all() and (v.grad[1] == 0).all()
    assert (q.grad[0, 1] == 0).all()


@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
@pytest.mark.parametrize("mask_kind", ["none", "fully_masked_row"])
def test_gradcheck(mask_kind, return_weights):
    gen = generator(19)
    q, k, v = (randn(*s, gen=gen, requires_grad=True) for s in ((3, 2), (4, 2), (4, 3)))
    mask = make_mask(mask_kind, torch.Size([]), 3, 4, gen)

    def fn(q, k, v):
        return attention(q, k, v, mask, return_weights=return_weights).output

    assert torch.autograd.gradcheck(fn, (q, k, v), fast_mode=True)


def test_gradcheck_through_weights():
    gen = generator(20)
    q, k = randn(3, 2, gen=gen, requires_grad=True), randn(4, 2, gen=gen, requires_grad=True)
    v = randn(4, 2, gen=gen)
    mask = make_mask("fully_masked_row", torch.Size([]), 3, 4, gen)
    assert torch.autograd.gradcheck(lambda q, k: attention(q, k, v, mask).weights, (q, k),
                                      fast_mode=True)


# --------------------------------------------------------------------------- raw_self_attention


@pytest.mark.parametrize("shape", [(5, 3), (2, 5, 3), (2, 2, 4, 3)])
def test_raw_self_attention_is_softmax_x_xT_x(shape):
    gen = generator(21)
    x = randn(*shape, gen=gen)
    expected_out, expected_w = manual_softmax_attention(x, x, x, scale=1.0)
    out, w = raw_self_attention(x)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(w, expected_w)
    assert w.shape == (*shape[:-1], shape[-2])
    # Unscaled: not the same as the default-scaled attention.
    assert not torch.allclose(out, attention(x, x, x).output, atol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_raw_self_attention_dtypes(dtype):
    gen = generator(22)
    x = randn(2, 4, 3, gen=gen, dtype=dtype)
    out, w = raw_self_attention(x)
    assert out.dtype == dtype and w.dtype == dtype
    expected_out, _ = oracle(x, x, x, None, scale=1.0)
    assert_close(out, expected_out, dtype)


def test_raw_self_attention_permutation_equivariant():
    gen = generator(23)
    x = randn(6, 3, gen=gen)
    perm = torch.randperm(6, generator=gen)
    torch.testing.assert_close(raw_self_attention(x[perm]).output,
                               raw_self_attention(x).output[perm])


# --------------------------------------------------------------------------- masked_softmax


def test_masked_softmax_without_mask_is_softmax():
    gen = generator(24)
    scores = randn(2, 3, 5, gen=gen)
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    torch.testing.assert_close(masked_softmax(scores), e / e.sum(-1, keepdim=True))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_softmax_with_mask(dtype):
    gen = generator(25)
    scores = randn(2, 4, 5, gen=gen, dtype=dtype)
    mask = torch.rand(2, 4, 5, generator=gen) < 0.5
    mask[..., 0] = True
    mask[1, 3] = False  # a fully masked row
    e = scores.double().exp() * mask
    sums = e.sum(-1, keepdim=True)
    expected = torch.where(sums > 0, e / sums.clamp_min(1e-300), 0.0)
    got = masked_softmax(scores, mask)
    assert got.dtype == dtype
    assert_close(got, expected, dtype)
    assert (got[~mask] == 0).all()
    assert (got[1, 3] == 0).all()


def test_masked_softmax_broadcast_mask_and_zero_gradient_on_empty_row():
    gen = generator(26)
    scores = randn(2, 3, 4, gen=gen, requires_grad=True)
    mask = torch.tensor([[True, False, True, False],
                         [False, False, False, False],
                         [True, True, True, True]])  # (3, 4), broadcast over the batch
    w = masked_softmax(scores, mask)
    assert w.shape == (2, 3, 4)
    (w * torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert (scores.grad[:, 1] == 0).all()
    assert (scores.grad[:, 0, [1, 3]] == 0).all()
    torch.testing.assert_close(w.sum(-1), mask.any(-1).double().expand(2, 3))


def test_masked_softmax_leaves_scores_unchanged():
    gen = generator(27)
    scores = randn(2, 3, 4, gen=gen)
    before = scores.clone()
    mask = torch.rand(2, 3, 4, generator=gen) < 0.5
    mask[0, 1] = False
    masked_softmax(scores, mask)
    masked_softmax(scores, mask[:, :1])
    assert torch.equal(scores, before)


# --------------------------------------------------------------------------- bad input


def qkv(L: int = 5, S: int = 6, E: int = 4, Ev: int = 3, batch: tuple[int, ...] = (2,)):
    gen = generator(0)
    return (torch.randn(*batch, L, E, generator=gen), torch.randn(*batch, S, E, generator=gen),
            torch.randn(*batch, S, Ev, generator=gen))


def with_qkv(change: dict, **kwargs) -> AttentionOutput:
    """``attention`` on valid q, k, v (shapes (2, 5, 4), (2, 6, 4), (2, 6, 3)) with some
    replaced."""
    tensors = dict(zip("qkv", qkv(), strict=True))
    return attention(**{**tensors, **change}, **kwargs)


CAUSAL = torch.ones(5, 6).tril()  # a 0/1 float mask, built without the package
BAD_CALLS = [
    # Arguments that are not tensors.
    ({"q": [[1.0, 2.0, 3.0, 4.0]]}, {}, TypeError, "q must be a torch.Tensor, got list"),
    ({"k": np.ones((2, 6, 4))}, {}, TypeError, "k must be a torch.Tensor, got ndarray"),
    ({"v": None}, {}, TypeError, "v must be a torch.Tensor, got NoneType"),
    ({}, {"mask": [[True] * 6] * 5}, TypeError, "mask must be a torch.Tensor, got list"),
    # Masks: not boolean, or not broadcastable.
    *(({}, {"mask": CAUSAL.to(dtype)}, TypeError, "`mask.bool()`")
      for dtype in (torch.float32, torch.int64, torch.uint8)),
    ({}, {"mask": torch.zeros(5, 6).masked_fill(CAUSAL == 0, -math.inf)}, TypeError,
     "an additive mask of 0 and -inf converts with `mask == 0`"),
    ({}, {"mask": torch.ones(3, 6, dtype=torch.bool)}, ValueError,
     "mask of shape (3, 6) does not broadcast to (..., L, S) = (..., 5, 6)"),
    ({}, {"mask": torch.ones(2, 5, 5, dtype=torch.bool), "return_weights": False},
     ValueError, "mask of shape (2, 5, 5) does not broadcast"),
    ({}, {"mask": torch.ones(3, 5, 6, dtype=torch.bool)}, ValueError,
     "the batch dimensions of q, k, v and mask do not broadcast: got (2,), (2,), (2,), (3,)"),
    # Shapes of q, k and v.
    ({"k": torch.ones(2, 6, 7)}, {}, ValueError,
     "q and k must have the same feature size E: q has shape (2, 5, 4) (E=4), k has shape "
     "(2, 6, 7) (E=7)"),
    ({"v": torch.ones(2, 4, 3)}, {}, ValueError,
     "k and v must have the same length S: k has shape (2, 6, 4) (S=6), v has shape "
     "(2, 4, 3) (S=4)"),
    ({"k": torch.ones(3, 6, 4), "v": torch.ones(3, 6, 3)}, {}, ValueError,
     "the batch dimensions of q, k, v do not broadcast: got (2,), (3,), (3,)"),
    ({"q": torch.ones(4)}, {}, ValueError, "q must have shape (..., L, E), got shape (4,)"),
    ({"k": torch.ones(2, 0, 4), "v": torch.ones(2, 0, 3)}, {}, ValueError,
     "k must hold at least one key"),
    # Dtypes.
    ({"k": qkv()[1].double()}, {}, TypeError,
     "q, k and v must share one dtype, got torch.float32, torch.float64 and torch.float32"),
    *(({name: qkv()["qkv".index(name)].to(dtype)}, {}, TypeError,
       f"{name} must be a floating-point tensor, got dtype {dtype}")
      for name in "qkv" for dtype in (torch.int64, torch.bool, torch.complex64)),
    # The scale and return_weights.
    *(({}, {"scale": scale}, TypeError,
       f"scale must be a real number or None, got {type(scale).__name__}")
      for scale in ("0.5", True, torch.tensor(0.5), [0.5], 1j)),
    *(({}, {"scale": scale}, ValueError, "scale must be finite")
      for scale in (math.inf, -math.inf, math.nan)),
    ({}, {"return_weights": "no"}, TypeError, "return_weights must be a bool, got str"),
]


@pytest.mark.parametrize(("change", "kwargs", "error", "message"), BAD_CALLS)
def test_bad_input_is_refused_naming_the_argument(change, kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        with_qkv(change, **kwargs)


@pytest.mark.parametrize(("x", "error", "message"), [
    (np.ones((3, 2)), TypeError, "x must be a torch.Tensor, got ndarray"),
    (torch.ones(3, 2, dtype=torch.int64), TypeError,
     "x must be a floating-point tensor, got dtype torch.int64"),
    (torch.ones(3), ValueError, "x must have shape (..., n, E)"),
])
def test_raw_self_attention_refuses_bad_input(x, error, message):
    with pytest.raises(error, match=re.escape(message)):
        raw_self_attention(x)
