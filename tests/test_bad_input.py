"""Bad input gets a TypeError or ValueError naming the argument, never a bare RuntimeError.

Each test checks the exception type and a fragment of the message.
"""

from __future__ import annotations

import math
import re

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from torch import nn

from attnbook.attention import attention, raw_self_attention
from attnbook.layers import MultiHeadAttention, SelfAttention, SimpleAttention
from attnbook.masks import causal_mask, padding_mask
from attnbook.plots import attention_heatmap


def qkv(L: int = 5, S: int = 6, E: int = 4, Ev: int = 3, batch: tuple[int, ...] = (2,)):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(*batch, L, E, generator=gen), torch.randn(*batch, S, E, generator=gen),
            torch.randn(*batch, S, Ev, generator=gen))


# --------------------------------------------------------------------------- non-tensors


def test_q_not_a_tensor():
    _, k, v = qkv()
    with pytest.raises(TypeError, match="q must be a torch.Tensor, got list"):
        attention([[1.0, 2.0, 3.0, 4.0]], k, v)


def test_k_not_a_tensor():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="k must be a torch.Tensor, got ndarray"):
        attention(q, k.numpy(), v)


def test_v_not_a_tensor():
    q, k, _ = qkv()
    with pytest.raises(TypeError, match="v must be a torch.Tensor, got NoneType"):
        attention(q, k, None)


def test_mask_not_a_tensor():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="mask must be a torch.Tensor, got list"):
        attention(q, k, v, [[True] * 6] * 5)


def test_x_not_a_tensor():
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got ndarray"):
        raw_self_attention(np.ones((3, 2)))


# --------------------------------------------------------------------------- masks


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.int64, torch.uint8], ids=str)
def test_non_boolean_mask_says_how_to_convert(mask_dtype):
    q, k, v = qkv()
    mask = torch.ones(5, 6).tril().to(mask_dtype)
    with pytest.raises(TypeError, match=r"mask must be a boolean tensor.*`mask\.bool\(\)`"):
        attention(q, k, v, mask)


def test_additive_float_mask_says_how_to_convert():
    q, k, v = qkv()
    additive = torch.zeros(5, 6).masked_fill(~torch.ones(5, 6).tril().bool(), -math.inf)
    with pytest.raises(TypeError, match=r"additive mask of 0 and -inf converts with `mask == 0`"):
        attention(q, k, v, additive)


def test_mask_rows_do_not_broadcast():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=re.escape(
            "mask of shape (3, 6) does not broadcast to (..., L, S) = (..., 5, 6)")):
        attention(q, k, v, torch.ones(3, 6, dtype=torch.bool))


def test_mask_columns_do_not_broadcast():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=re.escape("mask of shape (2, 5, 5) does not broadcast")):
        attention(q, k, v, torch.ones(2, 5, 5, dtype=torch.bool), return_weights=False)


def test_mask_batch_dims_do_not_broadcast():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=re.escape(
            "the batch dimensions of q, k, v and mask do not broadcast: got (2,), (2,), (2,), "
            "(3,)")):
        attention(q, k, v, torch.ones(3, 5, 6, dtype=torch.bool))


# --------------------------------------------------------------------------- q, k, v shapes


def test_mismatched_feature_size_E():
    q, _, v = qkv()
    k = torch.ones(2, 6, 7)
    with pytest.raises(ValueError, match=r"q and k must have the same feature size E: .*"
                                         r"\(E=4\).*\(E=7\)"):
        attention(q, k, v)


def test_mismatched_length_S_between_k_and_v():
    q, k, _ = qkv()
    v = torch.ones(2, 4, 3)
    with pytest.raises(ValueError, match=r"k and v must have the same length S: .*"
                                         r"\(S=6\).*\(S=4\)"):
        attention(q, k, v)


def test_batch_shapes_do_not_broadcast():
    q, _, _ = qkv(batch=(2,))
    _, k, v = qkv(batch=(3,))
    with pytest.raises(ValueError, match=re.escape(
            "the batch dimensions of q, k, v do not broadcast: got (2,), (3,), (3,)")):
        attention(q, k, v)


def test_query_with_one_dimension():
    _, k, v = qkv(batch=())
    with pytest.raises(ValueError,
                       match=re.escape("q must have shape (..., L, E), got shape (4,)")):
        attention(torch.ones(4), k, v)


def test_no_keys():
    q, _, _ = qkv()
    with pytest.raises(ValueError, match="k must hold at least one key"):
        attention(q, torch.ones(2, 0, 4), torch.ones(2, 0, 3))


# --------------------------------------------------------------------------- dtypes


def test_mismatched_dtypes():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="q, k and v must share one dtype, got torch.float32, "
                                        "torch.float64 and torch.float32"):
        attention(q, k.double(), v)


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64], ids=str)
def test_non_float_tensor(name, dtype):
    tensors = dict(zip("qkv", qkv(), strict=True))
    tensors[name] = tensors[name].to(dtype)
    with pytest.raises(TypeError, match=f"{name} must be a floating-point tensor, got dtype "
                                        f"{dtype}"):
        attention(**tensors)


def test_raw_self_attention_non_float():
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got dtype torch.int64"):
        raw_self_attention(torch.ones(3, 2, dtype=torch.int64))


def test_raw_self_attention_one_dimension():
    with pytest.raises(ValueError, match=re.escape("x must have shape (..., n, E)")):
        raw_self_attention(torch.ones(3))


# --------------------------------------------------------------------------- scale


@pytest.mark.parametrize("scale", ["0.5", True, torch.tensor(0.5), [0.5], 1j],
                         ids=["str", "bool", "tensor", "list", "complex"])
def test_bad_scale_type(scale):
    q, k, v = qkv()
    with pytest.raises(TypeError, match="scale must be a real number or None, got "
                                        f"{type(scale).__name__}"):
        attention(q, k, v, scale=scale)


@pytest.mark.parametrize("scale", [math.inf, -math.inf, math.nan])
def test_non_finite_scale(scale):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="scale must be finite"):
        attention(q, k, v, scale=scale)


def test_return_weights_not_a_bool():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="return_weights must be a bool, got str"):
        attention(q, k, v, return_weights="no")


# --------------------------------------------------------------------------- causal_mask


@pytest.mark.parametrize("L", [3.0, "3", torch.tensor(3), True, None],
                         ids=["float", "str", "tensor", "bool", "None"])
def test_causal_mask_non_int_L(L):
    with pytest.raises(TypeError, match=f"L must be an int, got {type(L).__name__}"):
        causal_mask(L)


def test_causal_mask_non_int_S():
    with pytest.raises(TypeError, match="S must be an int, got float"):
        causal_mask(3, 2.5)


@pytest.mark.parametrize("L", [0, -2])
def test_causal_mask_L_too_small(L):
    with pytest.raises(ValueError, match=f"L must be at least 1, got {L}"):
        causal_mask(L)


def test_causal_mask_S_zero():
    with pytest.raises(ValueError, match="S must be at least 1, got 0"):
        causal_mask(3, 0)


# --------------------------------------------------------------------------- padding_mask


def test_padding_mask_negative_length():
    with pytest.raises(ValueError, match=re.escape("lengths must be non-negative, got -1 in "
                                                   "[3, -1]")):
        padding_mask([3, -1])


def test_padding_mask_negative_length_in_tensor():
    with pytest.raises(ValueError, match="lengths must be non-negative, got -2"):
        padding_mask(torch.tensor([-2, 4]))


def test_padding_mask_length_beyond_max_len():
    with pytest.raises(ValueError, match=re.escape("lengths [5, 7] exceed max_len=4")):
        padding_mask([2, 5, 7], max_len=4)


def test_padding_mask_float_lengths():
    with pytest.raises(TypeError, match=re.escape("lengths must hold ints, got float (2.5)")):
        padding_mask([1, 2.5])


def test_padding_mask_float_tensor_lengths():
    with pytest.raises(TypeError, match="lengths must hold integers, got a tensor of dtype "
                                        "torch.float32"):
        padding_mask(torch.tensor([1.0, 2.0]))


def test_padding_mask_two_dimensional_lengths():
    with pytest.raises(ValueError, match=re.escape("lengths must be one-dimensional (B,), got "
                                                   "shape (2, 1)")):
        padding_mask(torch.tensor([[1], [2]]))


@pytest.mark.parametrize("lengths", [3, "34", None], ids=["int", "str", "None"])
def test_padding_mask_lengths_not_a_sequence(lengths):
    with pytest.raises(TypeError, match="lengths must be a sequence of ints or a 1-D tensor"):
        padding_mask(lengths)


def test_padding_mask_empty_lengths_without_max_len():
    with pytest.raises(ValueError, match="lengths is empty: pass max_len"):
        padding_mask([])


def test_padding_mask_non_int_max_len():
    with pytest.raises(TypeError, match="max_len must be an int, got float"):
        padding_mask([1, 2], max_len=4.0)


def test_padding_mask_negative_max_len():
    with pytest.raises(ValueError, match="max_len must be at least 0, got -1"):
        padding_mask([], max_len=-1)


# --------------------------------------------------------------------------- layer construction


@pytest.mark.parametrize(("d_model", "num_heads"), [(12, 5), (8, 3), (4, 8)])
def test_num_heads_does_not_divide_d_model(d_model, num_heads):
    with pytest.raises(ValueError, match=f"num_heads={num_heads} does not divide "
                                         f"d_model={d_model}"):
        MultiHeadAttention(d_model, num_heads)


@pytest.mark.parametrize("num_heads", [0, -1])
def test_zero_or_negative_heads(num_heads):
    with pytest.raises(ValueError, match=f"num_heads must be at least 1, got {num_heads}"):
        MultiHeadAttention(8, num_heads)


def test_non_int_heads():
    with pytest.raises(TypeError, match="num_heads must be an int, got float"):
        MultiHeadAttention(8, 2.0)


@pytest.mark.parametrize(("factory", "message"), [
    (lambda: SimpleAttention(0), "n_embd must be at least 1, got 0"),
    (lambda: SelfAttention(0), "d_model must be at least 1, got 0"),
    (lambda: SelfAttention(4, 0), "d_k must be at least 1, got 0"),
    (lambda: MultiHeadAttention(0, 1), "d_model must be at least 1, got 0"),
], ids=["SimpleAttention", "SelfAttention-d_model", "SelfAttention-d_k", "MultiHeadAttention"])
def test_layer_sizes_must_be_positive(factory, message):
    with pytest.raises(ValueError, match=message):
        factory()


def test_layer_size_must_be_int():
    with pytest.raises(TypeError, match="n_embd must be an int, got str"):
        SimpleAttention("4")


# --------------------------------------------------------------------------- layer inputs


LAYERS = {
    "SimpleAttention": lambda: SimpleAttention(4),
    "SelfAttention": lambda: SelfAttention(4, 2),
    "MultiHeadAttention": lambda: MultiHeadAttention(4, 2),
}
FIRST_ARG = {"SimpleAttention": "x", "SelfAttention": "x", "MultiHeadAttention": "query"}


@pytest.mark.parametrize("layer_name", list(LAYERS))
def test_layer_wrong_input_width(layer_name):
    layer = LAYERS[layer_name]()
    name = FIRST_ARG[layer_name]
    with pytest.raises(ValueError, match=re.escape(
            f"{name} has width 5 (shape (2, 3, 5)) but the layer expects 4")):
        layer(torch.ones(2, 3, 5))


@pytest.mark.parametrize("layer_name", list(LAYERS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int64], ids=str)
def test_layer_wrong_input_dtype(layer_name, dtype):
    layer = LAYERS[layer_name]()
    name = FIRST_ARG[layer_name]
    with pytest.raises(TypeError, match=re.escape(
            f"{name} has dtype {dtype} but the layer's parameters are torch.float32; "
            f"convert one with .to()")):
        layer(torch.ones(2, 3, 4, dtype=dtype))


@pytest.mark.parametrize("layer_name", list(LAYERS))
def test_layer_input_not_a_tensor(layer_name):
    layer = LAYERS[layer_name]()
    name = FIRST_ARG[layer_name]
    with pytest.raises(TypeError, match=f"{name} must be a torch.Tensor, got list"):
        layer([[[0.0] * 4] * 3])


@pytest.mark.parametrize("layer_name", list(LAYERS))
def test_layer_non_boolean_mask(layer_name):
    layer = LAYERS[layer_name]()
    with pytest.raises(TypeError, match=r"mask must be a boolean tensor.*`mask\.bool\(\)`"):
        layer(torch.ones(2, 3, 4), mask=torch.ones(3, 3))


def test_mha_key_wrong_width():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match=re.escape(
            "key has width 6 (shape (2, 5, 6)) but the layer expects 4")):
        mha(torch.ones(2, 3, 4), torch.ones(2, 5, 6))


def test_mha_value_wrong_width():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match="value has width 3"):
        mha(torch.ones(2, 3, 4), torch.ones(2, 5, 4), torch.ones(2, 5, 3))


def test_mha_value_wrong_dtype():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(TypeError, match="value has dtype torch.float64"):
        mha(torch.ones(2, 3, 4), torch.ones(2, 5, 4), torch.ones(2, 5, 4, dtype=torch.float64))


def test_mha_unbatched_query():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match=re.escape(
            "query must have shape (B, L, d_model), got shape (3, 4)")):
        mha(torch.ones(3, 4))


def test_mha_key_and_value_lengths_differ():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match=re.escape("key and value must have the same (B, S)")):
        mha(torch.ones(2, 3, 4), torch.ones(2, 5, 4), torch.ones(2, 6, 4))


def test_mha_batch_sizes_differ():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match="query and key must have the same batch size B"):
        mha(torch.ones(2, 3, 4), torch.ones(3, 5, 4))


def test_mha_mask_does_not_broadcast():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match=re.escape(
            "mask of shape (3, 4) does not broadcast to (..., L, S) = (..., 3, 5)")):
        mha(torch.ones(2, 3, 4), torch.ones(2, 5, 4), mask=torch.ones(3, 4, dtype=torch.bool))


def test_mha_mask_with_wrong_number_of_heads():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match="batch dimensions of q, k, v and mask do not broadcast"):
        mha(torch.ones(2, 3, 4), mask=torch.ones(2, 3, 3, 3, dtype=torch.bool))


def test_mha_mask_with_too_many_dimensions():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match=re.escape(
            "mask must broadcast to (L, S), (B, L, S) or (B, h, L, S), got shape "
            "(1, 2, 2, 3, 3)")):
        mha(torch.ones(2, 3, 4), mask=torch.ones(1, 2, 2, 3, 3, dtype=torch.bool))


def test_split_heads_wrong_width():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match=re.escape("x must have shape (..., L, d_model=4)")):
        mha.split_heads(torch.ones(3, 6))


def test_merge_heads_wrong_number_of_heads():
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match=re.escape("x must have shape (..., h=2, L, d_head=2)")):
        mha.merge_heads(torch.ones(3, 5, 2))


# --------------------------------------------------------------------------- from_torch


def test_from_torch_batch_first_false():
    module = nn.MultiheadAttention(8, 2)  # batch_first defaults to False
    with pytest.raises(ValueError, match="module must be built with batch_first=True"):
        MultiHeadAttention.from_torch(module)


def test_from_torch_not_a_multihead_attention():
    with pytest.raises(TypeError, match="module must be an nn.MultiheadAttention, got Linear"):
        MultiHeadAttention.from_torch(nn.Linear(8, 8))


def test_from_torch_different_key_width():
    module = nn.MultiheadAttention(8, 2, kdim=4, vdim=4, batch_first=True)
    with pytest.raises(ValueError, match="module must have kdim == vdim == embed_dim"):
        MultiHeadAttention.from_torch(module)


def test_from_torch_add_bias_kv():
    module = nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True)
    with pytest.raises(ValueError, match="module must not use add_bias_kv or add_zero_attn"):
        MultiHeadAttention.from_torch(module)


# --------------------------------------------------------------------------- attention_heatmap


@pytest.fixture
def close_figures():
    plt.switch_backend("Agg")
    yield
    plt.close("all")


def test_heatmap_query_labels_do_not_match(close_figures):
    with pytest.raises(ValueError, match=re.escape(
            "tokens has 3 labels but the weights have 4 rows (queries)")):
        attention_heatmap(torch.full((4, 4), 0.25), ["a", "b", "c"])


def test_heatmap_key_labels_do_not_match(close_figures):
    with pytest.raises(ValueError, match=re.escape(
            "key_tokens has 2 labels but the weights have 5 columns (keys)")):
        attention_heatmap(torch.full((3, 5), 0.2), ["a", "b", "c"], ["x", "y"])


def test_heatmap_labels_as_one_string(close_figures):
    with pytest.raises(TypeError, match="tokens must be a sequence of strings, not one string"):
        attention_heatmap(torch.full((3, 3), 1 / 3), "abc")


def test_heatmap_weights_not_an_array(close_figures):
    with pytest.raises(TypeError, match="weights must be a torch.Tensor or numpy.ndarray, got "
                                        "list"):
        attention_heatmap([[1.0, 0.0], [0.0, 1.0]])


def test_heatmap_weights_not_two_dimensional(close_figures):
    with pytest.raises(ValueError, match=re.escape(
            "weights must be a 2-D matrix (queries, keys), got shape (2, 3, 3)")):
        attention_heatmap(np.zeros((2, 3, 3)))
