"""Tests of exercises language-model-ex1 to language-model-ex4. Run from the repository root:
`.venv/bin/python -m pytest exercises/language_model`."""

import torch

from attnbook.attention import grouped_attention
from attnbook.checks import (
    check_cache_bytes_per_token,
    check_cached_rope_step,
    check_repeat_kv,
    check_window_mask,
)
from attnbook.decoder import DecoderConfig
from attnbook.efficient import KVCache
from attnbook.masks import causal_mask, sliding_window_mask
from attnbook.positions import rope

from .solution import cache_bytes_per_token, cached_rope_step, repeat_kv, window_mask


def random(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# language-model-ex1: repeat_kv


def test_repeat_kv_by_hand():
    kv = torch.arange(3.0)[:, None, None]  # (h_kv, S, E) = (3, 1, 1): head j holds j
    expanded = repeat_kv(kv, 6)
    assert isinstance(expanded, torch.Tensor) and tuple(expanded.shape) == (6, 1, 1), (
        f"3 key/value heads for 6 query heads: expected shape (6, 1, 1), got "
        f"{tuple(getattr(expanded, 'shape', ()))}"
    )
    assert expanded.flatten().tolist() == [0, 0, 1, 1, 2, 2], (
        f"key/value head j serves the 2 consecutive query heads 2j and 2j + 1, so query heads "
        f"0 .. 5 read key/value heads [0, 0, 1, 1, 2, 2]; got "
        f"{expanded.flatten().tolist()}"
    )
    batched = repeat_kv(torch.zeros(2, 3, 4, 5), 9)  # (B, h_kv, S, E)
    assert tuple(batched.shape) == (2, 9, 4, 5), (
        f"with a batch in front the heads are still dim -3: kv (2, 3, 4, 5) for 9 query heads "
        f"gives (2, 9, 4, 5), got {tuple(batched.shape)}"
    )


def test_repeat_kv_refuses_heads_it_cannot_share():
    refused = False
    try:
        repeat_kv(torch.zeros(1, 3, 2, 4), 8)
    except ValueError:
        refused = True
    assert refused, (
        "3 key/value heads cannot serve 8 query heads equally: check num_heads % h_kv and "
        "raise a ValueError"
    )


def test_repeat_kv_against_the_package():
    check_repeat_kv(repeat_kv)


# language-model-ex2: the size of the cache


def test_cache_bytes_of_a_tiny_decoder_by_hand():
    tiny = DecoderConfig(vocab_size=100, d_model=32, num_layers=2, num_heads=4,
                         num_kv_heads=2, d_ff=64)  # d_head = 32 / 4 = 8
    for bytes_per_number, expected in ((4, 256), (2, 128)):
        got = cache_bytes_per_token(tiny, bytes_per_number)
        assert got == expected, (
            f"2 (a key and a value) · 2 layers · 2 key/value heads · 8 numbers · "
            f"{bytes_per_number} bytes = {expected} bytes per token; got {got!r}"
        )


def test_cache_bytes_of_smollm2():
    smollm2 = DecoderConfig(vocab_size=49152, d_model=576, num_layers=30, num_heads=9,
                            num_kv_heads=3, d_ff=1536, rope_base=100000.0)
    got = cache_bytes_per_token(smollm2, 4)
    assert got == 46080, (
        f"SmolLM2-135M caches 2 · 30 layers · 3 key/value heads · 64 numbers · 4 bytes = "
        f"46080 bytes per token in float32 (its 9 query heads cache nothing); got {got!r}"
    )


def test_cache_bytes_against_the_package():
    check_cache_bytes_per_token(cache_bytes_per_token)


# language-model-ex3: one decoding step with RoPE and a cache


def test_the_first_token_sees_only_itself():
    q = random(1, 4, 1, 8, seed=0)  # (B, h, 1, E)
    k, v = random(1, 2, 1, 8, seed=1), random(1, 2, 1, 8, seed=2)  # (B, h_kv, 1, E)
    cache = KVCache()
    output = cached_rope_step(q, k, v, cache, 10000.0)
    # One key, of weight 1: each query head gets the value of its key/value head.
    expected = v.repeat_interleave(2, dim=1)  # (1, 4, 1, 8)
    assert torch.allclose(output, expected, atol=1e-6), (
        "with an empty cache the new token attends to itself alone, so query heads "
        "0, 1 get value head 0 and query heads 2, 3 value head 1"
    )
    assert cache.next_position == 1 and len(cache) == 1, (
        f"the step must append the new token to the cache: next_position is "
        f"{cache.next_position} and len(cache) {len(cache)}, expected 1 and 1"
    )
    assert torch.allclose(cache.keys, k, atol=1e-6), (
        "position 0 is not turned at all: the first cached key is k_new itself"
    )


def decode(q, k, v, cache, base):
    """The tokens one by one through cached_rope_step: the outputs, (B, h, L, E)."""
    token = [slice(t, t + 1) for t in range(q.shape[-2])]
    steps = [cached_rope_step(q[..., t, :], k[..., t, :], v[..., t, :], cache, base)
             for t in token]
    return torch.cat(steps, dim=-2)


def test_decoding_token_by_token_is_the_full_pass():
    L, base = 7, 100000.0
    q = random(1, 9, L, 16, seed=3)  # SmolLM2's 9 query heads
    k, v = random(1, 3, L, 16, seed=4), random(1, 3, L, 16, seed=5)  # and 3 kv heads
    positions = torch.arange(L)
    full = grouped_attention(rope(q, positions, base), rope(k, positions, base), v,
                             causal_mask(L)).output  # (1, 9, L, 16)
    cached = decode(q, k, v, KVCache(), base)
    assert torch.allclose(cached, full, atol=1e-5), (
        f"token by token with a cache must give the rows of one causal pass over "
        f"the whole text; largest difference {float((cached - full).abs().max()):.3g}"
    )


def test_a_window_that_dropped_tokens_keeps_the_positions():
    L, base, recent, sinks = 10, 10000.0, 3, 1
    q = random(1, 4, L, 8, seed=6)
    k, v = random(1, 2, L, 8, seed=7), random(1, 2, L, 8, seed=8)
    positions = torch.arange(L)
    full = grouped_attention(rope(q, positions, base), rope(k, positions, base), v,
                             sliding_window_mask(L, recent, sinks=sinks)).output
    cache = KVCache(recent=recent, sinks=sinks)
    cached = decode(q, k, v, cache, base)
    assert len(cache) < cache.next_position == L  # the window did drop tokens
    assert torch.allclose(cached, full, atol=1e-5), (
        f"with a window the cache holds {len(cache)} tokens but the last one is at "
        f"position {L - 1}: rotate at cache.next_position, not len(cache); largest "
        f"difference {float((cached - full).abs().max()):.3g}"
    )


def test_cached_rope_step_against_the_package():
    check_cached_rope_step(cached_rope_step)


# language-model-ex4: a sliding window with attention sinks


def test_window_mask_by_hand():
    mask = window_mask(5, 2, 1)
    assert isinstance(mask, torch.Tensor) and mask.dtype == torch.bool, (
        f"the mask is a boolean tensor, True where a query may attend; got "
        f"{type(mask).__name__} {getattr(mask, 'dtype', '')}"
    )
    expected = [[1, 0, 0, 0, 0],
                [1, 1, 0, 0, 0],
                [1, 1, 1, 0, 0],
                [1, 0, 1, 1, 0],
                [1, 0, 0, 1, 1]]
    assert mask.int().tolist() == expected, (
        f"5 tokens, a window of 2 and 1 sink: query i sees keys i - 1 and i, and key 0, "
        f"never a later key. Expected {expected}, got {mask.int().tolist()}"
    )


def test_window_mask_of_the_chapter():
    mask = window_mask(8, 3, 2)
    seen = {query: mask[query].nonzero().flatten().tolist() for query in (0, 1, 6)}
    expected = {0: [0], 1: [0, 1], 6: [0, 1, 4, 5, 6]}
    assert seen == expected, (
        f"8 tokens, a window of 3 and 2 sinks: query 6 sees the sinks 0, 1 and the window "
        f"4, 5, 6; query 0 sees itself only, since sink 1 comes after it. Expected the keys "
        f"{expected}, got {seen}"
    )


def test_window_mask_against_the_package():
    check_window_mask(window_mask)
