"""The built pages in headless Chromium: offline, maths typeset, no console errors.

Each page is loaded once per view (1280 px light and dark, a 390 px phone light, and dark for
the pages with widgets), and every test of the page reads the same tab: the tests of this
module run grouped by page (``conftest.pytest_collection_modifyitems``), and ``views`` keeps
the current page's tabs open until the next page is asked for. The pages are served by a
server that records every request, the ones Chromium makes for itself (the favicon) too.
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from browser_helpers import DARK_CARD_FILTER, contrast
from conftest import CHROMIUM_ARGS, chromium_path, toc_pages
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

PAGES = toc_pages()
MATH_PAGES = ["book/notation"]
#: A desktop screen and a phone held upright.
DESKTOP, PHONE = 1280, 390
HEIGHT = {DESKTOP: 900, PHONE: 844}


#: axe-core's default rules, plus one it ships switched off: a control whose accessible name
#: does not contain its visible label (WCAG 2.5.3, "Label in Name").
AXE_OPTIONS = {"resultTypes": ["violations"],
               "rules": {"label-content-name-mismatch": {"enabled": True}}}


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


@dataclass
class View:
    """A page open in its own browser context at one width and theme mode."""

    tab: object
    url: str
    #: What the page asked for and reported while it loaded and since (``open_page``).
    seen: dict[str, list[str]]
    #: The server's log, and where in it this view started loading.
    server_log: list[tuple[str, int]] = field(default_factory=list)
    start: int = 0

    def requests_since_load(self) -> list[tuple[str, int]]:
        """What the server answered (path, status) since this view started loading."""
        return self.server_log[self.start:]


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
    # "load", not "networkidle": the page is whole once MathJax has typeset and the fonts
    # have arrived, and "networkidle" waited half a second more on every view (three views
    # of every page). The listeners stay on: what the page does later is still seen.
    response = tab.goto(url, wait_until="load")
    assert response is not None and response.ok, f"{url} answered {response and response.status}"
    tab.wait_for_function(
        "() => !window.MathJax || !MathJax.startup || !MathJax.startup.promise"
        " || MathJax.startup.promise.then(() => true)"
    )
    tab.wait_for_function("() => document.fonts.ready.then(() => true)")
    return seen


def open_view(browser, page_url: str, width: int, mode: str
              ) -> tuple[object, object, dict[str, list[str]]]:
    """``page_url`` in a new browser context at ``width`` px in theme ``mode``: (the
    context, its tab, what the page did while it loaded)."""
    context = browser.new_context(viewport={"width": width, "height": HEIGHT[width]},
                                  color_scheme=mode)
    context.add_init_script(f"localStorage.setItem('mode', '{mode}');"
                            f"localStorage.setItem('theme', '{mode}');")
    tab = context.new_page()
    try:
        seen = open_page(tab, page_url)
        assert tab.evaluate("document.documentElement.dataset.theme") == mode
    except BaseException:
        context.close()
        raise
    return context, tab, seen


@pytest.fixture(scope="module")
def views(browser, recorded_site) -> Iterator[Callable[..., View]]:
    """``views(name, width, mode)``: the page in that view, loaded on first use.

    The views of one page stay open until a test asks for another page, which closes them.
    """
    url, log = recorded_site
    open_views: dict[tuple[str, int, str], tuple[object, View]] = {}

    def close_all() -> None:
        for context, _ in open_views.values():
            context.close()
        open_views.clear()

    def view(name: str, width: int = DESKTOP, mode: str = "light") -> View:
        key = (name, width, mode)
        if key not in open_views:
            if any(other != name for other, _, _ in open_views):
                close_all()
            start = len(log)
            page_url = f"{url}/{name}.html"
            context, tab, seen = open_view(browser, page_url, width, mode)
            open_views[key] = context, View(tab, page_url, seen, log, start)
        return open_views[key][1]

    yield view
    close_all()


@dataclass
class Checked:
    """What the second browser found on one page, 1280 px wide in light mode."""

    #: axe-core's answer: its ``violations``, ``passes``, ``incomplete``, ``inapplicable``.
    axe: dict
    #: The full-page picture, if one was asked for (``make screenshots``).
    screenshot: Path | None


def check_page(browser, url: str, name: str, pictures: Path | None) -> Checked:
    """axe-core's rules on the page, then, if ``pictures`` names a folder, a full-page
    picture of it (which scrolls and resizes the page, so it comes last)."""
    from axe_playwright_python.sync_playwright import Axe

    context, tab, _ = open_view(browser, f"{url}/{name}.html", DESKTOP, "light")
    try:
        answer = Axe().run(tab, options=AXE_OPTIONS).response
        target = None if pictures is None else \
            full_page_picture(tab, pictures / f"{Path(name).name}-light.jpg")
    finally:
        context.close()
    return Checked(answer, target)


def full_page_picture(tab, target: Path) -> Path:
    """A JPEG of the whole page (half the time of a PNG of a page 20,000 px tall, and as
    good to look at)."""
    target.parent.mkdir(exist_ok=True)
    tab.screenshot(path=str(target), full_page=True, quality=85)
    return target


#: Seconds a test waits for the second browser's answer on its page (the slowest page takes
#: about 35 s); after one wait runs out, the others fail at once.
CHECK_WAIT = 600


@pytest.fixture(scope="module")
def checked(request: pytest.FixtureRequest, site_url: str, built_book: Path
            ) -> Iterator[Callable[[str], Checked]]:
    """``checked(name)``: what :func:`check_page` found on the page.

    The slow checks (axe-core, 15 to 35 s a page here, and the full-page picture) run in a
    second Chromium, driven from a thread with a Playwright of its own and served by a
    server of its own (the recording server's log stays the main tests'), page by page in
    the order of the tests, while the other tests read ``views``: each Chromium keeps one
    core busy. Only the pages of the selected tests are checked.
    """
    wanted = {item.callspec.params["name"] for item in request.session.items
              if "checked" in getattr(item, "fixturenames", ()) and hasattr(item, "callspec")}
    names = [name for name in PAGES if name in wanted]
    # The full-page pictures only for `make screenshots`: they check nothing.
    pictures = built_book.parent / "screenshots" if any(
        item.get_closest_marker("screenshots") for item in request.session.items
        if "checked" in getattr(item, "fixturenames", ())) else None
    answers: dict[str, Future] = {name: Future() for name in names}
    stop = threading.Event()

    def work() -> None:
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium_path(),
                                                     args=CHROMIUM_ARGS, headless=True)
                try:
                    for name in names:
                        if stop.is_set():
                            break
                        try:
                            answers[name].set_result(
                                check_page(browser, site_url, name, pictures))
                        except Exception as error:  # this page's tests raise it
                            answers[name].set_exception(error)
                finally:
                    browser.close()
        except BaseException as error:  # no browser: every waiting test raises it
            for answer in answers.values():
                if not answer.done():
                    answer.set_exception(error)

    stalled: list[str] = []

    def answer(name: str) -> Checked:
        try:
            return answers[name].result(timeout=0 if stalled else CHECK_WAIT)
        except FutureTimeout:
            stalled.append(name)
            stop.set()
            raise AssertionError(f"the second browser gave no answer on {stalled[0]} in "
                                 f"{CHECK_WAIT} s; it checks no page after it") from None

    worker = threading.Thread(target=work, daemon=True, name="second-browser")
    worker.start()
    yield answer
    stop.set()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the second browser did not stop within 120 s"


@pytest.mark.parametrize("name", PAGES)
def test_page_loads_only_from_this_site(views, name: str) -> None:
    view = views(name)
    host = urlsplit(view.url).netloc
    foreign = [u for u in view.seen["requests"]
               if urlsplit(u).scheme in ("http", "https", "ws", "wss")
               and urlsplit(u).netloc != host]
    assert not foreign, f"{name} requested other hosts: {foreign}"
    assert not view.seen["failed"], f"{name} had failed requests: {view.seen['failed']}"


@pytest.mark.parametrize("name", PAGES)
def test_favicon_is_served_and_nothing_is_missing(views, name: str) -> None:
    """Chromium asks for the favicon and gets it, and nothing the page asked for is missing.

    Runs right after the first load of the page: axe-core (a later test) asks for the
    stylesheets a page imports itself, resolving ``@import "../basic.css"`` against the page,
    not the stylesheet, and the server's 404 for it is axe's, not a reader's."""
    view = views(name)
    declared = view.tab.eval_on_selector_all("link[rel~=icon]",
                                             "links => links.map(l => l.href)")
    assert declared, f"{name} declares no favicon"
    deadline = time.monotonic() + 10
    while not any("favicon" in path for path, _ in view.requests_since_load()) \
            and time.monotonic() < deadline:
        view.tab.wait_for_timeout(100)
    answered = view.requests_since_load()
    assert any("favicon" in path for path, _ in answered), \
        f"{name}: Chromium asked for no favicon"
    missing = [(path, code) for path, code in answered if code >= 400]
    assert not missing, f"{name}: requests the site could not answer: {missing}"


@pytest.mark.parametrize("name", PAGES)
def test_page_has_no_console_errors(views, name: str) -> None:
    for mode in ("light", "dark"):
        seen = views(name, DESKTOP, mode).seen
        assert not seen["console_errors"], f"{name} ({mode}): {seen['console_errors']}"


@pytest.mark.parametrize("name", MATH_PAGES)
def test_maths_is_typeset(views, name: str) -> None:
    tab = views(name).tab
    typeset = tab.locator("mjx-container").count()
    assert typeset > 5, f"{name}: only {typeset} typeset formulas"
    visible = tab.locator("article").inner_text()
    for raw in ("\\sqrt", "\\operatorname", "$$", "\\(", "\\["):
        assert raw not in visible, f"{name} shows raw TeX {raw!r}"


@pytest.mark.parametrize("name", PAGES)
def test_images_have_alt_text(views, name: str) -> None:
    tab = views(name).tab
    missing = tab.eval_on_selector_all(
        "article img", "imgs => imgs.filter(i => !(i.getAttribute('alt') || '').trim())"
        ".map(i => i.src)")
    assert not missing, f"{name}: images without alt text: {missing}"
    named_by_file = tab.eval_on_selector_all(
        "article img", "imgs => imgs.filter(i => /\\.(png|svg|jpe?g)$/i.test(i.alt))"
        ".map(i => i.alt)")
    assert not named_by_file, f"{name}: alt text that is only a file name: {named_by_file}"


@pytest.mark.parametrize("name", PAGES)
def test_no_serious_accessibility_violations(checked, name: str) -> None:
    """axe-core, injected into the page, finds no serious or critical violation."""
    response = checked(name).axe
    ran = {rule["id"] for group in ("violations", "passes", "incomplete", "inapplicable")
           for rule in response[group]}
    assert "label-content-name-mismatch" in ran, "axe did not run label-content-name-mismatch"
    serious = [
        f"{v['id']} ({v['impact']}, {len(v['nodes'])} nodes): {v['help']} -- "
        f"{v['nodes'][0]['html'][:200]}"
        for v in response["violations"] if v["impact"] in ("serious", "critical")
    ]
    assert not serious, f"{name}: " + "\n".join(serious)


@pytest.mark.parametrize("name", PAGES)
def test_no_page_is_wider_than_a_phone(views, name: str) -> None:
    """At 390 px (a phone held upright) the page scrolls down only: long inline code breaks,
    code blocks and tables scroll inside their own boxes."""
    width = views(name, PHONE).tab.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE + 1, f"{name} is {width} px wide on a {PHONE} px screen"


@pytest.mark.parametrize("name", PAGES)
def test_code_in_a_heading_stays_whole_on_a_phone(views, name: str) -> None:
    """At 390 px a name in code in a heading is one line, inside the heading: it is not
    broken inside a word, nor pushed past the column."""
    broken = views(name, PHONE).tab.evaluate("""() => Array.from(
        document.querySelectorAll("article :is(h1, h2, h3, h4) code"), code => {
            const box = code.getBoundingClientRect();
            const heading = code.closest("h1, h2, h3, h4").getBoundingClientRect();
            const style = getComputedStyle(code);  // line-height "normal": about 1.2 em
            const line = parseFloat(style.lineHeight) || 1.2 * parseFloat(style.fontSize);
            return box.height > 1.5 * line || box.right > heading.right + 1
                ? `${code.textContent}: ${Math.round(box.width)} x ${Math.round(box.height)}`
                  + ` px, heading ends at ${Math.round(heading.right)}` : null;
        }).filter(Boolean)""")
    assert not broken, f"{name}: code in a heading broken or past the column: {broken}"


@pytest.mark.parametrize("name", PAGES)
def test_no_table_misses_a_phones_column_by_a_few_pixels(views, name: str) -> None:
    """At 390 px a table fits the column or is clearly wider than it (and then scrolls in its
    own box, with a cue): none needs a scroll bar for under 16 px."""
    slivers = views(name, PHONE).tab.evaluate(
        """() => Array.from(document.querySelectorAll("article table.table"),
            t => [t.rows[0].textContent.trim().replace(/\\s+/g, " ").slice(0, 40),
                  t.scrollWidth - t.parentElement.clientWidth])
            .filter(([, over]) => over > 0 && over < 16)""")
    assert not slivers, f"{name}: tables a few pixels too wide on a phone: {slivers}"


#: Code a reader sees: each cell's code and each listing in the text, in the main column, an
#: exercise or a solution (not a cell's output, and not a cell folded away behind a toggle).
SHOWN_CODE = """() => [...document.querySelectorAll("article div.highlight pre")]
    .filter(pre => pre.checkVisibility() && !pre.closest(".cell_output"))"""


@pytest.mark.parametrize("name", PAGES)
def test_shown_code_fits_the_column(views, name: str) -> None:
    """At 1280 px every shown code block fits its box, in the main column as in an exercise:
    no line of code hides behind a horizontal scroll bar (a box holds 76 characters)."""
    tab = views(name).tab
    wide = tab.evaluate(
        f"() => ({SHOWN_CODE})().filter(pre => pre.scrollWidth > pre.clientWidth + 1)"
        ".map(pre => pre.textContent.split('\\n')"
        ".reduce((a, b) => b.length > a.length ? b : a))")
    assert tab.evaluate(f"() => ({SHOWN_CODE})().length") > 0 or name in TEXT_ONLY_PAGES, \
        f"{name}: no code found on the page (has the theme's markup changed?)"
    assert not wide, f"{name}: {len(wide)} code blocks wider than the column at 1280 px; " \
        f"their longest lines: {wide}"


@pytest.mark.parametrize("name", PAGES)
def test_folded_code_fits_the_column_once_opened(views, name: str) -> None:
    """At 1280 px code folded away, in a solution ("Click to show") or a cell ("Show code
    cell source"), fits its box once a reader opens it, as shown code does. Everything is
    opened, measured and closed again in one step, so the page's other tests see the page
    as it loads."""
    wide = views(name).tab.evaluate("""() => {
        const folded = [...document.querySelectorAll("article details")]
            .filter(d => !d.open);
        const hidden = [...document.querySelectorAll("article .toggle-hidden")];
        folded.forEach(d => { d.open = true; });
        hidden.forEach(e => e.classList.remove("toggle-hidden"));
        const wide = [...document.querySelectorAll("article div.highlight pre")]
            .filter(pre => (folded.some(d => d.contains(pre))
                            || hidden.some(e => e.contains(pre)))
                           && !pre.closest(".cell_output")
                           && pre.scrollWidth > pre.clientWidth + 1)
            .map(pre => `${pre.scrollWidth} px in ${pre.clientWidth} px: ` + pre.textContent
                 .split("\\n").reduce((a, b) => b.length > a.length ? b : a));
        folded.forEach(d => { d.open = false; });
        hidden.forEach(e => e.classList.add("toggle-hidden"));
        return wide;
    }""")
    assert not wide, f"{name}: folded code wider than its box at 1280 px once opened: {wide}"


#: Pages without a single code block.
TEXT_ONLY_PAGES = {"book/notation", "book/changes", "book/bibliography"}

#: What a cell printed or returned, as a reader sees it (not an error message, which wraps,
#: and not an output folded away).
SHOWN_OUTPUTS = """() => [...document.querySelectorAll("article .cell_output pre")]
    .filter(pre => pre.checkVisibility() && !pre.closest(".traceback"))"""


@pytest.mark.parametrize("name", PAGES)
def test_shown_outputs_fit_the_column(views, name: str) -> None:
    """At 1280 px every printed output fits its box (77 characters a line): a wide table is
    printed in two halves, a long list in rows, and nothing hides behind a scroll bar."""
    wide = views(name).tab.evaluate(
        f"() => ({SHOWN_OUTPUTS})().filter(pre => pre.scrollWidth > pre.clientWidth + 1)"
        ".map(pre => pre.textContent.split('\\n')"
        ".reduce((a, b) => b.length > a.length ? b : a))")
    assert not wide, f"{name}: {len(wide)} outputs wider than the column at 1280 px; " \
        f"their longest lines: {wide}"


@pytest.mark.parametrize("name", PAGES)
def test_a_cells_printed_lines_are_one_output(views, name: str) -> None:
    """The lines a cell prints show in one box, not in as many boxes as the kernel sent
    messages (myst-nb's ``nb_merge_streams``)."""
    split = views(name).tab.evaluate(
        """() => [...document.querySelectorAll("article .cell_output")].filter(output =>
            [...output.children].some((child, i, all) => i > 0
                && child.matches(".output.stream") && all[i - 1].matches(".output.stream")))
            .map(output => output.textContent.trim().slice(0, 80))""")
    assert not split, f"{name}: {len(split)} cells print in several boxes: {split}"


@pytest.mark.parametrize("name", PAGES)
def test_display_equations_fit_the_column(views, name: str) -> None:
    """At 1280 px no displayed equation is wider than the column: a long one is broken
    into aligned lines. (On a phone one may still scroll inside its own box.)"""
    tab = views(name).tab
    wide = tab.evaluate(
        """() => [...document.querySelectorAll("article div.math mjx-container")]
            .filter(m => m.checkVisibility() && m.scrollWidth > m.clientWidth + 1)
            .map(m => `${m.scrollWidth} px in ${m.clientWidth} px: `
                 + m.querySelector("mjx-assistive-mml").textContent.slice(0, 60))""")
    assert not wide, f"{name}: {len(wide)} equations wider than the column: {wide}"


#: Inline formulas a box cuts off: their box hides what overflows it (``overflow: hidden``)
#: and they reach past its edge. One inside a box that scrolls is not cut off.
CLIPPED_INLINE_MATHS = """() => [...document.querySelectorAll(
        "article mjx-container:not([display=true])")]
    .filter(m => m.checkVisibility()).filter(m => {
        const box = m.getBoundingClientRect();
        for (let e = m.parentElement; e && e.tagName !== "ARTICLE"; e = e.parentElement) {
            const overflow = getComputedStyle(e).overflowX;
            if (overflow === "auto" || overflow === "scroll") return false;
            if (overflow === "hidden" || overflow === "clip") {
                const edge = e.getBoundingClientRect();
                return box.right > edge.right + 1 || box.left < edge.left - 1;
            }
        }
        return false;
    }).map(m => m.querySelector("mjx-assistive-mml").textContent.slice(0, 60))"""


@pytest.mark.parametrize("name", PAGES)
def test_no_inline_maths_is_cut_off_on_a_phone(views, name: str) -> None:
    """At 390 px an inline formula longer than the line is shown whole or scrolls in its
    own box; the theme's ``span.math`` would otherwise hide what passes its edge."""
    clipped = views(name, PHONE).tab.evaluate(CLIPPED_INLINE_MATHS)
    assert not clipped, f"{name}: {len(clipped)} inline formulas cut off at {PHONE} px: " \
        f"{clipped}"


#: Pages that embed the interactive widgets: the explorer or a playground.
WIDGET_PAGES = ["book/dot-product-similarity", "book/scaling", "book/attention-maps",
                "book/causal-masks", "book/multi-head-attention", "book/positions",
                "book/language-model"]
WIDGETS = ".attnbook-explorer, .attnbook-pg"


@pytest.mark.parametrize("mode", ["light", "dark"])
@pytest.mark.parametrize("width", [DESKTOP, PHONE])
@pytest.mark.parametrize("name", WIDGET_PAGES)
def test_widgets_and_figures_fit_the_column_in_both_modes(views, name: str, width: int,
                                                          mode: str) -> None:
    """On the built page, every widget and figure lies inside the screen, a widget's own
    content never spills past its box (a wide table scrolls inside it), and in dark mode a
    figure is a white card and a widget a white panel, both dimmed alike (to 85 %), not by
    the theme's filter, which also raises the contrast."""
    boxes = views(name, width, mode).tab.evaluate(
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
    for box in figures + widgets:
        assert box["filter"] == (DARK_CARD_FILTER if mode == "dark" else "none"), (name, box)
    if mode == "dark":
        for box in figures:
            assert box["background"] == "rgb(255, 255, 255)", (name, box)


#: Pages whose exercise checkers fail on purpose, on the untouched starter code.
CHECKER_PAGES = ["book/scaling", "book/causal-masks", "book/efficient-attention"]


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
@pytest.mark.parametrize("name", CHECKER_PAGES)
def test_a_failing_checkers_hint_is_shown_in_full(views, name: str, width: int) -> None:
    """The message of a checker on the starter wraps inside the column: its hint or what is
    left to do is never cut off behind a horizontal scroll bar."""
    boxes = views(name, width).tab.evaluate(
        "() => [...document.querySelectorAll('div.output.traceback pre')].map(pre =>"
        " ({text: pre.innerText, scroll: pre.scrollWidth, client: pre.clientWidth}))")
    with_hint = [box for box in boxes if "hint:" in box["text"] or "to do:" in box["text"]]
    assert with_hint, f"{name}: no failing checker with a hint on the page"
    for box in with_hint:
        assert box["scroll"] <= box["client"] + 1, (
            f"{name} at {width} px: the checker's message is {box['scroll']} px wide in "
            f"a {box['client']} px box")


@pytest.mark.parametrize("name", CHECKER_PAGES)
def test_an_untouched_starters_check_reads_as_a_task(views, name: str) -> None:
    """What a checker says on an exercise's untouched starter begins "To do:" and is framed
    in the theme's info colour, not in the red of an error."""
    tab = views(name).tab
    boxes = tab.evaluate(
        """() => [...document.querySelectorAll(".exercise div.output.traceback")].map(box =>
            ({text: box.innerText, marked: box.classList.contains("attnbook-todo"),
              edge: getComputedStyle(box).borderLeftColor}))""")
    info = tab.evaluate(
        """() => { const probe = document.createElement("div");
            probe.style.color = "var(--pst-color-info)"; document.body.append(probe);
            const colour = getComputedStyle(probe).color; probe.remove(); return colour; }""")
    starters = [box for box in boxes if "is not written yet" in box["text"]]
    assert starters, f"{name}: no untouched starter's check on the page"
    for box in starters:
        assert box["text"].startswith("To do: "), box["text"][:200]
        assert box["marked"] and box["edge"] == info, (name, box, info)


#: Every picture in a page's main column.
PICTURES = """async () => Promise.all(
    [...document.querySelectorAll("article img")].filter(img => img.checkVisibility())
    .map(async img => ({src: img.getAttribute("src"), shown: img.getBoundingClientRect().width,
        svg: /\\.svg$/i.test(img.src) ? await (await fetch(img.src)).text() : ""})))"""
#: Matplotlib draws each text of an SVG as glyph outlines scaled by font size / 100 (points).
GLYPH_SCALE = re.compile(r"scale\((\d*\.?\d+) -(\d*\.?\d+)\)")
VIEW_BOX = re.compile(r'viewBox="0 0 (\d*\.?\d+) (\d*\.?\d+)"')


@pytest.mark.parametrize("name", PAGES)
def test_figures_are_svg_with_text_at_least_9_px(views, name: str) -> None:
    """Every picture in the main column is an SVG, sharp at any zoom (on a phone too), and
    at 1280 px its smallest text (tick labels and subscripts' base size) is 9 px or more."""
    small = []
    for picture in views(name).tab.evaluate(PICTURES):
        assert picture["src"].endswith(".svg"), f"{name}: a raster picture {picture['src']}"
        width = float(VIEW_BOX.search(picture["svg"]).group(1))  # points
        sizes = [100 * float(a) for a, b in GLYPH_SCALE.findall(picture["svg"]) if a == b]
        if sizes and min(sizes) * picture["shown"] / width < 9:
            small.append(f"{picture['src']}: {min(sizes):.1f} pt shown at "
                         f"{min(sizes) * picture['shown'] / width:.1f} px")
    assert not small, f"{name}: text under 9 px in {len(small)} figures: {small}"


#: Every picture in the main column and where it links ("" when it is not in a link), with
#: the file each one resolves to.
PICTURE_LINKS = """() => [...document.querySelectorAll("article img")]
    .filter(img => img.checkVisibility()).map(img => {
        const link = img.closest("a[href]");
        return {src: img.src, href: link ? link.href : "",
                alone: link ? link.childElementCount === 1 : false};
    })"""


@pytest.mark.parametrize("name", PAGES)
def test_every_figure_opens_alone_at_full_size(views, name: str) -> None:
    """Each picture is a link to its own file: a phone reader taps it to see it alone, and
    zooms into it there."""
    pictures = views(name).tab.evaluate(PICTURE_LINKS)
    unlinked = [p["src"].rsplit("/", 1)[-1] for p in pictures if p["href"] != p["src"]]
    assert not unlinked, f"{name}: {len(unlinked)} of {len(pictures)} figures do not link " \
        f"to their picture: {unlinked[:4]}"
    assert all(p["alone"] for p in pictures), f"{name}: a figure's link holds more than it"


#: Punctuation touching an inline formula that a line break parted from it: the comma or
#: full stop right after it starting the next line, or the bracket right before it ending
#: the line above.
PARTED_PUNCTUATION = """() => {
    const article = document.querySelector("article"), parted = [];
    const firstText = (node, forward) => {
        const walk = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
        let text = null, t;
        while ((t = walk.nextNode())) { if (t.data.length) { text = t; if (forward) break; } }
        return text;
    };
    const neighbour = (node, forward) => {
        for (let n = node; n && n !== article; n = n.parentNode) {
            for (let s = forward ? n.nextSibling : n.previousSibling; s;
                 s = forward ? s.nextSibling : s.previousSibling) {
                const text = s.nodeType === Node.TEXT_NODE ? (s.data.length ? s : null)
                                                           : firstText(s, forward);
                if (text) return text;
            }
        }
        return null;
    };
    for (const maths of article.querySelectorAll("span.math")) {
        const formula = maths.querySelector("mjx-container");
        if (!formula || !maths.checkVisibility()) continue;
        const box = maths.getBoundingClientRect(), range = document.createRange();
        const after = neighbour(maths, true), before = neighbour(maths, false);
        if (after && /^[.,;:!?)\\]]/.test(after.data)) {
            range.setStart(after, 0); range.setEnd(after, 1);
            const mark = range.getClientRects()[0];
            if (mark && mark.left < box.right - 2)
                parted.push(`after ${maths.textContent.slice(0, 30)}: "${after.data[0]}"`);
        }
        if (before && /[(\\[]$/.test(before.data)) {
            const end = before.data.length;
            range.setStart(before, end - 1); range.setEnd(before, end);
            const marks = range.getClientRects(), mark = marks[marks.length - 1];
            if (mark && mark.right > box.left + 2)
                parted.push(`before ${maths.textContent.slice(0, 30)}: "${before.data.slice(-1)}"`);
        }
    }
    return parted;
}"""


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
@pytest.mark.parametrize("name", PAGES)
def test_punctuation_stays_on_its_formulas_line(views, name: str, width: int) -> None:
    """No comma or full stop after an inline formula starts a line alone, and no bracket
    before one ends a line."""
    parted = views(name, width).tab.evaluate(PARTED_PUNCTUATION)
    assert not parted, f"{name} at {width} px: {len(parted)} marks parted from their " \
        f"formula: {parted[:4]}"


#: Each table, code block, printed output or formula (displayed or inline) that scrolls
#: sideways: its shadows as the page opens it, then scrolled to its end, as [left, right] ("1"
#: shown, "0" not). A table's or code block's shadows are its wrapper's pseudo-elements (a
#: table's must end with the table); a formula's, an inset shadow on the box that scrolls (for
#: a numbered equation, left of its number).
SCROLL_CUES = """async () => {
    // The shadows fade in and out (a CSS transition): wait for every transition the last
    // scroll started to end, however loaded the machine (getAnimations() brings the styles
    // up to date first), at most 5 s.
    const pause = ms => new Promise(r => setTimeout(r, ms));
    const seen = [], settle = async () => {
        await pause(50);
        const running = document.getAnimations().filter(a => a instanceof CSSTransition);
        await Promise.race([pause(5000),
                            Promise.all(running.map(a => a.finished.catch(() => null)))]);
    };
    const shadows = (box, formula) => {
        if (formula) {
            const shown = getComputedStyle(box).boxShadow !== "none";
            return ["left", "right"].map(
                side => shown && box.classList.contains(`attnbook-more-${side}`) ? "1" : "0");
        }
        const wrapper = box.closest(".attnbook-scroll-cue");
        return wrapper ? ["::before", "::after"].map(
            side => getComputedStyle(wrapper, side).opacity) : ["none", "none"];
    };
    const drawnWider = (box, drawn) => drawn
        && drawn.getBoundingClientRect().width > box.clientWidth + 1;
    const tables = [...document.querySelectorAll(
            "article .pst-scrollable-table-container, article div.highlight pre")]
        .filter(b => b.checkVisibility() && b.scrollWidth > b.clientWidth + 1);
    const formulas = [...document.querySelectorAll("article span.math")]
        .filter(m => m.checkVisibility()
            && drawnWider(m, m.querySelector(":scope > mjx-container > mjx-math")))
        .concat([...document.querySelectorAll("article div.math > mjx-container")]
            .filter(m => m.checkVisibility()
                && drawnWider(m, m.querySelector(":scope > mjx-math"))));
    const boxes = [...tables.map(b => [b, false]), ...formulas.map(m => [m, true])];
    await settle();
    const starts = boxes.map(([box, formula]) => shadows(box, formula));
    for (const [box] of boxes) {
        box.scrollLeft = box.scrollWidth;
        box.dispatchEvent(new Event("scroll"));
    }
    await settle();
    boxes.forEach(([box, formula], k) => {
        const wrapper = box.closest(".attnbook-scroll-cue");
        seen.push({what: (box.textContent || "").trim().slice(0, 40), start: starts[k],
                   end: shadows(box, formula),
                   overhang: formula || !wrapper || box.tagName === "PRE" ? 0
                             : wrapper.getBoundingClientRect().bottom
                             - box.querySelector("table").getBoundingClientRect().bottom,
                   // how wide the shadow is, against how much of the box is out of view
                   cue: formula || !wrapper ? 0
                        : parseFloat(getComputedStyle(wrapper, "::before").width),
                   hidden: box.scrollWidth - box.clientWidth});
    });
    for (const [box] of boxes) {
        box.scrollLeft = 0;
        box.dispatchEvent(new Event("scroll"));
    }
    await settle();
    return seen;
}"""


@pytest.mark.parametrize("name", PAGES)
def test_what_scrolls_sideways_on_a_phone_shows_it(views, name: str) -> None:
    """At 390 px a table, code block, printed output, equation or inline formula wider than
    the column shows a shadow on the side that has more to see: on the right as the page
    opens, on the left once scrolled to the end; a shadow never covers more than it hides."""
    cues = views(name, PHONE).tab.evaluate(SCROLL_CUES)
    missing = [c["what"] for c in cues if c["start"] != ["0", "1"] or c["end"] != ["1", "0"]]
    assert not missing, f"{name}: {len(missing)} of {len(cues)} boxes that scroll sideways " \
        f"show no cue, or the wrong one: {missing[:4]} ({cues[:2]})"
    overhanging = [c["what"] for c in cues if c["overhang"] > 2]
    assert not overhanging, f"{name}: shadows longer than their table: {overhanging[:4]}"
    too_wide = [(c["what"], c["cue"], c["hidden"]) for c in cues if c["cue"] > c["hidden"] + 0.5]
    assert not too_wide, f"{name}: shadows wider than what they hide (px): {too_wide[:4]}"


#: Each linked figure with a caption: the share of its own width it is shown at, and what
#: its caption adds after the text (CSS ``content``, "none" when nothing).
#: A picture without a caption carries the note in a line after it.
FIGURE_HINTS = """() => [...document.querySelectorAll("article a.attnbook-figure-link > img")]
    .map(img => [img, img.closest("figure") && img.closest("figure").querySelector(
        ":scope > figcaption") || img.parentNode.nextElementSibling])
    .map(([img, note]) => [img.getBoundingClientRect().width / img.naturalWidth,
                           note ? getComputedStyle(note, "::after").content : "no note"])"""


@pytest.mark.parametrize("name", PAGES)
def test_a_figure_shown_small_says_how_to_see_it_whole(views, name: str) -> None:
    """A figure shown at under 60 % of its own size (on a phone its smallest text is then
    about 5 px) says so in its caption (a picture without one, in a line after it), with
    the percentage, and that it opens full size; a figure shown larger adds nothing."""
    for width in (PHONE, DESKTOP):
        figures = views(name, width).tab.evaluate(FIGURE_HINTS)
        if not figures:
            pytest.skip(f"{name} has no figure")
        for shown, after in figures:
            if shown < 0.6:  # as the script decides; its percentage is Math.round's
                percent = int(100 * shown + 0.5)
                assert f"Shown at {percent}% of its size" in after, (width, shown, after)
                assert "open it full size" in after
            else:
                assert after == "none", (width, shown, after)


#: Each figure caption's text: its weight, its colour and the page's background.
CAPTION_INK = """() => [...document.querySelectorAll("article figcaption")]
    .filter(caption => caption.checkVisibility())
    .map(caption => getComputedStyle(caption.querySelector("p") || caption))
    .map(s => [parseInt(s.fontWeight), s.color,
               getComputedStyle(document.body).backgroundColor])"""


@pytest.mark.parametrize("name", ["book/scaling", "book/whisper"])
@pytest.mark.parametrize("mode", ["light", "dark"])
def test_captions_read_as_body_text(views, name: str, mode: str) -> None:
    """A caption carries a figure's key sentence: it is set in the body text's weight (the
    theme's 300, in its muted grey, read as faint), at a contrast of at least 4.5:1."""
    captions = views(name, DESKTOP, mode).tab.evaluate(CAPTION_INK)
    assert captions, f"{name} has no caption"
    for weight, ink, page in captions:
        assert weight >= 400, f"{name} ({mode}): a caption in weight {weight}"
        assert contrast(ink, page) >= 4.5, f"{name} ({mode}): caption {ink} on {page}"


@pytest.mark.parametrize(("name", "shown"), [("book/whisper", "under 60 %"),
                                           ("book/training-attention", "60-98 %")])
def test_a_tap_opens_a_figure_shown_under_its_size_at_that_size(browser, site_url: str,
                                                                name: str, shown: str) -> None:
    """On a phone, a tap on a figure shown under its own size opens it at that size in a
    view over the page that scrolls sideways, without leaving the page; Escape closes it and
    returns to the figure. (Opened alone, the picture was fitted to the screen again: a
    figure shown under 60 % opened at about 40 %, and Fig. 9.5, shown at 342 px in the
    column, at 218 px.)"""
    context = browser.new_context(viewport={"width": PHONE, "height": 844}, has_touch=True,
                                  is_mobile=True)
    try:
        tab = context.new_page()
        url = f"{site_url}/{name}.html"
        tab.goto(url, wait_until="load")
        if shown == "under 60 %":
            link = tab.locator("figure.attnbook-shrunk a.attnbook-figure-link").first
        else:  # a figure with no note in its caption
            links = tab.locator("a.attnbook-figure-link")
            shares = links.evaluate_all("""links => links.map(a => a.firstElementChild)
                .map(img => img.getBoundingClientRect().width / img.naturalWidth)""")
            middle = [k for k, share in enumerate(shares) if 0.6 <= share < 0.98]
            assert middle, f"no figure shown at 60-98 % on a phone: {shares}"
            link = links.nth(middle[0])
        link.scroll_into_view_if_needed()
        natural = link.locator("img").evaluate("img => img.naturalWidth")
        assert natural > PHONE
        link.tap()
        view = tab.locator(".attnbook-full")
        expect(view).to_be_visible(timeout=5000)
        assert tab.url == url
        drawn = view.locator("img").evaluate("img => img.getBoundingClientRect().width")
        assert abs(drawn - natural) <= 1, (drawn, natural)
        assert view.evaluate("v => v.scrollWidth > v.clientWidth")
        assert tab.evaluate("document.activeElement.textContent") == "Close"
        tab.keyboard.press("Escape")
        expect(view).to_have_count(0, timeout=5000)
        assert tab.evaluate("document.activeElement.classList.contains('attnbook-figure-link')")
    finally:
        context.close()


#: Table cells that hold one number, a count ("58 of 72") or a range ("2.69 to 2.74"), and
#: on how many lines each is drawn.
NUMBER_CELLS = r"""() => [...document.querySelectorAll("article table td")]
    .filter(td => /^\s*[-+−]?[\d.,]+(e[-+−]?\d+)?\s*%?(\s+(of|to)\s+[\d.,]+)?\s*$/i
        .test(td.textContent))
    .filter(td => td.checkVisibility())
    .map(td => {
        const tops = [], walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
        for (let t = walk.nextNode(); t; t = walk.nextNode()) {
            const r = document.createRange(); r.selectNodeContents(t);
            for (const b of r.getClientRects()) if (b.width > 0) tops.push(b.top);
        }
        // Lines are a line height apart; the pieces of one line within a few px.
        tops.sort((a, b) => a - b);
        const lines = tops.filter((top, i) => i === 0 || top - tops[i - 1] > 4);
        return [td.textContent.trim(), lines.length]; })"""


@pytest.mark.parametrize("name", PAGES)
def test_a_number_in_a_table_is_never_broken_across_lines(views, name: str) -> None:
    """At 390 px a table cell that holds one number ("7.18e-01", "2.3e-09") shows it on one
    line: a phone's narrow column had broken such numbers after their "e-"."""
    cells = views(name, PHONE).tab.evaluate(NUMBER_CELLS)
    broken = [text for text, lines in cells if lines > 1]
    assert not broken, f"{name}: numbers broken across lines: {broken[:6]} of {len(cells)}"


#: Hyphenated words in table headers ("FlashAttention-2"), and whether each is drawn on
#: more than one line.
BROKEN_HEADER_WORDS = r"""() => [...document.querySelectorAll("article table th")]
    .filter(th => th.checkVisibility())
    .flatMap(th => {
        const found = [], walk = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
        for (let t = walk.nextNode(); t; t = walk.nextNode()) {
            for (const m of t.data.matchAll(/[\w.]+[-\u2010\u2011][\w.]+/g)) {
                const r = document.createRange();
                r.setStart(t, m.index); r.setEnd(t, m.index + m[0].length);
                const tops = [...r.getClientRects()].filter(b => b.width > 0)
                    .map(b => Math.round(b.top));
                found.push([m[0], new Set(tops).size > 1]);
            }
        }
        return found; })"""


@pytest.mark.parametrize("name", PAGES)
def test_a_hyphenated_word_in_a_table_header_stays_whole(views, name: str) -> None:
    """At 390 px a table header's hyphenated name stays on one line: "FlashAttention-2"
    broke after its hyphen in efficient-attention's notation table, leaving "2" alone."""
    words = views(name, PHONE).tab.evaluate(BROKEN_HEADER_WORDS)
    broken = [word for word, split in words if split]
    assert not broken, f"{name}: header words broken at a hyphen: {broken[:6]}"


#: The pages with an algorithm (sphinx-proof's ``prf:algorithm``).
ALGORITHM_PAGES = ["book/efficient-attention"]
#: An algorithm's formulas, inline and displayed, as [drawn width, box width] in px.
ALGORITHM_FORMULAS = """() => [...document.querySelectorAll(
        "article div.algorithm span.math, article div.algorithm div.math > mjx-container")]
    .filter(m => m.checkVisibility())
    .map(m => [m.querySelector(m.tagName === "SPAN" ? ":scope > mjx-container > mjx-math"
                                                    : ":scope > mjx-math"), m])
    .map(([drawn, box]) => [drawn ? drawn.getBoundingClientRect().width : 0,
                            box.clientWidth, box.textContent.slice(0, 30)])"""


@pytest.mark.parametrize("name", ALGORITHM_PAGES)
def test_an_algorithms_steps_fit_a_phone(views, name: str) -> None:
    """At 390 px every formula of an algorithm's steps is whole in its line: a step read in
    a box that scrolls sideways is a step half read."""
    formulas = views(name, PHONE).tab.evaluate(ALGORITHM_FORMULAS)
    assert len(formulas) >= 10, f"{name}: {len(formulas)} formulas in its algorithm"
    wide = [text for drawn, box, text in formulas if drawn > box + 1]
    assert not wide, f"{name}: formulas wider than their line at 390 px: {wide}"


#: Inline formulas that are boxes a reader could scroll, though the formula fits its line.
NEEDLESS_SCROLL_BOXES = """() => [...document.querySelectorAll("article span.math")]
    .filter(m => m.checkVisibility() && m.querySelector(":scope > mjx-container > mjx-math"))
    .filter(m => m.querySelector(":scope > mjx-container > mjx-math").getBoundingClientRect()
                     .width <= m.clientWidth + 1
                 && ["auto", "scroll"].includes(getComputedStyle(m).overflowX))
    .map(m => m.textContent.slice(0, 30))"""


@pytest.mark.parametrize("name", PAGES)
def test_only_formulas_wider_than_their_line_scroll(views, name: str) -> None:
    """At 1280 px an inline formula that fits its line is no scroll box: with classic scroll
    bars (Windows) the hidden copy MathJax keeps for screen readers, slightly wider than the
    drawn formula, gave dozens of short formulas a scroll bar of their own."""
    needless = views(name).tab.evaluate(NEEDLESS_SCROLL_BOXES)
    assert not needless, f"{name}: {len(needless)} formulas that fit scroll: {needless[:4]}"


#: Visible text of the page outside shown code that holds a byte-level tokenizer's markers
#: ("Ġ" for a leading space, "Ċ" for a line break), which a reader should never see as words.
TOKENIZER_MARKERS = """() => {
    const walk = document.createTreeWalker(document.querySelector("article"),
                                           NodeFilter.SHOW_TEXT);
    const seen = [];
    let t;
    while ((t = walk.nextNode())) {
        const home = t.parentElement;
        if (/[\u0120\u010a]/.test(t.data) && home.checkVisibility()
                && !home.closest(".cell_input, div[class*=highlight-python], "
                                 + "div[class*=highlight-ipython]"))
            seen.push(t.data.trim().slice(0, 40));
    }
    return seen;
}"""


@pytest.mark.parametrize("name", PAGES)
def test_no_tokenizer_marker_shows_as_text(views, name: str) -> None:
    """No label, output or widget shows SmolLM2's space marker ("Ġbank"): the explorer and
    the printed tokens decode it. (The code that strips it may name it.)"""
    seen = views(name).tab.evaluate(TOKENIZER_MARKERS)
    assert not seen, f"{name}: tokenizer markers in the visible text: {seen[:5]}"


#: Reference entries whose text shows LaTeX markup (a command, maths between dollars).
RAW_TEX_IN_REFERENCES = r"""() => [...document.querySelectorAll(
        "article div.citation, article aside.footnote")]
    .map(entry => entry.textContent)
    .filter(text => /\\[a-zA-Z]+|\$[^$]*\$|[{}]/.test(text))
    .map(text => text.trim().slice(0, 80))"""


@pytest.mark.parametrize("name", PAGES)
def test_no_reference_shows_latex_markup(views, name: str) -> None:
    """A reference list shows what the bibliography means, not its markup: a title written
    with ``\texttt{...}`` or ``H$_2$O`` had shown the backslash and the dollars."""
    raw = views(name).tab.evaluate(RAW_TEX_IN_REFERENCES)
    assert not raw, f"{name}: references that show LaTeX markup: {raw[:4]}"


#: Inline code of at most 24 characters, outside tables and headings, that the browser laid
#: out over more than one line.
SHORT_CODE_BROKEN = """() => [...document.querySelectorAll("article code.literal")]
    .filter(code => code.textContent.length <= 24 && !code.closest("table, h1, h2, h3, h4"))
    .filter(code => code.checkVisibility())
    .filter(code => new Set([...code.getClientRects()].filter(b => b.width > 0)
                            .map(b => Math.round(b.top))).size > 1)
    .map(code => code.textContent)"""


@pytest.mark.parametrize("name", PAGES)
def test_short_inline_code_stays_on_one_line(views, name: str) -> None:
    """Inline code of up to 24 characters is never broken over two lines, at 1280 px or on
    a phone: "make" above "book", "LICENSE-" above "CONTENT" and "attention(x, x," above
    "x)" had read as two things at full width."""
    for width in (DESKTOP, PHONE):
        broken = views(name, width).tab.evaluate(SHORT_CODE_BROKEN)
        assert not broken, f"{name} at {width} px: short code broken over lines: {broken[:5]}"


#: Inline code in a table that the browser laid out over more than one line.
CODE_BROKEN_IN_TABLES = """() => [...document.querySelectorAll("article table code.literal")]
    .filter(code => code.checkVisibility() && code.getClientRects().length > 1)
    .map(code => code.textContent)"""


@pytest.mark.parametrize("name", PAGES)
def test_code_in_a_table_stays_on_one_line_on_a_phone(views, name: str) -> None:
    """A name in a table cell (a folder, ``nn.MultiheadAttention``) is not broken into pieces
    on a phone: the table scrolls sideways instead (with its cue)."""
    broken = views(name, PHONE).tab.evaluate(CODE_BROKEN_IN_TABLES)
    assert not broken, f"{name}: code in a table broken over lines at {PHONE} px: {broken[:5]}"



#: The pages that the chapter list names (the front page is the list's title, not an entry).
LISTED_PAGES = [name for name in PAGES if name != "book/intro"]


@pytest.mark.parametrize("name", LISTED_PAGES)
def test_the_phones_chapter_list_opens_at_the_current_chapter(views, name: str) -> None:
    """At 390 px the chapter list opens as a drawer; the current chapter is in sight in it,
    even when it is far down the list."""
    tab = views(name, PHONE).tab
    tab.click("button.primary-toggle")
    try:
        tab.wait_for_selector("#pst-primary-sidebar-modal[open]")
        tab.wait_for_timeout(300)
        where = tab.evaluate("""() => {
            const a = document.querySelector("#pst-primary-sidebar-modal nav.bd-links a.current");
            if (!a) return null;
            const box = a.getBoundingClientRect();
            return {text: a.textContent.trim(), top: box.top, bottom: box.bottom,
                    height: innerHeight};
        }""")
    finally:
        tab.keyboard.press("Escape")
    assert where is not None, f"{name}: the drawer marks no current chapter"
    assert 0 <= where["top"] and where["bottom"] <= where["height"], \
        f"{name}: the current chapter {where['text']!r} is out of sight in the drawer " \
        f"({where['top']:.0f}-{where['bottom']:.0f} px in {where['height']} px)"


#: Controls a reader taps on a phone that are under 24 px either way (WCAG 2.5.8), as
#: "what: width x height". A checkbox counts with its label, which toggles it too. Left out:
#: links in running text (the rule's inline exception) and the explorer's map, whose cells
#: and row labels shrink with the map to fit a phone (a presentation the map needs; the
#: keyboard moves through it too).
SMALL_TARGETS = """() => [...document.querySelectorAll(
        "article button, article input, article select, article summary, "
        + "article [role=button], .bd-header-article button, .bd-header-article a, "
        + ".bd-header-article label")]
    .filter(e => e.checkVisibility({opacityProperty: true, visibilityProperty: true})
        && !e.closest(".attnx-grid") && e.type !== "hidden")
    .map(e => {
        const boxes = [e, ...(e.labels || [])].map(x => x.getBoundingClientRect());
        const width = Math.max(...boxes.map(b => b.right)) - Math.min(...boxes.map(b => b.left));
        const height = Math.max(...boxes.map(b => b.bottom)) - Math.min(...boxes.map(b => b.top));
        return {what: `${e.tagName.toLowerCase()}.${[...e.classList].join(".")} `
                      + (e.getAttribute("aria-label") || e.textContent.trim()).slice(0, 30),
                width, height};
    })
    .filter(t => t.width < 23.5 || t.height < 23.5)
    .map(t => `${t.what}: ${t.width.toFixed(0)} x ${t.height.toFixed(0)}`)"""


@pytest.mark.parametrize("name", PAGES)
def test_touch_targets_are_at_least_24_px_on_a_phone(views, name: str) -> None:
    """At 390 px every button, field, toggle and widget control is at least 24 px wide and
    tall, so a finger hits it and not its neighbour."""
    small = views(name, PHONE).tab.evaluate(SMALL_TARGETS)
    assert not small, f"{name}: {len(small)} targets under 24 px: {small[:8]}"


#: What a reader can type a search into: the theme's search buttons and any search input.
SEARCH_FIELDS = "input[type=search], .search-button-field"


@pytest.mark.parametrize("name", PAGES)
def test_one_search_field_in_view(views, built_book: Path, name: str) -> None:
    """A reader at 1280x900 sees one search field, in the sidebar, and no header bar above."""
    tab = views(name).tab
    target = built_book.parent / "screenshots" / f"{Path(name).name}-1280x900.png"
    target.parent.mkdir(exist_ok=True)
    tab.screenshot(path=str(target))
    visible = tab.eval_on_selector_all(SEARCH_FIELDS, """fields => fields.filter(field => {
        const box = field.getBoundingClientRect(), style = getComputedStyle(field);
        return box.width > 0 && box.height > 0 && style.visibility !== "hidden"
            && box.bottom > 0 && box.top < innerHeight && box.right > 0 && box.left < innerWidth;
    }).map(field => field.closest("[id]").id + " " + field.className)""")
    assert len(visible) == 1, f"{name}: {len(visible)} search fields in view: {visible}"
    assert visible[0].startswith("pst-primary-sidebar"), f"{name}: the search is not in the " \
        f"sidebar: {visible}"
    header = tab.locator("#pst-header").bounding_box()
    assert header is None or header["height"] == 0, f"{name}: a header bar above the page " \
        f"({header}); see {target}"


#: Points of the sidebar's band around its search field where the chapter list shows
#: instead of the field's own sticky row (the list scrolls under that row).
LIST_BESIDE_SEARCH = """() => {
    const field = document.querySelector("#pst-primary-sidebar .search-button-field");
    const row = field.closest(".sidebar-primary-item");
    const sidebar = document.querySelector("#pst-primary-sidebar").getBoundingClientRect();
    const box = field.getBoundingClientRect(), seen = [];
    for (let y = Math.max(0, sidebar.top); y <= box.bottom + 4; y += 2)
        for (let x = sidebar.left + 1; x < sidebar.right - 1; x += 2) {
            const hit = document.elementFromPoint(x, y);
            if (hit && !row.contains(hit) && hit.closest("#pst-primary-sidebar nav.bd-docs-nav"))
                seen.push(`(${x}, ${y}): ${hit.textContent.trim().slice(0, 30)}`);
        }
    return seen;
}"""


@pytest.mark.parametrize("name", PAGES)
def test_the_chapter_list_never_shows_beside_the_search(views, name: str) -> None:
    """At 1280x900, with the sidebar scrolled to the current chapter, no part of the chapter
    list shows through the search field's row, beside the field or above it."""
    seen = views(name).tab.evaluate(LIST_BESIDE_SEARCH)
    assert not seen, f"{name}: the chapter list shows beside the search at {len(seen)} " \
        f"points, e.g. {seen[:3]}"


#: The sidebar's entries (chapter links, part captions) that the pinned search row's bottom
#: edge cuts through, once the page has loaded.
ENTRIES_UNDER_SEARCH = """() => {
    const row = document.querySelector("#pst-primary-sidebar .search-button-field")
        .closest(".sidebar-primary-item");
    const edge = row.getBoundingClientRect().bottom;
    const nav = document.querySelector("#pst-primary-sidebar nav.bd-docs-nav");
    return [...nav.querySelectorAll("a, p.caption")]
        .map(entry => [entry.textContent.trim().slice(0, 40), entry.getBoundingClientRect()])
        .filter(([, box]) => box.height > 0 && box.top < edge - 1 && box.bottom > edge + 1)
        .map(([text, box]) => `${text} (${Math.round(box.top)}-${Math.round(box.bottom)}, `
                              + `edge ${Math.round(edge)})`);
}"""


@pytest.mark.parametrize("name", PAGES)
def test_the_sidebar_opens_with_no_entry_half_under_the_search(views, name: str) -> None:
    """At 1280x900 the theme scrolls the sidebar to the current chapter; no entry is then
    left half under the pinned search row (the list had begun with "by step", the end of
    "5. Attention in PyTorch, step by step")."""
    tab = views(name).tab
    tab.wait_for_function("document.readyState === 'complete'")
    tab.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    cut = tab.evaluate(ENTRIES_UNDER_SEARCH)
    assert not cut, f"{name}: entries half under the search row: {cut}"


def test_favicon_at_the_site_root(recorded_site) -> None:
    """/favicon.ico answers too, for what asks there without reading a page."""
    from urllib.request import urlopen

    url, _ = recorded_site
    with urlopen(f"{url}/favicon.ico") as response:
        assert response.status == 200
        assert response.read(4) == b"\x00\x00\x01\x00", "not an ICO file"


def test_phone_drawers_show_their_edge_in_dark_mode(browser, recorded_site) -> None:
    """On a phone the contents open as a drawer over the page; in dark mode its background
    is close to the page's, and a border in another colour marks where it ends."""
    url, _ = recorded_site
    context, tab, _ = open_view(browser, f"{url}/book/scaling.html", PHONE, "dark")
    try:
        tab.click("button.primary-toggle")
        drawer = tab.locator("#pst-primary-sidebar-modal")
        expect(drawer).to_be_visible()
        edge = drawer.evaluate("""(d) => { const s = getComputedStyle(d);
            return [s.borderRightWidth, s.borderRightStyle, s.borderRightColor,
                    s.backgroundColor]; }""")
        assert edge[:2] == ["1px", "solid"], edge
        assert edge[2] != edge[3], f"the border has the drawer's own colour: {edge}"
        outline = tab.evaluate("""() => getComputedStyle(
            document.querySelector('#pst-secondary-sidebar-modal')).borderLeftWidth""")
        assert outline == "1px", outline
    finally:
        context.close()


# The full-page pictures are for a person to look at, not checks: `make screenshots` takes
# them, `make test` leaves them out (about two minutes of the two browsers' time).
@pytest.mark.screenshots
@pytest.mark.parametrize("name", PAGES)
def test_screenshot_in_light_mode(checked, name: str) -> None:
    """A picture of every page, for a person to look at (taken by the second browser)."""
    picture = checked(name).screenshot
    assert picture is not None and picture.stat().st_size > 10_000


# Last of a page's tests: a full-page picture scrolls and resizes the page.
@pytest.mark.screenshots
@pytest.mark.parametrize("name", PAGES)
def test_screenshot_in_dark_mode(views, built_book: Path, name: str) -> None:
    """A picture of every page in dark mode, for a person to look at."""
    target = full_page_picture(views(name, DESKTOP, "dark").tab,
                               built_book.parent / "screenshots" / f"{Path(name).name}-dark.jpg")
    assert target.stat().st_size > 10_000
