"""The book in the theme's dark mode: its figures and widgets are deliberate light cards,
dimmed so that they do not glare.

pydata-sphinx-theme switches to dark with ``data-theme="dark"`` on ``<html>``. The book's
matplotlib figures are opaque PNGs with a white face and dark ink (``plots.book_style``), and
the widgets are white panels; ``book/_static/attnbook.css`` makes a figure a plain light card
on the dark page, dimmed to 85 % (the theme would dim it and raise its contrast, and frame it
in grey-blue) and lets a widget be its own panel, dimmed alike (no theme frame, which on a
phone would also narrow the column).

These tests load the themes' real stylesheets and the book's own into Chromium, around the
markup myst-nb gives a cell's output, so they need no book build.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from browser_helpers import DARK_CARD_FILTER, book_page, contrast, watched_tab
from playwright.sync_api import expect

from attnbook.explorer import explore
from attnbook.playgrounds import mask_playground

TIMEOUT = 20_000
SCREENSHOTS = Path(__file__).resolve().parents[1] / "_build" / "screenshots" / "dark-mode"
WHITE = "rgb(255, 255, 255)"


def book_figure_png() -> bytes:
    """A figure drawn as a chapter draws it (the book's style, saved by IPython's inline
    backend path), with dark text: a heatmap with its values, title and colour bar."""
    import matplotlib as mpl
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    from attnbook.plots import book_style, draw_heatmap

    weights = torch.softmax(torch.tensor([[2.0, 0.5, -1.0], [0.1, 1.5, 0.3],
                                          [-0.4, 0.2, 2.2]]), dim=-1)
    with mpl.rc_context(book_style()):
        figure = Figure(figsize=(4.0, 3.2))
        ax = figure.subplots()
        draw_heatmap(ax, weights, ["The", "cat", "sat"], annotate=True)
        ax.set_title("Attention weights")
        return print_figure(figure, "png", bbox_inches="tight")


def figure_markup(png: bytes) -> str:
    """A figure as myst-nb writes a cell's image output into the page."""
    data = base64.b64encode(png).decode("ascii")
    return ('<figure class="align-default" id="fig-test"><img alt="A heatmap of weights." '
            f'src="data:image/png;base64,{data}" /><figcaption><p><span class="caption-number">'
            'Fig. 1 </span><span class="caption-text">Weights.</span></p></figcaption></figure>')


def test_the_figures_are_opaque_white_pngs():
    """The picture itself is a white card with dark ink: no transparent pixel anywhere."""
    import matplotlib.image

    pixels = matplotlib.image.imread(io.BytesIO(book_figure_png()))  # (H, W, 4) in [0, 1]
    assert pixels.shape[2] == 4 and pixels[..., 3].min() == 1.0
    border = np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])
    assert (border[:, :3] == 1.0).all()  # a white face around the axes
    grey = pixels[..., :3] @ np.array([0.2126, 0.7152, 0.0722])
    assert (grey < 0.15).mean() > 0.001  # and dark ink (text, ticks) on it


def image_style(tab) -> dict:
    return tab.locator(".cell_output img").evaluate("""e => {
      const s = getComputedStyle(e);
      return {background: s.backgroundColor, filter: s.filter, padding: s.paddingLeft,
              page: getComputedStyle(document.body).backgroundColor};
    }""")


@pytest.mark.browser
@pytest.mark.parametrize("width", [390, 1280])
def test_in_dark_mode_a_figure_is_a_dimmed_light_card(browser, width):
    with watched_tab(browser, {"width": width, "height": 900}, TIMEOUT, local_only=True) as tab:
        tab.set_content(book_page(figure_markup(book_figure_png()), mode="dark"))
        image = tab.locator(".cell_output img")
        expect(image).to_be_visible(timeout=TIMEOUT)
        tab.wait_for_function("() => document.querySelector('.cell_output img').complete")
        style = image_style(tab)
        assert contrast(style["page"], "rgb(0, 0, 0)") < 2  # the page is dark
        assert style["background"] == WHITE, style  # the card is white...
        assert style["filter"] == DARK_CARD_FILTER, style  # ... dimmed alone, its contrast kept
        assert float(style["padding"].removesuffix("px")) >= 4, style
        box = image.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        target = SCREENSHOTS / f"figure-{width}-dark.png"
        image.screenshot(path=str(target))
        # What the reader sees: a light grey frame (white at 85 %: 217 of 255), and on it
        # dark ink.
        import matplotlib.image

        pixels = matplotlib.image.imread(str(target))[..., :3]
        frame = np.concatenate([pixels[1, 5:-5], pixels[5:-5, 1]])  # (round corners)
        assert (np.abs(frame - 217 / 255) < 0.02).all(), frame.min()
        grey = pixels @ np.array([0.2126, 0.7152, 0.0722])
        assert (grey > 0.8).mean() > 0.3 and (grey < 0.15).mean() > 0.001


@pytest.mark.browser
def test_in_light_mode_the_figure_rules_change_nothing(browser):
    with watched_tab(browser, {"width": 1280, "height": 900}, TIMEOUT, local_only=True) as tab:
        tab.set_content(book_page(figure_markup(book_figure_png()), mode="light"))
        expect(tab.locator(".cell_output img")).to_be_visible(timeout=TIMEOUT)
        style = image_style(tab)
        assert style == {"background": "rgba(0, 0, 0, 0)", "filter": "none", "padding": "0px",
                         "page": WHITE}, style


@pytest.mark.browser
@pytest.mark.parametrize("mode", ["light", "dark"])
def test_a_widget_is_its_own_panel_without_a_theme_frame(browser, mode):
    """The theme frames every HTML output in dark mode; the book's widgets keep the whole
    column (356 px on a 390 px phone) and no grey-blue frame shows around their panel. In
    dark mode the panel is dimmed as a figure is, in light mode not at all."""
    outputs = [mask_playground().to_html(),
               explore(torch.softmax(torch.randn(1, 2, 4, 4), -1), list("abcd")).to_html()]
    with watched_tab(browser, {"width": 390, "height": 900}, TIMEOUT, local_only=True) as tab:
        tab.set_content(book_page(*outputs, mode=mode))
        for root in (tab.locator(".attnbook-pg"), tab.locator(".attnbook-explorer")):
            expect(root).to_be_visible(timeout=TIMEOUT)
            frame = root.evaluate("""e => {
              const o = e.parentNode, s = getComputedStyle(o);
              return [s.backgroundColor, s.paddingLeft, e.getBoundingClientRect().width,
                      o.closest('.bd-article').getBoundingClientRect().width,
                      getComputedStyle(e).backgroundColor, getComputedStyle(e).filter];
            }""")
            background, padding, panel, article, face, dimmed = frame
            assert background == "rgba(0, 0, 0, 0)" and padding == "0px", frame
            assert face == WHITE and panel >= article - 40, frame
            assert dimmed == (DARK_CARD_FILTER if mode == "dark" else "none"), frame
        assert tab.evaluate("() => document.documentElement.scrollWidth") <= 390


def test_the_dark_mode_rules_are_scoped_to_dark_mode():
    """Every rule of the book's stylesheet that touches cell outputs names the dark mode."""
    css = (Path(__file__).resolve().parents[1] / "book" / "_static" / "attnbook.css").read_text()
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    selectors = [rule.split("{")[0].strip() for rule in css.split("}") if "{" in rule]
    outputs = [s for s in selectors if "cell_output" in s]
    assert len(outputs) >= 2
    assert all(s.startswith('html[data-theme="dark"]') for s in outputs), outputs
