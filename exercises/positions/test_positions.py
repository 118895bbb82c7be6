"""Tests of exercise positions-ex2. Run from the repository root:
`.venv/bin/python -m pytest exercises/positions`."""

import math

import torch

from attnbook.checks import check_rope_interleaved
from attnbook.positions import interleaved_order, rope

from .solution import rope_interleaved


def test_one_pair_by_hand():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0]])  # (L, D) = (3, 2): one pair
    turned = rope_interleaved(x, torch.tensor([0, 1, 2]))
    expected = torch.tensor([[1.0, 0.0], [math.cos(1), math.sin(1)],
                             [-2 * math.sin(2), 2 * math.cos(2)]])
    assert torch.allclose(turned, expected, atol=1e-6), (
        f"the single pair turns by 1 radian per position (theta_0 = base^0 = 1), "
        f"counterclockwise: position 0 stays (1, 0), position 1 becomes (cos 1, sin 1), and "
        f"(0, 2) at position 2 becomes (-2 sin 2, 2 cos 2). Expected {expected.tolist()}, "
        f"got {turned.tolist()}"
    )


def test_scores_depend_on_the_offset_only():
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 8, generator=gen), torch.randn(1, 8, generator=gen)  # (1, D) each
    scores = [float(rope_interleaved(q, torch.tensor([m])) @ rope_interleaved(
        k, torch.tensor([m - 3])).T) for m in (3, 10, 50)]
    assert math.isclose(scores[0], scores[1], abs_tol=1e-4) and math.isclose(
        scores[0], scores[2], abs_tol=1e-4), (
        f"a query at position m and a key at m - 3 must give the same score wherever m is: "
        f"got {scores} for m = 3, 10 and 50"
    )


def test_layouts_differ_until_the_features_are_reordered():
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(6, 8, generator=gen), torch.randn(6, 8, generator=gen)  # (L, D) each
    positions = torch.arange(6)
    half_split = rope(q, positions) @ rope(k, positions).T  # (L, L), the LLaMA layout
    interleaved = rope_interleaved(q, positions) @ rope_interleaved(k, positions).T
    assert not torch.allclose(interleaved, half_split, atol=1e-3), (
        "on the same q and k the two layouts pair different features, so their scores differ"
    )
    order = interleaved_order(8)  # [0, 4, 1, 5, 2, 6, 3, 7]
    reordered = rope_interleaved(q[..., order], positions) @ rope_interleaved(
        k[..., order], positions).T
    assert torch.allclose(reordered, half_split, atol=1e-5), (
        f"after reordering the features of q and k with interleaved_order(8), feature i and "
        f"i + 4 are neighbours, so the interleaved rotation must give the half-split scores. "
        f"Largest difference: {float((reordered - half_split).abs().max()):.3g}"
    )


def test_against_the_package():
    check_rope_interleaved(rope_interleaved)
