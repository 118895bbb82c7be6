"""Tests of exercise language-model-ex3. Run from the repository root:
`.venv/bin/python -m pytest exercises/language_model`."""

import torch

from attnbook.attention import grouped_attention
from attnbook.checks import check_cached_rope_step
from attnbook.efficient import KVCache
from attnbook.masks import causal_mask, sliding_window_mask
from attnbook.positions import rope

from .solution import cached_rope_step


def random(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


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


def test_against_the_package():
    check_cached_rope_step(cached_rope_step)
