"""Tests of exercise multi-head-attention-ex3. Run from the repository root:
`.venv/bin/python -m pytest exercises/multi_head_attention`."""

import torch

from attnbook.checks import check_split_merge_heads

from .solution import my_merge_heads, my_split_heads


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


def test_against_the_package():
    check_split_merge_heads(my_split_heads, my_merge_heads)
