"""Grouped-query attention, windowed and grouped key/value caches, and the decoder, on
small random cases with a known answer (the real SmolLM2 is in test_smollm2.py)."""

from __future__ import annotations

import pytest
import torch

from attnbook.attention import attention, grouped_attention
from attnbook.decoder import Decoder, DecoderConfig, RMSNorm
from attnbook.efficient import KVCache
from attnbook.layers import MultiHeadAttention
from attnbook.masks import causal_mask, position_mask, sliding_window_mask
from attnbook.positions import rope

TOL = {"atol": 1e-12, "rtol": 0}  # float64 throughout


def qkv(h: int, h_kv: int, L: int = 5, S: int = 7, E: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    shape = lambda heads, n: (2, heads, n, E)  # noqa: E731
    return (torch.randn(shape(h, L), generator=g, dtype=torch.float64),
            torch.randn(shape(h_kv, S), generator=g, dtype=torch.float64),
            torch.randn(shape(h_kv, S), generator=g, dtype=torch.float64))


# --- grouped_attention ---------------------------------------------------------------

@pytest.mark.parametrize("h, h_kv", [(6, 1), (6, 2), (6, 3), (6, 6)])
@pytest.mark.parametrize("return_weights", [True, False])
def test_grouped_attention_is_attention_over_repeated_heads(h, h_kv, return_weights):
    q, k, v = qkv(h, h_kv)
    mask = causal_mask(5, 7, offset=2)
    repeat = h // h_kv  # head j of k serves query heads j*g .. j*g+g-1
    expected = attention(q, k.repeat_interleave(repeat, dim=1),
                         v.repeat_interleave(repeat, dim=1), mask)
    got = grouped_attention(q, k, v, mask, return_weights=return_weights)
    torch.testing.assert_close(got.output, expected.output, **TOL)
    if return_weights:
        torch.testing.assert_close(got.weights, expected.weights, **TOL)
    else:
        assert got.weights is None


def test_grouped_attention_order_is_not_tiling():
    """The other order (tiling, .repeat) gives different outputs: the test above can fail."""
    q, k, v = qkv(6, 3)
    tiled = attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1))
    got = grouped_attention(q, k, v)
    assert (got.output - tiled.output).abs().max() > 0.1


def test_grouped_attention_takes_a_bias_and_a_mask_per_head():
    q, k, v = qkv(4, 2, L=3, S=3)
    bias = torch.randn(4, 3, 3, dtype=torch.float64)
    mask = torch.rand(2, 4, 3, 3) > 0.3
    expected = attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), mask,
                         bias=bias)
    got = grouped_attention(q, k, v, mask, bias=bias)
    torch.testing.assert_close(got.weights, expected.weights, **TOL)


@pytest.mark.parametrize("shapes, message", [
    (((2, 6, 5, 4), (2, 4, 7, 4), (2, 4, 7, 4)), "h_kv must divide"),
    (((2, 6, 5, 4), (2, 3, 7, 4), (2, 2, 7, 4)), "same number of heads"),
    (((5, 4), (7, 4), (7, 4)), "head dimension"),
])
def test_grouped_attention_bad_heads(shapes, message):
    q, k, v = (torch.randn(*shape) for shape in shapes)
    with pytest.raises(ValueError, match=message):
        grouped_attention(q, k, v)


def test_grouped_attention_bad_mask_heads():
    q, k, v = qkv(6, 3)
    with pytest.raises(ValueError, match="mask must have a head dimension of size h=6"):
        grouped_attention(q, k, v, torch.ones(2, 3, 5, 7, dtype=torch.bool))


# --- masks by position ---------------------------------------------------------------

def test_sliding_window_mask_by_hand():
    got = sliding_window_mask(6, 2, sinks=1).int()
    expected = torch.tensor([[1, 0, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0, 0],
                             [1, 1, 1, 0, 0, 0],
                             [1, 0, 1, 1, 0, 0],
                             [1, 0, 0, 1, 1, 0],
                             [1, 0, 0, 0, 1, 1]])
    assert torch.equal(got, expected)


def test_wide_window_is_causal_and_positions_may_skip():
    assert torch.equal(sliding_window_mask(5, 5), causal_mask(5))
    got = position_mask(torch.tensor([7, 9]), torch.tensor([0, 1, 6, 8, 9]), recent=3,
                        sinks=1)
    assert got.tolist() == [[True, False, True, False, False],
                            [True, False, False, True, True]]


@pytest.mark.parametrize("args, kwargs, error, message", [
    ((torch.tensor([0.5]), torch.tensor([0])), {}, TypeError, "query_positions must hold"),
    ((torch.tensor([[0]]), torch.tensor([0])), {}, ValueError, "one-dimensional"),
    (([0], torch.tensor([0])), {}, TypeError, "query_positions must be a torch.Tensor"),
    ((torch.tensor([0]), torch.tensor([0])), {"recent": 0}, ValueError, "recent"),
    ((torch.tensor([0]), torch.tensor([0])), {"sinks": -1}, ValueError, "sinks"),
])
def test_position_mask_bad_input(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        position_mask(*args, **kwargs)


# --- KVCache: positions, windows, grouped heads --------------------------------------

def test_cache_counts_positions_and_bytes():
    cache = KVCache()
    assert cache.next_position == 0 and cache.nbytes == 0
    cache.append(torch.zeros(1, 3, 4, 8), torch.zeros(1, 3, 4, 8))
    cache.append(torch.zeros(1, 3, 1, 8), torch.zeros(1, 3, 1, 8))
    assert cache.next_position == 5 and len(cache) == 5
    assert cache.positions.tolist() == [0, 1, 2, 3, 4]
    assert cache.nbytes == 2 * 3 * 5 * 8 * 4  # keys and values, 3 heads, float32


@pytest.mark.parametrize("recent, sinks", [(3, 0), (3, 2), (1, 1), (20, 4)])
@pytest.mark.parametrize("chunks", [(1,) * 12, (5, 1, 1, 1, 4), (12,)])
def test_windowed_cache_equals_full_attention_under_the_window_mask(recent, sinks, chunks):
    """Fed in any chunks, a windowed cache gives what one pass with the mask gives."""
    L = sum(chunks)
    q, k, v = qkv(2, 2, L=L, S=L, seed=recent + sinks)
    expected = attention(q, k, v, sliding_window_mask(L, recent, sinks=sinks)).output
    cache, outputs, start = KVCache(recent=recent, sinks=sinks), [], 0
    for n in chunks:
        part = slice(start, start + n)
        cache.append(k[..., part, :], v[..., part, :])
        outputs.append(cache.attend(q[..., part, :]).output)
        start += n
    torch.testing.assert_close(torch.cat(outputs, dim=-2), expected, **TOL)
    assert cache.next_position == L
    assert len(cache) <= sinks + recent - 1 + chunks[-1]  # it dropped what no one sees


def test_windowed_cache_keeps_the_sinks_and_the_latest():
    cache = KVCache(recent=3, sinks=2)
    for _ in range(10):
        cache.append(torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
    # Position 9's query sees the sinks 0, 1 and the recent 7, 8, 9; 6 went at this append.
    assert cache.positions.tolist() == [0, 1, 7, 8, 9]
    assert cache.next_position == 10 and len(cache) == 5


@pytest.mark.parametrize("h_kv", [1, 3, 6])
def test_cache_attends_grouped_heads(h_kv):
    q, k, v = qkv(6, h_kv, L=4, S=4)
    cache = KVCache()
    cache.append(k, v)
    got = cache.attend(q, return_weights=True)
    expected = grouped_attention(q, k, v, causal_mask(4))
    torch.testing.assert_close(got.output, expected.output, **TOL)
    assert cache.keys.shape[1] == h_kv  # only the key/value heads are stored


@pytest.mark.parametrize("kwargs, error, message", [
    ({"max_len": 4, "recent": 2}, ValueError, "cannot be combined"),
    ({"recent": 0}, ValueError, "recent"),
    ({"sinks": -1}, ValueError, "sinks"),
    ({"recent": 2.0}, TypeError, "recent"),
])
def test_cache_bad_window(kwargs, error, message):
    with pytest.raises(error, match=message):
        KVCache(**kwargs)


# --- MultiHeadAttention with grouped heads, causal, cached ---------------------------

def test_gqa_parameter_count_is_the_formula():
    d_model, h, d_head = 48, 6, 8
    for h_kv in (1, 2, 3, 6):
        layer = MultiHeadAttention(d_model, h, num_kv_heads=h_kv, bias=False)
        count = sum(p.numel() for p in layer.parameters())
        assert count == 2 * d_model * d_model + 2 * d_model * h_kv * d_head
    plain = MultiHeadAttention(d_model, h, bias=False)
    same = MultiHeadAttention(d_model, h, num_kv_heads=h, bias=False)
    assert sum(p.numel() for p in plain.parameters()) == \
        sum(p.numel() for p in same.parameters())


def test_num_kv_heads_equal_to_num_heads_is_ordinary_multi_head():
    torch.manual_seed(0)
    plain = MultiHeadAttention(16, 4).double()
    grouped = MultiHeadAttention(16, 4, num_kv_heads=4).double()
    grouped.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    for a, b in zip(plain(x), grouped(x), strict=True):
        torch.testing.assert_close(a, b, **TOL)


def test_one_kv_head_is_multi_query_attention():
    """Every query head attends over the same keys and values: with num_kv_heads=1 the
    layer equals one that copies its single key/value head into every head."""
    torch.manual_seed(1)
    mqa = MultiHeadAttention(16, 4, num_kv_heads=1).double()
    full = MultiHeadAttention(16, 4).double()
    state = mqa.state_dict()
    for name in ("k_proj", "v_proj"):  # one head of width 4, copied 4 times
        state[f"{name}.weight"] = state[f"{name}.weight"].repeat(4, 1)
        state[f"{name}.bias"] = state[f"{name}.bias"].repeat(4)
    full.load_state_dict(state)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    for a, b in zip(mqa(x), full(x), strict=True):
        torch.testing.assert_close(a, b, **TOL)


def test_causal_flag_is_the_causal_mask():
    torch.manual_seed(2)
    layer = MultiHeadAttention(16, 4, causal=True).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    out, weights = layer(x)
    layer.causal = False
    expected = layer(x, mask=causal_mask(5))
    torch.testing.assert_close(out, expected.output, **TOL)
    assert bool((weights.triu(1) == 0).all())


@pytest.mark.parametrize("position", [None, "rope"])
@pytest.mark.parametrize("h_kv", [1, 2, 4])
def test_cached_layer_equals_the_whole_sequence(position, h_kv):
    torch.manual_seed(3)
    layer = MultiHeadAttention(32, 4, num_kv_heads=h_kv, causal=True,
                               position=position).double().eval()
    x = torch.randn(1, 9, 32, dtype=torch.float64)
    expected = layer(x).output
    cache = KVCache()
    with torch.no_grad():
        parts = [layer(x[:, :4], cache=cache).output]  # a prefill of 4
        parts += [layer(x[:, i:i + 1], cache=cache).output for i in range(4, 9)]
    torch.testing.assert_close(torch.cat(parts, dim=1), expected, **TOL)
    assert cache.keys.shape == (1, h_kv, 9, 8)


def test_cache_rotates_at_next_position_not_len():
    """After a window drops tokens, RoPE must use the text position, not the cache length."""
    torch.manual_seed(4)
    layer = MultiHeadAttention(16, 2, causal=True, position="rope").double().eval()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    cache = KVCache(recent=2)
    with torch.no_grad():
        for i in range(6):
            layer(x[:, i:i + 1], cache=cache)
    q_last = layer.split_heads(layer.k_proj(x[:, 5:]))  # the key of position 5
    assert len(cache) == 2 and cache.next_position == 6
    torch.testing.assert_close(cache.keys[..., -1:, :], rope(q_last, torch.tensor([5])),
                               **TOL)


@pytest.mark.parametrize("kwargs, call, error, message", [
    ({"num_kv_heads": 3}, {}, ValueError,
     "num_kv_heads=3 must divide num_heads=4: each key/value head"),
    ({"num_kv_heads": 0}, {}, ValueError, "num_kv_heads"),
    ({"causal": 1}, {}, TypeError, "causal must be a bool"),
    ({}, {"cache": KVCache()}, ValueError, "causal=True"),
    ({"causal": True}, {"cache": []}, TypeError, "cache must be a KVCache"),
    ({"causal": True, "position": "alibi"}, {"cache": KVCache()}, ValueError, "not ALiBi"),
])
def test_layer_bad_input(kwargs, call, error, message):
    with pytest.raises(error, match=message):
        layer = MultiHeadAttention(16, 4, **kwargs)
        layer(torch.randn(1, 3, 16), **call)


def test_alibi_runs_without_a_mask_when_causal():
    layer = MultiHeadAttention(16, 4, causal=True, position="alibi")
    assert layer(torch.randn(1, 3, 16)).weights.shape == (1, 4, 3, 3)


# --- the decoder ---------------------------------------------------------------------

def tiny_decoder(seed: int = 0) -> Decoder:
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=50, d_model=32, num_layers=2, num_heads=4,
                           num_kv_heads=2, d_ff=48, rope_base=100.0)
    decoder = Decoder(config).double().eval()
    with torch.no_grad():  # norms away from 1, so that a wrong norm shows
        for module in decoder.modules():
            if isinstance(module, RMSNorm):
                module.weight.uniform_(0.5, 1.5)
    return decoder


def test_cache_bytes_per_token_is_what_the_cache_holds():
    decoder = tiny_decoder()
    caches = decoder.new_caches()
    with torch.no_grad():
        decoder(torch.arange(7), caches=caches)
    held = sum(cache.nbytes for cache in caches)
    assert held == 7 * decoder.config.cache_bytes_per_token(bytes_per_number=8)
    assert decoder.config.cache_bytes_per_token() == 2 * 2 * 2 * 8 * 4


def test_decoder_cached_generation_equals_recomputing():
    decoder = tiny_decoder()
    prompt = torch.tensor([3, 14, 15, 9, 26])
    cached, cached_logits = decoder.generate(prompt, 8)
    again, again_logits = decoder.generate(prompt, 8, use_cache=False)
    assert cached == again and len(cached) == 8
    torch.testing.assert_close(cached_logits, again_logits, atol=1e-10, rtol=0)


def test_decoder_is_causal():
    """Changing a later token changes no earlier logit."""
    decoder = tiny_decoder()
    a, b = torch.arange(8), torch.arange(8)
    b[5] = 40
    with torch.no_grad():
        la, lb = decoder(a).logits, decoder(b).logits
    torch.testing.assert_close(la[:, :5], lb[:, :5], **TOL)
    assert (la[:, 5] - lb[:, 5]).abs().max() > 1e-3


def test_decoder_window_mask_equals_a_windowed_cache():
    decoder = tiny_decoder()
    ids = torch.arange(3, 15)
    with torch.no_grad():
        masked = decoder(ids, mask=sliding_window_mask(12, 4, sinks=2)).logits
        caches = decoder.new_caches(recent=4, sinks=2)
        steps = [decoder(ids[i:i + 1], caches=caches).logits for i in range(12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), masked, atol=1e-10, rtol=0)


def test_rms_norm_by_hand():
    norm = RMSNorm(3, eps=0.0)
    x = torch.tensor([[3.0, 4.0, 0.0]])
    expected = x / (25 / 3) ** 0.5
    torch.testing.assert_close(norm(x), expected)


@pytest.mark.parametrize("ids, kwargs, error, message", [
    (torch.tensor([0.5]), {}, TypeError, "ids must hold integer"),
    (torch.tensor([50]), {}, ValueError, "ids must lie in 0 .. 49"),
    (torch.zeros(1, 1, 1, dtype=torch.long), {}, ValueError, "ids must have shape"),
    (torch.tensor([1]), {"caches": []}, ValueError, "one KVCache per block"),
    (torch.tensor([1]), {"caches": [KVCache(), KVCache()], "mask": torch.ones(1, 1).bool()},
     ValueError, "not both"),
])
def test_decoder_bad_input(ids, kwargs, error, message):
    with pytest.raises(error, match=message):
        tiny_decoder()(ids, **kwargs)


def test_decoder_config_bad_input():
    with pytest.raises(TypeError, match="num_heads"):
        DecoderConfig(vocab_size=5, d_model=8, num_layers=1, num_heads=2.0, num_kv_heads=1,
                      d_ff=4)
    for heads, kv_heads, message in ((3, 1, "num_heads=3 must divide d_model=8$"),
                                     (4, 3, "num_kv_heads=3 must divide num_heads=4$")):
        with pytest.raises(ValueError, match=message):
            DecoderConfig(vocab_size=5, d_model=8, num_layers=1, num_heads=heads,
                          num_kv_heads=kv_heads, d_ff=4)
    with pytest.raises(TypeError, match="config must be a DecoderConfig"):
        Decoder({"vocab_size": 5})


def test_from_weights_uses_the_tensors_and_restores_initialisation():
    source = tiny_decoder()
    state = source.state_dict()
    built = Decoder.from_weights(source.config, state)
    assert built.embed.weight.data_ptr() == state["embed.weight"].data_ptr()  # no copy
    ids = torch.arange(6)
    with torch.no_grad():
        torch.testing.assert_close(built(ids).logits, source(ids).logits, **TOL)
    torch.manual_seed(0)
    a = torch.nn.Linear(3, 3).weight
    torch.manual_seed(0)
    b = torch.nn.Linear(3, 3).weight
    assert torch.equal(a, b) and a.abs().sum() > 0  # initialisation works again
    del state["norm.weight"]
    with pytest.raises(RuntimeError, match="norm.weight"):
        Decoder.from_weights(source.config, state)
