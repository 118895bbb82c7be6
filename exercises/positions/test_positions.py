"""Tests of exercises positions-ex1, positions-ex2 and positions-ex3. Run from the repository
root: `.venv/bin/python -m pytest exercises/positions`."""

import math

import torch

from attnbook.checks import check_alibi_slopes, check_rope_interleaved, check_sinusoidal
from attnbook.positions import interleaved_order, rope

from .solution import my_alibi_slopes, my_sinusoidal, rope_interleaved

# positions-ex1: the sinusoidal encoding


def test_sinusoidal_rows_by_hand():
    pe = my_sinusoidal(2, 4)  # pair 0 turns at 1 / 10000^0 = 1, pair 1 at 1 / 10000^(2/4)
    assert isinstance(pe, torch.Tensor) and tuple(pe.shape) == (2, 4), (
        f"one row per position and one column per feature: expected a tensor of shape (2, 4), "
        f"got {tuple(getattr(pe, 'shape', ()))} ({type(pe).__name__})"
    )
    expected = torch.tensor([[0.0, 1.0, 0.0, 1.0],
                             [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]])
    assert pe.is_floating_point() and torch.allclose(pe.double(), expected.double(),
                                                     atol=1e-6), (
        f"row 0 is position 0: sin 0 = 0 in the even features and cos 0 = 1 in the odd ones. "
        f"Row 1 is position 1: pair 0 turns by 1 radian, pair 1 by 1/100, the sine in feature "
        f"2i and the cosine in feature 2i+1. Expected {expected.tolist()}, got {pe.tolist()}"
    )


def test_sinusoidal_products_depend_on_the_offset_only():
    pe = my_sinusoidal(20, 8).double()  # (L, E)
    lengths = (pe * pe).sum(dim=-1)  # (L,): sin² + cos² = 1 for each of the E/2 = 4 pairs
    assert torch.allclose(lengths, torch.full((20,), 4.0, dtype=torch.float64), atol=1e-5), (
        f"every row holds 4 pairs (sin, cos) of one angle, so its squared length is "
        f"4 · (sin² + cos²) = 4; got {lengths.tolist()}"
    )
    products = [float(pe[p] @ pe[p + 3]) for p in (0, 5, 12)]
    assert all(math.isclose(value, products[0], abs_tol=1e-5) for value in products), (
        f"PE[p] · PE[p + 3] = sum over pairs of cos(3 · frequency_i): the same for every p. "
        f"Got {products} for p = 0, 5 and 12"
    )


def test_sinusoidal_against_the_package():
    check_sinusoidal(my_sinusoidal)


# positions-ex2: rotary positions in the interleaved layout


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


def test_rope_interleaved_against_the_package():
    check_rope_interleaved(rope_interleaved)


# positions-ex3: ALiBi's head slopes


def test_alibi_slopes_of_eight_heads_by_hand():
    slopes = my_alibi_slopes(8)
    assert isinstance(slopes, torch.Tensor) and tuple(slopes.shape) == (8,), (
        f"one slope per head: expected a tensor of shape (8,), got "
        f"{tuple(getattr(slopes, 'shape', ()))} ({type(slopes).__name__})"
    )
    expected = [2.0 ** -h for h in range(1, 9)]  # 2^(-8h/8) = 2^-h
    assert torch.allclose(slopes.double(), torch.tensor(expected, dtype=torch.float64),
                          rtol=1e-6, atol=0), (
        f"8 is a power of two, so head h = 1 .. 8 gets 2^(-8h/8) = 2^-h: 1/2, 1/4, ..., "
        f"1/256, largest first. Expected {expected}, got {slopes.tolist()}"
    )


def test_alibi_slopes_of_twelve_heads_by_hand():
    slopes = torch.as_tensor(my_alibi_slopes(12), dtype=torch.float64)
    # the 8 slopes of 8 heads, then heads 1, 3, 5 and 7 of 16 heads: 2^(-8h/16) = 2^(-h/2)
    expected = [2.0 ** -h for h in range(1, 9)] + [2.0 ** -(h / 2) for h in (1, 3, 5, 7)]
    assert torch.allclose(slopes, torch.tensor(expected, dtype=torch.float64),
                          rtol=1e-6, atol=0), (
        f"12 is not a power of two: keep the 8 slopes of 8 heads, 2^-1 .. 2^-8, then append "
        f"every other slope of 16 heads, 2^-0.5, 2^-1.5, 2^-2.5 and 2^-3.5 (not sorted). "
        f"Expected {[round(value, 4) for value in expected]}, got "
        f"{[round(value, 4) for value in slopes.flatten().tolist()]}"
    )


def test_alibi_slopes_against_the_package():
    check_alibi_slopes(my_alibi_slopes)
