"""The helpers chapter ``dot-product-similarity`` added: ``attnbook.plots.plot_vectors_2d``,
and the raw self-attention properties the chapter relies on: symmetric scores, the diagonal
that a longer neighbour can beat, long vectors that make the softmax a hard maximum, and
separate query and key matrices that break the symmetry."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.colors import to_hex

from attnbook.attention import attention, raw_self_attention
from attnbook.plots import OKABE_ITO, plot_vectors_2d


@pytest.fixture(autouse=True)
def agg_backend():
    plt.switch_backend("Agg")
    yield
    plt.close("all")


def arrows(ax):
    """The (x, y) tip of every arrow drawn, in drawing order."""
    tips = []
    for quiver in ax.collections:
        if hasattr(quiver, "U"):
            tips.append((float(quiver.U[0]), float(quiver.V[0])))
    return tips


def mpl_colour(quiver) -> str:
    return to_hex(quiver.get_facecolor()[0])


@pytest.mark.parametrize("kind", ["tensor", "array", "list"])
def test_draws_one_arrow_per_vector_from_the_origin(kind):
    points = [[3.0, 1.0], [1.5, 0.5], [-2.0, 6.0]]
    vectors = {"tensor": torch.tensor(points), "array": np.array(points), "list": points}[kind]
    ax = plot_vectors_2d(vectors, ["q", "short", "misaligned"])
    assert arrows(ax) == [tuple(p) for p in points]
    for quiver in ax.collections:
        np.testing.assert_array_equal(quiver.X, [0.0])
        np.testing.assert_array_equal(quiver.Y, [0.0])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["q", "short", "misaligned"]


def test_axes_are_equal_and_hold_every_tip_and_the_origin():
    ax = plot_vectors_2d(torch.tensor([[4.5, 1.5], [-2.0, 6.0]]))
    assert ax.get_aspect() == 1.0
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert x0 < -2.0 and x1 > 4.5 and y0 < 0.0 and y1 > 6.0
    assert ax.get_legend() is None


def test_default_colours_are_okabe_ito_without_yellow():
    ax = plot_vectors_2d(torch.randn(8, 2, generator=torch.Generator().manual_seed(0)))
    colours = [mpl_colour(q) for q in ax.collections if hasattr(q, "U")]
    assert "#f0e442" not in colours
    assert colours[:7] == [c.lower() for c in OKABE_ITO if c != "#F0E442"]


def test_colours_widths_and_tip_labels_are_used():
    ax = plot_vectors_2d([[1.0, 0.0], [0.0, 1.0]], ["a", "b"], colors=["black", "#E69F00"],
                         widths=[0.02, 0.01], tip_labels=True, title="two")
    quivers = [q for q in ax.collections if hasattr(q, "U")]
    assert [mpl_colour(q) for q in quivers] == ["#000000", "#e69f00"]
    assert [q.width for q in quivers] == [0.02, 0.01]
    assert {t.get_text() for t in ax.texts} == {"a", "b"}
    assert ax.get_title() == "two"


def test_draws_into_a_given_axes():
    _, ax = plt.subplots()
    assert plot_vectors_2d([1.0, 2.0], ax=ax) is ax
    assert arrows(ax) == [(1.0, 2.0)]


@pytest.mark.parametrize(
    ("vectors", "kwargs", "error", "match"),
    [
        ("not vectors", {}, TypeError, "vectors must be"),
        (torch.zeros(3, 3), {}, ValueError, r"shape \(n, 2\)"),
        (torch.zeros(0, 2), {}, ValueError, r"shape \(n, 2\)"),
        ([[1.0, float("nan")]], {}, ValueError, "finite"),
        ([[1.0, 0.0], [0.0, 1.0]], {"labels": ["only one"]}, ValueError, "labels"),
        ([[1.0, 0.0]], {"labels": "a"}, TypeError, "labels"),
        ([[1.0, 0.0]], {"colors": ["red", "blue"]}, ValueError, "colors"),
        ([[1.0, 0.0]], {"widths": [0.1, 0.2]}, ValueError, "widths"),
        ([[1.0, 0.0]], {"tip_labels": True}, ValueError, "tip_labels"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(vectors, kwargs, error, match):
    with pytest.raises(error, match=match):
        plot_vectors_2d(vectors, **kwargs)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 8)])
def test_raw_self_attention_is_softmax_of_x_xt_times_x(seed, shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    scores = x @ x.transpose(-2, -1)  # (..., n, n)
    torch.testing.assert_close(scores, scores.transpose(-2, -1))
    output, weights = raw_self_attention(x)
    torch.testing.assert_close(weights, torch.softmax(scores, dim=-1))
    torch.testing.assert_close(output, weights @ x)


def test_a_short_vector_beside_a_long_aligned_one_loses_its_own_diagonal():
    x = torch.tensor([[0.6, 0.2], [1.8, 0.7]], dtype=torch.float64)
    _, weights = raw_self_attention(x)
    assert weights[0, 1] > weights[0, 0]


def test_equal_norms_make_the_diagonal_win():
    x = torch.nn.functional.normalize(
        torch.randn(50, 6, 4, generator=torch.Generator().manual_seed(3)), dim=-1)
    _, weights = raw_self_attention(x)
    assert (weights.argmax(dim=-1) == torch.arange(6)).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_long_vectors_make_raw_attention_a_hard_maximum(seed):
    """The chapter's layer-1 inputs: long vectors pointing different ways keep all their
    weight. Random directions in 384 dimensions are nearly orthogonal, so at length 8 every
    self score (64) beats every other score by far more than the softmax can bridge."""
    generator = torch.Generator().manual_seed(seed)
    x = 8 * torch.nn.functional.normalize(torch.randn(9, 384, generator=generator), dim=-1)
    output, weights = raw_self_attention(x)
    assert weights.diagonal().min() > 1 - 1e-6
    torch.testing.assert_close(output, x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_stretching_x_sharpens_the_softmax(seed):
    """Scores scale with the square of the length, so the diagonal weight grows with c when
    every vector has the same length (the diagonal is then each row's largest score)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.nn.functional.normalize(torch.randn(6, 16, generator=generator,
                                                  dtype=torch.float64), dim=-1)
    diagonals = [raw_self_attention(c * x).weights.diagonal() for c in (0.5, 1.0, 2.0, 4.0)]
    for smaller, larger in zip(diagonals[:-1], diagonals[1:], strict=True):
        assert (larger > smaller).all()


def test_one_shared_projection_keeps_scores_symmetric_two_need_not():
    """Q = X W_q, K = X W_k: one shared matrix gives symmetric scores, whose weights differ
    only through the row totals (A_ij / A_ji = Z_j / Z_i); two matrices need not."""
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(5, 4, generator=generator, dtype=torch.float64)
    w_q = torch.randn(4, 4, generator=generator, dtype=torch.float64)
    w_k = torch.randn(4, 4, generator=generator, dtype=torch.float64)
    shared = (x @ w_q) @ (x @ w_q).T  # (L, L)
    torch.testing.assert_close(shared, shared.T)
    weights = attention(x @ w_q, x @ w_q, x, scale=1.0).weights  # (L, L)
    log_z = shared.logsumexp(dim=-1)  # (L,)
    torch.testing.assert_close(weights.log() - weights.log().T,
                               log_z[None, :] - log_z[:, None])
    two = (x @ w_q) @ (x @ w_k).T  # (L, L)
    assert (two - two.T).abs().max() > 0.1
