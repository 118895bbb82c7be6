"""What the chapter "Watching attention learn" relies on beyond ``tests/test_training.py``:
``attnbook.plots.attention_heatmap_row`` (its side-by-side maps, drawn with the Agg backend),
the chapter's definition of an answerable position, and its exact computation of the best
accuracy a position-blind model can reach."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnbook.plots import attention_heatmap_row
from attnbook.training import RepeatTask


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


@pytest.mark.parametrize(("length", "period"), [(16, 8), (9, 4), (12, 3), (6, 6)])
def test_answerable_means_the_target_is_in_the_past(length, period):
    """A position is answerable exactly when some key j <= t holds its target in every
    sequence; the unanswerable targets are in the input only at keys after t."""
    task = RepeatTask(vocab_size=10, length=length, period=period)
    inputs, targets = task.batch(512, torch.Generator().manual_seed(0))
    answerable = task.answerable().tolist()
    for t in range(length):
        in_past = any(torch.equal(inputs[:, j], targets[:, t])  # exact: int ids
                      for j in range(t + 1))
        assert in_past == answerable[t], f"position {t}"
        if t + 1 < length:
            # The target of position t is always the input at t + 1.
            assert torch.equal(inputs[:, t + 1], targets[:, t])  # exact: int ids


def _rule_accuracy_by_brute_force(L: int, V: int) -> float:
    """Accuracy of "output the most common other token" at position 0, over all V**L
    sequences, each counted with its probability (ties: any most common token)."""
    total = 0.0
    for sequence in itertools.product(range(V), repeat=L):
        counts = Counter(sequence[1:])  # the others of position 0
        best = max(counts.values())
        guess = min(c for c, n in counts.items() if n == best)
        total += sequence[L - 1] == guess
    return total / V**L


def _bound_over_multisets(L: int, V: int) -> float:
    """The chapter's computation of E[m / (L - 1)], one multiset of the others at a time."""
    n_others, bound = L - 1, 0.0
    for others in itertools.combinations_with_replacement(range(V), n_others):
        counts = Counter(others).values()
        orders = math.factorial(n_others) // math.prod(math.factorial(c) for c in counts)
        bound += orders / V**n_others * max(counts) / n_others
    return bound


@pytest.mark.parametrize(("L", "V"), [(4, 2), (4, 3), (6, 3), (6, 4)])
def test_blind_bound_is_what_the_rule_reaches(L, V):
    """The theorem's bound, summed over multisets as in the chapter, equals the exact
    accuracy of the rule that reaches it, over every sequence."""
    assert _bound_over_multisets(L, V) == pytest.approx(_rule_accuracy_by_brute_force(L, V),
                                                        rel=1e-12)
    assert _bound_over_multisets(L, V) > 1 / V  # better than chance
