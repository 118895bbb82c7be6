"""``attnbook.efficient``: blockwise attention and the key/value cache against ``attention``.

The reference is :func:`attnbook.attention.attention` (itself tested against PyTorch's SDPA),
computed in float64 on the same inputs.
"""

from __future__ import annotations

import itertools
import zlib

import pytest
import torch

from attnbook.attention import AttentionOutput, attention
from attnbook.efficient import (
    KVCache,
    blockwise_attention,
    decode_step,
    memory_traffic,
    peak_memory_bytes,
)
from attnbook.masks import causal_mask, padding_mask

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]

#: (atol, rtol) of a result in this dtype against the float64 reference.
TOL = {
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (4e-2, 4e-2),
    torch.float32: (2e-6, 2e-6),
    torch.float64: (1e-12, 1e-12),
}

#: name -> (q shape, k shape, v shape); S = 11 is a multiple of no block size tested but 1.
SHAPES = {
    "no_batch": ((9, 4), (11, 4), (11, 4)),
    "batched": ((2, 9, 4), (2, 11, 4), (2, 11, 4)),
    "two_batch_dims": ((2, 3, 9, 4), (2, 3, 11, 4), (2, 3, 11, 4)),
    "L_gt_S": ((2, 13, 4), (2, 5, 4), (2, 5, 4)),
    "Ev_ne_E": ((2, 9, 4), (2, 11, 4), (2, 11, 7)),
    "q_unbatched_kv_batched": ((9, 4), (2, 11, 4), (2, 11, 3)),
    "mixed_broadcast": ((3, 1, 9, 4), (1, 2, 11, 4), (11, 2)),
}

MASK_KINDS = ["none", "causal", "random", "padding", "fully_masked_row", "broadcast_rows",
              "broadcast_cols"]

#: 1: one key per tile; 4: S not a multiple; 64: one tile holds every key and query.
BLOCK_SIZES = [1, 4, 64]


def generator(name: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def randn(*shape: int, gen: torch.Generator, dtype: torch.dtype = torch.float64,
          requires_grad: bool = False) -> torch.Tensor:
    """Seeded normal values drawn in float64, then rounded to ``dtype``."""
    t = torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
    return t.requires_grad_(requires_grad)


def make_mask(kind: str, batch: torch.Size, L: int, S: int, gen: torch.Generator
              ) -> torch.Tensor | None:
    """A boolean mask (True = may attend) of the given kind."""
    if kind == "none":
        return None
    if kind == "causal":
        return causal_mask(L, S)  # (L, S)
    if kind == "padding":
        lengths = torch.randint(1, S + 1, (batch[-1] if batch else 1,), generator=gen)
        lengths[0] = S - 3  # at least one sequence really is padded
        return padding_mask(lengths, S)  # (B, 1, S), B the last batch dim
    if kind == "broadcast_rows":
        mask = torch.rand(1, S, generator=gen) < 0.5  # (1, S): the same row for every query
        mask[0, 0] = True
        return mask
    if kind == "broadcast_cols":
        mask = torch.rand(L, 1, generator=gen) < 0.7  # (L, 1): every key or none
        mask[0, 0], mask[1, 0] = True, False
        return mask
    mask = torch.rand(*batch, L, S, generator=gen) < 0.4  # (*batch, L, S)
    mask[..., torch.arange(L), torch.arange(L) % S] = True  # every row keeps a key...
    if kind == "fully_masked_row":
        mask[..., 1, :] = False  # ...but row 1, which keeps none
    return mask


def reference(q, k, v, mask=None, **kwargs) -> torch.Tensor:
    """``attention``'s output in float64 on the same (rounded) inputs."""
    q, k, v = (t.detach().double() for t in (q, k, v))
    return attention(q, k, v, mask, return_weights=False, **kwargs).output


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(actual.double(), expected.double(), atol=atol, rtol=rtol)


# --------------------------------------------------------------------------- blockwise


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_blockwise_matches_attention(shape_name, mask_kind, block_size):
    gen = generator(f"{shape_name}/{mask_kind}")
    q_shape, k_shape, v_shape = SHAPES[shape_name]
    q, k, v = (randn(*s, gen=gen) for s in (q_shape, k_shape, v_shape))
    batch = torch.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2])
    mask = make_mask(mask_kind, batch, q_shape[-2], k_shape[-2], gen)

    result = blockwise_attention(q, k, v, mask, block_size=block_size)
    expected = reference(q, k, v, mask)

    assert isinstance(result, AttentionOutput)
    assert result.weights is None
    assert result.output.shape == expected.shape
    assert torch.isfinite(result.output).all()
    assert_close(result.output, expected, torch.float64)
    if mask is not None:
        no_key = ~mask.any(dim=-1)  # (..., L): queries with no allowed key
        assert (result.output[no_key.expand(result.output.shape[:-1])] == 0).all()


@pytest.mark.parametrize("scale", [None, 1.0, 0.05])
def test_blockwise_scale(scale):
    gen = generator("scale")
    q, k, v = randn(2, 7, 5, gen=gen), randn(2, 9, 5, gen=gen), randn(2, 9, 3, gen=gen)
    out = blockwise_attention(q, k, v, causal_mask(7, 9), scale=scale, block_size=2).output
    assert_close(out, reference(q, k, v, causal_mask(7, 9), scale=scale), torch.float64)


@pytest.mark.parametrize("mask_kind", ["none", "causal", "fully_masked_row"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_blockwise_dtypes(dtype, mask_kind):
    gen = generator(f"dtype/{mask_kind}")
    q, k, v = (randn(2, 3, L, 8, gen=gen, dtype=dtype) for L in (20, 30, 30))
    mask = make_mask(mask_kind, torch.Size([2, 3]), 20, 30, gen)
    out = blockwise_attention(q, k, v, mask, block_size=8).output
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    assert_close(out, reference(q, k, v, mask), dtype)
    if mask_kind == "fully_masked_row":
        assert (out[..., 1, :] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_blockwise_every_row_masked_gives_zeros(dtype):
    gen = generator("all masked")
    q, k, v = (randn(2, 6, 4, gen=gen, dtype=dtype) for _ in range(3))
    out = blockwise_attention(q, k, v, torch.zeros(6, 6, dtype=torch.bool), block_size=4)
    assert out.output.dtype == dtype
    assert (out.output == 0).all()


def test_blockwise_large_scores_stay_finite():
    # Scores near 1000 overflow exp() in float32 unless the running maximum is subtracted.
    gen = generator("large")
    q, k, v = (randn(2, 30, 8, gen=gen, dtype=torch.float32) for _ in range(3))
    q, k = q * 30, k * 30
    assert torch.isinf(torch.exp(q @ k.mT / 8**0.5)).any()  # the naive way would overflow
    out = blockwise_attention(q, k, v, causal_mask(30), block_size=8).output
    assert torch.isfinite(out).all()
    # Scores near 1000 carry float32 rounding of about 1e-4, which the weights inherit.
    torch.testing.assert_close(out.double(), reference(q, k, v, causal_mask(30)),
                               atol=1e-3, rtol=1e-3)


def test_blockwise_very_negative_scores_after_masked_blocks():
    # Rows whose first key blocks are all masked start from a running max of -inf; the
    # later scores near -400 must still normalise to weights that sum to one, not
    # underflow to zero.
    gen = generator("negative")
    q = torch.full((6, 4), 10.0, dtype=torch.float64)
    k = -10.0 + randn(12, 4, gen=gen)
    v = randn(12, 3, gen=gen)
    mask = torch.zeros(6, 12, dtype=torch.bool)
    mask[:, 9:] = True  # only the last block of keys
    out = blockwise_attention(q, k, v, mask, scale=1.0, block_size=4).output
    expected = reference(q, k, v, mask, scale=1.0)
    assert expected.abs().max() > 0.1
    assert_close(out, expected, torch.float64)


def test_blockwise_empty_query():
    gen = generator("empty")
    q, k, v = randn(2, 0, 4, gen=gen), randn(2, 5, 4, gen=gen), randn(2, 5, 3, gen=gen)
    out = blockwise_attention(q, k, v, block_size=2).output
    assert out.shape == (2, 0, 3)


# --------------------------------------------------------------------------- backward

#: (atol, rtol) of a gradient against autograd's in the same dtype.
GRAD_TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10)}

GRAD_MASKS = ["none", "causal", "padding", "fully_masked_row", "broadcast_rows",
              "broadcast_cols"]


def grads(fn, q, k, v, upstream) -> tuple[torch.Tensor, ...]:
    """d(sum(fn(q, k, v) * upstream)) / d(q, k, v)."""
    return torch.autograd.grad((fn(q, k, v) * upstream).sum(), (q, k, v))


def _sdpa_zeroes_empty_rows() -> bool:
    """Whether PyTorch's SDPA gives a query with no allowed key a zero output (2.5 and
    later) rather than NaN (earlier versions, whose gradients there are NaN too)."""
    one = torch.ones(1, 1, 1)
    empty = torch.zeros(1, 1, dtype=torch.bool)
    return bool(torch.isfinite(torch.nn.functional.scaled_dot_product_attention(
        one, one, one, attn_mask=empty)).all())


SDPA_ZEROES_EMPTY_ROWS = _sdpa_zeroes_empty_rows()


def sdpa(q, k, v, mask):
    """PyTorch's SDPA on inputs expanded to one batch shape (it broadcasts less)."""
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2],
                                   *([] if mask is None else [mask.shape[:-2]]))
    q, k, v = (t.expand(*batch, *t.shape[-2:]) for t in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("mask_kind", GRAD_MASKS)
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_blockwise_gradients_match_autograd(shape_name, mask_kind, dtype):
    gen = generator(f"grad/{shape_name}/{mask_kind}")
    q_shape, k_shape, v_shape = SHAPES[shape_name]
    q, k, v = (randn(*s, gen=gen, dtype=dtype, requires_grad=True)
               for s in (q_shape, k_shape, v_shape))
    batch = torch.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2])
    mask = make_mask(mask_kind, batch, q_shape[-2], k_shape[-2], gen)
    out_shape = blockwise_attention(q, k, v, mask).output.shape
    upstream = randn(*out_shape, gen=gen, dtype=dtype)

    ours = grads(lambda q, k, v: blockwise_attention(q, k, v, mask, block_size=4).output,
                 q, k, v, upstream)
    references = {
        "attention": grads(lambda q, k, v: attention(q, k, v, mask).output, q, k, v, upstream),
        "sdpa": grads(lambda q, k, v: sdpa(q, k, v, mask), q, k, v, upstream),
    }
    if mask is not None and not mask.any(dim=-1).all() and not SDPA_ZEROES_EMPTY_ROWS:
        del references["sdpa"]  # an older PyTorch's NaN there is no reference
    atol, rtol = GRAD_TOL[dtype]
    for reference_name, theirs in references.items():
        for name, got, expected in zip("qkv", ours, theirs, strict=True):
            assert got.shape == expected.shape and got.dtype == dtype, name
            assert torch.isfinite(got).all(), name
            torch.testing.assert_close(got, expected, atol=atol, rtol=rtol,
                                       msg=lambda m, n=name, r=reference_name: f"d{n} vs {r}: {m}")
    if mask is not None:
        no_key = ~mask.any(dim=-1)  # (..., L): queries with no allowed key learn nothing
        grad_q = ours[0].expand(*out_shape[:-1], q_shape[-1])
        assert (grad_q[no_key.expand(out_shape[:-1])] == 0).all()  # exact: sums of 0 * k


@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding", "fully_masked_row"])
@pytest.mark.parametrize("block_size", [3, 64])  # 3: several tiles, lengths not multiples
def test_blockwise_gradcheck(mask_kind, block_size):
    gen = generator(f"gradcheck/{mask_kind}")
    q, k, v = (randn(2, L, W, gen=gen, requires_grad=True)
               for L, W in ((5, 3), (7, 3), (7, 4)))
    mask = make_mask(mask_kind, torch.Size([2]), 5, 7, gen)
    assert torch.autograd.gradcheck(
        lambda q, k, v: blockwise_attention(q, k, v, mask, block_size=block_size).output,
        (q, k, v))


def test_blockwise_gradient_of_one_input_only():
    gen = generator("grad one input")
    q, k = randn(2, 6, 4, gen=gen), randn(2, 9, 4, gen=gen)
    v = randn(2, 9, 5, gen=gen, requires_grad=True)
    (ours,) = torch.autograd.grad(blockwise_attention(q, k, v, block_size=4).output.sum(), v)
    (theirs,) = torch.autograd.grad(attention(q, k, v).output.sum(), v)
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=1e-12)


def test_blockwise_saves_nothing_of_size_L_by_S():
    # The forward pass keeps q, k, v, the output and the log-sum-exp (sizes L*E, S*E,
    # S*Ev, L*Ev and L) and the caller's mask, never a tile of weights, let alone the
    # (L, S) matrix.
    gen = generator("saved")
    L, S, E, Ev = 40, 48, 4, 5
    q, k = randn(2, L, E, gen=gen, requires_grad=True), randn(2, S, E, gen=gen)
    v = randn(2, S, Ev, gen=gen, requires_grad=True)
    mask = causal_mask(L, S)
    saved = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = blockwise_attention(q, k, v, mask, block_size=8).output
    assert out.requires_grad
    floats = sorted(t.numel() for t in saved if t.is_floating_point())
    assert floats == sorted([2 * L * E, 2 * S * E, 2 * S * Ev, 2 * L * Ev, 2 * L]), floats
    others = [t for t in saved if not t.is_floating_point()]
    assert len(others) == 1 and others[0] is mask


def test_blockwise_training_memory_grows_linearly():
    # Forward and backward together: peak memory linear in L, far below one (L, L) matrix.
    def training_peak(L: int) -> int:
        q, k, v = (torch.randn(1, 1, L, 16, requires_grad=True) for _ in range(3))
        upstream = torch.randn(1, 1, L, 16)
        # Few tiles keep the profiler's per-operation overhead small.
        return peak_memory_bytes(lambda: torch.autograd.grad(
            blockwise_attention(q, k, v, block_size=128).output, (q, k, v), upstream))

    peaks = {L: training_peak(L) for L in (256, 512, 1024)}
    # Linear: doubling L adds twice what the previous doubling added (a quadratic term: 4x).
    increments = (peaks[1024] - peaks[512]) / (peaks[512] - peaks[256])
    assert 1.8 < increments < 2.2, peaks
    assert peaks[1024] < 1024 * 1024 * 4 / 2, peaks  # under half of one (L, L) matrix


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_blockwise_gradients_finite_in_every_dtype(dtype):
    gen = generator(f"grad dtype {dtype}")
    q, k, v = (randn(2, 8, 4, gen=gen, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = make_mask("fully_masked_row", torch.Size([2]), 8, 8, gen)
    blockwise_attention(q, k, v, mask, block_size=3).output.sum().backward()
    for t in (q, k, v):
        assert t.grad.dtype == dtype
        assert torch.isfinite(t.grad).all()


@pytest.mark.parametrize("block_size, error, match", [
    (0, ValueError, "block_size must be at least 1, got 0"),
    (-3, ValueError, "block_size must be at least 1, got -3"),
    (2.5, TypeError, "block_size must be an int, got float"),
    (True, TypeError, "block_size must be an int, got bool"),
    ("8", TypeError, "block_size must be an int, got str"),
])
def test_blockwise_bad_block_size(block_size, error, match):
    gen = generator("bad")
    q, k, v = (randn(5, 4, gen=gen) for _ in range(3))
    with pytest.raises(error, match=match):
        blockwise_attention(q, k, v, block_size=block_size)


def test_blockwise_bad_inputs_are_refused_like_attention():
    gen = generator("bad inputs")
    q, k, v = randn(2, 5, 4, gen=gen), randn(2, 6, 4, gen=gen), randn(2, 6, 3, gen=gen)
    with pytest.raises(ValueError, match="same feature size E"):
        blockwise_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match="same length S"):
        blockwise_attention(q, k, v[..., :5, :])
    with pytest.raises(TypeError, match="share one dtype"):
        blockwise_attention(q, k.float(), v)
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        blockwise_attention(q, k, v, torch.ones(5, 6))
    with pytest.raises(ValueError, match=r"does not broadcast to \(\.\.\., L, S\)"):
        blockwise_attention(q, k, v, torch.ones(5, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match="batch dimensions of q, k, v do not broadcast"):
        blockwise_attention(q, randn(3, 6, 4, gen=gen), randn(3, 6, 3, gen=gen))
    with pytest.raises(TypeError, match="scale must be a real number"):
        blockwise_attention(q, k, v, scale="0.5")


# --------------------------------------------------------------------------- memory


def test_peak_memory_bytes_counts_what_torch_allocates():
    assert peak_memory_bytes(lambda: torch.empty(1000, dtype=torch.float32)) == 4000

    def two_then_one() -> torch.Tensor:
        first = torch.empty(1000, dtype=torch.float64)  # 8000 bytes
        second = torch.empty(500, dtype=torch.float64)  # 4000 more: peak 12000
        del first, second
        return torch.empty(100, dtype=torch.float64)

    assert peak_memory_bytes(two_then_one) == 12000
    assert peak_memory_bytes(lambda: None) == 0
    with pytest.raises(TypeError, match="fn must be callable"):
        peak_memory_bytes(42)


def test_peak_memory_bytes_is_deterministic():
    q, k, v = (torch.randn(1, 2, 200, 16) for _ in range(3))
    runs = [peak_memory_bytes(lambda: blockwise_attention(q, k, v, block_size=64))
            for _ in range(2)]
    assert runs[0] > 0
    assert runs[0] == runs[1]


def test_blockwise_memory_grows_linearly_and_full_attention_quadratically():
    def peaks_at(L: int) -> dict[tuple[str, int], int]:
        q, k, v = (torch.randn(1, 1, L, 64) for _ in range(3))  # (B, h, L, E)
        return {("full", L): peak_memory_bytes(lambda: attention(q, k, v)),
                ("blockwise", L): peak_memory_bytes(
                    lambda: blockwise_attention(q, k, v, block_size=64))}

    peaks = peaks_at(256) | peaks_at(512) | peaks_at(1024)
    # What doubling L adds, over what the previous doubling added: 2 for memory linear in L
    # (plus a constant: the tiles), 4 for full attention's (L, S) scores and weights.
    for method, low, high in (("full", 3.5, 4.5), ("blockwise", 1.8, 2.2)):
        increments = ((peaks[method, 1024] - peaks[method, 512])
                      / (peaks[method, 512] - peaks[method, 256]))
        assert low < increments < high, (method, peaks)
    # Blockwise never holds even half of one (L, S) matrix of float32 scores.
    assert peaks["blockwise", 512] < 512 * 512 * 4 / 2, peaks


# --------------------------------------------------------------------------- KV cache

#: name -> (batch shape, L, E, Ev)
CACHE_SHAPES = {
    "no_batch": ((), 7, 4, 4),
    "batched": ((2,), 9, 4, 3),
    "batch_and_heads": ((2, 3), 8, 5, 6),
}


def sequence(batch: tuple[int, ...], L: int, E: int, Ev: int, dtype: torch.dtype,
             name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = generator(name)
    return (randn(*batch, L, E, gen=gen, dtype=dtype), randn(*batch, L, E, gen=gen, dtype=dtype),
            randn(*batch, L, Ev, gen=gen, dtype=dtype))


def causal_reference(q, k, v) -> torch.Tensor:
    """Full causal attention, recomputed from scratch."""
    return attention(q, k, v, causal_mask(q.shape[-2])).output


@pytest.mark.parametrize("max_len", [None, "exact", "roomy"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape_name", list(CACHE_SHAPES))
def test_token_by_token_equals_full_causal_attention(shape_name, dtype, max_len):
    batch, L, E, Ev = CACHE_SHAPES[shape_name]
    q, k, v = sequence(batch, L, E, Ev, dtype, shape_name)
    capacity = {None: None, "exact": L, "roomy": L + 5}[max_len]
    cache = KVCache(max_len=capacity)
    steps = [decode_step(q[..., t:t + 1, :], k[..., t:t + 1, :], v[..., t:t + 1, :], cache)
             for t in range(L)]
    assert all(step.output.shape == (*batch, 1, Ev) for step in steps)
    assert len(cache) == L
    assert torch.equal(cache.keys, k) and torch.equal(cache.values, v)
    decoded = torch.cat([step.output for step in steps], dim=-2)  # (..., L, Ev)
    assert decoded.dtype == dtype
    assert_close(decoded, causal_reference(q, k, v), dtype)


@pytest.mark.parametrize("prefill", [1, 3, 8])
@pytest.mark.parametrize("max_len", [None, 8])
def test_prefill_then_decode_equals_full(prefill, max_len):
    batch, L, E, Ev = (2, 3), 8, 5, 6
    q, k, v = sequence(batch, L, E, Ev, torch.float64, "prefill")
    cache = KVCache(max_len=max_len)
    first = decode_step(q[..., :prefill, :], k[..., :prefill, :], v[..., :prefill, :], cache)
    rest = [decode_step(q[..., t:t + 1, :], k[..., t:t + 1, :], v[..., t:t + 1, :], cache)
            for t in range(prefill, L)]
    decoded = torch.cat([first.output, *(step.output for step in rest)], dim=-2)
    assert decoded.shape == (*batch, L, Ev)
    assert_close(decoded, causal_reference(q, k, v), torch.float64)


def test_chunks_after_a_prefill_see_the_causal_mask_aligned_to_the_end():
    q, k, v = sequence((2,), 10, 4, 3, torch.float64, "chunks")
    cache = KVCache()
    outputs = [decode_step(q[..., a:b, :], k[..., a:b, :], v[..., a:b, :], cache).output
               for a, b in ((0, 4), (4, 7), (7, 8), (8, 10))]
    assert_close(torch.cat(outputs, dim=-2), causal_reference(q, k, v), torch.float64)


def test_attend_weights_are_the_last_rows_of_full_causal_weights():
    q, k, v = sequence((2,), 6, 4, 3, torch.float64, "weights")
    cache = KVCache(max_len=6)
    cache.append(k, v)
    result = cache.attend(q[..., 3:, :], return_weights=True)
    full = attention(q, k, v, causal_mask(6))
    assert result.weights.shape == (2, 3, 6)
    assert_close(result.weights, full.weights[..., 3:, :], torch.float64)
    assert_close(result.output, full.output[..., 3:, :], torch.float64)


def test_growing_cache_passes_gradients_like_full_attention():
    q, k, v = (t.requires_grad_() for t in sequence((2,), 5, 4, 3, torch.float64, "grads"))
    cache = KVCache()
    decoded = torch.cat([decode_step(q[..., t:t + 1, :], k[..., t:t + 1, :],
                                     v[..., t:t + 1, :], cache).output for t in range(5)], -2)
    ours = torch.autograd.grad(decoded.pow(2).sum(), (q, k, v))
    theirs = torch.autograd.grad(causal_reference(q, k, v).pow(2).sum(), (q, k, v))
    for got, expected in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-10)


def test_appends_do_not_alias_the_callers_tensors():
    k, v = torch.zeros(2, 1, 4), torch.zeros(2, 1, 3)
    for max_len in (None, 4):
        cache = KVCache(max_len=max_len)
        cache.append(k, v)
        k.fill_(1.0)
        assert (cache.keys == 0).all()
        k.zero_()


def test_capacity_overflow_raises_and_keeps_the_cache():
    cache = KVCache(max_len=4)
    k, v = torch.randn(2, 3, 4), torch.randn(2, 3, 5)
    cache.append(k, v)
    with pytest.raises(ValueError, match="holds 3 of max_len=4 positions and cannot take 2"):
        cache.append(torch.randn(2, 2, 4), torch.randn(2, 2, 5))
    assert len(cache) == 3
    assert torch.equal(cache.keys, k)
    cache.append(torch.randn(2, 1, 4), torch.randn(2, 1, 5))
    assert len(cache) == 4
    with pytest.raises(ValueError, match="max_len=4"):
        cache.append(torch.randn(2, 1, 4), torch.randn(2, 1, 5))


@pytest.mark.parametrize("k_new, v_new, error, match", [
    (torch.randn(2, 1, 5), torch.randn(2, 1, 3), ValueError, "widths E=5, Ev=3"),
    (torch.randn(2, 1, 4), torch.randn(2, 1, 2), ValueError, "widths E=4, Ev=2"),
    (torch.randn(3, 1, 4), torch.randn(3, 1, 3), ValueError, r"batch shape \(3,\)"),
    (torch.randn(1, 4), torch.randn(1, 3), ValueError, r"batch shape \(\)"),
    (torch.randn(2, 1, 4).double(), torch.randn(2, 1, 3).double(), TypeError,
     "dtype torch.float64 but the cache holds torch.float32"),
    (torch.randn(2, 1, 4), torch.randn(2, 1, 3).double(), TypeError, "share one dtype"),
    (torch.randn(2, 2, 4), torch.randn(2, 1, 3), ValueError, "the same n >= 1"),
    (torch.randn(2, 0, 4), torch.randn(2, 0, 3), ValueError, "the same n >= 1"),
    (torch.randn(4), torch.randn(2, 1, 3), ValueError, r"k_new must have shape \(\.\.\., n, E\)"),
    (torch.ones(2, 1, 4, dtype=torch.long), torch.randn(2, 1, 3), TypeError,
     "k_new must be a floating-point tensor"),
    ([[0.0] * 4], torch.randn(2, 1, 3), TypeError, "k_new must be a torch.Tensor, got list"),
    (torch.randn(2, 1, 4), None, TypeError, "v_new must be a torch.Tensor, got NoneType"),
])
@pytest.mark.parametrize("max_len", [None, 10])
def test_append_refuses_what_does_not_fit(max_len, k_new, v_new, error, match):
    cache = KVCache(max_len=max_len)
    k, v = torch.randn(2, 3, 4), torch.randn(2, 3, 3)
    cache.append(k, v)
    with pytest.raises(error, match=match):
        cache.append(k_new, v_new)
    assert len(cache) == 3
    assert torch.equal(cache.keys, k) and torch.equal(cache.values, v)


def test_attend_refuses_an_empty_cache_and_too_many_queries():
    cache = KVCache()
    with pytest.raises(ValueError, match="the cache is empty"):
        cache.attend(torch.randn(1, 4))
    with pytest.raises(ValueError, match="the cache is empty"):
        cache.keys  # noqa: B018
    cache.append(torch.randn(2, 3, 4), torch.randn(2, 3, 3))
    with pytest.raises(ValueError, match=r"1 <= n <= 3 .* got shape \(2, 4, 4\)"):
        cache.attend(torch.randn(2, 4, 4))
    with pytest.raises(ValueError, match="same feature size E"):
        cache.attend(torch.randn(2, 1, 5))


def test_decode_step_checks_before_touching_the_cache():
    cache = KVCache(max_len=5)
    cache.append(torch.randn(2, 1, 4), torch.randn(2, 1, 3))
    with pytest.raises(ValueError, match="same n new positions"):
        decode_step(torch.randn(2, 2, 4), torch.randn(2, 1, 4), torch.randn(2, 1, 3), cache)
    with pytest.raises(ValueError, match="same feature size E"):
        decode_step(torch.randn(2, 1, 5), torch.randn(2, 1, 4), torch.randn(2, 1, 3), cache)
    with pytest.raises(ValueError, match="q_new and k_new do not broadcast"):
        decode_step(torch.randn(3, 1, 4), torch.randn(2, 1, 4), torch.randn(2, 1, 3), cache)
    with pytest.raises(TypeError, match="cache must be a KVCache, got dict"):
        decode_step(torch.randn(2, 1, 4), torch.randn(2, 1, 4), torch.randn(2, 1, 3), {})
    assert len(cache) == 1


def test_preallocated_cache_refuses_inputs_that_need_gradients():
    cache = KVCache(max_len=3)
    k = torch.randn(1, 4, requires_grad=True)
    with pytest.raises(ValueError, match="writes in place"):
        cache.append(k, torch.randn(1, 3))
    assert len(cache) == 0
    with torch.no_grad():
        cache.append(k, torch.randn(1, 3))
    assert len(cache) == 1


@pytest.mark.parametrize("max_len, error, match", [
    (0, ValueError, "max_len must be at least 1, got 0"),
    (2.5, TypeError, "max_len must be an int, got float"),
])
def test_bad_max_len(max_len, error, match):
    with pytest.raises(error, match=match):
        KVCache(max_len=max_len)


# --------------------------------------------------------------- the memory-traffic model


class FastMemory:
    """A scratchpad of ``capacity`` numbers that counts what crosses from and to slow memory.

    Blocks are loaded (read from slow memory), made on chip (no traffic), stored (written
    to slow memory) and freed, by name. Holding more than ``capacity`` numbers at once
    fails with an AssertionError that says "overflows".
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held: dict[str, int] = {}
        self.reads = self.writes = 0

    def make(self, name: str, n: int) -> None:
        assert name not in self.held, f"{name} is already in fast memory"
        self.held[name] = n
        assert sum(self.held.values()) <= self.capacity, (
            f"{self.held} overflows {self.capacity}")

    def load(self, name: str, n: int) -> None:
        self.make(name, n)
        self.reads += n

    def store(self, name: str) -> None:
        self.writes += self.held[name]

    def free(self, *names: str) -> None:
        for name in names:
            del self.held[name]


def simulate_tiled(L: int, S: int, E: int, Ev: int, capacity: int, query_block: int,
                   key_block: int) -> FastMemory:
    """Walk blockwise attention's loops, blocks of queries outside and of keys inside."""
    fast = FastMemory(capacity)
    for row in range(0, L, query_block):
        rows = min(query_block, L - row)
        fast.load("q", rows * E)
        fast.make("u", rows * Ev)  # the unnormalised output
        fast.make("m", rows)  # running maximum
        fast.make("r", rows)  # running row sum
        for col in range(0, S, key_block):
            cols = min(key_block, S - col)
            fast.load("k", cols * E)
            fast.load("v", cols * Ev)
            fast.make("scores", rows * cols)  # exponentiated in place into weights
            fast.free("k", "v", "scores")
        # u / r in place is the output; m + log(r) in place is the log-sum-exp.
        fast.store("u")
        fast.store("m")
        fast.free("q", "u", "m", "r")
    assert not fast.held
    return fast


#: (L, S, E, Ev, fast_memory, key_block): lengths that no block divides, E != Ev, the
#: smallest fast memory that works (50 + 512 = 562 numbers), one that holds everything.
TRAFFIC_CASES = [
    (100, 70, 8, 8, 500, None),
    (37, 53, 4, 6, 300, 5),
    (64, 64, 16, 16, 562, None),
    (9, 11, 4, 4, 10**6, None),
    (5, 3, 8, 2, 1000, None),
    (4096, 4096, 64, 64, 2**15, None),
]


@pytest.mark.parametrize("L, S, E, Ev, fast_memory, key_block", TRAFFIC_CASES)
def test_tiled_traffic_is_what_walking_the_tile_loop_moves(L, S, E, Ev, fast_memory,
                                                           key_block):
    traffic = memory_traffic(L, S, E, Ev, fast_memory=fast_memory, key_block=key_block)
    assert traffic.key_block == (min(E, S) if key_block is None else key_block)
    walked = simulate_tiled(L, S, E, Ev, fast_memory, traffic.query_block,
                            traffic.key_block)  # fails if the tiles overflow
    assert (traffic.tiled_reads, traffic.tiled_writes) == (walked.reads, walked.writes)
    assert traffic.tiled == walked.reads + walked.writes
    # The query block is the largest that fits: one more query overflows.
    assert 1 <= traffic.query_block <= L
    if traffic.query_block < L:
        with pytest.raises(AssertionError, match="overflows"):
            simulate_tiled(L, S, E, Ev, fast_memory, traffic.query_block + 1,
                           traffic.key_block)


@pytest.mark.parametrize("L, S, E, Ev, fast_memory, key_block", TRAFFIC_CASES)
def test_full_traffic_is_three_passes_over_the_matrices(L, S, E, Ev, fast_memory,
                                                            key_block):
    traffic = memory_traffic(L, S, E, Ev, fast_memory=fast_memory, key_block=key_block)
    # Z and A are each written once and read once; q, k, v read once; the output written.
    assert traffic.full == 4 * L * S + (L + S) * (E + Ev)
    assert traffic.full_writes == 2 * L * S + L * Ev
    # It does not depend on the fast memory.
    assert memory_traffic(L, S, E, Ev, fast_memory=10 * fast_memory,
                          key_block=key_block).full == traffic.full


def test_tiled_reads_each_input_once_when_every_query_fits():
    traffic = memory_traffic(50, 40, 8, 6, fast_memory=10**6)
    assert traffic.query_block == 50
    assert traffic.tiled_reads == 50 * 8 + 40 * (8 + 6)
    assert traffic.tiled_writes == 50 * (6 + 1)


def test_tiled_traffic_falls_like_one_over_fast_memory():
    """FlashAttention's Theta(N^2 d^2 / M): reads of k and v times M stay in a band."""
    N, d = 2**16, 64
    sizes = [2**k for k in range(15, 21)]
    kv_reads = [memory_traffic(N, N, d, fast_memory=M).tiled_reads - N * d for M in sizes]
    constants = [reads * M / (N * N * d * 2 * d) for reads, M in zip(kv_reads, sizes,
                                                                     strict=True)]
    assert max(constants) < 1.4 * min(constants), constants
    assert kv_reads[1] / kv_reads[4] > 6  # 8x the fast memory, 1/sqrt(M) would give 2.8x
    # More fast memory never moves more, and past a few queries per tile beats full.
    fine = [memory_traffic(1000, 1000, 16, fast_memory=M) for M in range(562, 40_000, 97)]
    assert all(a.tiled >= b.tiled for a, b in itertools.pairwise(fine))
    assert all(t.tiled < t.full for t in fine if t.query_block >= 2 * 16)
    assert fine[0].tiled > fine[0].full  # one query per tile: k and v read L times


@pytest.mark.parametrize("kwargs, error, match", [
    ({"L": 0}, ValueError, "L must be at least 1, got 0"),
    ({"S": 2.0}, TypeError, "S must be an int, got float"),
    ({"E": True}, TypeError, "E must be an int, got bool"),
    ({"Ev": -1}, ValueError, "Ev must be at least 1"),
    ({"fast_memory": "big"}, TypeError, "fast_memory must be an int, got str"),
    ({"fast_memory": 561}, ValueError, "fast_memory=561 cannot hold one query.*562"),
    ({"key_block": 65}, ValueError, "key_block must be between 1 and 64, got 65"),
    ({"key_block": 0}, ValueError, "key_block must be between 1 and 64, got 0"),
])
def test_memory_traffic_refuses_bad_sizes(kwargs, error, match):
    args = {"L": 64, "S": 64, "E": 16, "Ev": 16, "fast_memory": 4096} | kwargs
    L, S, E, Ev = args.pop("L"), args.pop("S"), args.pop("E"), args.pop("Ev")
    with pytest.raises(error, match=match):
        memory_traffic(L, S, E, Ev, **args)
