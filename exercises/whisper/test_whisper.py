"""Tests of exercises whisper-ex1, whisper-ex4 and whisper-ex5. Run from the repository root:
`.venv/bin/python -m pytest exercises/whisper`."""

import numpy as np
import torch

from attnbook.checks import check_cross_attention_steps, check_dtw, check_word_rows
from attnbook.layers import MultiHeadAttention

from .solution import my_cross_steps, my_dtw, my_word_rows


def test_my_dtw_by_hand():
    got = [tuple(int(x) for x in pair) for pair in my_dtw(np.array([[0.0, 5.0, 5.0],
                                                                     [5.0, 0.0, 0.0]]))]
    assert got == [(0, 0), (1, 1), (1, 2)], (
        f"from (0, 0), one diagonal step to (1, 1) and one step right to (1, 2) cost 0, "
        f"and every other path passes a 5; got {got}"
    )


def test_my_dtw_single_row():
    got = [tuple(int(x) for x in pair) for pair in my_dtw(np.ones((1, 4)))]
    assert got == [(0, 0), (0, 1), (0, 2), (0, 3)], (
        f"a single row leaves one path: every cell, left to right; got {got}"
    )


def test_my_dtw_against_the_package():
    check_dtw(my_dtw)


def test_my_cross_steps_weights_sum_to_one():
    # Every value vector the same: whatever the weights, each head's output is that vector,
    # if the weights over the audio positions sum to 1.
    generator = torch.Generator().manual_seed(0)
    cross = MultiHeadAttention(8, 2)
    sound = torch.randn(1, 6, 8, generator=generator)
    text = torch.randn(1, 3, 8, generator=generator)
    with torch.no_grad():
        cross.v_proj.weight.zero_()
        got = my_cross_steps(cross, sound, text)
        expected = cross.out_proj(cross.v_proj.bias.expand(1, 3, 8))
    assert got.shape == (1, 3, 8), f"expected (B, T, d_model) = (1, 3, 8), got {got.shape}"
    assert torch.allclose(got, expected, atol=1e-6), (
        "with every value vector equal, each step's output is that vector through "
        "cross.out_proj: do the weights of one step sum to 1 over the audio positions?"
    )


def test_my_cross_steps_projects_the_sound_once():
    cross = MultiHeadAttention(8, 2)
    calls = []
    cross.k_proj.register_forward_hook(
        lambda module, args, kwargs, out: calls.append((args or tuple(kwargs.values()))[0]
                                                       .shape), with_kwargs=True)
    with torch.no_grad():
        my_cross_steps(cross, torch.randn(1, 6, 8), torch.randn(1, 4, 8))
    assert [c.numel() for c in calls] == [6 * 8], (
        f"cross.k_proj should run once, on the sound (1, 6, 8), before the 4 steps (call the "
        f"module, `cross.k_proj(sound)`); it ran on {[tuple(c) for c in calls]}"
    )


def test_my_cross_steps_against_the_package():
    check_cross_attention_steps(my_cross_steps)


def test_my_word_rows_by_hand():
    got = [list(word) for word in my_word_rows(2, [[400], [500, 501]])]
    assert got == [[1], [2, 3]], (
        f"the prompt is rows 0 and 1; row 1 predicts the first word's token (position 2), "
        f"rows 2 and 3 predict the second word's two tokens (positions 3 and 4); got {got}"
    )


def test_my_word_rows_against_the_package():
    check_word_rows(my_word_rows)
