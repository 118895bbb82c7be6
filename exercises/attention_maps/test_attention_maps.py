"""Tests of exercise attention-maps-ex3. Run from the repository root:
`.venv/bin/python -m pytest exercises/attention_maps`."""

import math

import torch

from attnbook.checks import check_row_entropy

from .solution import row_entropy


def test_one_hot_and_uniform_rows():
    weights = torch.tensor([[1.0, 0.0, 0.0, 0.0],    # looks at one key: entropy 0
                            [0.25, 0.25, 0.25, 0.25]])  # uniform over 4 keys: ln 4
    entropy = row_entropy(weights[None, None])  # (1, 1, 2, 4) -> (1, 1, 2)
    assert entropy.shape == (1, 1, 2), f"expected shape (1, 1, 2), got {tuple(entropy.shape)}"
    assert not entropy.isnan().any(), (
        f"got NaN {entropy.tolist()}: 0 * log(0) must count as 0, not 0 * -inf = nan"
    )
    assert torch.allclose(entropy[0, 0], torch.tensor([0.0, math.log(4)]), atol=1e-6), (
        f"expected [0, ln 4 = {math.log(4):.4f}], got {entropy[0, 0].tolist()}"
    )


def test_against_the_package():
    check_row_entropy(row_entropy)
