"""Four interactive playgrounds, each one self-contained HTML fragment.

- :func:`dot_product_playground`: drag a query and a few keys in the plane (or move them with
  the arrow keys) and watch the scores, the softmax weights and the weighted sum of the values;
  a slider sets the scale of the scores.
- :func:`mask_playground`: allow or forbid the cells of an L x L mask, or pick a preset, and
  watch each row renormalise; a row with no allowed key is zeros, as
  :func:`attnbook.attention.masked_softmax` gives, and a switch shows what a ``-1e9`` fill
  would give instead.
- :func:`multihead_split_playground`: a ``(L, d_model)`` input split into ``h`` heads by
  ``view`` + ``transpose`` and by the buggy ``reshape`` without the transpose, side by side.
- :func:`rope_playground`: one feature pair of a query and a key, rotated by rotary position
  embedding to positions ``m`` and ``n`` (sliders); the score ``q_rot . k_rot`` over all
  features, and a button that shifts both positions: the arrows turn, the score does not.

Each function returns an object that Jupyter and the book (myst-nb) display as HTML: one
fragment with inline CSS and JavaScript, nothing fetched from anywhere, so it works on the
static book page, offline. Its MIME bundle also carries a PNG still picture of the opening
state, which the PDF edition shows; with scripts off, the fragment shows a short static
summary of the same opening state instead of the controls.

Design notes (shared with :mod:`attnbook.explorer`):

- Labels are data, never markup: they travel as JSON inside the script, with ``<``, ``>``,
  ``&`` and ``/`` escaped, and reach the page through ``textContent`` and attributes.
- Every fragment gets a fresh id; all CSS is scoped under ``.attnbook-pg`` and all JavaScript
  lives in one function bound to the fragment's root element.
- The page's numbers are readable by tests: ``data-w`` (weights), ``data-x``/``data-y``
  (positions), ``data-t``/``data-f`` (token and feature of a head's cell), ``data-score``
  and its neighbours (the rotary playground's state) hold full-precision values, and the
  root carries ``data-pg-ready="1"`` once the script has drawn.
- On a narrow screen (a phone's 356 px column) the controls and panels wrap; a table that is
  still too wide scrolls sideways in its own box (``.pg-scroller``), never the page, with a
  note above it and a shadow on the side that has more (``cue()`` in ``common.js``). The dot
  product table puts each key's weight right after its name, so the weights show first.
- The CSS and JavaScript live in ``attnbook/playground_assets/`` and are read with
  :mod:`importlib.resources`.
"""

from __future__ import annotations

import functools
import html
import io
import itertools
import json
import math
import numbers
import re
import secrets
from collections.abc import Iterable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import get_args

import matplotlib as mpl
import numpy as np
import torch

from attnbook.plots import OKABE_ITO, book_style
from attnbook.positions import Layout

__all__ = ["DotProductPlayground", "MaskPlayground", "MultiheadSplitPlayground",
           "RopePlayground", "dot_product_playground", "mask_playground",
           "multihead_split_playground", "rope_playground"]

_COUNTER = itertools.count(1)

#: The magnitude example of the dot-product chapter: the query (3, 1) and four keys.
DEFAULT_QUERY = (3.0, 1.0)
DEFAULT_KEYS = ((3.0, 1.0), (1.5, 0.5), (4.5, 1.5), (2.0, 6.0))
DEFAULT_KEY_LABELS = ("exact match", "short aligned", "long aligned", "long misaligned")
#: Key colours in the order of :data:`DEFAULT_KEYS`, as in that chapter's figure.
KEY_COLOURS = (OKABE_ITO[1], OKABE_ITO[2], OKABE_ITO[0], OKABE_ITO[5], OKABE_ITO[4])
QUERY_COLOUR = "#555555"
OUTPUT_COLOUR = OKABE_ITO[3]
#: The largest coordinate a vector of the dot-product playground may have.
MAX_COORDINATE = 20.0

#: Mask presets: the names the functions take and the buttons' words.
MASK_PRESETS = {
    "none": "none",
    "causal": "causal",
    "upper": "upper triangle (wrong)",
    "padding": "padding at the end",
    "left-padding": "causal + padding at the start",
}
MAX_MASK_LENGTH = 10
DEFAULT_SENTENCE = ("The", "cat", "sat", "on", "the", "mat", "and", "then", "it", "slept")

#: Token colours of the split playground: the multi-head chapter's four, then four more.
TOKEN_COLOURS = (OKABE_ITO[4], OKABE_ITO[1], OKABE_ITO[2], OKABE_ITO[3], OKABE_ITO[6],
                 OKABE_ITO[0], OKABE_ITO[5], "#BBBBBB")
MAX_SPLIT_LENGTH = len(TOKEN_COLOURS)
MAX_D_MODEL = 16

#: The rotary playground's opening query and key: D = 8, one decimal, and in the half-split
#: layout four pairs (f, f + 4) of different lengths and directions.
DEFAULT_ROPE_QUERY = (1.0, 0.5, -0.8, 0.3, 0.2, 0.9, 0.4, -0.6)
DEFAULT_ROPE_KEY = (0.8, -0.3, 0.6, 0.9, 0.6, 0.7, -0.5, 0.4)
ROPE_LAYOUTS = get_args(Layout)
ROPE_QUERY_COLOUR = OKABE_ITO[0]
ROPE_KEY_COLOUR = OKABE_ITO[5]
MAX_ROPE_WIDTH = 128
MAX_ROPE_POSITION = 4096


# ------------------------------------------------------------------------ assets and HTML


@functools.cache
def _asset(name: str) -> str:
    """An asset file, with its ``/* */`` comments, indentation and blank lines removed."""
    text = (files("attnbook") / "playground_assets" / name).read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    lines = [line.strip() for line in text.splitlines()]
    joiner = "" if name.endswith(".css") else "\n"
    return joiner.join(line for line in lines if line)


def _script_json(data: dict) -> str:
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    # Nothing inside the script may close it, open a comment or spell a URL.
    return (text.replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026").replace("/", "\\/"))


def _luminance(colour: str) -> float:
    """WCAG relative luminance of ``#rrggbb``."""
    channels = [int(colour[k:k + 2], 16) / 255 for k in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _ink(colour: str) -> str:
    """Black or white text, whichever contrasts more with ``colour``."""
    y = _luminance(colour)
    return "#000000" if (y + 0.05) / 0.05 >= 1.05 / (y + 0.05) else "#ffffff"


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


# ------------------------------------------------------------------------ argument checks


def _as_float_array(name: str, value: object, what: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        if value.is_complex() or value.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
        return value.detach().to("cpu", torch.float64).numpy()
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiu":
            raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
        return value.astype(np.float64)
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be {what} (a tensor, array or sequence of numbers), "
                        f"got {type(value).__name__}")
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be {what} holding numbers, got {value!r}") from None
    return array


def _check_finite(name: str, array: np.ndarray, limit: float | None = None) -> None:
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite, got {array.tolist()}")
    if limit is not None and array.size and np.abs(array).max() > limit:
        raise ValueError(f"{name} must lie within [-{limit:g}, {limit:g}] (the playground's "
                         f"view), got a coordinate of {np.abs(array).max():g}")


def _count(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return int(value)


def _labels(name: str, values: Iterable[object] | None, size: int,
            default: Sequence[str]) -> list[str]:
    if values is None:
        return list(default)
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of strings, not one {type(values).__name__}")
    try:
        labels = [str(v) for v in values]
    except TypeError:
        raise TypeError(f"{name} must be a sequence of strings, got "
                        f"{type(values).__name__}") from None
    if len(labels) != size:
        raise ValueError(f"{name} has {len(labels)} entries, expected {size}")
    return labels


def _text(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a string or None, got {type(value).__name__}")
    return value


# ------------------------------------------------------------------------ the shared base


class _Playground:
    """What the playgrounds share: HTML, a PNG still, a MIME bundle, ``save``."""

    _kind = ""
    _name = ""

    title: str | None

    def _data(self) -> dict:
        raise NotImplementedError

    def _skeleton(self) -> str:
        raise NotImplementedError

    def _fallback(self) -> str:
        raise NotImplementedError

    def _draw(self, figure: mpl.figure.Figure) -> None:
        raise NotImplementedError

    def to_html(self) -> str:
        """The playground as one self-contained HTML fragment (a fresh element id each call)."""
        uid = f"attnpg-{next(_COUNTER)}-{secrets.token_hex(4)}"
        css = _asset("common.css") + _asset(f"{self._kind}.css")
        data = {"id": uid, "title": self.title, **self._data()}
        script = ('(function () {\n"use strict";\nvar D = ' + _script_json(data) + ";\n"
                  + _asset("common.js") + "\n" + _asset(f"{self._kind}.js") + "\n})();")
        return (f'<div class="attnbook-pg attnbook-pg-{self._kind}" id="{uid}" role="region" '
                f'aria-label="{self._name}"><style>{css}</style>'
                f'<div class="pg-title" hidden></div>'
                f'<div class="pg-nojs">{self._fallback()}</div>'
                f'<div class="pg-live" hidden>{self._skeleton().replace("{uid}", uid)}</div>'
                f"<script>{script}</script></div>")

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_png(self) -> bytes:
        """A still picture of the opening state, for print (drawn without pyplot)."""
        if getattr(self, "_png", None) is None:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure

            with mpl.rc_context(book_style()):
                figure = Figure(figsize=(8.0, 3.6))
                FigureCanvasAgg(figure)
                self._draw(figure)
                buffer = io.BytesIO()
                figure.savefig(buffer, format="png", dpi=150)
            self._png = buffer.getvalue()
        return self._png

    def _repr_png_(self) -> bytes:
        return self.to_png()

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict:
        """HTML for the web page, a PNG for print (the LaTeX builder picks it), plain text."""
        return {"text/html": self.to_html(), "image/png": self.to_png(),
                "text/plain": repr(self)}

    def save(self, path: str | Path) -> Path:
        """Write a standalone HTML document holding the playground; returns the path."""
        path = Path(path)
        document = (
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{_esc(self.title or self._name)}</title>\n</head>\n"
            f"<body style=\"margin:16px\">\n{self.to_html()}\n</body>\n</html>\n"
        )
        path.write_text(document, encoding="utf-8")
        return path


def _note(figure: mpl.figure.Figure, text: str) -> None:
    figure.text(0.5, 0.01, text, ha="center", va="bottom", fontsize=8.5, style="italic",
                wrap=True)


# ------------------------------------------------------------------- 1. dot products


class DotProductPlayground(_Playground):
    """A query and keys in the plane, their softmax weights and the output; see
    :func:`dot_product_playground`.

    Attributes: ``query`` (2,), ``keys`` (S, 2), ``values`` (S, 2) or None (the values are
    the keys), float64 arrays; ``scale``; ``labels``, ``query_label``, ``title``.
    """

    _kind = "dot"
    _name = "Dot-product playground"

    def __init__(self, query: object, keys: object, values: object, scale: object,
                 labels: Iterable[object] | None, query_label: object,
                 title: object) -> None:
        q = _as_float_array("query", query, "a 2-D vector")
        if q.shape != (2,):
            raise ValueError(f"query must be one 2-D vector, shape (2,), got shape {q.shape}")
        _check_finite("query", q, MAX_COORDINATE)
        k = _as_float_array("keys", keys, "S 2-D keys")
        if k.ndim != 2 or k.shape[1] != 2 or not 1 <= k.shape[0] <= len(KEY_COLOURS):
            raise ValueError(f"keys must have shape (S, 2) with 1 <= S <= {len(KEY_COLOURS)}, "
                             f"got shape {k.shape}")
        _check_finite("keys", k, MAX_COORDINATE)
        v = None
        if values is not None:
            v = _as_float_array("values", values, "S 2-D values")
            if v.shape != k.shape:
                raise ValueError(f"values must have the shape of keys, {k.shape}, got "
                                 f"shape {v.shape}")
            _check_finite("values", v, MAX_COORDINATE)
        if scale is None:
            scale = 1.0 / math.sqrt(2)
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
            raise TypeError(f"scale must be a positive real number or None, got "
                            f"{type(scale).__name__}")
        if not 1e-3 <= float(scale) <= 1e3:
            raise ValueError(f"scale must be between 0.001 and 1000 (positive: it multiplies "
                             f"the scores), got {scale}")
        default = DEFAULT_KEY_LABELS if keys is DEFAULT_KEYS else \
            [f"k{j}" for j in range(k.shape[0])]
        self.labels = _labels("labels", labels, k.shape[0], default)
        if not isinstance(query_label, str):
            raise TypeError(f"query_label must be a string, got {type(query_label).__name__}")
        self.query_label = query_label
        self.title = _text("title", title)
        self.query, self.keys, self.values, self.scale = q, k, v, float(scale)
        self._png = None

    def __repr__(self) -> str:
        return (f"DotProductPlayground(query={self.query.tolist()}, {len(self.keys)} keys, "
                f"scale={self.scale:.4g})")

    def opening_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(scores, weights, output)`` of the opening state, by the package's attention.

        scores ``(S,)`` are ``scale * q . k_j``, weights ``(S,)`` their softmax, output
        ``(2,)`` the weighted sum of the values.
        """
        from attnbook.attention import attention, attention_scores

        q = torch.from_numpy(self.query)[None]  # (1, 2)
        k = torch.from_numpy(self.keys)  # (S, 2)
        v = k if self.values is None else torch.from_numpy(self.values)  # (S, 2)
        output, weights = attention(q, k, v, scale=self.scale)
        scores = attention_scores(q, k, self.scale)
        return scores[0].numpy(), weights[0].numpy(), output[0].numpy()

    def _view(self) -> tuple[int, int]:
        """The square view ``[lo, hi]`` on both axes: every vector, with room to move."""
        points = np.concatenate([self.query, self.keys.ravel()] + (
            [] if self.values is None else [self.values.ravel()]))
        lo = min(-2, math.floor(1.2 * float(points.min())))
        hi = max(3, math.ceil(1.2 * float(points.max())))
        return lo, hi

    def _data(self) -> dict:
        low = min(-2.0, math.floor(100 * math.log10(self.scale)) / 100)
        high = max(1.5, math.ceil(100 * math.log10(self.scale)) / 100)
        return {
            "q": self.query.tolist(), "keys": self.keys.tolist(),
            "values": None if self.values is None else self.values.tolist(),
            "labels": self.labels, "qLabel": self.query_label,
            "scale": self.scale, "dk": 2, "lo": self._view()[0], "hi": self._view()[1],
            "sliderMin": low, "sliderMax": high,
            "colours": list(KEY_COLOURS[:len(self.keys)]), "qColour": QUERY_COLOUR,
            "outColour": OUTPUT_COLOUR,
        }

    def _skeleton(self) -> str:
        values = ("the values are the keys" if self.values is None else
                  "the values are the fixed diamonds v0, v1, ...")
        return f"""\
<div class="pg-controls">
<span class="pg-ctl"><label for="{{uid}}-scale">Scale c</label>
<input type="range" id="{{uid}}-scale" class="pg-scale" step="0.01" \
aria-describedby="{{uid}}-scale-out">
<output class="pg-scale-out" id="{{uid}}-scale-out" for="{{uid}}-scale"></output></span>
<span class="pg-group"><button type="button" class="pg-sqrt">c = 1/\u221a2 \
(1/\u221ad\u2096)</button><button type="button" class="pg-one">c = 1</button>\
<button type="button" class="pg-reset">Reset</button></span>
</div>
<div class="pg-main">
<div class="pg-plot">
<svg class="pg-svg" role="group" aria-label="The query and the keys as arrows from the origin" \
aria-describedby="{{uid}}-help"></svg>
<div class="pg-legend" aria-hidden="true"><span><span class="pg-line pg-line-q"></span>query\
</span><span><span class="pg-line pg-line-o"></span>output</span><span><span class="pg-line">\
</span>keys, coloured as in the table</span></div>
<div class="pg-help" id="{{uid}}-help">Drag a dot; or press Tab to reach one and move it with \
the arrow keys (steps of 0.1, or 1 with Shift); Tab reaches the keys, then the query. \
The dashed arrow is the output.</div>
</div>
<div class="pg-side">
<div class="pg-vecline">query q = <strong class="pg-qxy"></strong></div>
<p class="pg-cue" hidden>The table scrolls sideways: k, q\u00b7k and the score \
\u2192</p>
<div class="pg-scroll"><div class="pg-scroller" role="group" aria-label="Weights and scores \
of the keys">
<table class="pg-table">
<thead><tr><th scope="col">key</th><th scope="col">weight</th>\
<th scope="col" class="pg-num">k</th><th scope="col" class="pg-num">q\u00b7k</th>\
<th scope="col" class="pg-num">score c\u00b7q\u00b7k</th></tr></thead>
<tbody class="pg-tbody"></tbody>
</table>
</div></div>
<div class="pg-vecline">output \u03a3<sub>j</sub> w<sub>j</sub> v<sub>j</sub> = \
<strong class="pg-outxy"></strong> ({values})</div>
<div class="pg-say" aria-live="polite"></div>
</div>
</div>"""

    def _fallback(self) -> str:
        scores, weights, output = self.opening_state()
        rows = "".join(
            f"<tr><th scope=\"row\">{_esc(name)}</th><td>({x:.1f}, {y:.1f})</td>"
            f"<td class=\"pg-num\">{s:.3f}</td><td class=\"pg-num\">{w:.4f}</td></tr>"
            for name, (x, y), s, w in zip(self.labels, self.keys, scores, weights, strict=True))
        return (f"<p class=\"pg-nojs-note\">An interactive playground (it needs JavaScript). "
                f"Its opening state: the query {_esc(self.query_label)} = "
                f"({self.query[0]:.1f}, {self.query[1]:.1f}), scale c = {self.scale:.4g}.</p>"
                f"<table><thead><tr><th scope=\"col\">key</th><th scope=\"col\">k</th>"
                f"<th scope=\"col\">score</th><th scope=\"col\">weight</th></tr></thead>"
                f"<tbody>{rows}</tbody></table><p>Output: ({output[0]:.2f}, "
                f"{output[1]:.2f}).</p>")

    def _draw(self, figure: mpl.figure.Figure) -> None:
        from attnbook.plots import plot_vectors_2d

        scores, weights, output = self.opening_state()
        ax_vec, ax_bar = figure.subplots(1, 2, gridspec_kw={"width_ratios": [1, 0.9]})
        colours = list(KEY_COLOURS[:len(self.keys)])
        vectors = np.vstack([self.query[None], self.keys, output[None]])
        names = ([f"query {self.query_label}"] + self.labels + ["output"])
        plot_vectors_2d(vectors, names, ax=ax_vec,
                        colors=[QUERY_COLOUR] + colours + [OUTPUT_COLOUR],
                        widths=[0.02] + [0.012] * len(self.keys) + [0.016])
        if self.values is not None:
            ax_vec.scatter(self.values[:, 0], self.values[:, 1], marker="D", s=30,
                           c=colours, zorder=9)
        ax_vec.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                      framealpha=0.95)
        ax_vec.set_title("Query, keys and output", fontsize=10)
        positions = np.arange(len(self.keys))[::-1]
        ax_bar.barh(positions, weights, color=colours)
        ax_bar.set_yticks(positions, self.labels, fontsize=8)
        ax_bar.set_xlim(0, 1.18)
        for y, w in zip(positions, weights, strict=True):
            ax_bar.text(w + 0.02, y, f"{w:.3f}", va="center", fontsize=8)
        ax_bar.set_xlabel("softmax weight")
        ax_bar.set_title(f"Weights at scale c = {self.scale:.3g}", fontsize=10)
        figure.tight_layout(rect=(0, 0.07, 1, 1))
        _note(figure, "Print edition: the playground's opening state. Online, the reader "
                      "drags the vectors and sets the scale with a slider.")


def dot_product_playground(query: object = DEFAULT_QUERY, keys: object = DEFAULT_KEYS,
                           values: object = None, scale: float | None = None, *,
                           labels: Iterable[object] | None = None, query_label: str = "q",
                           title: str | None = None) -> DotProductPlayground:
    """An interactive playground of one query attending over a few keys in 2-D.

    The reader drags the query and the keys (or focuses one and moves it with the arrow
    keys) and sees, live, the scores ``c * q . k_j``, the softmax weights as bars and the
    output ``sum_j w_j v_j`` as a dashed arrow; a slider sets the scale ``c`` (1/c is the
    temperature), and buttons reset it to ``1/sqrt(d_k) = 1/sqrt(2)`` or to 1. Positions
    snap to multiples of 0.1.

    Args:
        query: the query, shape ``(2,)``; by default ``(3, 1)``.
        keys: ``S`` keys, shape ``(S, 2)`` with ``1 <= S <= 5``; by default the four keys
            of the magnitude example (exact match, short aligned, long aligned, long
            misaligned).
        values: ``(S, 2)`` fixed values, drawn as diamonds; None (the default) makes every
            value its key, so the output moves with the keys.
        scale: the opening scale ``c``, between 0.001 and 1000; None means ``1/sqrt(2)``.
        labels: the ``S`` key names; query_label: the query's name; title: a title.

    Returns:
        A :class:`DotProductPlayground` (HTML in Jupyter and the book, a PNG in print).

    Raises:
        TypeError: a vector that is not a tensor, array or sequence of numbers; a scale that
            is not a real number; labels that are one string.
        ValueError: wrong shapes, non-finite or out-of-view coordinates (beyond +-20), a
            scale out of range, the wrong number of labels.
    """
    return DotProductPlayground(query, keys, values, scale, labels, query_label, title)


# ------------------------------------------------------------------------- 2. masks


def _default_scores(length: int) -> np.ndarray:
    """A fixed, varied score matrix (one decimal), the same on every machine."""
    i, j = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
    return np.round(2.0 * np.sin(1.3 * i + 2.1 * j + 0.25 * i * j + 0.5), 1)


class MaskPlayground(_Playground):
    """An L x L mask to edit and the weights it gives; see :func:`mask_playground`.

    Attributes: ``scores`` (L, L) float64; ``tokens``; ``preset``; ``pad`` (the number of
    padding tokens of the padding presets); ``title``.
    """

    _kind = "mask"
    _name = "Mask playground"

    def __init__(self, length: object, scores: object, tokens: Iterable[object] | None,
                 preset: object, title: object) -> None:
        if scores is None:
            size = 5 if length is None else _count("length", length, 1, MAX_MASK_LENGTH)
            matrix = _default_scores(size)
        else:
            matrix = _as_float_array("scores", scores, "an (L, L) matrix")
            if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
                raise ValueError(f"scores must be a square (L, L) matrix, got shape "
                                 f"{matrix.shape}")
            size = matrix.shape[0]
            if length is not None and _count("length", length, 1, MAX_MASK_LENGTH) != size:
                raise ValueError(f"length is {length} but scores has shape {matrix.shape}; "
                                 f"leave length out to take it from scores")
            _count("L (the size of scores)", size, 1, MAX_MASK_LENGTH)
            _check_finite("scores", matrix)
            if np.abs(matrix).max() > 1e3:
                raise ValueError(f"scores must lie within [-1000, 1000], so that a -1e9 fill "
                                 f"stays far below them; got {np.abs(matrix).max():g}")
        if not isinstance(preset, str) or preset not in MASK_PRESETS:
            raise ValueError(f"preset must be one of {', '.join(map(repr, MASK_PRESETS))}, "
                             f"got {preset!r}")
        self.scores = matrix
        self.tokens = _labels("tokens", tokens, size, DEFAULT_SENTENCE[:size])
        self.preset = preset
        self.pad = 0 if size == 1 else max(1, round(0.4 * size))
        self.title = _text("title", title)
        self._png = None

    def __repr__(self) -> str:
        return f"MaskPlayground(L={len(self.tokens)}, preset={self.preset!r})"

    def preset_mask(self, preset: str | None = None) -> torch.Tensor:
        """The ``(L, L)`` boolean mask of a preset (True = may attend), from attnbook.masks."""
        from attnbook.masks import causal_mask, padding_mask

        name = self.preset if preset is None else preset
        size = len(self.tokens)
        if name not in MASK_PRESETS:
            raise ValueError(f"preset must be one of {', '.join(map(repr, MASK_PRESETS))}, "
                             f"got {name!r}")
        padded = padding_mask([size - self.pad], size)[0]  # (1, L): pads at the end
        return {
            "none": torch.ones(size, size, dtype=torch.bool),
            "causal": causal_mask(size),
            "upper": causal_mask(size).T,  # the wrong mask: triu, the diagonal included
            "padding": padded.expand(size, size),
            "left-padding": padded.flip(-1) & causal_mask(size),
        }[name]

    def opening_weights(self) -> np.ndarray:
        """The ``(L, L)`` weights under the opening preset, by the package's masked softmax."""
        from attnbook.attention import masked_softmax

        return masked_softmax(torch.from_numpy(self.scores), self.preset_mask()).numpy()

    def _data(self) -> dict:
        from attnbook.explorer import weight_colour

        lut = "".join(weight_colour(k / 255)[1:] for k in range(256))
        return {"L": len(self.tokens), "scores": self.scores.ravel().tolist(),
                "tokens": self.tokens, "preset": self.preset, "pad": self.pad, "lut": lut}

    def _skeleton(self) -> str:
        buttons = "".join(f'<button type="button" class="pg-preset" data-preset="{key}" '
                          f'aria-pressed="false">{_esc(words)}</button>'
                          for key, words in MASK_PRESETS.items())
        return f"""\
<div class="pg-controls">
<span class="pg-group" role="group" aria-labelledby="{{uid}}-presets">\
<span class="pg-group-name" id="{{uid}}-presets">Preset</span>{buttons}</span>
<span class="pg-ctl"><input type="checkbox" id="{{uid}}-fill" class="pg-fill">\
<label for="{{uid}}-fill">Fill forbidden scores with \u22121e9 instead</label></span>
</div>
<p class="pg-cue" hidden>The grid scrolls sideways: more keys and the row totals \u2192</p>
<div class="pg-scroll"><div class="pg-scroller" role="group" aria-label="The mask and its \
weights"><table class="pg-grid" aria-describedby="{{uid}}-help"></table></div></div>
<div class="pg-help" id="{{uid}}-help">Each cell is the weight of a query (row) on a key \
(column). Click a cell, or press Tab to reach the grid, move with the arrow keys and press \
Space, to allow or forbid that key for that query. Each row renormalises over its allowed keys.\
</div>
<div class="pg-legend" aria-hidden="true"><span><span class="pg-key pg-key-off"></span>\
forbidden (weight 0)</span><span><span class="pg-key pg-key-leak"></span>forbidden, but \
weighted by a \u22121e9 fill</span><span>allowed: coloured by weight, 0 (dark) to 1 (light)\
</span></div>
<div class="pg-say" aria-live="polite"></div>"""

    def _fallback(self) -> str:
        weights = self.opening_weights()
        head = "".join(f'<th scope="col">{_esc(t)}</th>' for t in self.tokens)
        rows = "".join(
            f'<tr><th scope="row">{_esc(t)}</th>'
            + "".join(f'<td class="pg-num">{w:.2f}</td>' for w in row) + "</tr>"
            for t, row in zip(self.tokens, weights, strict=True))
        return (f'<p class="pg-nojs-note">An interactive playground (it needs JavaScript). '
                f"The weights under the {_esc(MASK_PRESETS[self.preset])} mask (rows: queries, "
                f"columns: keys):</p><table><thead><tr><th></th>{head}</tr></thead>"
                f"<tbody>{rows}</tbody></table>")

    def _draw(self, figure: mpl.figure.Figure) -> None:
        from attnbook.plots import draw_heatmap, shade_masked

        weights, mask = self.opening_weights(), self.preset_mask()
        ax = figure.subplots()
        draw_heatmap(ax, weights, self.tokens, annotate=True,
                     title=f"Weights under the {MASK_PRESETS[self.preset]} mask")
        shade_masked(ax, mask, weights)
        figure.tight_layout(rect=(0, 0.07, 1, 1))
        _note(figure, "Print edition: the opening state (hatched cells are forbidden). "
                      "Online, the reader edits the mask cell by cell.")


def mask_playground(length: int | None = None, scores: object = None, *,
                    tokens: Iterable[object] | None = None, preset: str = "causal",
                    title: str | None = None) -> MaskPlayground:
    """An interactive mask: click cells to allow or forbid them and watch the rows renormalise.

    Each cell is a button showing the weight of query ``i`` (row) on key ``j`` (column);
    pressing it toggles whether the key is allowed. Presets set the whole mask: none, causal,
    the wrong upper triangle, padding at the end, and causal with padding at the start (whose
    first rows have no allowed key). A row with no allowed key shows zeros, as
    :func:`attnbook.attention.masked_softmax` gives; a switch shows the weights a ``-1e9``
    fill would give instead (on such a row, the same weight on every forbidden key).

    Args:
        length: ``L``, from 1 to 10; default 5, or the size of ``scores``.
        scores: the ``(L, L)`` scores, finite, within +-1000; by default a fixed varied
            matrix with one decimal.
        tokens: ``L`` labels; by default the first words of "The cat sat on the mat...".
        preset: the opening mask: ``"none"``, ``"causal"``, ``"upper"``, ``"padding"`` or
            ``"left-padding"``.
        title: a title shown above the playground.

    Returns:
        A :class:`MaskPlayground`.

    Raises:
        TypeError: ``length`` not an int, ``scores`` not numbers, ``tokens`` one string.
        ValueError: ``length`` out of range or not the size of ``scores``, ``scores`` not
            square or not finite, an unknown ``preset``, the wrong number of tokens.
    """
    return MaskPlayground(length, scores, tokens, preset, title)


# -------------------------------------------------------------------- 3. head splits


def _split_entries(length: int, d_model: int, num_heads: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(correct, buggy)``, each ``(h, L, d_head)``, of the entry ``d_model * t + f``."""
    x = torch.arange(length * d_model).reshape(length, d_model)  # (L, d_model)
    d_head = d_model // num_heads
    correct = x.view(length, num_heads, d_head).transpose(0, 1)  # (h, L, d_head)
    buggy = x.reshape(num_heads, length, d_head)  # (h, L, d_head), no transpose
    return correct, buggy


class MultiheadSplitPlayground(_Playground):
    """An input split into heads, correctly and by the classic bug; see
    :func:`multihead_split_playground`.

    Attributes: ``length``, ``d_model``, ``num_heads`` (the opening values); ``tokens`` (the
    labels of up to ``max_length`` tokens); ``title``.
    """

    _kind = "split"
    _name = "Multi-head split playground"

    def __init__(self, length: object, d_model: object, num_heads: object,
                 tokens: Iterable[object] | None, title: object) -> None:
        self.d_model = _count("d_model", d_model, 1, MAX_D_MODEL)
        if isinstance(num_heads, bool) or not isinstance(num_heads, numbers.Integral):
            raise TypeError(f"num_heads must be an int, got {type(num_heads).__name__}")
        if num_heads < 1 or self.d_model % num_heads:
            raise ValueError(f"num_heads must be a positive divisor of d_model={self.d_model}, "
                             f"got {num_heads}")
        self.num_heads = int(num_heads)
        if tokens is None:
            self.tokens = list(DEFAULT_SENTENCE[:MAX_SPLIT_LENGTH])
        else:
            if isinstance(tokens, (str, bytes)):
                raise TypeError(f"tokens must be a sequence of strings, not one "
                                f"{type(tokens).__name__}")
            try:
                self.tokens = [str(t) for t in tokens]
            except TypeError:
                raise TypeError(f"tokens must be a sequence of strings, got "
                                f"{type(tokens).__name__}") from None
            if not 1 <= len(self.tokens) <= MAX_SPLIT_LENGTH:
                raise ValueError(f"tokens must hold 1 to {MAX_SPLIT_LENGTH} labels (the most "
                                 f"the reader can pick), got {len(self.tokens)}")
        self.length = _count("length", length, 1, len(self.tokens))
        self.title = _text("title", title)
        self._png = None

    @property
    def max_length(self) -> int:
        """The largest ``L`` the reader can pick: the number of token labels."""
        return len(self.tokens)

    def __repr__(self) -> str:
        return (f"MultiheadSplitPlayground(L={self.length}, d_model={self.d_model}, "
                f"num_heads={self.num_heads})")

    def _data(self) -> dict:
        colours = list(TOKEN_COLOURS[:self.max_length])
        return {"L": self.length, "dm": self.d_model, "h": self.num_heads,
                "maxL": self.max_length, "tokens": self.tokens, "colours": colours,
                "ink": [_ink(c) for c in colours]}

    def _skeleton(self) -> str:
        return """\
<div class="pg-controls">
<span class="pg-ctl"><label for="{uid}-h">Heads h</label>\
<select id="{uid}-h" class="pg-h"></select></span>
<span class="pg-ctl"><label for="{uid}-l">Tokens L</label>\
<input type="number" id="{uid}-l" class="pg-l" step="1" inputmode="numeric"></span>
</div>
<p class="pg-note" aria-live="polite" hidden></p>
<p class="pg-cue" hidden>The table scrolls sideways: more features \u2192</p>
<div class="pg-scroll"><div class="pg-input pg-scroller" role="group" aria-label="The input \
x"></div></div>
<div class="pg-panels">
<div class="pg-panel pg-correct"><div class="pg-panel-title">view + transpose (correct)</div>\
<div class="pg-panel-code"><code>x.view(L, h, d_head).transpose(0, 1)</code></div>\
<p class="pg-cue" hidden>The heads scroll sideways \u2192</p><div class="pg-scroll">\
<div class="pg-heads pg-scroller" role="group" aria-label="The heads of view + transpose">\
</div></div><p class="pg-say pg-what"></p></div>
<div class="pg-panel pg-buggy"><div class="pg-panel-title">reshape without the transpose \
(buggy)</div><div class="pg-panel-code"><code>x.reshape(h, L, d_head)</code></div>\
<p class="pg-cue" hidden>The heads scroll sideways \u2192</p><div class="pg-scroll">\
<div class="pg-heads pg-scroller" role="group" aria-label="The heads of the buggy reshape">\
</div></div><p class="pg-say pg-what"></p><p class="pg-cut" hidden></p></div>
</div>
<div class="pg-legend"></div>"""

    def _fallback(self) -> str:
        correct, buggy = _split_entries(self.length, self.d_model, self.num_heads)
        d_head = self.d_model // self.num_heads
        owners = sorted({int(e) // self.d_model for e in buggy[0].flatten()})
        return (f'<p class="pg-nojs-note">An interactive playground (it needs JavaScript). '
                f"With L = {self.length} tokens, d_model = {self.d_model} and h = "
                f"{self.num_heads} heads, view + transpose gives head 0 features 0 to "
                f"{d_head - 1} of every token; the reshape without the transpose gives head 0 "
                f"only token{'s' * (len(owners) > 1)} "
                f"{', '.join(map(str, owners))}.</p>")

    def _draw(self, figure: mpl.figure.Figure) -> None:
        from matplotlib.colors import ListedColormap

        correct, buggy = _split_entries(self.length, self.d_model, self.num_heads)
        h = self.num_heads
        colours = ListedColormap(list(TOKEN_COLOURS[:self.length]))
        x = torch.arange(self.length * self.d_model).reshape(self.length, self.d_model)
        grid = figure.add_gridspec(2, 2 * h, height_ratios=[1, 1])
        panels = [(figure.add_subplot(grid[0, :]), x, "x, one row per token")]
        for name, split, offset in (("correct", correct, 0), ("buggy", buggy, h)):
            for head in range(h):
                panels.append((figure.add_subplot(grid[1, offset + head]), split[head],
                               f"{name}, head {head}"))
        for ax, entries, heading in panels:
            tokens = entries // self.d_model
            ax.imshow(tokens.numpy(), cmap=colours, vmin=-0.5, vmax=self.length - 0.5,
                      aspect="auto")
            for (r, c), entry in np.ndenumerate(entries.numpy()):
                t, f = divmod(int(entry), self.d_model)
                ax.text(c, r, f"t{t}f{f}", ha="center", va="center", fontsize=6.5,
                        color=_ink(TOKEN_COLOURS[t]))
            rows, cols = entries.shape
            ax.set_xticks(np.arange(cols + 1) - 0.5, minor=True)
            ax.set_yticks(np.arange(rows + 1) - 0.5, minor=True)
            ax.grid(which="minor", color="white", linewidth=1.0)
            ax.tick_params(which="both", length=0, labelbottom=False, labelleft=False)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(heading, fontsize=8.5)
        figure.tight_layout(rect=(0, 0.07, 1, 1))
        _note(figure, f"Print edition: L = {self.length}, d_model = {self.d_model}, h = {h}. "
                      "Online, the reader picks h and L.")


def multihead_split_playground(length: int = 4, d_model: int = 8, num_heads: int = 2, *,
                               tokens: Iterable[object] | None = None,
                               title: str | None = None) -> MultiheadSplitPlayground:
    """An interactive picture of splitting ``(L, d_model)`` into heads, right and wrong.

    The input's entry at token ``t``, feature ``f`` is drawn as ``t<t>f<f>`` in token ``t``'s
    colour. Beside each other: the correct split (``view(L, h, d_head)`` then
    ``transpose(0, 1)``, as :meth:`attnbook.layers.MultiHeadAttention.split_heads` does) and
    the classic bug (``reshape(h, L, d_head)`` with no transpose). The reader picks ``h``
    among the divisors of ``d_model`` and ``L`` from 1 to the number of tokens.

    Args:
        length: the opening ``L``, from 1 to ``len(tokens)``.
        d_model: the model width, from 1 to 16 (fixed in the page).
        num_heads: the opening ``h``; must divide ``d_model``.
        tokens: 1 to 8 token labels (the largest ``L`` is their number); by default the
            first eight words of "The cat sat on the mat and then...".
        title: a title shown above the playground.

    Returns:
        A :class:`MultiheadSplitPlayground`.

    Raises:
        TypeError: a count that is not an int, ``tokens`` that is one string.
        ValueError: a count out of range, ``num_heads`` not dividing ``d_model``, too many
            or too few tokens.
    """
    return MultiheadSplitPlayground(length, d_model, num_heads, tokens, title)


# ------------------------------------------------------------------ 4. rotary positions


def _signed(value: float, digits: int) -> str:
    """``value`` to ``digits`` decimals, never ``-0.000``."""
    text = f"{value:.{digits}f}"
    return text[1:] if float(text) == 0 and text.startswith("-") else text


class RopePlayground(_Playground):
    """One feature pair of a query and a key, rotated to positions ``m`` and ``n``; see
    :func:`rope_playground`.

    Attributes: ``query`` and ``key`` ``(D,)`` float64 arrays; ``base``; ``layout``;
    ``position_q``, ``position_k`` and ``pair`` (the opening ``m``, ``n`` and ``i``);
    ``max_position``; ``title``.
    """

    _kind = "rope"
    _name = "Rotary position playground"

    def __init__(self, query: object, key: object, base: object, position_q: object,
                 position_k: object, pair: object, max_position: object, layout: object,
                 title: object) -> None:
        q = _as_float_array("query", query, "a vector of even width D")
        if q.ndim != 1 or q.shape[0] % 2 or not 2 <= q.shape[0] <= MAX_ROPE_WIDTH:
            raise ValueError(f"query must be one vector of even width D, shape (D,) with "
                             f"2 <= D <= {MAX_ROPE_WIDTH}, got shape {q.shape}")
        _check_finite("query", q)
        k = _as_float_array("key", key, "a vector of even width D")
        if k.shape != q.shape:
            raise ValueError(f"key must have the shape of query, {q.shape}, got shape "
                             f"{k.shape}")
        _check_finite("key", k)
        if isinstance(base, bool) or not isinstance(base, numbers.Real):
            raise TypeError(f"base must be a real number > 1, got {type(base).__name__}")
        if not math.isfinite(base) or base <= 1:
            raise ValueError(f"base must be a finite number > 1, got {base}")
        if not isinstance(layout, str) or layout not in ROPE_LAYOUTS:
            raise ValueError(f"layout must be {' or '.join(map(repr, ROPE_LAYOUTS))}, got "
                             f"{layout!r}")
        self.max_position = _count("max_position", max_position, 1, MAX_ROPE_POSITION)
        self.position_q = _count("position_q", position_q, 0, self.max_position)
        self.position_k = _count("position_k", position_k, 0, self.max_position)
        self.pair = _count("pair", pair, 0, q.shape[0] // 2 - 1)
        self.title = _text("title", title)
        self.query, self.key, self.base, self.layout = q, k, float(base), layout
        self._png = None

    def __repr__(self) -> str:
        return (f"RopePlayground(D={len(self.query)}, m={self.position_q}, "
                f"n={self.position_k}, pair={self.pair}, layout={self.layout!r})")

    def pair_features(self) -> torch.Tensor:
        """The ``(D/2, 2)`` feature indices of each pair in this layout.

        Half-split: pair ``i`` is ``(i, i + D/2)``, the consecutive entries of
        :func:`attnbook.positions.interleaved_order`; interleaved: ``(2i, 2i + 1)``.
        """
        from attnbook.positions import interleaved_order

        width = len(self.query)
        if self.layout == "half-split":
            return interleaved_order(width).view(width // 2, 2)  # (D/2, 2)
        return torch.arange(width).view(width // 2, 2)  # (D/2, 2)

    def frequencies(self) -> np.ndarray:
        """``theta_i = base ** (-2i / D)``, ``(D/2,)`` float64, from the package."""
        from attnbook.positions import rope_frequencies

        return rope_frequencies(len(self.query), self.base, dtype=torch.float64).numpy()

    def rotated(self, position_q: int | None = None, position_k: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """The query at ``position_q`` and the key at ``position_k`` (default: the opening
        positions), each ``(D,)``, rotated by :func:`attnbook.positions.rope`.

        Raises:
            TypeError, ValueError: a position that is not an int >= 0.
        """
        from attnbook.positions import rope

        m = self.position_q if position_q is None else _count("position_q", position_q, 0,
                                                              10 ** 9)
        n = self.position_k if position_k is None else _count("position_k", position_k, 0,
                                                              10 ** 9)
        q = rope(torch.from_numpy(self.query)[None], torch.tensor([m]), self.base,
                 layout=self.layout)  # (1, D)
        k = rope(torch.from_numpy(self.key)[None], torch.tensor([n]), self.base,
                 layout=self.layout)  # (1, D)
        return q[0].numpy(), k[0].numpy()

    def shares(self, position_q: int | None = None, position_k: int | None = None
               ) -> np.ndarray:
        """Each pair's share of the score ``q_rot . k_rot``, ``(D/2,)``; they sum to it."""
        q, k = self.rotated(position_q, position_k)
        products = torch.from_numpy(q * k)[self.pair_features()]  # (D/2, 2)
        return products.sum(-1).numpy()

    def score(self, position_q: int | None = None, position_k: int | None = None) -> float:
        """The score ``q_rot . k_rot`` over all ``D`` features (unscaled)."""
        q, k = self.rotated(position_q, position_k)
        return float(q @ k)

    def _data(self) -> dict:
        return {"q": self.query.tolist(), "k": self.key.tolist(),
                "theta": self.frequencies().tolist(), "pairs": self.pair_features().tolist(),
                "m": self.position_q, "n": self.position_k, "i": self.pair,
                "maxPos": self.max_position,
                "qColour": ROPE_QUERY_COLOUR, "kColour": ROPE_KEY_COLOUR}

    def _skeleton(self) -> str:
        top, last = self.max_position, len(self.query) // 2 - 1

        def slider(name: str, words: str, high: int) -> str:
            return (f'<span class="pg-ctl"><label for="{{uid}}-{name}">{words}</label>'
                    f'<input type="range" id="{{uid}}-{name}" class="pg-{name}" min="0" '
                    f'max="{high}" step="1" aria-describedby="{{uid}}-{name}-out">'
                    f'<output class="pg-{name}-out" id="{{uid}}-{name}-out" '
                    f'for="{{uid}}-{name}"></output></span>')

        return f"""\
<div class="pg-controls">
{slider("m", "Query position m", top)}
{slider("n", "Key position n", top)}
{slider("i", "Frequency pair i", last)}
<span class="pg-group"><button type="button" class="pg-shift" data-shift="-1">Shift both \
\u22121</button><button type="button" class="pg-shift" data-shift="1">Shift both +1</button>\
<button type="button" class="pg-reset">Reset</button></span>
</div>
<div class="pg-main">
<div class="pg-plot">
<svg class="pg-svg" role="img" aria-describedby="{{uid}}-help"></svg>
<div class="pg-legend" aria-hidden="true"><span><span class="pg-line pg-line-q"></span>query \
pair, turned by m\u03b8<sub>i</sub></span><span><span class="pg-line pg-line-k"></span>key \
pair, turned by n\u03b8<sub>i</sub></span><span><span class="pg-line pg-line-0"></span>before \
rotation (position 0)</span></div>
<div class="pg-help" id="{{uid}}-help">Pair i of the query and of the key, drawn in the plane \
of its two features. Move the sliders with the mouse, or with the arrow keys once Tab has \
reached them; the buttons move m and n together.</div>
</div>
<div class="pg-side">
<p class="pg-scoreline">Score <span class="pg-nobr">q<sub>rot</sub>\u00b7k<sub>rot</sub> = \
<strong class="pg-score"></strong></span> at <span class="pg-nobr">offset m \u2212 n = \
<strong class="pg-offset"></strong></span></p>
<p class="pg-vecline">Pair <span class="pg-pi"></span> contributes \
<strong class="pg-share"></strong>. Without \
rotation, <span class="pg-nobr">q\u00b7k = <strong class="pg-plain"></strong></span>.</p>
<table class="pg-table pg-angles"><tbody>
<tr><th scope="row">query pair turned by m\u00b7\u03b8<sub>i</sub></th>\
<td class="pg-num pg-aq"></td></tr>
<tr><th scope="row">key pair turned by n\u00b7\u03b8<sub>i</sub></th>\
<td class="pg-num pg-ak"></td></tr>
<tr><th scope="row">angle from key to query</th><td class="pg-num pg-between"></td></tr>
</tbody></table>
<p class="pg-prev" hidden></p>
<div class="pg-say" aria-live="polite"></div>
<p class="pg-cue" hidden>The table scrolls sideways: \u03b8 and the shares \u2192</p>
<div class="pg-scroll"><div class="pg-scroller" role="group" aria-label="Each pair\u2019s \
share of the score">
<table class="pg-table pg-pairs"><caption>Each pair\u2019s share of the score</caption>
<thead><tr><th scope="col">pair</th><th scope="col">features</th>\
<th scope="col" class="pg-num">\u03b8 (rad per position)</th>\
<th scope="col" class="pg-num">share</th></tr></thead>
<tbody class="pg-tbody"></tbody>
<tfoot><tr><th scope="row" colspan="3">sum: the score</th><td class="pg-num pg-sum"></td>\
</tr></tfoot>
</table>
</div></div>
</div>
</div>"""

    def _fallback_rows(self) -> list[tuple[int, int]]:
        """The opening positions, then both shifted by 1 and by 10."""
        m, n = self.position_q, self.position_k
        return [(m, n), (m + 1, n + 1), (m + 10, n + 10)]

    def _fallback(self) -> str:
        i = self.pair
        a, b = self.pair_features()[i].tolist()
        theta = self.frequencies()[i]
        rows = "".join(
            f'<tr><td class="pg-num">{m}</td><td class="pg-num">{n}</td>'
            f'<td class="pg-num">{m - n}</td>'
            f'<td class="pg-num">{_signed(self.score(m, n), 4)}</td>'
            f'<td class="pg-num">{_signed(float(self.shares(m, n)[i]), 4)}</td></tr>'
            for m, n in self._fallback_rows())
        return (f'<p class="pg-nojs-note">An interactive playground (it needs JavaScript). A '
                f"query and a key of width D = {len(self.query)}, rotated in the "
                f"{self.layout} layout with base {self.base:g}; pair {i} (features {a} and "
                f"{b}) turns by \u03b8 = {theta:.4g} rad per position. Shifting both "
                f"positions by the same amount turns both vectors and keeps the score:</p>"
                f'<table><thead><tr><th scope="col">query position m</th>'
                f'<th scope="col">key position n</th><th scope="col">offset m \u2212 n</th>'
                f'<th scope="col">score q\u00b7k after rotation</th>'
                f'<th scope="col">pair {i}\u2019s share</th></tr></thead>'
                f"<tbody>{rows}</tbody></table>")

    def _score_window(self) -> tuple[int, np.ndarray]:
        """``(start, scores)``: the scores at query and key positions ``start .. start+W-1``
        (a ``(W, W)`` window centred on the opening positions, within the sliders' range)."""
        from attnbook.positions import rope

        size = min(self.max_position, 23) + 1
        centre = (self.position_q + self.position_k) // 2
        start = min(max(0, centre - size // 2), self.max_position - size + 1)
        positions = torch.arange(start, start + size)  # (W,)
        q = rope(torch.from_numpy(self.query).expand(size, -1), positions, self.base,
                 layout=self.layout)  # (W, D)
        k = rope(torch.from_numpy(self.key).expand(size, -1), positions, self.base,
                 layout=self.layout)  # (W, D)
        return start, (q @ k.T).numpy()  # (W, W): query position by key position

    def _draw(self, figure: mpl.figure.Figure) -> None:
        from matplotlib.patches import Arc, Circle, Rectangle

        from attnbook.plots import draw_heatmap

        m, n, i = self.position_q, self.position_k, self.pair
        a, b = self.pair_features()[i].tolist()
        theta = float(self.frequencies()[i])
        q_rot, k_rot = self.rotated()
        ax_pair, ax_map = figure.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.25]})
        radius = max(math.hypot(self.query[a], self.query[b]),
                     math.hypot(self.key[a], self.key[b])) or 1.0
        for vector, rotated, colour, name, position, arc in (
                (self.query, q_rot, ROPE_QUERY_COLOUR, "q", m, 0.30),
                (self.key, k_rot, ROPE_KEY_COLOUR, "k", n, 0.20)):
            start = math.degrees(math.atan2(vector[b], vector[a]))
            turn = math.degrees(position * theta) % 360
            ax_pair.add_patch(Arc((0, 0), 2 * arc * radius, 2 * arc * radius, theta1=start,
                                  theta2=start + turn, color=colour, linewidth=1.5))
            ax_pair.add_patch(Circle((0, 0), math.hypot(vector[a], vector[b]), fill=False,
                                     color=colour, alpha=0.35, linestyle=":", linewidth=0.8))
            for x, y, alpha, label in ((vector[a], vector[b], 0.3, None),
                                       (rotated[a], rotated[b], 1.0,
                                        f"{name} at position {position}")):
                ax_pair.annotate("", (x, y), (0, 0), arrowprops={
                    "arrowstyle": "-|>", "color": colour, "alpha": alpha, "linewidth": 2})
                if label:
                    ax_pair.plot([], [], color=colour, linewidth=2, label=label)
        ax_pair.axhline(0, color="#999999", linewidth=0.8, zorder=0)
        ax_pair.axvline(0, color="#999999", linewidth=0.8, zorder=0)
        ax_pair.set_xlim(-1.25 * radius, 1.25 * radius)
        ax_pair.set_ylim(-1.25 * radius, 1.25 * radius)
        ax_pair.set_aspect("equal")
        ax_pair.set_xlabel(f"feature {a}")
        ax_pair.set_ylabel(f"feature {b}")
        ax_pair.legend(fontsize=7.5, loc="upper left", framealpha=0.9)
        ax_pair.set_title(f"Pair {i} (features {a}, {b}), faint at position 0\n"
                          f"score {_signed(self.score(), 4)}, pair {i}'s share "
                          f"{_signed(float(self.shares()[i]), 4)}", fontsize=9)

        start, scores = self._score_window()
        size = scores.shape[0]
        names = [str(p) if (p - start) % 4 == 0 else "" for p in range(start, start + size)]
        draw_heatmap(ax_map, scores, names, names, vmin=float(scores.min()),
                     vmax=float(scores.max()), label="score q\u00b7k after rotation")
        ax_map.tick_params(length=0, labelsize=7)
        ax_map.set_xlabel("key position n")
        ax_map.set_ylabel("query position m")
        if start <= m < start + size and start <= n < start + size:
            ax_map.add_patch(Rectangle((n - start - 0.5, m - start - 0.5), 1, 1, fill=False,
                                       edgecolor="white", linewidth=2))
        ax_map.set_title(f"The score by position: constant along each diagonal\n"
                         f"(m = {m}, n = {n} outlined: offset m \u2212 n = {m - n})",
                         fontsize=9)
        figure.tight_layout(rect=(0, 0.07, 1, 1))
        _note(figure, "Print edition: the opening state. Online, the reader moves m, n and "
                      "the pair with sliders, and shifts both positions together.")


def rope_playground(query: object = DEFAULT_ROPE_QUERY, key: object = DEFAULT_ROPE_KEY, *,
                    base: float = 10000.0, position_q: int = 5, position_k: int = 2,
                    pair: int = 0, max_position: int = 20,
                    layout: Layout = "half-split", title: str | None = None) -> RopePlayground:
    """An interactive picture of rotary position embedding: the score depends on ``m - n``.

    The query ``q`` sits at position ``m`` and the key ``k`` at position ``n`` (two sliders,
    0 to ``max_position``). :func:`attnbook.positions.rope` turns feature pair ``i`` of each
    by ``m * theta_i`` and ``n * theta_i``, with ``theta_i = base ** (-2i / D)``. The page
    draws the pair chosen by a third slider (its two features as the axes), before rotation
    (faint) and after, with the angles each turned through and the angle between them. It
    shows, live, the score ``q_rot . k_rot`` over all ``D`` features, the drawn pair's share
    of it, every pair's share in a table, and the offset ``m - n``. Buttons shift both
    positions by -1 or +1: the arrows turn, the score and the angle between them stay, and a
    line keeps the score from before the last move to compare.

    Args:
        query, key: two vectors of the same even width ``D`` (2 to 128), shape ``(D,)``,
            finite; by default fixed vectors of width 8 with one decimal.
        base: the frequency base, a finite number > 1; 10000 as in RoFormer and LLaMA 1 and 2.
        position_q, position_k: the opening ``m`` and ``n``, from 0 to ``max_position``.
        pair: the opening pair ``i``, from 0 to ``D/2 - 1``.
        max_position: the sliders' largest position, from 1 to 4096.
        layout: ``"half-split"`` (pair ``i`` is features ``i`` and ``i + D/2``) or
            ``"interleaved"`` (features ``2i`` and ``2i + 1``), as for ``rope``.
        title: a title shown above the playground.

    Returns:
        A :class:`RopePlayground` (HTML in Jupyter and the book, a PNG in print).

    Raises:
        TypeError: a vector that is not a tensor, array or sequence of numbers; a base that
            is not a real number; a position, pair or ``max_position`` that is not an int;
            a title that is not a string.
        ValueError: a vector that is not 1-D of even width 2 to 128 or not finite, a key
            whose shape differs from the query's, a base <= 1, an unknown layout, a
            position, pair or ``max_position`` out of range.
    """
    return RopePlayground(query, key, base, position_q, position_k, pair, max_position,
                          layout, title)
