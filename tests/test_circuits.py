"""attnbook.circuits: repeated-token data, the attention-only model, head scores, copying
scores and ablation, each on small cases with an answer known by construction."""

from __future__ import annotations

import math

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


def _toy(seed: int = 0, **kwargs: int) -> AttentionOnlyTransformer:
    torch.manual_seed(seed)
    sizes = {"vocab_size": 12, "max_len": 16, "d_model": 16, "num_heads": 2, "num_layers": 2}
    sizes.update(kwargs)
    return AttentionOnlyTransformer(**sizes).eval()


def _small_decoder() -> Decoder:
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=50, d_model=16, num_layers=2, num_heads=4,
                           num_kv_heads=2, d_ff=32)
    decoder = Decoder(config).eval()
    with torch.no_grad():
        for block in decoder.blocks:
            block.attn_norm.weight.uniform_(0.5, 2.0)
        decoder.norm.weight.uniform_(0.5, 2.0)
    return decoder


# ------------------------------------------------------------------------------ data


def test_repeat_twice_shifts_and_marks_the_copies() -> None:
    tokens = torch.tensor([[4, 1, 3, 1], [0, 2, 2, 5]])
    batch = repeat_twice(tokens)
    T = 4
    sequence = torch.cat([tokens, tokens], dim=1)
    assert torch.equal(batch.inputs, sequence[:, :-1])  # exact: integer ids
    assert torch.equal(batch.targets, sequence[:, 1:])
    assert batch.first[0].tolist() == [True, True, True, False, False, False, False]
    assert batch.second[0].tolist() == [False, False, False, False, True, True, True]
    # A second-copy target is the input one place after the earlier occurrence.
    for t in range(T, 2 * T - 1):
        assert torch.equal(batch.targets[:, t], batch.inputs[:, t + 1 - T])
    one = repeat_twice(tokens[0])
    assert torch.equal(one.inputs, batch.inputs[:1])


def test_repeat_twice_refuses_bad_tokens() -> None:
    with pytest.raises(TypeError, match="tokens"):
        repeat_twice(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="at least 2"):
        repeat_twice(torch.tensor([[3]]))
    with pytest.raises(ValueError, match="shape"):
        repeat_twice(torch.zeros(2, 2, 2, dtype=torch.long))


def test_repeated_tokens_batches_vary_their_period_and_mask_the_rest() -> None:
    data = RepeatedTokens(vocab_size=9, min_period=3, max_period=7)
    batch = data.batch(200, torch.Generator().manual_seed(1))
    again = data.batch(200, torch.Generator().manual_seed(1))
    assert torch.equal(batch.inputs, again.inputs) and torch.equal(batch.targets,
                                                                   again.targets)
    assert batch.inputs.shape == batch.targets.shape == (200, data.length) == (200, 13)
    assert not bool((batch.first & batch.second).any())
    periods = set()
    for row in range(200):
        valid = (batch.targets[row] != -100).nonzero().flatten()
        T = (int(valid.max()) + 2) // 2  # the last real target is at t = 2T - 2
        periods.add(T)
        assert batch.second[row].nonzero().flatten().tolist() == list(range(T, 2 * T - 1))
        assert batch.first[row].nonzero().flatten().tolist() == list(range(T - 1))
        for t in range(T, 2 * T - 1):
            assert batch.targets[row, t] == batch.inputs[row, t + 1 - T]
        assert bool((batch.targets[row, 2 * T - 1:] == -100).all())
    assert periods == set(range(3, 8))
    assert int(batch.inputs.max()) < 9 and int(batch.inputs.min()) >= 0


def test_repeated_tokens_refuses_bad_sizes() -> None:
    with pytest.raises(ValueError, match="max_period"):
        RepeatedTokens(vocab_size=5, min_period=6, max_period=4)
    with pytest.raises(TypeError, match="vocab_size"):
        RepeatedTokens(vocab_size=5.0)
    with pytest.raises(TypeError, match="generator"):
        RepeatedTokens().batch(2, 0)


def test_copy_losses_of_a_perfect_and_a_uniform_model() -> None:
    batch = repeat_twice(torch.randint(7, (3, 5), generator=torch.Generator().manual_seed(0)))
    perfect = torch.full((3, 9, 7), -50.0).scatter(-1, batch.targets[..., None], 50.0)
    first, second = copy_losses(perfect, batch)
    assert first < 1e-6 and second < 1e-6
    first, second = copy_losses(torch.zeros(3, 9, 7), batch)
    assert first == pytest.approx(math.log(7)) and second == pytest.approx(math.log(7))
    with pytest.raises(ValueError, match="logits"):
        copy_losses(torch.zeros(3, 8, 7), batch)


# ----------------------------------------------------------------------------- model


def test_the_model_is_causal_and_returns_every_layers_weights() -> None:
    model = _toy()
    tokens = torch.randint(12, (3, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits, weights = model(tokens)
    assert logits.shape == (3, 10, 12) and weights.shape == (2, 3, 2, 10, 10)
    future = ~torch.ones(10, 10, dtype=torch.bool).tril()
    assert bool((weights[..., future] == 0).all())  # exact: masked weights are zeros
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 2, 10))


def test_bypass_feeds_the_later_layers_the_embeddings() -> None:
    model = _toy()
    tokens = torch.randint(12, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        plain = model(tokens)
        x0 = model.embed(tokens) + model.positions.weight[:9]
        x1 = x0 + model.layers[0](x0).output
        # Every input of layer 1 cut off from layer 0: layer 1 reads x0 only.
        cut = model(tokens, bypass=("query", "key", "value"))
        expected = model.unembed(x1 + model.layers[1](x0).output)
        torch.testing.assert_close(cut.logits, expected)
        # Only the keys: layer 1 gets queries and values from x1, keys from x0.
        keys = model(tokens, bypass="key")
        out = model.layers[1](x1, x0, x1).output
        torch.testing.assert_close(keys.logits, model.unembed(x1 + out))
        torch.testing.assert_close(model(tokens, bypass=None).logits, plain.logits)
    assert not torch.allclose(keys.logits, plain.logits)
    one_layer = _toy(num_layers=1)
    with torch.no_grad():
        torch.testing.assert_close(one_layer(tokens, bypass="key").logits,
                                   one_layer(tokens).logits)


def test_the_model_refuses_bad_input() -> None:
    model = _toy()
    with pytest.raises(ValueError, match="bypass"):
        model(torch.zeros(1, 4, dtype=torch.long), bypass="keys")
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="0 .. 11"):
        model(torch.full((1, 4), 12))
    with pytest.raises(TypeError, match="tokens"):
        model(torch.zeros(1, 4))


# ---------------------------------------------------------------------------- scores


def test_previous_token_score_on_known_maps() -> None:
    L = 6
    previous = torch.zeros(L, L)
    previous[0, 0] = 1.0
    previous[torch.arange(1, L), torch.arange(L - 1)] = 1.0
    assert previous_token_score(previous).item() == 1.0  # exact: a mean of ones
    assert previous_token_score(torch.eye(L)).item() == 0.0
    stacked = torch.stack([previous, torch.eye(L)])[None]  # (1, 2, L, L)
    assert previous_token_score(stacked).tolist() == [[1.0, 0.0]]
    # Queries at the last L of S keys: query t sits at key S - L + t.
    rectangular = torch.zeros(3, 5)
    rectangular[torch.arange(3), torch.arange(1, 4)] = 1.0  # each query on the key before
    assert previous_token_score(rectangular).item() == 1.0
    with pytest.raises(ValueError, match="weights"):
        previous_token_score(torch.ones(1, 4))


def test_prefix_matching_score_on_known_maps_and_a_loop() -> None:
    for T, L in ((4, 7), (4, 8), (5, 9)):
        induction = torch.zeros(L, L)
        for t in range(T, L):
            induction[t, t - T + 1] = 1.0
        assert prefix_matching_score(induction, T).item() == 1.0  # exact: ones
        shifted = torch.zeros(L, L)
        for t in range(T, L):
            shifted[t, t - T] = 1.0  # the earlier occurrence itself, not the token after
        assert prefix_matching_score(shifted, T).item() == 0.0
    weights = torch.randn(2, 3, 9, 9, generator=torch.Generator().manual_seed(4)).softmax(-1)
    loop = torch.stack([weights[..., t, t - 5 + 1] for t in range(5, 9)], -1).mean(-1)
    torch.testing.assert_close(prefix_matching_score(weights, 5), loop)
    with pytest.raises(ValueError, match="period"):
        prefix_matching_score(weights, 3)  # L = 9 > 2T
    with pytest.raises(ValueError, match="period"):
        prefix_matching_score(weights, 9)


def _full_copying(w_v, w_o, embed, unembed, g_in=None, g_out=None) -> float:
    g_in = torch.ones(embed.shape[1]) if g_in is None else g_in
    g_out = torch.ones(embed.shape[1]) if g_out is None else g_out
    M = (unembed.double() * g_out.double()) @ w_o.double() @ w_v.double() \
        @ (embed.double() * g_in.double()).T  # (V, V)
    eigenvalues = torch.linalg.eigvals(M)
    return float(eigenvalues.real.sum() / eigenvalues.abs().sum())


def test_copying_score_of_a_copier_its_opposite_and_the_full_matrix() -> None:
    generator = torch.Generator().manual_seed(5)
    w_v = torch.randn(4, 8, generator=generator, dtype=torch.float64)
    embed = torch.randn(20, 8, generator=generator, dtype=torch.float64)
    assert copying_score(w_v, w_v.T, embed, embed) == pytest.approx(1.0, abs=1e-12)
    assert copying_score(w_v, -w_v.T, embed, embed) == pytest.approx(-1.0, abs=1e-12)
    w_o = torch.randn(8, 4, generator=generator, dtype=torch.float64)
    unembed = torch.randn(20, 8, generator=generator, dtype=torch.float64)
    g_in = torch.rand(8, generator=generator, dtype=torch.float64) + 0.5
    g_out = torch.rand(8, generator=generator, dtype=torch.float64) + 0.5
    assert copying_score(w_v, w_o, embed, unembed) == pytest.approx(
        _full_copying(w_v, w_o, embed, unembed), abs=1e-8)
    assert copying_score(w_v, w_o, embed, unembed, norm_in=g_in, norm_out=g_out) == \
        pytest.approx(_full_copying(w_v, w_o, embed, unembed, g_in, g_out), abs=1e-8)
    with pytest.raises(ValueError, match="w_v"):
        copying_score(w_v, w_o.T, embed, unembed)


@torch.no_grad()
def test_copying_scores_of_every_head_of_both_models() -> None:
    toy = _toy()
    scores = copying_scores(toy)
    assert scores.shape == (2, 2)
    layer = toy.layers[1]
    w_v = layer.v_proj.weight[8:16]
    w_o = layer.out_proj.weight[:, 8:16]
    assert scores[1, 1].item() == pytest.approx(
        copying_score(w_v, w_o, toy.embed.weight, toy.unembed.weight), abs=1e-10)

    decoder = _small_decoder()
    scores = copying_scores(decoder)
    assert scores.shape == (2, 4)
    d = decoder.config.d_head
    for index, block in enumerate(decoder.blocks):
        for head in range(4):
            kv = head // 2  # two query heads share each key/value head
            expected = _full_copying(block.attn.v_proj.weight[kv * d:(kv + 1) * d],
                                     block.attn.out_proj.weight[:, head * d:(head + 1) * d],
                                     decoder.embed.weight, decoder.embed.weight,
                                     block.attn_norm.weight, decoder.norm.weight)
            assert scores[index, head].item() == pytest.approx(expected, abs=1e-8)
    with pytest.raises(TypeError, match="model"):
        copying_scores(torch.nn.Linear(2, 2))


# -------------------------------------------------------------------------- ablation


def test_replace_heads_zeroes_or_averages_one_slice_only() -> None:
    merged = torch.randn(3, 5, 12, generator=torch.Generator().manual_seed(6))
    before = merged.clone()
    zeroed = replace_heads(merged, [1], 3, how="zero")
    averaged = replace_heads(merged, [2], 3, how="mean")
    assert torch.equal(merged, before)  # the input is left alone
    assert bool((zeroed[..., 4:8] == 0).all())
    assert torch.equal(zeroed[..., :4], merged[..., :4])
    assert torch.equal(zeroed[..., 8:], merged[..., 8:])
    torch.testing.assert_close(averaged[..., 8:],
                               merged[..., 8:].mean(dim=(0, 1)).expand(3, 5, 4))
    assert torch.equal(averaged[..., :8], merged[..., :8])
    unbatched = replace_heads(merged[0], [0], 3, how="mean")
    torch.testing.assert_close(unbatched[:, :4], merged[0, :, :4].mean(0).expand(5, 4))
    with pytest.raises(ValueError, match="num_heads"):
        replace_heads(merged, [0], 5)
    with pytest.raises(ValueError, match="head"):
        replace_heads(merged, [3], 3)
    with pytest.raises(ValueError, match="how"):
        replace_heads(merged, [0], 3, how="random")


def test_ablating_every_head_leaves_the_embeddings_and_the_hooks_go_away() -> None:
    model = _toy()
    tokens = torch.randint(12, (2, 8), generator=torch.Generator().manual_seed(7))
    every = [(layer, head) for layer in range(2) for head in range(2)]
    with torch.no_grad():
        plain = model(tokens).logits
        with ablate_heads(model, every, how="zero"):
            ablated = model(tokens).logits
        embeddings = model.embed(tokens) + model.positions.weight[:8]
        # out_proj has no bias, so zeroed heads add nothing.
        torch.testing.assert_close(ablated, model.unembed(embeddings))
        torch.testing.assert_close(model(tokens).logits, plain)  # hooks removed
        with pytest.raises(RuntimeError, match="inside"), ablate_heads(model, every):
            raise RuntimeError("inside")
        torch.testing.assert_close(model(tokens).logits, plain)


def test_mean_ablation_makes_a_layer_add_the_same_vector_everywhere() -> None:
    model = _toy(num_heads=1, num_layers=1)
    tokens = torch.randint(12, (3, 8), generator=torch.Generator().manual_seed(8))
    with torch.no_grad(), ablate_heads(model, [(0, 0)], how="mean"):
        logits = model(tokens).logits
        embeddings = model.embed(tokens) + model.positions.weight[:8]
        added = torch.linalg.lstsq(model.unembed.weight, (logits - model.unembed(embeddings))
                                   .flatten(0, 1).T).solution.T  # (B * L, d_model)
    torch.testing.assert_close(added, added[:1].expand_as(added), atol=1e-4, rtol=1e-4)


def test_ablate_heads_works_on_a_decoder_and_refuses_bad_pairs() -> None:
    decoder = _small_decoder()
    assert len(attention_layers(decoder)) == 2
    ids = torch.randint(50, (1, 6), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        plain = decoder(ids).logits
        with ablate_heads(decoder, [(1, 3)], how="mean"):
            ablated = decoder(ids).logits
    assert not torch.allclose(plain, ablated)
    with pytest.raises(ValueError, match="not in the model"):
        with ablate_heads(decoder, [(2, 0)]):
            pass
    with pytest.raises(TypeError, match="pairs"):
        with ablate_heads(decoder, [1]):
            pass
    with pytest.raises(ValueError, match="how"):
        with ablate_heads(decoder, [(0, 0)], how="half"):
            pass
    with pytest.raises(TypeError, match="model"):
        attention_layers(torch.nn.Linear(2, 2))


# -------------------------------------------------------------------------- training


def test_training_is_reproducible_and_records_both_copies() -> None:
    data = RepeatedTokens(vocab_size=8, min_period=3, max_period=5)
    models = [_toy(vocab_size=8, max_len=data.length) for _ in range(2)]  # the same init
    runs = []
    state = torch.get_rng_state()
    threads = torch.get_num_threads()
    for model in models:
        history = train_induction(model, data, steps=30, eval_every=10, seed=3,
                                  eval_batch_size=16)
        runs.append((history, model))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads
    (first, model_a), (second, model_b) = runs
    assert first.steps == [0, 10, 20, 30]
    assert len(first.first) == len(first.second) == 4
    assert first.second == second.second and first.first == second.first
    for a, b in zip(model_a.parameters(), model_b.parameters(), strict=True):
        assert torch.equal(a, b)
    assert first.seconds > 0
    assert first.second[-1] < first.second[0]  # 30 Adam steps lower the loss from init


def test_training_refuses_what_does_not_fit() -> None:
    data = RepeatedTokens(vocab_size=8, min_period=3, max_period=9)
    with pytest.raises(ValueError, match="max_len"):
        train_induction(_toy(vocab_size=8, max_len=10), data, steps=1)
    with pytest.raises(TypeError, match="model"):
        train_induction(torch.nn.Linear(2, 2), data, steps=1)
    with pytest.raises(TypeError, match="data"):
        train_induction(_toy(), "data", steps=1)
    with pytest.raises(ValueError, match="lr"):
        train_induction(_toy(vocab_size=8, max_len=17), data, steps=1, lr=0.0)
