"""Tests of exercise dot-product-similarity-ex3. Run from the repository root:
`.venv/bin/python -m pytest exercises/dot_product_similarity`."""

import torch

from attnbook.checks import check_batched_raw_attention

from .solution import batched_raw_attention


def test_shapes_and_rows_that_sum_to_one():
    x = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(0))  # (B, L, E)
    output, weights = batched_raw_attention(x)
    assert output.shape == (2, 5, 3), f"output must be (B, L, E) = (2, 5, 3), got {output.shape}"
    assert weights.shape == (2, 5, 5), f"weights must be (B, L, L) = (2, 5, 5), got {weights.shape}"
    row_sums = weights.sum(dim=-1)
    assert torch.allclose(row_sums, torch.ones(2, 5)), (
        f"every row of the weights must sum to 1 (softmax over dim=-1); got {row_sums}"
    )


def test_each_sequence_is_attended_on_its_own():
    x = torch.randn(3, 4, 6, generator=torch.Generator().manual_seed(1))
    output, _ = batched_raw_attention(x)
    alone, _ = batched_raw_attention(x[1:2])
    assert torch.allclose(output[1:2], alone, atol=1e-6), (
        "sequence 1 gave a different output inside the batch than on its own: the "
        "sequences of a batch must not mix"
    )


def test_against_the_package():
    check_batched_raw_attention(batched_raw_attention)
