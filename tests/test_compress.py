"""attnbook.compress: a quantised, a forgetful and a low-rank key/value cache, each against a
plain reference."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnbook.compress import (
    HeavyHitterCache,
    decode_losses,
    heavy_hitter_keep,
    heavy_hitter_kv,
    heavy_hitter_mask,
    low_rank_factors,
    low_rank_kv,
    projection_inputs,
    quantize,
    quantized_kv,
)
from attnbook.decoder import Decoder, DecoderConfig
from attnbook.efficient import KVCache
from attnbook.masks import sliding_window_mask


def tiny_decoder(seed: int = 0) -> Decoder:
    """Two blocks, 4 query and 2 key/value heads of width 8: 2 * h_kv * d_head = d_model."""
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4,
                           num_kv_heads=2, d_ff=48, rope_base=100.0)
    return Decoder(config).double().eval()


def text(L: int = 24, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 40, (L,), generator=torch.Generator().manual_seed(seed))


def grouped_loop_reference(x: torch.Tensor, bits: int, per: str, group: int) -> torch.Tensor:
    """Min-max rounding written group by group, in float64, for a 2-D ``x`` ``(t, C)``."""
    rows = x.double() if per == "token" else x.double().T  # a group runs along a row
    out = torch.empty_like(rows)
    for r in range(rows.shape[0]):
        for start in range(0, rows.shape[1], group):
            piece = rows[r, start:start + group]
            low, high = piece.min(), piece.max()
            step = (high - low) / (2 ** bits - 1)
            codes = torch.zeros_like(piece) if step == 0 else ((piece - low) / step).round()
            out[r, start:start + group] = codes * step + low
    return out if per == "token" else out.T


@pytest.mark.parametrize("per", ["token", "channel"])
@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
def test_quantize_is_min_max_rounding_group_by_group(per, bits):
    x = torch.randn(12, 16, generator=torch.Generator().manual_seed(bits), dtype=torch.float64)
    group = 4 if per == "token" else 6
    q = quantize(x, bits, per=per, group=group, scale_dtype=torch.float64)
    expected = grouped_loop_reference(x, bits, per, group)
    torch.testing.assert_close(q.dequantize(), expected, rtol=0, atol=1e-12)
    assert q.codes.max() <= 2 ** bits - 1 and q.group == group


@pytest.mark.parametrize("per", ["token", "channel"])
def test_quantize_keeps_every_number_within_half_a_step(per):
    x = torch.randn(2, 3, 32, 16, generator=torch.Generator().manual_seed(0)) * 5
    q = quantize(x, 3, per=per, group=8, scale_dtype=torch.float32)
    error = (q.dequantize() - x).movedim(-1 if per == "token" else -2, -1).unflatten(-1, (-1, 8))
    assert q.dequantize().shape == x.shape
    assert bool((error.abs() <= q.scale / 2 * (1 + 1e-5) + 1e-6).all())


def test_quantize_ends_and_constant_groups():
    """One bit keeps each group's minimum and maximum; a constant group comes back exactly."""
    x = torch.tensor([[0.5, -1.0, 3.0, 2.0], [7.0, 7.0, 7.0, 7.0]])
    back = quantize(x, 1, per="token", scale_dtype=torch.float32).dequantize()
    assert back[0].tolist() == [-1.0, -1.0, 3.0, 3.0]
    assert back[1].tolist() == [7.0] * 4


def test_quantize_gives_back_the_dtype_and_counts_packed_bytes():
    x = torch.randn(768, 64, generator=torch.Generator().manual_seed(0)).half()
    token = quantize(x, 4, per="token")
    channel = quantize(x, 3, per="channel", group=128)
    assert token.dequantize().dtype == torch.float16
    # 4 bits a number, packed, and a float16 scale and minimum per 64 numbers:
    assert token.nbytes == 768 * 64 * 4 // 8 + 768 * 2 * 2
    # 3 bits a number (rounded up to whole bytes once), a scale and minimum per 128:
    assert channel.nbytes == math.ceil(768 * 64 * 3 / 8) + 64 * (768 // 128) * 2 * 2
    assert quantize(x, 4, per="token", scale_dtype=torch.float32).nbytes == \
        768 * 64 // 2 + 768 * 2 * 4


def test_per_channel_keeps_an_outlier_channel_to_itself():
    """The KIVI argument in miniature: one large channel widens every per-token step, so
    the ordinary channels lose precision per token and keep it per channel."""
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    x[:, 3] *= 50
    ordinary = [c for c in range(16) if c != 3]
    per_token = (quantize(x, 4, per="token").dequantize() - x)[:, ordinary].abs().mean()
    per_channel = (quantize(x, 4, per="channel").dequantize() - x)[:, ordinary].abs().mean()
    assert per_channel * 5 < per_token


@pytest.mark.parametrize("args, kwargs, error, message", [
    ((torch.ones(4, 4), 0), {"per": "token"}, ValueError, "bits must be between 1 and 16"),
    ((torch.ones(4, 4), 17), {"per": "token"}, ValueError, "bits must be between 1 and 16"),
    ((torch.ones(4, 4), 4.0), {"per": "token"}, TypeError, "bits must be an int"),
    ((torch.ones(4, 4), 4), {"per": "row"}, ValueError, "per must be one of"),
    ((torch.ones(4, 6), 4), {"per": "token", "group": 4}, ValueError, "group=4 must divide"),
    ((torch.ones(5, 4), 4), {"per": "channel", "group": 2}, ValueError, "positions t"),
    ((torch.ones(4, 4, dtype=torch.long), 4), {"per": "token"}, TypeError, "floating-point"),
    ((torch.ones(4), 4), {"per": "token"}, ValueError, r"\(\.\.\., t, C\)"),
    ((torch.tensor([[1.0, math.inf]]), 4), {"per": "token"}, ValueError, "finite"),
    ((torch.tensor([[1e6, 0.0]]), 4), {"per": "token"}, ValueError, "wider scale_dtype"),
    ((torch.ones(4, 4), 4), {"per": "token", "scale_dtype": torch.int8}, TypeError,
     "scale_dtype"),
    (([[1.0]], 4), {"per": "token"}, TypeError, "x must be a torch.Tensor"),
])
def test_quantize_bad_input(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        quantize(*args, **kwargs)


def observe_projection(decoder: Decoder, block: int, name: str) -> tuple[list, object]:
    """Record what a projection's forward returns after every earlier hook."""
    seen = []
    module = getattr(decoder.blocks[block].attn, name)
    handle = module.register_forward_hook(lambda m, i, o: seen.append((i[0], o)))
    return seen, handle


def test_quantized_kv_rounds_the_projections_and_then_lets_go():
    decoder, ids = tiny_decoder(), text(24)
    with torch.no_grad():
        exact = decoder(ids).logits
        with quantized_kv(decoder, key_bits=2, key_group=8, value_bits=3) as model:
            keys, key_handle = observe_projection(model, 1, "k_proj")
            values, value_handle = observe_projection(model, 0, "v_proj")
            rounded = model(ids).logits
        key_handle.remove(), value_handle.remove()
        after = decoder(ids).logits
    block = decoder.blocks[1].attn
    (x, k), = keys
    expected = quantize(F.linear(x, block.k_proj.weight), 2, per="channel", group=8)
    assert torch.equal(k, expected.dequantize())
    (x, v), = values
    expected = quantize(F.linear(x, decoder.blocks[0].attn.v_proj.weight), 3, per="token",
                        group=decoder.config.d_head)
    assert torch.equal(v, expected.dequantize())
    assert not torch.allclose(rounded, exact, atol=1e-3)
    assert torch.equal(after, exact)


def test_quantized_kv_at_sixteen_bits_is_nearly_exact():
    decoder, ids = tiny_decoder(), text(24)
    with torch.no_grad():
        exact = decoder(ids).logits
        with quantized_kv(decoder, key_bits=16, key_group=24, value_bits=16,
                          scale_dtype=torch.float64):
            fine = decoder(ids).logits
    torch.testing.assert_close(fine, exact, rtol=0, atol=1e-3)


def test_quantized_kv_bad_input():
    decoder = tiny_decoder()
    with pytest.raises(ValueError, match="key_group"):
        quantized_kv(decoder, key_bits=4, key_per="channel")
    with pytest.raises(ValueError, match="value_bits must be between 1 and 16"):
        quantized_kv(decoder, value_bits=0)
    with pytest.raises(ValueError, match="key_per must be one of"):
        quantized_kv(decoder, key_bits=4, key_per="head")
    with pytest.raises(TypeError, match="decoder must be an attnbook.decoder.Decoder"):
        with quantized_kv(torch.nn.Linear(2, 2), key_bits=4, key_group=2):
            pass
    with pytest.raises(TypeError, match="scale_dtype"):
        quantized_kv(decoder, value_bits=4, scale_dtype=torch.int32)
    with torch.no_grad(), quantized_kv(decoder, key_bits=4, key_group=8):
        with pytest.raises(ValueError, match=r"key_group=8 must divide the positions"):
            decoder(text(12))  # 12 tokens are not whole groups of 8
    with torch.no_grad():  # the hooks are gone after the error
        assert decoder(text(12)).logits.shape == (1, 12, 40)


def test_low_rank_factors_are_the_best_approximation():
    weight = torch.randn(12, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = torch.linalg.svdvals(weight)
    for rank in (1, 5, 12):
        up, down = low_rank_factors(weight, rank)
        assert up.shape == (12, rank) and down.shape == (rank, 20)
        error = torch.linalg.matrix_norm(weight - up @ down)
        assert math.isclose(float(error), float(s[rank:].square().sum().sqrt()),
                            rel_tol=1e-9, abs_tol=1e-9)
    with pytest.raises(ValueError, match="rank must be between 1 and 12"):
        low_rank_factors(weight, 13)
    with pytest.raises(ValueError, match=r"matrix \(d_out, d_in\)"):
        low_rank_factors(weight[0], 1)
    with pytest.raises(TypeError, match="floating-point"):
        low_rank_factors(weight.long(), 1)


def test_low_rank_kv_rebuilds_keys_and_values_from_one_latent():
    decoder, ids = tiny_decoder(), text(16)
    attn = decoder.blocks[0].attn
    width = attn.num_kv_heads * attn.d_head
    with torch.no_grad():
        exact = decoder(ids).logits
        with low_rank_kv(decoder, 2 * width):  # full rank: nothing is lost
            full = decoder(ids).logits
        with low_rank_kv(decoder, 6):
            keys, handle = observe_projection(decoder, 0, "k_proj")
            low = decoder(ids).logits
            handle.remove()
    torch.testing.assert_close(full, exact, rtol=0, atol=1e-9)
    assert not torch.allclose(low, exact, atol=1e-3)
    (x, k), = keys
    up, down = low_rank_factors(torch.cat([attn.k_proj.weight, attn.v_proj.weight]), 6)
    torch.testing.assert_close(k, x @ (up[:width] @ down).T, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="rank must be between 1 and 32"):
        low_rank_kv(decoder, 33)


def h2o_loop_reference(q, k, v, budget: int, recent: int, sinks: int) -> torch.Tensor:
    """Heavy-hitter decoding written head by head with Python lists: q ``(h, L, E)``,
    k and v ``(h_kv, L, E)``; the outputs ``(h, L, E)``."""
    h, L, E = q.shape
    h_kv = k.shape[0]
    group = h // h_kv
    held = [[] for _ in range(h_kv)]  # positions
    received = [dict() for _ in range(h_kv)]
    out = torch.zeros_like(q)
    for t in range(L):
        for j in range(h_kv):
            held[j].append(t)
            received[j][t] = 0.0
            while len(held[j]) > budget:  # evicted before the new token attends
                candidates = [p for p in held[j] if p >= sinks and t - p >= recent]
                evicted = min(candidates, key=lambda p: received[j][p])
                held[j].remove(evicted)
            keys = k[j, held[j]]
            for head in range(j * group, (j + 1) * group):
                weights = torch.softmax(keys @ q[head, t] / math.sqrt(E), dim=0)
                out[head, t] = weights @ v[j, held[j]]
                for p, w in zip(held[j], weights.tolist(), strict=True):
                    received[j][p] += w
    return out


@pytest.mark.parametrize("budget, recent, sinks", [(5, 2, 0), (6, 2, 2), (4, 1, 1)])
def test_heavy_hitter_cache_is_h2o_written_out(budget, recent, sinks):
    gen = torch.Generator().manual_seed(budget)
    q = torch.randn(4, 14, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 14, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 14, 8, generator=gen, dtype=torch.float64)
    cache = HeavyHitterCache(budget, recent=recent, sinks=sinks)
    outputs = []
    for t in range(14):
        cache.append(k[:, t:t + 1], v[:, t:t + 1])
        outputs.append(cache.attend(q[:, t:t + 1]).output)
        assert len(cache) == min(t + 1, budget)
        held = cache.positions  # (h_kv, t)
        assert bool((held[:, 1:] > held[:, :-1]).all())
        assert bool((held == t).any(dim=-1).all())  # the newest is always kept
        assert bool((held[:, :min(sinks, t + 1)] == torch.arange(min(sinks, t + 1))).all())
    expected = h2o_loop_reference(q, k, v, budget, recent, sinks)
    torch.testing.assert_close(torch.cat(outputs, dim=-2), expected, rtol=0, atol=1e-12)


def test_heavy_hitter_prefill_then_steps():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 10, 4, generator=gen)
    k, v = torch.randn(1, 2, 10, 4, generator=gen), torch.randn(1, 2, 10, 4, generator=gen)
    cache = HeavyHitterCache(4, recent=2)
    cache.append(k[..., :6, :], v[..., :6, :])
    weights = cache.attend(q[..., :6, :], return_weights=True).weights  # (1, 2, 6, 6)
    assert weights.shape == (1, 2, 6, 6) and bool((weights.triu(1) == 0).all())
    assert len(cache) == 4 and cache.received.shape == (1, 2, 4)
    cache.append(k[..., 6:7, :], v[..., 6:7, :])
    assert cache.attend(q[..., 6:7, :]).weights is None
    with pytest.raises(ValueError, match="one token at a time"):
        cache.append(k[..., 7:9, :], v[..., 7:9, :])
    assert "budget=4" in repr(cache)


@pytest.mark.parametrize("args, kwargs, error, message", [
    ((3,), {"recent": 2, "sinks": 2}, ValueError, "budget=3 must hold"),
    ((3,), {"recent": 0}, ValueError, "recent must be at least 1"),
    ((3.0,), {"recent": 1}, TypeError, "budget must be an int"),
    ((3,), {"recent": 1, "sinks": -1}, ValueError, "sinks must be at least 0"),
])
def test_heavy_hitter_cache_bad_input(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        HeavyHitterCache(*args, **kwargs)


def test_decode_losses_equal_one_pass_and_the_window_mask():
    decoder, ids = tiny_decoder(), text(20)
    with torch.no_grad():
        full = F.cross_entropy(decoder(ids).logits[0, :-1], ids[1:], reduction="none")
        window = sliding_window_mask(20, 5, sinks=2)
        masked = F.cross_entropy(decoder(ids, mask=window).logits[0, :-1], ids[1:],
                                 reduction="none")
    torch.testing.assert_close(decode_losses(decoder, ids), full, rtol=0, atol=1e-10)
    windowed = [KVCache(recent=5, sinks=2) for _ in decoder.blocks]
    torch.testing.assert_close(decode_losses(decoder, ids, windowed), masked, rtol=0,
                               atol=1e-10)
    roomy = [HeavyHitterCache(20, recent=1) for _ in decoder.blocks]
    torch.testing.assert_close(decode_losses(decoder, ids, roomy), full, rtol=0, atol=1e-10)
    tight = [HeavyHitterCache(6, recent=3, sinks=1) for _ in decoder.blocks]
    assert not torch.allclose(decode_losses(decoder, ids, tight), full, atol=1e-3)


def test_decode_losses_bad_input():
    decoder = tiny_decoder()
    with pytest.raises(ValueError, match="L >= 2"):
        decode_losses(decoder, text(1))
    with pytest.raises(TypeError, match="list of KVCache"):
        decode_losses(decoder, text(4), [None, None])
    used = decoder.new_caches()
    with torch.no_grad():
        decoder(text(3), caches=used)
    with pytest.raises(ValueError, match="caches must be empty"):
        decode_losses(decoder, text(4), used)
    with pytest.raises(TypeError, match="decoder must be"):
        decode_losses(torch.nn.Linear(2, 2), text(4))


def test_heavy_hitter_mask_replays_the_cache():
    """The mask's rows are what the cache held at each step, head by head."""
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(4, 16, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 16, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 16, 8, generator=gen, dtype=torch.float64)
    cache = HeavyHitterCache(6, recent=2, sinks=1)
    rows = []
    for t in range(16):
        cache.append(k[:, t:t + 1], v[:, t:t + 1])
        held = torch.zeros(2, 16, dtype=torch.bool)
        held.scatter_(-1, cache.positions, True)  # what the new token attends over
        rows.append(held)
        cache.attend(q[:, t:t + 1])
    scores = (q.unflatten(0, (2, 2)) @ k[:, None].transpose(-1, -2)).flatten(0, 1) / math.sqrt(8)
    scores = scores.masked_fill(~torch.ones(16, 16, dtype=torch.bool).tril(), -math.inf)
    mask = heavy_hitter_mask(scores, 2, 6, recent=2, sinks=1)
    assert mask.shape == (2, 16, 16)
    assert torch.equal(mask, torch.stack(rows, dim=1))
    assert int(mask.sum(-1).max()) == 6  # the budget, the new token's own key included


def test_heavy_hitter_kv_in_one_pass_equals_decoding_token_by_token():
    decoder, ids = tiny_decoder(), text(20)
    caches = [HeavyHitterCache(7, recent=3, sinks=1) for _ in decoder.blocks]
    streamed = decode_losses(decoder, ids, caches)
    with torch.no_grad(), heavy_hitter_kv(decoder, 7, recent=3, sinks=1):
        logits = decoder(ids).logits[0]
    torch.testing.assert_close(F.cross_entropy(logits[:-1], ids[1:], reduction="none"),
                               streamed, rtol=0, atol=1e-10)
    with torch.no_grad():  # and the hooks are gone
        plain = decoder(ids).logits[0]
    assert not torch.allclose(plain, logits, atol=1e-3)
    with pytest.raises(ValueError, match="budget=2 must hold"):
        with heavy_hitter_kv(decoder, 2, recent=2, sinks=1):
            pass
    with torch.no_grad(), heavy_hitter_kv(decoder, 7, recent=3):
        with pytest.raises(ValueError, match="not for a call with caches"):
            decoder(ids[:3], caches=decoder.new_caches())


@pytest.mark.parametrize("args, kwargs, error, message", [
    ((torch.zeros(4, 3, 5), 2, 3), {"recent": 1}, ValueError, r"\(\.\.\., h, L, L\)"),
    ((torch.zeros(3, 5, 5), 2, 3), {"recent": 1}, ValueError,
     r"num_kv_heads=2 must divide h=3 \(the heads of scores\)"),
    ((torch.zeros(4, 5, 5, dtype=torch.long), 2, 3), {"recent": 1}, TypeError,
     "floating-point"),
    ((torch.zeros(4, 5, 5), 2, 3), {"recent": 3, "sinks": 1}, ValueError, "budget=3"),
])
def test_heavy_hitter_mask_bad_input(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        heavy_hitter_mask(*args, **kwargs)


def test_calibrated_low_rank_fits_the_inputs_it_saw():
    """Fitted to the inputs of a text, the latent rebuilds that text's keys and values
    better than the plain SVD of the weights, and at full rank both are exact."""
    decoder, ids = tiny_decoder(), text(40, seed=3)
    attn = decoder.blocks[0].attn
    width = attn.num_kv_heads * attn.d_head
    errors = {}
    for name, calibration in (("plain", None), ("calibrated", ids)):
        with torch.no_grad(), low_rank_kv(decoder, 5, calibration=calibration):
            seen, handle = observe_projection(decoder, 0, "k_proj")
            decoder(ids)
            handle.remove()
        (x, k), = seen
        with torch.no_grad():
            errors[name] = float((k - x @ attn.k_proj.weight.T).square().sum())
        with torch.no_grad(), low_rank_kv(decoder, 2 * width, calibration=calibration):
            full = decoder(ids).logits
        with torch.no_grad():
            torch.testing.assert_close(full, decoder(ids).logits, rtol=0, atol=1e-8)
    assert errors["calibrated"] < errors["plain"]
    inputs = projection_inputs(decoder, ids)
    assert [tuple(x.shape) for x in inputs] == [(40, 32), (40, 32)]
    with torch.no_grad():
        with low_rank_kv(decoder, 5, calibration=ids):
            from_ids = decoder(ids).logits
        with low_rank_kv(decoder, 5, calibration=inputs):
            assert torch.equal(decoder(ids).logits, from_ids)
    with pytest.raises(TypeError, match="calibration must be token ids"):
        low_rank_kv(decoder, 5, calibration=inputs[:1])


def test_heavy_hitter_keep_by_hand():
    received = torch.tensor([0.9, 0.1, 0.6, 0.2, 0.3, 0.0])
    keep = heavy_hitter_keep(received, torch.arange(6), 5, recent=2, sinks=1)
    assert keep.tolist() == [0, 2, 3, 4, 5]  # position 1 received the least
    # of two that received the same, the older stays; a head per row
    tied = torch.tensor([[0.5, 0.2, 0.2, 0.9], [0.1, 0.3, 0.7, 0.0]])
    positions = torch.tensor([[0, 3, 4, 6], [0, 1, 5, 6]])
    assert heavy_hitter_keep(tied, positions, 3, recent=1).tolist() == [[0, 1, 3],
                                                                          [1, 2, 3]]
    assert heavy_hitter_keep(received[:3], torch.arange(3), 5, recent=1).tolist() == [0, 1, 2]


@pytest.mark.parametrize("args, kwargs, error, message", [
    ((torch.zeros(3), torch.arange(4), 2), {"recent": 1}, ValueError, "same shape"),
    ((torch.zeros(3), torch.arange(3.0), 2), {"recent": 1}, TypeError, "integers"),
    ((torch.zeros(3), torch.arange(3), 2), {"recent": 2, "sinks": 1}, ValueError,
     "budget=2 must hold"),
    (([0.0], torch.arange(1), 2), {"recent": 1}, TypeError, "received must be a torch"),
])
def test_heavy_hitter_keep_bad_input(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        heavy_hitter_keep(*args, **kwargs)
