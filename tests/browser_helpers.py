"""Shared by the tests of the package's browser widgets (the explorer and the playgrounds)."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator

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
