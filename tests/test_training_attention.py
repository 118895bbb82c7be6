"""``attnbook.plots.attention_heatmap_row``, the side-by-side maps of "Watching attention
learn", drawn with the Agg backend."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnbook.plots import attention_heatmap_row


@pytest.fixture(autouse=True)
def agg_backend():
    plt.switch_backend("Agg")
    yield
    plt.close("all")


def tick_texts(labels) -> list[str]:
    return [t.get_text() for t in labels]


@pytest.mark.parametrize("n", [1, 3])
def test_row_draws_each_matrix_on_one_scale(n):
    matrices = [torch.full((4, 4), 0.25 * (k + 1) / n) for k in range(n)]
    fig, axes = attention_heatmap_row(matrices, [f"panel {k}" for k in range(n)])
    assert len(axes) == n
    for k, ax in enumerate(axes):
        np.testing.assert_allclose(np.asarray(ax.images[0].get_array()),
                                   matrices[k].numpy())
        assert ax.images[0].get_clim() == (0.0, 1.0)
        assert ax.get_title() == f"panel {k}"
    assert axes[0].get_ylabel() == "query (attending from)"
    assert all(ax.get_ylabel() == "" for ax in axes[1:])
    assert len(fig.axes) == n + 1, "one shared colour bar"


def test_row_labels_ticks_and_vmax():
    grids = [np.eye(6) * 0.5, np.eye(6)[::-1] * 0.25]
    _, axes = attention_heatmap_row(grids, tick_step=2, vmax=None)
    assert tick_texts(axes[0].get_yticklabels()) == ["0", "", "2", "", "4", ""]
    assert tick_texts(axes[1].get_xticklabels()) == ["0", "", "2", "", "4", ""]
    assert axes[1].images[0].get_clim() == (0.0, 0.5)
    _, axes = attention_heatmap_row([np.eye(2)], tokens=["a", "b"])
    assert tick_texts(axes[0].get_xticklabels()) == ["a", "b"]


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: attention_heatmap_row([]), ValueError, "at least one matrix"),
    (lambda: attention_heatmap_row(torch.eye(3)), TypeError, "list of"),
    (lambda: attention_heatmap_row([np.eye(3), np.eye(4)]), ValueError, "same shape"),
    (lambda: attention_heatmap_row([np.ones(3)]), ValueError, "2-D matrix"),
    (lambda: attention_heatmap_row([[[1.0]]]), TypeError, "torch.Tensor or numpy"),
    (lambda: attention_heatmap_row([np.eye(2)], ["a", "b"]), ValueError, "one title"),
    (lambda: attention_heatmap_row([np.eye(2)], tokens=["a"]), ValueError, "2 rows"),
    (lambda: attention_heatmap_row([np.eye(2)], tick_step=0), ValueError, "at least 1"),
    (lambda: attention_heatmap_row([np.eye(2)], tick_step=1.5), TypeError, "an int"),
])
def test_row_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()
