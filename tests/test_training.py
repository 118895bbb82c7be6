"""``attnbook.training``: tasks, the tiny model, the training loop, the mask experiment."""

from __future__ import annotations

import math
import re

import pytest
import torch

from attnbook.masks import causal_mask
from attnbook.training import (
    Evaluation,
    RepeatTask,
    ReversalTask,
    TinyAttentionModel,
    evaluate,
    future_mask,
    generate,
    honest_accuracy,
    lookahead_mask,
    mask_experiment,
    pattern_agreement,
    train,
)

TASKS = [ReversalTask(), ReversalTask(vocab_size=15, length=11), RepeatTask(),
         RepeatTask(vocab_size=12, length=9, period=4)]


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def reversal() -> tuple[ReversalTask, TinyAttentionModel, object]:
    """A model trained on reversal with a generous budget (it reaches 99% in ~50 steps)."""
    task = ReversalTask()
    model = TinyAttentionModel.for_task(task, seed=0)
    history = train(model, task, steps=300, seed=0, progress=False)
    return task, model, history


@pytest.fixture(scope="module")
def experiment():
    """The causal and the future-revealing model on ``RepeatTask()``."""
    return mask_experiment(RepeatTask(), steps=300, seed=0)


# ------------------------------------------------------------------------------ tasks


@pytest.mark.parametrize("task", TASKS, ids=repr)
def test_batches_are_seeded(task):
    inputs, targets = task.batch(32, generator(7))
    again_inputs, again_targets = task.batch(32, generator(7))
    other_inputs, _ = task.batch(32, generator(8))
    assert inputs.dtype == targets.dtype == torch.long
    assert inputs.shape == targets.shape == (32, task.length)
    assert torch.equal(inputs, again_inputs) and torch.equal(targets, again_targets)
    assert not torch.equal(inputs, other_inputs)
    assert int(inputs.min()) >= 0 and int(inputs.max()) < task.vocab_size


@pytest.mark.parametrize("task", TASKS, ids=repr)
def test_required_keys_hold_the_answer(task):
    """Every key the required map names holds the target, in every sequence."""
    inputs, targets = task.batch(256, generator(0))
    required = task.required_pattern()
    L = task.length
    answerable = task.answerable()
    assert required.shape == (L, L)
    assert torch.equal(required.sum(-1) > 0, answerable)
    torch.testing.assert_close(required.sum(-1)[answerable], torch.ones(int(answerable.sum())))
    for t, j in torch.nonzero(required).tolist():
        assert torch.equal(inputs[:, j], targets[:, t]), (t, j)


@pytest.mark.parametrize("L", [2, 5, 8, 13])
def test_reversal_pattern_is_the_anti_diagonal(L):
    task = ReversalTask(length=L)
    inputs, targets = task.batch(16, generator(L))
    required = task.required_pattern()
    for i in range(L):
        assert required[i, L - 1 - i] == 1 and required[i].sum() == 1
        assert torch.equal(targets[:, i], inputs[:, L - 1 - i])
    assert torch.equal(task.required_pattern(4), torch.eye(4).flip(-1))


@pytest.mark.parametrize(("length", "period"), [(16, 8), (9, 4), (12, 12), (7, 2)])
def test_repeat_task_sequences(length, period):
    task = RepeatTask(vocab_size=10, length=length, period=period)
    inputs, targets = task.batch(64, generator(1))
    assert torch.equal(targets[:, :-1], inputs[:, 1:]), "targets are the next inputs"
    assert torch.equal(inputs[:, period:], inputs[:, :-period]), "the prefix repeats"
    required = task.required_pattern()
    assert not bool(required[~causal_mask(length)].any()), "the map needs no future key"
    assert torch.equal(task.answerable(), torch.arange(length) >= period - 1)
    for t in range(period - 1, length):
        assert required[t, t + 1 - period] > 0


def test_repeat_task_default_period_and_pattern():
    task = RepeatTask(vocab_size=10, length=8)
    assert task.period == 4
    expected = torch.zeros(8, 8)
    for t, j in [(3, 0), (4, 1), (5, 2), (6, 3)]:
        expected[t, j] = 1.0
    expected[7, 0] = expected[7, 4] = 0.5  # s[8] = prefix[0] sits at keys 0 and 4
    torch.testing.assert_close(task.required_pattern(), expected)


# -------------------------------------------------------------------------------- masks


@pytest.mark.parametrize("L", [1, 4, 9])
def test_wrong_masks(L):
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    assert torch.equal(future_mask(L), j >= i)
    assert torch.equal(lookahead_mask(L, 0), causal_mask(L))
    assert torch.equal(lookahead_mask(L), j <= i + 1)
    assert torch.equal(lookahead_mask(L, L), torch.ones(L, L, dtype=torch.bool))
    assert future_mask(L).dtype == lookahead_mask(L).dtype == torch.bool


# -------------------------------------------------------------------------------- model


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "none"])
@pytest.mark.parametrize("num_heads", [1, 2])
def test_model_shapes(positions, num_heads):
    model = TinyAttentionModel(vocab_size=11, max_len=9, d_model=16, num_heads=num_heads,
                               positions=positions)
    for L in (9, 4):
        tokens = torch.randint(11, (3, L), generator=generator(L))
        logits, weights = model(tokens, causal_mask(L))
        assert logits.shape == (3, L, 11)
        assert weights.shape == (3, num_heads, L, L)
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, num_heads, L))


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_causal_mask_hides_the_future(positions):
    model = TinyAttentionModel(vocab_size=10, max_len=8, num_heads=2, positions=positions)
    tokens = torch.randint(10, (4, 8), generator=generator(0))
    mask = causal_mask(8)
    logits, weights = model(tokens, mask)
    assert bool((weights[..., ~mask] == 0).all())
    for k in range(8):
        changed = tokens.clone()
        changed[:, k] = (changed[:, k] + 1) % 10
        new_logits, _ = model(changed, mask)
        torch.testing.assert_close(new_logits[:, :k], logits[:, :k], rtol=0, atol=0)
        assert not torch.allclose(new_logits[:, k:], logits[:, k:]), k
    # Without the mask, the last token reaches the first position.
    unmasked, _ = model(tokens)
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 10
    assert not torch.allclose(model(changed).logits[:, 0], unmasked[:, 0])


def test_positions_break_permutation_equivariance():
    tokens = torch.randint(10, (2, 8), generator=generator(3))
    permutation = torch.randperm(8, generator=generator(4))
    blind = TinyAttentionModel(10, 8, positions="none")
    torch.testing.assert_close(blind(tokens[:, permutation]).logits,
                               blind(tokens).logits[:, permutation])
    seeing = TinyAttentionModel(10, 8, positions="learned")
    assert not torch.allclose(seeing(tokens[:, permutation]).logits,
                              seeing(tokens).logits[:, permutation], atol=1e-4)


def test_model_seed_is_local():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first, second = TinyAttentionModel(10, 8, seed=5), TinyAttentionModel(10, 8, seed=5)
    assert torch.equal(torch.get_rng_state(), state), "the global random state is untouched"
    other = TinyAttentionModel(10, 8, seed=6)
    second_state = second.state_dict()
    for name, weight in first.state_dict().items():
        assert torch.equal(weight, second_state[name]), name
    assert not torch.equal(first.readout.weight, other.readout.weight)


# --------------------------------------------------------------------------- agreement


def test_pattern_agreement_exact_uniform_and_wrong():
    required = ReversalTask(length=6).required_pattern()
    exact = required.expand(3, 2, 6, 6)
    assert pattern_agreement(exact, required) == pytest.approx(1.0)
    assert pattern_agreement(exact, required, kind="argmax") == pytest.approx(1.0)
    uniform = torch.full((4, 6, 6), 1 / 6)
    assert pattern_agreement(uniform, required) == pytest.approx(1 / 6)
    wrong = torch.eye(6).expand(4, 6, 6)
    assert pattern_agreement(wrong, required) == 0.0
    assert pattern_agreement(wrong, required, kind="argmax") == 0.0


def test_pattern_agreement_by_hand():
    """Rows with no required key are left out; two required keys both count."""
    required = torch.tensor([[0.0, 0.0, 0.0],
                             [1.0, 0.0, 0.0],
                             [0.5, 0.5, 0.0]])
    weights = torch.tensor([[[1.0, 0.0, 0.0],     # row 0 does not count
                             [0.25, 0.75, 0.0],   # mass 0.25, argmax wrong
                             [0.2, 0.3, 0.5]],    # mass 0.5, argmax wrong
                            [[0.0, 0.0, 1.0],
                             [0.9, 0.1, 0.0],     # mass 0.9, argmax right
                             [0.1, 0.6, 0.3]]])   # mass 0.7, argmax right
    assert pattern_agreement(weights, required) == pytest.approx((0.25 + 0.5 + 0.9 + 0.7) / 4)
    assert pattern_agreement(weights, required, kind="argmax") == pytest.approx(0.5)


# ----------------------------------------------------------------------------- training


def test_training_reduces_the_loss_and_records_history():
    task = ReversalTask(length=6)
    model = TinyAttentionModel.for_task(task, num_heads=2)
    history = train(model, task, steps=40, eval_every=10, eval_batch_size=128,
                    progress=False)
    assert len(history.losses) == 40
    assert sum(history.losses[-5:]) / 5 < 0.7 * sum(history.losses[:5]) / 5
    assert history.eval_steps == [0, 8, 10, 16, 20, 24, 30, 32, 40]  # every 10, every line
    assert len(history.accuracies) == len(history.agreements) == len(history.maps) == 9
    assert history.maps[0].shape == (2, 6, 6)
    assert history.accuracies[-1] > history.accuracies[0]
    assert isinstance(history.final, Evaluation) and history.seconds > 0
    assert history.final_accuracy == history.final.accuracy


def test_training_is_deterministic_and_leaves_global_state_alone():
    task = RepeatTask(length=8)
    torch.manual_seed(42)
    state, threads = torch.get_rng_state(), torch.get_num_threads()
    runs = []
    for seed in (3, 3, 4):
        model = TinyAttentionModel.for_task(task, seed=1)
        history = train(model, task, steps=15, mask=causal_mask(8), seed=seed,
                        eval_batch_size=64, progress=False)
        runs.append((history, model.state_dict()))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads
    (first, first_state), (second, second_state), (other, _) = runs
    assert first.losses == second.losses and first.accuracies == second.accuracies
    for name, weight in first_state.items():
        assert torch.equal(weight, second_state[name]), name
    assert first.losses != other.losses


def test_reversal_learns_the_anti_diagonal(reversal):
    task, model, history = reversal
    assert history.final.accuracy >= 0.99
    assert history.accuracies[0] < 0.3 and history.agreements[0] < 0.5, "learned, not given"
    fresh = evaluate(model, task, seed=99)
    assert fresh.accuracy >= 0.99
    inputs, _ = task.batch(512, generator(2024))
    weights = model(inputs).weights
    required = task.required_pattern()
    assert pattern_agreement(weights, required) >= 0.9
    assert pattern_agreement(weights, required, kind="argmax") >= 0.99
    assert pattern_agreement(history.maps[-1], required) >= 0.9


def test_progress_goes_to_stdout_only(capsys):
    task = ReversalTask(length=4)
    train(TinyAttentionModel.for_task(task), task, steps=10, eval_batch_size=32,
          progress=False)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    train(TinyAttentionModel.for_task(task), task, steps=10, eval_batch_size=32,
          progress=True, progress_lines=3)
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    assert len(lines) == 3
    assert lines[-1].startswith("step 10/10 [####################] loss ")
    assert re.search(r"held-out accuracy +\d+\.\d%$", lines[-1])


# ------------------------------------------------------- next-token task and the mask


def test_causal_model_learns_the_repeat(experiment):
    task = RepeatTask()
    model = experiment.causal.model
    assert experiment.causal.history.final.accuracy >= 0.99
    assert experiment.causal.accuracy >= 0.99
    assert experiment.causal.history.final.agreement >= 0.9
    # With the causal mask, predicting from the past alone is what training measured.
    assert honest_accuracy(model, task, seed=5) == pytest.approx(
        evaluate(model, task, mask=causal_mask(task.length), seed=5).accuracy, abs=1e-9)
    # Given the random prefix, it writes the repeat.
    inputs, targets = task.batch(256, generator(11))
    sequence = torch.cat([inputs, targets[:, -1:]], dim=1)  # (B, L + 1)
    written = generate(model, sequence[:, :task.period], task.length + 1 - task.period)
    assert torch.equal(written[:, :task.period], sequence[:, :task.period])
    assert (written == sequence).float().mean() >= 0.99


def test_future_mask_collapses_the_loss_but_not_honestly(experiment):
    assert experiment.chance == pytest.approx(0.1)
    assert experiment.honest_floor == pytest.approx(7 / 16 * math.log(10))
    assert experiment.causal.loss > 0.95 * experiment.honest_floor
    # The leaky model reads the answer: far below what any honest model can reach ...
    assert experiment.leaky.loss < 0.4 * experiment.honest_floor
    assert experiment.leaky.history.final.accuracy > 0.85
    # ... its map points at future copies of the answer, not at the required keys ...
    assert experiment.leaky.history.final.agreement < 0.1
    L, period = 16, 8
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    future_copies = (j > i) & ((j - i - 1) % period == 0)  # key t + 1 and t + 1 + period
    mean_map = experiment.leaky.history.maps[-1][0]  # (L, L)
    assert float((mean_map * future_copies).sum(-1)[:-1].mean()) > 0.9
    # ... and from the past alone it is near chance.
    assert experiment.leaky.accuracy < 0.25
    assert experiment.causal.accuracy - experiment.leaky.accuracy > 0.7


def test_generate_uses_only_the_past(experiment):
    task = RepeatTask()
    model = experiment.leaky.model
    model.train()
    prompt = task.batch(8, generator(3))[0][:, :5]
    out = generate(model, prompt, 3, future_mask)
    assert out.shape == (8, 8) and out.dtype == torch.long
    assert torch.equal(out[:, :5], prompt)
    assert model.training, "the mode is restored"
    assert torch.equal(generate(model, prompt, 0), prompt)
    # Each generated token is the argmax of the last position, given only what came before.
    for n in range(5, 8):
        logits = model(out[:, :n], future_mask(n)).logits
        assert torch.equal(out[:, n], logits[:, -1].argmax(-1))


# ---------------------------------------------------------------------------- bad input


def _model() -> TinyAttentionModel:
    return TinyAttentionModel(10, 8)


@pytest.mark.parametrize("training", [True, False])
def test_evaluate_restores_the_mode(training):
    model = _model().train(training)
    evaluate(model, ReversalTask(), batch_size=4)
    assert model.training is training


BAD_INPUTS = [
    (lambda: ReversalTask(vocab_size=1), ValueError, "vocab_size must be at least 2, got 1"),
    (lambda: ReversalTask(length=2.5), TypeError, "length must be an int, got float"),
    (lambda: RepeatTask(length=8, period=9), ValueError, "period must be at most length=8"),
    (lambda: RepeatTask(period=1), ValueError, "period must be at least 2"),
    (lambda: ReversalTask().batch(0, generator(0)), ValueError, "batch_size must be at least 1"),
    (lambda: RepeatTask().batch(4, 0), TypeError, "generator must be a torch.Generator"),
    (lambda: ReversalTask().required_pattern(0), ValueError, "L must be at least 1"),
    (lambda: TinyAttentionModel(10, 8, d_model=30, num_heads=4), ValueError,
     "num_heads=4 must divide d_model=30"),
    (lambda: TinyAttentionModel(10, 8, positions="rotary"), ValueError,
     "positions must be one of 'learned', 'sinusoidal', 'rope', 'alibi', 'none'"),
    (lambda: TinyAttentionModel(10, 0), ValueError, "max_len must be at least 1"),
    (lambda: _model()(torch.zeros(2, 4)), TypeError, "tokens must hold integer tokens"),
    (lambda: _model()(torch.zeros(4, dtype=torch.long)), ValueError,
     r"tokens must have shape \(B, L\), got shape \(4,\)"),
    (lambda: _model()(torch.zeros(2, 9, dtype=torch.long)), ValueError,
     "tokens has length L=9 .* max_len=8"),
    (lambda: _model()(torch.full((2, 4), 10)), ValueError, r"tokens must lie in 0 \.\. 9"),
    (lambda: _model()(torch.zeros(2, 4, dtype=torch.long), torch.ones(4, 4)), TypeError,
     "mask must be a boolean tensor"),
    (lambda: _model()(torch.zeros(2, 4, dtype=torch.long), causal_mask(5)), ValueError,
     r"mask of shape \(5, 5\) does not broadcast"),
    (lambda: train([1], ReversalTask(), steps=1), TypeError, "model must be an nn.Module"),
    (lambda: train(_model(), "reversal", steps=1), TypeError, "task must be a task"),
    (lambda: train(_model(), ReversalTask(), steps=0), ValueError, "steps must be at least 1"),
    (lambda: train(_model(), ReversalTask(), steps=1, lr=-1.0), ValueError,
     "lr must be a finite number > 0, got -1.0"),
    (lambda: train(_model(), ReversalTask(), steps=1, lr="fast"), TypeError,
     "lr must be a real number, got str"),
    (lambda: train(_model(), ReversalTask(), steps=1, mask=torch.ones(8, 8)), TypeError,
     "mask must be a boolean tensor"),
    (lambda: train(_model(), ReversalTask(), steps=1, mask=causal_mask(7)), ValueError,
     r"mask of shape \(7, 7\) does not broadcast"),
    (lambda: train(_model(), ReversalTask(), steps=1, seed=-1), ValueError,
     "seed must be at least 0"),
    (lambda: train(_model(), ReversalTask(), steps=1, progress="yes"), TypeError,
     "progress must be a bool"),
    (lambda: pattern_agreement(torch.ones(2, 3, 3), torch.eye(4)), ValueError,
     r"weights must have shape \(\.\.\., L, S\) = \(\.\.\., 4, 4\)"),
    (lambda: pattern_agreement(torch.ones(3, 3, dtype=torch.long), torch.eye(3)), TypeError,
     "weights must be a floating-point tensor"),
    (lambda: pattern_agreement(torch.ones(3, 3), torch.zeros(3, 3)), ValueError,
     "required has no non-zero row"),
    (lambda: pattern_agreement(torch.ones(3, 3), torch.eye(3), kind="max"), ValueError,
     'kind must be "mass" or "argmax"'),
    (lambda: pattern_agreement(torch.ones(3, 3), [[1.0]]), TypeError,
     "required must be a torch.Tensor"),
    (lambda: generate(_model(), torch.zeros(2, 6, dtype=torch.long), 4), ValueError,
     "make the model read 9 tokens, beyond its max_len=8"),
    (lambda: generate(_model(), torch.zeros(2, 3), 1), TypeError,
     "prompt must hold integer tokens"),
    (lambda: generate(_model(), torch.zeros(2, 3, dtype=torch.long), 1, mask_fn="causal"),
     TypeError, "mask_fn must be a function n -> "),
    (lambda: generate(_model(), torch.zeros(2, 3, dtype=torch.long), -1), ValueError,
     "steps must be at least 0"),
    (lambda: honest_accuracy(_model(), RepeatTask(length=8), batch_size=0), ValueError,
     "batch_size must be at least 1"),
    (lambda: mask_experiment(leaky_mask_fn=None), TypeError, "leaky_mask_fn must be a"),
    (lambda: lookahead_mask(4, -1), ValueError, "lookahead must be at least 0"),
]


@pytest.mark.parametrize(("call", "error", "message"), BAD_INPUTS,
                         ids=[case[2][:40] for case in BAD_INPUTS])
def test_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()
