"""Shared by the tests of the package's browser widgets (the explorer and the playgrounds)."""

from __future__ import annotations

import contextlib
import functools
import io
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest


def assert_refused(make, error: type[Exception], fragments: tuple[str, ...]) -> None:
    """``make()`` raises ``error`` whose message names every one of ``fragments``."""
    with pytest.raises(error) as caught:
        make()
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def assert_css_scoped(fragment: str, root_class: str) -> None:
    """The fragment's stylesheet is a list of plain rules, every selector under ``root_class``.

    So the widget's styles cannot leak into the page (and no ``@import`` or ``@media`` rule
    slips in), however many widgets share it.
    """
    css = re.search(r"<style>(.*?)</style>", fragment, re.S).group(1)
    rules = [rule for rule in css.split("}") if rule.strip()]
    assert len(rules) > 20
    for rule in rules:
        assert "{" in rule and "@" not in rule, rule
        for selector in rule.split("{")[0].split(","):
            assert selector.strip().startswith(root_class), selector


def check_print_and_web_editions(widget: object, html_start: str) -> np.ndarray:
    """Display ``widget`` as Jupyter does and check what each builder of the book picks.

    The display bundle must hold HTML (starting with ``html_start``), a PNG and plain text,
    without leaving a pyplot figure open; the HTML builder must choose the HTML and the
    LaTeX (PDF) builder the picture. Returns the PNG's pixels, ``(height, width, channels)``.
    """
    import matplotlib.image
    import matplotlib.pyplot as plt
    from IPython.core.formatters import DisplayFormatter
    from myst_nb.core.render import base_render_priority

    open_figures = plt.get_fignums()
    bundle, _ = DisplayFormatter().format(widget)
    assert plt.get_fignums() == open_figures  # no stray pyplot figure after display
    assert {"text/html", "image/png", "text/plain"} <= set(bundle)
    assert bundle["text/html"].startswith(html_start)
    priority = base_render_priority()

    def chosen(builder: str) -> str:
        ranks = priority[builder]
        return min((m for m in bundle if ranks.get(m) is not None), key=ranks.__getitem__)

    assert chosen("html") == "text/html"
    assert chosen("latex") == "image/png"
    return matplotlib.image.imread(io.BytesIO(widget.to_png()))


@contextlib.contextmanager
def watched_tab(browser, viewport: dict[str, int], timeout: float, *,
                local_only: bool = False) -> Iterator:
    """A fresh Chromium tab that records page errors, dialogs and requests in ``tab.seen``.

    On leaving, the tab is closed and must have met no page error and no dialog; with
    ``local_only``, every request must also have stayed on the machine.
    """
    context = browser.new_context(viewport=viewport)
    tab = context.new_page()
    tab.set_default_timeout(timeout)
    seen: dict[str, list[str]] = {"errors": [], "dialogs": [], "requests": []}
    tab.on("pageerror", lambda error: seen["errors"].append(str(error)))
    tab.on("console", lambda msg: msg.type == "error" and seen["errors"].append(msg.text))
    tab.on("request", lambda request: seen["requests"].append(request.url))

    def on_dialog(dialog):
        seen["dialogs"].append(dialog.message)
        dialog.dismiss()

    tab.on("dialog", on_dialog)
    tab.seen = seen
    yield tab
    context.close()
    assert not seen["errors"], seen["errors"]
    assert not seen["dialogs"], seen["dialogs"]
    if local_only:
        assert all(url.startswith(("about:", "data:", "file:")) for url in seen["requests"]), \
            seen["requests"]


BOOK_CSS = Path(__file__).resolve().parents[1] / "book" / "_static" / "attnbook.css"
#: The filter a figure's card and a widget's panel take in dark mode (attnbook.css).
DARK_CARD_FILTER = "brightness(0.85)"


@functools.cache
def theme_css() -> str:
    """The stylesheets of the book's pages, in their order: pydata-sphinx-theme's,
    sphinx-book-theme's and the book's own ``book/_static/attnbook.css``.

    Read from the installed themes (no book build needed), without their ``@font-face``
    rules and source-map comments, so an inlined copy fetches nothing.
    """
    import pydata_sphinx_theme
    import sphinx_book_theme

    sheets = [
        Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static"
        / "styles" / "pydata-sphinx-theme.css",
        Path(sphinx_book_theme.__file__).parent / "theme" / "sphinx_book_theme" / "static"
        / "styles" / "sphinx-book-theme.css",
        BOOK_CSS,
    ]
    text = "\n".join(sheet.read_text(encoding="utf-8") for sheet in sheets)
    text = re.sub(r"@font-face\s*\{[^}]*\}", "", text)
    return re.sub(r"/\*#\s*sourceMappingURL=[^*]*\*/", "", text)


def book_page(*outputs: str, mode: str = "light") -> str:
    """A page styled like the built book, in its light or dark ``mode``, holding ``outputs``.

    Each output sits where myst-nb puts a cell's output (``.cell_output`` in the article of
    ``.bd-content``): an HTML fragment inside ``div.output.text_html``, anything else (such as
    ``<figure><img ...></figure>``) directly in the cell output, as the book's figures are.
    The theme's own markup sets ``data-theme`` on ``<html>``; so does this page.
    """
    cells = "".join(
        '<div class="cell docutils container"><div class="cell_output docutils container">'
        + (f'<div class="output text_html">{output}</div>' if output.startswith("<div")
           else output) + "</div></div>"
        for output in outputs)
    return (f'<!DOCTYPE html><html lang="en" data-theme="{mode}"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>book page test</title><style>{theme_css()}</style></head>"
            '<body><div class="bd-container"><div class="bd-container__inner bd-page-width">'
            '<div class="bd-sidebar-primary bd-sidebar"><p>Contents</p></div>'
            '<main id="main-content" class="bd-main" role="main"><div class="bd-content">'
            '<div class="bd-article-container"><article class="bd-article"><section>'
            f"{cells}</section></article></div>"
            '<div class="bd-sidebar-secondary bd-toc"><p>On this page</p></div></div></main>'
            "</div></div></body></html>")


def luminance(css: str) -> float:
    """WCAG relative luminance of a computed CSS colour, ``rgb(r, g, b)`` or ``rgba(...)``."""
    channels = [int(c) / 255 for c in re.findall(r"[\d.]+", css)[:3]]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(foreground: str, background: str) -> float:
    """WCAG contrast ratio of two computed CSS colours (1 to 21; 4.5 is AA for body text)."""
    a, b = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (a + 0.05) / (b + 0.05)
