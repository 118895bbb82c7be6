"""Schematic pictures of the mechanism, drawn with matplotlib at build time.

Each function returns a new :class:`matplotlib.figure.Figure` in the book's style (an opaque
white background with dark text, which reads the same in the theme's light and dark modes,
and the Okabe-Ito colours of :mod:`attnbook.plots`). Every number a picture prints, and every
shape it labels, is computed here with the package (:mod:`attnbook.attention`,
:mod:`attnbook.layers`, :mod:`attnbook.masks`), never typed in by hand.

The drawings use one Axes per panel whose data units are inches of the figure, so a box drawn
0.5 units wide is half an inch wide whatever the figure size.

- :func:`query_trip`: one query's trip through scores, scaling, softmax and the weighted sum.
- :func:`sequential_vs_parallel`: a recurrent network's L dependent steps against one matrix
  product.
- :func:`multi_head_split`: split into heads, attend, merge, project, with shapes.
- :func:`transformer_block`: where attention sits in a (post-LayerNorm) encoder block.
- :func:`cross_attention`: an encoder-decoder, with cross-attention's queries and keys.
- :func:`rope_rotation`: rotary positions in 2-D: a query at position m and a key at n turn
  by m theta and n theta; shifting both keeps the angle between them, and so the score.
- :func:`attention_data_flow`: one self-attention layer as matrices: X, the projections,
  Q, K, V, the scores, the weights and the output, each with its shape.
- :func:`tiled_attention`: the ``L x S`` scores cut into tiles, the order in which
  :func:`attnbook.efficient.blockwise_attention` visits them, and what sits in fast memory
  at one step.
- :func:`decoder_stack`: the whole decoder of Part IV, one pre-norm block expanded, with
  where the causal mask, RoPE, the grouped heads and the key/value cache sit, and the
  embedding table reused as the output layer.
- :func:`grouped_query_heads`: query heads sharing key/value heads, with multi-head and
  multi-query attention as the two ends.
- :func:`prefill_and_decode`: a decoder's prefill (the prompt in one pass, its keys and
  values written to the key/value cache) and decode steps (one query against the cache).
- :func:`window_with_sinks`: the keys a sliding window with attention sinks keeps, and the
  cache of the last query.
- :func:`induction_circuit`: the induction circuit on a sequence repeated twice: layer 0's
  previous-token head writes each token's predecessor into the next position, and layer 1's
  induction head matches its query against those keys and copies the value it finds.
- :func:`key_contributions`: one query's output as a sum of one term per key, with each
  key's share of the weight beside its share of the contribution.
- :func:`whisper_model`: Whisper's encoder and decoder side by side, with the shapes from the
  sound to the logits, and where cross-attention takes its keys and values.
- :func:`chapter_map`: which chapter of the book needs which, with reading and exercise
  times (for the teacher's page).
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.axes import Axes
from matplotlib.colors import Normalize, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch, Rectangle

from ._validate import require_divides, require_int, scale_factor
from .attention import attention, attention_scores, grouped_attention, masked_softmax
from .circuits import prefix_matching_score, previous_token_score, repeat_twice
from .course import Chapter
from .decoder import Decoder, DecoderConfig, _without_initialisation
from .efficient import KVCache, _blocks
from .layers import MultiHeadAttention
from .masks import causal_mask, sliding_window_mask
from .plots import HEATMAP_CMAP, MASKED_GREY, OKABE_ITO, book_style, legible_text
from .positions import rope
from .whisper import Whisper, WhisperConfig

__all__ = [
    "EXAMPLE_CONTRIBUTION_LABELS",
    "EXAMPLE_CONTRIBUTION_QUERY",
    "EXAMPLE_CONTRIBUTION_VECTORS",
    "EXAMPLE_CONTRIBUTION_WEIGHTS",
    "EXAMPLE_KEYS",
    "EXAMPLE_QK_FEATURES",
    "EXAMPLE_QUERY",
    "EXAMPLE_QUERY_TOKEN",
    "EXAMPLE_TOKENS",
    "EXAMPLE_VALUES",
    "EXAMPLE_V_FEATURES",
    "MAX_WIDTH_PX",
    "attention_data_flow",
    "chapter_map",
    "cross_attention",
    "decoder_stack",
    "grouped_query_heads",
    "induction_circuit",
    "key_contributions",
    "multi_head_split",
    "prefill_and_decode",
    "query_trip",
    "rope_rotation",
    "sequential_vs_parallel",
    "tiled_attention",
    "transformer_block",
    "whisper_model",
    "window_with_sinks",
]

#: No diagram is wider than this many pixels at the book's dpi.
MAX_WIDTH_PX = 1400

#: The colour of a vector entry: purple for negative, orange for positive (colour-blind safe).
_VECTOR_CMAP = "PuOr_r"

_INK = "#111111"
_LINE = "#333333"
_SOFT = "#F2F2F2"  # neutral cell and box fill
_EDGE = "#555555"

# Fills of the boxes in the block diagrams: light tints of the Okabe-Ito colours, so dark
# text stays readable on every one of them.
_FILL_ATTENTION = "#CFE3F3"  # light blue (blue #0072B2)
_FILL_NORM = "#FBE6BF"  # light orange (orange #E69F00)
_FILL_FFN = "#C8EBDF"  # light bluish green (#009E73)
_FILL_CROSS = "#F1D3E6"  # light reddish purple (#CC79A7)
_FILL_IO = "#FFFFFF"

#: Colours of the heads in :func:`multi_head_split`: Okabe-Ito without yellow and black.
_HEAD_COLOURS = tuple(c for c in OKABE_ITO if c not in ("#F0E442", "#000000"))


# --------------------------------------------------------------------------- drawing helpers


def _new_figure(width: float, height: float) -> Figure:
    """A figure of ``width`` x ``height`` inches (call inside the book's rc context)."""
    return plt.figure(figsize=(width, height))


def _panel(fig: Figure, left: float, bottom: float, width: float, height: float) -> Axes:
    """An Axes at the given place (in inches) whose data units are inches, axes hidden."""
    fig_w, fig_h = fig.get_size_inches()
    ax = fig.add_axes((left / fig_w, bottom / fig_h, width / fig_w, height / fig_h))
    ax.set_xlim(0.0, width)
    ax.set_ylim(0.0, height)
    ax.set_axis_off()
    return ax


def _add(ax: Axes, patch: Patch) -> None:
    """``ax.add_patch(patch)`` without its update of the data limits, which took a fifth of
    the time a diagram takes to make: every diagram's axes have fixed limits."""
    ax.add_artist(patch)


def _text_colour(face: object) -> str:
    """Black on a light fill, white on a dark one (relative luminance of the fill)."""
    r, g, b = to_rgb(face)
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def _box(ax: Axes, x: float, y: float, w: float, h: float, text: str = "", *,
         face: str = _SOFT, edge: str = _LINE, fontsize: float = 11, rounding: float = 0.08,
         weight: str = "normal", linewidth: float = 1.2, gid: str | None = None) -> None:
    """A rounded box with its lower-left corner at ``(x, y)`` and centred text."""
    patch = FancyBboxPatch((x, y), w, h, boxstyle=f"round,pad=0,rounding_size={rounding}",
                           facecolor=face, edgecolor=edge, linewidth=linewidth, zorder=2)
    _add(ax, patch)
    if text:
        label = ax.text(x + w / 2, y + h / 2, text, ha="center", va="center",
                        fontsize=fontsize, color=_INK, weight=weight, zorder=3)
        if gid:
            label.set_gid(gid)


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], *,
           color: str = _LINE, linewidth: float = 1.4, connection: str = "arc3",
           head: str = "-|>", zorder: float = 1) -> None:
    """An arrow from ``start`` to ``end`` whose tip touches ``end`` exactly."""
    ax.annotate("", xy=end, xytext=start, zorder=zorder,
                arrowprops={"arrowstyle": head, "color": color, "lw": linewidth,
                            "shrinkA": 0, "shrinkB": 0, "connectionstyle": connection,
                            "mutation_scale": 14})


def _path_arrow(ax: Axes, points: Sequence[tuple[float, float]], *, color: str = _LINE,
                linewidth: float = 1.4) -> None:
    """A polyline through ``points`` ending in an arrowhead (a residual connection)."""
    xs, ys = zip(*points[:-1], strict=True)
    ax.plot(xs, ys, color=color, linewidth=linewidth, solid_capstyle="butt", zorder=1)
    _arrow(ax, points[-2], points[-1], color=color, linewidth=linewidth)


def _cells(ax: Axes, x: float, y: float, numbers_: Sequence[float] | None, colours: Sequence[str],
           *, w: float, h: float, fmt: str = ".2f", fontsize: float = 10.5,
           gid: str | None = None) -> None:
    """A row of cells from ``(x, y)`` (lower left), one per colour, each with its number.

    Number ``i`` gets the gid ``f"{gid}-{i}"``, so tests can read the printed values back.
    """
    for i, face in enumerate(colours):
        _add(ax, Rectangle((x + i * w, y), w, h, facecolor=face, edgecolor=_EDGE,
                           linewidth=0.8, zorder=2))
        if numbers_ is not None:
            label = ax.text(x + (i + 0.5) * w, y + h / 2, format(numbers_[i], fmt),
                            ha="center", va="center", fontsize=fontsize,
                            color=_text_colour(face), zorder=3)
            if gid is not None:
                label.set_gid(f"{gid}-{i}")


def _grid(ax: Axes, x: float, y_top: float, colours: Sequence[Sequence[str]], *, w: float,
          h: float, linewidth: float = 0.6) -> None:
    """A grid of plain cells whose top-left corner is ``(x, y_top)``; row 0 on top."""
    for i, row in enumerate(colours):
        for j, face in enumerate(row):
            _add(ax, Rectangle((x + j * w, y_top - (i + 1) * h), w, h, facecolor=face,
                               edgecolor=_EDGE, linewidth=linewidth, zorder=2))


def _require_int(name: str, value: object, low: int, high: int) -> int:
    return require_int(name, value, low, high, reason=" for a legible drawing")


def _check_width(fig: Figure) -> Figure:
    """Refuse a figure wider than :data:`MAX_WIDTH_PX`, and raise any text too small to read
    where the book shows the figure (:func:`attnbook.plots.legible_text`)."""
    width_px = fig.get_size_inches()[0] * fig.dpi
    if width_px > MAX_WIDTH_PX:  # pragma: no cover - a guard on this module's own layouts
        raise AssertionError(f"diagram is {width_px:.0f} px wide, over {MAX_WIDTH_PX}")
    return legible_text(fig)


# --------------------------------------------------------------------------- 1. query_trip

# query_trip's default example, public so a chapter can build the same vectors inline.
# "The cat sat down": the query of "sat" asks "who did the sitting?", i.e. it looks for an
# animate noun, and the key of "cat" advertises exactly that. Query and key features:
EXAMPLE_QK_FEATURES = ("noun", "animate", "verb", "place")
EXAMPLE_TOKENS = ("The", "cat", "sat", "down")
EXAMPLE_QUERY_TOKEN = "sat"
EXAMPLE_QUERY = (2.0, 2.0, 0.0, 0.0)
EXAMPLE_KEYS = (
    (0.1, 0.0, 0.0, 0.0),  # The: a function word, it advertises almost nothing
    (1.0, 1.0, 0.0, 0.0),  # cat: an animate noun
    (0.0, 0.0, 1.0, 0.0),  # sat: a verb
    (0.0, 0.0, 0.2, 1.0),  # down: a place or direction, attached to the verb
)
# What each token passes on when it is attended to. Value features:
EXAMPLE_V_FEATURES = ("animal", "pet", "action", "place")
EXAMPLE_VALUES = (
    (0.1, 0.1, 0.0, 0.0),  # The
    (1.0, 1.0, 0.0, 0.0),  # cat
    (0.0, 0.0, 1.0, 0.0),  # sat
    (0.0, 0.0, 0.3, 1.0),  # down
)

_MAX_KEYS = 8
_MAX_FEATURES = 6


def _as_float_tensor(name: str, value: object, ndim: int, shape_text: str) -> torch.Tensor:
    """A float64 tensor from a tensor, array or (nested) list, checked to be ``ndim``-D."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu", torch.float64)
    elif isinstance(value, np.ndarray | Sequence) and not isinstance(value, str | bytes):
        try:
            tensor = torch.as_tensor(np.asarray(value, dtype=np.float64))
        except (TypeError, ValueError):
            raise TypeError(f"{name} must hold numbers, shape {shape_text}") from None
    else:
        raise TypeError(f"{name} must be a torch.Tensor, numpy.ndarray or list of numbers "
                        f"with shape {shape_text}, got {type(value).__name__}")
    if tensor.dim() != ndim or 0 in tensor.shape:
        raise ValueError(f"{name} must have shape {shape_text}, got shape {tuple(tensor.shape)}")
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    return tensor


def _trip_inputs(query: object, keys: object, values: object, labels: object
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[str], str]:
    """Checked ``(q (E,), k (S, E), v (S, Ev), key labels, query label)``."""
    defaults = query is None and keys is None and values is None
    q = _as_float_tensor("query", EXAMPLE_QUERY if query is None else query, 1, "(E,)")
    k = _as_float_tensor("keys", EXAMPLE_KEYS if keys is None else keys, 2, "(S, E)")
    v = _as_float_tensor("values", EXAMPLE_VALUES if values is None else values, 2,
                         "(S, Ev)")
    if k.shape[1] != q.shape[0]:
        raise ValueError(f"keys must have shape (S, E) with E = {q.shape[0]}, the query's "
                         f"length, got shape {tuple(k.shape)}")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"values must have one row per key (S = {k.shape[0]}), got shape "
                         f"{tuple(v.shape)}")
    if k.shape[0] > _MAX_KEYS:
        raise ValueError(f"keys must have at most {_MAX_KEYS} rows for a legible drawing, "
                         f"got {k.shape[0]}")
    if q.shape[0] > _MAX_FEATURES:
        raise ValueError(f"query must have at most {_MAX_FEATURES} features for a legible "
                         f"drawing, got {q.shape[0]}")
    if v.shape[1] > _MAX_FEATURES:
        raise ValueError(f"values must have at most {_MAX_FEATURES} features for a legible "
                         f"drawing, got {v.shape[1]}")
    S = k.shape[0]
    if labels is None:
        names = list(EXAMPLE_TOKENS) if keys is None else [f"key {j}" for j in range(S)]
    elif isinstance(labels, str) or not isinstance(labels, Sequence):
        raise TypeError("labels must be a sequence of strings, one per key, "
                        f"got {type(labels).__name__}")
    else:
        names = [str(t) for t in labels]
        if len(names) != S:
            raise ValueError(f"labels has {len(names)} entries but there are {S} keys")
    query_name = EXAMPLE_QUERY_TOKEN if defaults else ""
    return q, k, v, names, query_name


def query_trip(
    query: torch.Tensor | np.ndarray | Sequence[float] | None = None,
    keys: torch.Tensor | np.ndarray | Sequence[Sequence[float]] | None = None,
    values: torch.Tensor | np.ndarray | Sequence[Sequence[float]] | None = None,
    *,
    labels: Sequence[str] | None = None,
    scale: float | None = None,
) -> Figure:
    """One query's trip through attention, stage by stage, with every number printed.

    Vectors are rows of coloured cells (orange positive, purple negative). From left to
    right, one row per key ``j``: the key ``k_j``; its score ``q . k_j``; the scaled score
    ``scale * q . k_j``; the weight ``w_j`` (softmax over the scaled scores, a cell coloured
    as in the book's heatmaps); and the value ``v_j``. Under the values sits the output
    ``sum_j w_j v_j``. The query row sits on top, above the keys.

    The default example is hand-designed so that it reads for meaning: in "The cat sat down"
    the query of "sat" looks for an animate noun (who sat?) and the key of "cat" offers one,
    so "cat" takes most of the weight and the output is mostly "cat"'s value.

    Every number comes from :func:`attnbook.attention.attention_scores` (scores),
    :func:`attnbook.attention.masked_softmax` (weights) and
    :func:`attnbook.attention.attention` (the output, checked against the weights).
    Printed numbers carry a gid so tests can read them back: ``q-i``, ``k{j}-i``,
    ``score{j}-0``, ``scaled{j}-0``, ``weight{j}-0``, ``v{j}-i`` and ``out-i``.

    Args:
        query: the query ``q``, shape ``(E,)``; the example's "sat" query when None.
        keys: the keys, shape ``(S, E)`` with ``1 <= S <= 8``; the example's when None.
        values: the values, shape ``(S, Ev)``; the example's when None.
        labels: ``S`` names for the keys (tokens); the example's words when ``keys`` is
            None, else ``key 0``, ``key 1``, ...
        scale: the factor on the scores; ``None`` means ``1 / sqrt(E)``, as in
            :func:`attnbook.attention.attention`.

    Returns:
        The new figure (one Axes).

    Raises:
        TypeError: an input that is not a tensor, array or list of numbers, ``labels``
            that is one string, ``scale`` that is not a real number.
        ValueError: shapes that do not fit together, too many keys or features to draw
            (S > 8, E or Ev > 6), non-finite numbers, ``labels`` of the wrong length.
    """
    q, k, v, names, query_name = _trip_inputs(query, keys, values, labels)
    S, E = k.shape
    Ev = v.shape[1]
    factor = scale_factor(scale, E)

    scores = attention_scores(q[None, :], k, 1.0)[0]  # (S,)
    scaled = attention_scores(q[None, :], k, factor)[0]  # (S,)
    weights = masked_softmax(scaled)  # (S,)
    output, package_weights = attention(q[None, :], k, v, scale=factor)  # (1, Ev), (1, S)
    torch.testing.assert_close(package_weights[0], weights)
    output = output[0]  # (Ev,)

    features = EXAMPLE_QK_FEATURES if query_name and E == len(EXAMPLE_QK_FEATURES) else None
    v_features = EXAMPLE_V_FEATURES if query_name and Ev == len(EXAMPLE_V_FEATURES) else None

    big = float(max(q.abs().max(), k.abs().max(), v.abs().max(), output.abs().max()))
    vector_norm = Normalize(-big if big > 0 else -1.0, big if big > 0 else 1.0)
    vector_cmap = mpl.colormaps[_VECTOR_CMAP]
    weight_cmap = mpl.colormaps[HEATMAP_CMAP]

    def vec_colours(row: torch.Tensor) -> list[str]:
        # Keep to the middle 70% of the colour map so no cell is too dark to read.
        return [mpl.colors.to_hex(vector_cmap(0.5 + 0.35 * (2 * vector_norm(float(x)) - 1)))
                for x in row]

    cw, ch = 0.53, 0.4  # cell width, height (inches)
    gap = 0.18  # between key rows
    label_w = 1.05
    arrow_w = 0.42
    key_x = label_w
    score_x = key_x + E * cw + arrow_w
    scaled_x = score_x + cw + 0.2 + arrow_w
    weight_x = scaled_x + cw + 0.2 + arrow_w
    value_x = weight_x + cw + 0.2 + arrow_w
    width = value_x + Ev * cw + 0.25
    height = 1.0 + 0.95 + S * (ch + gap) + 1.45

    with mpl.rc_context(book_style()):
        fig = _new_figure(width, height)
        ax = _panel(fig, 0.0, 0.0, width, height)

        # Top: the query row, its feature names, and the headers of each stage.
        q_y = height - 0.35 - ch - (0.25 if features else 0.0)
        if features:
            for i, name in enumerate(features):
                ax.text(key_x + (i + 0.5) * cw, q_y + ch + 0.06, name, ha="center",
                        va="bottom", fontsize=8.5, color="#444444")
        _cells(ax, key_x, q_y, q.tolist(), vec_colours(q), w=cw, h=ch, gid="q")
        ax.text(key_x - 0.12, q_y + ch / 2,
                f"query $\\mathbf{{q}}$\n({query_name!r})" if query_name else
                "query $\\mathbf{q}$", ha="right", va="center", fontsize=11)

        header_y = q_y - 0.3
        row_top = header_y - 0.3
        heads = [
            (key_x + E * cw / 2, "key $\\mathbf{k}_j$"),
            (score_x + cw / 2, "score\n$\\mathbf{q}\\cdot\\mathbf{k}_j$"),
            (scaled_x + cw / 2, f"$\\times\\,${factor:.3g}" + (
                f"\n$(1/\\sqrt{{{E}}})$" if scale is None else "")),
            (weight_x + cw / 2, "softmax\nweight $w_j$"),
            (value_x + Ev * cw / 2, "value $\\mathbf{v}_j$"),
        ]
        for x, text in heads:
            ax.text(x, header_y, text, ha="center", va="center", fontsize=10.5,
                    color=_INK, linespacing=1.3)
        if v_features:
            for i, name in enumerate(v_features):
                ax.text(value_x + (i + 0.5) * cw, header_y + 0.3, name, ha="center",
                        va="bottom", fontsize=8.5, color="#444444")
        # q feeds every score: an arrow from the query row to the score column.
        _arrow(ax, (key_x + E * cw + 0.05, q_y + ch / 2),
               (score_x + cw / 2, header_y + 0.32), connection="angle,angleA=0,angleB=90")

        # One row per key.
        for j in range(S):
            y = row_top - (j + 1) * ch - j * gap
            mid = y + ch / 2
            ax.text(key_x - 0.12, mid, names[j], ha="right", va="center", fontsize=11)
            _cells(ax, key_x, y, k[j].tolist(), vec_colours(k[j]), w=cw, h=ch, gid=f"k{j}")
            _cells(ax, score_x, y, [float(scores[j])], [_SOFT], w=cw, h=ch, gid=f"score{j}")
            _cells(ax, scaled_x, y, [float(scaled[j])], [_SOFT], w=cw, h=ch,
                   gid=f"scaled{j}")
            _cells(ax, weight_x, y, [float(weights[j])],
                   [mpl.colors.to_hex(weight_cmap(float(weights[j])))], w=cw, h=ch,
                   gid=f"weight{j}")
            _cells(ax, value_x, y, v[j].tolist(), vec_colours(v[j]), w=cw, h=ch, gid=f"v{j}")
            for start, end in ((key_x + E * cw, score_x), (score_x + cw, scaled_x),
                               (scaled_x + cw, weight_x), (weight_x + cw, value_x)):
                _arrow(ax, (start + 0.08, mid), (end - 0.08, mid), color="#666666",
                       linewidth=1.1)
            ax.text(value_x - 0.08 - (arrow_w - 0.16) / 2, mid + 0.04, "$\\times$",
                    ha="center", va="bottom", fontsize=9, color="#555555")

        # Bottom: the weighted sum of the values.
        last_y = row_top - S * ch - (S - 1) * gap
        out_y = last_y - 0.9 - ch
        _arrow(ax, (value_x + Ev * cw / 2, last_y - 0.06), (value_x + Ev * cw / 2,
               out_y + ch + 0.06))
        ax.text(value_x + Ev * cw / 2 - 0.12, (last_y + out_y + ch) / 2,
                "$\\sum_j w_j\\,\\mathbf{v}_j$", ha="right", va="center", fontsize=11)
        _cells(ax, value_x, out_y, output.tolist(), vec_colours(output), w=cw, h=ch,
               gid="out")
        ax.text(value_x - 0.12, out_y + ch / 2,
                f"output for {query_name!r}" if query_name else "output",
                ha="right", va="center", fontsize=11)
        # How to read the colours, and (for the example) what the numbers mean.
        key_lines = ["cells: orange > 0, purple < 0;", "weights in the heatmaps' colours"]
        if query_name:
            key_lines = [f"{query_name!r} looks for an animate noun (who sat?)",
                         f"and the key of {names[1]!r} offers one.", "", *key_lines]
        ax.text(0.15, out_y + ch / 2, "\n".join(key_lines), ha="left", va="center",
                fontsize=9.5, color="#333333", linespacing=1.3)
        # Sum of the weights: they are a distribution.
        ax.text(weight_x + cw / 2, last_y - 0.12, f"sum = {float(weights.sum()):.2f}",
                ha="center", va="top", fontsize=9.5, color="#444444")
    return _check_width(fig)


# --------------------------------------------------------------------------- 2. sequential


def sequential_vs_parallel(length: int = 6) -> Figure:
    """A recurrent network's ``L`` dependent steps beside attention's one matrix product.

    Left panel: a recurrent network as a chain of ``L`` state boxes ``h_1 .. h_L``, each fed
    by its input ``x_t`` and by the previous state, so step ``t`` cannot start before step
    ``t - 1`` ends: the sequential depth is ``L``. Right panel: attention's ``L x L`` score
    grid, fed by ``Q`` (``L x d``) on its left and ``K^T`` (``d x L``) on top; every score
    comes out of one matrix product, so the number of dependent stages does not grow with
    ``L``: a product, a softmax and a weighted sum, whatever ``L`` is (the grid's diagonal
    is not special: all cells are computed together). The depth and the number of
    scores printed are counted from the drawing's own tensors (a causal chain of ``L``
    states, a score matrix from :func:`attnbook.attention.attention_scores`).

    Args:
        length: the sequence length ``L``, from 2 to 12.

    Returns:
        The new figure, with two Axes (recurrent left, attention right).

    Raises:
        TypeError: if ``length`` is not an int.
        ValueError: if ``length`` is outside 2..12.
    """
    L = _require_int("length", length, 2, 12)
    d = 3  # the feature width drawn for Q and K (only its shape matters here)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(L, d, generator=generator, dtype=torch.float64)  # (L, d)
    k = torch.randn(L, d, generator=generator, dtype=torch.float64)  # (L, d)
    scores = attention_scores(q, k, 1.0)  # (L, L), one matrix product
    n_scores = scores.numel()
    # The recurrent chain's depth: state t depends on state t-1, so the longest chain of
    # dependencies through the L states is L steps.
    depends_on = {t: t - 1 for t in range(1, L)}
    rnn_depth = 1 + max((_chain_length(depends_on, t) for t in range(L)), default=0)

    panel_w, height = 5.0, 3.8
    with mpl.rc_context(book_style()):
        fig = _new_figure(2 * panel_w, height)
        left = _panel(fig, 0.0, 0.0, panel_w, height)
        right = _panel(fig, panel_w, 0.0, panel_w, height)

        # Left: the recurrent chain.
        left.text(panel_w / 2, height - 0.25, "Recurrent network", ha="center", va="top",
                  fontsize=12, weight="bold")
        chain_x = 0.55  # room on the left for the "step" label
        step = (panel_w - chain_x - 0.2) / L
        box = min(0.62, 0.78 * step)
        y_h, y_x = 1.55, 0.75
        for t in range(L):
            cx = chain_x + (t + 0.5) * step
            _box(left, cx - box / 2, y_h, box, box, f"$h_{{{t + 1}}}$", face=_FILL_ATTENTION,
                 fontsize=11 if L <= 8 else 8.5)
            left.text(cx, y_x, f"$x_{{{t + 1}}}$", ha="center", va="center",
                      fontsize=11 if L <= 8 else 8.5)
            _arrow(left, (cx, y_x + 0.18), (cx, y_h))
            left.text(cx, y_h + box + 0.1, str(t + 1), ha="center", va="bottom", fontsize=9,
                      color="#0072B2")
            if t:
                _arrow(left, (cx - step + box / 2, y_h + box / 2), (cx - box / 2,
                       y_h + box / 2), color="#D55E00", linewidth=1.8)
        left.text(chain_x + step / 2 - 0.14, y_h + box + 0.1, "step", ha="right", va="bottom",
                  fontsize=9, color="#0072B2")
        left.text(panel_w / 2, 0.12,
                  "$h_t = f(h_{t-1}, x_t)$: each step waits for the one before",
                  ha="center", va="bottom", fontsize=10)
        depth = left.text(panel_w / 2, height - 0.62,
                          f"sequential depth: L = {rnn_depth} dependent steps",
                          ha="center", va="top", fontsize=11, color="#D55E00")
        depth.set_gid("rnn-depth")

        # Right: attention's score grid fed by Q and K^T.
        right.text(panel_w / 2, height - 0.25, "Attention", ha="center", va="top",
                   fontsize=12, weight="bold")
        cell = min(0.27, 1.62 / L)
        grid_w = L * cell
        feat = 0.18  # width of one feature column of Q (and row of K^T)
        x0 = (panel_w - grid_w - d * feat - 0.15) / 2 + d * feat + 0.15  # grid's left edge
        top = 0.6 + grid_w  # the grid's top edge
        q_colour, k_colour, s_colour = "#CFE3F3", "#FBE6BF", "#C8EBDF"
        _grid(right, x0 - 0.15 - d * feat, top, [[q_colour] * d] * L, w=feat, h=cell)
        _grid(right, x0, top + 0.15 + d * feat, [[k_colour] * L] * d, w=cell, h=feat)
        _grid(right, x0, top, [[s_colour] * L] * L, w=cell, h=cell)
        right.text(x0 - 0.15 - d * feat / 2, top + 0.08, "$Q$", ha="center", va="bottom",
                   fontsize=11)
        right.text(x0 - 0.2, top + 0.15 + d * feat / 2, "$K^{\\top}$", ha="right",
                   va="center", fontsize=11)
        right.text(x0 + grid_w + 0.12, top - grid_w / 2,
                   f"$QK^{{\\top}}$\n{L} $\\times$ {L}\n= {n_scores}\nscores",
                   ha="left", va="center", fontsize=10, linespacing=1.2)
        right.text(panel_w / 2, 0.12, "one matrix product computes every score at once",
                   ha="center", va="bottom", fontsize=10)
        depth = right.text(panel_w / 2, height - 0.62,
                           "3 dependent stages (their number does not grow with L)",
                           ha="center", va="top", fontsize=11, color="#009E73")
        depth.set_gid("attn-depth")
        # A divider between the panels.
        right.plot([0.02, 0.02], [0.3, height - 0.3], color="#BBBBBB", linewidth=1)
    return _check_width(fig)


def _chain_length(depends_on: dict[int, int], node: int) -> int:
    """How many dependency edges lead back from ``node`` to a node with no dependency."""
    length = 0
    while node in depends_on:
        node = depends_on[node]
        length += 1
    return length


# --------------------------------------------------------------------------- 3. multi-head


def _tint(colour: str, amount: float) -> str:
    """``colour`` mixed with white: ``amount`` 1 is the colour, 0 is white."""
    rgb = np.array(to_rgb(colour))
    return mpl.colors.to_hex(1.0 - amount * (1.0 - rgb))


def _shape_text(symbols: str, tensor: torch.Tensor) -> str:
    return f"{symbols}\n= {tuple(tensor.shape)}"


def multi_head_split(length: int = 4, d_model: int = 8, num_heads: int = 2) -> Figure:
    """Multi-head attention's split, attend, merge and project, with every shape labelled.

    Top row: the queries ``Q = x W_q`` as an ``L x d_model`` grid whose feature columns are
    coloured by the head that receives them; ``.view`` cuts each row into ``h`` pieces of
    ``d_head`` features (``(B, L, h, d_head)``); ``.transpose(1, 2)`` puts the heads first
    (``(B, h, L, d_head)``), one ``L x d_head`` grid per head. Keys and values are split
    the same way. Bottom row: each head's ``L x L`` attention weights (coloured as in the
    book's heatmaps), its ``(B, h, L, d_head)`` output, the transpose and reshape that merge
    the heads back to ``(B, L, d_model)`` (each head's columns where they started), and the
    output projection ``W_o``, after which every feature mixes all heads.

    The shapes are read from real tensors: a seeded :class:`attnbook.layers.MultiHeadAttention`
    applied to a seeded input with batch size ``B = 1``, its ``split_heads``,
    ``merge_heads`` and ``out_proj``; the weights drawn are that layer's (a random layer,
    so only their shape and the fact that each row sums to 1 mean anything).

    Args:
        length: the sequence length ``L``, from 1 to 8.
        d_model: the model width, from 1 to 16.
        num_heads: the number of heads ``h``, from 1 to 4; must divide ``d_model``.

    Returns:
        The new figure (one Axes).

    Raises:
        TypeError: if an argument is not an int.
        ValueError: if an argument is out of range, or (from the layer drawn,
            :class:`attnbook.layers.MultiHeadAttention`) ``num_heads`` does not divide
            ``d_model``.
    """
    L = _require_int("length", length, 1, 8)
    D = _require_int("d_model", d_model, 1, 16)
    h = _require_int("num_heads", num_heads, 1, 4)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = MultiHeadAttention(D, h).double()
        # A wide input spread gives peaked weights, so the heads' patterns differ visibly.
        x = 3.0 * torch.randn(1, L, D, dtype=torch.float64)  # (B, L, d_model)
    with torch.no_grad():
        q = layer.q_proj(x)  # (B, L, d_model)
        viewed = q.unflatten(-1, (h, layer.d_head))  # (B, L, h, d_head)
        heads_q = layer.split_heads(q)  # (B, h, L, d_head)
        heads_k = layer.split_heads(layer.k_proj(x))  # (B, h, L, d_head)
        heads_v = layer.split_heads(layer.v_proj(x))  # (B, h, L, d_head)
        heads_out, weights = attention(heads_q, heads_k, heads_v)  # (B,h,L,d_head), (B,h,L,L)
        merged = layer.merge_heads(heads_out)  # (B, L, d_model)
        projected = layer.out_proj(merged)  # (B, L, d_model)
        output, layer_weights = layer(x)
    torch.testing.assert_close(projected, output)
    torch.testing.assert_close(weights, layer_weights)
    d_head = heads_q.shape[-1]

    c = min(0.22, 1.7 / D, 2.0 / (h * L))  # cell size (inches)
    head_gap = 0.14  # between the heads' grids
    stack_h = h * L * c + (h - 1) * head_gap
    col_head = [j // d_head for j in range(D)]  # which head gets feature j
    fills = [_tint(_HEAD_COLOURS[i], 0.45) for i in range(h)]
    wide = [[fills[col_head[j]] for j in range(D)] for _ in range(L)]
    # The operations between the blocks, each on an arrow at least as long as its label
    # (about 0.09 inch a monospace character at 9.5 pt) with over 0.15 inch clear at each end.
    top_ops = [".view", ".transpose(1, 2)"]
    bottom_ops = ["@ V_h", ".transpose(1, 2)\n.reshape", "@ W_o"]

    def arrow_w(text: str) -> float:
        return max(1.38, 0.09 * max(len(line) for line in text.split("\n")) + 0.35)

    title_h, shape_h = 0.6, 0.62
    row_h = title_h + stack_h + shape_h
    margin, left_pad = 0.1, 0.75  # left_pad leaves room for the "head i" labels

    # Top row: Q, view, transpose. Bottom row: weights, outputs, merge, project.
    top_widths = [D * c, D * c + (h - 1) * 0.1, d_head * c]
    bottom_widths = [L * c, d_head * c, D * c, D * c]
    width = left_pad + margin + max(sum(top_widths) + sum(map(arrow_w, top_ops)),
                                    sum(bottom_widths) + sum(map(arrow_w, bottom_ops))) + 0.3
    row_gap = 0.45
    height = 2 * row_h + row_gap + 0.3

    with mpl.rc_context(book_style()):
        fig = _new_figure(width, height)
        ax = _panel(fig, 0.0, 0.0, width, height)
        weight_cmap = mpl.colormaps[HEATMAP_CMAP]

        def labels(x: float, w: float, top: float, bottom: float, title: str | None,
                   symbols: str, tensor: torch.Tensor, gid: str) -> None:
            """A block's title above it and its shape, read from ``tensor``, below it."""
            if title is not None:
                ax.text(x + w / 2, top + 0.08, title, ha="center", va="bottom",
                        fontsize=10.5, linespacing=1.1)
            shape = ax.text(x + w / 2, bottom - 0.08, _shape_text(symbols, tensor),
                            ha="center", va="top", fontsize=9.5, color="#333333",
                            linespacing=1.15, family="monospace")
            shape.set_gid(gid)

        def op_arrow(x_from: float, x_to: float, y: float, text: str) -> None:
            _arrow(ax, (x_from + 0.12, y), (x_to - 0.12, y))
            label = ax.text((x_from + x_to) / 2, y + 0.08, text, ha="center", va="bottom",
                            fontsize=9.5, family="monospace", linespacing=1.1)
            label.set_gid("op")

        def stacked(x: float, y_top: float, grids: list[list[list[str]]]) -> None:
            for i, grid in enumerate(grids):
                _grid(ax, x, y_top - i * (L * c + head_gap), grid, w=c, h=c)
                ax.text(x - 0.07, y_top - i * (L * c + head_gap) - L * c / 2,
                        f"head {i}", ha="right", va="center", fontsize=9,
                        color=_HEAD_COLOURS[i], weight="bold")

        per_head = [[[fills[i]] * d_head for _ in range(L)] for i in range(h)]
        for row in (0, 1):
            y_top = height - 0.15 - row * (row_h + row_gap) - title_h  # top of the blocks
            mid = y_top - stack_h / 2
            flat_top, flat_bottom = mid + L * c / 2, mid - L * c / 2  # a one-grid block
            stack_bottom = y_top - stack_h  # a block of one grid per head
            widths = top_widths if row == 0 else bottom_widths
            ops = top_ops if row == 0 else bottom_ops
            xs = [left_pad]
            for w, op in zip(widths[:-1], ops, strict=True):
                xs.append(xs[-1] + w + arrow_w(op))
            if row == 0:
                # Q: L x d_model, columns coloured by head.
                _grid(ax, xs[0], flat_top, wide, w=c, h=c)
                labels(xs[0], widths[0], flat_top, flat_bottom, "$Q = xW_q$ (and $K$, $V$)",
                       "(B, L, d_model)", q, "shape-q")
                op_arrow(xs[0] + widths[0], xs[1], mid, ops[0])
                # view: each row cut into h pieces.
                for i in range(h):
                    _grid(ax, xs[1] + i * (d_head * c + 0.1), flat_top, per_head[i], w=c, h=c)
                labels(xs[1], widths[1], flat_top, flat_bottom,
                       f"each row cut into h = {h} pieces\nof d_head = {d_head} features",
                       "(B, L, h, d_head)", viewed, "shape-view")
                op_arrow(xs[1] + widths[1], xs[2], mid, ops[1])
                stacked(xs[2], y_top, per_head)
                labels(xs[2], widths[2], y_top, stack_bottom, "one grid per head",
                       "(B, h, L, d_head)", heads_q, "shape-heads")
                turn_from = (xs[2] + widths[2] / 2, y_top - stack_h - shape_h + 0.02)
            else:
                grids = [[[mpl.colors.to_hex(weight_cmap(float(weights[0, i, r, s])))
                           for s in range(L)] for r in range(L)] for i in range(h)]
                stacked(xs[0], y_top, grids)
                ax.text(xs[0] + widths[0] / 2, y_top + 0.08,
                        "weights per head\n$\\mathrm{softmax}(Q_hK_h^{\\top}/\\sqrt{d_{head}})$",
                        ha="center", va="bottom", fontsize=10.5, linespacing=1.6)
                labels(xs[0], widths[0], y_top, stack_bottom, None, "(B, h, L, L)", weights,
                       "shape-weights")
                op_arrow(xs[0] + widths[0], xs[1], mid, ops[0])
                stacked(xs[1], y_top, per_head)
                labels(xs[1], widths[1], y_top, stack_bottom, "outputs, per head",
                       "(B, h, L, d_head)", heads_out, "shape-outputs")
                op_arrow(xs[1] + widths[1], xs[2], mid, ops[1])
                _grid(ax, xs[2], flat_top, wide, w=c, h=c)
                labels(xs[2], widths[2], flat_top, flat_bottom, "heads merged",
                       "(B, L, d_model)", merged, "shape-merged")
                op_arrow(xs[2] + widths[2], xs[3], mid, ops[2])
                _grid(ax, xs[3], flat_top, [["#D9D9D9"] * D] * L, w=c, h=c)
                labels(xs[3], widths[3], flat_top, flat_bottom,
                       "output: every feature\nmixes all heads", "(B, L, d_model)", projected,
                       "shape-output")
                turn_to = (xs[0] + widths[0] / 2, y_top + title_h + 0.02)
        # From the end of the top row to the start of the bottom row.
        y_turn = (turn_from[1] + turn_to[1]) / 2
        _path_arrow(ax, [turn_from, (turn_from[0], y_turn), (turn_to[0], y_turn), turn_to])
        ax.text((turn_from[0] + turn_to[0]) / 2, y_turn + 0.06, "attention in every head at once",
                ha="center", va="bottom", fontsize=9.5)
    return _check_width(fig)


# --------------------------------------------------------------------------- 4. block


def _add_circle(ax: Axes, x: float, y: float, r: float = 0.17) -> None:
    """The residual addition: a circle with a plus, centred at ``(x, y)``."""
    _add(ax, mpl.patches.Circle((x, y), r, facecolor="white", edgecolor=_LINE,
                                linewidth=1.3, zorder=2))
    ax.text(x, y, "+", ha="center", va="center", fontsize=14, color=_INK, zorder=3)


def transformer_block() -> Figure:
    """Where attention sits in a transformer encoder block, drawn post-LayerNorm.

    From the bottom up: the input token vectors ``(L, d_model)``; multi-head self-attention
    (queries, keys and values all from the same input); a residual connection that adds the
    block's input back; LayerNorm; a position-wise feed-forward network
    (``d_model -> d_ff -> d_model``); a second residual addition; a second LayerNorm; the
    output ``(L, d_model)``, which the next block reads. Encoders stack ``N`` such blocks.

    LayerNorm comes *after* each residual addition ("post-LN"), as in the original 2017
    Transformer, BERT and MiniLM (the model this book loads); a label says so. GPT-2 and
    most recent decoders put LayerNorm *before* each sublayer instead ("pre-LN").

    Returns:
        The new figure (one Axes).
    """
    width, height = 6.6, 8.0
    cx, bw = 3.1, 3.0  # the main column's centre and box width
    left = cx - bw / 2
    with mpl.rc_context(book_style()):
        fig = _new_figure(width, height)
        ax = _panel(fig, 0.0, 0.0, width, height)

        def box(y: float, h: float, text: str, face: str, gid: str | None = None) -> None:
            _box(ax, left, y, bw, h, text, face=face, fontsize=11, gid=gid)

        shape = "(L, d_model)"
        # Bottom to top.
        box(0.35, 0.5, "input: token vectors $x$", _FILL_IO)
        box(1.45, 0.7, "multi-head self-attention\nQ, K, V all from $x$", _FILL_ATTENTION,
            gid="attention-box")
        add1 = 2.62
        box(3.02, 0.45, "LayerNorm", _FILL_NORM)
        box(4.05, 0.7, "feed-forward network\nLinear, GELU, Linear", _FILL_FFN)
        add2 = 5.22
        box(5.62, 0.45, "LayerNorm", _FILL_NORM)
        box(6.42, 0.5, "output, to the next block", _FILL_IO)
        _add_circle(ax, cx, add1)
        _add_circle(ax, cx, add2)

        # The main path.
        for y0, y1 in ((0.85, 1.45), (2.15, add1 - 0.17), (add1 + 0.17, 3.02), (3.47, 4.05),
                       (4.75, add2 - 0.17), (add2 + 0.17, 5.62), (6.07, 6.42)):
            _arrow(ax, (cx, y0), (cx, y1))
        for y in (1.15, 6.245):
            ax.text(cx + 0.1, y, shape, ha="left", va="center", fontsize=9,
                    family="monospace", color="#333333")

        # The residual connections: around each sublayer, into the addition.
        for branch, target in ((1.15, add1), (3.76, add2)):
            ax.plot([cx], [branch], "o", color=_LINE, markersize=4, zorder=3)
            _path_arrow(ax, [(cx, branch), (left - 0.45, branch), (left - 0.45, target),
                             (cx - 0.17, target)], color="#0072B2", linewidth=1.6)
            ax.text(left - 0.55, (branch + target) / 2, "residual", rotation=90,
                    ha="right", va="center", fontsize=10, color="#0072B2")

        # N blocks: a bracket on the right from the first sublayer to the last LayerNorm.
        bx = left + bw + 0.25
        ax.plot([bx, bx + 0.12, bx + 0.12, bx], [1.3, 1.3, 6.17, 6.17], color="#666666",
                linewidth=1.2)
        ax.text(bx + 0.22, (1.3 + 6.17) / 2, "one encoder\nblock;\nan encoder\nstacks N",
                ha="left", va="center", fontsize=10, color="#333333")

        note = ax.text(width / 2, height - 0.1,
                       "Post-LN: LayerNorm after each residual addition, as in the 2017\n"
                       "Transformer, BERT and MiniLM (the model this book uses).\n"
                       "GPT-2 is pre-LN: LayerNorm before each sublayer.",
                       ha="center", va="top", fontsize=10, linespacing=1.3)
        note.set_gid("ln-label")
    return _check_width(fig)


# --------------------------------------------------------------------------- 5. cross


def cross_attention() -> Figure:
    """Encoder-decoder attention: where cross-attention's queries, keys and values come from.

    Left: the encoder, a stack of ``N`` blocks of unmasked self-attention and feed-forward
    layers, turns the ``S_enc`` source tokens into its output ``(S_enc, d_model)``. Right:
    one decoder block over the ``L_dec`` target tokens so far: causal (masked)
    self-attention, then cross-attention whose queries come from the decoder and whose keys
    and values come from the encoder's output, then a feed-forward network; each sublayer is
    followed by a residual addition and LayerNorm (post-LN, as in the 2017 Transformer).
    Beside the decoder: the causal mask (from :func:`attnbook.masks.causal_mask`) and the
    ``(L_dec, S_enc)`` grid of cross-attention weights, whose shape is read from
    :func:`attnbook.attention.attention` run on tensors of those sizes.

    Returns:
        The new figure (one Axes).
    """
    L_dec, S_enc, d = 4, 6, 8
    generator = torch.Generator().manual_seed(0)
    memory = torch.randn(S_enc, d, generator=generator, dtype=torch.float64)  # (S_enc, d)
    decoder_states = torch.randn(L_dec, d, generator=generator, dtype=torch.float64)
    _, cross_weights = attention(decoder_states, memory, memory)  # (L_dec, S_enc)
    mask = causal_mask(L_dec)  # (L_dec, L_dec)
    _, self_weights = attention(decoder_states, decoder_states, decoder_states, mask)
    rows, cols = cross_weights.shape
    blocked = int((~mask).sum())
    torch.testing.assert_close(self_weights.masked_fill(mask, 0.0),
                               torch.zeros_like(self_weights))

    width, height = 9.6, 7.9
    enc_x, enc_w = 0.35, 3.0
    dec_x, dec_w = 4.6, 3.0
    res_x = dec_x + dec_w + 0.25  # the decoder's residual lines run here
    grid_x = res_x + 0.45
    with mpl.rc_context(book_style()):
        fig = _new_figure(width, height)
        ax = _panel(fig, 0.0, 0.0, width, height)
        enc_c, dec_c = enc_x + enc_w / 2, dec_x + dec_w / 2

        ax.text(enc_c, height - 0.15, "Encoder", ha="center", va="top", fontsize=12,
                weight="bold")
        ax.text(dec_c, height - 0.15, "Decoder (one block of N)", ha="center", va="top",
                fontsize=12, weight="bold")

        # Encoder: source tokens, a stack of N blocks, the output.
        _box(ax, enc_x, 0.35, enc_w, 0.55, f"source tokens\n($S_{{enc}}$ = {cols})",
             face=_FILL_IO)
        stack_y, stack_h = 1.5, 2.7
        for offset in (0.16, 0.08):  # the blocks behind: a stack
            _box(ax, enc_x + offset, stack_y + offset, enc_w, stack_h, face="#F7F7F7",
                 edge="#999999")
        _box(ax, enc_x, stack_y, enc_w, stack_h, face="#FAFAFA")
        _box(ax, enc_x + 0.25, stack_y + 0.3, enc_w - 0.5, 0.75,
             "self-attention, no mask\n+ add & norm", face=_FILL_ATTENTION, fontsize=10.5)
        _box(ax, enc_x + 0.25, stack_y + 1.5, enc_w - 0.5, 0.7,
             "feed-forward\n+ add & norm", face=_FILL_FFN, fontsize=10.5)
        _arrow(ax, (enc_c, stack_y + 1.05), (enc_c, stack_y + 1.5), zorder=3)
        ax.text(enc_c, stack_y + stack_h - 0.12, "encoder block, $\\times$ N", ha="center",
                va="top", fontsize=10.5)
        _arrow(ax, (enc_c, 0.9), (enc_c, stack_y))
        out_y = stack_y + stack_h + 0.75
        _arrow(ax, (enc_c, stack_y + stack_h + 0.16), (enc_c, out_y))
        _box(ax, enc_x, out_y, enc_w, 0.65,
             f"encoder output: {cols} vectors\n$(S_{{enc}}, d_{{model}})$",
             face=_FILL_CROSS, fontsize=10.5)

        # Decoder: bottom to top.
        _box(ax, dec_x, 0.35, dec_w, 0.55, f"target tokens so far\n($L_{{dec}}$ = {rows})",
             face=_FILL_IO)
        layers = [  # (y, height, text, fill)
            (1.3, 0.7, "masked self-attention\n(causal)", _FILL_ATTENTION),
            (2.3, 0.4, "add & norm", _FILL_NORM),
            (3.2, 0.8, "cross-attention\nQ: decoder   K, V: encoder", _FILL_CROSS),
            (4.3, 0.4, "add & norm", _FILL_NORM),
            (5.2, 0.6, "feed-forward", _FILL_FFN),
            (6.1, 0.4, "add & norm", _FILL_NORM),
        ]
        for y, h, text, face in layers:
            _box(ax, dec_x, y, dec_w, h, text, face=face, fontsize=10.5,
                 gid="cross-box" if text.startswith("cross") else None)
        _arrow(ax, (dec_c, 0.9), (dec_c, layers[0][0]))
        for (y0, h0, *_), (y1, *_) in zip(layers, layers[1:], strict=False):
            _arrow(ax, (dec_c, y0 + h0), (dec_c, y1))
        top = layers[-1][0] + layers[-1][1]
        _arrow(ax, (dec_c, top), (dec_c, top + 0.4))
        ax.text(dec_c, top + 0.45, "to the next decoder block, then a linear layer\n"
                "and softmax: next-token probabilities", ha="center", va="bottom",
                fontsize=9.5)
        # Residual lines on the right of each sublayer.
        for i in (0, 2, 4):
            y, h = layers[i][0], layers[i][1]
            branch = y - 0.15
            norm_y = layers[i + 1][0] + layers[i + 1][1] / 2
            ax.plot([dec_c], [branch], "o", color=_LINE, markersize=3.5, zorder=3)
            _path_arrow(ax, [(dec_c, branch), (res_x, branch), (res_x, norm_y),
                             (dec_x + dec_w, norm_y)], color="#0072B2", linewidth=1.3)
        # Keys and values from the encoder into the cross-attention; queries from below.
        cross_y, cross_h = layers[2][0], layers[2][1]
        below = layers[1][0] + layers[1][1]
        ax.text(dec_c - 0.1, (below + cross_y) / 2, "Q", ha="right", va="center",
                fontsize=11, color="#0072B2", weight="bold")
        _path_arrow(ax, [(enc_x + enc_w, out_y + 0.32), (enc_x + enc_w + 0.5, out_y + 0.32),
                         (enc_x + enc_w + 0.5, cross_y + cross_h / 2),
                         (dec_x, cross_y + cross_h / 2)], color="#CC79A7", linewidth=2.2)
        ax.text(enc_x + enc_w + 0.58, (out_y + 0.32 + cross_y + cross_h / 2) / 2,
                "K, V", ha="left", va="center", fontsize=11, color="#A0527F", weight="bold")

        # Beside the decoder: the causal mask and the cross-attention weights' shape.
        cell = 0.19
        mask_top = layers[0][0] + layers[0][1] / 2 + rows * cell / 2
        allowed, hidden = "#9CC7E6", "#DDDDDD"
        _grid(ax, grid_x, mask_top, [[allowed if bool(mask[r, s]) else hidden
                                      for s in range(rows)] for r in range(rows)],
              w=cell, h=cell)
        ax.text(grid_x + rows * cell / 2, mask_top - rows * cell - 0.08,
                f"causal mask ({rows}, {rows}):\n{blocked} future keys\nblocked (grey)",
                ha="center", va="top", fontsize=9.5, linespacing=1.15)
        weights_top = cross_y + cross_h / 2 + rows * cell / 2
        _grid(ax, grid_x, weights_top, [["#E7B9D5"] * cols for _ in range(rows)], w=cell,
              h=cell)
        shape_label = ax.text(grid_x + cols * cell / 2, weights_top - rows * cell - 0.08,
                              f"weights $(L_{{dec}}, S_{{enc}})$\n= ({rows}, {cols})",
                              ha="center", va="top", fontsize=10)
        shape_label.set_gid("cross-shape")
        ax.text(grid_x + cols * cell / 2, weights_top + 0.08,
                "one row per\ndecoder token", ha="center", va="bottom", fontsize=9)
    return _check_width(fig)


# --------------------------------------------------------------------------- 6. rope_rotation


def _arc(ax: Axes, start: float, end: float, radius: float, colour: str) -> None:
    angles = np.linspace(start, end, 40)
    ax.plot(radius * np.cos(angles), radius * np.sin(angles), color=colour, linewidth=1.4)


def rope_rotation(m: int = 2, n: int = 1, shift: int = 2, theta: float = 0.5) -> Figure:
    """Rotary positions in two dimensions, in two panels.

    Left: a query ``q`` at position ``m`` and a key ``k`` at position ``n`` (faint: before
    rotation) turn by the angles ``m theta`` and ``n theta``. Right: both positions moved
    by ``shift``: each vector turns further, the angle between them, ``(m - n) theta``,
    stays, and so does their dot product. The rotated vectors and the printed scores come
    from :func:`attnbook.positions.rope`.

    The panels share one scale and their y limits (the origins line up), and are cropped to
    what they draw. Each label takes the first of a few places by its arrow tip or its arc
    that keeps clear of every arrow, arc and label already placed (and, if one can, of the
    grey axes).

    Args:
        m, n: the positions of the query and the key, from 0 to 4.
        shift: how far both move in the right panel, from 0 to 4.
        theta: the angle per position, in radians, between 0.05 and 0.6.

    Returns:
        The new figure (two Axes).
    """
    m = _require_int("m", m, 0, 4)
    n = _require_int("n", n, 0, 4)
    shift = _require_int("shift", shift, 0, 4)
    theta = float(theta)
    if not 0.05 <= theta <= 0.6:
        raise ValueError(f"theta must be between 0.05 and 0.6, got {theta}")
    q = torch.tensor([[1.0, 0.15]], dtype=torch.float64)  # (1, 2)
    k = torch.tensor([[0.75, -0.25]], dtype=torch.float64)  # (1, 2)
    def turn(x: torch.Tensor, position: int) -> torch.Tensor:
        """Rotate the 2-D ``x`` by ``position * theta`` with the package's ``rope``: ``x``
        is pair 1 (features 1 and 3, half-split) of a 4-feature vector whose base makes
        that pair's angle per position ``base ** (-2/4) = theta``."""
        wide = torch.zeros(1, 4, dtype=torch.float64)
        wide[:, [1, 3]] = x
        turned = rope(wide, torch.tensor([position]), base=theta ** -2)  # (1, 4)
        return turned[:, [1, 3]]  # (1, 2)

    panels = []
    for label, (mq, nk) in (("positions m, n", (m, n)),
                            (f"both shifted by {shift}", (m + shift, n + shift))):
        q_rot, k_rot = turn(q, mq), turn(k, nk)
        panels.append((label, mq, nk, q_rot[0], k_rot[0], float(q_rot[0] @ k_rot[0])))
    # The two scores agree up to rounding error; both panels print the left one, so a value
    # on a rounding boundary cannot print as two different numbers.
    if abs(panels[0][-1] - panels[1][-1]) > 1e-12:  # pragma: no cover - rope guarantees it
        raise AssertionError("rotating both vectors changed their dot product")
    shown_score = panels[0][-1]
    q_angle0 = math.atan2(float(q[0, 1]), float(q[0, 0]))
    k_angle0 = math.atan2(float(k[0, 1]), float(k[0, 0]))
    radii = {"q": 0.42, "k": 0.28}  # of the arcs
    width = 8.4  # inches; the height follows from the limits

    def arc_points(start: float, end: float, radius: float) -> np.ndarray:
        angles = np.linspace(start, end, 40)
        return radius * np.stack([np.cos(angles), np.sin(angles)], 1)  # (40, 2)

    def segment(tip: np.ndarray) -> np.ndarray:
        return np.linspace(0.0, 1.0, 60)[:, None] * tip  # (60, 2): origin to tip

    def gap(centre: np.ndarray, half: np.ndarray, points: np.ndarray) -> float:
        """The distance from the box ``centre +- half`` to the nearest of ``points``."""
        outside = np.maximum(np.abs(points - centre) - half, 0.0)
        return float(np.hypot(outside[:, 0], outside[:, 1]).min(initial=np.inf))

    def away(origin: np.ndarray, direction: np.ndarray, half: np.ndarray,
             distance: float) -> np.ndarray:
        """The centre, along the unit ``direction`` from ``origin``, of the nearest box of
        half-sizes ``half`` whose every point is ``distance`` or more from ``origin``."""
        low, high = 0.0, 4.0
        for _ in range(40):  # the box's distance from the origin grows with the step
            step = (low + high) / 2
            if gap(step * direction, half, np.zeros((1, 2))) < distance:
                low = step
            else:
                high = step
        return origin + high * direction

    with mpl.rc_context(book_style()):
        fig, axes = plt.subplots(1, 2, figsize=(width, 4.2))
        for ax, (label, mq, nk, q_rot, k_rot, _) in zip(axes, panels, strict=True):
            ax.set_aspect("equal")
            ax.set_axis_off()
            ax.axhline(0, color="#BBBBBB", linewidth=0.8, zorder=0)
            ax.axvline(0, color="#BBBBBB", linewidth=0.8, zorder=0)
            for vec, colour in ((q[0], OKABE_ITO[1]), (k[0], OKABE_ITO[2])):
                ax.annotate("", xy=tuple(vec.tolist()), xytext=(0, 0),
                            arrowprops={"arrowstyle": "-|>", "color": colour, "alpha": 0.3,
                                        "linewidth": 1.5})
            for vec, colour, name in ((q_rot, OKABE_ITO[1], "q"), (k_rot, OKABE_ITO[2], "k")):
                ax.annotate("", xy=tuple(vec.tolist()), xytext=(0, 0),
                            arrowprops={"arrowstyle": "-|>", "color": colour,
                                        "linewidth": 2.2})
                ax.text(0, 0, name, color=colour, fontsize=13, weight="bold", ha="center",
                        va="center", gid=f"rope-label-{name}")
            _arc(ax, q_angle0, q_angle0 + mq * theta, radii["q"], OKABE_ITO[1])
            _arc(ax, k_angle0, k_angle0 + nk * theta, radii["k"], OKABE_ITO[2])
            for name, colour in (("m", OKABE_ITO[1]), ("n", OKABE_ITO[2])):
                ax.text(0, 0, f"{name}$\\theta$", color=colour, fontsize=11, ha="center",
                        va="center", gid=f"rope-label-{name}")
            title = ax.set_title(f"{label}: m = {mq}, n = {nk}\n"
                                 f"m $-$ n = {mq - nk},  q$\\cdot$k = {shown_score:.3f}",
                                 fontsize=11)
            title.set_gid(f"rope-score-{mq}-{nk}")
        renderer = fig.canvas.get_renderer()
        sizes = {t.get_gid(): np.array(t.get_window_extent(renderer).size) / fig.dpi
                 for t in axes[0].texts if t.get_gid()}  # inches, the same in both panels
        title_width = max(ax.title.get_window_extent(renderer).width for ax in axes) / fig.dpi

        def place(mq: int, nk: int, q_rot: torch.Tensor, k_rot: torch.Tensor, scale: float
                  ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
            """One panel's label centres, and the corners of the box around what it draws,
            with ``scale`` inches to a unit."""
            point = 1 / 72 / scale  # one point in data units
            tips = {"q": q_rot.numpy(), "k": k_rot.numpy()}
            arcs = {"m": (q_angle0, q_angle0 + mq * theta, radii["q"]),
                    "n": (k_angle0, k_angle0 + nk * theta, radii["k"])}
            drawn_ink = np.concatenate(
                [segment(tip) for tip in (*tips.values(), q[0].numpy(), k[0].numpy())]
                + [arc_points(*arc) for arc in arcs.values()])  # (N, 2)
            along_axis = np.linspace(-2, 2, 400)
            axis_lines = np.concatenate([np.stack([along_axis, 0 * along_axis], 1),
                                         np.stack([0 * along_axis, along_axis], 1)])
            centres: dict[str, np.ndarray] = {}
            boxes: list[tuple[np.ndarray, np.ndarray]] = []

            def clearance(centre: np.ndarray, half: np.ndarray) -> float:
                around = [np.maximum(np.abs(centre - c) - half - h, 0.0) for c, h in boxes]
                return min([gap(centre, half, drawn_ink)]
                           + [float(np.hypot(*d)) for d in around])

            def candidates(name: str, half: np.ndarray) -> list[np.ndarray]:
                if name in tips:  # beyond the tip, then turning to either side of it
                    tip = tips[name]
                    along = tip / np.linalg.norm(tip)
                    out = []
                    for turn_by in (0.0, 0.6, -0.6, 1.2, -1.2, 1.8, -1.8, 2.4, -2.4):
                        c, s = math.cos(turn_by), math.sin(turn_by)
                        d = np.array([c * along[0] - s * along[1],
                                      s * along[0] + c * along[1]])
                        out += [away(tip, d, half, step * point) for step in (4, 9)]
                    return out
                start, end, radius = arcs[name]
                # Outside the arc, by its middle, then nearer its ends, then beyond them (a
                # short arc leaves no room between its arrows).
                sign = 1.0 if end >= start else -1.0
                angles = [start + f * (end - start) for f in (0.5, 0.65, 0.35, 0.8, 0.2)]
                angles += [a for turn_by in (0.3, 0.5, 0.75)
                           for a in (end + sign * turn_by, start - sign * turn_by)]
                return [away(np.zeros(2), np.array([math.cos(a), math.sin(a)]), half,
                             radius + step * point)
                        for step in (5, 12, 20) for a in angles]

            for name in ("q", "k", "m", "n"):
                half = sizes[f"rope-label-{name}"] / scale / 2
                options = candidates(name, half)
                clear = [c for c in options if clearance(c, half) >= 4 * point]
                # Of the first three places clear of the drawing, one off the grey axes.
                off_axes = [c for c in clear[:3] if gap(c, half, axis_lines) >= 2 * point]
                best = (off_axes or clear
                        or [max(options, key=lambda c, half=half: clearance(c, half))])[0]
                centres[name] = best
                boxes.append((best, half))
            corners = np.concatenate([drawn_ink] + [np.stack([c - h, c + h])
                                                    for c, h in boxes])
            return centres, corners.min(0) - 4 * point, corners.max(0) + 4 * point

        # The layout, in inches: 0.1 around the figure, 0.3 between the panels, the titles
        # above them; the panels' widths share what is left, so one unit of the drawing is
        # ``scale`` inches, which sets the size of each label in units, so the limits.
        title_height = max(ax.title.get_window_extent(renderer).height for ax in axes)
        edge, between, above = 0.1, 0.3, title_height / fig.dpi + 6 / 72 + 0.1
        scale = 1.6  # a first guess
        for _ in range(4):
            placed = [place(mq, nk, q_rot, k_rot, scale)
                      for _, mq, nk, q_rot, k_rot, _ in panels]
            spans = [max(hi[0] - lo[0], (title_width + 0.1) / scale) for _, lo, hi in placed]
            scale = (width - 2 * edge - between) / sum(spans)
        low = np.minimum(placed[0][1], placed[1][1])
        high = np.maximum(placed[0][2], placed[1][2])
        height = scale * (high[1] - low[1]) + edge + above
        fig.set_size_inches(width, height)
        axes[0].get_gridspec().set_width_ratios(spans)
        fig.subplots_adjust(left=edge / width, right=1 - edge / width, bottom=edge / height,
                            top=1 - above / height, wspace=between / (scale * sum(spans) / 2))
        for ax, (_, lo, hi), span in zip(axes, placed, spans, strict=True):
            middle = (lo[0] + hi[0]) / 2
            ax.set_xlim(middle - span / 2, middle + span / 2)
            ax.set_ylim(low[1], high[1])
        for ax, (centres, _, _) in zip(axes, placed, strict=True):
            for text in ax.texts:
                if text.get_gid():
                    text.set_position(tuple(centres[text.get_gid().rsplit("-", 1)[1]]))
    return _check_width(fig)


# --------------------------------------------------------------------------- 7. data flow


def attention_data_flow(length: int = 4, d_model: int = 8, d_k: int = 4, d_v: int = 4
                        ) -> Figure:
    """The matrix data flow of one self-attention layer, every tensor with its shape.

    Tensors are boxes; operations label the arrows. From left to right: the token vectors
    ``X`` ``(L, d_model)``; three projections ``W_q``, ``W_k`` ``(d_model, d_k)`` and ``W_v``
    ``(d_model, d_v)``; the queries ``Q`` ``(L, d_k)``, keys ``K`` ``(S, d_k)`` and values
    ``V`` ``(S, d_v)``; the scores ``Q K^T`` ``(L, S)``; the factor ``1/sqrt(d_k)`` and a
    softmax over each row, which give the weights ``A`` ``(L, S)``; the output ``A V``
    ``(L, d_v)``. A note says that ``S = L`` here, because the keys and values come from the
    same ``X`` as the queries (self-attention).

    Every shape printed is read from real tensors of the given sizes: a seeded input and
    seeded projections, :func:`attnbook.attention.attention_scores` for the scores and
    :func:`attnbook.attention.attention` (with its default scale ``1/sqrt(d_k)``, whose value
    is printed too) for the weights and the output. The shape texts carry gids:
    ``shape-x``, ``shape-wq``, ``shape-wk``, ``shape-wv``, ``shape-q``, ``shape-k``,
    ``shape-v``, ``shape-scores``, ``shape-weights`` and ``shape-output``; the scale's label
    is ``scale-label``.

    Args:
        length: the sequence length ``L`` (so also ``S``), from 1 to 512.
        d_model: the width of a token vector, from 1 to 512.
        d_k: the width of a query and of a key, from 1 to 512.
        d_v: the width of a value, and so of the output, from 1 to 512.

    Returns:
        The new figure (one Axes).

    Raises:
        TypeError: if an argument is not an int.
        ValueError: if an argument is outside 1..512.
    """
    L = _require_int("length", length, 1, 512)
    D = _require_int("d_model", d_model, 1, 512)
    E = _require_int("d_k", d_k, 1, 512)
    Ev = _require_int("d_v", d_v, 1, 512)

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(L, D, generator=generator, dtype=torch.float64)  # (L, d_model)
    w_q = torch.randn(D, E, generator=generator, dtype=torch.float64)  # (d_model, d_k)
    w_k = torch.randn(D, E, generator=generator, dtype=torch.float64)  # (d_model, d_k)
    w_v = torch.randn(D, Ev, generator=generator, dtype=torch.float64)  # (d_model, d_v)
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (L, d_k), (S, d_k), (S, d_v)
    scores = attention_scores(q, k, 1.0)  # (L, S)
    factor = scale_factor(None, E)
    output, weights = attention(q, k, v)  # (L, d_v), (L, S); scale 1/sqrt(d_k)
    torch.testing.assert_close(weights, masked_softmax(scores * factor))

    box_w, box_h = 1.2, 0.95
    gap_proj, gap_short, gap_ops = 1.5, 0.5, 1.25  # horizontal room for the arrows
    x_x = 0.15
    x_qkv = x_x + box_w + gap_proj
    x_scores = x_qkv + box_w + gap_short
    x_weights = x_scores + box_w + gap_ops
    x_out = x_weights + box_w + gap_short
    width = x_out + box_w + 0.15
    y_q, y_k, y_v = 3.35, 2.1, 0.85  # centres of the three rows
    y_scores = (y_q + y_k) / 2
    y_out = y_v + 0.45 + box_h / 2  # room for the arrow from V below it
    height = 4.45

    with mpl.rc_context(book_style()):
        fig = _new_figure(width, height)
        ax = _panel(fig, 0.0, 0.0, width, height)

        def tensor_box(x: float, y_mid: float, name: str, symbols: str,
                       tensor: torch.Tensor, face: str, gid: str) -> None:
            """A box: the tensor's name on top, its shape (read from ``tensor``) below."""
            _box(ax, x, y_mid - box_h / 2, box_w, box_h, face=face)
            ax.text(x + box_w / 2, y_mid + 0.2, name, ha="center", va="center",
                    fontsize=11, color=_INK, zorder=3)
            shape = ax.text(x + box_w / 2, y_mid - 0.17, _shape_text(symbols, tensor),
                            ha="center", va="center", fontsize=9.5, color="#333333",
                            family="monospace", linespacing=1.15, zorder=3)
            shape.set_gid(gid)

        def projection(y_row: float, symbol: str, symbols: str, matrix: torch.Tensor,
                       gid: str) -> None:
            """The arrow from X into one row, labelled with its projection and shape."""
            start, split, end = x_x + box_w, x_x + box_w + 0.22, x_qkv
            if y_row == y_k:
                _arrow(ax, (start, y_row), (end, y_row))
            else:
                _path_arrow(ax, [(start, y_k), (split, y_k), (split, y_row), (end, y_row)])
            mid = (split + end) / 2
            ax.text(mid, y_row + 0.07, f"$\\times\\,{symbol}$", ha="center", va="bottom",
                    fontsize=11)
            shape = ax.text(mid, y_row - 0.07, f"{symbols}\n= {tuple(matrix.shape)}",
                            ha="center", va="top", fontsize=9, color="#333333",
                            family="monospace", linespacing=1.1)
            shape.set_gid(gid)

        tensor_box(x_x, y_k, "tokens $X$", "(L, d_model)", x, _FILL_IO, "shape-x")
        projection(y_q, "W_q", "(d_model, d_k)", w_q, "shape-wq")
        projection(y_k, "W_k", "(d_model, d_k)", w_k, "shape-wk")
        projection(y_v, "W_v", "(d_model, d_v)", w_v, "shape-wv")
        tensor_box(x_qkv, y_q, "queries $Q$", "(L, d_k)", q, _FILL_ATTENTION, "shape-q")
        tensor_box(x_qkv, y_k, "keys $K$", "(S, d_k)", k, _FILL_NORM, "shape-k")
        tensor_box(x_qkv, y_v, "values $V$", "(S, d_v)", v, _FILL_FFN, "shape-v")

        # Q and K meet in the scores; the factor and the softmax turn them into weights.
        _arrow(ax, (x_qkv + box_w, y_q), (x_scores, y_scores + 0.2))
        _arrow(ax, (x_qkv + box_w, y_k), (x_scores, y_scores - 0.2))
        tensor_box(x_scores, y_scores, "scores $QK^{\\top}$", "(L, S)", scores, _SOFT,
                   "shape-scores")
        _arrow(ax, (x_scores + box_w, y_scores), (x_weights, y_scores))
        mid = x_scores + box_w + gap_ops / 2
        scale_label = ax.text(mid, y_scores + 0.07,
                              f"$\\times\\,1/\\sqrt{{d_k}}$\n= {factor:.3g}", ha="center",
                              va="bottom", fontsize=10.5, linespacing=1.3)
        scale_label.set_gid("scale-label")
        ax.text(mid, y_scores - 0.07, "softmax of\neach row", ha="center", va="top",
                fontsize=10.5, linespacing=1.2)
        tensor_box(x_weights, y_scores, "weights $A$", "(L, S)", weights, _FILL_CROSS,
                   "shape-weights")

        # A and V meet in the output: each output row is a weighted average of values.
        out_c = x_out + box_w / 2
        _path_arrow(ax, [(x_weights + box_w, y_scores), (out_c, y_scores),
                         (out_c, y_out + box_h / 2)])
        _path_arrow(ax, [(x_qkv + box_w, y_v), (out_c, y_v), (out_c, y_out - box_h / 2)])
        tensor_box(x_out, y_out, "output $AV$", "(L, d_v)", output, _FILL_IO,
                   "shape-output")
        ax.text((x_scores + x_weights + box_w) / 2, y_v + 0.1,
                "$V$: each output row is a weighted\naverage of the rows of $V$",
                ha="center", va="bottom", fontsize=9.5, color="#333333", linespacing=1.2)
        ax.text(width / 2, height - 0.12,
                "self-attention: Q, K and V all come from X, so S = L",
                ha="center", va="top", fontsize=10, color="#333333")
    return _check_width(fig)


# --------------------------------------------------------------------------- 8. tiles

_FILL_FAST = OKABE_ITO[1]  # orange: in fast memory at this step
_FILL_DONE = "#E0E0E0"  # light grey, hatched: computed, used and discarded
_MAX_TILES = 6


def tiled_attention(L: int = 8, S: int = 10, block_size: int = 2,
                    step: int | None = None) -> Figure:
    """The ``L x S`` scores cut into tiles, the loop order, and fast memory at one step.

    Left: the grid of scores, one small cell per score, cut by thick lines into tiles of
    ``block_size x block_size`` (the last row and column of tiles are smaller when the
    block size does not divide ``L`` or ``S``). The query tiles ``Q_I`` stand on the left,
    the key/value tiles ``K_J, V_J`` on top. Each tile prints its visit number: the order
    of :func:`attnbook.efficient.blockwise_attention`, query tiles in the outer loop and
    key/value tiles in the inner loop (its own ``_blocks``, nested the same way). At visit
    ``step`` the current tile of scores, its query tile and its key/value tile are orange:
    they are in fast memory. Tiles visited earlier are grey and hatched (computed, used,
    discarded: never written to slow memory); later ones are white.

    Right: what the fast memory holds at that step and what the slow memory holds, with
    the traffic between them (the model of :func:`attnbook.efficient.memory_traffic`).

    gids: each score tile's patch is ``tile-I-J`` and its number ``visit-I-J``; the strips'
    patches are ``q-tile-I`` and ``k-tile-J``; the step's caption is ``step``.

    Args:
        L: the number of queries, from 2 to 16.
        S: the number of keys, from 2 to 16.
        block_size: queries and keys per tile, from 1 to 8; at most 6 tiles per side.
        step: the visit shown, from 1 to the number of tiles; ``None`` means the middle of
            the second row of tiles (of the first, if there is one row).

    Returns:
        The new figure, with two Axes (the tiles left, the memories right).

    Raises:
        TypeError: if an argument is not an int.
        ValueError: if an argument is out of range, or the tiles are too many to draw.
    """
    L = _require_int("L", L, 2, 16)
    S = _require_int("S", S, 2, 16)
    T = _require_int("block_size", block_size, 1, 8)
    row_tiles, col_tiles = _blocks(L, T), _blocks(S, T)
    for name, n, tiles in (("L", L, row_tiles), ("S", S, col_tiles)):
        if len(tiles) > _MAX_TILES:
            raise ValueError(f"block_size={T} cuts {name}={n} into {len(tiles)} tiles; at "
                             f"most {_MAX_TILES} per side for a legible drawing")
    # The visiting order of blockwise attention: query tiles outside, key tiles inside.
    order = [(i, j) for i, _ in enumerate(row_tiles) for j, _ in enumerate(col_tiles)]
    visit = {tile: n + 1 for n, tile in enumerate(order)}
    if step is None:
        first_row = 0 if len(row_tiles) == 1 else 1
        step = visit[first_row, (len(col_tiles) - 1) // 2]
    step = _require_int("step", step, 1, len(order))
    now_i, now_j = order[step - 1]

    cell = min(0.36, 3.6 / max(L, S))
    grid_w, grid_h = S * cell, L * cell
    strip = 0.42  # thickness of the Q and K/V strips
    # Room for the loop labels and the strips on the left and above, the step's caption
    # and the legend below; at least enough for the memories on the right and the legend.
    needed_w, needed_h = 1.5 + grid_w, 0.75 + grid_h + 0.12 + strip + 0.75
    left_w, height = max(needed_w, 5.2), max(needed_h, 3.9)
    x_grid = 1.15 + (left_w - needed_w) / 2  # lower-left corner of the score grid
    y_grid = 0.75 + (height - needed_h) / 2
    right_w = 4.1
    top = y_grid + grid_h  # the grid's top edge

    with mpl.rc_context(book_style()):
        fig = _new_figure(left_w + right_w, height)
        ax = _panel(fig, 0.0, 0.0, left_w, height)
        mem = _panel(fig, left_w, 0.0, right_w, height)

        def tile_patch(x: float, y: float, w: float, h: float, face: str, gid: str,
                       hatch: str | None = None) -> None:
            patch = Rectangle((x, y), w, h, facecolor=face, edgecolor=_INK, linewidth=1.6,
                              hatch=hatch, zorder=3)
            patch.set_gid(gid)
            _add(ax, patch)

        # The tiles, then the grid of scores (one thin cell per score) over their fills.
        for (i, j), n in visit.items():
            rows, cols = row_tiles[i], col_tiles[j]
            x0, w = x_grid + cols.start * cell, (min(cols.stop, S) - cols.start) * cell
            y1, h = top - rows.start * cell, (min(rows.stop, L) - rows.start) * cell
            now, done = (i, j) == (now_i, now_j), n < step
            face = _FILL_FAST if now else _FILL_DONE if done else "white"
            tile_patch(x0, y1 - h, w, h, face, f"tile-{i}-{j}", "//" if done else None)
            # The tile's border again, above the thin score cells drawn below.
            _add(ax, Rectangle((x0, y1 - h), w, h, facecolor="none", edgecolor=_INK,
                               linewidth=1.6, zorder=4))
            label = ax.text(x0 + w / 2, y1 - h / 2, str(n), ha="center", va="center",
                            fontsize=10 if cell * T >= 0.5 else 9, color=_INK,
                            weight="bold" if now else "normal", zorder=5,
                            # a patch of the tile's face, so that neither the hatching
                            # nor the score grid's lines run into the digits
                            bbox={"boxstyle": "round,pad=0.3", "facecolor": face,
                                  "edgecolor": "none"})
            label.set_gid(f"visit-{i}-{j}")
        for r in range(L):
            for c in range(S):
                _add(ax, Rectangle((x_grid + c * cell, top - (r + 1) * cell), cell, cell,
                                   facecolor="none", edgecolor="#888888", linewidth=0.4,
                                   zorder=3.5))
        # The strips: query tiles on the left, key/value tiles on top.
        for i, rows in enumerate(row_tiles):
            y1, h = top - rows.start * cell, (min(rows.stop, L) - rows.start) * cell
            face = _FILL_FAST if i == now_i else "white"
            tile_patch(x_grid - 0.1 - strip, y1 - h, strip, h, face, f"q-tile-{i}")
            if h >= 0.3:
                ax.text(x_grid - 0.1 - strip / 2, y1 - h / 2, f"$Q_{{{i}}}$", ha="center",
                        va="center", fontsize=9.5, zorder=5)
        for j, cols in enumerate(col_tiles):
            x0, w = x_grid + cols.start * cell, (min(cols.stop, S) - cols.start) * cell
            face = _FILL_FAST if j == now_j else "white"
            tile_patch(x0, top + 0.1, w, strip, face, f"k-tile-{j}")
            if w >= 0.45:
                ax.text(x0 + w / 2, top + 0.1 + strip / 2, f"$K_{{{j}}}V_{{{j}}}$",
                        ha="center", va="center", fontsize=9, zorder=5)
        # The loops: inner along a row of tiles, outer down the query tiles.
        y_inner = top + 0.1 + strip + 0.22
        _arrow(ax, (x_grid, y_inner), (x_grid + grid_w, y_inner))
        ax.text(x_grid + grid_w / 2, y_inner + 0.06, "inner loop: key/value tiles",
                ha="center", va="bottom", fontsize=10)
        x_outer = x_grid - 0.1 - strip - 0.2
        _arrow(ax, (x_outer, top), (x_outer, y_grid))
        ax.text(x_outer - 0.06, y_grid + grid_h / 2, "outer loop: query tiles",
                ha="right", va="center", rotation=90, fontsize=10)
        caption = ax.text(x_grid + grid_w / 2, y_grid - 0.12,
                          f"step {step} of {len(order)}: scores of tile ({now_i}, {now_j})",
                          ha="center", va="top", fontsize=10)
        caption.set_gid("step")
        # A legend for the three fills.
        legend_y = 0.14
        for k, (face, hatch, text) in enumerate((
                (_FILL_FAST, None, "in fast memory now"),
                (_FILL_DONE, "//", "done, discarded"),
                ("white", None, "still to come"))):
            x_key = 0.2 + k * 1.7
            _add(ax, Rectangle((x_key, legend_y), 0.22, 0.18, facecolor=face,
                               edgecolor=_INK, linewidth=1, hatch=hatch, zorder=3))
            ax.text(x_key + 0.3, legend_y + 0.09, text, ha="left", va="center",
                    fontsize=9)

        # Right: the two memories and the traffic between them.
        box_x, box_w = 0.25, right_w - 0.45
        fast_h, slow_h = 1.3, 1.05
        fast_y = height - 0.25 - fast_h
        slow_y = 0.3
        _box(mem, box_x, fast_y, box_w, fast_h, face=_tint(_FILL_FAST, 0.35))
        mem.text(box_x + 0.12, fast_y + fast_h - 0.1, "fast memory: on chip, M numbers",
                 ha="left", va="top", fontsize=10.5, weight="bold", zorder=3)
        mem.text(box_x + 0.12, fast_y + fast_h - 0.42,
                 f"$Q_{{{now_i}}}$ and its running $m$, $r$, $u$\n"
                 f"$K_{{{now_j}}}$, $V_{{{now_j}}}$\n"
                 f"the scores of tile ({now_i}, {now_j})",
                 ha="left", va="top", fontsize=10, linespacing=1.35, zorder=3)
        _box(mem, box_x, slow_y, box_w, slow_h, face=_SOFT)
        mem.text(box_x + 0.12, slow_y + slow_h - 0.1, "slow memory: large, off chip",
                 ha="left", va="top", fontsize=10.5, weight="bold", zorder=3)
        mem.text(box_x + 0.12, slow_y + slow_h - 0.42,
                 "$Q$, $K$, $V$; the output $O$ and $\\lambda$\nno $L \\times S$ matrix",
                 ha="left", va="top", fontsize=10, linespacing=1.35, zorder=3)
        x_up, x_down = box_x + 0.5, box_x + box_w - 0.5
        _arrow(mem, (x_up, slow_y + slow_h), (x_up, fast_y))
        mem.text(x_up + 0.08, (slow_y + slow_h + fast_y) / 2,
                 "read $K_J$, $V_J$\nevery step;\n$Q_I$ once a row", ha="left",
                 va="center", fontsize=9.5, linespacing=1.3)
        _arrow(mem, (x_down, fast_y), (x_down, slow_y + slow_h))
        mem.text(x_down - 0.08, (slow_y + slow_h + fast_y) / 2,
                 "write $O_I$, $\\lambda_I$\nafter a row", ha="right", va="center",
                 fontsize=9.5)
    return _check_width(fig)


# --------------------------------------------------------------------------- 9. induction

_MAX_TOKEN_ID = 99  # two digits fit a cell


def _induction_run(tokens: Sequence[int], query: int) -> dict[str, object]:
    """An idealised two-layer induction circuit, run with the package's attention.

    Tokens are one-hot vectors. Layer 0 (the previous-token head) lets query ``i`` see keys
    ``0 .. i - 1`` and prefers key ``i - 1`` by position, so it writes the previous token
    into position ``i``. Layer 1 (the induction head): the query is the current token, the
    key is layer 0's output (K-composition), the value is the token itself.
    """
    batch = repeat_twice(torch.tensor([list(tokens)]))  # inputs and targets (1, 2T - 1)
    inputs = batch.inputs[0]  # (n,), n = 2T - 1
    n, T = inputs.shape[0], len(tokens)
    sharp = 30.0  # a large scale: each softmax is one-hot up to exp(-30)
    x = F.one_hot(inputs, _MAX_TOKEN_ID + 1).double()  # (n, vocab)
    where = torch.eye(n, dtype=torch.float64)  # (n, n): one-hot positions
    # Layer 0: query i asks for position i - 1 among the keys before it.
    prev_out, prev_w = attention(where.roll(-1, dims=1), where, x,
                                 causal_mask(n, offset=-1), scale=sharp)  # (n, vocab), (n, n)
    # Layer 1: query = my token, key = the token before the key (from layer 0), value = token.
    out, ind_w = attention(x, prev_out, x, causal_mask(n), scale=sharp)  # (n, vocab), (n, n)
    # The drawing relies on a clean circuit: check it with the package's head scores.
    if float(previous_token_score(prev_w)) < 0.99 or float(
            prefix_matching_score(ind_w, T)) < 0.99:  # pragma: no cover - distinct tokens
        raise AssertionError("the idealised induction circuit did not form")
    has_prev = prev_w.sum(-1) > 0.5  # (n,): position 0 has nothing before it
    return {
        "sequence": torch.cat([inputs, batch.targets[0, -1:]]).tolist(),  # 2T tokens
        "prev": [int(r.argmax()) if keep else None
                 for r, keep in zip(prev_out, has_prev.tolist(), strict=True)],
        "attended": int(ind_w[query].argmax()),
        "predicted": int(out[query].argmax()),
        "target": int(batch.targets[0, query]),
    }


def induction_circuit(tokens: Sequence[int] = (7, 3, 9, 2, 5),
                      query: int | None = None) -> Figure:
    """The induction circuit on a copy of random tokens repeated twice.

    Top: the ``2T`` tokens and their positions, the two copies bracketed, and the pattern
    ``A B ... A -> B`` lettered over its four cells (``A`` is the query's token, ``B`` the
    token after its first occurrence). Keys after the query are greyed: the query cannot
    see them. Middle, layer 0, the previous-token head: each position ``j`` attends to
    ``j - 1`` (the arcs) and writes "prev <token j - 1>" into its vector; the tag of the
    position the induction head will find is highlighted. Bottom, layer 1, the induction
    head: the query at ``query`` asks "who was preceded by A?", matches the key of the
    position whose tag is ``A`` (K-composition: that key reads layer 0's output), and the
    value there, token ``B``, is copied into the prediction.

    Every printed token, tag, position and prediction comes from running an idealised
    two-layer circuit with the package: :func:`attnbook.circuits.repeat_twice` for the
    data, :func:`attnbook.attention.attention` with :func:`attnbook.masks.causal_mask` for
    both heads (one-hot tokens and positions, a large scale), checked with
    :func:`attnbook.circuits.previous_token_score` and
    :func:`attnbook.circuits.prefix_matching_score`. gids: ``token-j``, ``position-j``,
    ``prev-j`` (the tag, ``prev`` then the token), ``pattern``, ``query`` (the query's
    box), ``attended`` (the key found) and ``predicted``.

    Args:
        tokens: one copy of ``T`` distinct token ids from 0 to 99, ``2 <= T <= 8``.
        query: the query's position, from ``T`` to ``2T - 2``; ``None`` means ``T``, the
            first token of the second copy.

    Returns:
        The new figure (one Axes).

    Raises:
        TypeError: ``tokens`` not a sequence of ints, ``query`` not an int.
        ValueError: ``T`` outside 2..8, a repeated token or one outside 0..99, ``query``
            outside ``T .. 2T - 2``.
    """
    if isinstance(tokens, str | bytes) or not isinstance(tokens, Sequence):
        raise TypeError(f"tokens must be a sequence of ints, got {type(tokens).__name__}")
    T = _require_int("len(tokens)", len(tokens), 2, 8)
    ids = [_require_int(f"tokens[{i}]", t, 0, _MAX_TOKEN_ID) for i, t in enumerate(tokens)]
    if len(set(ids)) != T:
        raise ValueError(f"tokens must be distinct (a repeated token makes its earlier "
                         f"occurrence ambiguous), got {ids}")
    query = _require_int("query", T if query is None else query, T, 2 * T - 2)
    run = _induction_run(ids, query)
    seq, prev, key = run["sequence"], run["prev"], run["attended"]
    a_tok, b_tok = seq[query], run["predicted"]

    n = 2 * T
    width, height, left = 7.2, 5.4, 1.45  # left: the column of row labels
    cw = min(0.56, (width - left - 0.15) / n)  # cell width
    x0 = left + 0.05  # the first cell's left edge

    def cx(j: int) -> float:
        return x0 + (j + 0.5) * cw

    y_cell, ch = height - 1.55, 0.42
    y_tag, th = y_cell - 1.1, 0.46  # layer 0's tags
    qw, qh = 2.1, 0.5  # layer 1's query box
    y_query = y_tag - 1.15 - qh
    letters = {key - 1: "A", key: "B", query: "A", query + 1: "B"}
    fills = {"A": _FILL_ATTENTION, "B": _FILL_FFN}

    with mpl.rc_context(book_style()):
        fig = _new_figure(width, height)
        ax = _panel(fig, 0.0, 0.0, width, height)
        ax.text(width / 2, height - 0.12,
                f"pattern A B \u2026 A \u2192 B, here {a_tok} {seq[key]} \u2026 {a_tok} "
                f"\u2192 {b_tok}", ha="center", va="top", fontsize=11, weight="bold",
                gid="pattern")
        for start, label in ((0, "first copy"), (T, "second copy")):
            y_br = y_cell + ch + 0.42
            xa, xb = x0 + start * cw + 0.04, x0 + (start + T) * cw - 0.04
            ax.plot([xa, xa, xb, xb], [y_br - 0.07, y_br, y_br, y_br - 0.07], color=_EDGE,
                    linewidth=1)
            ax.text((xa + xb) / 2, y_br + 0.05, label, ha="center", va="bottom",
                    fontsize=9.5, color="#333333")
        for label, y in (("token", y_cell + ch / 2), ("position", y_cell - 0.17)):
            ax.text(left - 0.1, y, label, ha="right", va="center", fontsize=9.5,
                    color="#333333")
        for j, token in enumerate(seq):
            letter, seen = letters.get(j), j <= query
            _add(ax, Rectangle((x0 + j * cw, y_cell), cw, ch, linewidth=1.0,
                               facecolor=fills[letter] if letter else "white",
                               edgecolor=_EDGE if seen else "#999999",
                               linestyle="-" if seen else "--", zorder=2,
                               gid=f"cell-{j}"))
            ax.text(cx(j), y_cell + ch / 2, str(token), ha="center", va="center",
                    fontsize=10.5, color=_INK if seen else "#666666", zorder=3,
                    gid=f"token-{j}")
            ax.text(cx(j), y_cell - 0.17, str(j), ha="center", va="center", fontsize=9,
                    color="#333333" if seen else "#666666", gid=f"position-{j}")
            if letter:
                ax.text(cx(j), y_cell + ch + 0.06, letter, ha="center", va="bottom",
                        fontsize=10, weight="bold")
        if (n - query - 1) * cw >= 1.0:  # room under the greyed keys to say why
            ax.text((cx(query + 1) + cx(n - 1)) / 2, y_cell - 0.35,
                    "after the query:\nnot visible to it", ha="center", va="top",
                    fontsize=9, color="#555555", linespacing=1.2)

        def beside_key(y: float, text: str, va: str, gid: str | None = None) -> None:
            """Text beside the key's column, on the side with room for it."""
            wide = 0.07 * max(len(line) for line in text.splitlines())  # 9.5 pt, inches
            right = cx(key) + 0.15 + wide < width - 0.1
            ax.text(cx(key) + (0.15 if right else -0.15), y, text, va=va, fontsize=9.5,
                    ha="left" if right else "right", color="#333333", linespacing=1.2,
                    gid=gid)

        # Layer 0: j attends to j - 1 and writes that token into position j.
        ax.text(left - 0.1, (y_tag + y_cell - 0.3) / 2 + 0.05,
                "layer 0\nprevious-\ntoken head", ha="right", va="center", fontsize=10,
                linespacing=1.2)
        for j in range(1, query + 1):
            hot = j == key
            _arrow(ax, (cx(j - 1), y_cell - 0.33), (cx(j), y_tag + th + 0.03),
                   color=OKABE_ITO[5] if hot else "#AAAAAA", linewidth=2.0 if hot else 1.0,
                   connection="arc3,rad=0.25")
        for j in range(query + 1):
            hot = j == key
            _add(ax, Rectangle((x0 + j * cw + 0.02, y_tag), cw - 0.04, th,
                               facecolor=_FILL_NORM if hot else _SOFT,
                               edgecolor=OKABE_ITO[5] if hot else _EDGE,
                               linewidth=1.8 if hot else 0.8, zorder=2,
                               gid=f"tag-{j}"))
            tag = "none" if prev[j] is None else f"prev\n{prev[j]}"
            ax.text(cx(j), y_tag + th / 2, tag, ha="center", va="center",
                    fontsize=9 if cw > 0.45 else 8.5,
                    linespacing=1.0, weight="bold" if hot else "normal", zorder=3,
                    gid=f"prev-{j}")

        beside_key(y_tag - 0.1, "each position j attends to j \u2212 1\n"
                   "and writes that token into its vector", "top")

        # Layer 1: the query matches the key whose tag is its own token; the value is copied.
        ax.text(left - 0.1, y_query + qh / 2, "layer 1\ninduction\nhead", ha="right",
                va="center", fontsize=10, linespacing=1.2)
        qx = min(max(cx(query) - qw / 2, left), width - 0.1 - qw)
        _box(ax, qx, y_query, qw, qh, f"query at {query}: token {a_tok}\n"
             f"\u201cwho was preceded by {a_tok}?\u201d", face=_FILL_ATTENTION,
             fontsize=9.5, gid="query")
        if qx > cx(key) + 0.1:  # from the box's side, left, then up into the key's tag
            _path_arrow(ax, [(qx, y_query + qh / 2), (cx(key), y_query + qh / 2),
                             (cx(key), y_tag)], color=OKABE_ITO[5], linewidth=1.8)
        else:  # the key's column crosses the box: straight up from its top
            _arrow(ax, (cx(key), y_query + qh), (cx(key), y_tag), color=OKABE_ITO[5],
                   linewidth=1.8)
        beside_key(y_query + qh + 0.08,
                   f"attends to position {key}, whose key carries \u201cprev {prev[key]}\u201d\n"
                   "(the key reads layer 0's output)", "bottom", "attended")
        # The value found there is the token at the key's position: copied, predicted.
        mid, py = qx + qw / 2, y_query - 0.95
        _arrow(ax, (mid, y_query), (mid, py + 0.42))
        _box(ax, mid - 0.8, py, 1.6, 0.42, f"predicts {b_tok}", face=_FILL_FFN,
             fontsize=10.5, weight="bold", gid="predicted")
        right = mid + 2.4 < width
        ax.text(mid + 0.1 if right else mid - 0.1, (y_query + py + 0.42) / 2,
                f"copies the value at position {key}:\nits token, {seq[key]}",
                ha="left" if right else "right", va="center", fontsize=9.5,
                color="#333333", linespacing=1.2)
    return _check_width(fig)


# --------------------------------------------------------------------------- 10. contributions

# key_contributions' default example, public so a chapter can build the same terms inline:
# one head, the query "it" in "The animal didn't cross the street because it was too
# tired". [CLS] takes the most weight but sends a short vector f(x), as in
# attention-layer.md's measurement on all-MiniLM-L6-v2; the numbers are made up.
EXAMPLE_CONTRIBUTION_QUERY = "it"
EXAMPLE_CONTRIBUTION_LABELS = ("[CLS]", "animal", "street", "it", "tired")
EXAMPLE_CONTRIBUTION_WEIGHTS = (0.40, 0.30, 0.05, 0.15, 0.10)
#: f(x_j) = (x_j W_v + b_v) W_o, drawn in two dimensions.
EXAMPLE_CONTRIBUTION_VECTORS = (
    (-0.15, -0.12),  # [CLS]: short
    (0.67, 1.33),  # animal
    (0.90, 0.40),  # street
    (1.13, 0.27),  # it
    (1.00, -1.00),  # tired
)

_MAX_LABEL_CHARS = 10


def _contribution_inputs(weights: object, vectors: object, labels: object
                         ) -> tuple[torch.Tensor, torch.Tensor, list[str], str]:
    """Checked ``(weights (S,), vectors (S, 2), key labels, query label)``."""
    defaults = weights is None and vectors is None
    a = _as_float_tensor("weights", EXAMPLE_CONTRIBUTION_WEIGHTS if weights is None
                         else weights, 1, "(S,)")
    f = _as_float_tensor("vectors", EXAMPLE_CONTRIBUTION_VECTORS if vectors is None
                         else vectors, 2, "(S, 2)")
    S = a.shape[0]
    if not 2 <= S <= _MAX_KEYS:
        raise ValueError(f"weights must have between 2 and {_MAX_KEYS} keys for a legible "
                         f"drawing, got {S}")
    if bool((a < 0).any()) or abs(float(a.sum()) - 1.0) > 1e-6:
        raise ValueError(f"weights must be non-negative and add up to 1 (one row of "
                         f"attention weights), got sum {float(a.sum()):.6g} and minimum "
                         f"{float(a.min()):.6g}")
    if tuple(f.shape) != (S, 2):
        raise ValueError(f"vectors must have shape (S, 2) with S = {S}, one 2-D f(x_j) per "
                         f"weight, got shape {tuple(f.shape)}")
    if float((a[:, None] * f).norm(dim=-1).sum()) == 0.0:
        raise ValueError("vectors: every term A_tj f(x_j) is zero, so no key contributes "
                         "and the shares are undefined")
    if labels is None:
        names = (list(EXAMPLE_CONTRIBUTION_LABELS) if defaults
                 else [f"key {j}" for j in range(S)])
    elif isinstance(labels, str | bytes) or not isinstance(labels, Sequence):
        raise TypeError(f"labels must be a sequence of strings, one per key, got "
                        f"{type(labels).__name__}")
    else:
        names = [str(t) for t in labels]
        if len(names) != S:
            raise ValueError(f"labels has {len(names)} entries but there are {S} keys")
        if max(len(t) for t in names) > _MAX_LABEL_CHARS:
            raise ValueError(f"labels must have at most {_MAX_LABEL_CHARS} characters each "
                             f"for a legible drawing, got {max(names, key=len)!r}")
    return a, f, names, EXAMPLE_CONTRIBUTION_QUERY if defaults else ""


def key_contributions(
    weights: torch.Tensor | np.ndarray | Sequence[float] | None = None,
    vectors: torch.Tensor | np.ndarray | Sequence[Sequence[float]] | None = None,
    *,
    labels: Sequence[str] | None = None,
) -> Figure:
    """One head's output for one query ``t``, split into one term per key ``j``.

    Left, one row per key, four aligned bars: the weight ``A_tj`` (which is the key's share
    of the weight), the length ``||f(x_j)||`` of the vector the key sends, the length of its
    term ``||A_tj f(x_j)||`` (on the same scale as ``||f(x_j)||``: the weight shrinks the
    vector), and the key's share of the contribution ``||A_tj f(x_j)|| / sum_k ||A_tk
    f(x_k)||`` (on the same 0-to-1 scale as the weight). Under the columns: the sum of the
    weights and the sum of the terms' lengths. Right: the terms ``A_tj f(x_j)`` as 2-D
    arrows, tip to tail, adding up to ``out_t = sum_j A_tj f(x_j)`` (the equation
    attention-layer-eq-contribution, with ``f(x_j) = (x_j W_v + b_v) W_o``; the norm-based
    share is Kobayashi et al.'s).

    The default example reads like the book's measurement: ``[CLS]`` takes the largest
    share of the weight but sends a short vector, so its share of the contribution is
    small. Every printed number is computed here from ``weights`` and ``vectors``. gids:
    ``weight-j``, ``length-j``, ``term-j``, ``share-j`` (the numbers of row ``j``),
    ``weight-sum``, ``term-sum`` and ``out`` (the output's label).

    Args:
        weights: the query's row of attention weights ``A_t``, shape ``(S,)`` with
            ``2 <= S <= 8``, non-negative, adding up to 1; the example's when None.
        vectors: the vectors ``f(x_j)`` in two dimensions, shape ``(S, 2)``; the example's
            when None.
        labels: ``S`` names of the keys, at most 10 characters each; the example's tokens
            when both ``weights`` and ``vectors`` are None, else ``key 0``, ``key 1``, ...

    Returns:
        The new figure, with two Axes (the bars left, the vectors right).

    Raises:
        TypeError: an input that is not a tensor, array or list of numbers, or ``labels``
            that is one string.
        ValueError: shapes that do not fit together, too few or too many keys, weights
            that are negative or do not add up to 1, all terms zero, labels too long.
    """
    a, f, names, query_name = _contribution_inputs(weights, vectors, labels)
    S = a.shape[0]
    terms = a[:, None] * f  # (S, 2): A_tj f(x_j)
    f_len = f.norm(dim=-1)  # (S,)
    term_len = terms.norm(dim=-1)  # (S,)
    shares = term_len / term_len.sum()  # (S,)
    out = terms.sum(dim=0)  # (2,)
    torch.testing.assert_close(out, a @ f)  # the terms add up to the weighted sum

    row_h, bar_h = 0.44, 0.28
    label_w, col_w, col_gap = 0.9, 0.8, 0.24
    table_w = label_w + 4 * col_w + 3 * col_gap + 0.1
    right_w = 7.4 - table_w
    head_h = 1.15  # title and column headers
    height = head_h + S * row_h + 1.05
    length_scale = (col_w - 0.05) / float(f_len.max())  # inches per unit of length
    cols = [  # (header, values, inches per unit, fill, gid)
        ("weight $A_{tj}$\n(share of\nthe weight)", a, col_w - 0.05, _FILL_ATTENTION,
         "weight"),
        ("length\n$\\|f(x_j)\\|$", f_len, length_scale, "#DDDDDD", "length"),
        ("its term's\nlength\n$\\|A_{tj}\\,f(x_j)\\|$", term_len, length_scale, _FILL_NORM,
         "term"),
        ("share of the\ncontribution", shares, col_w - 0.05, _tint(OKABE_ITO[1], 0.55),
         "share"),
    ]
    with mpl.rc_context(book_style()):
        fig = _new_figure(table_w + right_w, height)
        ax = _panel(fig, 0.0, 0.0, table_w, height)
        vec = _panel(fig, table_w, 0.0, right_w, height)
        ax.text(0.1, height - 0.1, "one head, one query" + (
            f" ({query_name!r})" if query_name else "") + ": what each key adds",
            ha="left", va="top", fontsize=11, weight="bold")
        top = height - head_h  # the top of the first row
        for c, (header, values, scale, fill, gid) in enumerate(cols):
            x = label_w + c * (col_w + col_gap)
            ax.text(x + col_w / 2, top + 0.08, header, ha="center", va="bottom",
                    fontsize=9.5, linespacing=1.15)
            ax.plot([x, x], [top, top - S * row_h], color=_EDGE, linewidth=0.8)
            for j in range(S):
                y = top - (j + 0.5) * row_h
                _add(ax, Rectangle((x, y - bar_h / 2), float(values[j]) * scale, bar_h,
                                   facecolor=fill, edgecolor="none", zorder=2,
                                   gid=f"bar-{gid}-{j}"))
                top_value = c in (0, 3) and bool(values[j] == values.max())  # largest
                ax.text(x + 0.05, y, f"{float(values[j]):.2f}", ha="left", va="center",
                        fontsize=9.5, color=_INK, zorder=3, gid=f"{gid}-{j}",
                        weight="bold" if top_value else "normal")
                if c in (0, 1):  # weight x length = term
                    ax.text(x + col_w + col_gap / 2, y, "\u00d7" if c == 0 else "=",
                            ha="center", va="center", fontsize=10, color="#555555")
        for j, name in enumerate(names):
            ax.text(label_w - 0.1, top - (j + 0.5) * row_h, name, ha="right",
                    va="center", fontsize=10)
        bottom = top - S * row_h  # the bottom of the last row
        heavy, strong = int(a.argmax()), int(shares.argmax())
        if int((a == a.max()).sum()) == 1 and shares[heavy] < shares.max():  # in words
            ax.text(0.1, 0.1, f"{names[heavy]} has the largest share of the weight, "
                    f"{float(a[heavy]):.2f},\nbut {names[strong]} has the largest share of "
                    f"the contribution, {float(shares[strong]):.2f}", ha="left",
                    va="bottom", fontsize=9.5, linespacing=1.25, gid="note")
        for c, gid, total in ((0, "weight-sum", a.sum()), (2, "term-sum", term_len.sum())):
            ax.text(label_w + c * (col_w + col_gap) + 0.05, bottom - 0.1,
                    f"sum = {float(total):.2f}", ha="left", va="top", fontsize=9.5,
                    color="#333333", gid=gid)
        ax.text(label_w + 3 * (col_w + col_gap) + 0.05, bottom - 0.1,
                "= term / sum", ha="left", va="top", fontsize=9.5, color="#333333")

        _draw_terms(vec, terms, names, right_w, height)
    return _check_width(fig)


def _draw_terms(ax: Axes, terms: torch.Tensor, names: Sequence[str], width: float,
                height: float) -> None:
    """The terms as arrows tip to tail from the origin, and their sum ``out_t`` (black)."""
    chain = torch.cat([torch.zeros(1, 2, dtype=terms.dtype), terms.cumsum(dim=0)])  # (S+1, 2)
    lo, hi = chain.min(dim=0).values, chain.max(dim=0).values  # (2,), (2,)
    box_x, box_y, box_w, box_h = 0.5, 0.8, width - 1.0, height - 1.75
    span = torch.clamp(hi - lo, min=1e-9)
    scale = min(box_w / float(span[0]), box_h / float(span[1]))  # inches per unit
    middle = torch.tensor([box_x + box_w / 2, box_y + box_h / 2], dtype=terms.dtype)
    pts = (scale * (chain - (lo + hi) / 2) + middle).numpy()  # (S+1, 2), inches
    ax.text(width / 2, height - 0.1, "the terms $A_{tj}\\,f(x_j)$ tip to tail\n"
            "add up to $\\mathrm{out}_t$", ha="center", va="top", fontsize=10,
            linespacing=1.3)
    _arrow(ax, tuple(pts[0]), tuple(pts[-1]), color=_INK, linewidth=1.6, zorder=1)
    for j in range(len(names)):
        _arrow(ax, tuple(pts[j]), tuple(pts[j + 1]), color=OKABE_ITO[5], linewidth=1.8,
               zorder=2)
    # Points along every arrow, which a label must keep clear of.
    segments = [(pts[j], pts[j + 1]) for j in range(len(names))] + [(pts[0], pts[-1])]
    along = np.concatenate([a + np.linspace(0, 1, 25)[:, None] * (b - a)
                            for a, b in segments])  # (25 (S+1), 2)
    placed: list[np.ndarray] = []  # label boxes: (x0, y0, x1, y1)

    def place(a: np.ndarray, b: np.ndarray, text: str, chars: int, **kw: object) -> None:
        """Put ``text`` beside the arrow from ``a`` to ``b``, the nearest free spot."""
        w, h = 0.072 * chars + 0.04, 0.2
        t = (b - a) / max(float(np.hypot(*(b - a))), 1e-9)
        n = np.array([-t[1], t[0]])
        half = abs(n[0]) * w / 2 + abs(n[1]) * h / 2  # the box's half-depth along n
        best = None
        for d in (0.06, 0.16, 0.28, 0.42, 0.6):
            for side in (1, -1):
                for slide in (0.0, 0.15, -0.15, 0.3, -0.3):
                    c = (a + b) / 2 + side * (d + half) * n + slide * t
                    box = np.array([c[0] - w / 2, c[1] - h / 2, c[0] + w / 2, c[1] + h / 2])
                    if not (box[0] > 0.05 and box[2] < width - 0.05 and box[1] > 0.6
                            and box[3] < height - 0.55):
                        continue
                    hits = ((along[:, 0] > box[0] - 0.03) & (along[:, 0] < box[2] + 0.03)
                            & (along[:, 1] > box[1] - 0.03) & (along[:, 1] < box[3] + 0.03))
                    if hits.any() or any(box[0] < p[2] and p[0] < box[2] and box[1] < p[3]
                                         and p[1] < box[3] for p in placed):
                        continue
                    best = box
                    break
                if best is not None:
                    break
            if best is not None:
                break
        if best is None:  # no free spot: beside the arrow anyway
            c = (a + b) / 2 + (0.06 + half) * n
            best = np.array([c[0] - w / 2, c[1] - h / 2, c[0] + w / 2, c[1] + h / 2])
        placed.append(best)
        ax.text((best[0] + best[2]) / 2, (best[1] + best[3]) / 2, text, ha="center",
                va="center", fontsize=9.5, **kw)

    place(pts[0], pts[-1], "$\\mathrm{out}_t$", 4, weight="bold", gid="out")
    for j, name in enumerate(names):
        place(pts[j], pts[j + 1], name, len(name), color="#7A2E00")
    ax.text(width / 2, 0.1, "a share counts each term's\nlength, not its direction",
            ha="center", va="bottom", fontsize=9.5, color="#333333", linespacing=1.2)


# --------------------------------------------------------------------------- 11. decoder

#: The sizes :func:`decoder_stack` prints, and their bound for a legible drawing.
_DECODER_SIZES = ("vocab_size", "d_model", "num_layers", "num_heads", "num_kv_heads", "d_ff")
_MAX_DECODER_SIZE = 1_000_000

_TIE_COLOUR = OKABE_ITO[5]  # vermillion: the dashed line between the two uses of the table


def decoder_stack(config: DecoderConfig) -> Figure:
    """The whole LLaMA-style decoder of Part IV, bottom to top, with one block expanded.

    The token ids ``(L,)`` pick rows of the embedding table (``vocab_size x d_model``).
    Then a frame holds one pre-norm block, which repeats ``num_layers`` times: RMSNorm,
    grouped-query causal self-attention, a residual addition; RMSNorm, the gated MLP
    (``d_model -> d_ff -> d_model``, SiLU), a second residual addition. Inside the
    attention box, bottom to top: the projections to ``num_heads`` query heads and
    ``num_kv_heads`` key/value heads, RoPE on queries and keys, the key/value cache that
    keeps keys and values for decoding, and the causal mask on the scores. After the
    blocks: the final RMSNorm, the output layer, a softmax and the next-token
    probabilities. The output layer is the embedding table, transposed (tied weights): a
    dashed line joins the two and says "same matrix".

    Every size printed comes from ``config``, read from the tensors of a
    :class:`attnbook.decoder.Decoder` built from it on PyTorch's ``meta`` device (shapes,
    no memory, one block): the embedding table, the heads and ``d_head`` of the
    attention, the MLP's projections; the number of blocks is ``config.num_layers``.
    The texts with numbers carry gids: ``embed``, ``num-layers``, ``heads``, ``mlp``,
    ``output``, ``probs``; the attention box's patch is ``attention-box``, the tie's
    dashed line ``tie`` and its label ``tie-label``.

    Args:
        config: the decoder's sizes, each at most 1,000,000 (the drawing's room for
            digits); the book passes the loaded SmolLM2's ``decoder.config``.

    Returns:
        The new figure (one Axes).

    Raises:
        TypeError: if ``config`` is not a :class:`~attnbook.decoder.DecoderConfig`.
        ValueError: if a size is over 1,000,000, or ``config`` is one that
            :class:`~attnbook.decoder.Decoder` refuses (an odd ``d_head``, which RoPE
            cannot rotate in pairs).
    """
    if not isinstance(config, DecoderConfig):
        raise TypeError(f"config must be an attnbook.decoder.DecoderConfig, got "
                        f"{type(config).__name__}")
    for name in _DECODER_SIZES:
        _require_int(f"config.{name}", getattr(config, name), 1, _MAX_DECODER_SIZE)
    # One block is enough for the shapes (the others are copies of it); meta tensors have
    # shapes and no numbers, so even a large vocabulary costs no memory.
    with _without_initialisation(), torch.device("meta"):
        decoder = Decoder(dataclasses.replace(config, num_layers=1))
    vocab, d_model = decoder.embed.weight.shape
    block = decoder.blocks[0]
    attn = block.attn
    d_ff = block.mlp.gate_proj.weight.shape[0]
    if block.mlp.down_proj.weight.shape != (d_model, d_ff) or (  # pragma: no cover
            attn.k_proj.weight.shape[0] != attn.num_kv_heads * attn.d_head):
        raise AssertionError("the decoder's shapes are not the ones drawn")
    n_blocks, h, h_kv = config.num_layers, attn.num_heads, attn.num_kv_heads
    if h_kv == h:
        kind, sharing = "multi-head" if h > 1 else "one-head", "one query head per K, V"
    else:
        kind = "multi-query" if h_kv == 1 else "grouped-query"
        sharing = f"{h // h_kv} query heads share each K, V"

    width = 7.2
    cx, bw = 3.3, 4.0  # the main column's centre and box width
    left, right = cx - bw / 2, cx + bw / 2
    res_x = left - 0.35  # the residual lines run here
    # Heights, bottom to top: the ids, the embedding table, the block's frame and what it
    # holds, then the final norm, the output layer and the softmax.
    embed_y, frame_y = 0.95, 1.95
    norm1_y, attn_y, attn_h = 2.35, 3.0, 2.55
    add1 = attn_y + attn_h + 0.35
    norm2_y = add1 + 0.52
    mlp_y = norm2_y + 0.53
    add2 = mlp_y + 0.45 + 0.34
    frame_top = add2 + 0.6
    final_y = frame_top + 0.3
    out_y = final_y + 0.65
    probs_y = out_y + 0.8
    height = probs_y + 0.5 + 0.15
    tie_x = right + 0.75
    with mpl.rc_context(book_style()):
        fig = _new_figure(width, height)
        ax = _panel(fig, 0.0, 0.0, width, height)

        def box(y: float, h: float, text: str, face: str, gid: str | None = None,
                fontsize: float = 10.5) -> None:
            _box(ax, left, y, bw, h, text, face=face, fontsize=fontsize, gid=gid)

        # Bottom: token ids and the embedding table.
        box(0.2, 0.42, "token ids, shape (L,)", _FILL_IO)
        box(embed_y, 0.62, f"embedding table: look up one row per id\n"
            f"vocab_size $\\times$ d_model = {vocab} $\\times$ {d_model}", _FILL_CROSS,
            gid="embed")
        _arrow(ax, (cx, 0.62), (cx, embed_y))
        _arrow(ax, (cx, embed_y + 0.62), (cx, norm1_y))
        ax.text(cx + 0.1, (embed_y + 0.62 + frame_y) / 2, "(L, d_model)", ha="left",
                va="center", fontsize=9, family="monospace", color="#333333")

        # The block, with shadows behind it: it repeats num_layers times.
        frame_x = left - 0.8
        frame_w, frame_h = right + 0.3 - frame_x, frame_top - frame_y
        for offset, face, edge in ((0.16, "#F2F2F2", "#AAAAAA"), (0.08, "#F7F7F7", "#999999"),
                                   (0.0, "#FCFCFC", _EDGE)):
            _add(ax, FancyBboxPatch(
                (frame_x + offset, frame_y + offset), frame_w, frame_h,
                boxstyle="round,pad=0,rounding_size=0.12", facecolor=face, edgecolor=edge,
                linewidth=1.2, zorder=0.5))
        count = ax.text(frame_x + 0.15, frame_top - 0.12,
                        f"one block, repeated num_layers = {n_blocks} "
                        f"time{'s' if n_blocks > 1 else ''}",
                        ha="left", va="top", fontsize=11, weight="bold", zorder=3)
        count.set_gid("num-layers")

        box(norm1_y, 0.36, "RMSNorm", _FILL_NORM)
        box(attn_y, attn_h, "", _FILL_ATTENTION)
        ax.patches[-1].set_gid("attention-box")
        ax.text(cx, attn_y + attn_h - 0.1, f"{kind} causal self-attention",
                ha="center", va="top", fontsize=10.5, weight="bold", zorder=3)
        # Inside attention, bottom to top, in the order the layer works.
        steps = [
            (f"Q: {h} query head{'s' if h > 1 else ''}; K, V: {h_kv} key/value "
             f"head{'s' if h_kv > 1 else ''}\n(d_head = {attn.d_head}; {sharing})", "heads"),
            ("RoPE: rotate Q and K by their positions", None),
            ("append the new K, V to the key/value cache", None),
            (f"scores Q K$^\\top / \\sqrt{{{attn.d_head}}}$ with every cached K, + causal mask;"
             "\nsoftmax, $\\times$ every cached V, then $W_o$", None),
        ]
        chip_x, chip_w, gap = left + 0.12, bw - 0.24, 0.17
        y = attn_y + 0.12
        for k, (text, gid) in enumerate(steps):
            chip_h = 0.5 if "\n" in text else 0.3
            if k:
                _arrow(ax, (cx, y - gap), (cx, y), linewidth=1.1, zorder=3)
            _box(ax, chip_x, y, chip_w, chip_h, text, face=_FILL_IO, fontsize=9.5,
                 rounding=0.05, linewidth=0.9, gid=gid)
            y += chip_h + gap
        box(norm2_y, 0.36, "RMSNorm", _FILL_NORM)
        box(mlp_y, 0.45, "", _FILL_FFN)
        mlp = ax.text(cx, mlp_y + 0.225,
                      f"gated MLP (SiLU): d_model $\\to$ d_ff $\\to$ d_model\n"
                      f"{d_model} $\\to$ {d_ff} $\\to$ {d_model}",
                      ha="center", va="center", fontsize=9.5, color=_INK, zorder=3,
                      linespacing=1.2)
        mlp.set_gid("mlp")
        _add_circle(ax, cx, add1)
        _add_circle(ax, cx, add2)
        for y0, y1 in ((norm1_y + 0.36, attn_y), (attn_y + attn_h, add1 - 0.17),
                       (add1 + 0.17, norm2_y), (norm2_y + 0.36, mlp_y),
                       (mlp_y + 0.45, add2 - 0.17)):
            _arrow(ax, (cx, y0), (cx, y1))
        for branch, target in ((frame_y + 0.2, add1), (add1 + 0.3, add2)):
            ax.plot([cx], [branch], "o", color=_LINE, markersize=4, zorder=3)
            _path_arrow(ax, [(cx, branch), (res_x, branch), (res_x, target),
                             (cx - 0.17, target)], color=OKABE_ITO[0], linewidth=1.5)
            ax.text(res_x - 0.08, (branch + target) / 2, "residual", rotation=90,
                    ha="right", va="center", fontsize=9.5, color=OKABE_ITO[0])

        # Top: final norm, the tied output layer, softmax.
        _arrow(ax, (cx, add2 + 0.17), (cx, final_y))
        box(final_y, 0.36, "final RMSNorm", _FILL_NORM)
        _arrow(ax, (cx, final_y + 0.36), (cx, out_y))
        box(out_y, 0.62, f"output layer: the embedding table, transposed\n"
            f"d_model $\\times$ vocab_size = {d_model} $\\times$ {vocab}", _FILL_CROSS,
            gid="output")
        _arrow(ax, (cx, out_y + 0.62), (cx, probs_y))
        box(probs_y, 0.5, f"softmax: next-token probabilities\n"
            f"(L, vocab_size) = (L, {vocab})", _FILL_IO, gid="probs", fontsize=10)

        # The tie: the same matrix at the bottom and at the top.
        low, high = embed_y + 0.31, out_y + 0.31
        (tie,) = ax.plot([right, tie_x, tie_x, right], [low, low, high, high],
                         color=_TIE_COLOUR, linewidth=1.6, linestyle="--", zorder=1)
        tie.set_gid("tie")
        tie_label = ax.text(tie_x + 0.1, (low + high) / 2, "same matrix: the output layer "
                            "reuses the embedding table (tied weights)", rotation=90,
                            ha="left", va="center", fontsize=10, color="#A3470A")
        tie_label.set_gid("tie-label")
    return _check_width(fig)


# --------------------------------------------------------------------------- 10. grouped heads


def _kv_head_of_query_heads(num_heads: int, num_kv_heads: int) -> list[int]:
    """The key/value head each query head reads, found by running
    :func:`attnbook.attention.grouped_attention` on one key per head whose value is its
    key/value head's index: query head ``i``'s output is the index it read."""
    q = torch.zeros(num_heads, 1, 1, dtype=torch.float64)  # (h, L=1, E=1)
    k = torch.zeros(num_kv_heads, 1, 1, dtype=torch.float64)  # (h_kv, S=1, E=1)
    v = torch.arange(num_kv_heads, dtype=torch.float64).reshape(num_kv_heads, 1, 1)
    output = grouped_attention(q, k, v, return_weights=False).output  # (h, 1, 1)
    return [round(float(x)) for x in output.flatten()]


def _draw_head_groups(ax: Axes, x0: float, x1: float, y_q: float, y_kv: float,
                      num_heads: int, num_kv_heads: int, box_h: float, *,
                      prefix: str, numbered: bool) -> None:
    """``num_heads`` query heads in a row at height ``y_q`` (lower edge), ``num_kv_heads``
    key/value heads at ``y_kv``, between ``x0`` and ``x1``; a line from every query head
    to the key/value head it reads, both boxes in the group's colour. Patches get the
    gids ``{prefix}q-{i}`` and ``{prefix}kv-{j}``, lines ``{prefix}link-{i}-{j}``, and
    (when ``numbered``) the indices printed in the boxes ``{prefix}q-label-{i}`` and
    ``{prefix}kv-label-{j}``."""
    reads = _kv_head_of_query_heads(num_heads, num_kv_heads)
    group = num_heads // num_kv_heads
    slot = (x1 - x0) / num_heads
    q_w = min(0.55, 0.78 * slot)
    kv_w = q_w if group == 1 else min(0.9, max(q_w, (group - 0.25) * slot))
    q_centres = [x0 + (i + 0.5) * slot for i in range(num_heads)]
    kv_centres = [x0 + (j + 0.5) * group * slot for j in range(num_kv_heads)]

    def colour_of(group_index: int) -> str:
        """A colour per group; one colour for all when each group is one head, so that
        colours that repeat past six groups do not suggest groups that are not there."""
        return _HEAD_COLOURS[0 if group == 1 else group_index % len(_HEAD_COLOURS)]

    def head(x: float, y: float, w: float, kind: str, index: int, group_index: int) -> None:
        """One head's box, coloured by its group, with its index when ``numbered``."""
        colour = colour_of(group_index)
        patch = FancyBboxPatch((x - w / 2, y), w, box_h,
                               boxstyle=f"round,pad=0,rounding_size={min(0.06, w / 4)}",
                               facecolor=_tint(colour, 0.45), edgecolor=_LINE, linewidth=1.0,
                               zorder=2)
        patch.set_gid(f"{prefix}{kind}-{index}")
        _add(ax, patch)
        if numbered:
            text = ax.text(x, y + box_h / 2, str(index), ha="center", va="center",
                           fontsize=9.5, color=_INK, zorder=3)
            text.set_gid(f"{prefix}{kind}-label-{index}")

    for i, j in enumerate(reads):
        head(q_centres[i], y_q, q_w, "q", i, j)
        spread = 0.6 * kv_w * ((i % group) + 0.5) / group - 0.3 * kv_w
        (line,) = ax.plot([q_centres[i], kv_centres[j] + spread], [y_q, y_kv + box_h],
                          color=colour_of(j), linewidth=1.4,
                          zorder=1)
        line.set_gid(f"{prefix}link-{i}-{j}")
    for j in range(num_kv_heads):
        head(kv_centres[j], y_kv, kv_w, "kv", j, j)


def _cache_saving(num_heads: int, num_kv_heads: int) -> str:
    """What the key/value cache holds, against one key/value head per query head."""
    heads = f"{num_kv_heads} head" + ("s" if num_kv_heads > 1 else "")
    if num_kv_heads == num_heads:
        return f"the key/value cache holds {heads}, one per query head: no saving"
    return (f"the key/value cache holds {heads} instead of {num_heads}: "
            f"{num_heads // num_kv_heads} times smaller")


def grouped_query_heads(num_heads: int = 9, num_kv_heads: int = 3) -> Figure:
    """Grouped-query attention: which key/value head each query head reads.

    Top panel: ``num_heads`` query heads in a row above ``num_kv_heads`` key/value heads;
    a line joins query head ``i`` to the key/value head it shares, ``i // g`` with the
    group size ``g = num_heads / num_kv_heads`` (LLaMA's ``repeat_kv`` order). Each group
    has its colour, and the numbers in the boxes and the lines say the same without it.
    Below: what the key/value cache holds, ``num_kv_heads`` heads instead of
    ``num_heads``. Bottom panels: the two ends, multi-head attention (one key/value head
    per query head) and multi-query attention (one key/value head for all).

    The mapping is not typed in: it is what :func:`attnbook.attention.grouped_attention`
    (which :class:`attnbook.layers.MultiHeadAttention` and the decoder use) does, read
    from its output. gids: the boxes ``q-{i}`` and ``kv-{j}``, their numbers
    ``q-label-{i}`` and ``kv-label-{j}``, the lines ``link-{i}-{j}`` (with prefixes
    ``mha-`` and ``mqa-`` in the bottom panels), the texts ``group-size``,
    ``cache-saving``, ``mha-cache`` and ``mqa-cache``.

    Args:
        num_heads: the number of query heads ``h``, from 1 to 16.
        num_kv_heads: the number of key/value heads, from 1 to 16, dividing ``num_heads``.

    Returns:
        The new figure, with three Axes (grouped-query on top, multi-head bottom left,
        multi-query bottom right).

    Raises:
        TypeError: if an argument is not an int.
        ValueError: if an argument is out of range, or ``num_kv_heads`` does not divide
            ``num_heads``.
    """
    h = _require_int("num_heads", num_heads, 1, 16)
    h_kv = _require_int("num_kv_heads", num_kv_heads, 1, 16)
    g = require_divides("num_kv_heads", h_kv, "num_heads", h, ": each key/value head serves "
                        "a group of num_heads / num_kv_heads query heads")

    width, top_h, bottom_h = 7.0, 3.1, 2.05
    label_w = 1.25  # room for the row names on the left
    box_h = 0.36
    with mpl.rc_context(book_style()):
        fig = _new_figure(width, top_h + bottom_h)
        top = _panel(fig, 0.0, bottom_h, width, top_h)
        y_q, y_kv = top_h - 1.15, 0.75
        top.text(width / 2, top_h - 0.12, f"grouped-query attention: {h} query "
                 f"head{'s' if h > 1 else ''}, {h_kv} key/value head{'s' if h_kv > 1 else ''}",
                 ha="center", va="top", fontsize=11, weight="bold")
        group_size = top.text(width / 2, top_h - 0.45,
                              f"group size g = {h} / {h_kv} = {g}: query head i reads "
                              f"key/value head i // g", ha="center",
                              va="top", fontsize=10, color="#333333")
        group_size.set_gid("group-size")
        _draw_head_groups(top, label_w, width - 0.15, y_q, y_kv, h, h_kv, box_h, prefix="",
                          numbered=True)
        top.text(label_w - 0.12, y_q + box_h / 2, "query heads", ha="right", va="center",
                 fontsize=10)
        top.text(label_w - 0.12, y_kv + box_h / 2, "key/value\nheads", ha="right",
                 va="center", fontsize=10, linespacing=1.1)
        saving = top.text(width / 2, y_kv - 0.15, _cache_saving(h, h_kv), ha="center",
                          va="top", fontsize=10.5)
        saving.set_gid("cache-saving")

        # The two ends: multi-head (as many key/value heads as query heads), multi-query.
        half = width / 2
        for k, (name, n_kv, prefix) in enumerate((
                (f"multi-head: num_kv_heads = num_heads = {h}", h, "mha-"),
                ("multi-query: num_kv_heads = 1", 1, "mqa-"))):
            ax = _panel(fig, k * half, 0.0, half, bottom_h)
            ax.text(half / 2, bottom_h - 0.08, name, ha="center", va="top", fontsize=10)
            _draw_head_groups(ax, 0.3, half - 0.3, bottom_h - 0.85, 0.55, h, n_kv, 0.24,
                              prefix=prefix, numbered=False)
            cache = ax.text(half / 2, 0.42, _cache_saving(h, n_kv).replace(
                "the key/value cache holds", "cache:"), ha="center", va="top",
                fontsize=9.5, color="#333333")
            cache.set_gid(f"{prefix}cache")
            if k:
                ax.plot([0.02, 0.02], [0.15, bottom_h - 0.1], color="#BBBBBB", linewidth=1)
        top.plot([0.15, width - 0.15], [0.04, 0.04], color="#BBBBBB", linewidth=1)
    return _check_width(fig)


# --------------------------------------------------------------------------- 13. cache

_FILL_ALLOWED = "#9CC7E6"  # a score the mask allows (blue, as in cross_attention)
_FILL_MASKED = MASKED_GREY  # a score the mask forbids: grey and hatched, as in the heatmaps
_HATCH_MASKED = "///"
_FILL_PREFILL = _FILL_ATTENTION  # cache slots written by the prefill (light blue)
_FILL_DECODE = _FILL_NORM  # cache slots written by a decode step (light orange)


def _plural(n: int, one: str, many: str | None = None) -> str:
    """``"1 token"``, ``"2 tokens"``; ``many`` for an irregular plural."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _cell(ax: Axes, x: float, y: float, w: float, h: float, face: str, *,
          hatch: str | None = None, gid: str | None = None, linewidth: float = 0.6) -> None:
    """One grid cell or cache slot with its lower-left corner at ``(x, y)``."""
    patch = Rectangle((x, y), w, h, facecolor=face, edgecolor=_EDGE, hatch=hatch,
                      linewidth=linewidth, zorder=2)
    patch.set_gid(gid)
    _add(ax, patch)


def prefill_and_decode(prompt: int = 5, new: int = 3) -> Figure:
    """A decoder's two phases with a key/value cache: prefill, then decode.

    Left, **prefill**: the ``prompt`` tokens go through the model in one pass; each prompt
    position's key and value is written into the key/value cache (a row of ``K`` slots
    over a row of ``V`` slots), and the scores are the ``prompt x prompt`` causal triangle
    (:func:`attnbook.masks.causal_mask`; blocked future keys grey and hatched). The pass
    also predicts the next token, the first decode step's input.

    Right, **decode**, ``new`` steps: each feeds one token; its key and value are appended
    to the cache and its one query attends to every cached key, its own included: step
    ``k``'s scores are one row of ``1 x (prompt + k)``
    (``causal_mask(1, prompt + k, offset=prompt + k - 1)``). The predicted token loops back
    as the next input. The cache is drawn after the last step; under its slots, who wrote
    them: the prefill (a bracket), or decode step ``1 .. new`` (a number per slot). The
    score grids' columns stand under the cache slots of the same keys.

    The slot counts are read from a real :class:`attnbook.efficient.KVCache` given one
    prefill append and ``new`` one-token appends; the grids' shapes and allowed cells are
    the masks'. gids: score cells ``prefill-cell-i-j`` and ``decode-cell-k-j`` (patches);
    cache slots ``prefill-k-j``, ``prefill-v-j``, ``decode-k-j``, ``decode-v-j``
    (patches); the decode cache's writers ``writer-0`` (the "prefill" label) and
    ``writer-j`` (the step number of slot ``j``); the shapes ``prefill-shape`` and
    ``decode-shape-k``; the cache sizes ``prefill-cache-size`` and ``decode-cache-size``;
    the costs ``prefill-cost`` and ``decode-cost``.

    Args:
        prompt: the prompt's length in tokens, from 1 to 10.
        new: the number of decode steps drawn, from 1 to 6.

    Returns:
        The new figure, with two Axes (prefill left, decode right).

    Raises:
        TypeError: if an argument is not an int.
        ValueError: if ``prompt`` is outside 1..10 or ``new`` outside 1..6.
    """
    P = _require_int("prompt", prompt, 1, 10)
    n = _require_int("new", new, 1, 6)
    # Replay the cache: the prefill appends P positions at once, each decode step one.
    cache = KVCache()
    cache.append(torch.zeros(P, 1), torch.zeros(P, 1))  # keys (P, E), values (P, Ev)
    lengths = [len(cache)]
    prefill_mask = causal_mask(P)  # (P, P): query i sees keys 0..i
    blocked = int((~prefill_mask).sum())
    step_masks = []
    for _ in range(n):
        cache.append(torch.zeros(1, 1), torch.zeros(1, 1))
        t = len(cache)  # the new query is position t - 1: it sees keys 0..t - 1
        lengths.append(t)
        step_masks.append(causal_mask(1, t, offset=t - 1))  # (1, t)
    slots = lengths[-1]
    # Slot j was written by the append that took the cache past j (0: the prefill).
    writer = [next(s for s, end in enumerate(lengths) if j < end) for j in range(slots)]

    cell = min(0.28, 3.4 / slots, 2.5 / P)
    gap = 0.07  # between the decode steps' rows
    x_grid = 0.7  # left edge of the caches and grids: room for the row labels
    left_w = max(3.45, x_grid + P * cell + 1.1)
    right_w = max(3.9, x_grid + slots * cell + 0.95)
    box_h, box_w = 0.5, (0.85, 1.0, 0.8)
    rows_h = max(P * cell, n * (cell + gap) - gap)
    height = 1.25 + box_h + 0.7 + 2 * cell + 0.55 + rows_h + 0.55
    y_box = height - 1.25 - box_h  # lower edge of the boxes
    y_cache = y_box - 0.7 - 2 * cell  # lower edge of the V row
    top = y_cache - 0.55  # top edge of the score grids
    with mpl.rc_context(book_style()):
        fig = _new_figure(left_w + right_w, height)
        panels = (_panel(fig, 0.0, 0.0, left_w, height),
                  _panel(fig, left_w, 0.0, right_w, height))
        p, d = panels
        tokens = _plural(P, "token")
        for ax, w, gid, title, cost, first, model, written, x_written, what in (
                (p, left_w, "prefill", "Prefill",
                 f"{_plural(prefill_mask.shape[0], 'prompt query', 'prompt queries')} at "
                 "once", f"prompt:\n{tokens}", "model,\none pass", (0, P),
                 x_grid + P * cell / 2,
                 f"writes {_plural(P, 'key')}, {_plural(P, 'value')}"),
                (d, right_w, "decode", f"Decode, {_plural(n, 'step')}",
                 f"{_plural(step_masks[0].shape[0], 'query', 'queries')} per step, reads "
                 "the whole cache", "new\ntoken", "model,\n1 query", (P, slots),
                 x_grid + (P + n / 2) * cell, "appends 1 key, 1 value")):
            ax.text(w / 2, height - 0.12, title, ha="center", va="top", fontsize=12,
                    weight="bold")
            ax.text(w / 2, height - 0.45, cost, ha="center", va="top", fontsize=10.5,
                    color=OKABE_ITO[0] if ax is p else OKABE_ITO[5]).set_gid(f"{gid}-cost")
            # The pass: tokens in, the model, the next token out.
            xs = (0.15, 1.25, w - 0.95)
            for x, bw, text, face in zip(xs, box_w, (first, model, "next\ntoken"),
                                         (_FILL_IO, _FILL_ATTENTION, _FILL_IO), strict=True):
                _box(ax, x, y_box, bw, box_h, text, face=face, fontsize=10)
            for i in (0, 1):
                _arrow(ax, (xs[i] + box_w[i], y_box + box_h / 2), (xs[i + 1],
                       y_box + box_h / 2))
            # The model writes keys and values into the cache, under the slots they fill.
            model_c, mid_y = xs[1] + box_w[1] / 2, y_box - 0.35
            lo, hi = x_grid + written[0] * cell + 0.1, x_grid + written[1] * cell - 0.1
            x_written = model_c if lo <= model_c <= hi else x_written  # straight if it can
            _path_arrow(ax, [(model_c, y_box), (model_c, mid_y), (x_written, mid_y),
                             (x_written, y_cache + 2 * cell)], color="#555555",
                        linewidth=1.2)
            ax.text(model_c + 0.08, y_box - 0.17, what, ha="left", va="center",
                    fontsize=9.5)
            # The cache: K over V, one slot per cached position.
            count = written[1]
            for y, name in ((y_cache + cell, "k"), (y_cache, "v")):
                for j in range(count):
                    _cell(ax, x_grid + j * cell, y, cell, cell,
                          _FILL_PREFILL if writer[j] == 0 else _FILL_DECODE,
                          gid=f"{gid}-{name}-{j}", linewidth=0.8)
                ax.text(x_grid - 0.08, y + cell / 2, name.upper(), ha="right", va="center",
                        fontsize=10)
            ax.text(x_grid + count * cell + 0.1, y_cache + cell,
                    f"cache:\n{_plural(count, 'position')}", ha="left", va="center",
                    fontsize=10, linespacing=1.2).set_gid(f"{gid}-cache-size")
            # Who wrote the slots: a bracket for the prefill, a step number per step.
            y_b, right = y_cache - 0.06, x_grid + P * cell - 0.03
            ax.plot([x_grid + 0.03, x_grid + 0.03, right, right],
                    [y_b, y_b - 0.06, y_b - 0.06, y_b], color=_LINE, linewidth=1)
            wide = P * cell >= 0.6  # room to centre the word under the bracket
            ax.text(x_grid + P * cell / (2 if wide else 1), y_b - 0.1, "prefill",
                    ha="center" if wide else "right", va="top",
                    fontsize=9.5).set_gid("writer-0" if ax is d else None)
        for j in range(P, slots):
            d.text(x_grid + (j + 0.5) * cell, y_cache - 0.16, str(writer[j]), ha="center",
                   va="top", fontsize=9.5).set_gid(f"writer-{j}")
        d.text(x_grid + slots * cell + 0.1, y_cache - 0.16, "decode step", ha="left",
               va="top", fontsize=9.5)
        # Decode's loop: the predicted token is the next step's input.
        tok_c, next_c = 0.15 + box_w[0] / 2, right_w - 0.95 + box_w[2] / 2
        loop_y = y_box + box_h + 0.25
        _path_arrow(d, [(next_c, y_box + box_h), (next_c, loop_y), (tok_c, loop_y),
                        (tok_c, y_box + box_h)])
        d.text((tok_c + next_c) / 2, loop_y + 0.04, "becomes the next input", ha="center",
               va="bottom", fontsize=9.5)
        # Prefill's prediction is the first decode input: an arrow across the divider.
        fig.add_artist(FancyArrowPatch(
            (left_w - 0.15, y_box + box_h / 2), (left_w + 0.15, y_box + box_h / 2),
            transform=fig.dpi_scale_trans, arrowstyle="-|>", mutation_scale=14,
            color=_LINE, linewidth=1.4, shrinkA=0, shrinkB=0))
        d.plot([0.02, 0.02], [0.3, height - 0.3], color="#BBBBBB", linewidth=1)

        # The scores: prefill's causal triangle, then one row per decode step.
        for i in range(P):
            for j in range(P):
                ok = bool(prefill_mask[i, j])
                _cell(p, x_grid + j * cell, top - (i + 1) * cell, cell, cell,
                      _FILL_ALLOWED if ok else _FILL_MASKED,
                      hatch=None if ok else _HATCH_MASKED, gid=f"prefill-cell-{i}-{j}")
            p.text(x_grid - 0.08, top - (i + 0.5) * cell, str(i), ha="right", va="center",
                   fontsize=9)
        p.text(x_grid - 0.35, top - P * cell / 2, "query", rotation=90, ha="right",
               va="center", fontsize=9.5)
        p.text(x_grid + P * cell + 0.1, top - P * cell / 2,
               f"scores {prefill_mask.shape[0]} $\\times$ {prefill_mask.shape[1]}\n"
               "(query $\\times$ key)\n"
               f"causal: {blocked} future\nkeys blocked", ha="left", va="center", fontsize=9.5,
               linespacing=1.2).set_gid("prefill-shape")
        for k, mask in enumerate(step_masks, start=1):
            y = top - k * cell - (k - 1) * gap
            for j in range(mask.shape[1]):
                ok = bool(mask[0, j])
                _cell(d, x_grid + j * cell, y, cell, cell,
                      _FILL_ALLOWED if ok else _FILL_MASKED,
                      hatch=None if ok else _HATCH_MASKED, gid=f"decode-cell-{k}-{j}")
            d.text(x_grid - 0.08, y + cell / 2, f"step {k}", ha="right", va="center",
                   fontsize=9.5)
            d.text(x_grid + mask.shape[1] * cell + 0.1, y + cell / 2,
                   f"{mask.shape[0]} $\\times$ {mask.shape[1]}", ha="left", va="center",
                   fontsize=9.5).set_gid(f"decode-shape-{k}")
        d.text(x_grid, top - n * (cell + gap) - 0.1,
               "each step's query sees every cached\nkey, its own included", ha="left",
               va="top", fontsize=9.5, linespacing=1.2)
    return _check_width(fig)


# --------------------------------------------------------------------------- 14. sinks

_FILL_SINK = _tint(OKABE_ITO[1], 0.55)  # light orange, dotted: kept as a sink
_HATCH_SINK = ".."
_FILL_RECENT = _FILL_ALLOWED  # blue: kept as one of the recent keys
# Evicted: allowed by the causal mask, dropped by the window (light reddish purple, crossed), so
# that grey and hatched keeps its meaning everywhere in the book: the future, forbidden.
_FILL_EVICTED = _FILL_CROSS
_HATCH_EVICTED = "xx"


def _window_style(mask: torch.Tensor, i: int, j: int, sinks: int
                  ) -> tuple[str, str | None, str]:
    """``(face, hatch, kind)`` of cell ``(i, j)``: sink, recent, dropped or future."""
    if j > i:
        return _FILL_MASKED, _HATCH_MASKED, "future"
    if not bool(mask[i, j]):
        return _FILL_EVICTED, _HATCH_EVICTED, "dropped"
    return (_FILL_SINK, _HATCH_SINK, "sink") if j < sinks else (_FILL_RECENT, None, "recent")


def window_with_sinks(length: int = 12, recent: int = 4, sinks: int = 2) -> Figure:
    """The keys a sliding window with attention sinks keeps, and the last query's cache.

    The grid is :func:`attnbook.masks.sliding_window_mask` ``(length, recent,
    sinks=sinks)``: rows are queries, columns keys. A kept key is a *sink* (one of the
    ``sinks`` first tokens; orange, dotted) or *recent* (one of the ``recent`` latest, the
    query's own included; blue); a past key outside both is *evicted* (light purple,
    crossed); the future, above the diagonal, is grey and hatched, as forbidden cells are in
    the book's heatmaps. A legend names the four.

    Under the grid, column for column: the key/value cache of the last query, from a real
    :class:`attnbook.efficient.KVCache` ``(recent=recent, sinks=sinks)`` fed the ``length``
    tokens one at a time (checked against the mask's last row): the sinks, a gap marked
    "evicted", the recent tokens, each slot printing its position, and the count
    ``sinks + recent``. Below it, for comparison, a plain window of the same size, no
    sinks (``sliding_window_mask(length, size)``'s last row), as in the chapter's test.

    gids: grid cells ``cell-i-j`` (patches); cache slots ``cache-j`` and ``plain-j``
    (patches, ``j`` the position) with their numbers ``cache-pos-j`` and ``plain-pos-j``;
    the counts ``cache-size`` and ``plain-size``; the title ``title``.

    Args:
        length: the number of tokens ``L``, from 2 to 24.
        recent: the window's width, the query's own key included, from 1 to ``length``.
        sinks: how many first tokens are always kept, from 0 to ``length - 1``.

    Returns:
        The new figure (one Axes).

    Raises:
        TypeError: if an argument is not an int.
        ValueError: if an argument is out of range.
    """
    L = _require_int("length", length, 2, 24)
    w = _require_int("recent", recent, 1, L)
    s = _require_int("sinks", sinks, 0, L - 1)
    mask = sliding_window_mask(L, w, sinks=s)  # (L, L)
    cache = KVCache(recent=w, sinks=s)
    for _ in range(L):  # decode the L tokens one at a time
        cache.append(torch.zeros(1, 1), torch.zeros(1, 1))
    kept = cache.positions.tolist()
    if kept != mask[-1].nonzero()[:, 0].tolist():  # pragma: no cover - the package's promise
        raise AssertionError("the windowed cache and the mask's last row disagree")
    size, kept_sinks = len(kept), sum(j < s for j in kept)
    plain = sliding_window_mask(L, size)[-1].nonzero()[:, 0].tolist()  # (size,) positions
    kinds = {_window_style(mask, i, j, s)[2] for i in range(L) for j in range(L)}

    cell = min(0.3, 4.8 / L)
    grid_w = L * cell
    x_grid = 0.8
    x_right = x_grid + max(grid_w, 3.0) + 0.35  # the legend and the counts
    width = x_right + 2.45
    legend = [(kind, face, hatch, text) for kind, face, hatch, text in (
        ("sink", _FILL_SINK, _HATCH_SINK, "sink: the first token,\nkept for every later query"
         if s == 1 else f"sink: one of the first {s} tokens,\nkept for every later query"),
        ("recent", _FILL_RECENT, None, "recent: the latest key,\nthe query's own" if w == 1
         else f"recent: the {w} latest keys,\nthe query's own included"),
        ("dropped", _FILL_EVICTED, _HATCH_EVICTED, "evicted: past, outside\nthe window"),
        ("future", _FILL_MASKED, _HATCH_MASKED, "future: blocked by the\ncausal mask")
    ) if kind in kinds]
    region_h = max(L * cell, 0.5 * len(legend))
    row_h = 0.3 + cell + 0.2  # a heading, the slots, a gap
    height = 0.85 + region_h + 0.2 + 2 * row_h + 0.05
    top = height - 0.85  # the grid's top edge
    with mpl.rc_context(book_style()):
        fig = _new_figure(width, height)
        ax = _panel(fig, 0.0, 0.0, width, height)
        ax.text(width / 2, height - 0.12, f"A sliding window: recent = {w}, sinks = {s}",
                ha="center", va="top", fontsize=12, weight="bold").set_gid("title")
        for i in range(L):
            for j in range(L):
                face, hatch, _ = _window_style(mask, i, j, s)
                _cell(ax, x_grid + j * cell, top - (i + 1) * cell, cell, cell, face,
                      hatch=hatch, gid=f"cell-{i}-{j}")
            ax.text(x_grid - 0.07, top - (i + 0.5) * cell, str(i), ha="right",
                    va="center", fontsize=9)
            if cell >= 0.25 or i % 2 == 0:  # every other key when the cells are small
                ax.text(x_grid + (i + 0.5) * cell, top + 0.05, str(i), ha="center",
                        va="bottom", fontsize=9)
        ax.text(x_grid + grid_w / 2, top + 0.28, "key", ha="center", va="bottom",
                fontsize=10)
        ax.text(x_grid - 0.38, top - L * cell / 2, "query", ha="right", va="center",
                rotation=90, fontsize=10)
        for k, (_, face, hatch, text) in enumerate(legend):
            y = top - 0.5 * k - 0.25
            _cell(ax, x_right, y - 0.11, 0.26, 0.22, face, hatch=hatch, linewidth=0.8)
            ax.text(x_right + 0.36, y, text, ha="left", va="center", fontsize=9.5,
                    linespacing=1.15)

        # The cache of the last query, then a plain window of the same size.
        y_row = top - region_h - 0.2 - 0.3 - cell
        for gid, positions, heading, count in (
                ("cache", kept, f"key/value cache of the last query ({L - 1})",
                 f"{_plural(size, 'slot')} = {kept_sinks} sink{'s' * (kept_sinks != 1)}"
                 f" + {size - kept_sinks} recent"),
                ("plain", plain, f"plain window of {size}, no sinks, for comparison",
                 f"{_plural(size, 'slot')} = {size} recent")):
            ax.text(x_grid, y_row + cell + 0.06, heading, ha="left", va="bottom",
                    fontsize=9.5)
            for j in positions:
                face = _FILL_SINK if j < s and gid == "cache" else _FILL_RECENT
                _cell(ax, x_grid + j * cell, y_row, cell, cell, face, gid=f"{gid}-{j}",
                      linewidth=0.8)
                ax.text(x_grid + (j + 0.5) * cell, y_row + cell / 2, str(j), ha="center",
                        va="center", fontsize=9, zorder=3,
                        bbox={"boxstyle": "square,pad=0.05", "facecolor": face,
                              "edgecolor": "none"}).set_gid(f"{gid}-pos-{j}")
            evicted = [j for j in range(L) if j not in positions]
            for start in [j for j in evicted if j - 1 not in evicted]:
                stop = next(j for j in range(start, L + 1) if j not in evicted)
                _add(ax, Rectangle((x_grid + start * cell, y_row), (stop - start) * cell,
                                   cell, facecolor="none", edgecolor="#888888",
                                   linestyle=(0, (3, 2)), linewidth=0.9, zorder=2))
                if (stop - start) * cell >= 0.7:
                    ax.text(x_grid + (start + stop) / 2 * cell, y_row + cell / 2, "evicted",
                            ha="center", va="center", fontsize=9.5, color="#333333")
            ax.text(x_right, y_row + cell / 2,
                    f"{count}\n{len(evicted)} evicted" if evicted else f"{count}\nnothing "
                    "evicted", ha="left", va="center", fontsize=9.5,
                    linespacing=1.15).set_gid(f"{gid}-size")
            y_row -= row_h
    return _check_width(fig)


# --------------------------------------------------------------------------- 14. whisper_model


def whisper_model(config: WhisperConfig | None = None) -> Figure:
    """Whisper: the encoder (left) hears the sound, the decoder (right) writes the text.

    Left, bottom to top: the clip (30 s at 16 kHz), its log-mel spectrogram ``(n_mels,
    2 A)``, two convolutions (the second with stride 2) and the fixed positions, giving
    ``(A, d_model)``; a frame holding one encoder block (self-attention with no mask, the
    MLP), repeated ``encoder_layers`` times; the encoder's output, one vector per 20 ms.
    Right: the token ids ``(T,)``, the embedding and the learned positions; a frame holding
    one decoder block (causal self-attention with its cache, cross-attention, the MLP),
    repeated ``decoder_layers`` times; the final norm and the logits, through the
    embedding table transposed. A thick arrow carries the encoder's output into every
    cross-attention, labelled with the keys' and values' shape per layer, computed once per
    clip. Every block is pre-norm, a LayerNorm before each sublayer and a residual addition
    around it; neither is drawn (a caption should say so).

    Every size printed is read from the tensors of a :class:`attnbook.whisper.Whisper` built
    from ``config`` on PyTorch's ``meta`` device. Gids: ``mel``, ``audio``, ``encoder``,
    ``memory``, ``decoder``, ``logits``; the cross-attention box is ``cross-box``.

    Args:
        config: the model's sizes; ``None`` means tiny.en's.

    Returns:
        The new figure (one Axes).

    Raises:
        TypeError: if ``config`` is not a :class:`~attnbook.whisper.WhisperConfig`.
    """
    if config is None:
        config = WhisperConfig()
    if not isinstance(config, WhisperConfig):
        raise TypeError(f"config must be an attnbook.whisper.WhisperConfig, got "
                        f"{type(config).__name__}")
    with _without_initialisation(), torch.device("meta"):
        model = Whisper(dataclasses.replace(config, encoder_layers=1, decoder_layers=1))
    n_mels = model.conv1.weight.shape[1]
    audio, d_model = model.audio_positions.shape
    frames = audio * model.conv2.stride[0]
    heads, d_head = model.decoder[0].cross.num_heads, model.decoder[0].cross.d_head
    d_ff = model.encoder[0].mlp[0].weight.shape[0]
    vocab, text_positions = model.embed.weight.shape[0], model.text_positions.shape[0]
    seconds = frames // 100  # 100 log-mel frames a second

    width, col_w = 9.6, 3.65
    enc_x, dec_x = 0.2, width - 0.2 - col_w
    enc_c, dec_c = enc_x + col_w / 2, dec_x + col_w / 2
    height = 7.8
    with mpl.rc_context(book_style()):
        fig = _new_figure(width, height)
        ax = _panel(fig, 0.0, 0.0, width, height)
        ax.text(enc_c, height - 0.12, "Encoder: hears the sound", ha="center", va="top",
                fontsize=12, weight="bold")
        ax.text(dec_c, height - 0.12, "Decoder: writes the text", ha="center", va="top",
                fontsize=12, weight="bold")

        def frame(x: float, y: float, h: float, label: str, gid: str) -> None:
            for offset, face, edge in ((0.14, "#F2F2F2", "#AAAAAA"),
                                       (0.07, "#F7F7F7", "#999999"),
                                       (0.0, "#FCFCFC", _EDGE)):
                _add(ax, FancyBboxPatch((x + offset, y + offset), col_w, h,
                                        boxstyle="round,pad=0,rounding_size=0.12",
                                        facecolor=face, edgecolor=edge, linewidth=1.2,
                                        zorder=0.5))
            text = ax.text(x + 0.12, y + h - 0.1, label, ha="left", va="top", fontsize=10.5,
                           weight="bold", zorder=3)
            text.set_gid(gid)

        inner_x, inner_w = 0.2, col_w - 0.4
        # The encoder, bottom to top.
        _box(ax, enc_x, 0.25, col_w, 0.55, f"sound: {seconds} s at 16 kHz\n"
             f"({seconds * 16000:,} samples)", face=_FILL_IO, fontsize=10)
        _box(ax, enc_x, 1.15, col_w, 0.6, f"log-mel spectrogram ({n_mels}, {frames}):\n"
             f"{n_mels} bands, 100 frames a second", face=_FILL_IO, fontsize=10, gid="mel")
        _box(ax, enc_x, 2.1, col_w, 0.6, f"2 convolutions (the 2nd halves the frames)\n"
             f"+ fixed positions: ({audio}, {d_model})", face=_FILL_NORM, fontsize=10,
             gid="audio")
        enc_frame_y, enc_frame_h = 3.05, 2.55
        frame(enc_x, enc_frame_y, enc_frame_h, f"encoder block, $\\times$ "
              f"{config.encoder_layers}", "encoder")
        _box(ax, enc_x + inner_x, enc_frame_y + 0.3, inner_w, 0.7,
             f"self-attention, no mask\n{heads} heads of {d_head} over {audio} positions",
             face=_FILL_ATTENTION, fontsize=9.5)
        _box(ax, enc_x + inner_x, enc_frame_y + 1.3, inner_w, 0.6,
             f"MLP: {d_model} $\\to$ {d_ff} $\\to$ {d_model}", face=_FILL_FFN, fontsize=9.5)
        out_y = enc_frame_y + enc_frame_h + 0.5
        _box(ax, enc_x, out_y, col_w, 0.6, f"encoder output ({audio}, {d_model}):\n"
             f"one vector per 20 ms of sound", face=_FILL_CROSS, fontsize=10)
        for y0, y1 in ((0.8, 1.15), (1.75, 2.1), (2.7, enc_frame_y + 0.3),
                       (enc_frame_y + 1.0, enc_frame_y + 1.3),
                       (enc_frame_y + 1.9, out_y)):
            _arrow(ax, (enc_c, y0), (enc_c, y1))

        # The decoder, bottom to top.
        _box(ax, dec_x, 0.25, col_w, 0.55, "token ids (T,): the prompt\nand the text so far",
             face=_FILL_IO, fontsize=10)
        _box(ax, dec_x, 1.15, col_w, 0.6, f"embedding ({vocab:,} $\\times$ {d_model})\n"
             f"+ learned positions (up to {text_positions})", face=_FILL_NORM, fontsize=10)
        dec_frame_y, dec_frame_h = 2.1, 3.95
        frame(dec_x, dec_frame_y, dec_frame_h, f"decoder block, $\\times$ "
              f"{config.decoder_layers}", "decoder")
        self_y, cross_y, mlp_y = dec_frame_y + 0.3, dec_frame_y + 1.35, dec_frame_y + 2.75
        _box(ax, dec_x + inner_x, self_y, inner_w, 0.7,
             f"causal self-attention, {heads} heads\nover the text (keys in a cache)",
             face=_FILL_ATTENTION, fontsize=9.5)
        _box(ax, dec_x + inner_x, cross_y, inner_w, 0.95,
             f"cross-attention, no mask\nQ: from the text (T, {d_model})\n"
             "K, V: from the sound", face=_FILL_CROSS, fontsize=9.5, gid="cross-box")
        _box(ax, dec_x + inner_x, mlp_y, inner_w, 0.6,
             f"MLP: {d_model} $\\to$ {d_ff} $\\to$ {d_model}", face=_FILL_FFN, fontsize=9.5)
        logits_y = dec_frame_y + dec_frame_h + 0.5
        _box(ax, dec_x, logits_y, col_w, 0.6, f"LayerNorm, embedding transposed:\n"
             f"logits (T, {vocab:,})", face=_FILL_IO, fontsize=10, gid="logits")
        for y0, y1 in ((0.8, 1.15), (1.75, self_y), (self_y + 0.7, cross_y),
                       (cross_y + 0.95, mlp_y), (mlp_y + 0.6, logits_y)):
            _arrow(ax, (dec_c, y0), (dec_c, y1))

        # The sound's keys and values, into every cross-attention.
        join_x = dec_x - 0.3
        start_y, end_y = out_y + 0.3, cross_y + 0.475
        _path_arrow(ax, [(enc_x + col_w, start_y), (join_x, start_y), (join_x, end_y),
                         (dec_x + inner_x, end_y)], color="#CC79A7", linewidth=2.4)
        memory = ax.text((enc_x + col_w + join_x) / 2, (start_y + end_y) / 2 - 0.1,
                         f"K, V per layer:\n{heads} $\\times$ ({audio}, {d_head}),\n"
                         f"computed once\nper clip", ha="center", va="center", fontsize=9.5,
                         color="#A0527F", weight="bold", linespacing=1.3)
        memory.set_gid("memory")
    return _check_width(fig)


# --------------------------------------------------------------------------- 12. chapter_map

_PART_FILLS = (_FILL_ATTENTION, _FILL_FFN, _FILL_NORM, _FILL_CROSS)  # Parts I to IV
_MAX_TITLE_CHARS = 22


def _direct_prerequisites(chapters: Sequence[Chapter]) -> dict[str, list[str]]:
    """Each chapter's prerequisites that no other prerequisite of it already needs: the
    transitive reduction, so that the map draws a line only where no path says it."""
    needs = {chapter.slug: set(chapter.prerequisites) for chapter in chapters}

    def behind(slug: str) -> set[str]:  # every chapter reached through ``slug``'s needs
        found: set[str] = set()
        for other in needs[slug]:
            found |= {other} | behind(other)
        return found

    return {chapter.slug: [slug for slug in chapter.prerequisites
                           if not any(slug in behind(other) for other in needs[chapter.slug]
                                      if other != slug)]
            for chapter in chapters}


def _title_lines(title: str) -> str:
    """The title up to its colon, on at most two lines that fit a box."""
    lines = textwrap.wrap(title.split(":")[0], _MAX_TITLE_CHARS)
    if len(lines) > 2:
        lines = [lines[0], textwrap.shorten(" ".join(lines[1:]), _MAX_TITLE_CHARS,
                                            placeholder=" …")]
    return "\n".join(lines)


def chapter_map(chapters: Sequence[Chapter]) -> Figure:
    """Which chapter needs which: a box per chapter, an arrow from each prerequisite.

    The chapters and their prerequisites come from :func:`attnbook.course.read_course`,
    which reads each chapter's recap, so the map cannot drift from the book. An arrow is
    drawn only where no longer path already leads (the transitive reduction): a chapter
    needs everything above it that arrows lead down from. Row ``r`` holds the chapters whose
    longest chain of prerequisites has ``r`` links, so every arrow points down; a row's
    chapters sit side by side, in the book's order. Each box shows the chapter's number,
    its short title, and its reading and exercise minutes; its fill is its part's.

    gids: boxes ``chapter-<number>``, arrows ``needs-<from>-<to>`` (numbers), each box's
    minutes ``minutes-<number>``.

    Args:
        chapters: the book's chapters, in order, each with ``slug``, ``number``, ``title``,
            ``part``, ``prerequisites`` (earlier chapters' slugs), ``reading_minutes`` and
            ``exercise_minutes``.

    Returns:
        The new figure (one Axes).

    Raises:
        TypeError: if ``chapters`` is not a sequence of chapters.
        ValueError: if it is empty, longer than 20, or a prerequisite is not an earlier
            chapter.
    """
    if not isinstance(chapters, Sequence) or not all(isinstance(c, Chapter) for c in chapters):
        raise TypeError("chapters must be a sequence of attnbook.course.Chapter, as "
                        "read_course returns")
    if not 1 <= len(chapters) <= 20:
        raise ValueError(f"chapters must hold 1 to 20 chapters, got {len(chapters)}")
    order = {chapter.slug: i for i, chapter in enumerate(chapters)}
    for chapter in chapters:
        late = [slug for slug in chapter.prerequisites
                if order.get(slug, len(chapters)) >= order[chapter.slug]]
        if late:
            raise ValueError(f"chapters: {chapter.slug} needs {late}, which are not earlier "
                             f"chapters")
    links = _direct_prerequisites(chapters)
    depth: dict[str, int] = {}
    for chapter in chapters:
        depth[chapter.slug] = 1 + max((depth[slug] for slug in chapter.prerequisites),
                                      default=-1)
    rows: dict[int, list[Chapter]] = {}
    for chapter in chapters:
        rows.setdefault(depth[chapter.slug], []).append(chapter)
    parts = list(dict.fromkeys(chapter.part for chapter in chapters))

    box_w, box_h, gap_x, row_h = 2.6, 0.82, 0.3, 1.12
    columns = max(len(row) for row in rows.values())
    width = columns * box_w + (columns - 1) * gap_x + 0.4
    legend_h = 0.3 * len(parts) + 0.2
    height = len(rows) * row_h + legend_h + 0.2
    centre: dict[str, tuple[float, float]] = {}
    with mpl.rc_context(book_style()):
        fig = _new_figure(width, height)
        ax = _panel(fig, 0.0, 0.0, width, height)
        for r, row in sorted(rows.items()):
            y = height - 0.2 - r * row_h - box_h
            row_w = len(row) * box_w + (len(row) - 1) * gap_x
            for i, chapter in enumerate(row):
                x = (width - row_w) / 2 + i * (box_w + gap_x)
                face = _PART_FILLS[parts.index(chapter.part) % len(_PART_FILLS)]
                _box(ax, x, y, box_w, box_h, face=face, gid=None)
                ax.patches[-1].set_gid(f"chapter-{chapter.number}")
                ax.text(x + 0.1, y + box_h - 0.08, f"{chapter.number}", ha="left", va="top",
                        fontsize=10.5, weight="bold", color=_INK, zorder=3)
                ax.text(x + 0.42, y + box_h - 0.08, _title_lines(chapter.title), ha="left",
                        va="top", fontsize=10.5, weight="bold", color=_INK, zorder=3,
                        linespacing=1.1)
                ax.text(x + 0.1, y + 0.1, f"read {chapter.reading_minutes} min · exercises "
                        f"{chapter.exercise_minutes} min", ha="left", va="bottom",
                        fontsize=9, color=_INK, zorder=3).set_gid(f"minutes-{chapter.number}")
                centre[chapter.slug] = (x + box_w / 2, y)
        number = {chapter.slug: chapter.number for chapter in chapters}
        for chapter in chapters:
            x1, y1 = centre[chapter.slug]
            for slug in links[chapter.slug]:
                x0, y0 = centre[slug]
                if depth[chapter.slug] - depth[slug] == 1:  # from the row above: straight
                    _arrow(ax, (x0, y0), (x1, y1 + box_h), linewidth=1.2)
                else:  # straight down from the chapter, then into the box's side
                    side = x1 + (box_w / 2 if x0 > x1 else -box_w / 2)
                    _path_arrow(ax, [(x0, y0), (x0, y1 + box_h / 2), (side, y1 + box_h / 2)],
                                linewidth=1.2)
                ax.texts[-1].set_gid(f"needs-{number[slug]}-{chapter.number}")
        for k, part in enumerate(parts):  # the legend: one swatch per part
            y = legend_h - 0.3 * (k + 1)
            _add(ax, Rectangle((0.2, y), 0.35, 0.2, facecolor=_PART_FILLS[k % 4],
                               edgecolor=_LINE, linewidth=0.8))
            ax.text(0.65, y + 0.1, part, ha="left", va="center", fontsize=9.5, color=_INK)
    return _check_width(fig)
