"""The book's figure style and plotting helpers.

Every figure in the book is drawn through this module so that figures share one look:
colour-blind-safe colours (the Okabe-Ito palette for lines, viridis for heatmaps) on a white
background that stays legible when the page around it is in dark mode.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import math
import re
import weakref
from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch
from cycler import cycler
from matplotlib.axes import Axes
from matplotlib.backends.backend_svg import RendererSVG
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.text import Text

__all__ = ["OKABE_ITO", "HEATMAP_CMAP", "attention_heatmap", "attention_heatmap_row",
           "COLUMN_PX", "INLINE_FORMATS", "MIN_TEXT_PX", "book_style", "draw_heatmap",
           "legible_text", "text_px_per_point", "plot_vectors_2d",
           "use_book_style", "mask_panels", "shade_masked"]

#: Okabe & Ito (2008), a palette distinguishable under the common colour-vision deficiencies.
OKABE_ITO = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#D55E00",  # vermillion
    "#F0E442",  # yellow
    "#000000",  # black
)

#: Perceptually uniform and colour-blind safe.
HEATMAP_CMAP = "viridis"


def book_style() -> dict[str, object]:
    """The rcParams of the book's figures (a fresh dict each call)."""
    return {
        "figure.figsize": (6.4, 4.0),
        "figure.dpi": 100,
        "savefig.dpi": 100,
        # An opaque white figure reads the same in the theme's light and dark modes.
        "figure.facecolor": "white",
        "axes.facecolor": "white",
        "savefig.facecolor": "white",
        "axes.edgecolor": "#333333",
        "axes.labelcolor": "#111111",
        "text.color": "#111111",
        "xtick.color": "#333333",
        "ytick.color": "#333333",
        "axes.prop_cycle": cycler(color=list(OKABE_ITO)),
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": False,
        "font.size": 10,
        "axes.titlesize": 11,
        "image.cmap": HEATMAP_CMAP,
        # Stable element ids in an SVG file: the same figure gives the same file.
        "svg.hashsalt": "attnbook",
    }


#: The widest a figure shows on the book's page at 1280 px, in CSS pixels (the column less
#: the figure's margins): a wider figure is shrunk to it (tests/test_browser.py measures).
COLUMN_PX = 672
#: The smallest text a figure shows on the page, in CSS pixels.
MIN_TEXT_PX = 9.0


def text_px_per_point(width_inches: float) -> float:
    """CSS pixels that a point of text takes in a figure ``width_inches`` wide on the book's
    page: 4/3 at the figure's own size, less when it is shrunk to :data:`COLUMN_PX`."""
    return min(96 / 72, COLUMN_PX / (72 * width_inches))


def legible_text(fig: Figure, *, measure: bool = False) -> Figure:
    """Raise every text of ``fig`` (titles, labels, annotations, tick labels) that would show
    under :data:`MIN_TEXT_PX` on the book's page to that size, and return ``fig``.

    Only a figure wider than the column needs it: at its own size 6.75 pt already makes 9 px.
    The width is the one the figure is saved at, cropped to what it draws ("tight", with
    Jupyter's 0.1 inch of padding) or the figure's own, whichever is wider; raising text can
    widen it, so the floor is worked out again until it holds. With ``measure``, a figure
    within 5 % of the column's width or wider takes the width of the SVG as Jupyter saves it,
    found by saving it (exact, and slower: the text extents Agg measures can be 1 % narrower);
    the book's SVG printer asks for that.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    for _ in range(4):
        width = _saved_width(fig)
        if measure and 1.05 * width > COLUMN_PX / 96:  # it may be shown shrunk: be exact
            width = _svg_width(fig)
        floor = math.ceil(10 * MIN_TEXT_PX / text_px_per_point(width)) / 10
        raised = False
        for ax in fig.axes:  # tick labels are made anew as the axes draw: set them by axis
            for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
                labels = [t for t in axis.get_ticklabels() if t.get_text().strip()]
                if labels and min(t.get_fontsize() for t in labels) < floor:
                    ax.tick_params(axis=name, labelsize=floor)
                    raised = True
        for text in fig.findobj(Text):
            if text.get_text().strip() and text.get_fontsize() < floor:
                text.set_fontsize(floor)
                raised = True
        if not raised:
            break
    return fig


def _saved_width(fig: Figure) -> float:
    """Inches: the figure's width, or, if what it draws passes its edges, the width of the SVG
    Jupyter saves ("tight", 0.1 inch of padding). That one is measured by saving it: Agg's
    extent of the same text can be 1 % narrower than the SVG renderer's."""
    width = fig.get_size_inches()[0]
    if fig.get_tightbbox().width + 0.2 <= width:  # inches, drawn by the figure's own renderer
        return width
    return _svg_width(fig)


def _svg_width(fig: Figure) -> float:
    """Inches: the width of the figure saved as Jupyter's inline backend saves it ("tight",
    0.1 inch of padding).

    A plain figure is measured as saving it would (a pass with the SVG renderer at the SVG's
    72 dots an inch, drawing switched off as in matplotlib's own layout pass, then the extent
    of what it draws): a third of the time of writing the SVG, and the same width. A figure
    that saving treats differently is saved: a layout engine (``layout="constrained"``)
    places the axes anew, and rasterized artists and figure images are drawn at the image
    resolution by a renderer of their own.
    """
    if (fig.get_layout_engine() is not None or fig.images
            or fig.findobj(lambda artist: artist.get_rasterized())):
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", bbox_inches="tight", pad_inches=0.1)
        return float(re.search(r'<svg[^>]*\swidth="([\d.]+)pt"', buffer.getvalue()).group(1)) / 72
    width, height = fig.get_size_inches()
    dpi = fig.dpi
    try:
        fig.dpi = 72
        renderer = RendererSVG(width * 72, height * 72, io.StringIO(), image_dpi=72)
        with getattr(renderer, "_draw_disabled", contextlib.nullcontext)():
            fig.draw(renderer)
        return fig.get_tightbbox(renderer).width + 0.2
    finally:
        fig.dpi = dpi


#: How Jupyter shows a figure: SVG for the web pages (sharp at any zoom, on a phone too)
#: and PNG for the PDF edition, whose LaTeX builder cannot read SVG.
INLINE_FORMATS = ("svg", "png")


def use_book_style() -> None:
    """Apply the book's figure style to every figure drawn from now on, and in IPython or
    Jupyter show figures in :data:`INLINE_FORMATS` (elsewhere only the style changes)."""
    mpl.rcParams.update(book_style())
    try:
        from IPython import get_ipython
    except ImportError:  # no IPython: no inline figures to configure
        return
    shell = get_ipython()
    if shell is None:
        return
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats(*INLINE_FORMATS)
    # Each format's printer draws the figure with its small text raised first. The SVG one
    # runs first and measures the SVG it saves; the PNG one of the same display then has
    # nothing left to raise, and skips the drawing that finding so would cost.
    svg_printer = shell.display_formatter.formatters["image/svg+xml"]
    png_printer = shell.display_formatter.formatters["image/png"]
    show_svg, show_png = svg_printer.lookup_by_type(Figure), png_printer.lookup_by_type(Figure)
    just_shown: list[weakref.ref[Figure]] = []

    def svg(fig: Figure) -> object:
        just_shown[:] = [weakref.ref(legible_text(fig, measure=True))]
        return show_svg(fig)

    def png(fig: Figure) -> object:
        if not (just_shown and just_shown.pop()() is fig):
            legible_text(fig)
        return show_png(fig)

    svg_printer.for_type(Figure, svg)
    png_printer.for_type(Figure, png)


def _as_matrix(weights: object) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().to("cpu", torch.float64).numpy()
    elif not isinstance(weights, np.ndarray):
        raise TypeError(
            f"weights must be a torch.Tensor or numpy.ndarray, got {type(weights).__name__}"
        )
    if weights.ndim != 2:
        raise ValueError(
            f"weights must be a 2-D matrix (queries, keys), got shape {weights.shape}"
        )
    return weights


def _check_labels(name: str, labels: Sequence[str] | None, size: int, axis: str) -> list[str]:
    if labels is None:
        return [str(i) for i in range(size)]
    if isinstance(labels, str):
        raise TypeError(f"{name} must be a sequence of strings, not one string")
    labels = [str(t) for t in labels]
    if len(labels) != size:
        raise ValueError(
            f"{name} has {len(labels)} labels but the weights have {size} {axis}"
        )
    return labels


def _axis_labels(tokens: Sequence[str] | None, key_tokens: Sequence[str] | None,
                 n_rows: int, n_cols: int) -> tuple[list[str], list[str]]:
    """The query and key labels; the query tokens label the keys too on a square map."""
    if key_tokens is None and tokens is not None and n_rows == n_cols:
        key_tokens = tokens
    return (_check_labels("tokens", tokens, n_rows, "rows (queries)"),
            _check_labels("key_tokens", key_tokens, n_cols, "columns (keys)"))


def attention_heatmap(
    weights: torch.Tensor | np.ndarray,
    tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    **style: object,
) -> Axes:
    """Draw an attention matrix: rows are queries (attending from), columns keys (to).

    Args:
        weights: ``(L, S)`` matrix.
        tokens: the ``L`` query labels; also the key labels when ``key_tokens`` is None
            and ``L == S``.
        key_tokens: the ``S`` key labels (for cross-attention, where they differ).
        ax: the Axes to draw into; a new figure when None.
        **style: :func:`draw_heatmap`'s keywords (``annotate``, ``fmt``, ``title``,
            ``vmin``, ``vmax``, ``colorbar``, ``label``), with the same defaults.

    Returns:
        The Axes drawn into.

    Raises:
        TypeError: if ``weights`` is not a tensor or array, a label list is a string, or a
            keyword is not one of :func:`draw_heatmap`'s.
        ValueError: if ``weights`` is not 2-D or a label list does not match its size.
    """
    matrix = _as_matrix(weights)
    n_rows, n_cols = matrix.shape
    # Every check before a figure is made, so a mistake leaves no empty figure behind.
    _axis_labels(tokens, key_tokens, n_rows, n_cols)
    unknown = sorted(set(style) - set(_HEATMAP_STYLE))
    if unknown:
        raise TypeError(f"attention_heatmap got unknown keyword(s) {unknown}; expected "
                        f"some of {list(_HEATMAP_STYLE)}")
    with mpl.rc_context(book_style()):
        if ax is None:
            _, ax = plt.subplots(figsize=(1.2 + 0.55 * n_cols, 0.9 + 0.5 * n_rows))
        draw_heatmap(ax, matrix, tokens, key_tokens, **style)
    return ax


def draw_heatmap(
    ax: Axes,
    weights: torch.Tensor | np.ndarray,
    tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    *,
    annotate: bool = False,
    fmt: str = ".2f",
    title: str | None = None,
    vmin: float = 0.0,
    vmax: float | None = 1.0,
    colorbar: bool = True,
    label: str = "weight",
) -> None:
    """Draw a query-by-key matrix into an existing Axes, in the current style.

    What :func:`attention_heatmap` draws, for callers that lay out their own figure (the
    explorer's print picture, the playgrounds) and for matrices that are not weights.

    Args:
        ax: the Axes to draw into.
        weights, tokens, key_tokens: as for :func:`attention_heatmap`.
        annotate: write each value in its cell.
        fmt: the format of the annotations.
        title: the Axes title.
        vmin, vmax: the colour scale; ``vmax=None`` takes the largest weight.
        colorbar: add a colour bar.
        label: the colour bar's name.

    Raises:
        TypeError: if ``ax`` is not an Axes, ``weights`` not a tensor or array, or a label
            list is a string.
        ValueError: if ``weights`` is not 2-D or a label list does not match its size.
    """
    if not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
    matrix = _as_matrix(weights)
    n_rows, n_cols = matrix.shape
    row_labels, col_labels = _axis_labels(tokens, key_tokens, n_rows, n_cols)
    image = ax.imshow(matrix, cmap=HEATMAP_CMAP, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_cols), col_labels, rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(n_rows), row_labels)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending from)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(True)
    if title:
        ax.set_title(title)
    if annotate:
        norm = image.norm
        for i in range(n_rows):
            for j in range(n_cols):
                # Dark text on the bright end of viridis, light text on the dark end.
                light_cell = norm(matrix[i, j]) > 0.6
                # NaN as the text and the legend write it, not Python's "nan".
                text = "NaN" if np.isnan(matrix[i, j]) else format(matrix[i, j], fmt)
                ax.text(j, i, text, ha="center", va="center",
                        fontsize=8, color="black" if light_cell else "white")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=label)



#: The keywords that style a heatmap: :func:`draw_heatmap`'s keyword-only parameters.
_HEATMAP_STYLE = tuple(name for name, parameter in
                       inspect.signature(draw_heatmap).parameters.items()
                       if parameter.kind is inspect.Parameter.KEYWORD_ONLY)

#: The Okabe-Ito palette without yellow, which is hard to see as a thin arrow on white.
_ARROW_COLOURS = tuple(c for c in OKABE_ITO if c != "#F0E442")


def _as_points_2d(vectors: object) -> np.ndarray:
    if isinstance(vectors, torch.Tensor):
        points = vectors.detach().to("cpu", torch.float64).numpy()
    elif isinstance(vectors, np.ndarray | Sequence) and not isinstance(vectors, str):
        try:
            points = np.asarray(vectors, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError("vectors must hold numbers: a (n, 2) tensor, array or list of "
                            "pairs") from None
    else:
        raise TypeError(f"vectors must be a (n, 2) torch.Tensor, numpy.ndarray or sequence of "
                        f"pairs, got {type(vectors).__name__}")
    if points.ndim == 1 and points.shape[0] == 2:
        points = points[None, :]  # one vector: (1, 2)
    if points.ndim != 2 or points.shape[1] != 2 or points.shape[0] == 0:
        raise ValueError(f"vectors must have shape (n, 2) with n >= 1, got shape {points.shape}")
    if not np.isfinite(points).all():
        raise ValueError("vectors must be finite (no NaN or infinity)")
    return points


def plot_vectors_2d(
    vectors: torch.Tensor | np.ndarray | Sequence[Sequence[float]],
    labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    colors: Sequence[str] | None = None,
    widths: Sequence[float] | None = None,
    title: str | None = None,
    tip_labels: bool = False,
) -> Axes:
    """Draw 2-D vectors as arrows from the origin, on axes with equal scales.

    Equal scales keep angles and lengths honest: an arrow twice as long looks twice as long,
    and two arrows at 45 degrees look it. Arrows are drawn in the order given, so a later,
    thinner arrow stays visible on top of an earlier, wider one that it coincides with.

    Args:
        vectors: ``n`` vectors, shape ``(n, 2)`` (a tensor, an array or a list of pairs; a
            single pair is one vector).
        labels: ``n`` legend labels; no legend when None.
        ax: the Axes to draw into; a new figure when None.
        colors: ``n`` colours; by default the Okabe-Ito palette (without yellow), in order.
        widths: ``n`` shaft widths as a fraction of the plot width; 0.012 by default.
        title: the Axes title.
        tip_labels: also write each label beside the tip of its arrow.

    Returns:
        The Axes drawn into.

    Raises:
        TypeError: if ``vectors`` is not a tensor, array or sequence of number pairs, or
            ``labels`` is a single string.
        ValueError: if ``vectors`` is not ``(n, 2)`` with ``n >= 1`` or not finite, or
            ``labels``, ``colors`` or ``widths`` do not have ``n`` entries.
    """
    points = _as_points_2d(vectors)  # (n, 2)
    n = points.shape[0]
    names = None if labels is None else _check_labels("labels", labels, n, "vectors")
    if tip_labels and names is None:
        raise ValueError("tip_labels=True needs labels")
    if colors is None:
        colors = [_ARROW_COLOURS[i % len(_ARROW_COLOURS)] for i in range(n)]
    elif isinstance(colors, str) or len(colors) != n:
        raise ValueError(f"colors must hold one colour per vector ({n}), got {colors!r}")
    if widths is None:
        widths = [0.012] * n
    elif len(widths) != n:
        raise ValueError(f"widths must hold one width per vector ({n}), got {len(widths)}")

    with mpl.rc_context(book_style()):
        if ax is None:
            _, ax = plt.subplots(figsize=(5.0, 5.0))
        ax.axhline(0.0, color="#999999", linewidth=0.8, zorder=0)
        ax.axvline(0.0, color="#999999", linewidth=0.8, zorder=0)
        for i, (x, y) in enumerate(points):
            ax.quiver(0.0, 0.0, x, y, angles="xy", scale_units="xy", scale=1.0,
                      color=colors[i], width=widths[i], zorder=2 + i,
                      label=None if names is None else names[i])
            if tip_labels:
                ax.annotate(names[i], (x, y), xytext=(4, 4), textcoords="offset points",
                            color=colors[i], fontsize=9)
        low = np.minimum(points.min(axis=0), 0.0)
        high = np.maximum(points.max(axis=0), 0.0)
        margin = 0.12 * max(float((high - low).max()), 1e-9)
        ax.set_xlim(low[0] - margin, high[0] + margin)
        ax.set_ylim(low[1] - margin, high[1] + margin)
        ax.set_aspect("equal")
        ax.grid(True, linestyle=":", linewidth=0.6, alpha=0.7)
        ax.set_xlabel("dimension 1")
        ax.set_ylabel("dimension 2")
        if title:
            ax.set_title(title)
        if names is not None:
            ax.legend(loc="best", fontsize=9, framealpha=0.95)
    return ax


def attention_heatmap_row(
    matrices: Sequence[torch.Tensor | np.ndarray],
    titles: Sequence[str] | None = None,
    tokens: Sequence[str] | None = None,
    *,
    figsize: tuple[float, float] | None = None,
    tick_step: int = 1,
    annotate: bool = False,
    fmt: str = ".2f",
    vmax: float | None = 1.0,
) -> tuple[mpl.figure.Figure, list[Axes]]:
    """Several attention matrices side by side, on one colour scale with one colour bar.

    Each panel is drawn by :func:`attention_heatmap`. Only the first panel keeps its query
    labels and y-axis title, so the panels can sit close together; one colour bar serves
    them all.

    Args:
        matrices: ``n >= 1`` matrices, each ``(L, S)`` (all the same shape).
        titles: ``n`` panel titles, or None for none.
        tokens: the ``L`` labels of the queries (and of the keys when ``L == S``); the
            positions ``0 .. L-1`` when None.
        figsize: the figure size in inches; by default 6.8 wide.
        tick_step: label every ``tick_step``-th row and column (the first included), to
            keep long sequences legible.
        annotate, fmt: write each value in its cell, with this format.
        vmax: the top of the shared colour scale; ``None`` takes the largest value of all
            the matrices.

    Returns:
        ``(figure, axes)``: the new figure and its ``n`` Axes, left to right.

    Raises:
        TypeError: a matrix that is not a tensor or array, ``tick_step`` not an int.
        ValueError: no matrices, matrices that are not 2-D or differ in shape, ``titles``
            or ``tokens`` of the wrong length, ``tick_step < 1``.
    """
    if isinstance(matrices, torch.Tensor | np.ndarray) or not isinstance(matrices, Sequence):
        raise TypeError("matrices must be a list of (L, S) matrices, e.g. [weights_a, weights_b]")
    grids = [_as_matrix(m) for m in matrices]
    if not grids:
        raise ValueError("matrices must hold at least one matrix")
    shape = grids[0].shape
    if any(g.shape != shape for g in grids):
        raise ValueError(
            f"matrices must all have the same shape, got {[tuple(g.shape) for g in grids]}"
        )
    if titles is not None and (isinstance(titles, str) or len(titles) != len(grids)):
        raise ValueError(f"titles must hold one title per matrix ({len(grids)}), got {titles!r}")
    if isinstance(tick_step, bool) or not isinstance(tick_step, int):
        raise TypeError(f"tick_step must be an int, got {type(tick_step).__name__}")
    if tick_step < 1:
        raise ValueError(f"tick_step must be at least 1, got {tick_step}")
    n_rows, n_cols = shape
    row_labels = _check_labels("tokens", tokens, n_rows, "rows (queries)")
    col_labels = row_labels if n_rows == n_cols else [str(j) for j in range(n_cols)]
    row_labels = [t if i % tick_step == 0 else "" for i, t in enumerate(row_labels)]
    col_labels = [t if j % tick_step == 0 else "" for j, t in enumerate(col_labels)]
    top = max(float(g.max()) for g in grids) if vmax is None else vmax

    with mpl.rc_context(book_style()):
        fig, axes = plt.subplots(1, len(grids), figsize=figsize or (6.8, 2.6),
                                 layout="constrained", squeeze=False)
        axes = list(axes[0])
        for k, (ax, grid) in enumerate(zip(axes, grids, strict=True)):
            attention_heatmap(grid, row_labels, col_labels, ax=ax, annotate=annotate,
                              fmt=fmt, title=None if titles is None else titles[k],
                              vmax=top, colorbar=False)
            if k:
                ax.set_ylabel("")
                ax.tick_params(labelleft=False)
        fig.colorbar(axes[-1].images[0], ax=axes, fraction=0.046, pad=0.02,
                     label="weight")
    return fig, axes


#: Masked cells: a light grey face for a weight of exactly 0, grey hatching for every masked
#: cell, and a dark grey face for NaN, so that NaN is never mistaken for a small weight.
MASKED_GREY = "#DDDDDD"
HATCH_GREY = "#888888"
NAN_GREY = "#555555"


def _as_bool_mask(mask: object, shape: tuple[int, ...]) -> np.ndarray:
    if isinstance(mask, torch.Tensor):
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a boolean tensor (True = may attend), got {mask.dtype}")
        mask = mask.detach().cpu().numpy()
    elif isinstance(mask, np.ndarray):
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be a boolean array (True = may attend), got {mask.dtype}")
    else:
        raise TypeError(f"mask must be a boolean torch.Tensor or numpy.ndarray, got "
                        f"{type(mask).__name__}")
    if mask.shape != shape:
        raise ValueError(f"mask must have the shape of the weights, {shape}, got {mask.shape}")
    return mask


def shade_masked(ax: Axes, mask: torch.Tensor | np.ndarray,
                 weights: torch.Tensor | np.ndarray) -> None:
    """Hatch the cells that ``mask`` forbids on a heatmap drawn by :func:`attention_heatmap`.

    A forbidden cell whose weight is exactly 0 gets a light grey face and loses its
    annotation, so a reader sees at a glance that nothing is there; a forbidden cell with any
    other weight (a fill value that leaked, or NaN) keeps its colour and its number under the
    hatching, the number on a patch of the cell's own colour that the hatching leaves clear.

    Args:
        ax: an Axes drawn by :func:`attention_heatmap`, annotated or not.
        mask: ``(L, S)`` boolean, True = may attend.
        weights: the ``(L, S)`` weights that the heatmap shows.

    Raises:
        TypeError: ``mask`` not boolean, ``weights`` not a tensor or array.
        ValueError: ``weights`` not 2-D, or ``mask`` of another shape.
    """
    matrix = _as_matrix(weights)
    allowed = _as_bool_mask(mask, matrix.shape)
    annotations = {(round(t.get_position()[1]), round(t.get_position()[0])): t
                   for t in ax.texts}
    for i, j in zip(*np.nonzero(~allowed), strict=True):
        exact_zero = bool(matrix[i, j] == 0)  # exact: masked weights are written as 0
        ax.add_patch(Rectangle(
            (j - 0.5, i - 0.5), 1, 1, hatch="///", linewidth=0,
            facecolor=MASKED_GREY if exact_zero else "none", edgecolor=HATCH_GREY))
        if (i, j) not in annotations:
            continue
        if exact_zero:
            annotations[i, j].set_visible(False)
        elif ax.images:  # the cell's colour (NaN's is the colour map's "bad" one)
            face = ax.images[0].to_rgba(matrix[i, j])
            annotations[i, j].set_bbox({"boxstyle": "square,pad=0.15", "facecolor": face,
                                        "edgecolor": "none"})


def mask_panels(
    panels: dict[str, torch.Tensor | np.ndarray],
    tokens: Sequence[str] | Sequence[Sequence[str]],
    masks: Sequence[torch.Tensor | np.ndarray | None],
    *,
    figsize: tuple[float, float] = (6.8, 3.1),
) -> tuple[mpl.figure.Figure, list[Axes]]:
    """Annotated attention heatmaps side by side, with masked cells hatched.

    Each panel is drawn by :func:`attention_heatmap` and shaded by :func:`shade_masked`.
    NaN weights are drawn dark grey and labelled ``NaN``. The legend under the panels names
    only what the figure shows: masked cells of weight exactly 0, masked cells that still
    hold some weight, and NaN.

    Args:
        panels: title -> ``(L, S)`` weights, in the order to draw them (all the same shape).
        tokens: the ``L`` token labels shared by every panel, or one list per panel (then
            every panel keeps its own tick labels).
        masks: one ``(L, S)`` boolean mask (True = may attend) or None per panel.
        figsize: the figure size in inches.

    Returns:
        ``(figure, axes)``, the axes left to right.

    Raises:
        TypeError: a mask that is not boolean, a panel that is not a tensor or array.
        ValueError: no panels, panels of different shapes, or ``masks`` or per-panel
            ``tokens`` whose number differs from the number of panels.
    """
    if not isinstance(panels, dict) or not panels:
        raise ValueError("panels must be a non-empty dict of title -> (L, S) weights")
    grids = [_as_matrix(w) for w in panels.values()]
    if any(g.shape != grids[0].shape for g in grids):
        raise ValueError(f"panels must all have the same shape, got "
                         f"{[tuple(g.shape) for g in grids]}")
    if isinstance(masks, torch.Tensor | np.ndarray) or len(masks) != len(grids):
        raise ValueError(f"masks must hold one mask (or None) per panel ({len(grids)})")
    if isinstance(tokens, str):
        raise TypeError("tokens must be a sequence of strings, not one string")
    per_panel = len(tokens) > 0 and not isinstance(tokens[0], str)
    if per_panel and len(tokens) != len(grids):
        raise ValueError(f"tokens must hold one label list per panel ({len(grids)}), "
                         f"got {len(tokens)}")
    shown = set()
    with mpl.rc_context(book_style()):
        fig, axes = plt.subplots(1, len(grids), figsize=figsize, layout="constrained",
                                 squeeze=False)
        axes = list(axes[0])
        for k, (ax, title, grid, mask) in enumerate(
                zip(axes, panels, grids, masks, strict=True)):
            labels = tokens[k] if per_panel else tokens
            attention_heatmap(grid, labels, ax=ax, title=title, annotate=True,
                              colorbar=k == len(grids) - 1)
            image = ax.images[0]
            image.set_cmap(image.get_cmap().with_extremes(bad=NAN_GREY))
            for text in ax.texts:
                text.set_fontsize(7)
            if np.isnan(grid).any():
                shown.add("nan")
            if mask is not None:
                allowed = _as_bool_mask(mask, grid.shape)
                shade_masked(ax, allowed, grid)
                forbidden = grid[~allowed]
                if (forbidden == 0).any():  # exact: masked weights are written as 0
                    shown.add("zero")
                if (forbidden != 0).any():  # NaN counts as "not 0" too
                    shown.add("leak")
            if k:
                ax.set_ylabel("")
                if not per_panel:
                    ax.tick_params(labelleft=False)
        keys = [Patch(facecolor=MASKED_GREY, edgecolor=HATCH_GREY, hatch="///",
                      label="masked: weight exactly 0")] if "zero" in shown else []
        if "leak" in shown:
            keys.append(Patch(facecolor="none", edgecolor=HATCH_GREY, hatch="///",
                              label="masked, yet not 0"))
        if "nan" in shown:
            keys.append(Patch(facecolor=NAN_GREY, label="NaN"))
        if keys:
            fig.legend(handles=keys, loc="outside lower center", ncols=len(keys),
                       frameon=False, fontsize=9)
    return fig, axes
