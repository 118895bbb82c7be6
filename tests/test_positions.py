"""``attnbook.positions``: each encoding against its paper's formula, RoPE against Hugging
Face's LLaMA code, and the layers and tasks that use them."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

import attnbook.positions as positions_module
from attnbook.attention import attention
from attnbook.layers import MultiHeadAttention
from attnbook.lengths import SCHEMES, LastMarkerTask, length_experiment
from attnbook.masks import causal_mask
from attnbook.positions import (
    alibi_bias,
    alibi_slopes,
    interleaved_order,
    rope,
    rope_frequencies,
    sinusoidal,
)
from attnbook.training import TinyAttentionModel


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_public_names():
    assert {"sinusoidal", "rope", "alibi_bias"} <= set(positions_module.__all__)
    assert set(positions_module.__all__) <= set(dir(positions_module))


# ---------------------------------------------------------------------------- sinusoidal


@pytest.mark.parametrize(("L", "E"), [(1, 2), (7, 8), (50, 64), (12, 6)])
def test_sinusoidal_is_the_papers_formula(L, E):
    pe = sinusoidal(L, E)
    assert pe.shape == (L, E) and pe.dtype == torch.float32
    expected = torch.empty(L, E, dtype=torch.float64)
    for pos, i in itertools.product(range(L), range(E // 2)):
        expected[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / E))
        expected[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / E))
    torch.testing.assert_close(pe, expected.float(), atol=1e-6, rtol=0)


def test_sinusoidal_base_and_first_row():
    torch.testing.assert_close(sinusoidal(1, 6)[0], torch.tensor([0.0, 1.0] * 3))
    pe = sinusoidal(5, 4, base=100.0)
    torch.testing.assert_close(pe[3, 2:], torch.tensor([math.sin(0.3), math.cos(0.3)]))


# ---------------------------------------------------------------------------------- rope


def hf_rope(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """Hugging Face's LLaMA rotary embedding: cos/sin built as its rotary module builds
    them (the frequencies repeated for the two halves), applied by apply_rotary_pos_emb."""
    D = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    freqs = pos.double()[..., None] * inv_freq  # (B, L, D/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (B, L, D)
    rotated, _ = apply_rotary_pos_emb(x, x, emb.cos().to(x.dtype), emb.sin().to(x.dtype))
    return rotated


@pytest.mark.parametrize(("B", "h", "L", "D", "base", "seed"),
                         [(1, 1, 5, 2, 10000.0, 0), (2, 3, 7, 8, 10000.0, 1),
                          (2, 9, 11, 64, 100000.0, 2), (3, 2, 4, 16, 500.0, 3)])
def test_rope_matches_hugging_face_llama(B, h, L, D, base, seed):
    x = torch.randn(B, h, L, D, generator=generator(seed), dtype=torch.float64)
    pos = torch.randint(0, 4096, (B, L), generator=generator(seed + 10))
    ours = rope(x, pos[:, None, :], base)  # positions broadcast over heads
    torch.testing.assert_close(ours, hf_rope(x, pos, base), atol=1e-10, rtol=1e-10)


def test_rope_is_a_rotation_of_each_pair():
    D = 6
    x = torch.randn(4, D, generator=generator(5), dtype=torch.float64)
    pos = torch.tensor([0, 1, 5, 300])
    theta = rope_frequencies(D, dtype=torch.float64)
    torch.testing.assert_close(theta, torch.tensor([1.0, 10000 ** (-2 / 6), 10000 ** (-4 / 6)],
                                                   dtype=torch.float64))
    for layout, pairs in (("half-split", [(0, 3), (1, 4), (2, 5)]),
                          ("interleaved", [(0, 1), (2, 3), (4, 5)])):
        out = rope(x, pos, layout=layout)
        for row, m in enumerate(pos.tolist()):
            for i, (a, b) in enumerate(pairs):
                c, s = math.cos(m * theta[i]), math.sin(m * theta[i])
                expected = (c * x[row, a] - s * x[row, b], s * x[row, a] + c * x[row, b])
                torch.testing.assert_close(out[row, [a, b]], torch.stack(expected))
    assert torch.equal(rope(x, torch.zeros(4, dtype=torch.long)), x)
    torch.testing.assert_close(rope(x, pos).norm(dim=-1), x.norm(dim=-1))


def score(q: torch.Tensor, k: torch.Tensor, m: int, n: int, **kwargs) -> torch.Tensor:
    return rope(q, torch.tensor([m]), **kwargs) @ rope(k, torch.tensor([n]), **kwargs).T


@pytest.mark.parametrize("layout", ["half-split", "interleaved"])
def test_rope_scores_depend_only_on_the_offset(layout):
    q, k = torch.randn(2, 1, 32, generator=generator(11), dtype=torch.float64)
    cases = torch.randint(0, 2000, (60, 3), generator=generator(12)).tolist()
    for m, n, shift in cases:
        torch.testing.assert_close(score(q, k, m, n, layout=layout),
                                   score(q, k, m + shift, n + shift, layout=layout),
                                   atol=1e-9, rtol=1e-9)
        torch.testing.assert_close(score(q, k, m, n, layout=layout),
                                   score(q, k, m - n + 5000, 5000, layout=layout),
                                   atol=1e-9, rtol=1e-9)
    # ... and does depend on the offset.
    assert not torch.allclose(score(q, k, 3, 0, layout=layout), score(q, k, 4, 0, layout=layout))


def test_layouts_differ_and_a_reordering_converts_them():
    D = 16
    q, k = torch.randn(2, 6, D, generator=generator(21), dtype=torch.float64)
    pos = torch.arange(6)
    order = interleaved_order(D)
    assert sorted(order.tolist()) == list(range(D))
    assert order[:4].tolist() == [0, 8, 1, 9]
    torch.testing.assert_close(rope(q[..., order], pos, layout="interleaved"),
                               rope(q, pos)[..., order])
    half = rope(q, pos) @ rope(k, pos).T
    mixed = rope(q, pos, layout="interleaved") @ rope(k, pos, layout="interleaved").T
    fixed = (rope(q[..., order], pos, layout="interleaved")
             @ rope(k[..., order], pos, layout="interleaved").T)
    assert (half - mixed).abs().max() > 0.1  # the same weights, the other layout: wrong
    torch.testing.assert_close(half, fixed)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_rope_keeps_the_dtype(dtype):
    x = torch.randn(3, 8, generator=generator(0)).to(dtype)
    out = rope(x, torch.arange(3))
    assert out.dtype == dtype
    expected = rope(x.double(), torch.arange(3)).to(dtype)
    torch.testing.assert_close(out, expected)


# --------------------------------------------------------------------------------- alibi


def papers_get_slopes(n: int) -> list[float]:
    """ALiBi's reference get_slopes (Press et al., 2022), as published with the paper."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + papers_get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32])
def test_alibi_slopes_are_the_papers(n):
    slopes = alibi_slopes(n)
    assert slopes.shape == (n,) and slopes.dtype == torch.float32
    torch.testing.assert_close(slopes, torch.tensor(papers_get_slopes(n)))
    if n & (n - 1) == 0:
        torch.testing.assert_close(slopes, torch.tensor([2 ** (-8 * h / n)
                                                         for h in range(1, n + 1)]))


@pytest.mark.parametrize(("h", "L", "S"), [(1, 1, None), (4, 5, None), (6, 3, 7), (8, 1, 9)])
def test_alibi_bias_is_minus_slope_times_distance(h, L, S):
    bias = alibi_bias(h, L, S)
    S = L if S is None else S
    assert bias.shape == (h, L, S)
    slopes = alibi_slopes(h)
    for head, i, j in itertools.product(range(h), range(L), range(S)):
        query = S - L + i  # the queries are the last L positions
        assert math.isclose(bias[head, i, j].item(), -slopes[head].item() * (query - j),
                            rel_tol=1e-6, abs_tol=1e-7)
    causal = bias.masked_fill(~causal_mask(L, S, offset=S - L), 0)
    assert (causal <= 0).all()  # past keys are penalised, never favoured


# --------------------------------------------------------------------- bad input, named

BAD = [
    (lambda: sinusoidal(4, 7), ValueError, "E must be even"),
    (lambda: sinusoidal(0, 4), ValueError, "L must be at least 1"),
    (lambda: sinusoidal(4, 4.0), TypeError, "E must be an int"),
    (lambda: sinusoidal(4, 4, base=1), ValueError, "base must be a number > 1"),
    (lambda: rope(torch.zeros(3, 5), torch.arange(3)), ValueError, "must be even"),
    (lambda: rope(torch.zeros(3, 4), torch.arange(3.0)), TypeError,
     "positions must be an integer tensor"),
    (lambda: rope(torch.zeros(3, 4), torch.arange(4)), ValueError,
     r"positions must have shape \(\.\.\., L\) with L=3"),
    (lambda: rope(torch.zeros(3, 4, dtype=torch.long), torch.arange(3)), TypeError,
     "x must be a floating-point tensor"),
    (lambda: rope(torch.zeros(3, 4), [0, 1, 2]), TypeError, "positions must be a torch.Tensor"),
    (lambda: rope(torch.zeros(3, 4), torch.arange(3), layout="gptj"), ValueError,
     "layout must be one of"),
    (lambda: rope(torch.zeros(4), torch.arange(1)), ValueError, r"x must have shape"),
    (lambda: interleaved_order(5), ValueError, "D must be even"),
    (lambda: alibi_slopes(0), ValueError, "num_heads must be at least 1"),
    (lambda: alibi_bias(2, 5, 3), ValueError, "S must be at least L"),
    (lambda: alibi_bias(True, 5), TypeError, "num_heads must be an int"),
    (lambda: MultiHeadAttention(12, 4, position="rope"), ValueError, "needs an even d_head"),
    (lambda: MultiHeadAttention(8, 2, position="rotary"), ValueError,
     "position must be one of"),
    (lambda: MultiHeadAttention(8, 2, position="rope")(torch.zeros(1, 4, 8),
                                                       torch.zeros(1, 2, 8)),
     ValueError, "S must be at least L"),
    (lambda: MultiHeadAttention(8, 2, position="alibi")(torch.zeros(1, 4, 8)), ValueError,
     'position="alibi" needs a mask'),
    (lambda: attention(*torch.zeros(3, 2, 4), bias=torch.zeros(2, 2, dtype=torch.bool)),
     TypeError, "bias must be a floating-point tensor"),
    (lambda: attention(*torch.zeros(3, 2, 4), bias=torch.full((2, 2), -math.inf)),
     ValueError, "bias must be finite"),
    (lambda: attention(*torch.zeros(3, 2, 4), bias=torch.zeros(3, 2)), ValueError,
     "does not broadcast"),
    (lambda: LastMarkerTask(markers=16), ValueError, "markers must be between 2 and 15"),
    (lambda: LastMarkerTask(rate=1.0), ValueError, "rate must be between 0 and 1"),
    (lambda: length_experiment(LastMarkerTask, factors=(2, 4)), ValueError,
     "factors must start with 1"),
    (lambda: length_experiment(LastMarkerTask, schemes=("rotary",)), ValueError,
     "schemes must be some of"),
    (lambda: length_experiment(lambda n: LastMarkerTask(length=8)), ValueError,
     "must return a task of length 16"),
]


@pytest.mark.parametrize(("call", "error", "message"), BAD, ids=[b[2][:40] for b in BAD])
def test_bad_input_is_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ----------------------------------------------------------------- attention and layers


@pytest.mark.parametrize("masked", [False, True])
def test_attention_bias_matches_sdpa_with_a_float_mask(masked):
    q, k, v = torch.randn(3, 2, 4, 6, 8, generator=generator(3), dtype=torch.float64)
    bias = alibi_bias(4, 6).double()  # (h, L, S)
    mask = causal_mask(6) if masked else None
    float_mask = bias if mask is None else bias.masked_fill(~mask, -math.inf)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
    out, weights = attention(q, k, v, mask, bias=bias)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(attention(q, k, v, mask, bias=bias, return_weights=False).output,
                               expected)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    torch.testing.assert_close(weights, scores.softmax(-1))


def test_attention_bias_keeps_empty_rows_at_zero():
    q, k, v = torch.randn(3, 1, 3, 4, generator=generator(4))
    mask = torch.tensor([[False, False, False], [True, False, False], [True, True, True]])
    bias = alibi_bias(1, 3)
    for fused in (False, True):
        out = attention(q, k, v, mask, bias=bias, return_weights=not fused).output
        assert torch.isfinite(out).all() and torch.equal(out[0, 0], torch.zeros(4))


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_multi_head_attention_with_positions_in_the_scores(position):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, position=position).double()
    x = torch.randn(2, 7, 16, generator=generator(8), dtype=torch.float64)
    mask = causal_mask(7)
    out, weights = layer(x, mask=mask)
    q, k, v = (layer.split_heads(p(x)) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    bias = None
    if position == "rope":
        q, k = rope(q, torch.arange(7)), rope(k, torch.arange(7))
    else:
        bias = alibi_bias(4, 7).double()
    expected_heads, expected_weights = attention(q, k, v, mask, bias=bias)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(out, layer.out_proj(layer.merge_heads(expected_heads)))
    torch.testing.assert_close(layer(x, mask=mask, return_weights=False).output, out)


@pytest.mark.parametrize("position", [None, "rope"])
def test_only_positions_break_permutation_equivariance(position):
    torch.manual_seed(1)
    layer = MultiHeadAttention(8, 2, position=position).double()
    x = torch.randn(1, 6, 8, generator=generator(9), dtype=torch.float64)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    shuffled_then = layer(x[:, perm]).output
    then_shuffled = layer(x).output[:, perm]
    if position is None:
        torch.testing.assert_close(shuffled_then, then_shuffled)
    else:
        assert (shuffled_then - then_shuffled).abs().max() > 1e-3


def test_rope_layer_scores_shift_with_the_sequence():
    """A RoPE layer's self-attention over tokens a b c placed after a prefix equals, on those
    rows and columns, the same attention restricted to them: only offsets matter."""
    torch.manual_seed(2)
    layer = MultiHeadAttention(8, 2, position="rope").double()
    x = torch.randn(1, 5, 8, generator=generator(10), dtype=torch.float64)
    q = layer.split_heads(layer.q_proj(x))
    k = layer.split_heads(layer.k_proj(x))
    early = rope(q, torch.arange(5)) @ rope(k, torch.arange(5)).transpose(-2, -1)
    late = rope(q, torch.arange(100, 105)) @ rope(k, torch.arange(100, 105)).transpose(-2, -1)
    torch.testing.assert_close(early, late)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_tiny_model_takes_every_scheme(scheme):
    model = TinyAttentionModel(10, 12, d_model=16, num_heads=2, positions=scheme)
    tokens = torch.randint(10, (2, 12), generator=generator(0))
    logits, weights = model(tokens, causal_mask(12))
    assert logits.shape == (2, 12, 10) and weights.shape == (2, 2, 12, 12)
    assert (model.position_embedding is not None) == (scheme == "learned")
    assert model.attention.position == (scheme if scheme in ("rope", "alibi") else None)


# -------------------------------------------------------------------- the length tasks


def test_last_marker_targets_by_hand():
    task = LastMarkerTask(vocab_size=8, length=400, markers=3, rate=0.3)
    inputs, targets = task.batch(16, generator(0))
    assert inputs.shape == targets.shape == (16, 400)
    assert (inputs[:, 0] < 3).all()
    for row_in, row_out in zip(inputs.tolist(), targets.tolist(), strict=True):
        latest = None
        for token, target in zip(row_in, row_out, strict=True):
            latest = token if token < 3 else latest
            assert target == latest
    marker_share = (inputs[:, 1:] < 3).float().mean().item()
    assert abs(marker_share - 0.3) < 0.02  # 6,384 draws: the standard error is 0.006
    pattern = task.required_pattern(10)
    torch.testing.assert_close(pattern.sum(-1), torch.ones(10))
    assert torch.equal(pattern > 0, causal_mask(10))


def test_length_experiment_shapes_and_a_clear_effect():
    """ALiBi's recency bias answers the last-marker task at four times the training length;
    with no positions, attention averages over every earlier marker. Measured here at 4L:
    0.94 against 0.66 over two seeds; the test asks for a gap of 0.15."""
    result = length_experiment(lambda n: LastMarkerTask(16, n), train_length=8,
                               schemes=("none", "alibi"), seeds=(0, 1), steps=150)
    assert result.accuracy.shape == (2, 2, 3) and result.lengths == (8, 16, 32)
    assert ((result.accuracy >= 0) & (result.accuracy <= 1)).all()
    low, high = result.spread()
    assert (low <= result.mean()).all() and (result.mean() <= high).all()
    assert result.at("alibi", 32).min() > result.at("none", 32).max() + 0.15
    assert result.seconds > 0 and result.steps == 150
    assert torch.isnan(result.beyond[..., 0]).all()  # the training length has no new position
    assert ((result.beyond[..., 1:] >= 0) & (result.beyond[..., 1:] <= 1)).all()
    # Past the training length the no-position model is worse than over the whole sequence,
    # which includes the first, easy positions (one marker so far).
    assert (result.at("none", 32, beyond=True) < result.at("none", 32)).all()
    with pytest.raises(ValueError, match="scheme must be one of"):
        result.at("rope", 8)
