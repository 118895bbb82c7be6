"""Tests of exercise training-attention-ex3. Run from the repository root:
`.venv/bin/python -m pytest exercises/training_attention`."""

import torch

from attnbook.checks import check_repeat_pattern
from attnbook.training import RepeatTask

from .solution import repeat_pattern


def test_period_4_by_hand():
    R = repeat_pattern(9, 4)
    assert tuple(R.shape) == (9, 9), f"expected an (L, L) = (9, 9) map, got {tuple(R.shape)}"
    assert (R[:3] == 0).all(), (
        f"rows 0, 1 and 2 predict fresh random tokens: they must be all zero; got "
        f"{R[:3].tolist()}"
    )
    assert R[3, 0] == 1 and R[3].sum() == 1, (
        f"row 3 predicts x_4, a copy of x_0: all its weight on key 0; got {R[3].tolist()}"
    )
    expected_row_8 = torch.tensor([0, 0.5, 0, 0, 0, 0.5, 0, 0, 0], dtype=R.dtype)
    assert torch.allclose(R[8], expected_row_8), (
        f"row 8 predicts x_9, which sits at keys 1 and 5: 1/2 on each; got {R[8].tolist()}"
    )


def test_every_key_it_names_holds_the_target():
    task = RepeatTask(length=12, period=3)
    inputs, targets = task.batch(64, torch.Generator().manual_seed(0))  # (B, L) each
    for t, j in torch.nonzero(repeat_pattern(12, 3)).tolist():
        assert j <= t, f"row {t} gives weight to key {j}, which the causal mask hides"
        assert torch.equal(inputs[:, j], targets[:, t]), (
            f"row {t} gives weight to key {j}, but key {j} does not hold the target of "
            f"position {t}: for sequence 0 it holds {inputs[0, j].item()}, the target is "
            f"{targets[0, t].item()}"
        )


def test_against_the_package():
    check_repeat_pattern(repeat_pattern)
