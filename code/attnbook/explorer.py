"""An interactive attention viewer that is one self-contained HTML fragment.

``explore(weights, tokens)`` returns an :class:`AttentionExplorer`. Jupyter and the book
(myst-nb) show it through ``_repr_html_``: one HTML fragment with inline CSS and JavaScript,
nothing fetched from anywhere, so it works in the static book page, offline, in Jupyter and in
a plain HTML file (:meth:`AttentionExplorer.save` writes a standalone document).

For print, the explorer also offers a still picture through ``_repr_png_``
(:meth:`AttentionExplorer.to_png`): the map the widget opens on, with a note that the online
edition is interactive. A notebook output then carries both; the HTML book shows the widget
and the PDF edition (Sphinx's LaTeX builder, which cannot show HTML) shows the picture.

The reader picks a layer and a head, or clicks one of the small maps of every head of the
layer; reads the query token, the key token and the exact weight of a cell by hovering over
it or by moving the keyboard focus with the arrow keys; and selects a query token (a click on
its row label, or Enter on a cell) to see its row of weights as bars.

Design notes:

- Token strings are data, never markup: they travel as JSON inside the script (with ``<``,
  ``>``, ``&`` and ``/`` escaped, so no token can close the script or form a URL) and reach
  the page through ``textContent`` and attributes, never ``innerHTML``.
- Every fragment gets a fresh id, all CSS is scoped under ``.attnbook-explorer`` and all
  JavaScript lives in one function scoped to its root element, so explorers on one page do
  not interfere and the page's theme does not leak in.
- The weights travel as integer ten-thousandths (4 decimals): a (6, 12, 15, 15) input makes
  a fragment of about 80 kB.
- A causal (decoder) model's map is a triangle: key ``j`` after query ``i`` is forbidden, not
  merely small. With ``causal=True`` only the triangle ``j <= i`` travels (about half the
  numbers), and the widget paints the forbidden cells hatched grey (the book's
  :data:`~attnbook.plots.MASKED_GREY`) and reads them out as "masked: key after the query",
  never as a weight of 0.
- The widget is a white panel in the book's figure style (viridis, Okabe-Ito), so it reads
  the same in the theme's light and dark modes.
- The CSS and JavaScript live in ``attnbook/explorer_assets/`` (package data, read with
  :mod:`importlib.resources`); the HTML skeleton stays here.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import math
import secrets
from collections.abc import Iterable, Mapping
from importlib.resources import files
from pathlib import Path

import matplotlib as mpl
import numpy as np
import torch

from attnbook.plots import (
    HATCH_GREY,
    HEATMAP_CMAP,
    MASKED_GREY,
    OKABE_ITO,
    book_style,
    draw_heatmap,
    shade_masked,
)

__all__ = ["AttentionExplorer", "explore", "explore_sentences", "value_contributions",
           "value_vectors", "weight_colour"]

#: The weights travel as integers in units of 1 / SCALE (4 decimals).
SCALE = 10_000
#: Several sentences travel compactly: one byte per number, in units of 1 / BYTE_SCALE.
BYTE_SCALE = 255
#: The byte alphabet (base64url, so nothing in it needs escaping inside a script).
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

_COUNTER = itertools.count(1)


def _asset(name: str) -> str:
    """A file of ``attnbook/explorer_assets/``; CSS on one line, for the inline <style>."""
    text = (files("attnbook") / "explorer_assets" / name).read_text(encoding="utf-8").strip()
    return text.replace("\n", "") if name.endswith(".css") else text


def _colour_table() -> str:
    """The heat map's 256 colours as one string of 6-digit hex codes."""
    rgba = mpl.colormaps[HEATMAP_CMAP](np.linspace(0.0, 1.0, 256))
    rgb = np.rint(rgba[:, :3] * 255).astype(int)
    return "".join(f"{r:02x}{g:02x}{b:02x}" for r, g, b in rgb)


_LUT = _colour_table()


def weight_colour(weight: float, vmin: float = 0.0, vmax: float = 1.0) -> str:
    """The ``#rrggbb`` colour the explorer paints a cell of ``weight`` with.

    The same arithmetic as the widget's JavaScript: ``weight`` is clipped to
    ``[vmin, vmax]`` and mapped to the nearest of 256 viridis colours.
    """
    t = (weight - vmin) / (vmax - vmin)
    if not t > 0:
        t = 0.0
    if t > 1:
        t = 1.0
    k = math.floor(t * 255 + 0.5)
    return "#" + _LUT[6 * k: 6 * k + 6]


def _as_array(weights: object) -> np.ndarray:
    """``weights`` as a float64 numpy array of shape ``(layers, heads, L, S)``."""
    if isinstance(weights, torch.Tensor):
        if weights.is_complex() or weights.dtype == torch.bool:
            raise TypeError(f"weights must hold real numbers, got dtype {weights.dtype}")
        array = weights.detach().to("cpu", torch.float64).numpy()
    elif isinstance(weights, np.ndarray):
        if weights.dtype.kind not in "fiu":
            raise TypeError(f"weights must hold real numbers, got dtype {weights.dtype}")
        array = weights.astype(np.float64)
    else:
        raise TypeError(
            f"weights must be a torch.Tensor or numpy.ndarray of shape (L, S), (heads, L, S) "
            f"or (layers, heads, L, S), got {type(weights).__name__}"
        )
    if array.ndim not in (2, 3, 4):
        raise ValueError(
            f"weights must have 2, 3 or 4 dimensions ((L, S), (heads, L, S) or "
            f"(layers, heads, L, S)), got {array.ndim} dimension{'s' * (array.ndim != 1)} "
            f"with shape {tuple(array.shape)}"
        )
    array = array.reshape((1,) * (4 - array.ndim) + array.shape)  # (layers, heads, L, S)
    if 0 in array.shape:
        raise ValueError(
            f"weights must not be empty, got shape {tuple(weights.shape)} "
            f"(as (layers, heads, L, S): {array.shape})"
        )
    return array


def _labels(name: str, values: Iterable[object] | None, size: int, what: str,
            default: str) -> list[str]:
    if values is None:
        return [default.format(i) for i in range(size)]
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of strings, not one {type(values).__name__}")
    try:
        labels = [str(v) for v in values]
    except TypeError:
        raise TypeError(
            f"{name} must be a sequence of strings, got {type(values).__name__}"
        ) from None
    if len(labels) != size:
        raise ValueError(f"{name} has {len(labels)} entries but the weights have {what}")
    return labels


def _shares(contributions: object, shape: tuple[int, ...]) -> np.ndarray:
    """Non-negative ``contributions`` of ``shape``, each row scaled to add up to 1."""
    array = _as_array(contributions)
    if array.shape != shape:
        raise ValueError(f"contributions must have the shape of the weights, {shape}, "
                         f"got {array.shape}")
    if not np.isfinite(array).all() or (array < 0).any():
        raise ValueError("contributions must be finite and non-negative (lengths of vectors)")
    totals = array.sum(axis=-1, keepdims=True)
    return np.divide(array, totals, out=np.zeros_like(array), where=totals > 0)


def _to_bytes(array: np.ndarray, name: str) -> str:
    """Numbers in ``[0, 1]`` as one byte each (units of 1/255), base64url without padding."""
    if array.min() < 0 or array.max() > 1:
        raise ValueError(f"{name} must lie in [0, 1] to travel as bytes, got values in "
                         f"[{array.min():g}, {array.max():g}]")
    raw = np.rint(array * BYTE_SCALE).astype(np.uint8).ravel().tobytes()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _check_causal(array: np.ndarray, name: str) -> None:
    """Refuse ``causal=True`` for maps that are not square or hold a nonzero value above
    the diagonal (a key after its query), where a causal model has exactly 0."""
    rows, cols = array.shape[-2:]
    if rows != cols:
        raise ValueError(f"causal=True needs square maps (each token attends to itself and the "
                         f"earlier ones), got L = {rows} query rows and S = {cols} key columns")
    above = np.triu(np.ones((rows, cols), dtype=bool), k=1)  # (L, S): key after query
    nonzero = (array != 0) & above  # exact: a causal model writes 0 there
    if nonzero.any():
        first = tuple(int(i) for i in np.argwhere(nonzero)[0])
        raise ValueError(
            f"causal=True, but {name} has {int(nonzero.sum())} nonzero value"
            f"{'s' * (int(nonzero.sum()) != 1)} above the diagonal (a key after its query), "
            f"the first {array[first]:g} at (layer, head, query, key) = {first}; a causal "
            f"model's are exactly 0 (pass causal=False for an encoder's maps)")


def _bert_layers(loaded: object) -> list:
    encoder = getattr(loaded.model, "encoder", None)
    if encoder is None or not hasattr(encoder, "layer"):
        raise ValueError(f"value vectors need a BERT-style encoder (such as 'minilm'), "
                         f"got model {loaded.name!r}")
    return list(encoder.layer)


@torch.no_grad()
def value_vectors(text: str, model: object = None) -> tuple[torch.Tensor, torch.Tensor,
                                                             list[str]]:
    """The value vector ``v_j`` of every token in every head of a pretrained model.

    ``v_j = x_j W_v + b_v``, cut into heads, where ``x_j`` is what enters the layer for
    token ``j``. Returns ``(values, weights, tokens)``: ``values`` of shape
    ``(layers, heads, n, d_head)``, the attention ``weights`` ``(layers, heads, n, n)`` of the
    same run, and the ``n`` tokens. Each head's output before ``W_o`` is
    ``weights[l, h] @ values[l, h]``.
    """
    from attnbook.pretrained import encode, resolve_model

    loaded = resolve_model(model)
    layers = _bert_layers(loaded)
    encoding, tokens = encode(text, loaded)
    outputs = loaded.model(**encoding, output_hidden_states=True, output_attentions=True)
    heads = loaded.num_heads
    values = torch.stack([
        layer.attention.self.value(outputs.hidden_states[index][0])  # (n, d_model)
        .unflatten(-1, (heads, -1)).transpose(0, 1)  # (heads, n, d_head)
        for index, layer in enumerate(layers)])
    weights = torch.stack([a[0] for a in outputs.attentions])  # (layers, heads, n, n)
    return values.float(), weights.float(), tokens


@torch.no_grad()
def value_contributions(text: str, model: object = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                   list[str]]:
    """How far each key moves each query's output: ``||A_ij f(x_j)||`` (Kobayashi et al.).

    ``f(x_j) = v_j W_o^(h)`` is head ``h``'s value vector carried through its slice of the
    output projection, so the layer's attention output is the sum of ``A_ij f(x_j)`` over
    heads and keys, plus the output bias. Returns ``(weights, norms, tokens)``, both
    ``(layers, heads, n, n)``.
    """
    from attnbook.pretrained import resolve_model

    loaded = resolve_model(model)
    values, weights, tokens = value_vectors(text, loaded)
    norms = []
    for index, layer in enumerate(_bert_layers(loaded)):
        heads, _, d_head = values[index].shape
        w_o = layer.attention.output.dense.weight.T.unflatten(0, (heads, d_head))
        f = values[index] @ w_o.float()  # (heads, n, d_model)
        norms.append((weights[index][..., None] * f[:, None]).norm(dim=-1))  # (heads, n, n)
    return weights, torch.stack(norms), tokens


class AttentionExplorer:
    """An interactive view of attention weights; displays itself in Jupyter and the book.

    Build it with :func:`explore`. Attributes (read-only by convention):

    - ``weights``: float64 array ``(layers, heads, L, S)``, as given (not rounded);
    - ``tokens`` (``L`` query labels), ``key_tokens`` (``S`` key labels),
      ``layer_names``, ``head_names``: lists of strings;
    - ``title``: str or None; ``vmin``, ``vmax``: the ends of the colour scale;
    - ``causal``: True when a key after its query is masked (a decoder's triangle).
    """

    def __init__(self, weights: torch.Tensor | np.ndarray, tokens: Iterable[object] | None,
                 *, key_tokens: Iterable[object] | None = None,
                 layer_names: Iterable[object] | None = None,
                 head_names: Iterable[object] | None = None, title: str | None = None,
                 vmin: float | None = None, vmax: float | None = None,
                 contributions: torch.Tensor | np.ndarray | None = None,
                 label: str | None = None, causal: bool = False,
                 compact: bool = False) -> None:
        array = _as_array(weights)
        for name, flag in (("causal", causal), ("compact", compact)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {type(flag).__name__}")
        n_layers, n_heads, n_rows, n_cols = array.shape
        if key_tokens is None and n_rows != n_cols:
            raise ValueError(
                f"weights are not square (L = {n_rows} query rows, S = {n_cols} key "
                f"columns): pass key_tokens with the {n_cols} key tokens"
            )
        self.tokens = _labels("tokens", tokens, n_rows,
                              f"L = {n_rows} query rows", "{}")
        self.key_tokens = (self.tokens if key_tokens is None else
                           _labels("key_tokens", key_tokens, n_cols,
                                   f"S = {n_cols} key columns", "{}"))
        self._shared_keys = key_tokens is None
        self.layer_names = _labels("layer_names", layer_names, n_layers,
                                   f"{n_layers} layer{'s' * (n_layers != 1)}", "layer {}")
        self.head_names = _labels("head_names", head_names, n_heads,
                                  f"{n_heads} head{'s' * (n_heads != 1)} per layer",
                                  "head {}")
        if title is not None and not isinstance(title, str):
            raise TypeError(f"title must be a string or None, got {type(title).__name__}")
        finite = np.isfinite(array)
        if not finite.all():
            first = tuple(int(i) for i in np.argwhere(~finite)[0])
            raise ValueError(
                f"weights must be finite, but {int((~finite).sum())} of their {array.size} "
                f"values are NaN or infinite (the first at (layer, head, query, key) = {first})"
            )
        low = min(0.0, float(array.min())) if vmin is None else float(vmin)
        high = max(1.0, float(array.max())) if vmax is None else float(vmax)
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"vmin must be below vmax, both finite, got vmin = {low} "
                             f"and vmax = {high}")
        quanta = np.rint(array * SCALE)
        if np.abs(quanta).max() > 2.0**53:
            raise ValueError("weights are too large to show with 4 decimals "
                             f"(largest magnitude {np.abs(array).max():g})")
        self.weights = array
        self._quanta = quanta.astype(np.int64)
        self.title = title
        self.vmin, self.vmax = low, high
        if label is not None and not isinstance(label, str):
            raise TypeError(f"label must be a string or None, got {type(label).__name__}")
        self.label = label
        self.contributions = None if contributions is None else _shares(contributions,
                                                                        array.shape)
        if causal:
            _check_causal(array, "weights")
            if self.contributions is not None:
                _check_causal(self.contributions, "contributions")
        self.causal = causal
        self._bytes = compact
        #: Further sentences shown from the same widget (see :func:`explore_sentences`).
        self.others: list[AttentionExplorer] = []

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(layers, heads, L, S)``."""
        return tuple(self.weights.shape)  # type: ignore[return-value]

    def __repr__(self) -> str:
        layers, heads, rows, cols = self.shape
        return (f"AttentionExplorer({layers} layer(s) x {heads} head(s), {rows} queries x "
                f"{cols} keys{f', title={self.title!r}' if self.title else ''})")

    @property
    def compact(self) -> bool:
        """True when the numbers travel as bytes (asked for, several sentences, or
        contributions)."""
        return self._bytes or bool(self.others) or self.contributions is not None

    def _travelling(self, array: np.ndarray) -> np.ndarray:
        """What of ``array`` travels: all of it, or with ``causal`` only the triangle
        ``key <= query`` of each map, row by row, ``(layers, heads, L (L + 1) / 2)``."""
        if not self.causal:
            return array
        rows, cols = np.tril_indices(array.shape[-1])
        return array[..., rows, cols]  # (layers, heads, L (L + 1) / 2)

    def _sentence_data(self, compact: bool) -> dict:
        rows, cols = self.shape[2:]
        data = {"label": self.label, "rows": rows, "cols": cols, "tokens": self.tokens,
                "keys": None if self._shared_keys else self.key_tokens}
        if compact:
            data["w"] = _to_bytes(self._travelling(self.weights), "weights")
            data["c"] = (None if self.contributions is None else
                         _to_bytes(self._travelling(self.contributions), "contributions"))
        else:  # flat integers, in (layers, heads, L, S) order (or the triangle's)
            data["w"], data["c"] = self._travelling(self._quanta).ravel().tolist(), None
        return data

    def shipped(self, which: str = "weights") -> np.ndarray:
        """The numbers as the widget has them: ``weights`` or ``contributions`` (shares),
        rounded to the precision they travel with (``1 / 10000``, or ``1 / 255`` when
        :attr:`compact`). The browser tests compare the page with these."""
        array = self.weights if which == "weights" else self.contributions
        if array is None:
            raise ValueError(f"which must be 'weights' or 'contributions' (with contributions "
                             f"given), got {which!r}")
        scale = BYTE_SCALE if self.compact else SCALE
        return np.rint(array * scale) / scale

    def _data_json(self, uid: str) -> str:
        layers, heads = self.shape[:2]
        compact = self.compact
        for other in self.others:
            if other.shape[:2] != (layers, heads):
                raise ValueError(f"every sentence needs {layers} layers of {heads} heads, "
                                 f"got {other.shape[:2]} for {other.label!r}")
            if other.causal != self.causal:
                raise ValueError(f"every sentence needs causal={self.causal}, got "
                                 f"causal={other.causal} for {other.label!r}")
        data = {
            "id": uid,
            "layers": layers, "heads": heads,
            "scale": BYTE_SCALE if compact else SCALE, "digits": 3 if compact else 4,
            "vmin": self.vmin, "vmax": self.vmax,
            "title": self.title,
            "layerNames": self.layer_names, "headNames": self.head_names,
            "bar": OKABE_ITO[0],
            "lut": _LUT,
            **self._sentence_data(compact),
            "more": [other._sentence_data(compact) for other in self.others],
        }
        if self.causal:  # absent otherwise, so an encoder's data stays as it was
            data["causal"], data["masked"] = True, [MASKED_GREY, HATCH_GREY]
        text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
        # Nothing inside the script may close it, open a comment or spell a URL.
        return (text.replace("<", "\\u003c").replace(">", "\\u003e")
                .replace("&", "\\u0026").replace("/", "\\/"))

    def to_html(self) -> str:
        """The widget as one self-contained HTML fragment (a fresh element id each call)."""
        uid = f"attnx-{next(_COUNTER)}-{secrets.token_hex(4)}"
        body = _SKELETON.replace("{uid}", uid)
        script = _SCRIPT.replace("__DATA__", self._data_json(uid))
        return body.replace("<!--script-->", f"<script>{script}</script>")

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_png(self, layer: int = 0, head: int = 0) -> bytes:
        """One map as a PNG image, for print: by default the one the widget opens on.

        The picture is the heat map of ``layer`` and ``head`` on the widget's colour scale,
        under the explorer's title, with a note that the online edition lets the reader pick
        any map. Drawn on a figure of its own (not through pyplot), so displaying an explorer
        in Jupyter adds no stray figure.
        """
        layers, heads, rows, cols = self.shape
        for name, value, size in (("layer", layer, layers), ("head", head, heads)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if not 0 <= value < size:
                raise ValueError(f"{name} must be in [0, {size}), got {value}")
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        n_maps = layers * heads
        which = f"{self.layer_names[layer]}, {self.head_names[head]}"
        n_sentences = 1 + len(self.others)
        more = (f" of {n_sentences} sentences" if n_sentences > 1 else "") + (
            ", as weights or as contributions" if self.contributions is not None else "")
        note = (f"Print edition: a still picture of one map ({which}). Online, this is an "
                f"interactive explorer of all {n_maps} map{'s' * (n_maps != 1)}{more}."
                if n_maps > 1 or more else
                "Print edition: a still picture. Online, this is an interactive explorer.")
        if self.causal:
            note += " Hatched grey: masked (a key after its query)."
        panels = [(self.weights, "weights", "weight")]
        if self.contributions is not None:
            panels.append((self.contributions, "contributions (row shares)",
                           "contribution share"))
        with mpl.rc_context(book_style()):
            figure = Figure(figsize=(min((2.4 + 0.42 * cols) * len(panels), 14.0),
                                     min(2.2 + 0.36 * rows, 9.0)))
            FigureCanvasAgg(figure)
            top = f"{self.title}: {which}" if self.title else which
            if self.label:
                top = f"{self.label}. {top}"
            for index, (array, name, label) in enumerate(panels, start=1):
                ax = figure.add_subplot(1, len(panels), index)
                draw_heatmap(ax, array[layer, head], self.tokens, self.key_tokens,
                             title=name if len(panels) > 1 else top,
                             vmin=self.vmin, vmax=self.vmax, label=label)
                if self.causal:
                    shade_masked(ax, np.tril(np.ones((rows, cols), dtype=bool)),
                                 array[layer, head])
            if len(panels) > 1:
                figure.suptitle(top, fontsize=11)
            figure.text(0.5, 0.005, note, ha="center", va="bottom", fontsize=9,
                        style="italic", wrap=True)
            figure.tight_layout(rect=(0, 0.05, 1, 1))
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=150)
        return buffer.getvalue()

    def _repr_png_(self) -> bytes:
        return self.to_png()

    def save(self, path: str | Path) -> Path:
        """Write a standalone HTML document holding the explorer; returns the path."""
        path = Path(path)
        title = html.escape(self.title or "Attention explorer")
        document = (
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{title}</title>\n</head>\n<body style=\"margin:16px\">\n"
            f"{self.to_html()}\n</body>\n</html>\n"
        )
        path.write_text(document, encoding="utf-8")
        return path


def explore(weights: torch.Tensor | np.ndarray, tokens: Iterable[object] | None, *,
            key_tokens: Iterable[object] | None = None,
            layer_names: Iterable[object] | None = None,
            head_names: Iterable[object] | None = None, title: str | None = None,
            vmin: float | None = None, vmax: float | None = None, causal: bool = False,
            compact: bool = False) -> AttentionExplorer:
    """An interactive explorer of attention weights (shows itself in Jupyter and the book).

    Args:
        weights: ``(L, S)``, ``(heads, L, S)`` or ``(layers, heads, L, S)`` tensor or array;
            entry ``[..., i, j]`` is how much query ``i`` attends to key ``j``.
        tokens: the ``L`` query tokens (also the keys when ``key_tokens`` is None); None
            numbers them.
        key_tokens: the ``S`` key tokens, for maps whose keys differ from the queries
            (cross-attention); required when ``L != S``.
        layer_names, head_names: labels of the layers and heads (default ``layer 0``, ...).
        title: a title shown above the widget.
        vmin, vmax: the ends of the colour scale; by default ``[0, 1]``, widened to the
            smallest and largest weight if those lie outside.
        causal: the maps are a causal (decoder) model's: every key after its query is
            masked. Those cells must hold exactly 0; the widget and the PNG show them hatched
            grey and read them out as masked, and only the triangle travels.
        compact: ship the numbers as bytes (steps of ``1/255``, 3 decimals shown) instead of
            ten-thousandths: about a third of the size, for large inputs such as a 30-layer
            model.

    Returns:
        An :class:`AttentionExplorer`; ``.save(path)`` writes it as a standalone HTML file.

    Raises:
        TypeError: ``weights`` is not a real tensor or array, or a label list is a string.
        ValueError: a wrong number of dimensions, an empty or non-finite ``weights``, a
            non-square map without ``key_tokens``, a label list of the wrong length,
            ``vmin >= vmax``, or ``causal=True`` with a non-square map or a nonzero weight
            above the diagonal. Raised before any HTML is built.
    """
    return AttentionExplorer(weights, tokens, key_tokens=key_tokens, layer_names=layer_names,
                             head_names=head_names, title=title, vmin=vmin, vmax=vmax,
                             causal=causal, compact=compact)


def explore_sentences(sentences: Mapping[str, str], model: object = None, *,
                      title: str | None = None, contributions: bool | None = None
                      ) -> AttentionExplorer:
    """One explorer of several sentences, each run through a pretrained model now.

    Args:
        sentences: ``{label: text}``; the labels fill the widget's "Sentence" menu, in order.
        model: a :class:`~attnbook.pretrained.PretrainedModel`, a model name or None (the
            default model).
        title: a title shown above the widget.
        contributions: also ship ``||A_ij f(x_j)||`` (:func:`value_contributions`), each row
            scaled to add up to 1, behind the widget's "Show" menu. They need a BERT-style
            encoder; None (the default) ships them for one and not for a decoder.

    Returns:
        An :class:`AttentionExplorer` of the first sentence whose ``others`` hold the rest,
        causal when the model is (``PretrainedModel.is_causal``: SmolLM2, GPT-2), its
        tokens labelled as words (:func:`~attnbook.pretrained.readable_tokens`).
        Its numbers travel as bytes (``1/255`` steps) to keep the page small;
        :meth:`AttentionExplorer.shipped` gives them as shipped.
    """
    if not isinstance(sentences, Mapping):
        raise TypeError(f"sentences must be a mapping of label to text, got "
                        f"{type(sentences).__name__}")
    if not sentences:
        raise ValueError("sentences must hold at least one sentence, got an empty mapping")
    from attnbook.pretrained import attention_maps, readable_tokens, resolve_model

    loaded = resolve_model(model)
    if contributions is None:
        contributions = not loaded.is_causal
    explorers = []
    for label, text in sentences.items():
        if not isinstance(label, str) or not isinstance(text, str):
            raise TypeError(f"sentences must map strings to strings, got "
                            f"{type(label).__name__} -> {type(text).__name__}")
        if contributions:
            weights, norms, tokens = value_contributions(text, loaded)
        else:
            (weights, tokens), norms = attention_maps(text, loaded), None
        layers, heads = weights.shape[:2]
        explorers.append(AttentionExplorer(
            weights, readable_tokens(tokens, loaded),
            layer_names=[f"layer {i}" for i in range(layers)],
            head_names=[f"head {i}" for i in range(heads)], title=title,
            contributions=norms, label=label, causal=loaded.is_causal, compact=True))
    first = explorers[0]
    first.others = explorers[1:]
    return first


# The static part of the widget. It holds no data: the script fills it in with textContent.
_SKELETON = """\
<div class="attnbook-explorer" id="{uid}" role="region" aria-label="Attention explorer">
<style>{css}</style>
<div class="attnx-title" hidden></div>
<div class="attnx-nojs">This interactive attention explorer needs JavaScript.</div>
<div class="attnx-controls">
<span class="attnx-ctl attnx-ctl-sentence" hidden><label for="{uid}-sentence">Sentence</label>
<select id="{uid}-sentence" class="attnx-sentence"></select></span>
<span class="attnx-ctl attnx-ctl-view" hidden><label for="{uid}-view">Show</label>
<select id="{uid}-view" class="attnx-view"><option value="w">weights</option>\
<option value="c">contributions</option></select></span>
<span class="attnx-ctl attnx-ctl-layer"><label for="{uid}-layer">Layer</label>
<select id="{uid}-layer" class="attnx-layer"></select></span>
<span class="attnx-ctl attnx-ctl-head"><label for="{uid}-head">Head</label>
<select id="{uid}-head" class="attnx-head"></select></span>
<span class="attnx-ctl"><label for="{uid}-query">Query token</label>
<select id="{uid}-query" class="attnx-query"></select></span>
<span class="attnx-ctl"><label for="{uid}-scale">Colours</label>
<select id="{uid}-scale" class="attnx-scale"><option value="fixed">fixed scale</option>\
<option value="head">stretched per head</option></select></span>
<button type="button" class="attnx-toggle" aria-expanded="true" aria-controls="{uid}-ov">\
Hide the heads of this layer</button>
</div>
<div class="attnx-ov" id="{uid}-ov" role="group" \
aria-label="Every head of the chosen layer; pick one to show it"></div>
<div class="attnx-main">
<div class="attnx-mapwrap">
<div class="attnx-caption"></div>
<div class="attnx-axis">columns: key (attended to) &rarr;&ensp;rows: query (attending from) \
&darr;</div>
<div class="attnx-grid" role="grid" aria-describedby="{uid}-help"></div>
<div class="attnx-view-note" hidden>Contribution: the length of weight &times; the \
value vector after the output projection W<sub>o</sub> (this head's slice of it), each row \
scaled to add up to 1.</div>
<div class="attnx-legend" aria-hidden="true"><span class="attnx-cbar-name">weight</span>\
<span class="attnx-cbar-lo"></span><span class="attnx-cbar"></span>\
<span class="attnx-cbar-hi"></span></div>
<div class="attnx-help" id="{uid}-help">Arrow keys move between cells; Enter shows the \
query's row as bars.</div>
</div>
<div class="attnx-side">
<div class="attnx-readout" id="{uid}-out" aria-live="polite" aria-atomic="true">\
<span class="attnx-r-hint">Hover over or tap a cell, or focus one and use the arrow keys, to \
read its <span class="attnx-hint-what">weight</span>.</span>\
<span class="attnx-r-body" hidden>query \
<span class="attnx-r-tok attnx-r-q"></span> (row <span class="attnx-r-i"></span>) &rarr; key \
<span class="attnx-r-tok attnx-r-k"></span> (column <span class="attnx-r-j"></span>): \
<span class="attnx-r-what">weight</span> <strong class="attnx-r-w"></strong> \
<span class="attnx-r-where"></span></span></div>
<div class="attnx-bars">
<div class="attnx-bars-title">Pick a query token (click its row label, or press Enter on a \
cell) to see its row as bars.</div>
<div class="attnx-bars-list" role="list" hidden></div>
</div>
</div>
</div>
<!--script-->
</div>"""

_SKELETON = _SKELETON.replace("{css}", _asset("explorer.css"))

# The behaviour. Written without "//" comments (and without any "//" at all) so that the
# fragment provably holds no protocol-relative URL; one function scope, no globals.
_SCRIPT = _asset("explorer.js")
