"""The built pages in headless Chromium: offline, maths typeset, no console errors."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import toc_pages

pytestmark = pytest.mark.browser

PAGES = toc_pages()
MATH_PAGES = ["book/notation"]


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
    results = Axe().run(page)
    serious = [
        f"{v['id']} ({v['impact']}): {v['help']} -- {v['nodes'][0]['html'][:200]}"
        for v in results.response["violations"] if v["impact"] in ("serious", "critical")
    ]
    assert not serious, f"{name}: " + "\n".join(serious)


@pytest.mark.parametrize("name", PAGES)
@pytest.mark.parametrize("mode", ["light", "dark"])
def test_screenshot_in_light_and_dark_mode(browser, site_url: str, built_book: Path,
                                           name: str, mode: str) -> None:
    """A picture of every page in both theme modes, for a person to look at."""
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  color_scheme=mode)
    context.add_init_script(f"localStorage.setItem('mode', '{mode}');"
                            f"localStorage.setItem('theme', '{mode}');")
    tab = context.new_page()
    try:
        open_page(tab, f"{site_url}/{name}.html")
        assert tab.evaluate("document.documentElement.dataset.theme") == mode
        target = built_book.parent / "screenshots" / f"{Path(name).name}-{mode}.png"
        target.parent.mkdir(exist_ok=True)
        tab.screenshot(path=str(target), full_page=True)
        assert target.stat().st_size > 10_000
    finally:
        context.close()
