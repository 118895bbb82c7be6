"""``attnbook.diagrams``: the schematic pictures print the package's numbers and stay legible."""

from __future__ import annotations

import functools
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.colors import to_rgb, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Rectangle

from attnbook import diagrams
from attnbook.attention import attention, grouped_attention
from attnbook.circuits import prefix_matching_score, repeat_twice
from attnbook.course import Chapter, ExerciseEffort, read_course
from attnbook.decoder import Decoder, DecoderConfig
from attnbook.efficient import KVCache
from attnbook.masks import sliding_window_mask
from attnbook.plots import MIN_TEXT_PX, text_px_per_point
from attnbook.whisper import Whisper, WhisperConfig

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


def patches_by_gid(fig: Figure) -> dict[str, object]:
    return {p.get_gid(): p for ax in fig.axes for p in ax.patches if p.get_gid()}


def printed(fig: Figure, prefix: str, n: int) -> np.ndarray:
    found = texts_by_gid(fig)
    return np.array([float(found[f"{prefix}-{j}"]) for j in range(n)])


def lines_by_gid(fig: Figure) -> dict[str, object]:
    return {line.get_gid(): line for ax in fig.axes for line in ax.lines if line.get_gid()}


def numbers_after_equals(text: str) -> list[int]:
    """The integers printed after the last "=" of each line (the values, not the names)."""
    return [int(n) for line in text.splitlines() if "=" in line
            for n in re.findall(r"\d+", line.rsplit("=", 1)[1])]


M = 1_000_000  # the largest size decoder_stack draws
LLAMA3_LIKE = DecoderConfig(128256, 4096, 32, 32, 8, 14336, rope_base=500000.0)
SMALL = DecoderConfig(vocab_size=100, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      d_ff=64)
CONFIGS = {
    # SmolLM2-135M's sizes; test_decoder_stack_draws_the_loaded_model checks the real one.
    "smollm2": DecoderConfig(49152, 576, 30, 9, 3, 1536, rope_base=100000.0),
    "llama3_like": LLAMA3_LIKE,
    "small": SMALL,
    "largest": DecoderConfig(M, M, M, M // 2, M // 2, M),  # d_head 2: RoPE needs it even
    "largest_multi_query": DecoderConfig(M, M, M, M // 2, 1, M),
    "smallest": DecoderConfig(1, 2, 1, 1, 1, 1),
}
HEADS = {"default": (9, 3), "multi_head_16": (16, 16), "multi_query_16": (16, 1),
         "one": (1, 1), "pairs_16": (16, 8), "12_4": (12, 4), "prime": (7, 1)}

def face(patch) -> tuple[float, float, float, float]:
    return tuple(patch.get_facecolor())


RANDOM_VECTORS = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
ROOT = Path(__file__).resolve().parents[1]


def course(needs: dict[int, tuple[int, ...]], parts: int = 2) -> tuple[Chapter, ...]:
    """Chapters 1..n with made-up titles and times; ``needs[k]`` are the numbers chapter k
    needs."""
    effort = ExerciseEffort("x-ex1", "1.1", "easy", 10, 2)
    return tuple(Chapter(f"ch{k}", k, f"Chapter {k}: a subtitle", f"Part {1 + k * parts // 10}",
                         tuple(f"ch{j}" for j in needs[k]), (effort,) * k, 400 * k)
                 for k in sorted(needs))


#: 2 needs 1; 3 needs 1 and 2 (1 is implied); 4 needs 1 only: a branch.
SMALL_COURSE = course({1: (), 2: (1,), 3: (1, 2), 4: (1,)})
#: Five chapters that all need chapter 1 alone: the widest row.
WIDE_COURSE = course({1: (), 2: (1,), 3: (1,), 4: (1,), 5: (1,), 6: (1, 5)})
#: A Whisper of other sizes: every number the diagram prints must follow the config.
WHISPER_SMALL = WhisperConfig(vocab_size=1000, n_mels=40, d_model=96, num_heads=3,
                              encoder_layers=2, decoder_layers=3, d_ff=200,
                              audio_positions=750, text_positions=64)
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
    "rope_rotation_query_unturned": lambda: diagrams.rope_rotation(0, 3, 4, 0.3),
    "rope_rotation_small_angle": lambda: diagrams.rope_rotation(4, 4, 1, 0.05),
    "attention_data_flow": lambda: diagrams.attention_data_flow(),
    "attention_data_flow_large": lambda: diagrams.attention_data_flow(512, 512, 512, 512),
    "attention_data_flow_small": lambda: diagrams.attention_data_flow(1, 1, 1, 1),
    "tiled_attention": lambda: diagrams.tiled_attention(),
    "tiled_attention_large": lambda: diagrams.tiled_attention(16, 13, 3, step=1),
    "tiled_attention_one_row": lambda: diagrams.tiled_attention(2, 16, 8),
    "tiled_attention_last_step": lambda: diagrams.tiled_attention(11, 6, 2, step=18),
    "induction_circuit": lambda: diagrams.induction_circuit(),
    "induction_circuit_short": lambda: diagrams.induction_circuit((4, 1)),
    "induction_circuit_long_first": lambda: diagrams.induction_circuit(
        (11, 42, 3, 99, 57, 8, 60, 21), 8),
    "induction_circuit_long_last": lambda: diagrams.induction_circuit(
        (11, 42, 3, 99, 57, 8, 60, 21), 14),
    "induction_circuit_mid": lambda: diagrams.induction_circuit((0, 10, 20, 30, 40, 50), 9),
    "key_contributions": lambda: diagrams.key_contributions(),
    "key_contributions_eight": lambda: diagrams.key_contributions(
        [1 / 8] * 8, RANDOM_VECTORS, labels=["abcdefghij"] * 8),
    "key_contributions_two": lambda: diagrams.key_contributions([0.9, 0.1],
                                                                [[0.1, 0.0], [2.0, 3.0]]),
    "key_contributions_zero_weight": lambda: diagrams.key_contributions(
        [0.0, 0.5, 0.5], [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.2]], labels=["a", "b", "c"]),
    "key_contributions_cancelling": lambda: diagrams.key_contributions(
        [0.5, 0.5], [[1.0, 0.0], [-1.0, 0.01]]),
    **{f"decoder_stack_{name}": (lambda c=config: diagrams.decoder_stack(c))
       for name, config in CONFIGS.items()},
    **{f"grouped_query_heads_{name}": (lambda a=args: diagrams.grouped_query_heads(*a))
       for name, args in HEADS.items()},
    "grouped_query_heads_no_argument": lambda: diagrams.grouped_query_heads(),
    "prefill_and_decode": lambda: diagrams.prefill_and_decode(),
    "prefill_and_decode_largest": lambda: diagrams.prefill_and_decode(10, 6),
    "prefill_and_decode_smallest": lambda: diagrams.prefill_and_decode(1, 1),
    "prefill_and_decode_short_prompt_many_steps": lambda: diagrams.prefill_and_decode(1, 6),
    "prefill_and_decode_long_prompt_one_step": lambda: diagrams.prefill_and_decode(10, 1),
    "window_with_sinks": lambda: diagrams.window_with_sinks(),
    "window_with_sinks_longest": lambda: diagrams.window_with_sinks(24, 4, 2),
    "window_with_sinks_shortest": lambda: diagrams.window_with_sinks(2, 1, 0),
    "window_with_sinks_short_with_sink": lambda: diagrams.window_with_sinks(2, 2, 1),
    "window_with_sinks_all_sinks": lambda: diagrams.window_with_sinks(24, 24, 23),
    "window_with_sinks_one_key": lambda: diagrams.window_with_sinks(24, 1, 0),
    "window_with_sinks_narrow_gap": lambda: diagrams.window_with_sinks(7, 3, 3),
    "whisper_model": lambda: diagrams.whisper_model(),
    "whisper_model_small": lambda: diagrams.whisper_model(WHISPER_SMALL),
    "chapter_map": lambda: diagrams.chapter_map(read_course(ROOT)),
    "chapter_map_small": lambda: diagrams.chapter_map(SMALL_COURSE),
    "chapter_map_wide": lambda: diagrams.chapter_map(WIDE_COURSE),
}


@functools.cache
def drawn(name: str) -> tuple[Figure, RendererAgg]:
    """``CASES[name]()`` drawn once, and the renderer that drew it (closing the figure after
    a test takes its canvas): the four tests that only read a case's figure share them
    (laying a diagram out takes up to 2 s here, drawing it up to 0.7 s)."""
    fig = CASES[name]()
    fig.canvas.draw()
    return fig, fig.canvas.get_renderer()


N_AXES = {"query_trip": 1, "sequential_vs_parallel": 2, "multi_head_split": 1,
          "transformer_block": 1, "cross_attention": 1, "rope_rotation": 2,
          "attention_data_flow": 1, "tiled_attention": 2,
          "induction_circuit": 1, "key_contributions": 2, "decoder_stack": 1,
          "grouped_query_heads": 3, "prefill_and_decode": 2, "window_with_sinks": 1,
          "whisper_model": 1, "chapter_map": 1}


@pytest.mark.parametrize("name", CASES)
def test_each_diagram_is_a_figure_of_the_expected_panels_and_width(name):
    fig, _ = drawn(name)
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
    fig, renderer = drawn(name)
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for ax in fig.axes for t in ax.texts
             if t.get_text().strip()]
    assert boxes
    width, height = fig.bbox.width, fig.bbox.height
    for text, box in boxes:
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, (
            f"{text!r} runs off the figure: {box}")
    # Text at least 9 px tall where the book shows the figure: at its own size (1.33 px a
    # point) or, if wider, shrunk to the main column at 1280 px.
    smallest = min(t.get_fontsize() for ax in fig.axes for t in ax.texts
                   if t.get_text().strip())
    px_per_point = text_px_per_point(fig.get_size_inches()[0])
    assert smallest * px_per_point >= MIN_TEXT_PX, (
        f"{smallest} pt text is {smallest * px_per_point:.1f} px in a "
        f"{fig.get_size_inches()[0]:.2f} in figure")
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
    (diagrams.multi_head_split, {"d_model": 8, "num_heads": 3}, ValueError,
     "num_heads=3 must divide d_model=8: each head needs d_model / num_heads features"),
    (diagrams.multi_head_split, {"d_model": 6, "num_heads": 4}, ValueError,
     "num_heads=4 must divide d_model=6"),
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
    (diagrams.tiled_attention, {"L": 1}, ValueError,
     "L must be between 2 and 16 for a legible drawing, got 1"),
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


ROPE_CASES = [name for name in CASES if name.startswith("rope_rotation")]


def rope_panel_parts(ax, renderer: RendererAgg) -> tuple[list, list, list]:
    """One rope_rotation panel's labels (texts), arrows (the annotations' arrow patches) and
    angle arcs (its lines above zorder 0: the grey axis lines are drawn underneath)."""
    labels = [t for t in ax.texts if t.get_text().strip()]
    arrows = [t.arrow_patch for t in ax.texts if getattr(t, "arrow_patch", None)]
    arcs = [line for line in ax.lines if line.get_zorder() > 0]
    assert len(labels) == 4 and len(arrows) == 4 and len(arcs) == 2
    return labels, arrows, arcs


@pytest.mark.parametrize("name", ROPE_CASES)
def test_rope_rotation_keeps_each_label_clear_of_the_arrows_arcs_and_other_labels(name):
    """No label ("q", "k", "m theta", "n theta") comes within 2 pt of an arrow (its shaft or
    head, faint or bold), of an arc or of another label or a title."""
    from matplotlib.path import Path

    fig, renderer = drawn(name)
    margin = 2 * fig.dpi / 72  # 2 pt in pixels
    titles = [(ax.title.get_text(), ax.title.get_window_extent(renderer)) for ax in fig.axes]
    boxes = list(titles)
    for ax in fig.axes:
        labels, arrows, arcs = rope_panel_parts(ax, renderer)
        for label in labels:
            box = label.get_window_extent(renderer)
            boxes.append((label.get_text(), box))
            for shape, filled in [(a, True) for a in arrows] + [(a, False) for a in arcs]:
                path = shape.get_transform().transform_path(shape.get_path())
                pad = margin + shape.get_linewidth() * fig.dpi / 72 / 2
                # Piece by piece (an arrow's shaft, then its head): a whole arrow's path
                # ends in a CLOSEPOLY at (0, 0), which intersects_bbox takes for a point.
                assert not any(Path(piece).intersects_bbox(box.padded(pad), filled=filled)
                               for piece in path.to_polygons(closed_only=False)), (
                    f"{label.get_text()!r} at {label.get_position()} touches "
                    f"{'an arrow' if filled else 'an arc'} in {ax.get_title()!r}")
    for (text_a, a), (text_b, b) in itertools.combinations(boxes, 2):
        assert not a.padded(margin).overlaps(b), f"{text_a!r} touches {text_b!r}"


@pytest.mark.parametrize("name", ROPE_CASES)
def test_rope_rotation_drawing_fills_its_panels_and_the_panels_the_figure(name):
    """Arrows, arcs and labels reach within 10 % of each panel's left and right edges, and
    (the panels share their y limits, so the origins line up) of its top and bottom in one
    panel or the other; the panels and their titles fill the figure, but for 10 %."""
    from matplotlib.transforms import Bbox

    fig, renderer = drawn(name)
    spans = []
    for ax in fig.axes:
        labels, arrows, arcs = rope_panel_parts(ax, renderer)
        panel = ax.get_window_extent(renderer)
        ink = Bbox.union([part.get_window_extent(renderer) for part in labels + arrows + arcs])
        left, right = (ink.x0 - panel.x0) / panel.width, (panel.x1 - ink.x1) / panel.width
        assert max(left, right) <= 0.1, (
            f"{ax.get_title()!r}: {left:.0%} empty on the left, {right:.0%} on the right")
        spans.append(((ink.y0 - panel.y0) / panel.height, (panel.y1 - ink.y1) / panel.height))
    bottom, top = min(s[0] for s in spans), min(s[1] for s in spans)
    assert max(bottom, top) <= 0.1, f"{bottom:.0%} empty at the bottom, {top:.0%} at the top"
    used = Bbox.union([ax.get_tightbbox(renderer) for ax in fig.axes])
    assert used.width >= 0.9 * fig.bbox.width and used.height >= 0.9 * fig.bbox.height, (
        f"the panels use {used.width:.0f} x {used.height:.0f} px of {fig.bbox.bounds}")


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


@pytest.mark.parametrize("args", [(), (8, 16, 4), (3, 6, 1)])
def test_multi_head_split_keeps_each_operation_clear_of_the_blocks_beside_it(args):
    """The label over each arrow (".view", ".transpose(1, 2)", ...) keeps 0.1 inch clear of
    the grids to its left and right."""
    fig = diagrams.multi_head_split(*args)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    ops = [t for t in ax.texts if t.get_gid() == "op"]
    assert len(ops) == 5
    cells = [p.get_window_extent(renderer) for p in ax.patches
             if isinstance(p, Rectangle)]
    for op in ops:
        box = op.get_window_extent(renderer)
        beside = [c for c in cells if c.y0 < box.y1 and c.y1 > box.y0]
        assert beside, f"{op.get_text()!r}: no grid at its height"
        gap = min(max(c.x0 - box.x1, box.x0 - c.x1) for c in beside) / fig.dpi
        assert gap >= 0.1, f"{op.get_text()!r} is {gap:.2f} inch from a grid"


def test_tiled_attention_keeps_hatching_and_grid_lines_off_the_visit_numbers():
    """Each visit number stands on a patch of its tile's colour at least 2 pt wider than
    the digits on every side, drawn over the hatching and the score grid."""
    fig = diagrams.tiled_attention(8, 10, 2, step=8)
    fig.canvas.draw()  # places each text's box
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    tiles = {p.get_gid(): p for p in ax.patches if (p.get_gid() or "").startswith("tile-")}
    grid_z = max(p.get_zorder() for p in ax.patches)
    margin = 2 * fig.dpi / 72  # 2 pt in pixels
    numbers = [t for t in ax.texts if (t.get_gid() or "").startswith("visit-")]
    assert len(numbers) == 20
    for number in numbers:
        box = number.get_bbox_patch()
        tile = tiles[number.get_gid().replace("visit", "tile")]
        assert box is not None and number.get_zorder() > grid_z
        assert box.get_facecolor() == tile.get_facecolor()
        digits = number.get_window_extent(renderer)
        patch = box.get_window_extent(renderer)
        assert patch.x0 <= digits.x0 - margin and patch.x1 >= digits.x1 + margin
        assert patch.y0 <= digits.y0 - margin and patch.y1 >= digits.y1 + margin


# --------------------------------------------------------------------------- induction


def test_induction_default_is_the_books_example():
    """[7, 3, 9, 2, 5] twice: the second 7 finds the first 3 by its tag "prev 7"."""
    found = texts_by_gid(diagrams.induction_circuit())
    assert [int(found[f"token-{j}"]) for j in range(10)] == [7, 3, 9, 2, 5, 7, 3, 9, 2, 5]
    assert found["prev-1"] == "prev\n7"
    assert found["attended"].startswith("attends to position 1,")
    assert "prev 7" in found["attended"] and "layer 0's output" in found["attended"]
    assert found["predicted"] == "predicts 3"
    assert found["query"].startswith("query at 5: token 7")
    assert found["pattern"].endswith("here 7 3 \u2026 7 \u2192 3")


INDUCTION_INPUTS = [((7, 3, 9, 2, 5), q) for q in range(5, 9)] + [
    ((4, 1), 2), ((11, 42, 3, 99, 57, 8, 60, 21), 8), ((11, 42, 3, 99, 57, 8, 60, 21), 14),
    ((0, 10, 20, 30, 40, 50), 9)]


@pytest.mark.parametrize(("tokens", "query"), INDUCTION_INPUTS)
def test_induction_prints_the_packages_sequence_tags_and_prediction(tokens, query):
    T = len(tokens)
    batch = repeat_twice(torch.tensor([tokens]))
    sequence = torch.cat([batch.inputs[0], batch.targets[0, -1:]]).tolist()  # 2T tokens
    found = texts_by_gid(diagrams.induction_circuit(tokens, query))
    assert [int(found[f"token-{j}"]) for j in range(2 * T)] == sequence
    assert [int(found[f"position-{j}"]) for j in range(2 * T)] == list(range(2 * T))
    # Layer 0's tags: the token before, at every position the query can see, and no others.
    assert found["prev-0"] == "none"  # nothing comes before position 0
    for j in range(1, query + 1):
        assert found[f"prev-{j}"] == f"prev\n{sequence[j - 1]}"
    assert not any(f"prev-{j}" in found for j in range(query + 1, 2 * T))
    # Layer 1: the key found is the prefix-matching position, its value the target.
    attended = int(found["attended"].split("position ")[1].split(",")[0])
    assert attended == query - T + 1
    assert sequence[attended - 1] == sequence[query]  # preceded by the query's token
    predicted = int(found["predicted"].removeprefix("predicts "))
    assert predicted == int(batch.targets[0, query]) == sequence[attended]
    assert f"\u201cprev {sequence[query]}\u201d" in found["attended"]


@pytest.mark.parametrize("tokens", [(7, 3, 9, 2, 5), (4, 1), (11, 42, 3, 99, 57, 8, 60, 21)])
def test_induction_attended_positions_score_one_with_prefix_matching_score(tokens):
    """Put all of each query's weight on the position the drawing prints: the package's
    prefix-matching score is then exactly 1."""
    T = len(tokens)
    weights = torch.zeros(2 * T - 1, 2 * T - 1, dtype=torch.float64)
    weights[:T, 0] = 1.0  # the first copy's rows do not count; any row of weights will do
    for query in range(T, 2 * T - 1):
        found = texts_by_gid(diagrams.induction_circuit(tokens, query))
        weights[query, int(found["attended"].split("position ")[1].split(",")[0])] = 1.0
    assert float(prefix_matching_score(weights, T)) == 1.0  # exact: a mean of ones


@pytest.mark.parametrize(("tokens", "query"), INDUCTION_INPUTS)
def test_induction_colours_the_pattern_and_the_key_and_greys_the_future(tokens, query):
    fig = diagrams.induction_circuit(tokens, query)
    T, patches = len(tokens), patches_by_gid(fig)
    attended = query - T + 1
    a_fill, b_fill = to_rgba(diagrams._FILL_ATTENTION), to_rgba(diagrams._FILL_FFN)
    cells = [patches[f"cell-{j}"] for j in range(2 * T)]
    assert [j for j, p in enumerate(cells) if p.get_facecolor() == a_fill] == [
        attended - 1, query]
    assert [j for j, p in enumerate(cells) if p.get_facecolor() == b_fill] == [
        attended, query + 1]
    assert [j for j, p in enumerate(cells) if p.get_linestyle() == "--"] == list(
        range(query + 1, 2 * T))
    hot = [j for j in range(query + 1)
           if patches[f"tag-{j}"].get_facecolor() == to_rgba(diagrams._FILL_NORM)]
    assert hot == [attended]
    letters = [t.get_text() for t in fig.axes[0].texts if t.get_text() in ("A", "B")]
    assert sorted(letters) == ["A", "A", "B", "B"]


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"tokens": "7392"}, TypeError, "tokens"),
    ({"tokens": 7}, TypeError, "tokens"),
    ({"tokens": (7,)}, ValueError, "len\\(tokens\\) must be between 2 and 8"),
    ({"tokens": tuple(range(9))}, ValueError, "len\\(tokens\\) must be between 2 and 8"),
    ({"tokens": (7, 3, 7)}, ValueError, "tokens must be distinct"),
    ({"tokens": (7, 3.0)}, TypeError, "tokens\\[1\\] must be an int"),
    ({"tokens": (7, True)}, TypeError, "tokens\\[1\\]"),
    ({"tokens": (7, 100)}, ValueError, "tokens\\[1\\] must be between 0 and 99"),
    ({"tokens": (-1, 3)}, ValueError, "tokens\\[0\\]"),
    ({"query": 4}, ValueError, "query must be between 5 and 8"),
    ({"query": 9}, ValueError, "query must be between 5 and 8"),
    ({"query": 5.0}, TypeError, "query"),
    ({"query": True}, TypeError, "query"),
    ({"tokens": (4, 1), "query": 3}, ValueError, "query must be between 2 and 2"),
])
def test_induction_bad_arguments_name_the_argument(kwargs, error, name):
    with pytest.raises(error, match=name):
        diagrams.induction_circuit(**kwargs)


# --------------------------------------------------------------------------- contributions


CONTRIBUTION_INPUTS = [
    (diagrams.EXAMPLE_CONTRIBUTION_WEIGHTS, diagrams.EXAMPLE_CONTRIBUTION_VECTORS),
    ([1 / 8] * 8, RANDOM_VECTORS),
    ([0.9, 0.1], [[0.1, 0.0], [2.0, 3.0]]),
    ([0.0, 0.5, 0.5], [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.2]]),
    (np.array([0.2, 0.3, 0.5]), torch.tensor([[3.0, -4.0], [0.5, 0.5], [0.0, -2.0]])),
]


@pytest.mark.parametrize(("weights", "vectors"), CONTRIBUTION_INPUTS)
def test_key_contributions_prints_the_formulas_numbers(weights, vectors):
    a = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    f = torch.as_tensor(np.asarray(vectors, dtype=np.float64))
    S = a.shape[0]
    terms = a[:, None] * f  # A_tj f(x_j)
    shares = terms.norm(dim=-1) / terms.norm(dim=-1).sum()
    fig = diagrams.key_contributions(weights, vectors)
    np.testing.assert_allclose(printed(fig, "weight", S), a.numpy(), atol=PRINTED)
    np.testing.assert_allclose(printed(fig, "length", S), f.norm(dim=-1).numpy(),
                               atol=PRINTED)
    np.testing.assert_allclose(printed(fig, "term", S), terms.norm(dim=-1).numpy(),
                               atol=PRINTED)
    np.testing.assert_allclose(printed(fig, "share", S), shares.numpy(), atol=PRINTED)
    found = texts_by_gid(fig)
    assert found["weight-sum"] == "sum = 1.00"
    assert abs(float(found["term-sum"].removeprefix("sum = "))
               - float(terms.norm(dim=-1).sum())) <= PRINTED


@pytest.mark.parametrize(("weights", "vectors"), CONTRIBUTION_INPUTS)
def test_key_contributions_bars_share_their_scales(weights, vectors):
    """Weight and contribution share on one 0-to-1 scale; a term on its vector's scale."""
    a = np.asarray(weights, dtype=np.float64)
    f = np.linalg.norm(np.asarray(vectors, dtype=np.float64), axis=-1)
    fig = diagrams.key_contributions(weights, vectors)
    bars = patches_by_gid(fig)
    width = {name: np.array([bars[f"bar-{name}-{j}"].get_width() for j in range(len(a))])
             for name in ("weight", "length", "term", "share")}
    shares = a * f / (a * f).sum()
    per_unit = width["weight"][a > 0] / a[a > 0]
    np.testing.assert_allclose(per_unit, per_unit[0])
    np.testing.assert_allclose(width["share"], shares * per_unit[0], atol=1e-12)
    np.testing.assert_allclose(width["term"], a * width["length"], atol=1e-12)


@pytest.mark.parametrize(("weights", "vectors"), CONTRIBUTION_INPUTS)
def test_key_contributions_terms_run_tip_to_tail_into_the_output(weights, vectors):
    a = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    terms = (a[:, None] * torch.as_tensor(np.asarray(vectors, dtype=np.float64))).numpy()
    fig = diagrams.key_contributions(weights, vectors)
    arrows = [t for t in fig.axes[1].texts if t.get_text() == "" and hasattr(t, "xyann")]
    black = [t for t in arrows if to_rgba(t.arrowprops["color"]) == to_rgba(diagrams._INK)]
    chain = [t for t in arrows if t not in black]
    assert len(black) == 1 and len(chain) == len(terms)
    for before, after in itertools.pairwise(chain):
        assert np.allclose(after.xyann, before.xy)  # tip to tail
    assert np.allclose(black[0].xyann, chain[0].xyann) and np.allclose(black[0].xy,
                                                                       chain[-1].xy)
    drawn = np.array([np.subtract(t.xy, t.xyann) for t in chain])  # (S, 2), inches
    scale = np.linalg.norm(drawn.sum(0)) / np.linalg.norm(terms.sum(0))
    np.testing.assert_allclose(drawn, scale * terms, atol=1e-9)  # one scale, same directions


def test_key_contributions_default_cls_has_most_weight_but_not_most_contribution():
    fig = diagrams.key_contributions()
    S = len(diagrams.EXAMPLE_CONTRIBUTION_LABELS)
    weight, share = printed(fig, "weight", S), printed(fig, "share", S)
    length = printed(fig, "length", S)
    cls = diagrams.EXAMPLE_CONTRIBUTION_LABELS.index("[CLS]")
    assert cls == 0 and int(weight.argmax()) == cls
    assert weight[cls] - np.delete(weight, cls).max() > 0.05  # clearly the most weight
    assert int(share.argmax()) != cls and share[cls] < 0.5 * weight[cls]
    assert int(length.argmin()) == cls  # because it sends the shortest vector
    found = texts_by_gid(fig)
    assert found["note"].startswith(f"[CLS] has the largest share of the weight, "
                                    f"{weight[cls]:.2f}")
    assert found["note"].endswith(f"of the contribution, {share.max():.2f}")
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert all(name in labels for name in diagrams.EXAMPLE_CONTRIBUTION_LABELS)


def test_key_contributions_says_nothing_when_the_heaviest_key_also_contributes_most():
    found = texts_by_gid(diagrams.key_contributions([0.7, 0.3], [[1.0, 0.0], [0.0, 1.0]]))
    assert "note" not in found
    found = texts_by_gid(diagrams.key_contributions([0.5, 0.5], [[1.0, 0.0], [0.0, 2.0]]))
    assert "note" not in found  # a tie for the most weight: no single heaviest key


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"weights": "abc"}, TypeError, "weights"),
    ({"weights": [[0.5, 0.5]]}, ValueError, "weights must have shape"),
    ({"weights": [0.5, 0.4], "vectors": [[1, 0], [0, 1]]}, ValueError, "add up to 1"),
    ({"weights": [1.5, -0.5], "vectors": [[1, 0], [0, 1]]}, ValueError, "non-negative"),
    ({"weights": [1.0], "vectors": [[1, 0]]}, ValueError, "weights must have between 2"),
    ({"weights": [1 / 9] * 9, "vectors": [[1, 0]] * 9}, ValueError,
     "weights must have between 2 and 8"),
    ({"weights": [0.5, float("nan")]}, ValueError, "weights must be finite"),
    ({"vectors": [[1.0, 0.0, 0.0]] * 5}, ValueError, "vectors must have shape \\(S, 2\\)"),
    ({"vectors": [[1.0, 0.0]] * 4}, ValueError, "vectors must have shape \\(S, 2\\) with S = 5"),
    ({"vectors": 3}, TypeError, "vectors"),
    ({"weights": [0.5, 0.5], "vectors": [[0, 0], [0, 0]]}, ValueError, "vectors: every term"),
    ({"weights": [1.0, 0.0], "vectors": [[0, 0], [1, 0]]}, ValueError, "vectors: every term"),
    ({"labels": "[CLS] animal"}, TypeError, "labels"),
    ({"labels": ["a", "b"]}, ValueError, "labels has 2 entries"),
    ({"labels": ["a", "b", "c", "d", "abcdefghijk"]}, ValueError, "labels must have at most"),
])
def test_key_contributions_bad_arguments_name_the_argument(kwargs, error, name):
    with pytest.raises(error, match=name):
        diagrams.key_contributions(**kwargs)


#: The diagrams that write labels in rounded boxes.
BOXED = ("transformer_block", "cross_attention", "decoder_stack", "grouped_query_heads",
         "induction_circuit", "prefill_and_decode", "whisper_model", "chapter_map")


@pytest.mark.parametrize("name", [name for name in CASES if name.startswith(BOXED)])
def test_a_text_inside_a_box_fits_in_it(name):
    """A text anchored in a rounded box (the smallest one around its anchor) stays inside
    that box: long numbers widen no label past its box's edge."""
    fig, renderer = drawn(name)
    checked = 0
    for ax in fig.axes:
        boxes = [p.get_window_extent(renderer) for p in ax.patches
                 if isinstance(p, FancyBboxPatch)]
        for text in ax.texts:
            if not text.get_text().strip():
                continue
            anchor = ax.transData.transform(text.get_position())
            around = [b for b in boxes if b.contains(*anchor)]
            if not around:
                continue
            box = min(around, key=lambda b: b.width * b.height)
            extent = text.get_window_extent(renderer)
            assert (extent.x0 >= box.x0 - 0.5 and extent.x1 <= box.x1 + 0.5
                    and extent.y0 >= box.y0 - 0.5 and extent.y1 <= box.y1 + 0.5), (
                f"{text.get_text()!r} spills out of its box: {extent} in {box}")
            checked += 1
    assert checked >= 2  # every diagram here has at least two labelled boxes


# ----------------------------------------------------------------------------- whisper_model


@pytest.mark.parametrize("config", [WhisperConfig(), WHISPER_SMALL], ids=["tiny.en", "small"])
def test_whisper_model_prints_the_shapes_of_the_model_it_draws(config):
    """Every size printed is a shape of a Whisper built from the config, and the shapes
    chain: the convolutions halve the frames, the keys per layer are the encoder's output
    split into heads."""
    found = texts_by_gid(diagrams.whisper_model(config))
    model = Whisper(config)
    mel = torch.zeros(1, config.n_mels, 2 * config.audio_positions)
    encoded, _ = model.encode(mel)
    keys, _ = model.cross_memory(encoded)[0]
    logits = model.decode(torch.zeros(1, 2, dtype=torch.long),
                          model.cross_memory(encoded)).logits

    def numbers(gid: str) -> list[int]:
        return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", found[gid])]

    assert numbers("mel")[:2] == list(mel.shape[1:])
    assert numbers("audio")[-2:] == list(encoded.shape[1:])
    assert numbers("memory")[:3] == list(keys.shape[1:])
    assert numbers("logits")[-1] == logits.shape[-1]
    assert numbers("encoder") == [config.encoder_layers]
    assert numbers("decoder") == [config.decoder_layers]


def test_whisper_model_refuses_a_config_of_another_kind():
    with pytest.raises(TypeError, match="config must be an attnbook.whisper.WhisperConfig"):
        diagrams.whisper_model(SMALL)


# ----------------------------------------------------------------------------- decoder_stack


def expected_numbers(config: DecoderConfig) -> dict[str, list[int]]:
    c = config
    group = [c.num_heads // c.num_kv_heads] if c.num_kv_heads < c.num_heads else []
    return {
        "embed": [c.vocab_size, c.d_model],
        "output": [c.d_model, c.vocab_size],
        "probs": [c.vocab_size],
        "num-layers": [c.num_layers],
        "mlp": [c.d_model, c.d_ff, c.d_model],
        "heads": [c.num_heads, c.num_kv_heads, c.d_head, *group],
    }


@pytest.mark.parametrize("name", CONFIGS)
def test_decoder_stack_prints_the_configs_sizes(name):
    config = CONFIGS[name]
    found = texts_by_gid(diagrams.decoder_stack(config))
    for gid, numbers in expected_numbers(config).items():
        text = found[gid]
        if gid in ("heads", "mlp"):  # "Q: 9 query heads; K, V: 3 ...", "...\n576 -> 1536 -> 576"
            shown = text if gid == "heads" else text.splitlines()[-1]
            assert [int(n) for n in re.findall(r"\d+", shown)] == numbers, text
        else:
            assert numbers_after_equals(text) == numbers, (gid, text)


def test_decoder_stack_sizes_are_the_shapes_of_a_real_decoder():
    """On a small config: the sizes printed are the shapes of the Decoder's tensors."""
    decoder = Decoder(SMALL)
    found = texts_by_gid(diagrams.decoder_stack(SMALL))
    assert numbers_after_equals(found["embed"]) == list(decoder.embed.weight.shape)
    assert numbers_after_equals(found["output"]) == list(decoder.embed.weight.T.shape)
    assert numbers_after_equals(found["num-layers"]) == [len(decoder.blocks)]
    mlp = decoder.blocks[0].mlp
    assert [int(n) for n in re.findall(r"\d+", found["mlp"])] == [mlp.gate_proj.in_features,
                                                  mlp.gate_proj.out_features,
                                                  mlp.down_proj.out_features]
    attn = decoder.blocks[0].attn
    assert f"d_head = {attn.d_head}" in found["heads"]
    assert attn.k_proj.out_features == attn.num_kv_heads * attn.d_head
    logits = decoder(torch.tensor([1, 2, 3])).logits
    assert found["probs"].endswith(f"= (L, {logits.shape[-1]})")


def test_decoder_stack_draws_the_loaded_model():
    """The chapter's call: SmolLM2's own config, as the package loads it."""
    from attnbook.pretrained import load_decoder

    config = load_decoder().config
    found = texts_by_gid(diagrams.decoder_stack(config))
    for gid, numbers in expected_numbers(config).items():
        if gid not in ("heads", "mlp"):
            assert numbers_after_equals(found[gid]) == numbers, gid
    assert found["mlp"].endswith(f"{config.d_model} $\\to$ {config.d_ff} $\\to$ "
                                 f"{config.d_model}")
    assert found["heads"].startswith(f"Q: {config.num_heads} query heads; K, V: "
                                     f"{config.num_kv_heads} key/value heads")


def test_decoder_stack_puts_rope_mask_heads_and_cache_inside_attention():
    fig = diagrams.decoder_stack(CONFIGS["smollm2"])
    ax = fig.axes[0]
    attention_box = patches_by_gid(fig)["attention-box"].get_extents()
    inside = [t.get_text() for t in ax.texts
              if attention_box.contains(*ax.transData.transform(t.get_position()))]
    for words in ("grouped-query causal self-attention", "RoPE", "causal mask",
                  "key/value cache", "query heads", "key/value heads"):
        assert any(words in text for text in inside), words
    outside = [t.get_text() for t in ax.texts if t.get_text() not in inside]
    assert not any("RoPE" in text or "causal mask" in text for text in outside)
    texts = [t.get_text() for t in ax.texts]
    # One block expanded: two norms and two residual additions, then the final norm.
    assert texts.count("RMSNorm") == 2 and texts.count("final RMSNorm") == 1
    assert texts.count("residual") == 2 and texts.count("+") == 2
    assert sum("SiLU" in text for text in texts) == 1


def test_decoder_stack_ties_the_output_layer_to_the_embedding_table():
    fig = diagrams.decoder_stack(CONFIGS["smollm2"])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    tie = lines_by_gid(fig)["tie"]
    assert tie.get_linestyle() == "--"
    ends = ax.transData.transform(tie.get_xydata()[[0, -1]])  # pixels
    texts = {t.get_gid(): t for t in ax.texts if t.get_gid()}
    boxes = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, FancyBboxPatch)]
    for end, gid in zip(ends, ("embed", "output"), strict=True):
        label = texts[gid].get_window_extent(renderer)
        box = min((b for b in boxes if b.contains(*label.corners().mean(0))),
                  key=lambda b: b.width * b.height)
        assert abs(end[0] - box.x1) <= 1.0 and box.y0 <= end[1] <= box.y1, gid
    assert "same matrix" in texts_by_gid(fig)["tie-label"]


@pytest.mark.parametrize(("config", "error", "match"), [
    ({"vocab_size": 10}, TypeError, "config must be an attnbook.decoder.DecoderConfig"),
    ("smollm2", TypeError, "config must be .* got str"),
    (DecoderConfig(M + 1, 2, 1, 1, 1, 1), ValueError, "config.vocab_size must be between"),
    (DecoderConfig(2, 2, 1, 1, 1, M + 1), ValueError, "config.d_ff"),
    (DecoderConfig(2, 2, M + 1, 1, 1, 1), ValueError, "config.num_layers"),
    (DecoderConfig(2, 3, 1, 1, 1, 1), ValueError, "d_head"),  # RoPE: an even d_head
])
def test_decoder_stack_bad_config_names_it(config, error, match):
    with pytest.raises(error, match=match):
        diagrams.decoder_stack(config)


# ----------------------------------------------------------------------- grouped_query_heads


def drawn_links(fig: Figure, prefix: str = "") -> dict[int, int]:
    links = {}
    for gid in lines_by_gid(fig):
        found = re.fullmatch(rf"{prefix}link-(\d+)-(\d+)", gid)
        if found:
            links[int(found[1])] = int(found[2])
    return links


@pytest.mark.parametrize(("h", "h_kv"), HEADS.values())
def test_each_query_head_is_joined_to_the_key_value_head_grouped_attention_uses(h, h_kv):
    fig = diagrams.grouped_query_heads(h, h_kv)
    links = drawn_links(fig)
    assert sorted(links) == list(range(h))  # one line per query head
    g = h // h_kv
    # LLaMA's repeat_kv order: key/value head j serves query heads j*g .. j*g + g - 1.
    assert [links[i] for i in range(h)] == torch.arange(h_kv).repeat_interleave(g).tolist()
    # And grouped_attention does exactly that: head i's output is attention with its
    # key/value head.
    gen = torch.Generator().manual_seed(h * 17 + h_kv)
    q = torch.randn(h, 3, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(h_kv, 5, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(h_kv, 5, 2, generator=gen, dtype=torch.float64)
    out = grouped_attention(q, k, v).output
    for i, j in links.items():
        torch.testing.assert_close(out[i], attention(q[i], k[j], v[j]).output)
    # The two ends, bottom left and right: one key/value head each, one for all.
    assert drawn_links(fig, "mha-") == {i: i for i in range(h)}
    assert drawn_links(fig, "mqa-") == dict.fromkeys(range(h), 0)


@pytest.mark.parametrize(("h", "h_kv"), [(9, 3), (16, 8), (7, 1), (4, 4)])
def test_each_line_runs_from_its_query_head_to_its_key_value_head(h, h_kv):
    fig = diagrams.grouped_query_heads(h, h_kv)
    patches = patches_by_gid(fig)
    for prefix, links in (("", drawn_links(fig)), ("mha-", drawn_links(fig, "mha-")),
                          ("mqa-", drawn_links(fig, "mqa-"))):
        for i, j in links.items():
            line = lines_by_gid(fig)[f"{prefix}link-{i}-{j}"]
            (x_start, y_start), (x_end, y_end) = line.get_xydata()[[0, -1]]
            query, kv = patches[f"{prefix}q-{i}"], patches[f"{prefix}kv-{j}"]
            assert query.get_x() < x_start < query.get_x() + query.get_width()
            assert y_start == pytest.approx(query.get_y())  # the query head's lower edge
            assert kv.get_x() < x_end < kv.get_x() + kv.get_width()
            assert y_end == pytest.approx(kv.get_y() + kv.get_height())  # its upper edge
            # A query head has its key/value head's colour: one colour per group.
            assert query.get_facecolor() == kv.get_facecolor()
            assert to_rgba(line.get_color())[:3] != (1.0, 1.0, 1.0)
    # Neighbouring groups differ in colour; with one head a group, one colour for all (no
    # colour repeats that would suggest groups).
    faces = [patches[f"kv-{j}"].get_facecolor() for j in range(h_kv)]
    if h_kv < h:
        assert all(a != b for a, b in zip(faces[:-1], faces[1:], strict=True))
    else:
        assert len(set(faces)) == 1
    assert len({patches[f"mha-kv-{j}"].get_facecolor() for j in range(h)}) == 1


@pytest.mark.parametrize(("h", "h_kv"), HEADS.values())
def test_grouped_query_heads_prints_the_group_size_and_the_cache_saving(h, h_kv):
    fig = diagrams.grouped_query_heads(h, h_kv)
    found = texts_by_gid(fig)
    g = h // h_kv
    assert f"g = {h} / {h_kv} = {g}" in found["group-size"]
    assert "query head i reads key/value head i // g" in found["group-size"]
    for i in range(h):
        assert found[f"q-label-{i}"] == str(i)
    for j in range(h_kv):
        assert found[f"kv-label-{j}"] == str(j)
    assert not any(gid.startswith(("mha-q-label", "mqa-q-label")) for gid in found)
    saving = found["cache-saving"]
    assert saving.startswith(f"the key/value cache holds {h_kv} head")
    if h_kv < h:
        assert saving.endswith(f"instead of {h}: {g} times smaller")
    else:
        assert saving.endswith("no saving")
    assert "no saving" in found["mha-cache"]
    assert found["mqa-cache"].endswith(f"{h} times smaller" if h > 1 else "no saving")


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"num_heads": 0}, ValueError, "num_heads must be between 1 and 16"),
    ({"num_heads": 17, "num_kv_heads": 1}, ValueError, "num_heads must be between 1 and 16"),
    ({"num_heads": 9.0}, TypeError, "num_heads must be an int"),
    ({"num_heads": True}, TypeError, "num_heads must be an int"),
    ({"num_kv_heads": 0}, ValueError, "num_kv_heads must be between 1 and 16"),
    ({"num_kv_heads": "3"}, TypeError, "num_kv_heads must be an int"),
    ({"num_kv_heads": 2}, ValueError, "num_kv_heads=2 must divide num_heads=9"),
    ({"num_heads": 4, "num_kv_heads": 8}, ValueError, "num_kv_heads=8 must divide num_heads=4"),
])
def test_grouped_query_heads_bad_arguments_name_them(kwargs, error, match):
    with pytest.raises(error, match=match):
        diagrams.grouped_query_heads(**kwargs)


#: The diagrams drawn for Part IV and the per-key sum, held to light fills and dark text.
LIGHT_FILLS = ("prefill_and_decode", "window_with_sinks", "decoder_stack", "grouped_query_heads",
               "induction_circuit", "key_contributions", "transformer_block", "chapter_map")


@pytest.mark.parametrize("name", [name for name in CASES if name.startswith(LIGHT_FILLS)])
def test_every_fill_is_light_enough_for_dark_text(name):
    fig, _ = drawn(name)
    for ax in fig.axes:
        for patch in ax.patches:
            r, g, b, alpha = patch.get_facecolor()
            if alpha == 0:  # exact: an unfilled outline
                continue
            assert 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45, patch.get_gid()
        for text in ax.texts:  # dark ink, or a dark Okabe-Ito colour for the two costs
            r, g, b = to_rgb(text.get_color())
            assert 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.45, text.get_text()


# --------------------------------------------------------------------------- prefill/decode


def attended(cache: KVCache, n: int) -> torch.Tensor:
    """Which cached keys the newest ``n`` queries attend to, from the cache's own weights."""
    q = torch.randn(n, 2, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    return cache.attend(q, return_weights=True).weights > 0  # (n, t)


def replay(prompt: int, new: int) -> tuple[torch.Tensor, list[torch.Tensor], list[int]]:
    """Run a real cache: the prefill's and each step's attended keys, the cache lengths."""
    gen = torch.Generator().manual_seed(0)
    cache = KVCache()
    cache.append(torch.randn(prompt, 2, generator=gen, dtype=torch.float64),
                 torch.randn(prompt, 2, generator=gen, dtype=torch.float64))
    prefill, steps, lengths = attended(cache, prompt), [], [len(cache)]
    for _ in range(new):
        cache.append(torch.randn(1, 2, generator=gen, dtype=torch.float64),
                     torch.randn(1, 2, generator=gen, dtype=torch.float64))
        steps.append(attended(cache, 1))
        lengths.append(len(cache))
    return prefill, steps, lengths


@pytest.mark.parametrize(("prompt", "new"), [(5, 3), (1, 1), (10, 6), (3, 6), (10, 1)])
def test_prefill_and_decode_cells_are_what_the_cache_attends(prompt, new):
    fig = diagrams.prefill_and_decode(prompt, new)
    patches = patches_by_gid(fig)
    allowed, masked = to_rgba(diagrams._FILL_ALLOWED), to_rgba(diagrams._FILL_MASKED)
    prefill, steps, lengths = replay(prompt, new)
    cells = {g for g in patches if g.startswith("prefill-cell-")}
    assert cells == {f"prefill-cell-{i}-{j}" for i in range(prompt) for j in range(prompt)}
    for i, j in itertools.product(range(prompt), repeat=2):
        patch = patches[f"prefill-cell-{i}-{j}"]
        if prefill[i, j]:
            assert face(patch) == allowed and not patch.get_hatch()
        else:
            assert face(patch) == masked and patch.get_hatch()
    assert int((~prefill).sum()) == prompt * (prompt - 1) // 2  # the causal triangle
    for k, row in enumerate(steps, start=1):
        drawn = [j for j in range(lengths[-1] + 1) if f"decode-cell-{k}-{j}" in patches]
        assert drawn == list(range(row.shape[1]))  # one cell per cached key, no more
        assert row.all()  # a decode query sees every cached key, its own included
        assert all(face(patches[f"decode-cell-{k}-{j}"]) == allowed for j in drawn)


@pytest.mark.parametrize(("prompt", "new"), [(5, 3), (1, 1), (10, 6), (2, 4)])
def test_prefill_and_decode_prints_the_caches_sizes_and_writers(prompt, new):
    fig = diagrams.prefill_and_decode(prompt, new)
    found, patches = texts_by_gid(fig), patches_by_gid(fig)
    _, steps, lengths = replay(prompt, new)
    assert found["prefill-shape"].startswith(f"scores {prompt} $\\times$ {prompt}\n")
    assert f"causal: {prompt * (prompt - 1) // 2} future" in found["prefill-shape"]
    for k, row in enumerate(steps, start=1):
        assert found[f"decode-shape-{k}"] == f"{row.shape[0]} $\\times$ {row.shape[1]}"
    assert found["prefill-cache-size"].split("\n")[1].split()[0] == str(lengths[0])
    assert found["decode-cache-size"].split("\n")[1].split()[0] == str(lengths[-1])
    assert found["prefill-cost"].startswith(f"{prompt} prompt quer")
    assert found["decode-cost"] == "1 query per step, reads the whole cache"
    # Slots: one K and one V per cached position; the prefill's blue, the steps' orange,
    # and labelled by who wrote them (not by colour alone).
    for panel, count in (("prefill", lengths[0]), ("decode", lengths[-1])):
        for row in "kv":
            slots = {g for g in patches if g.startswith(f"{panel}-{row}-")}
            assert slots == {f"{panel}-{row}-{j}" for j in range(count)}
    prefill_face, decode_face = to_rgba(diagrams._FILL_PREFILL), to_rgba(diagrams._FILL_DECODE)
    assert prefill_face != decode_face
    for j in range(lengths[-1]):
        assert face(patches[f"decode-k-{j}"]) == (prefill_face if j < prompt else decode_face)
    assert found["writer-0"] == "prefill"
    writers = {g: t for g, t in found.items() if g.startswith("writer-") and g != "writer-0"}
    # Step s appended slot lengths[s - 1]: the printed step numbers say so.
    assert writers == {f"writer-{lengths[s - 1]}": str(s) for s in range(1, new + 1)}


# --------------------------------------------------------------------------- window + sinks


def window_rule(length: int, recent: int, sinks: int) -> torch.Tensor:
    """The window with sinks by its definition, written out cell by cell."""
    return torch.tensor([[j <= i and (i - j < recent or j < sinks) for j in range(length)]
                         for i in range(length)])


@pytest.mark.parametrize(("length", "recent", "sinks"), [(12, 4, 2), (24, 4, 2), (2, 1, 0),
                                                         (9, 9, 0), (24, 24, 23), (7, 3, 3),
                                                         (16, 1, 5)])
def test_window_with_sinks_cells_are_the_masks(length, recent, sinks):
    fig = diagrams.window_with_sinks(length, recent, sinks)
    patches = patches_by_gid(fig)
    mask = sliding_window_mask(length, recent, sinks=sinks)
    assert torch.equal(mask, window_rule(length, recent, sinks))
    sink, recent_face = to_rgba(diagrams._FILL_SINK), to_rgba(diagrams._FILL_RECENT)
    kept_faces = {sink, recent_face}
    drawn_kept = {(i, j) for i in range(length) for j in range(length)
                  if face(patches[f"cell-{i}-{j}"]) in kept_faces}
    assert drawn_kept == {(int(i), int(j)) for i, j in mask.nonzero()}
    drawn_sinks = {(i, j) for i in range(length) for j in range(length)
                   if face(patches[f"cell-{i}-{j}"]) == sink}
    assert drawn_sinks == {(i, j) for i in range(length) for j in range(min(sinks, i + 1))}
    for i, j in itertools.product(range(length), repeat=2):
        patch = patches[f"cell-{i}-{j}"]
        if face(patch) == sink:  # sinks are dotted: not told apart by colour alone
            assert patch.get_hatch() == diagrams._HATCH_SINK
        elif j > i:  # the future: grey and hatched, as the mask's forbidden cells everywhere
            assert face(patch) == to_rgba(diagrams._FILL_MASKED) and patch.get_hatch()
        elif not mask[i, j]:  # evicted: a colour and a hatch of its own
            assert face(patch) == to_rgba(diagrams._FILL_EVICTED)
            assert patch.get_hatch() == diagrams._HATCH_EVICTED
        else:
            assert not patch.get_hatch()


@pytest.mark.parametrize(("length", "recent", "sinks"), [(12, 4, 2), (24, 4, 2), (2, 1, 0),
                                                         (9, 9, 0), (24, 24, 23), (7, 3, 3),
                                                         (10, 2, 1)])
def test_window_with_sinks_cache_is_what_a_windowed_cache_keeps(length, recent, sinks):
    fig = diagrams.window_with_sinks(length, recent, sinks)
    patches, found = patches_by_gid(fig), texts_by_gid(fig)
    cache = KVCache(recent=recent, sinks=sinks)
    for t in range(length):
        cache.append(torch.full((1, 1), float(t)), torch.full((1, 1), float(t)))
    kept = cache.positions.tolist()
    mask = sliding_window_mask(length, recent, sinks=sinks)
    assert kept == mask[-1].nonzero()[:, 0].tolist()
    assert cache.keys[:, 0].tolist() == [float(j) for j in kept]  # the right keys survive
    slots = sorted(int(g.split("-")[1]) for g in patches if g.startswith("cache-"))
    assert slots == kept
    assert all(found[f"cache-pos-{j}"] == str(j) for j in kept)
    size, kept_sinks = len(kept), sum(j < sinks for j in kept)
    assert size == int(mask[-1].sum())
    head, tail = found["cache-size"].split("\n")
    assert head.startswith(f"{size} slot") and f"= {kept_sinks} sink" in head
    assert head.endswith(f"+ {size - kept_sinks} recent")
    assert tail == (f"{length - size} evicted" if size < length else "nothing evicted")
    # The plain window of the same size keeps the latest positions only.
    plain = sorted(int(g.split("-")[1]) for g in patches if g.startswith("plain-"))
    assert plain == list(range(length - size, length))
    assert found["plain-size"].startswith(f"{size} slot")


def test_window_with_sinks_marks_the_evicted_gap_in_words():
    fig = diagrams.window_with_sinks(12, 4, 2)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("evicted") == 2  # the gap in both caches
    # Query 0 cannot see key 1: a sink is kept for the queries after it.
    assert texts.count("sink: one of the first 2 tokens,\nkept for every later query") == 1
    assert "A sliding window: recent = 4, sinks = 2" in texts


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(("func", "kwargs", "error", "message"), [
    (diagrams.prefill_and_decode, {"prompt": 0}, ValueError, "prompt must be between 1 and 10"),
    (diagrams.prefill_and_decode, {"prompt": 11}, ValueError, "prompt"),
    (diagrams.prefill_and_decode, {"prompt": 5.0}, TypeError, "prompt must be an int"),
    (diagrams.prefill_and_decode, {"prompt": True}, TypeError, "prompt"),
    (diagrams.prefill_and_decode, {"new": 0}, ValueError, "new must be between 1 and 6"),
    (diagrams.prefill_and_decode, {"new": 7}, ValueError, "new"),
    (diagrams.prefill_and_decode, {"new": "3"}, TypeError, "new must be an int"),
    (diagrams.window_with_sinks, {"length": 1}, ValueError, "length must be between 2 and 24"),
    (diagrams.window_with_sinks, {"length": 25}, ValueError, "length"),
    (diagrams.window_with_sinks, {"length": 12.0}, TypeError, "length must be an int"),
    (diagrams.window_with_sinks, {"recent": 0}, ValueError, "recent must be between 1 and 12"),
    (diagrams.window_with_sinks, {"length": 5, "recent": 6}, ValueError,
     "recent must be between 1 and 5"),
    (diagrams.window_with_sinks, {"recent": None}, TypeError, "recent must be an int"),
    (diagrams.window_with_sinks, {"sinks": -1}, ValueError, "sinks must be between 0 and 11"),
    (diagrams.window_with_sinks, {"length": 5, "sinks": 5}, ValueError,
     "sinks must be between 0 and 4"),
    (diagrams.window_with_sinks, {"sinks": True}, TypeError, "sinks must be an int"),
])
def test_bad_arguments_name_the_argument(func, kwargs, error, message):
    with pytest.raises(error, match=message):
        func(**kwargs)


# ----------------------------------------------------------------------------- chapter_map


def arrows(fig: Figure) -> set[tuple[int, int]]:
    return {tuple(int(n) for n in gid.split("-")[1:]) for gid in texts_by_gid(fig)
            if gid.startswith("needs-")}


def test_chapter_map_draws_only_the_links_no_longer_path_implies():
    fig = diagrams.chapter_map(SMALL_COURSE)
    assert arrows(fig) == {(1, 2), (2, 3), (1, 4)}  # 1 -> 3 goes through 2
    assert sorted(gid for gid in patches_by_gid(fig) if gid.startswith("chapter-")) == [
        f"chapter-{k}" for k in range(1, 5)]


def test_chapter_map_of_the_book_follows_every_recap():
    """Every chapter a recap names is reached along the arrows, and nothing else is."""
    chapters = read_course(ROOT)
    links = arrows(diagrams.chapter_map(chapters))
    number = {chapter.slug: chapter.number for chapter in chapters}

    def reached(k: int) -> set[int]:
        found = set()
        for a, b in links:
            if b == k:
                found |= {a} | reached(a)
        return found

    for chapter in chapters:
        needed = {number[slug] for slug in chapter.prerequisites}
        assert needed <= reached(chapter.number), chapter.slug
        assert all(a in needed for a, b in links if b == chapter.number), chapter.slug


def test_chapter_map_prints_each_chapters_minutes():
    chapters = read_course(ROOT)
    found = texts_by_gid(diagrams.chapter_map(chapters))
    for chapter in chapters:
        assert found[f"minutes-{chapter.number}"] == (
            f"read {chapter.reading_minutes} min · exercises {chapter.exercise_minutes} min")


def test_chapter_map_rows_put_every_chapter_below_what_it_needs():
    fig = diagrams.chapter_map(WIDE_COURSE)
    boxes = patches_by_gid(fig)
    top = {int(gid.split("-")[1]): patch.get_y() for gid, patch in boxes.items()
           if gid.startswith("chapter-")}
    for a, b in arrows(fig):
        assert top[a] > top[b]
    assert len({top[k] for k in (2, 3, 4, 5)}) == 1 and top[6] < top[5]


@pytest.mark.parametrize(("chapters", "error", "fragment"), [
    ("ch1", TypeError, "chapters must be a sequence of attnbook.course.Chapter"),
    ((), ValueError, "chapters must hold 1 to 20"),
    (course({1: (2,), 2: ()}), ValueError, "ch1 needs ['ch2'], which are not earlier"),
])
def test_chapter_map_bad_arguments_name_the_argument(chapters, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        diagrams.chapter_map(chapters)
