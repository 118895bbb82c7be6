"""``attnbook.diagrams``: the schematic pictures print the package's numbers and stay legible."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from attnbook import diagrams
from attnbook.attention import attention

#: The printed numbers use two decimals: a printed value is within half a unit of the last
#: digit of the true one (plus a little for the float64 -> text rounding).
PRINTED = 0.005 + 1e-9


@pytest.fixture(autouse=True)
def agg_backend():
    plt.switch_backend("Agg")
    yield
    plt.close("all")


def texts_by_gid(fig: Figure) -> dict[str, str]:
    return {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid()}


def printed_row(fig: Figure, prefix: str, n: int) -> np.ndarray:
    """The numbers printed as a vector (gids ``prefix-i``) or one per key (``prefix{j}-0``)."""
    found = texts_by_gid(fig)
    if f"{prefix}-0" in found:
        return np.array([float(found[f"{prefix}-{i}"]) for i in range(n)])
    return np.array([float(found[f"{prefix}{j}-0"]) for j in range(n)])


# Every diagram with the arguments drawn in the book, and with the largest ones allowed.
CASES = {
    "query_trip": lambda: diagrams.query_trip(),
    "query_trip_large": lambda: diagrams.query_trip(
        torch.randn(6, generator=torch.Generator().manual_seed(1)),
        torch.randn(8, 6, generator=torch.Generator().manual_seed(2)),
        torch.randn(8, 6, generator=torch.Generator().manual_seed(3)) * 10),
    "sequential_vs_parallel": lambda: diagrams.sequential_vs_parallel(),
    "sequential_vs_parallel_12": lambda: diagrams.sequential_vs_parallel(12),
    "sequential_vs_parallel_2": lambda: diagrams.sequential_vs_parallel(2),
    "multi_head_split": lambda: diagrams.multi_head_split(),
    "multi_head_split_large": lambda: diagrams.multi_head_split(8, 16, 4),
    "multi_head_split_one_head": lambda: diagrams.multi_head_split(3, 6, 1),
    "transformer_block": lambda: diagrams.transformer_block(),
    "cross_attention": lambda: diagrams.cross_attention(),
    "rope_rotation": lambda: diagrams.rope_rotation(),
    "rope_rotation_far": lambda: diagrams.rope_rotation(4, 0, 4, 0.6),
    "attention_data_flow": lambda: diagrams.attention_data_flow(),
    "attention_data_flow_large": lambda: diagrams.attention_data_flow(512, 512, 512, 512),
    "attention_data_flow_small": lambda: diagrams.attention_data_flow(1, 1, 1, 1),
    "tiled_attention": lambda: diagrams.tiled_attention(),
    "tiled_attention_large": lambda: diagrams.tiled_attention(16, 13, 3, step=1),
    "tiled_attention_one_row": lambda: diagrams.tiled_attention(2, 16, 8),
    "tiled_attention_last_step": lambda: diagrams.tiled_attention(11, 6, 2, step=18),
}
N_AXES = {"query_trip": 1, "sequential_vs_parallel": 2, "multi_head_split": 1,
          "transformer_block": 1, "cross_attention": 1, "rope_rotation": 2,
          "attention_data_flow": 1, "tiled_attention": 2}


@pytest.mark.parametrize("name", CASES)
def test_each_diagram_is_a_figure_of_the_expected_panels_and_width(name):
    fig = CASES[name]()
    assert isinstance(fig, Figure)
    kind = next(k for k in N_AXES if name.startswith(k))
    assert len(fig.axes) == N_AXES[kind]
    width_px = fig.get_size_inches()[0] * fig.dpi
    assert 400 <= width_px <= diagrams.MAX_WIDTH_PX
    # Dark text on an opaque light background: legible in the theme's dark mode.
    assert fig.get_facecolor()[:3] == (1.0, 1.0, 1.0)  # exact: "white" is stored as 1.0s
    assert fig.get_facecolor()[3] == 1.0  # exact: opaque white is alpha 1.0 by definition


@pytest.mark.parametrize("name", CASES)
def test_no_two_texts_overlap_and_all_stay_on_the_figure(name):
    fig = CASES[name]()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for ax in fig.axes for t in ax.texts
             if t.get_text().strip()]
    assert boxes
    width, height = fig.bbox.width, fig.bbox.height
    for text, box in boxes:
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, (
            f"{text!r} runs off the figure: {box}")
        # Text large enough to read at ~800 px: at least 8.5 pt.
    sizes = [t.get_fontsize() for ax in fig.axes for t in ax.texts]
    assert min(sizes) >= 8.5
    for (text_a, a), (text_b, b) in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), f"{text_a!r} overlaps {text_b!r}"


def test_query_trip_prints_the_packages_numbers_for_the_default_example():
    fig = diagrams.query_trip()
    q = torch.tensor(diagrams.EXAMPLE_QUERY, dtype=torch.float64)
    k = torch.tensor(diagrams.EXAMPLE_KEYS, dtype=torch.float64)
    v = torch.tensor(diagrams.EXAMPLE_VALUES, dtype=torch.float64)
    output, weights = attention(q[None], k, v)  # scale 1/sqrt(E)
    S, E = k.shape
    np.testing.assert_allclose(printed_row(fig, "weight", S), weights[0].numpy(), atol=PRINTED)
    np.testing.assert_allclose(printed_row(fig, "out", v.shape[1]), output[0].numpy(),
                               atol=PRINTED)
    np.testing.assert_allclose(printed_row(fig, "score", S), (k @ q).numpy(), atol=PRINTED)
    np.testing.assert_allclose(printed_row(fig, "scaled", S), (k @ q).numpy() / E ** 0.5,
                               atol=PRINTED)
    np.testing.assert_allclose(printed_row(fig, "q", E), q.numpy(), atol=PRINTED)
    np.testing.assert_allclose(printed_row(fig, "k1", E), k[1].numpy(), atol=PRINTED)


def test_query_trip_default_reads_sat_finding_cat_by_a_wide_margin():
    fig = diagrams.query_trip()
    texts = [t.get_text() for t in fig.axes[0].texts]
    for word in diagrams.EXAMPLE_TOKENS:
        assert word in texts
    printed = printed_row(fig, "weight", len(diagrams.EXAMPLE_TOKENS))
    cat = diagrams.EXAMPLE_TOKENS.index("cat")
    others = np.delete(printed, cat)
    assert printed[cat] > 0.5 and printed[cat] - others.max() > 0.4
    # The output is mostly "cat"'s value: its largest features are cat's largest.
    out = printed_row(fig, "out", len(diagrams.EXAMPLE_V_FEATURES))
    cat_value = np.array(diagrams.EXAMPLE_VALUES[cat])
    assert set(np.argsort(out)[-2:]) == set(np.argsort(cat_value)[-2:])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("scale", [None, 1.0, 0.3])
def test_query_trip_prints_the_packages_numbers_for_any_input(seed, scale):
    gen = torch.Generator().manual_seed(seed)
    S, E, Ev = 3 + seed, 2 + seed, 5 - seed
    q, k, v = torch.randn(E, generator=gen), torch.randn(S, E, generator=gen), \
        torch.randn(S, Ev, generator=gen)
    fig = diagrams.query_trip(q, k.numpy(), v.tolist(), labels=list("abcdef")[:S],
                              scale=scale)
    output, weights = attention(q[None].double(), k.double(), v.double(), scale=scale)
    np.testing.assert_allclose(printed_row(fig, "weight", S), weights[0].numpy(), atol=PRINTED)
    np.testing.assert_allclose(printed_row(fig, "out", Ev), output[0].numpy(), atol=PRINTED)
    assert abs(printed_row(fig, "weight", S).sum() - 1.0) <= S * PRINTED


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"query": "abc"}, TypeError, "query"),
    ({"query": [[1.0, 2.0]]}, ValueError, "query"),
    ({"query": [1.0, float("nan"), 0.0, 0.0]}, ValueError, "query"),
    ({"keys": [[1.0, 2.0, 3.0]] * 4}, ValueError, "keys"),
    ({"keys": 3}, TypeError, "keys"),
    ({"values": [[1.0, 2.0]] * 3}, ValueError, "values"),
    ({"values": [["a", "b"]] * 4}, TypeError, "values"),
    ({"labels": "The cat sat down"}, TypeError, "labels"),
    ({"labels": ["The", "cat"]}, ValueError, "labels"),
    ({"scale": "half"}, TypeError, "scale"),
    ({"scale": float("inf")}, ValueError, "scale"),
    ({"keys": torch.ones(9, 4), "values": torch.ones(9, 4)}, ValueError, "keys"),
])
def test_query_trip_bad_arguments_name_the_argument(kwargs, error, name):
    with pytest.raises(error, match=name):
        diagrams.query_trip(**kwargs)


@pytest.mark.parametrize(("func", "kwargs", "error", "name"), [
    (diagrams.sequential_vs_parallel, {"length": 1}, ValueError, "length"),
    (diagrams.sequential_vs_parallel, {"length": 13}, ValueError, "length"),
    (diagrams.sequential_vs_parallel, {"length": 2.0}, TypeError, "length"),
    (diagrams.sequential_vs_parallel, {"length": True}, TypeError, "length"),
    (diagrams.multi_head_split, {"d_model": 8, "num_heads": 3}, ValueError, "num_heads"),
    (diagrams.multi_head_split, {"d_model": 6, "num_heads": 4}, ValueError, "num_heads"),
    (diagrams.multi_head_split, {"num_heads": 0}, ValueError, "num_heads"),
    (diagrams.multi_head_split, {"d_model": "8"}, TypeError, "d_model"),
    (diagrams.multi_head_split, {"length": 0}, ValueError, "length"),
    (diagrams.attention_data_flow, {"length": 0}, ValueError, "length"),
    (diagrams.attention_data_flow, {"length": 513}, ValueError, "length"),
    (diagrams.attention_data_flow, {"d_model": 4.0}, TypeError, "d_model"),
    (diagrams.attention_data_flow, {"d_model": 0}, ValueError, "d_model"),
    (diagrams.attention_data_flow, {"d_k": "4"}, TypeError, "d_k"),
    (diagrams.attention_data_flow, {"d_k": -1}, ValueError, "d_k"),
    (diagrams.attention_data_flow, {"d_v": True}, TypeError, "d_v"),
    (diagrams.attention_data_flow, {"d_v": 600}, ValueError, "d_v"),
    (diagrams.tiled_attention, {"L": 1}, ValueError, "L must be between 2 and 16"),
    (diagrams.tiled_attention, {"S": 17}, ValueError, "S must be between 2 and 16"),
    (diagrams.tiled_attention, {"block_size": 0}, ValueError, "block_size"),
    (diagrams.tiled_attention, {"block_size": 2.0}, TypeError, "block_size"),
    (diagrams.tiled_attention, {"L": 16, "block_size": 2}, ValueError,
     "block_size=2 cuts L=16 into 8 tiles"),
    (diagrams.tiled_attention, {"step": 0}, ValueError, "step"),
    (diagrams.tiled_attention, {"step": 21}, ValueError, "step must be between 1 and 20"),
    (diagrams.tiled_attention, {"step": True}, TypeError, "step"),
])
def test_bad_sizes_name_the_argument(func, kwargs, error, name):
    with pytest.raises(error, match=name):
        func(**kwargs)


@pytest.mark.parametrize("length", [2, 6, 12])
def test_sequential_depths_are_L_and_three_stages(length):
    found = texts_by_gid(diagrams.sequential_vs_parallel(length))
    assert f"L = {length} dependent steps" in found["rnn-depth"]
    assert found["attn-depth"].startswith("3 dependent stages")
    assert "does not grow with L" in found["attn-depth"]
    left, right = diagrams.sequential_vs_parallel(length).axes
    # One state box per step on the left, L*L score cells (and Q, K^T) on the right.
    assert sum(f"$h_{{{t}}}$" == t_.get_text() for t in range(1, length + 1)
               for t_ in left.texts) == length
    assert any(f"= {length * length}" in t.get_text() for t in right.texts)


@pytest.mark.parametrize(("length", "d_model", "num_heads"), [(4, 8, 2), (3, 12, 3), (8, 16, 4),
                                                              (5, 7, 1)])
def test_multi_head_shapes_are_the_tensors_shapes(length, d_model, num_heads):
    found = texts_by_gid(diagrams.multi_head_split(length, d_model, num_heads))
    d_head = d_model // num_heads
    expected = {
        "shape-q": (1, length, d_model),
        "shape-view": (1, length, num_heads, d_head),
        "shape-heads": (1, num_heads, length, d_head),
        "shape-weights": (1, num_heads, length, length),
        "shape-outputs": (1, num_heads, length, d_head),
        "shape-merged": (1, length, d_model),
        "shape-output": (1, length, d_model),
    }
    for gid, shape in expected.items():
        assert found[gid].endswith(f"= {shape}"), (gid, found[gid])


@pytest.mark.parametrize(("length", "d_model", "d_k", "d_v"), [(4, 8, 4, 4), (3, 12, 5, 7),
                                                               (1, 1, 1, 1), (6, 16, 16, 2)])
def test_attention_data_flow_shapes_are_the_tensors_shapes(length, d_model, d_k, d_v):
    found = texts_by_gid(diagrams.attention_data_flow(length, d_model, d_k, d_v))
    S = length  # self-attention: the keys and values come from the same X
    expected = {
        "shape-x": ("(L, d_model)", (length, d_model)),
        "shape-wq": ("(d_model, d_k)", (d_model, d_k)),
        "shape-wk": ("(d_model, d_k)", (d_model, d_k)),
        "shape-wv": ("(d_model, d_v)", (d_model, d_v)),
        "shape-q": ("(L, d_k)", (length, d_k)),
        "shape-k": ("(S, d_k)", (S, d_k)),
        "shape-v": ("(S, d_v)", (S, d_v)),
        "shape-scores": ("(L, S)", (length, S)),
        "shape-weights": ("(L, S)", (length, S)),
        "shape-output": ("(L, d_v)", (length, d_v)),
    }
    assert set(expected) <= set(found)
    for gid, (symbols, shape) in expected.items():
        assert found[gid] == f"{symbols}\n= {shape}", (gid, found[gid])
    assert found["scale-label"].endswith(f"= {1 / d_k ** 0.5:.3g}")
    assert "sqrt{d_k}" in found["scale-label"]


def test_attention_data_flow_says_keys_and_values_come_from_x():
    texts = [t.get_text() for t in diagrams.attention_data_flow().axes[0].texts]
    assert any("S = L" in text for text in texts)
    for name in ("tokens $X$", "queries $Q$", "keys $K$", "values $V$", "weights $A$",
                 "output $AV$", "softmax of\neach row"):
        assert name in texts, name


def test_multi_head_columns_are_coloured_by_head():
    fig = diagrams.multi_head_split(4, 8, 2)
    ax = fig.axes[0]
    cells = [p for p in ax.patches if type(p).__name__ == "Rectangle"]
    colours = {tuple(np.round(p.get_facecolor(), 3)) for p in cells}
    # Two head tints, the grey of the projected output, and the heatmap's weight colours.
    head_tints = {tuple(np.round(plt.matplotlib.colors.to_rgba(diagrams._tint(c, 0.45)), 3))
                  for c in diagrams._HEAD_COLOURS[:2]}
    assert head_tints <= colours


def test_transformer_block_says_it_is_post_ln_like_minilm():
    label = texts_by_gid(diagrams.transformer_block())["ln-label"]
    assert "Post-LN" in label and "MiniLM" in label and "pre-LN" in label
    texts = [t.get_text() for t in diagrams.transformer_block().axes[0].texts]
    assert texts.count("LayerNorm") == 2 and texts.count("residual") == 2


def test_cross_attention_weights_shape_is_L_dec_by_S_enc():
    found = texts_by_gid(diagrams.cross_attention())
    assert found["cross-shape"].endswith("= (4, 6)")
    assert "K, V: encoder" in found["cross-box"]


def test_import_attnbook_does_not_load_the_diagrams_or_torch():
    probe = ("import json, sys, attnbook; before = sorted(m for m in ('torch', 'matplotlib', "
             "'attnbook.diagrams') if m in sys.modules); attnbook.diagrams; "
             "print(json.dumps([before, 'attnbook.diagrams' in sys.modules]))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [[], True]


@pytest.mark.parametrize(("m", "n", "shift", "theta"), [(2, 1, 2, 0.5), (0, 3, 4, 0.3),
                                                       (4, 4, 1, 0.05)])
def test_rope_rotation_prints_one_score_for_both_panels(m, n, shift, theta):
    """The printed score is the package's, and shifting both positions leaves it alone."""
    from attnbook.positions import rope

    fig = diagrams.rope_rotation(m, n, shift, theta)
    titles = {ax.title.get_gid(): ax.title.get_text() for ax in fig.axes}
    scores = [float(titles[f"rope-score-{m + s}-{n + s}"].rsplit("= ", 1)[1])
              for s in (0, shift)]
    q = torch.tensor([[0.0, 1.0, 0.0, 0.15]], dtype=torch.float64)
    k = torch.tensor([[0.0, 0.75, 0.0, -0.25]], dtype=torch.float64)
    expected = float(rope(q, torch.tensor([m]), theta ** -2)
                     @ rope(k, torch.tensor([n]), theta ** -2).T)
    assert abs(scores[0] - expected) <= PRINTED
    shifted = float(rope(q, torch.tensor([m + shift]), theta ** -2)
                    @ rope(k, torch.tensor([n + shift]), theta ** -2).T)
    assert abs(scores[1] - shifted) <= PRINTED


def test_rope_rotation_bad_arguments():
    with pytest.raises(ValueError, match="m must be between 0 and 4"):
        diagrams.rope_rotation(m=5)
    with pytest.raises(ValueError, match="theta must be between"):
        diagrams.rope_rotation(theta=1.0)


@pytest.mark.parametrize(("L", "S", "block_size"), [(8, 10, 2), (16, 13, 3), (5, 7, 2),
                                                    (2, 16, 8), (6, 6, 1)])
def test_tiled_attention_numbers_the_tiles_in_blockwise_attentions_order(
        monkeypatch, L, S, block_size):
    """Record the tiles blockwise_attention computes, in order, from the rows of q and k it
    multiplies (q[i, 0] = i, k[j, 1] = j), and read the drawing's visit numbers."""
    from attnbook import efficient

    visited = []
    tile_scores = efficient._tile_scores

    def recording(q_rows, k_cols, allowed):
        visited.append((int(q_rows[0, 0]) // block_size, int(k_cols[0, 1]) // block_size))
        return tile_scores(q_rows, k_cols, allowed)

    monkeypatch.setattr(efficient, "_tile_scores", recording)
    q = torch.zeros(L, 2, dtype=torch.float64)
    q[:, 0] = torch.arange(L)
    k = torch.zeros(S, 2, dtype=torch.float64)
    k[:, 1] = torch.arange(S)
    efficient.blockwise_attention(q, k, torch.ones(S, 1, dtype=torch.float64), scale=1.0,
                                  block_size=block_size)
    found = texts_by_gid(diagrams.tiled_attention(L, S, block_size))
    numbers = {gid: text for gid, text in found.items() if gid.startswith("visit-")}
    assert len(numbers) == len(visited) == len(set(visited))  # each tile once
    assert [int(numbers[f"visit-{i}-{j}"]) for i, j in visited] == list(
        range(1, len(visited) + 1))
    assert visited[1] == ((0, 1) if S > block_size else (1, 0))  # the inner loop: keys


@pytest.mark.parametrize("step", [1, 8, 20])
def test_tiled_attention_colours_what_is_in_fast_memory(step):
    from matplotlib.colors import to_rgba

    fig = diagrams.tiled_attention(8, 10, 2, step=step)
    patches = {p.get_gid(): p for ax in fig.axes for p in ax.patches if p.get_gid()}
    found = texts_by_gid(fig)
    now_i = now_j = None
    fast = to_rgba(diagrams._FILL_FAST)
    in_fast = []
    for i in range(4):
        for j in range(5):
            patch = patches[f"tile-{i}-{j}"]
            visit = int(found[f"visit-{i}-{j}"])
            if patch.get_facecolor() == fast:
                in_fast.append((i, j))
                now_i, now_j = i, j
                assert visit == step
            elif visit < step:  # done: grey and hatched
                assert patch.get_hatch() and patch.get_facecolor() != to_rgba("white")
            else:
                assert patch.get_facecolor() == to_rgba("white") and not patch.get_hatch()
    assert len(in_fast) == 1  # one tile of scores at a time
    assert [i for i in range(4) if patches[f"q-tile-{i}"].get_facecolor() == fast] == [now_i]
    assert [j for j in range(5) if patches[f"k-tile-{j}"].get_facecolor() == fast] == [now_j]
    assert found["step"].startswith(f"step {step} of 20: scores of tile ({now_i}, {now_j})")

