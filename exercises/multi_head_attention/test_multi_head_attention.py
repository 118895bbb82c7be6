"""Tests of exercises multi-head-attention-ex3 and -ex5. Run from the repository root:
`.venv/bin/python -m pytest exercises/multi_head_attention`."""

import math

import torch

from attnbook.checks import check_multi_head_attention, check_split_merge_heads

from .solution import my_merge_heads, my_multi_head_attention, my_split_heads


def test_head_i_holds_the_i_th_slice_of_features():
    x = torch.arange(2 * 3 * 6, dtype=torch.float32).reshape(2, 3, 6)  # (B, L, d_model)
    heads = my_split_heads(x, 3)
    assert heads.shape == (2, 3, 3, 2), (
        f"3 heads of d_model = 6 features: expected (B, h, L, d_head) = (2, 3, 3, 2), got "
        f"{tuple(heads.shape)}"
    )
    for i in range(3):
        assert torch.equal(heads[:, i], x[:, :, 2 * i:2 * i + 2]), (
            f"head {i} must hold features {2 * i} and {2 * i + 1} of every token, "
            f"{x[0, :, 2 * i:2 * i + 2].tolist()} for sequence 0; got {heads[0, i].tolist()}. "
            f"Did you reshape to (B, h, L, d_head) without the transpose?"
        )


def test_merge_undoes_split():
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(0))
    back = my_merge_heads(my_split_heads(x, 4))
    assert torch.equal(back, x), "my_merge_heads(my_split_heads(x, 4)) must give x back"


def test_split_and_merge_against_the_package():
    check_split_merge_heads(my_split_heads, my_merge_heads)


def test_each_head_is_scaled_by_its_own_width():
    # 4 heads of width 1 (d_model = 4): the one query scores key 0 and key 1 with q·k = 0
    # and 2 in every head; with the scale 1/sqrt(d_head) = 1 their weights are
    # e^0 / (e^0 + e^2) and e^2 / (e^0 + e^2).
    q = torch.ones(1, 1, 4)
    k = torch.tensor([[[0.0] * 4, [2.0] * 4]])  # (1, 2, 4)
    v = torch.tensor([[[0.0] * 4, [1.0] * 4]])
    output, weights = my_multi_head_attention(q, k, v, 4)
    share = math.exp(2) / (1 + math.exp(2))
    assert weights.shape == (1, 4, 1, 2), (
        f"weights are (B, h, L, S) = (1, 4, 1, 2); got {tuple(weights.shape)}"
    )
    assert torch.allclose(weights[0, :, 0, 1], torch.full((4,), share)), (
        f"every head has d_head = 1, so its scale is 1/sqrt(1) = 1 and key 1 gets "
        f"e^2 / (1 + e^2) = {share:.4f}; got {weights[0, :, 0, 1].tolist()}. A scale of "
        f"1/sqrt(d_model) = 1/2 gives {math.exp(1) / (1 + math.exp(1)):.4f}."
    )
    assert torch.allclose(output, torch.full((1, 1, 4), share)), (
        f"the output is the weights times the values: {share:.4f} in every feature; got "
        f"{output.tolist()}"
    )


def test_multi_head_attention_against_the_package():
    check_multi_head_attention(my_multi_head_attention)
