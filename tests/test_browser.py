"""The built pages in headless Chromium: offline, maths typeset, no console errors."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import toc_pages

pytestmark = pytest.mark.browser

PAGES = toc_pages()
MATH_PAGES = ["book/notation"]


#: axe-core's default rules, plus one it ships switched off: a control whose accessible name
#: does not contain its visible label (WCAG 2.5.3, "Label in Name").
AXE_OPTIONS = {"resultTypes": ["violations"],
               "rules": {"label-content-name-mismatch": {"enabled": True}}}


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    yield tab
    context.close()


def open_page(tab, url: str) -> dict[str, list[str]]:
    """Load ``url``, wait for MathJax, and return what the page did along the way."""
    seen: dict[str, list[str]] = {"requests": [], "console_errors": [], "failed": []}
    tab.on("request", lambda request: seen["requests"].append(request.url))
    tab.on("response", lambda response: response.status >= 400
           and seen["failed"].append(f"{response.status} {response.url}"))
    tab.on("console", lambda message: message.type == "error"
           and seen["console_errors"].append(message.text))
    tab.on("pageerror", lambda error: seen["console_errors"].append(str(error)))
    tab.on("requestfailed", lambda request: seen["failed"].append(request.url))
    response = tab.goto(url, wait_until="networkidle")
    assert response is not None and response.ok, f"{url} answered {response and response.status}"
    tab.wait_for_function(
        "() => !window.MathJax || !MathJax.startup || !MathJax.startup.promise"
        " || MathJax.startup.promise.then(() => true)"
    )
    return seen


@contextlib.contextmanager
def themed_page(browser, site_url: str, name: str, width: int, mode: str) -> Iterator:
    """A tab showing page ``name`` at ``width`` px in the theme's ``mode`` (light or dark)."""
    context = browser.new_context(viewport={"width": width, "height": 900},
                                  color_scheme=mode)
    context.add_init_script(f"localStorage.setItem('mode', '{mode}');"
                            f"localStorage.setItem('theme', '{mode}');")
    tab = context.new_page()
    try:
        open_page(tab, f"{site_url}/{name}.html")
        assert tab.evaluate("document.documentElement.dataset.theme") == mode
        yield tab
    finally:
        context.close()


@pytest.mark.parametrize("name", PAGES)
def test_page_loads_only_from_this_site(site_url: str, page, name: str) -> None:
    seen = open_page(page, f"{site_url}/{name}.html")
    host = urlsplit(site_url).netloc
    foreign = [u for u in seen["requests"]
               if urlsplit(u).scheme in ("http", "https", "ws", "wss")
               and urlsplit(u).netloc != host]
    assert not foreign, f"{name} requested other hosts: {foreign}"
    assert not seen["failed"], f"{name} had failed requests: {seen['failed']}"


@pytest.mark.parametrize("name", PAGES)
def test_page_has_no_console_errors(site_url: str, page, name: str) -> None:
    seen = open_page(page, f"{site_url}/{name}.html")
    assert not seen["console_errors"], f"{name}: {seen['console_errors']}"


@pytest.mark.parametrize("name", MATH_PAGES)
def test_maths_is_typeset(site_url: str, page, name: str) -> None:
    open_page(page, f"{site_url}/{name}.html")
    typeset = page.locator("mjx-container").count()
    assert typeset > 5, f"{name}: only {typeset} typeset formulas"
    visible = page.locator("article").inner_text()
    for raw in ("\\sqrt", "\\operatorname", "$$", "\\(", "\\["):
        assert raw not in visible, f"{name} shows raw TeX {raw!r}"


@pytest.mark.parametrize("name", PAGES)
def test_images_have_alt_text(site_url: str, page, name: str) -> None:
    open_page(page, f"{site_url}/{name}.html")
    missing = page.eval_on_selector_all(
        "article img", "imgs => imgs.filter(i => !(i.getAttribute('alt') || '').trim())"
        ".map(i => i.src)")
    assert not missing, f"{name}: images without alt text: {missing}"
    named_by_file = page.eval_on_selector_all(
        "article img", "imgs => imgs.filter(i => /\\.(png|svg|jpe?g)$/i.test(i.alt))"
        ".map(i => i.alt)")
    assert not named_by_file, f"{name}: alt text that is only a file name: {named_by_file}"


@pytest.mark.parametrize("name", PAGES)
def test_no_serious_accessibility_violations(site_url: str, page, name: str) -> None:
    """axe-core, injected into the page, finds no serious or critical violation."""
    from axe_playwright_python.sync_playwright import Axe

    open_page(page, f"{site_url}/{name}.html")
    results = Axe().run(page, options=AXE_OPTIONS)
    ran = {rule["id"] for group in ("violations", "passes", "incomplete", "inapplicable")
           for rule in results.response[group]}
    assert "label-content-name-mismatch" in ran, "axe did not run label-content-name-mismatch"
    serious = [
        f"{v['id']} ({v['impact']}, {len(v['nodes'])} nodes): {v['help']} -- "
        f"{v['nodes'][0]['html'][:200]}"
        for v in results.response["violations"] if v["impact"] in ("serious", "critical")
    ]
    assert not serious, f"{name}: " + "\n".join(serious)


@pytest.mark.parametrize("name", PAGES)
@pytest.mark.parametrize("mode", ["light", "dark"])
def test_screenshot_in_light_and_dark_mode(browser, site_url: str, built_book: Path,
                                           name: str, mode: str) -> None:
    """A picture of every page in both theme modes, for a person to look at."""
    with themed_page(browser, site_url, name, 1280, mode) as tab:
        target = built_book.parent / "screenshots" / f"{Path(name).name}-{mode}.png"
        target.parent.mkdir(exist_ok=True)
        tab.screenshot(path=str(target), full_page=True)
        assert target.stat().st_size > 10_000


@pytest.mark.parametrize("name", PAGES)
def test_no_page_is_wider_than_a_phone(browser, site_url: str, name: str) -> None:
    """At 390 px (a phone held upright) the page scrolls down only: long inline code breaks,
    code blocks and tables scroll inside their own boxes."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    tab = context.new_page()
    try:
        open_page(tab, f"{site_url}/{name}.html")
        width = tab.evaluate("document.documentElement.scrollWidth")
        assert width <= 391, f"{name} is {width} px wide on a 390 px screen"
    finally:
        context.close()


#: Pages that embed the interactive widgets: the explorer or a playground.
WIDGET_PAGES = ["book/dot-product-similarity", "book/scaling", "book/attention-maps",
                "book/causal-masks", "book/multi-head-attention", "book/positions",
                "book/language-model"]
WIDGETS = ".attnbook-explorer, .attnbook-pg"


@pytest.mark.parametrize("mode", ["light", "dark"])
@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("name", WIDGET_PAGES)
def test_widgets_and_figures_fit_the_column_in_both_modes(browser, site_url: str, name: str,
                                                          width: int, mode: str) -> None:
    """On the built page, every widget and figure lies inside the screen, a widget's own
    content never spills past its box (a wide table scrolls inside it), and in dark mode a
    figure is a white card without the theme's dimming filter."""
    with themed_page(browser, site_url, name, width, mode) as tab:
        boxes = tab.evaluate(
            "sel => [...document.querySelectorAll(sel)].map(e => {"
            " const r = e.getBoundingClientRect(), style = getComputedStyle(e);"
            " return {name: e.className, left: r.left, right: r.right,"
            " scroll: e.scrollWidth, client: e.clientWidth,"
            " background: style.backgroundColor, filter: style.filter}; })",
            f"{WIDGETS}, main figure img")
        widgets = [box for box in boxes if box["name"].startswith("attnbook-")]
        figures = [box for box in boxes if not box["name"].startswith("attnbook-")]
        assert widgets and figures, f"{name}: {len(widgets)} widgets, {len(figures)} figures"
        for box in boxes:
            assert box["left"] >= -1 and box["right"] <= width + 1, (
                f"{name} at {width} px, {mode}: {box['name'] or 'a figure'} spans "
                f"{box['left']:.0f}..{box['right']:.0f} px")
        for box in widgets:
            assert box["scroll"] <= box["client"] + 1, (
                f"{name} at {width} px, {mode}: {box['name']} holds {box['scroll']} px of "
                f"content in {box['client']} px")
        if mode == "dark":
            for box in figures:
                assert box["background"] == "rgb(255, 255, 255)", (name, box)
                assert box["filter"] == "none", (name, box)


#: Pages whose exercise checkers fail on purpose, on the untouched starter code.
CHECKER_PAGES = ["book/scaling", "book/causal-masks", "book/efficient-attention"]


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("name", CHECKER_PAGES)
def test_a_failing_checkers_hint_is_shown_in_full(browser, site_url: str, name: str,
                                                   width: int) -> None:
    """The message of a checker that fails on the starter wraps inside the column: its hint
    is never cut off behind a horizontal scroll bar."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    tab = context.new_page()
    try:
        open_page(tab, f"{site_url}/{name}.html")
        boxes = tab.evaluate(
            "() => [...document.querySelectorAll('div.output.traceback pre')].map(pre =>"
            " ({text: pre.innerText, scroll: pre.scrollWidth, client: pre.clientWidth}))")
        with_hint = [box for box in boxes if "hint:" in box["text"]]
        assert with_hint, f"{name}: no failing checker with a hint on the page"
        for box in with_hint:
            assert box["scroll"] <= box["client"] + 1, (
                f"{name} at {width} px: the checker's message is {box['scroll']} px wide in "
                f"a {box['client']} px box")
    finally:
        context.close()


#: What a reader can type a search into: the theme's search buttons and any search input.
SEARCH_FIELDS = "input[type=search], .search-button-field"


@pytest.mark.parametrize("name", PAGES)
def test_one_search_field_in_view(page, site_url: str, built_book: Path, name: str) -> None:
    """A reader at 1280x900 sees one search field, in the sidebar, and no header bar above."""
    open_page(page, f"{site_url}/{name}.html")
    target = built_book.parent / "screenshots" / f"{Path(name).name}-1280x900.png"
    target.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(target))
    visible = page.eval_on_selector_all(SEARCH_FIELDS, """fields => fields.filter(field => {
        const box = field.getBoundingClientRect(), style = getComputedStyle(field);
        return box.width > 0 && box.height > 0 && style.visibility !== "hidden"
            && box.bottom > 0 && box.top < innerHeight && box.right > 0 && box.left < innerWidth;
    }).map(field => field.closest("[id]").id + " " + field.className)""")
    assert len(visible) == 1, f"{name}: {len(visible)} search fields in view: {visible}"
    assert visible[0].startswith("pst-primary-sidebar"), f"{name}: the search is not in the " \
        f"sidebar: {visible}"
    header = page.locator("#pst-header").bounding_box()
    assert header is None or header["height"] == 0, f"{name}: a header bar above the page " \
        f"({header}); see {target}"


class _RecordingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site and notes every request, the ones Chromium makes for itself too."""

    log: list[tuple[str, int]]

    def log_request(self, code: object = "-", size: object = "-") -> None:
        self.log.append((self.path, int(code)))

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def recorded_site(built_book: Path) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """The built site on its own server that records what was asked for and the answer.

    Playwright reports no favicon request (the browser makes it, not the page), so a 404
    for the favicon only shows on the server's side.
    """
    log: list[tuple[str, int]] = []
    handler = type("Handler", (_RecordingHandler,), {"log": log})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(built_book)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", log
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name", PAGES)
def test_favicon_is_served_and_nothing_is_missing(page, recorded_site, name: str) -> None:
    url, log = recorded_site
    log.clear()
    open_page(page, f"{url}/{name}.html")
    declared = page.eval_on_selector_all("link[rel~=icon]", "links => links.map(l => l.href)")
    assert declared, f"{name} declares no favicon"
    deadline = time.monotonic() + 10
    while not any("favicon" in path for path, _ in log) and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    favicons = [(path, code) for path, code in log if "favicon" in path]
    assert favicons, f"{name}: Chromium asked for no favicon"
    missing = [(path, code) for path, code in log if code >= 400]
    assert not missing, f"{name}: requests the site could not answer: {missing}"


def test_favicon_at_the_site_root(recorded_site) -> None:
    """/favicon.ico answers too, for what asks there without reading a page."""
    from urllib.request import urlopen

    url, _ = recorded_site
    with urlopen(f"{url}/favicon.ico") as response:
        assert response.status == 200
        assert response.read(4) == b"\x00\x00\x01\x00", "not an ICO file"
