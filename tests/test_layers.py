"""``attnbook.layers`` against hand-written formulas and ``nn.MultiheadAttention``."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnbook.attention import AttentionOutput
from attnbook.layers import MultiHeadAttention, SelfAttention, SimpleAttention


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, gen: torch.Generator, dtype: torch.dtype = torch.float64
          ) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """``x W^T + b`` written out."""
    out = x @ layer.weight.T
    return out if layer.bias is None else out + layer.bias


def softmax_attention(q, k, v, mask=None, scale=1.0):
    """``softmax(scale * q k^T) v`` with exp and sums; masked entries excluded."""
    scores = scale * (q @ k.transpose(-2, -1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    weights = e / e.sum(-1, keepdim=True)
    return weights @ v, weights


def random_mask(*shape: int, gen: torch.Generator) -> torch.Tensor:
    """A random boolean mask in which every query row keeps at least one key."""
    mask = torch.rand(*shape, generator=gen) < 0.5
    mask[..., 0] = True
    return mask


# --------------------------------------------------------------------------- SimpleAttention


def test_simple_attention_has_three_square_projections():
    layer = SimpleAttention(6)
    for name in ("query", "key", "value"):
        proj = getattr(layer, name)
        assert isinstance(proj, nn.Linear)
        assert (proj.in_features, proj.out_features) == (6, 6)
        assert proj.bias is not None
    assert sum(p.numel() for p in layer.parameters()) == 3 * (6 * 6 + 6)


@pytest.mark.parametrize("with_mask", [False, True], ids=["no_mask", "causal"])
def test_simple_attention_is_unscaled_softmax_qkT_v(with_mask):
    torch.manual_seed(0)
    layer = SimpleAttention(4).double()
    x = randn(2, 5, 4, gen=generator(1))
    mask = torch.ones(5, 5).tril().bool() if with_mask else None
    q, k, v = linear(x, layer.query), linear(x, layer.key), linear(x, layer.value)
    expected_out, expected_w = softmax_attention(q, k, v, mask, scale=1.0)
    result = layer(x, mask)
    assert isinstance(result, AttentionOutput)
    assert result.output.shape == (2, 5, 4) and result.weights.shape == (2, 5, 5)
    torch.testing.assert_close(result.output, expected_out)
    torch.testing.assert_close(result.weights, expected_w)
    # No 1/sqrt(d) factor: the scaled version is different.
    scaled, _ = softmax_attention(q, k, v, mask, scale=0.5)
    assert not torch.allclose(result.output, scaled, atol=1e-4)


def test_simple_attention_permutation_equivariant():
    torch.manual_seed(2)
    layer = SimpleAttention(4).double()
    x = randn(2, 6, 4, gen=generator(3))
    perm = torch.randperm(6, generator=generator(4))
    out, w = layer(x)
    out_p, w_p = layer(x[:, perm])
    torch.testing.assert_close(out_p, out[:, perm])
    torch.testing.assert_close(w_p, w[:, perm][:, :, perm])


# --------------------------------------------------------------------------- SelfAttention


@pytest.mark.parametrize(("d_model", "d_k"), [(6, None), (6, 3), (4, 8)])
@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
def test_self_attention_is_one_scaled_head(d_model, d_k, return_weights):
    torch.manual_seed(5)
    layer = SelfAttention(d_model, d_k).double()
    width = d_model if d_k is None else d_k
    assert layer.d_k == width
    assert (layer.query.in_features, layer.query.out_features) == (d_model, width)
    x = randn(2, 5, d_model, gen=generator(6))
    mask = random_mask(2, 5, 5, gen=generator(7))
    q, k, v = linear(x, layer.query), linear(x, layer.key), linear(x, layer.value)
    expected_out, expected_w = softmax_attention(q, k, v, mask, scale=1 / math.sqrt(width))
    out, w = layer(x, mask, return_weights=return_weights)
    assert out.shape == (2, 5, width)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    if return_weights:
        torch.testing.assert_close(w, expected_w)
    else:
        assert w is None


def test_self_attention_without_bias():
    layer = SelfAttention(4, bias=False)
    assert all(getattr(layer, n).bias is None for n in ("query", "key", "value"))
    x = randn(1, 3, 4, gen=generator(8), dtype=torch.float32)
    out, _ = layer(x)
    q, k, v = (x @ getattr(layer, n).weight.T for n in ("query", "key", "value"))
    torch.testing.assert_close(out, softmax_attention(q, k, v, scale=0.5)[0])


# --------------------------------------------------------------------------- MultiHeadAttention


def test_multi_head_attention_structure():
    mha = MultiHeadAttention(12, 3)
    assert (mha.d_model, mha.num_heads, mha.d_head) == (12, 3, 4)
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        proj = getattr(mha, name)
        assert (proj.in_features, proj.out_features) == (12, 12)
        assert proj.bias is not None
    no_bias = MultiHeadAttention(12, 3, bias=False)
    assert all(getattr(no_bias, n).bias is None
               for n in ("q_proj", "k_proj", "v_proj", "out_proj"))


@pytest.mark.parametrize("shape", [(5, 12), (2, 5, 12), (2, 3, 5, 12)])
def test_split_then_merge_heads_is_exact(shape):
    mha = MultiHeadAttention(12, 3)
    x = randn(*shape, gen=generator(12), dtype=torch.float32)
    split = mha.split_heads(x)
    assert split.shape == (*shape[:-2], 3, shape[-2], 4)
    for i in range(3):
        assert torch.equal(split[..., i, :, :], x[..., 4 * i:4 * (i + 1)])
    assert torch.equal(mha.merge_heads(split), x)


def test_merge_then_split_heads_is_exact():
    mha = MultiHeadAttention(8, 4)
    heads = randn(2, 4, 5, 2, gen=generator(13))
    assert torch.equal(mha.split_heads(mha.merge_heads(heads)), heads)


def loop_over_heads(mha: MultiHeadAttention, query, key, value, mask=None):
    """Multi-head attention one head at a time, from the layer's projection weights."""
    dh = mha.d_head
    outputs, weights = [], []
    for i in range(mha.num_heads):
        rows = slice(i * dh, (i + 1) * dh)

        def head(x, proj, rows=rows):
            out = x @ proj.weight[rows].T
            return out if proj.bias is None else out + proj.bias[rows]

        q, k, v = head(query, mha.q_proj), head(key, mha.k_proj), head(value, mha.v_proj)
        head_mask = None if mask is None else mask[:, i] if mask.dim() == 4 else mask
        out, w = softmax_attention(q, k, v, head_mask, scale=1 / math.sqrt(dh))
        outputs.append(out)
        weights.append(w)
    concat = torch.cat(outputs, dim=-1)  # (B, L, d_model)
    return linear(concat, mha.out_proj), torch.stack(weights, dim=1)  # (B, h, L, S)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mask_kind", ["none", "2d", "3d", "4d"])
@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
def test_vectorised_equals_loop_over_heads(bias, mask_kind, return_weights):
    torch.manual_seed(14)
    mha = MultiHeadAttention(12, 3, bias=bias).double()
    gen = generator(15)
    query, key, value = randn(2, 4, 12, gen=gen), randn(2, 6, 12, gen=gen), \
        randn(2, 6, 12, gen=gen)
    mask = {"none": None, "2d": random_mask(4, 6, gen=gen),
            "3d": random_mask(2, 4, 6, gen=gen), "4d": random_mask(2, 3, 4, 6, gen=gen)
            }[mask_kind]
    expected_out, expected_w = loop_over_heads(mha, query, key, value, mask)
    out, w = mha(query, key, value, mask, return_weights=return_weights)
    assert out.shape == (2, 4, 12)
    torch.testing.assert_close(out, expected_out)
    if return_weights:
        assert w.shape == (2, 3, 4, 6)
        torch.testing.assert_close(w, expected_w)
    else:
        assert w is None


def test_each_head_is_scaled_by_its_own_width():
    """The scale is 1/sqrt(d_head), not 1/sqrt(d_model): the bug of ng-video-lecture before
    its pull request 6 (the bug gallery's first section)."""
    torch.manual_seed(16)
    mha = MultiHeadAttention(16, 4, bias=False).double()
    x = randn(2, 5, 16, gen=generator(17))
    _, weights = mha(x)
    q, k = mha.split_heads(mha.q_proj(x)), mha.split_heads(mha.k_proj(x))  # (B, h, L, 4)
    dots = q @ k.transpose(-2, -1)
    torch.testing.assert_close(weights, torch.softmax(dots / 2.0, dim=-1))  # sqrt(4)
    by_d_model = torch.softmax(dots / 4.0, dim=-1)  # sqrt(16): the bug
    assert (weights - by_d_model).abs().max() > 1e-2


def test_key_and_value_default_to_query_then_key():
    torch.manual_seed(16)
    mha = MultiHeadAttention(8, 2).double()
    gen = generator(17)
    x, memory = randn(2, 5, 8, gen=gen), randn(2, 3, 8, gen=gen)
    for got, expected in ((mha(x), mha(x, x, x)), (mha(x, memory), mha(x, memory, memory))):
        torch.testing.assert_close(got.output, expected.output, atol=0, rtol=0)
        torch.testing.assert_close(got.weights, expected.weights, atol=0, rtol=0)


@pytest.mark.parametrize("make", [lambda: SelfAttention(4, 3), lambda: MultiHeadAttention(8, 2)],
                         ids=["SelfAttention", "MultiHeadAttention"])
def test_permuting_the_tokens_permutes_outputs_and_weights(make):
    torch.manual_seed(9)
    layer = make().double()
    x = randn(2, 6, layer.d_model, gen=generator(10))
    perm = torch.randperm(6, generator=generator(11))
    out, w = layer(x)
    out_p, w_p = layer(x[:, perm])
    torch.testing.assert_close(out_p, out[:, perm])
    torch.testing.assert_close(w_p, w[..., perm, :][..., perm])  # (B, [h,] L, S)


def test_multi_head_attention_mask_applies_to_every_head():
    torch.manual_seed(21)
    mha = MultiHeadAttention(8, 4).double()
    x = randn(2, 5, 8, gen=generator(22))
    mask = torch.ones(5, 5).tril().bool()
    _, w = mha(x, mask=mask)
    assert (w[..., ~mask] == 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 5, dtype=torch.float64))


def test_multi_head_attention_fully_masked_row_is_zero_before_out_proj():
    torch.manual_seed(23)
    mha = MultiHeadAttention(8, 2).double()
    x = randn(1, 4, 8, gen=generator(24))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    for return_weights in (True, False):
        out, w = mha(x, mask=mask, return_weights=return_weights)
        # Zero heads, so the output of that row is just the output projection's bias.
        torch.testing.assert_close(out[0, 2], mha.out_proj.bias)
        assert torch.isfinite(out).all()
        if return_weights:
            assert (w[:, :, 2] == 0).all()


# --------------------------------------------------------------------------- from_torch


def torch_mha(d_model: int, num_heads: int, dtype: torch.dtype, *, bias: bool = True
              ) -> nn.MultiheadAttention:
    module = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True,
                                   dtype=dtype)
    with torch.no_grad():  # non-zero biases, so that copying them is tested
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator(p.numel()), dtype=dtype) * 0.5)
    return module.eval()


MHA_CASES = ["self", "causal", "padding", "cross", "no_bias", "mask_3d", "mask_4d"]


def build_case(case: str, dtype: torch.dtype):
    """The module, inputs, our mask and the arguments that express it to nn.MHA."""
    B, L, S, d, h = 2, 5, 5, 8, 2
    if case in ("cross", "mask_3d"):
        S = 7
    gen = generator(MHA_CASES.index(case) + 100)
    query = randn(B, L, d, gen=gen, dtype=dtype)
    key = query if S == L and case != "mask_4d" else randn(B, S, d, gen=gen, dtype=dtype)
    value = key if case != "cross" else randn(B, S, d, gen=gen, dtype=dtype)
    module = torch_mha(d, h, dtype, bias=case != "no_bias")
    mask, torch_kwargs = None, {}
    if case == "causal":
        mask = torch.ones(L, S).tril().bool()
        torch_kwargs = {"attn_mask": ~mask}  # opposite polarity in nn.MultiheadAttention
    elif case == "padding":
        lengths = torch.tensor([3, 5])
        mask = (torch.arange(S) < lengths[:, None])[:, None, :]  # (B, 1, S)
        torch_kwargs = {"key_padding_mask": ~mask[:, 0, :]}
    elif case == "mask_3d":
        mask = random_mask(B, L, S, gen=gen)
        torch_kwargs = {"attn_mask": (~mask).repeat_interleave(h, dim=0)}  # (B*h, L, S)
    elif case == "mask_4d":
        mask = random_mask(B, h, L, S, gen=gen)
        torch_kwargs = {"attn_mask": (~mask).reshape(B * h, L, S)}
    return module, query, key, value, mask, torch_kwargs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("return_weights", [True, False], ids=["weights", "fused"])
@pytest.mark.parametrize("case", MHA_CASES)
def test_from_torch_matches_nn_multihead_attention(case, return_weights, dtype):
    module, query, key, value, mask, torch_kwargs = build_case(case, dtype)
    ours = MultiHeadAttention.from_torch(module)
    assert ours.q_proj.weight.dtype == dtype
    with torch.no_grad():
        expected_out, expected_w = module(query, key, value, need_weights=True,
                                          average_attn_weights=False, **torch_kwargs)
        out, w = ours(query, key, value, mask, return_weights=return_weights)
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(out, expected_out, **tol)
    if return_weights:
        assert w.shape == expected_w.shape == (query.shape[0], 2, query.shape[1],
                                               key.shape[1])
        torch.testing.assert_close(w, expected_w, **tol)
        if mask is not None:
            assert (w[~mask.unsqueeze(1).expand_as(w) if mask.dim() == 3
                      else ~mask.expand_as(w)] == 0).all()
    else:
        assert w is None


def test_from_torch_gradients_match():
    module, query, key, value, mask, torch_kwargs = build_case("mask_3d", torch.float64)
    ours = MultiHeadAttention.from_torch(module)
    cotangent = randn(*query.shape, gen=generator(30))
    (module(query, key, value, need_weights=False, **torch_kwargs)[0] * cotangent).sum() \
        .backward()
    (ours(query, key, value, mask)[0] * cotangent).sum().backward()
    gq, gk, gv = module.in_proj_weight.grad.chunk(3)
    torch.testing.assert_close(ours.q_proj.weight.grad, gq)
    torch.testing.assert_close(ours.k_proj.weight.grad, gk)
    torch.testing.assert_close(ours.v_proj.weight.grad, gv)
    torch.testing.assert_close(ours.out_proj.weight.grad, module.out_proj.weight.grad)
    torch.testing.assert_close(torch.cat([ours.q_proj.bias.grad, ours.k_proj.bias.grad,
                                          ours.v_proj.bias.grad]), module.in_proj_bias.grad)


def test_from_torch_copies_rather_than_shares():
    module = torch_mha(8, 2, torch.float32)
    ours = MultiHeadAttention.from_torch(module)
    assert ours.num_heads == 2 and ours.d_model == 8
    before = module.in_proj_weight.detach().clone()
    with torch.no_grad():
        ours.q_proj.weight.add_(1.0)
    assert torch.equal(module.in_proj_weight, before)
    assert ours.q_proj.weight.data_ptr() != module.in_proj_weight.data_ptr()


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("factory", [
    lambda n: SimpleAttention(n), lambda n: SelfAttention(n, n), lambda n: MultiHeadAttention(n, n),
], ids=["SimpleAttention", "SelfAttention", "MultiHeadAttention"])
def test_sizes_take_any_integer_type_but_bool(factory):
    layer = factory(np.int64(4))
    assert layer(torch.ones(2, 3, 4)).output.shape == (2, 3, 4)
    with pytest.raises(TypeError, match="must be an int, got bool"):
        factory(True)


BAD_SIZES = [
    *(pytest.param(lambda d=d, h=h: MultiHeadAttention(d, h), ValueError,
                   f"num_heads={h} must divide d_model={d}: each head needs", id=f"heads-{d}-{h}")
      for d, h in [(12, 5), (8, 3), (4, 8)]),
    *(pytest.param(lambda h=h: MultiHeadAttention(8, h), ValueError,
                   f"num_heads must be at least 1, got {h}", id=f"heads-{h}")
      for h in (0, -1)),
    pytest.param(lambda: MultiHeadAttention(8, 2.0), TypeError,
                 "num_heads must be an int, got float", id="heads-float"),
    pytest.param(lambda: SimpleAttention(0), ValueError, "n_embd must be at least 1, got 0",
                 id="SimpleAttention-zero"),
    pytest.param(lambda: SimpleAttention("4"), TypeError, "n_embd must be an int, got str",
                 id="SimpleAttention-str"),
    pytest.param(lambda: SelfAttention(0), ValueError, "d_model must be at least 1, got 0",
                 id="SelfAttention-d_model"),
    pytest.param(lambda: SelfAttention(4, 0), ValueError, "d_k must be at least 1, got 0",
                 id="SelfAttention-d_k"),
    pytest.param(lambda: MultiHeadAttention(0, 1), ValueError,
                 "d_model must be at least 1, got 0", id="MultiHeadAttention-d_model"),
]


@pytest.mark.parametrize(("build", "error", "message"), BAD_SIZES)
def test_bad_sizes_are_refused_naming_the_argument(build, error, message):
    with pytest.raises(error, match=re.escape(message)):
        build()


LAYERS = {  # name -> (layer, the name of its first argument)
    "SimpleAttention": (lambda: SimpleAttention(4), "x"),
    "SelfAttention": (lambda: SelfAttention(4, 2), "x"),
    "MultiHeadAttention": (lambda: MultiHeadAttention(4, 2), "query"),
}


@pytest.mark.parametrize(("x", "error", "message"), [
    (torch.ones(2, 3, 5), ValueError,
     "{name} has width 5 (shape (2, 3, 5)) but the layer expects 4"),
    *((torch.ones(2, 3, 4, dtype=dtype), TypeError,
       f"{{name}} has dtype {dtype} but the layer's parameters are torch.float32; "
       f"convert one with .to()") for dtype in (torch.float64, torch.float16, torch.int64)),
    ([[[0.0] * 4] * 3], TypeError, "{name} must be a torch.Tensor, got list"),
], ids=["width", "float64", "float16", "int64", "list"])
@pytest.mark.parametrize("layer_name", list(LAYERS))
def test_layer_refuses_bad_input_naming_it(layer_name, x, error, message):
    build, name = LAYERS[layer_name]
    with pytest.raises(error, match=re.escape(message.format(name=name))):
        build()(x)


@pytest.mark.parametrize("layer_name", list(LAYERS))
def test_layer_refuses_a_non_boolean_mask(layer_name):
    with pytest.raises(TypeError, match=re.escape("mask must be a boolean tensor")):
        LAYERS[layer_name][0]()(torch.ones(2, 3, 4), mask=torch.ones(3, 3))


def mha_call(*args, **kwargs):
    return lambda: MultiHeadAttention(4, 2)(*args, **kwargs)


@pytest.mark.parametrize(("call", "error", "message"), [
    pytest.param(mha_call(torch.ones(2, 3, 4), torch.ones(2, 5, 6)), ValueError,
                 "key has width 6 (shape (2, 5, 6)) but the layer expects 4", id="key-width"),
    pytest.param(mha_call(torch.ones(2, 3, 4), torch.ones(2, 5, 4), torch.ones(2, 5, 3)),
                 ValueError, "value has width 3", id="value-width"),
    pytest.param(mha_call(torch.ones(2, 3, 4), torch.ones(2, 5, 4),
                          torch.ones(2, 5, 4, dtype=torch.float64)),
                 TypeError, "value has dtype torch.float64", id="value-dtype"),
    pytest.param(mha_call(torch.ones(3, 4)), ValueError,
                 "query must have shape (B, L, d_model), got shape (3, 4)", id="unbatched"),
    pytest.param(mha_call(torch.ones(2, 3, 4), torch.ones(2, 5, 4), torch.ones(2, 6, 4)),
                 ValueError, "key and value must have the same (B, S)", id="S-differs"),
    pytest.param(mha_call(torch.ones(2, 3, 4), torch.ones(3, 5, 4)), ValueError,
                 "query and key must have the same batch size B", id="B-differs"),
    pytest.param(mha_call(torch.ones(2, 3, 4), torch.ones(2, 5, 4),
                          mask=torch.ones(3, 4, dtype=torch.bool)),
                 ValueError, "mask of shape (3, 4) does not broadcast to (..., L, S) = "
                             "(..., 3, 5)", id="mask-broadcast"),
    pytest.param(mha_call(torch.ones(2, 3, 4), mask=torch.ones(2, 3, 3, 3, dtype=torch.bool)),
                 ValueError, "batch dimensions of q, k, v and mask do not broadcast",
                 id="mask-heads"),
    pytest.param(mha_call(torch.ones(2, 3, 4),
                          mask=torch.ones(1, 2, 2, 3, 3, dtype=torch.bool)),
                 ValueError, "mask must broadcast to (L, S), (B, L, S) or (B, h, L, S), got "
                             "shape (1, 2, 2, 3, 3)", id="mask-5d"),
    pytest.param(lambda: MultiHeadAttention(4, 2).split_heads(torch.ones(3, 6)), ValueError,
                 "x must have shape (..., L, d_model=4)", id="split-width"),
    pytest.param(lambda: MultiHeadAttention(4, 2).merge_heads(torch.ones(3, 5, 2)),
                 ValueError, "x must have shape (..., h=2, L, d_head=2)", id="merge-heads"),
    pytest.param(lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2)),
                 ValueError, "module must be built with batch_first=True",
                 id="from_torch-batch_first"),
    pytest.param(lambda: MultiHeadAttention.from_torch(nn.Linear(8, 8)), TypeError,
                 "module must be an nn.MultiheadAttention, got Linear", id="from_torch-Linear"),
    pytest.param(lambda: MultiHeadAttention.from_torch(
        nn.MultiheadAttention(8, 2, kdim=4, vdim=4, batch_first=True)), ValueError,
        "module must have kdim == vdim == embed_dim", id="from_torch-kdim"),
    pytest.param(lambda: MultiHeadAttention.from_torch(
        nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True)), ValueError,
        "module must not use add_bias_kv or add_zero_attn", id="from_torch-bias_kv"),
])
def test_multi_head_attention_refuses_bad_input_naming_it(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()
