"""``attnbook.plots.attention_heatmap``, drawn with the Agg backend."""

from __future__ import annotations

import re

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnbook.plots import HEATMAP_CMAP, attention_heatmap, draw_heatmap


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


def test_draw_heatmap_names_its_colour_bar():
    fig, (left, right) = plt.subplots(1, 2)
    draw_heatmap(left, softmax_rows(3, 3), ["a", "b", "c"])
    draw_heatmap(right, softmax_rows(3, 3), ["a", "b", "c"], label="contribution share")
    bars = [ax for ax in fig.axes if ax not in (left, right)]
    assert sorted(bar.get_ylabel() for bar in bars) == ["contribution share", "weight"]
    assert tick_texts(right.get_xticklabels()) == ["a", "b", "c"]  # square: keys = queries


def test_draw_heatmap_needs_an_axes():
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes"):
        draw_heatmap(None, softmax_rows(2, 2))


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


# shade_masked and mask_panels: the hatched masked cells of the causal-masks chapter.

def causal_weights(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A causal mask and softmax weights that are exactly 0 where it forbids a key."""
    from attnbook.attention import masked_softmax
    from attnbook.masks import causal_mask

    mask = causal_mask(n)
    scores = torch.randn(n, n, generator=torch.Generator().manual_seed(3))
    return mask, masked_softmax(scores, mask)


def hatched(ax) -> list:
    return [p for p in ax.patches if p.get_hatch() == "///"]


def test_shade_masked_hatches_forbidden_cells_and_hides_their_zeros():
    from attnbook.plots import MASKED_GREY, shade_masked

    mask, weights = causal_weights(4)
    ax = attention_heatmap(weights, annotate=True)
    shade_masked(ax, mask, weights)
    patches = hatched(ax)
    assert len(patches) == int((~mask).sum()) == 6
    corners = {(round(p.get_x() + 0.5), round(p.get_y() + 0.5)) for p in patches}
    assert corners == {(j, i) for i in range(4) for j in range(4) if j > i}
    assert all(mpl.colors.same_color(p.get_facecolor(), MASKED_GREY) for p in patches)
    visible = {(round(t.get_position()[1]), round(t.get_position()[0]))
               for t in ax.texts if t.get_visible()}
    assert visible == {(i, j) for i in range(4) for j in range(4) if j <= i}


def test_shade_masked_keeps_a_forbidden_weight_that_is_not_zero():
    from attnbook.plots import shade_masked

    mask = torch.tensor([[True, False], [True, True]])
    leaked = np.array([[0.8, 0.2], [0.5, 0.5]])  # the forbidden cell holds 0.2
    ax = attention_heatmap(leaked, annotate=True)
    shade_masked(ax, mask, leaked)
    (patch,) = hatched(ax)
    assert patch.get_facecolor()[3] == 0.0  # transparent: the colour shows through
    assert all(t.get_visible() for t in ax.texts)
    # The leaked number sits on a patch of its cell's colour, drawn over the hatching.
    (number,) = [t for t in ax.texts if t.get_position() == (1, 0)]
    box = number.get_bbox_patch()
    assert box is not None and number.get_zorder() > patch.get_zorder()
    assert mpl.colors.same_color(box.get_facecolor(), ax.images[0].to_rgba(0.2))
    assert all(t.get_bbox_patch() is None for t in ax.texts if t is not number)


def test_shade_masked_rejects_bad_masks():
    from attnbook.plots import shade_masked

    mask, weights = causal_weights(3)
    ax = attention_heatmap(weights)
    with pytest.raises(TypeError, match="boolean"):
        shade_masked(ax, mask.float(), weights)
    with pytest.raises(ValueError, match="shape"):
        shade_masked(ax, mask[:2], weights)
    with pytest.raises(TypeError, match="mask"):
        shade_masked(ax, [[True]], weights)


def test_mask_panels_draws_one_panel_per_matrix_with_a_legend_of_what_it_shows():
    from attnbook.plots import NAN_GREY, mask_panels

    mask, weights = causal_weights(3)
    nan_rows = weights.clone()
    nan_rows[0] = float("nan")
    fig, axes = mask_panels({"no mask": softmax_rows(3, 3), "causal": weights,
                             "NaN": nan_rows}, ["a", "b", "c"], [None, mask, mask])
    assert [ax.get_title() for ax in axes] == ["no mask", "causal", "NaN"]
    assert len(hatched(axes[0])) == 0 and len(hatched(axes[1])) == 3
    assert tick_texts(axes[0].get_yticklabels()) == ["a", "b", "c"]
    assert not axes[1].yaxis.get_tick_params()["labelleft"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["masked: weight exactly 0", "masked, yet not 0", "NaN"]
    bad = axes[2].images[0].get_cmap().get_bad()
    assert mpl.colors.same_color(bad, NAN_GREY)
    assert len(fig.axes) == 4  # three panels and one colour bar
    # The NaN cells are labelled as the legend and the text write it, not "nan".
    cells = [text.get_text() for text in axes[2].texts]
    assert cells.count("NaN") == 3 and "nan" not in cells


def test_mask_panels_with_labels_per_panel_keeps_every_panels_ticks():
    from attnbook.plots import mask_panels

    mask, weights = causal_weights(2)
    fig, axes = mask_panels({"a": weights, "b": weights}, [["x", "y"], ["u", "v"]],
                            [mask, mask])
    assert tick_texts(axes[1].get_yticklabels()) == ["u", "v"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["masked: weight exactly 0"]


def test_mask_panels_rejects_mismatched_arguments():
    from attnbook.plots import mask_panels

    mask, weights = causal_weights(3)
    with pytest.raises(ValueError, match="one mask"):
        mask_panels({"a": weights}, ["a", "b", "c"], [mask, mask])
    with pytest.raises(ValueError, match="same shape"):
        mask_panels({"a": weights, "b": weights[:2]}, ["a", "b", "c"], [None, None])
    with pytest.raises(ValueError, match="non-empty"):
        mask_panels({}, ["a"], [])
    with pytest.raises(ValueError, match="one label list"):
        mask_panels({"a": weights}, [["a", "b", "c"], ["d", "e", "f"]], [None])


@pytest.mark.parametrize(("args", "error", "message"), [
    ((torch.full((4, 4), 0.25), ["a", "b", "c"]), ValueError,
     "tokens has 3 labels but the weights have 4 rows (queries)"),
    ((torch.full((3, 5), 0.2), ["a", "b", "c"], ["x", "y"]), ValueError,
     "key_tokens has 2 labels but the weights have 5 columns (keys)"),
    ((torch.full((3, 3), 1 / 3), "abc"), TypeError,
     "tokens must be a sequence of strings, not one string"),
    (([[1.0, 0.0], [0.0, 1.0]],), TypeError,
     "weights must be a torch.Tensor or numpy.ndarray, got list"),
    ((np.zeros((2, 3, 3)),), ValueError,
     "weights must be a 2-D matrix (queries, keys), got shape (2, 3, 3)"),
], ids=["query-labels", "key-labels", "one-string", "list", "3-D"])
def test_heatmap_refuses_bad_input_naming_it(args, error, message):
    with pytest.raises(error, match=re.escape(message)):
        attention_heatmap(*args)


def test_heatmap_refuses_an_unknown_style_keyword_before_drawing():
    figures = plt.get_fignums()
    with pytest.raises(TypeError, match=re.escape("unknown keyword(s) ['colourbar']")):
        attention_heatmap(torch.full((2, 2), 0.5), colourbar=False)
    assert plt.get_fignums() == figures, "a refused call left a figure behind"


# use_book_style: the look, and SVG figures (with a PNG for the PDF) in IPython.

@pytest.fixture
def shell():
    """An IPython shell for the test's duration, then none again."""
    from IPython.core.interactiveshell import InteractiveShell

    instance = InteractiveShell.instance()
    yield instance
    InteractiveShell.clear_instance()


def figure_formats(instance) -> set[str]:
    """The MIME types that the shell's display formatters would produce for a figure."""
    figure, ax = plt.subplots()  # IPython shows nothing for a figure without axes
    ax.plot([0, 1])
    bundle, _ = instance.display_formatter.format(figure)
    plt.close(figure)
    return set(bundle) - {"text/plain"}


def test_use_book_style_shows_figures_as_svg_and_png_in_ipython(shell):
    from attnbook.plots import INLINE_FORMATS, use_book_style

    with mpl.rc_context():
        use_book_style()
        assert mpl.rcParams["svg.hashsalt"] == "attnbook"
        assert mpl.rcParams["figure.facecolor"] == "white"
    assert INLINE_FORMATS == ("svg", "png")
    assert figure_formats(shell) == {"image/svg+xml", "image/png"}


def test_book_style_svg_is_the_same_file_twice():
    """The SVG of one figure drawn twice is the same text but for its date."""
    import io

    from attnbook.plots import book_style

    def svg() -> str:
        with mpl.rc_context(book_style()):
            figure, ax = plt.subplots()
            ax.plot([0, 1], [1, 0])
            buffer = io.StringIO()
            figure.savefig(buffer, format="svg", metadata={"Date": None})
            plt.close(figure)
        return buffer.getvalue()

    first = svg()
    assert "clipPath id=" in first or "clip-path" in first
    assert svg() == first


# legible_text: no text under 9 px where the book shows the figure.

def test_legible_text_raises_small_text_of_a_figure_wider_than_the_column():
    from attnbook.plots import MIN_TEXT_PX, legible_text, text_px_per_point

    figure, ax = plt.subplots(figsize=(10.0, 3.0))  # 720 pt, shown shrunk to the column
    ax.plot([0, 1], [0, 1])
    ax.set_title("title", fontsize=20)
    ax.text(0.5, 0.5, "small note", fontsize=6)
    ax.tick_params(labelsize=7)
    assert legible_text(figure) is figure
    figure.canvas.draw()  # new tick labels take the axis's size too
    px = text_px_per_point(10.0)
    assert px < 1  # shrunk: each point shows under a pixel
    ticks = [t for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    for text in ticks + ax.texts:
        assert text.get_fontsize() * px >= MIN_TEXT_PX - 1e-9, text
    assert ax.title.get_fontsize() == 20  # larger text stays as it was


def test_legible_text_leaves_a_figure_that_fits_the_column_alone():
    from attnbook.plots import legible_text, text_px_per_point

    figure, ax = plt.subplots(figsize=(6.0, 3.0))
    ax.text(0.5, 0.5, "seven points", fontsize=7)
    legible_text(figure)
    assert ax.texts[0].get_fontsize() == 7  # 7 pt at 4/3 px a point is 9.3 px
    assert text_px_per_point(6.0) == 96 / 72


def test_legible_text_refuses_what_is_not_a_figure():
    from attnbook.plots import legible_text

    with pytest.raises(TypeError, match="fig must be a matplotlib Figure, got Axes"):
        legible_text(plt.subplots()[1])


def test_figures_shown_in_ipython_have_their_small_text_raised(shell):
    from attnbook.plots import use_book_style

    with mpl.rc_context():
        use_book_style()
        figure, ax = plt.subplots(figsize=(10.0, 3.0))
        ax.text(0.5, 0.5, "small note", fontsize=6)
        bundle, _ = shell.display_formatter.format(figure)
        plt.close(figure)
    assert "image/svg+xml" in bundle
    assert ax.texts[0].get_fontsize() > 6


def test_legible_text_uses_the_width_the_figure_is_saved_at():
    """A label outside the axes widens what Jupyter saves ("tight"): the floor follows it."""
    import io

    from attnbook.plots import MIN_TEXT_PX, legible_text, text_px_per_point

    figure, ax = plt.subplots(figsize=(8.0, 3.0))
    ax.text(1.05, 0.5, "a note far to the right of the axes", fontsize=6,
            transform=ax.transAxes)
    legible_text(figure)
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", pad_inches=0.1)
    saved = float(re.search(r'viewBox="0 0 ([\d.]+)', buffer.getvalue()).group(1)) / 72
    assert saved > 8.0  # the note widened the saved picture
    assert ax.texts[0].get_fontsize() * text_px_per_point(saved) >= MIN_TEXT_PX - 0.01


def test_legible_text_works_on_a_figure_made_without_pyplot():
    from matplotlib.figure import Figure

    from attnbook.plots import MIN_TEXT_PX, legible_text, text_px_per_point

    figure = Figure(figsize=(10.0, 3.0))  # no pyplot, so no canvas with a renderer of its own
    text = figure.add_subplot().text(0.5, 0.5, "note", fontsize=6)
    legible_text(figure)
    assert text.get_fontsize() * text_px_per_point(10.0) >= MIN_TEXT_PX


def test_measured_legible_text_holds_on_the_svg_jupyter_saves():
    """Two annotated heatmaps with a colour bar, 9 inches wide (a figure of the book whose
    SVG came out wider than Agg measured it): every glyph of the saved SVG shows at 9 px."""
    import io

    from attnbook.plots import MIN_TEXT_PX, legible_text, text_px_per_point

    figure, axes = plt.subplots(1, 2, figsize=(9.0, 4.2))
    for ax in axes:
        image = ax.imshow(np.arange(81.0).reshape(9, 9))
        for i in range(9):
            for j in range(9):
                ax.text(j, i, f"{(i * 9 + j) / 81:.2f}", fontsize=6, ha="center", va="center")
    figure.colorbar(image, ax=axes, label="weight")
    legible_text(figure, measure=True)
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", pad_inches=0.1)
    svg = buffer.getvalue()
    width = float(re.search(r'viewBox="0 0 ([\d.]+)', svg).group(1)) / 72
    sizes = [100 * float(a) for a, b in re.findall(r"scale\(([\d.]+) -([\d.]+)\)", svg) if a == b]
    assert min(sizes) * text_px_per_point(width) >= MIN_TEXT_PX - 1e-6


def test_one_display_raises_small_text_once_and_the_png_alone_still_does(shell, monkeypatch):
    import attnbook.plots as plots

    calls = []
    real = plots.legible_text
    monkeypatch.setattr(plots, "legible_text",
                        lambda fig, **kw: calls.append(kw) or real(fig, **kw))
    with mpl.rc_context():
        plots.use_book_style()
        figure, ax = plt.subplots(figsize=(10.0, 3.0))
        ax.text(0.5, 0.5, "small note", fontsize=6)
        bundle, _ = shell.display_formatter.format(figure)
        assert {"image/svg+xml", "image/png"} <= set(bundle)
        assert calls == [{"measure": True}]  # the PNG of the same display skips the work
        other, ax2 = plt.subplots(figsize=(10.0, 3.0))
        ax2.text(0.5, 0.5, "small note", fontsize=6)
        shell.display_formatter.formatters["image/png"](other)  # a PNG with no SVG before
        plt.close(figure)
        plt.close(other)
    assert calls == [{"measure": True}, {}]
    assert ax2.texts[0].get_fontsize() > 6


@pytest.mark.parametrize("case", ["legend outside", "colour bar and title", "rotated ticks",
                                  "diagram", "constrained layout", "rasterized",
                                  "figure image"])
def test_the_width_measured_for_the_floor_is_the_saved_svgs(case):
    """``legible_text`` measures the SVG's width without writing it: the width is the one
    Jupyter's SVG gets, text past the axes included."""
    import io

    from attnbook import diagrams
    from attnbook.plots import _svg_width

    if case == "diagram":
        figure = diagrams.query_trip()
    else:
        figure, ax = plt.subplots(figsize=(9.0, 3.0),
                                  layout="constrained" if case == "constrained layout" else None)
        ax.plot(range(10), label="a legend label longer than the gap it sits in")
        if case == "legend outside":
            ax.legend(bbox_to_anchor=(1.02, 1.0), loc="upper left")
        elif case in ("colour bar and title", "constrained layout"):
            figure.colorbar(ax.imshow(np.eye(4)), ax=ax)
            figure.suptitle(r"weights over $\sqrt{d_k}$, far wider than its axes" * 2)
        elif case == "rasterized":  # the legend's width is taken from the image pass
            ax.legend(mode="expand", loc="lower left", bbox_to_anchor=(0.0, 1.02, 1.5, 0.1))
            ax.set_rasterized(True)
        elif case == "figure image":
            figure.figimage(np.ones((20, 1200)), xo=100)
        else:
            ax.set_xticks(range(10), [f"token {i}" * 3 for i in range(10)], rotation=60)
    dpi = figure.dpi
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", pad_inches=0.1)
    saved = float(re.search(r'<svg[^>]*\swidth="([\d.]+)pt"', buffer.getvalue()).group(1)) / 72
    assert saved != figure.get_size_inches()[0]  # the text or the crop changed the width
    # The header's 6 digits; a layout engine places the axes anew on every save, and its
    # second save can come out up to 0.001 inch apart from the first (measured 0.0003).
    tolerance = 1e-3 if case == "constrained layout" else 1e-5
    assert _svg_width(figure) == pytest.approx(saved, abs=tolerance)
    assert figure.dpi == dpi  # measuring at the SVG's 72 dots an inch leaves it as it was
    plt.close(figure)
