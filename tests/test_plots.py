"""``attnbook.plots.attention_heatmap``, drawn with the Agg backend."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnbook.plots import HEATMAP_CMAP, attention_heatmap


@pytest.fixture(autouse=True)
def agg_backend():
    plt.switch_backend("Agg")
    yield
    plt.close("all")


def softmax_rows(n_rows: int, n_cols: int, seed: int = 0) -> np.ndarray:
    scores = np.random.default_rng(seed).normal(size=(n_rows, n_cols))
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def tick_texts(labels) -> list[str]:
    return [t.get_text() for t in labels]


def test_heatmap_draws_the_matrix_from_numpy():
    weights = softmax_rows(3, 4)
    ax = attention_heatmap(weights)
    image = ax.images[0]
    np.testing.assert_array_equal(np.asarray(image.get_array()), weights)
    assert image.get_cmap().name == HEATMAP_CMAP
    assert image.get_clim() == (0.0, 1.0)
    assert ax.get_xlabel() == "key (attended to)"
    assert ax.get_ylabel() == "query (attending from)"
    assert tick_texts(ax.get_yticklabels()) == ["0", "1", "2"]
    assert tick_texts(ax.get_xticklabels()) == ["0", "1", "2", "3"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64],
                         ids=str)
def test_heatmap_accepts_tensors_with_grad_in_any_dtype(dtype):
    weights = torch.softmax(torch.randn(3, 3, generator=torch.Generator().manual_seed(1)), -1)
    weights = weights.to(dtype).requires_grad_(True)
    ax = attention_heatmap(weights)
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()),
                               weights.detach().double().numpy())


def test_square_tokens_label_both_axes():
    tokens = ["the", "cat", "sat"]
    ax = attention_heatmap(softmax_rows(3, 3), tokens)
    assert tick_texts(ax.get_yticklabels()) == tokens
    assert tick_texts(ax.get_xticklabels()) == tokens


def test_cross_attention_labels():
    tokens, keys = ["le", "chat"], ["the", "black", "cat"]
    ax = attention_heatmap(softmax_rows(2, 3), tokens, keys)
    assert tick_texts(ax.get_yticklabels()) == tokens
    assert tick_texts(ax.get_xticklabels()) == keys


def test_rectangular_weights_with_only_query_tokens_number_the_keys():
    ax = attention_heatmap(softmax_rows(2, 3), ["a", "b"])
    assert tick_texts(ax.get_yticklabels()) == ["a", "b"]
    assert tick_texts(ax.get_xticklabels()) == ["0", "1", "2"]


def test_annotate_writes_every_value_with_contrasting_colour():
    weights = np.array([[1.0, 0.0], [0.25, 0.75]])
    ax = attention_heatmap(weights, annotate=True, fmt=".1f")
    texts = {(t.get_position(), t.get_text()): t.get_color() for t in ax.texts}
    assert len(texts) == 4
    expected_text = {(j, i): format(weights[i, j], ".1f") for i in range(2) for j in range(2)}
    assert {pos: text for pos, text in texts} == expected_text
    colours = {pos: colour for (pos, _), colour in texts.items()}
    assert colours[(0, 0)] == "black"  # 1.0: the bright end of viridis
    assert colours[(1, 0)] == "white"  # 0.0: the dark end


def test_no_annotations_by_default():
    assert len(attention_heatmap(softmax_rows(2, 2)).texts) == 0


def test_title_colorbar_and_scale():
    weights = softmax_rows(3, 3) * 0.5
    ax = attention_heatmap(weights, title="Layer 1", vmax=None)
    assert ax.get_title() == "Layer 1"
    assert len(ax.figure.axes) == 2  # the heatmap and its colour bar
    assert ax.images[0].get_clim() == pytest.approx((0.0, weights.max()))
    bare = attention_heatmap(weights, colorbar=False, vmin=0.1, vmax=0.4)
    assert len(bare.figure.axes) == 1
    assert bare.images[0].get_clim() == (0.1, 0.4)


def test_draws_into_a_given_axes():
    fig, (left, right) = plt.subplots(1, 2)
    n_figures = len(plt.get_fignums())
    ax = attention_heatmap(softmax_rows(2, 2), ax=right, colorbar=False)
    assert ax is right
    assert len(right.images) == 1 and len(left.images) == 0
    assert len(plt.get_fignums()) == n_figures


def test_book_style_does_not_leak_into_global_rcparams():
    before = dict(mpl.rcParams)
    attention_heatmap(softmax_rows(2, 2))
    assert dict(mpl.rcParams) == before


def test_figure_saves(tmp_path):
    ax = attention_heatmap(softmax_rows(3, 3), ["a", "b", "c"], annotate=True)
    path = tmp_path / "heatmap.png"
    ax.figure.savefig(path)
    assert path.stat().st_size > 0
    assert ax.figure.get_facecolor()[:3] == (1.0, 1.0, 1.0)  # white in dark mode too
