"""``attnbook.circuits``: repeated-token data, the attention-only model, head scores, copying
scores, ablation and the training loop, each on small cases with an answer known by
construction (maps and weights built by hand, models recomputed layer by layer)."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator

import pytest
import torch

from attnbook.circuits import (
    AttentionOnlyTransformer,
    RepeatedTokens,
    ablate_heads,
    attention_layers,
    copy_losses,
    copying_score,
    copying_scores,
    prefix_matching_score,
    previous_token_score,
    repeat_twice,
    replace_heads,
    train_induction,
)
from attnbook.decoder import Decoder, DecoderConfig
from attnbook.timing import one_thread

TOL = {"atol": 1e-12, "rtol": 0}  # float64 models and maps
SCORE_TOL = 1e-8  # an eigenvalue route against another, float64


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny matrices gain nothing from threads, and on a busy machine two threads made each
    forward pass ~50x slower; the caller's thread count comes back afterwards."""
    with one_thread():
        yield


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def toy(seed: int = 0, dtype: torch.dtype = torch.float64, **kwargs: int
        ) -> AttentionOnlyTransformer:
    """A small attention-only model, float64 unless asked (so hand recomputations agree
    to ``TOL``)."""
    torch.manual_seed(seed)
    sizes = {"vocab_size": 12, "max_len": 16, "d_model": 16, "num_heads": 2, "num_layers": 2}
    sizes.update(kwargs)
    return AttentionOnlyTransformer(**sizes).to(dtype).eval()


def small_decoder() -> Decoder:
    """A random grouped-query decoder (4 query heads, 2 key/value heads) whose RMSNorm gains
    are random positive numbers, so that a score leaving them out is wrong."""
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=50, d_model=16, num_layers=2, num_heads=4,
                           num_kv_heads=2, d_ff=32)
    decoder = Decoder(config).double().eval()
    with torch.no_grad():
        for block in decoder.blocks:
            block.attn_norm.weight.uniform_(0.5, 2.0, generator=generator(1))
        decoder.norm.weight.uniform_(0.5, 2.0, generator=generator(2))
    return decoder


def embeddings(model: AttentionOnlyTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """The stream before the first layer, by hand: ``(B, L, d_model)``."""
    return model.embed(tokens) + model.positions.weight[:tokens.shape[-1]]


def no_hooks_left(model: torch.nn.Module) -> bool:
    return all(not layer.out_proj._forward_pre_hooks for layer in attention_layers(model))


# ------------------------------------------------------------------------------ data


def test_repeat_twice_by_hand() -> None:
    tokens = torch.tensor([[4, 1, 3, 1], [0, 2, 2, 5]])
    batch = repeat_twice(tokens)
    assert batch.inputs.tolist() == [[4, 1, 3, 1, 4, 1, 3], [0, 2, 2, 5, 0, 2, 2]]
    assert batch.targets.tolist() == [[1, 3, 1, 4, 1, 3, 1], [2, 2, 5, 0, 2, 2, 5]]
    first = [True, True, True, False, False, False, False]  # t <= T - 2 = 2
    second = [False, False, False, False, True, True, True]  # t >= T = 4
    assert batch.first.tolist() == [first, first]
    assert batch.second.tolist() == [second, second]
    assert batch.inputs.dtype == batch.targets.dtype == torch.long
    assert batch.first.dtype == batch.second.dtype == torch.bool


@pytest.mark.parametrize("T", [2, 3, 7])
def test_repeat_twice_shifts_the_sequence_and_marks_the_copies(T: int) -> None:
    tokens = torch.randint(5, (3, T), generator=generator(T))
    batch = repeat_twice(tokens)
    for part in batch:
        assert part.shape == (3, 2 * T - 1)
    assert torch.equal(batch.inputs[:, :T], tokens)  # exact: integer ids throughout
    assert torch.equal(batch.inputs[:, T:], tokens[:, :T - 1])
    assert torch.equal(batch.targets[:, :-1], batch.inputs[:, 1:])  # the next token
    assert torch.equal(batch.targets[:, -1], tokens[:, -1])
    t = torch.arange(2 * T - 1)
    assert torch.equal(batch.first, (t <= T - 2).expand(3, -1))
    assert torch.equal(batch.second, (t >= T).expand(3, -1))
    # Position T - 1 predicts the first token again: in neither copy's mask.
    assert not bool((batch.first | batch.second)[:, T - 1].any())
    # The target of t >= T is s[t + 1] = s[t + 1 - T] = inputs[t + 1 - T].
    for step in range(T, 2 * T - 1):
        assert torch.equal(batch.targets[:, step], batch.inputs[:, step + 1 - T])


def test_repeat_twice_takes_one_sequence() -> None:
    tokens = torch.tensor([[3, 0, 2], [1, 1, 4]])
    batched = repeat_twice(tokens)
    single = repeat_twice(tokens[1])
    for part, expected in zip(single, batched, strict=True):
        assert part.shape == (1, 5)
        assert torch.equal(part, expected[1:])


def test_repeat_twice_refuses_bad_tokens() -> None:
    with pytest.raises(TypeError, match="tokens"):
        repeat_twice(torch.zeros(2, 4))
    with pytest.raises(TypeError, match="tokens"):
        repeat_twice(torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="tokens"):
        repeat_twice([1, 2, 3])
    with pytest.raises(ValueError, match="at least 2"):
        repeat_twice(torch.tensor([[3], [4]]))
    with pytest.raises(ValueError, match="at least 2"):
        repeat_twice(torch.tensor([3]))
    with pytest.raises(ValueError, match="shape"):
        repeat_twice(torch.zeros(2, 2, 2, dtype=torch.long))


def test_repeated_tokens_are_seeded() -> None:
    data = RepeatedTokens(vocab_size=9, min_period=3, max_period=7)
    batch = data.batch(64, generator(1))
    again = data.batch(64, generator(1))
    other = data.batch(64, generator(2))
    for part, same in zip(batch, again, strict=True):
        assert torch.equal(part, same)
    assert not torch.equal(batch.inputs, other.inputs)
    assert data.length == 13  # 2 * max_period - 1
    for part in batch:
        assert part.shape == (64, data.length)
    assert batch.inputs.dtype == batch.targets.dtype == torch.long
    assert int(batch.inputs.min()) >= 0 and int(batch.inputs.max()) < 9


@pytest.mark.parametrize(("min_period", "max_period"), [(3, 7), (2, 5), (4, 4)])
def test_repeated_tokens_each_sequence_is_a_copy_repeated(min_period: int,
                                                          max_period: int) -> None:
    data = RepeatedTokens(vocab_size=6, min_period=min_period, max_period=max_period)
    L = data.length
    assert L == 2 * max_period - 1
    batch = data.batch(300, generator(min_period))
    assert not bool((batch.first & batch.second).any())
    periods = set()
    for row in range(300):
        inputs, targets = batch.inputs[row], batch.targets[row]
        real = targets != -100
        n = int(real.sum())  # 2T - 1 real targets, then only -100
        assert n % 2 == 1
        T = (n + 1) // 2
        periods.add(T)
        assert real.tolist() == [True] * n + [False] * (L - n)
        assert torch.equal(inputs[T:2 * T - 1], inputs[:T - 1])  # the copy, repeated
        assert torch.equal(targets[:n - 1], inputs[1:n])  # the next token
        assert int(targets[n - 1]) == int(inputs[T - 1])  # the second copy's last token
        assert batch.first[row].tolist() == [t <= T - 2 for t in range(L)]
        assert batch.second[row].tolist() == [T <= t <= 2 * T - 2 for t in range(L)]
        for t in range(T, 2 * T - 1):  # a second-copy target: the token a period earlier
            assert int(targets[t]) == int(inputs[t + 1 - T])
    assert periods == set(range(min_period, max_period + 1))  # every period occurs


def test_repeated_tokens_refuse_bad_sizes() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        RepeatedTokens(vocab_size=1)
    with pytest.raises(TypeError, match="vocab_size"):
        RepeatedTokens(vocab_size=5.0)
    with pytest.raises(ValueError, match="min_period"):
        RepeatedTokens(min_period=1, max_period=4)
    with pytest.raises(ValueError, match="max_period"):
        RepeatedTokens(vocab_size=5, min_period=6, max_period=4)
    data = RepeatedTokens(vocab_size=5, min_period=2, max_period=3)
    with pytest.raises(ValueError, match="batch_size"):
        data.batch(0, generator(0))
    with pytest.raises(TypeError, match="batch_size"):
        data.batch(2.0, generator(0))
    with pytest.raises(TypeError, match="generator"):
        data.batch(2, 0)


def test_copy_losses_of_a_perfect_a_uniform_and_a_half_perfect_model() -> None:
    V = 7
    batch = repeat_twice(torch.randint(V, (3, 5), generator=generator(0)))
    perfect = torch.full((3, 9, V), -50.0).scatter(-1, batch.targets[..., None], 50.0)
    first, second = copy_losses(perfect, batch)
    assert isinstance(first, float) and isinstance(second, float)
    assert 0 <= first < 1e-6 and 0 <= second < 1e-6
    first, second = copy_losses(torch.zeros(3, 9, V), batch)
    assert first == pytest.approx(math.log(V), rel=1e-6)
    assert second == pytest.approx(math.log(V), rel=1e-6)
    # Perfect only where the target is in the second copy: each mask counts its own.
    half = torch.where(batch.second[..., None], perfect, torch.zeros(()))
    first, second = copy_losses(half, batch)
    assert first == pytest.approx(math.log(V), rel=1e-6) and 0 <= second < 1e-6


def test_copy_losses_ignore_what_follows_a_sequence() -> None:
    data = RepeatedTokens(vocab_size=5, min_period=2, max_period=4)
    batch = data.batch(16, generator(3))
    assert bool((batch.targets == -100).any())
    logits = torch.zeros(16, data.length, 5)
    logits[batch.targets == -100] = torch.tensor([9.0, -9.0, 0.0, 3.0, 1.0])  # not counted
    first, second = copy_losses(logits, batch)
    assert first == pytest.approx(math.log(5), rel=1e-6)
    assert second == pytest.approx(math.log(5), rel=1e-6)


def test_copy_losses_refuse_a_wrong_shape() -> None:
    batch = repeat_twice(torch.tensor([[1, 2, 0]]))
    with pytest.raises(ValueError, match="logits"):
        copy_losses(torch.zeros(1, 4, 3), batch)
    with pytest.raises(ValueError, match="logits"):
        copy_losses(torch.zeros(2, 5, 3), batch)
    with pytest.raises(ValueError, match="logits"):
        copy_losses(torch.zeros(1, 5), batch)
    with pytest.raises(TypeError, match="logits"):
        copy_losses([[0.0]], batch)


# ----------------------------------------------------------------------------- model


@torch.no_grad()
def test_the_model_is_causal_and_returns_every_layers_weights() -> None:
    model = toy(dtype=torch.float32, num_layers=3)
    tokens = torch.randint(12, (3, 10), generator=generator(2))
    logits, weights = model(tokens)
    assert logits.shape == (3, 10, 12) and logits.dtype == torch.float32
    assert weights.shape == (3, 3, 2, 10, 10)  # (layers, B, h, L, L)
    future = ~torch.ones(10, 10, dtype=torch.bool).tril()
    assert bool((weights[..., future] == 0).all())  # exact: masked weights are zeros
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 3, 2, 10))
    one = model(tokens[0])  # a single sequence
    assert one.logits.shape == (1, 10, 12) and one.weights.shape == (3, 1, 2, 10, 10)
    assert model(torch.zeros(2, 16, dtype=torch.long)).logits.shape == (2, 16, 12)


@torch.no_grad()
def test_the_model_is_a_residual_stream_of_attention_layers() -> None:
    model = toy()
    tokens = torch.randint(12, (2, 9), generator=generator(3))
    x0 = embeddings(model, tokens)
    out0 = model.layers[0](x0)
    x1 = x0 + out0.output
    out1 = model.layers[1](x1)
    got = model(tokens)
    torch.testing.assert_close(got.logits, model.unembed(x1 + out1.output), **TOL)
    torch.testing.assert_close(got.weights, torch.stack([out0.weights, out1.weights]), **TOL)


@torch.no_grad()
def test_bypass_none_or_one_layer_is_the_ordinary_model() -> None:
    model = toy()
    tokens = torch.randint(12, (2, 9), generator=generator(4))
    plain = model(tokens)
    for bypass in (None, (), []):  # the same computation: exact
        got = model(tokens, bypass=bypass)
        assert torch.equal(got.logits, plain.logits) and torch.equal(got.weights,
                                                                      plain.weights)
    one_layer = toy(num_layers=1)
    plain = one_layer(tokens)
    for bypass in ("query", "key", "value", ("query", "key", "value"), {"key"}):
        got = one_layer(tokens, bypass=bypass)  # nothing comes before the first layer
        assert torch.equal(got.logits, plain.logits) and torch.equal(got.weights,
                                                                      plain.weights)


@pytest.mark.parametrize("bypass", ["query", "key", "value", ("query", "key", "value")])
@torch.no_grad()
def test_bypass_feeds_the_later_layers_the_embeddings(bypass) -> None:
    model = toy()
    tokens = torch.randint(12, (2, 9), generator=generator(5))
    plain = model(tokens)
    x0 = embeddings(model, tokens)
    x1 = x0 + model.layers[0](x0).output
    names = {bypass} if isinstance(bypass, str) else set(bypass)
    q, k, v = (x0 if name in names else x1 for name in ("query", "key", "value"))
    expected = model.layers[1](q, k, v)
    got = model(tokens, bypass=bypass)
    torch.testing.assert_close(got.logits, model.unembed(x1 + expected.output), **TOL)
    torch.testing.assert_close(got.weights[1], expected.weights, **TOL)
    assert torch.equal(got.weights[0], plain.weights[0])  # the first layer is untouched
    assert (got.logits - plain.logits).abs().max() > 1e-3  # the cut does change layer 1


def test_three_layers_cut_off_every_earlier_layer() -> None:
    model = toy(num_layers=3)
    tokens = torch.randint(12, (2, 7), generator=generator(6))
    with torch.no_grad():
        x = x0 = embeddings(model, tokens)
        for layer in model.layers:  # every layer reads the embeddings only
            x = x + layer(x0).output
        got = model(tokens, bypass=("query", "key", "value"))
    torch.testing.assert_close(got.logits, model.unembed(x), **TOL)


def test_the_model_refuses_bad_input() -> None:
    model = toy(dtype=torch.float32)
    tokens = torch.zeros(1, 4, dtype=torch.long)
    for bypass in ("keys", ["query", "nope"], ("query", 1), 3):
        with pytest.raises(ValueError, match="bypass"):
            model(tokens, bypass=bypass)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=r"0 \.\. 11"):
        model(torch.full((1, 4), 12))
    with pytest.raises(ValueError, match=r"0 \.\. 11"):
        model(torch.full((1, 4), -1))
    with pytest.raises(TypeError, match="tokens"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(1, 2, 4, dtype=torch.long))


# ---------------------------------------------------------------------------- scores


def previous_token_map(L: int) -> torch.Tensor:
    """Every query on the key just before it; query 0 (nothing before it) on itself."""
    weights = torch.zeros(L, L, dtype=torch.float64)
    weights[0, 0] = 1.0
    weights[torch.arange(1, L), torch.arange(L - 1)] = 1.0
    return weights


def random_causal_weights(*shape: int, seed: int) -> torch.Tensor:
    """Softmax rows over the keys at or before each query: ``(*shape[:-1], L, S)``, the
    queries at the last ``L`` key positions."""
    *batch, L, S = shape
    scores = torch.randn(*shape, generator=generator(seed), dtype=torch.float64)
    allowed = torch.ones(L, S, dtype=torch.bool).tril(S - L)
    return scores.masked_fill(~allowed, -math.inf).softmax(-1)


def test_previous_token_score_on_known_maps() -> None:
    L = 6
    previous = previous_token_map(L)
    assert previous_token_score(previous).item() == 1.0  # exact: a mean of ones
    assert previous_token_score(torch.eye(L, dtype=torch.float64)).item() == 0.0
    half = 0.5 * previous + 0.5 * torch.eye(L, dtype=torch.float64)
    stacked = torch.stack([previous, torch.eye(L, dtype=torch.float64), half])[None]
    score = previous_token_score(stacked)  # (1, 3, L, L) -> (1, 3)
    assert score.shape == (1, 3)
    assert score.tolist() == [[1.0, 0.0, 0.5]]  # exact: means of 1, 0 and 0.5


def test_previous_token_score_is_a_mean_over_queries() -> None:
    weights = random_causal_weights(2, 3, 7, 7, seed=7)
    loop = torch.stack([weights[..., t, t - 1] for t in range(1, 7)], -1).mean(-1)
    score = previous_token_score(weights)
    assert score.shape == (2, 3)
    torch.testing.assert_close(score, loop, **TOL)


def test_previous_token_score_with_more_keys_than_queries() -> None:
    # Queries 0 .. L-1 sit at key positions S-L .. S-1; query t's previous key is S-L+t-1.
    L, S = 3, 7
    t = torch.arange(L)
    shifted = torch.zeros(L, S, dtype=torch.float64)
    shifted[t, S - L + t - 1] = 1.0
    assert previous_token_score(shifted).item() == 1.0
    on_itself = torch.zeros(L, S, dtype=torch.float64)
    on_itself[t, S - L + t] = 1.0
    assert previous_token_score(on_itself).item() == 0.0
    square_reading = torch.zeros(L, S, dtype=torch.float64)
    square_reading[t[1:], t[1:] - 1] = 1.0  # as if the queries sat at 0 .. L-1
    assert previous_token_score(square_reading).item() == 0.0
    weights = random_causal_weights(2, L, S, seed=8)
    loop = torch.stack([weights[..., q, S - L + q - 1] for q in range(1, L)], -1).mean(-1)
    torch.testing.assert_close(previous_token_score(weights), loop, **TOL)


def test_previous_token_score_refuses_bad_shapes() -> None:
    with pytest.raises(ValueError, match="weights"):
        previous_token_score(torch.ones(1, 4))  # one query
    with pytest.raises(ValueError, match="weights"):
        previous_token_score(torch.ones(4, 3))  # fewer keys than queries
    with pytest.raises(ValueError, match="weights"):
        previous_token_score(torch.ones(4))
    with pytest.raises(ValueError, match="weights"):
        previous_token_score(torch.ones(4, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="weights"):
        previous_token_score([[1.0, 0.0], [0.0, 1.0]])


def induction_map(T: int, L: int) -> torch.Tensor:
    """Queries ``t >= T`` on key ``t - T + 1`` (after the earlier occurrence of their
    token); the first copy's queries on themselves."""
    weights = torch.eye(L, dtype=torch.float64)
    for t in range(T, L):
        weights[t, t] = 0.0
        weights[t, t - T + 1] = 1.0
    return weights


@pytest.mark.parametrize("T", [2, 3, 5])
@pytest.mark.parametrize("extra", [-1, 0], ids=["L=2T-1", "L=2T"])
def test_prefix_matching_score_on_known_maps(T: int, extra: int) -> None:
    L = 2 * T + extra
    assert prefix_matching_score(induction_map(T, L), T).item() == 1.0  # exact: ones
    earlier = torch.eye(L, dtype=torch.float64)
    for t in range(T, L):
        earlier[t, t] = 0.0
        earlier[t, t - T] = 1.0  # the earlier occurrence itself, not the token after
    assert prefix_matching_score(earlier, T).item() == 0.0
    if T > 2:  # for T = 2 the token after the earlier occurrence *is* the previous token
        assert prefix_matching_score(previous_token_map(L), T).item() == 0.0
    stacked = torch.stack([induction_map(T, L), earlier])[None, None]  # (1, 1, 2, L, L)
    assert prefix_matching_score(stacked, T).tolist() == [[[1.0, 0.0]]]


@pytest.mark.parametrize(("T", "L"), [(5, 9), (4, 8), (3, 4)])
def test_prefix_matching_score_is_a_mean_over_the_second_copy(T: int, L: int) -> None:
    weights = random_causal_weights(2, 3, L, L, seed=L)
    loop = torch.stack([weights[..., t, t - T + 1] for t in range(T, L)], -1).mean(-1)
    score = prefix_matching_score(weights, T)
    assert score.shape == (2, 3)
    torch.testing.assert_close(score, loop, **TOL)


def test_prefix_matching_score_refuses_a_bad_period() -> None:
    weights = random_causal_weights(9, 9, seed=9)
    with pytest.raises(ValueError, match="period"):
        prefix_matching_score(weights, 4)  # L = 9 > 2T
    with pytest.raises(ValueError, match="period"):
        prefix_matching_score(weights, 9)  # no second copy
    with pytest.raises(ValueError, match="period"):
        prefix_matching_score(weights, 1)
    with pytest.raises(TypeError, match="period"):
        prefix_matching_score(weights, 5.0)
    with pytest.raises(ValueError, match="period"):
        prefix_matching_score(weights[:, :8], 5)  # not square
    with pytest.raises(ValueError, match="weights"):
        prefix_matching_score(torch.ones(9, 9, dtype=torch.long), 5)


def full_copying(w_v, w_o, embed, unembed, g_in=None, g_out=None) -> float:
    """The score from the eigenvalues of the whole ``vocab x vocab`` matrix
    ``M = U diag(g_out) W_O W_V diag(g_in) E^T``."""
    ones = torch.ones(embed.shape[1], dtype=torch.float64)
    g_in = ones if g_in is None else g_in.double()
    g_out = ones if g_out is None else g_out.double()
    M = (unembed.double() @ torch.diag(g_out) @ w_o.double() @ w_v.double()
         @ torch.diag(g_in) @ embed.double().T)  # (V, V)
    eigenvalues = torch.linalg.eigvals(M)
    return float(eigenvalues.real.sum() / eigenvalues.abs().sum())


def test_copying_score_of_a_copier_and_its_opposite() -> None:
    g = generator(5)
    w_v = torch.randn(4, 8, generator=g, dtype=torch.float64)
    embed = torch.randn(20, 8, generator=g, dtype=torch.float64)
    # M = E W_V^T W_V E^T is positive semi-definite: every eigenvalue is >= 0.
    assert copying_score(w_v, w_v.T, embed, embed) == pytest.approx(1.0, abs=1e-12)
    assert copying_score(w_v, -w_v.T, embed, embed) == pytest.approx(-1.0, abs=1e-12)
    assert copying_score(w_v, w_v.T, embed, -embed) == pytest.approx(-1.0, abs=1e-12)
    gain = torch.rand(8, generator=g, dtype=torch.float64) + 0.5
    # With gains g on both sides and W_O = W_V^T: M = E D W_V^T W_V D E^T, still PSD.
    assert copying_score(w_v, w_v.T, embed, embed, norm_in=gain, norm_out=gain) == \
        pytest.approx(1.0, abs=1e-12)


def test_copying_score_equals_the_full_matrix_score() -> None:
    g = generator(6)
    w_v = torch.randn(4, 8, generator=g, dtype=torch.float64)
    w_o = torch.randn(8, 4, generator=g, dtype=torch.float64)
    embed = torch.randn(20, 8, generator=g, dtype=torch.float64)
    unembed = torch.randn(20, 8, generator=g, dtype=torch.float64)
    g_in = 3 * torch.rand(8, generator=g, dtype=torch.float64) + 0.2  # gains in 0.2 .. 3.2
    g_out = 3 * torch.rand(8, generator=g, dtype=torch.float64) + 0.2
    plain = copying_score(w_v, w_o, embed, unembed)
    assert plain == pytest.approx(full_copying(w_v, w_o, embed, unembed), abs=SCORE_TOL)
    with_gains = copying_score(w_v, w_o, embed, unembed, norm_in=g_in, norm_out=g_out)
    assert with_gains == pytest.approx(full_copying(w_v, w_o, embed, unembed, g_in, g_out),
                                       abs=SCORE_TOL)
    assert abs(with_gains - plain) > 1e-3  # the gains matter: the check above can fail
    # A positive scale of any factor leaves the score alone.
    assert copying_score(3 * w_v, w_o, embed, 0.5 * unembed) == pytest.approx(plain,
                                                                            abs=1e-12)
    # float32 weights are scored in float64.
    assert copying_score(w_v.float(), w_o.float(), embed.float(), unembed.float()) == \
        pytest.approx(plain, abs=1e-5)


def test_copying_score_refuses_bad_shapes() -> None:
    w_v, w_o, embed = torch.randn(4, 8), torch.randn(8, 4), torch.randn(20, 8)
    for args in [(w_v[0], w_o, embed, embed), (w_v, w_o.T, embed, embed),
                 (w_v, w_o, embed[:, :7], embed), (w_v, w_o, embed, embed[:, :7]),
                 (w_v, w_o, embed[0], embed)]:
        with pytest.raises(ValueError, match="w_v"):
            copying_score(*args)
    for gains in [{"norm_in": torch.ones(7)}, {"norm_out": torch.ones(8, 1)}]:
        with pytest.raises(ValueError, match="norm_"):
            copying_score(w_v, w_o, embed, embed, **gains)
    with pytest.raises(TypeError, match="norm_in"):
        copying_score(w_v, w_o, embed, embed, norm_in=[1.0] * 8)
    with pytest.raises(TypeError, match="w_v"):
        copying_score(w_v.tolist(), w_o, embed, embed)


@torch.no_grad()
def test_copying_scores_of_every_head_of_the_toy_model() -> None:
    model = toy(num_heads=4, num_layers=3, d_model=16)
    scores = copying_scores(model)
    assert scores.shape == (3, 4) and scores.dtype == torch.float64
    d = 4
    for index, layer in enumerate(model.layers):
        for head in range(4):
            w_v = layer.v_proj.weight[head * d:(head + 1) * d]
            w_o = layer.out_proj.weight[:, head * d:(head + 1) * d]
            expected = copying_score(w_v, w_o, model.embed.weight, model.unembed.weight)
            assert scores[index, head].item() == pytest.approx(expected, abs=1e-12)
            assert scores[index, head].item() == pytest.approx(
                full_copying(w_v, w_o, model.embed.weight, model.unembed.weight),
                abs=SCORE_TOL)
    assert float(scores.std()) > 1e-3  # different heads, different scores


@torch.no_grad()
def test_copying_scores_of_a_grouped_query_decoder() -> None:
    decoder = small_decoder()
    scores = copying_scores(decoder)
    assert scores.shape == (2, 4) and scores.dtype == torch.float64
    d = decoder.config.d_head
    embed = decoder.embed.weight  # tied: also the unembedding

    def head_slices(block, head: int, kv: int):
        return (block.attn.v_proj.weight[kv * d:(kv + 1) * d],
                block.attn.out_proj.weight[:, head * d:(head + 1) * d])

    differs_without_gains = differs_with_other_grouping = False
    for index, block in enumerate(decoder.blocks):
        for head in range(4):
            w_v, w_o = head_slices(block, head, head // 2)  # heads 0, 1 share kv head 0
            gains = {"norm_in": block.attn_norm.weight, "norm_out": decoder.norm.weight}
            got = scores[index, head].item()
            assert got == pytest.approx(copying_score(w_v, w_o, embed, embed, **gains),
                                        abs=1e-12)
            assert got == pytest.approx(full_copying(w_v, w_o, embed, embed,
                                                     gains["norm_in"], gains["norm_out"]),
                                        abs=SCORE_TOL)
            # The checks above could fail: leaving out the gains, or tiling the key/value
            # heads (head % 2) instead of grouping them, gives other numbers.
            differs_without_gains |= abs(got - copying_score(w_v, w_o, embed, embed)) > 1e-3
            tiled = copying_score(*head_slices(block, head, head % 2), embed, embed, **gains)
            differs_with_other_grouping |= abs(got - tiled) > 1e-3
    assert differs_without_gains and differs_with_other_grouping


def test_copying_scores_refuse_another_model() -> None:
    with pytest.raises(TypeError, match="model"):
        copying_scores(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="model"):
        attention_layers(torch.nn.Linear(2, 2))


# -------------------------------------------------------------------------- ablation


def test_replace_heads_zeroes_only_the_chosen_slices() -> None:
    merged = torch.randn(3, 5, 12, generator=generator(6))  # 3 heads of 4 features
    before = merged.clone()
    zeroed = replace_heads(merged, [1], 3, how="zero")
    assert zeroed.shape == merged.shape
    assert torch.equal(merged, before)  # the input is left alone
    assert bool((zeroed[..., 4:8] == 0).all())
    assert torch.equal(zeroed[..., :4], merged[..., :4])  # exact: copied, not computed
    assert torch.equal(zeroed[..., 8:], merged[..., 8:])
    two = replace_heads(merged, [0, 2], 3)  # "zero" by default
    assert bool((two[..., :4] == 0).all()) and bool((two[..., 8:] == 0).all())
    assert torch.equal(two[..., 4:8], merged[..., 4:8])
    unbatched = replace_heads(merged[0], [2], 3, how="zero")  # (L, h * d_head)
    assert unbatched.shape == (5, 12)
    assert bool((unbatched[:, 8:] == 0).all())
    assert torch.equal(unbatched[:, :8], merged[0, :, :8])
    untouched = replace_heads(merged, [], 3)
    assert torch.equal(untouched, merged)
    untouched[0, 0, 0] = 100.0  # a new tensor: writing to it leaves merged alone
    assert torch.equal(merged, before)


def test_replace_heads_mean_is_over_batch_and_positions() -> None:
    merged = torch.randn(3, 5, 12, generator=generator(7), dtype=torch.float64)
    before = merged.clone()
    averaged = replace_heads(merged, [2], 3, how="mean")
    assert torch.equal(merged, before)
    by_hand = sum(merged[b, t, 8:] for b in range(3) for t in range(5)) / 15  # (4,)
    torch.testing.assert_close(averaged[..., 8:], by_hand.expand(3, 5, 4), **TOL)
    # Not the mean over positions alone (per sequence): that would differ by sequence.
    assert (merged[..., 8:].mean(1) - by_hand).abs().max() > 1e-3
    assert torch.equal(averaged[..., :8], merged[..., :8])
    unbatched = replace_heads(merged[1], [0], 3, how="mean")
    torch.testing.assert_close(unbatched[:, :4], merged[1, :, :4].mean(0).expand(5, 4),
                               **TOL)
    assert torch.equal(unbatched[:, 4:], merged[1, :, 4:])


def test_replace_heads_refuses_bad_arguments() -> None:
    merged = torch.randn(3, 5, 12)
    with pytest.raises(ValueError, match="num_heads"):
        replace_heads(merged, [0], 5)  # 5 does not divide 12
    with pytest.raises(ValueError, match="num_heads"):
        replace_heads(merged, [0], 0)
    with pytest.raises(TypeError, match="num_heads"):
        replace_heads(merged, [0], 3.0)
    with pytest.raises(ValueError, match="head"):
        replace_heads(merged, [3], 3)
    with pytest.raises(ValueError, match="head"):
        replace_heads(merged, [-1], 3)
    with pytest.raises(TypeError, match="head"):
        replace_heads(merged, [1.0], 3)
    with pytest.raises(ValueError, match="how"):
        replace_heads(merged, [0], 3, how="random")
    with pytest.raises(ValueError, match="merged"):
        replace_heads(merged[0, 0], [0], 3)
    with pytest.raises(ValueError, match="merged"):
        replace_heads(merged[None], [0], 3)
    with pytest.raises(TypeError, match="merged"):
        replace_heads(merged.tolist(), [0], 3)


@torch.no_grad()
def test_zero_ablating_every_head_leaves_the_embeddings() -> None:
    model = toy()
    tokens = torch.randint(12, (2, 8), generator=generator(7))
    plain = model(tokens)
    every = [(layer, head) for layer in range(2) for head in range(2)]
    with ablate_heads(model, every, how="zero"):
        ablated = model(tokens)
    # out_proj has no bias, so zeroed heads add nothing to the stream.
    assert model.layers[0].out_proj.bias is None
    torch.testing.assert_close(ablated.logits, model.unembed(embeddings(model, tokens)),
                               **TOL)
    # The heads still attend (only their outputs are replaced), and layer 0 reads the
    # same stream as before: its weights are unchanged.
    torch.testing.assert_close(ablated.weights[0], plain.weights[0], **TOL)
    after = model(tokens)
    assert torch.equal(after.logits, plain.logits) and no_hooks_left(model)


@torch.no_grad()
def test_zero_ablating_one_head_drops_its_term_only() -> None:
    model = toy(num_layers=1)  # 2 heads of d_head = 8
    layer = model.layers[0]
    tokens = torch.randint(12, (3, 8), generator=generator(8))
    x0 = embeddings(model, tokens)
    weights = layer(x0).weights  # (B, h, L, L)
    v = layer.v_proj(x0).unflatten(-1, (2, 8)).transpose(1, 2)  # (B, h, L, d_head)
    z1 = weights[:, 1] @ v[:, 1]  # (B, L, d_head): head 1's output
    expected = model.unembed(x0 + z1 @ layer.out_proj.weight[:, 8:].T)
    with ablate_heads(model, [(0, 0)]):
        got = model(tokens).logits
    torch.testing.assert_close(got, expected, **TOL)


@torch.no_grad()
def test_zero_ablation_is_zeroing_the_heads_output_columns() -> None:
    model = toy(num_heads=4, num_layers=2)
    tokens = torch.randint(12, (2, 10), generator=generator(9))
    chosen = [(0, 3), (1, 0), (1, 2)]
    surgery = copy.deepcopy(model)
    for layer, head in chosen:
        surgery.layers[layer].out_proj.weight[:, head * 4:(head + 1) * 4] = 0.0
    with ablate_heads(model, chosen, how="zero"):
        got = model(tokens).logits
    torch.testing.assert_close(got, surgery(tokens).logits, **TOL)
    assert (got - model(tokens).logits).abs().max() > 1e-3


@torch.no_grad()
def test_mean_ablating_a_layers_only_head_adds_one_vector_everywhere() -> None:
    model = toy(num_heads=1, num_layers=1)
    tokens = torch.randint(12, (3, 8), generator=generator(10))
    x0 = embeddings(model, tokens)
    # out_proj is linear without a bias: out_proj(mean of features) = mean of its outputs.
    constant = model.layers[0](x0).output.mean(dim=(0, 1))  # (d_model,)
    with ablate_heads(model, [(0, 0)], how="mean"):
        got = model(tokens).logits
    torch.testing.assert_close(got, model.unembed(x0 + constant), **TOL)
    shift = got - model.unembed(x0)  # the same at every position of every sequence
    torch.testing.assert_close(shift, shift[:1, :1].expand_as(shift), **TOL)


@torch.no_grad()
def test_mean_ablation_uses_the_same_forward_pass() -> None:
    model = toy(num_heads=2, num_layers=2)
    tokens = torch.randint(12, (4, 9), generator=generator(11))
    x0 = embeddings(model, tokens)
    constant = model.layers[0](x0).output.mean(dim=(0, 1))  # both heads of layer 0
    x1 = x0 + constant
    expected = model.unembed(x1 + model.layers[1](x1).output)
    with ablate_heads(model, [(0, 0), (0, 1)], how="mean"):
        got = model(tokens).logits
    torch.testing.assert_close(got, expected, **TOL)
    with ablate_heads(model, [(0, 0), (0, 1)], how="mean"):
        other = model(tokens[:2]).logits  # another batch, another mean
    assert (other - got[:2]).abs().max() > 1e-6


@torch.no_grad()
def test_the_hooks_go_away_after_an_error_and_after_bad_pairs() -> None:
    model = toy()
    tokens = torch.randint(12, (2, 8), generator=generator(12))
    plain = model(tokens).logits
    every = [(layer, head) for layer in range(2) for head in range(2)]
    with pytest.raises(RuntimeError, match="inside"), ablate_heads(model, every):
        assert not no_hooks_left(model)
        raise RuntimeError("inside")
    assert no_hooks_left(model)
    assert torch.equal(model(tokens).logits, plain)  # the same computation: exact
    with pytest.raises(ValueError, match="not in the model"):
        with ablate_heads(model, [(0, 0), (5, 0)]):  # the good pair hooks nothing
            pass
    assert no_hooks_left(model)
    with ablate_heads(model, []):
        assert torch.equal(model(tokens).logits, plain)


@torch.no_grad()
def test_ablate_heads_on_a_grouped_query_decoder() -> None:
    decoder = small_decoder()
    assert attention_layers(decoder) == [block.attn for block in decoder.blocks]
    ids = torch.randint(50, (2, 6), generator=generator(13))
    plain = decoder(ids).logits
    chosen = [(0, 1), (1, 3)]
    surgery = copy.deepcopy(decoder)
    d = decoder.config.d_head
    for layer, head in chosen:
        surgery.blocks[layer].attn.out_proj.weight[:, head * d:(head + 1) * d] = 0.0
    with ablate_heads(decoder, chosen):
        zeroed = decoder(ids).logits
    torch.testing.assert_close(zeroed, surgery(ids).logits, **TOL)
    with ablate_heads(decoder, chosen, how="mean"):
        averaged = decoder(ids).logits
    assert (averaged - plain).abs().max() > 1e-6
    assert (averaged - zeroed).abs().max() > 1e-6
    assert torch.equal(decoder(ids).logits, plain) and no_hooks_left(decoder)


def test_ablate_heads_refuses_bad_pairs() -> None:
    model = toy()
    for heads in ([1], [(0, 1.0)], [(True, 0)], [(0, 0, 0)], ["01"]):
        with pytest.raises(TypeError, match="pairs"):
            with ablate_heads(model, heads):
                pass
    for heads in ([(2, 0)], [(0, 2)], [(-1, 0)], [(0, -1)]):
        with pytest.raises(ValueError, match="not in the model"):
            with ablate_heads(model, heads):
                pass
    with pytest.raises(ValueError, match="how"):
        with ablate_heads(model, [(0, 0)], how="half"):
            pass
    with pytest.raises(TypeError, match="model"):
        with ablate_heads(torch.nn.Linear(2, 2), [(0, 0)]):
            pass
    assert no_hooks_left(model)


# -------------------------------------------------------------------------- training


def tiny_model() -> AttentionOnlyTransformer:
    return toy(dtype=torch.float32, vocab_size=8, max_len=9, d_model=16, num_heads=2)


def test_training_is_reproducible_and_records_both_copies() -> None:
    data = RepeatedTokens(vocab_size=8, min_period=3, max_period=5)
    models = [tiny_model(), tiny_model()]  # the same initial weights
    initial = [p.detach().clone() for p in models[0].parameters()]
    threads = torch.get_num_threads()
    runs = []
    try:
        torch.set_num_threads(2)  # a count the loop's one thread must not leave behind
        for global_seed, model in zip((11, 22), models, strict=True):
            torch.manual_seed(global_seed)  # the run must not depend on the global state
            state = torch.get_rng_state()
            history = train_induction(model, data, steps=30, eval_every=10, seed=3,
                                      eval_batch_size=16)
            assert torch.equal(torch.get_rng_state(), state)
            assert torch.get_num_threads() == 2
            runs.append(history)
    finally:
        torch.set_num_threads(threads)
    first, second = runs
    assert first.steps == [0, 10, 20, 30]
    assert len(first.first) == len(first.second) == 4
    assert all(isinstance(x, float) and math.isfinite(x) for x in first.first + first.second)
    assert first.steps == second.steps
    assert first.first == second.first and first.second == second.second  # exact: a rerun
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(models[0].parameters(), initial,
                                                     strict=True))
    assert not models[0].training
    assert first.seconds > 0


def test_training_records_the_last_step_and_the_seed_matters() -> None:
    data = RepeatedTokens(vocab_size=8, min_period=3, max_period=5)
    a = train_induction(tiny_model(), data, steps=5, eval_every=2, seed=0, eval_batch_size=8)
    b = train_induction(tiny_model(), data, steps=5, eval_every=2, seed=1, eval_batch_size=8)
    assert a.steps == b.steps == [0, 2, 4, 5]
    assert len(a.first) == len(a.second) == 4
    # The held-out batch is the same for every seed: the untrained model scores the same.
    assert a.first[0] == b.first[0] and a.second[0] == b.second[0]
    assert a.second[1:] != b.second[1:]  # other training batches


def test_training_refuses_what_does_not_fit() -> None:
    data = RepeatedTokens(vocab_size=8, min_period=3, max_period=9)  # 17 inputs
    with pytest.raises(ValueError, match="max_len"):
        train_induction(toy(vocab_size=8, max_len=10), data, steps=1)
    with pytest.raises(ValueError, match="vocab_size"):
        train_induction(toy(vocab_size=6, max_len=17), data, steps=1)
    with pytest.raises(TypeError, match="model"):
        train_induction(torch.nn.Linear(2, 2), data, steps=1)
    with pytest.raises(TypeError, match="data"):
        train_induction(toy(vocab_size=8, max_len=17), "data", steps=1)
    fits = toy(vocab_size=8, max_len=17)
    before = [p.detach().clone() for p in fits.parameters()]
    with pytest.raises(ValueError, match="lr"):
        train_induction(fits, data, steps=1, lr=0.0)
    with pytest.raises(ValueError, match="steps"):
        train_induction(fits, data, steps=0)
    with pytest.raises(TypeError, match="steps"):
        train_induction(fits, data, steps=1.5)
    with pytest.raises(ValueError, match="seed"):
        train_induction(fits, data, steps=1, seed=-1)
    for p, q in zip(fits.parameters(), before, strict=True):  # refused before training
        assert torch.equal(p, q)
