"""Tests of exercise pytorch-implementation-ex1. Run from the repository root:
`.venv/bin/python -m pytest exercises/pytorch_implementation`."""

import torch
from torch import nn

from attnbook.checks import check_simple_attention

from .solution import MySimpleAttention


def test_three_square_projections():
    layer = MySimpleAttention(6)
    for name in ("query", "key", "value"):
        projection = getattr(layer, name, None)
        assert isinstance(projection, nn.Linear), (
            f"self.{name} must be an nn.Linear(6, 6), got {type(projection).__name__}"
        )
        assert (projection.in_features, projection.out_features) == (6, 6), (
            f"self.{name} must map 6 features to 6, got nn.Linear({projection.in_features}, "
            f"{projection.out_features})"
        )


def test_shapes_and_rows_that_sum_to_one():
    torch.manual_seed(0)
    layer = MySimpleAttention(6)
    output, weights = layer(torch.randn(2, 5, 6))  # (B, L, n_embd)
    assert output.shape == (2, 5, 6), f"output must be (B, L, n_embd), got {output.shape}"
    assert weights.shape == (2, 5, 5), f"weights must be (B, L, L), got {weights.shape}"
    assert torch.allclose(weights.sum(dim=-1), torch.ones(2, 5), atol=1e-6), (
        "every row of the weights must sum to 1: take the softmax over the keys, dim=-1"
    )


def test_against_the_package():
    check_simple_attention(MySimpleAttention)
