"""``attnbook.explorer``: the self-contained HTML attention viewer, statically and in Chromium.

The Chromium tests load the fragment into a minimal page with ``page.set_content`` (or a file
written by ``save``) and drive it like a reader: mouse, keyboard, the layer and head controls,
the overview of all heads. Waits are Playwright's auto-waiting ``expect``, never sleeps.
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from browser_helpers import (
    assert_css_scoped,
    assert_refused,
    book_page,
    check_print_and_web_editions,
    contrast,
    watched_tab,
)
from playwright.sync_api import expect

from attnbook.explorer import (
    AttentionExplorer,
    explore,
    explore_sentences,
    value_contributions,
    value_vectors,
    weight_colour,
)

#: Generous: the machine is small and shared.
TIMEOUT = 20_000

MALICIOUS = "<img src=x onerror=alert(1)>"
CLOSER = "</script><script>alert(2)</script>"
TOKENS = ["[CLS]", "the", "cat", "sat", "down"]


def softmax_weights(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(2.5 * torch.randn(*shape, generator=gen), dim=-1)


#: (layers, heads, L, S) = (2, 3, 5, 5); rows sum to 1.
WEIGHTS = softmax_weights(2, 3, 5, 5)


def causal_weights(*shape: int, seed: int = 0) -> torch.Tensor:
    """Softmax weights of a causal model: exactly 0 above the diagonal (key after query)."""
    gen = torch.Generator().manual_seed(seed)
    scores = 2.5 * torch.randn(*shape, generator=gen)
    above = torch.ones(shape[-2:], dtype=torch.bool).triu(1)  # (L, S): key after query
    return torch.softmax(scores.masked_fill(above, float("-inf")), dim=-1)


#: (layers, heads, L, S) = (2, 3, 5, 5), causal; row 2 of layer 0, head 0 gives its first key
#: a weight of exactly 0, which must still look and read like a weight, not like a mask.
CAUSAL = causal_weights(2, 3, 5, 5)
CAUSAL[0, 0, 2] = torch.tensor([0.0, 0.25, 0.75, 0.0, 0.0])


def fmt(value: float | torch.Tensor) -> str:
    return f"{float(value):.4f}"


def rgb(weight: float | torch.Tensor, vmin: float = 0.0, vmax: float = 1.0) -> str:
    """The CSS computed colour the explorer gives a cell of ``weight`` (fixed scale)."""
    code = weight_colour(float(np.rint(float(weight) * 10_000)) / 10_000, vmin, vmax)
    r, g, b = (int(code[k:k + 2], 16) for k in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def root_id(fragment: str) -> str:
    match = re.match(r'<div class="attnbook-explorer" id="(attnx-[0-9a-z-]+)"', fragment)
    assert match, fragment[:200]
    return match.group(1)


def document(*fragments: str, html_attrs: str = "", head: str = "") -> str:
    return (f"<!DOCTYPE html><html lang=\"en\" {html_attrs}><head><meta charset=\"utf-8\">"
            f"<title>explorer test</title>{head}</head><body>{''.join(fragments)}</body></html>")


def script_data(fragment: str) -> dict:
    """The JSON the script carries, parsed back."""
    match = re.search(r"var D = (\{.*?\});\nvar root", fragment, re.S)
    assert match
    return json.loads(match.group(1))


# ------------------------------------------------------------------- the fragment itself


def test_fragment_is_self_contained_and_fetches_nothing():
    tokens = ["https://example.org/a.js", "//cdn.example", "http://x.y", "a", "b"]
    fragment = explore(softmax_weights(2, 2, 5, 5), tokens, title="http://x")._repr_html_()
    assert fragment.startswith('<div class="attnbook-explorer"')
    assert fragment.endswith("</div>")
    assert "//" not in fragment  # no http://, https:// or protocol-relative URL, no JS comment
    assert "http://" not in fragment and "https://" not in fragment
    assert re.search(r"<[^>]*\s(src|href|srcset|action|data)\s*=", fragment) is None
    assert "<script src" not in fragment.lower() and "<link" not in fragment.lower()
    assert "@import" not in fragment and "url(" not in fragment
    assert "require" not in fragment and "import(" not in fragment
    assert fragment.count("<script>") == 1 and fragment.count("<script") == 1
    assert fragment.count("<style>") == 1
    # The tokens are there as data all the same.
    assert script_data(fragment)["tokens"] == tokens
    assert script_data(fragment)["title"] == "http://x"


def test_css_is_scoped_under_the_root_class():
    assert_css_scoped(explore(WEIGHTS, TOKENS)._repr_html_(), ".attnbook-explorer")


def test_fragment_size_for_six_layers_of_twelve_heads(record_property):
    fragment = explore(softmax_weights(6, 12, 15, 15), [f"tok{i}" for i in range(15)],
                       title="MiniLM-sized")._repr_html_()
    size = len(fragment.encode("utf-8"))
    record_property("fragment_kB", round(size / 1000, 1))
    assert size < 100_000, f"{size / 1000:.1f} kB"
    # 4 decimals: every one of the 16200 weights travels as an integer of ten-thousandths.
    data = script_data(fragment)
    assert len(data["w"]) == 6 * 12 * 15 * 15
    assert all(isinstance(v, int) for v in data["w"])


def test_data_round_trips_to_four_decimals():
    explorer = explore(WEIGHTS, TOKENS)
    data = script_data(explorer.to_html())
    values = np.asarray(data["w"], dtype=np.float64).reshape(2, 3, 5, 5) / data["scale"]
    np.testing.assert_allclose(values, WEIGHTS.double().numpy(), atol=0.5e-4 + 1e-12)
    assert (data["layers"], data["heads"], data["rows"], data["cols"]) == (2, 3, 5, 5)
    assert explorer.shape == (2, 3, 5, 5)


def test_every_fragment_gets_a_fresh_id():
    explorer = explore(WEIGHTS, TOKENS)
    first, second = explorer._repr_html_(), explorer._repr_html_()
    assert root_id(first) != root_id(second)
    ids = re.findall(r'\sid="([^"]+)"', first)
    assert len(ids) == len(set(ids)) and all(i.startswith(root_id(first)) for i in ids)


def test_tokens_are_escaped_in_the_source():
    tokens = ["a", MALICIOUS, CLOSER, "x & y", "<!--"]
    fragment = explore(WEIGHTS[0], tokens)._repr_html_()
    assert "<img" not in fragment
    assert fragment.count("</script>") == 1 and fragment.count("<script") == 1
    assert "<!--" not in fragment and "alert(1)>" not in fragment and "x & y" not in fragment
    assert "\\u003cimg src=x onerror=alert(1)\\u003e" in fragment
    assert "\\u003c\\/script\\u003e\\u003cscript\\u003ealert(2)" in fragment
    assert script_data(fragment)["tokens"] == tokens


def test_save_writes_a_standalone_document(tmp_path):
    path = explore(WEIGHTS, TOKENS, title="A <b>title</b>").save(tmp_path / "x.html")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert '<meta charset="utf-8">' in text
    assert "<title>A &lt;b&gt;title&lt;/b&gt;</title>" in text
    assert text.count('<div class="attnbook-explorer"') == 1
    assert "//" not in text and "<link" not in text


def test_css_and_script_are_declared_package_data():
    import tomllib
    from fnmatch import fnmatch
    from importlib.resources import files

    assets = sorted(p.name for p in (files("attnbook") / "explorer_assets").iterdir()
                    if p.name.endswith((".js", ".css")))
    assert assets == ["explorer.css", "explorer.js"]
    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["attnbook"]
    for name in assets:
        assert any(fnmatch(f"explorer_assets/{name}", p) for p in patterns), name
    fragment = explore(WEIGHTS, TOKENS)._repr_html_()
    assert ".attnbook-explorer .attnx-bar-val{" in fragment  # the stylesheet, inlined
    assert 'root.setAttribute("data-attnx-ready", "1");' in fragment  # the script, inlined


def test_print_fallback_is_a_png_of_the_opening_map():
    """Jupyter gets the widget and a still picture; the HTML book picks the widget, the
    LaTeX (PDF) builder the picture."""
    explorer = explore(WEIGHTS, TOKENS, title="Print me")
    pixels = check_print_and_web_editions(explorer, '<div class="attnbook-explorer"')
    assert pixels.shape[0] > 300 and pixels.shape[1] > 300
    png = explorer.to_png()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert explorer.to_png(1, 2) != png  # another head is another picture
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\), got 2"):
        explorer.to_png(layer=2)
    with pytest.raises(ValueError, match=r"head must be in \[0, 3\), got -1"):
        explorer.to_png(head=-1)
    with pytest.raises(TypeError, match="head must be an int, got float"):
        explorer.to_png(head=1.0)


def test_the_package_exposes_the_module():
    import attnbook

    assert "explorer" in dir(attnbook)
    assert attnbook.explorer.explore is explore


# ------------------------------------------------------------------------- bad input

BAD_INPUTS = [
    pytest.param(lambda: explore([[0.5, 0.5], [0.5, 0.5]], ["a", "b"]), TypeError,
                 ["weights must be a torch.Tensor or numpy.ndarray", "got list"], id="list"),
    pytest.param(lambda: explore(np.array([["a", "b"], ["c", "d"]]), ["a", "b"]), TypeError,
                 ["weights must hold real numbers", "dtype <U1"], id="string-array"),
    pytest.param(lambda: explore(torch.ones(2, 2, dtype=torch.complex64), ["a", "b"]),
                 TypeError, ["weights must hold real numbers", "complex64"], id="complex"),
    pytest.param(lambda: explore(torch.ones(9), ["a"] * 9), ValueError,
                 ["weights must have 2, 3 or 4 dimensions", "got 1 dimension with shape (9,)"],
                 id="1-D"),
    pytest.param(lambda: explore(torch.ones(2, 2, 2, 3, 3), ["a"] * 3), ValueError,
                 ["weights must have 2, 3 or 4 dimensions", "got 5 dimensions",
                  "(2, 2, 2, 3, 3)"], id="5-D"),
    pytest.param(lambda: explore(torch.ones(0, 0), []), ValueError,
                 ["weights must not be empty", "(0, 0)"], id="empty"),
    pytest.param(lambda: explore(torch.rand(7, 9), ["a"] * 7), ValueError,
                 ["weights are not square", "L = 7 query rows", "S = 9 key columns",
                  "key_tokens"], id="not-square"),
    pytest.param(lambda: explore(torch.rand(9, 9), ["a"] * 7), ValueError,
                 ["tokens has 7 entries but the weights have L = 9 query rows"],
                 id="tokens-length"),
    pytest.param(lambda: explore(torch.rand(2, 7, 9), ["a"] * 7, key_tokens=["k"] * 8),
                 ValueError, ["key_tokens has 8 entries but the weights have S = 9 key columns"],
                 id="key-tokens-length"),
    pytest.param(lambda: explore(torch.rand(3, 2, 4, 4), ["a"] * 4, layer_names=["l"] * 5),
                 ValueError, ["layer_names has 5 entries but the weights have 3 layers"],
                 id="layer-names-length"),
    pytest.param(lambda: explore(torch.rand(3, 2, 4, 4), ["a"] * 4, head_names=["h"] * 5),
                 ValueError, ["head_names has 5 entries but the weights have 2 heads per layer"],
                 id="head-names-length"),
    pytest.param(lambda: explore(torch.rand(2, 4, 4), ["a"] * 4, layer_names=["x", "y"]),
                 ValueError, ["layer_names has 2 entries but the weights have 1 layer"],
                 id="layer-names-of-3-D"),
    pytest.param(lambda: explore(torch.rand(4, 4), "abcd"), TypeError,
                 ["tokens must be a sequence of strings, not one str"], id="tokens-str"),
    pytest.param(lambda: explore(torch.rand(4, 4), 4), TypeError,
                 ["tokens must be a sequence of strings, got int"], id="tokens-int"),
    pytest.param(lambda: explore(torch.rand(4, 4), ["a"] * 4, title=3), TypeError,
                 ["title must be a string or None, got int"], id="title"),
    pytest.param(lambda: explore(torch.rand(4, 4).index_put_((torch.tensor([1]),
                                                              torch.tensor([2])),
                                                             torch.tensor(float("nan"))),
                                 ["a"] * 4), ValueError,
                 ["weights must be finite", "1 of their 16 values",
                  "(layer, head, query, key) = (0, 0, 1, 2)"], id="nan"),
    pytest.param(lambda: explore(np.full((2, 3, 3), np.inf), ["a"] * 3), ValueError,
                 ["weights must be finite", "18 of their 18 values"], id="inf"),
    pytest.param(lambda: explore(torch.rand(4, 4), ["a"] * 4, vmin=1.0, vmax=0.5), ValueError,
                 ["vmin must be below vmax", "vmin = 1.0 and vmax = 0.5"], id="vmin-vmax"),
    pytest.param(lambda: explore(WEIGHTS, TOKENS, causal=True), ValueError,
                 ["causal=True, but weights has 60 nonzero values above the diagonal",
                  "a key after its query", "(layer, head, query, key) = (0, 0, 0, 1)"],
                 id="causal-upper-triangle"),
    pytest.param(lambda: explore(causal_weights(1, 1, 3, 3).index_put_(
        (torch.tensor([0]), torch.tensor([0]), torch.tensor([1]), torch.tensor([2])),
        torch.tensor(1e-9)), ["a"] * 3, causal=True), ValueError,
                 ["causal=True, but weights has 1 nonzero value above the diagonal",
                  "the first 1e-09 at (layer, head, query, key) = (0, 0, 1, 2)"],
                 id="causal-tiny-leak"),
    pytest.param(lambda: explore(torch.zeros(2, 3, 4), ["a"] * 3, key_tokens=list("wxyz"),
                                 causal=True), ValueError,
                 ["causal=True needs square maps", "L = 3 query rows and S = 4 key columns"],
                 id="causal-not-square"),
    pytest.param(lambda: explore(CAUSAL, TOKENS, causal=1), TypeError,
                 ["causal must be True or False, got int"], id="causal-int"),
    pytest.param(lambda: explore(CAUSAL, TOKENS, compact="yes"), TypeError,
                 ["compact must be True or False, got str"], id="compact-str"),
    pytest.param(lambda: AttentionExplorer(CAUSAL, TOKENS, contributions=WEIGHTS, causal=True),
                 ValueError, ["causal=True, but contributions has", "above the diagonal"],
                 id="causal-contributions"),
]


@pytest.mark.parametrize(("make", "error", "fragments"), BAD_INPUTS)
def test_bad_input_is_refused_before_any_html(monkeypatch, make, error, fragments):
    def no_html(self):
        raise AssertionError("HTML was built for bad input")

    monkeypatch.setattr(AttentionExplorer, "to_html", no_html)
    assert_refused(make, error, fragments)


# ------------------------------------------------------------------------- Chromium


@pytest.fixture
def page(browser):
    """A fresh tab that records page errors, dialogs and requests, and checks them at the end."""
    with watched_tab(browser, {"width": 1200, "height": 1000}, TIMEOUT) as tab:
        yield tab


def show(tab, *fragments: str, **kwargs: str):
    """Load ``fragments`` into ``tab`` and wait for every explorer; the first one's root."""
    tab.set_content(document(*fragments, **kwargs))
    for fragment in fragments:
        expect(tab.locator(f"#{root_id(fragment)}")).to_have_attribute(
            "data-attnx-ready", "1", timeout=TIMEOUT)
    return tab.locator(f"#{root_id(fragments[0])}")


def expect_bars(root, row, digits: int = 4) -> None:
    """The bars show ``row``, one value per key, to ``digits`` decimals."""
    expect(root.locator(".attnx-bar-val")).to_have_text(
        [f"{float(v):.{digits}f}" for v in row], timeout=TIMEOUT)


def cell(root, i: int, j: int):
    return root.locator(f'.attnx-cell[data-q="{i}"][data-k="{j}"]')


def background(locator) -> str:
    return locator.evaluate("e => getComputedStyle(e).backgroundColor")


@pytest.mark.browser
def test_malicious_tokens_are_shown_as_text(page):
    tokens = ["a", MALICIOUS, CLOSER, "x & y", "<!--"]
    root = show(page, explore(WEIGHTS[0], tokens)._repr_html_())
    expect(root.locator(".attnx-qbtn")).to_have_text(tokens, timeout=TIMEOUT)
    expect(root.locator(".attnx-colhead")).to_have_text(tokens, timeout=TIMEOUT)
    cell(root, 1, 2).hover()
    expect(root.locator(".attnx-r-q")).to_have_text(MALICIOUS, timeout=TIMEOUT)
    expect(root.locator(".attnx-r-k")).to_have_text(CLOSER, timeout=TIMEOUT)
    root.locator(".attnx-qbtn").nth(1).click()
    expect(root.locator(".attnx-bar-key")).to_have_text(tokens, timeout=TIMEOUT)
    assert MALICIOUS in root.locator(".attnx-bars-title").text_content()
    assert page.locator("img").count() == 0
    assert page.locator("script").count() == 1
    assert page.evaluate("() => typeof window.alert") == "function"
    assert page.seen["dialogs"] == [] and page.seen["requests"] == []


@pytest.mark.browser
def test_picking_another_head_or_layer_changes_the_map(page):
    root = show(page, explore(WEIGHTS, TOKENS)._repr_html_())
    # A cell whose colour differs in (layer 0, head 0), (0, 2) and (1, 2).
    i, j = next((i, j) for i in range(5) for j in range(5)
                if len({rgb(WEIGHTS[0, 0, i, j]), rgb(WEIGHTS[0, 2, i, j]),
                        rgb(WEIGHTS[1, 2, i, j])}) == 3)
    target = cell(root, i, j)
    assert background(target) == rgb(WEIGHTS[0, 0, i, j])
    assert target.get_attribute("data-w") == fmt(WEIGHTS[0, 0, i, j])

    root.get_by_label("Head", exact=True).select_option("2")
    expect(target).to_have_css("background-color", rgb(WEIGHTS[0, 2, i, j]), timeout=TIMEOUT)
    expect(target).to_have_attribute("data-w", fmt(WEIGHTS[0, 2, i, j]), timeout=TIMEOUT)
    expect(root.locator(".attnx-caption")).to_have_text("layer 0, head 2", timeout=TIMEOUT)

    root.get_by_label("Layer", exact=True).select_option("1")
    expect(target).to_have_css("background-color", rgb(WEIGHTS[1, 2, i, j]), timeout=TIMEOUT)
    for i in range(5):
        for j in range(5):
            assert background(cell(root, i, j)) == rgb(WEIGHTS[1, 2, i, j])


@pytest.mark.browser
def test_stretched_colours_use_the_head_maximum(page):
    root = show(page, explore(WEIGHTS, TOKENS)._repr_html_())
    top = float(np.rint(WEIGHTS[0, 0].max().item() * 10_000) / 10_000)
    root.get_by_label("Colours").select_option("head")
    expect(cell(root, 0, 0)).to_have_css("background-color", rgb(WEIGHTS[0, 0, 0, 0], 0, top),
                                         timeout=TIMEOUT)
    expect(root.locator(".attnx-cbar-hi")).to_have_text(f"{top:.3g}", timeout=TIMEOUT)


@pytest.mark.browser
def test_hovering_a_cell_shows_its_exact_weight(page):
    root = show(page, explore(WEIGHTS, TOKENS, layer_names=["L-a", "L-b"])._repr_html_())
    readout = root.locator(".attnx-readout")
    assert readout.get_attribute("aria-live") == "polite"
    for i, j in [(3, 1), (0, 4)]:
        cell(root, i, j).hover()
        expect(root.locator(".attnx-r-w")).to_have_text(fmt(WEIGHTS[0, 0, i, j]),
                                                        timeout=TIMEOUT)
        expect(root.locator(".attnx-r-q")).to_have_text(TOKENS[i], timeout=TIMEOUT)
        expect(root.locator(".attnx-r-k")).to_have_text(TOKENS[j], timeout=TIMEOUT)
        expect(root.locator(".attnx-r-where")).to_have_text("(L-a, head 0)", timeout=TIMEOUT)
    assert "weight " + fmt(WEIGHTS[0, 0, 0, 4]) in readout.text_content()


@pytest.mark.browser
def test_keyboard_moves_a_roving_focus_over_the_cells(page):
    root = show(page, explore(WEIGHTS, TOKENS)._repr_html_())
    assert root.locator('.attnx-cell[tabindex="0"]').count() == 1
    cell(root, 2, 1).focus()
    expect(root.locator(".attnx-r-k")).to_have_text(TOKENS[1], timeout=TIMEOUT)

    page.keyboard.press("ArrowRight")
    expect(root.locator(".attnx-r-k")).to_have_text(TOKENS[2], timeout=TIMEOUT)
    expect(root.locator(".attnx-r-w")).to_have_text(fmt(WEIGHTS[0, 0, 2, 2]), timeout=TIMEOUT)
    expect(cell(root, 2, 2)).to_be_focused(timeout=TIMEOUT)
    page.keyboard.press("ArrowDown")
    expect(cell(root, 3, 2)).to_be_focused(timeout=TIMEOUT)
    expect(root.locator(".attnx-r-q")).to_have_text(TOKENS[3], timeout=TIMEOUT)
    page.keyboard.press("End")
    expect(cell(root, 3, 4)).to_be_focused(timeout=TIMEOUT)
    page.keyboard.press("ArrowRight")  # already in the last column: stays
    expect(cell(root, 3, 4)).to_be_focused(timeout=TIMEOUT)

    # Roving tabindex: only the active cell is in the tab order.
    focusable = root.locator('.attnx-cell[tabindex="0"]')
    expect(focusable).to_have_count(1, timeout=TIMEOUT)
    assert focusable.get_attribute("data-q") == "3" and focusable.get_attribute("data-k") == "4"
    outline = page.evaluate(
        "() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, parseFloat(s.outlineWidth)]; }")
    assert outline[0] == "solid" and outline[1] >= 2

    page.keyboard.press("Enter")
    expect_bars(root, WEIGHTS[0, 0, 3])


@pytest.mark.browser
def test_selecting_a_query_shows_its_row_as_bars(page):
    root = show(page, explore(WEIGHTS, TOKENS)._repr_html_())
    bars = root.locator(".attnx-bars-list")
    expect(bars).to_be_hidden(timeout=TIMEOUT)

    label = root.locator(".attnx-qbtn").nth(3)
    label.click()
    expect(bars).to_be_visible(timeout=TIMEOUT)
    expect(label).to_have_attribute("aria-pressed", "true", timeout=TIMEOUT)
    expect(root.get_by_label("Query token")).to_have_value("3", timeout=TIMEOUT)
    expect(root.locator(".attnx-bar-key")).to_have_text(TOKENS, timeout=TIMEOUT)
    expect_bars(root, WEIGHTS[0, 0, 3])
    widths = root.locator(".attnx-bar-fill").evaluate_all("es => es.map(e => e.style.width)")
    assert all(width.endswith("%") for width in widths)
    assert [float(width[:-1]) for width in widths] == pytest.approx(
        [100 * float(fmt(WEIGHTS[0, 0, 3, j])) for j in range(5)], abs=0.006)

    root.get_by_label("Head", exact=True).select_option("1")
    expect_bars(root, WEIGHTS[0, 1, 3])
    root.get_by_label("Query token").select_option("0")
    expect_bars(root, WEIGHTS[0, 1, 0])


@pytest.mark.browser
def test_overview_shows_every_head_and_clicking_one_selects_it(page):
    root = show(page, explore(WEIGHTS, TOKENS)._repr_html_())
    tiles = root.locator(".attnx-tile")
    expect(tiles).to_have_count(3, timeout=TIMEOUT)
    expect(tiles.nth(0)).to_have_attribute("aria-pressed", "true", timeout=TIMEOUT)

    def tile_pixel(h: int, i: int, j: int) -> str:
        r, g, b = tiles.nth(h).locator("canvas").evaluate(
            f"c => Array.from(c.getContext('2d').getImageData({j}, {i}, 1, 1).data.slice(0, 3))")
        return f"rgb({r}, {g}, {b})"

    for h in range(3):
        assert tile_pixel(h, 1, 3) == rgb(WEIGHTS[0, h, 1, 3])

    tiles.nth(2).click()
    expect(root.get_by_label("Head", exact=True)).to_have_value("2", timeout=TIMEOUT)
    expect(tiles.nth(2)).to_have_attribute("aria-pressed", "true", timeout=TIMEOUT)
    expect(tiles.nth(0)).to_have_attribute("aria-pressed", "false", timeout=TIMEOUT)
    expect(cell(root, 1, 3)).to_have_css("background-color", rgb(WEIGHTS[0, 2, 1, 3]),
                                         timeout=TIMEOUT)

    root.get_by_label("Layer", exact=True).select_option("1")
    expect(cell(root, 1, 3)).to_have_css("background-color", rgb(WEIGHTS[1, 2, 1, 3]),
                                         timeout=TIMEOUT)
    for h in range(3):
        assert tile_pixel(h, 1, 3) == rgb(WEIGHTS[1, h, 1, 3])

    # The button says what a click will do: hide the tiles, then show them again.
    toggle = root.locator(".attnx-toggle")
    expect(toggle).to_have_text("Hide the heads of this layer")
    expect(toggle).to_have_attribute("aria-expanded", "true", timeout=TIMEOUT)
    toggle.click()
    expect(root.locator(".attnx-ov")).to_be_hidden(timeout=TIMEOUT)
    expect(toggle).to_have_attribute("aria-expanded", "false", timeout=TIMEOUT)
    expect(toggle).to_have_text("Show the heads of this layer")
    toggle.click()
    expect(root.locator(".attnx-ov")).to_be_visible(timeout=TIMEOUT)
    expect(toggle).to_have_text("Hide the heads of this layer")


@pytest.mark.browser
def test_two_explorers_on_one_page_do_not_interfere(page):
    other = softmax_weights(1, 2, 4, 4, seed=1)
    first = explore(WEIGHTS, TOKENS)
    a, b, a_again = first._repr_html_(), explore(other, list("wxyz"))._repr_html_(), \
        first._repr_html_()
    show(page, a, b, a_again)
    ids = page.evaluate("() => Array.from(document.querySelectorAll('[id]'), e => e.id)")
    assert len(ids) == len(set(ids)) and len(ids) >= 3 * 6
    root_a, root_b, root_c = (page.locator(f"#{root_id(f)}") for f in (a, b, a_again))

    def colours(root) -> list[str]:
        return root.locator(".attnx-cell").evaluate_all(
            "es => es.map(e => getComputedStyle(e).backgroundColor)")

    before_b, before_c = colours(root_b), colours(root_c)
    assert before_b == [rgb(other[0, 0, i, j]) for i in range(4) for j in range(4)]

    root_a.get_by_label("Head", exact=True).select_option("2")
    root_a.locator(".attnx-tile").nth(1).click()
    root_a.locator(".attnx-qbtn").nth(1).click()
    cell(root_a, 2, 3).hover()
    expect(root_a.locator(".attnx-r-w")).to_have_text(fmt(WEIGHTS[0, 1, 2, 3]), timeout=TIMEOUT)
    expect(cell(root_a, 0, 0)).to_have_css("background-color", rgb(WEIGHTS[0, 1, 0, 0]),
                                           timeout=TIMEOUT)
    assert colours(root_b) == before_b and colours(root_c) == before_c
    for root in (root_b, root_c):
        expect(root.locator(".attnx-r-body")).to_be_hidden(timeout=TIMEOUT)
        expect(root.locator(".attnx-bars-list")).to_be_hidden(timeout=TIMEOUT)
        expect(root.get_by_label("Head", exact=True)).to_have_value("0", timeout=TIMEOUT)

    # And the second explorer still works on its own data.
    cell(root_b, 3, 0).hover()
    expect(root_b.locator(".attnx-r-w")).to_have_text(fmt(other[0, 0, 3, 0]), timeout=TIMEOUT)
    expect(root_b.locator(".attnx-r-k")).to_have_text("w", timeout=TIMEOUT)
    assert root_a.locator(".attnx-r-w").text_content() == fmt(WEIGHTS[0, 1, 2, 3])
    assert root_a.locator(".attnx-r-k").text_content() == TOKENS[3]


@pytest.mark.browser
def test_rectangular_maps_and_single_maps(page):
    cross = softmax_weights(2, 3, 6, seed=2)  # (heads, L, S)
    keys = ["k0", "k1", "k2", "k3", "k4", "k5"]
    rect = explore(cross, ["q0", "q1", "q2"], key_tokens=keys)._repr_html_()
    single = explore(WEIGHTS[1, 1], TOKENS, title="One map")._repr_html_()
    root = show(page, rect, single)
    expect(root.locator(".attnx-cell")).to_have_count(18, timeout=TIMEOUT)
    expect(root.locator(".attnx-colhead")).to_have_text(keys, timeout=TIMEOUT)
    cell(root, 1, 5).hover()
    expect(root.locator(".attnx-r-k")).to_have_text("k5", timeout=TIMEOUT)
    expect(root.locator(".attnx-r-q")).to_have_text("q1", timeout=TIMEOUT)
    expect(root.locator(".attnx-r-w")).to_have_text(fmt(cross[0, 1, 5]), timeout=TIMEOUT)
    expect(root.locator(".attnx-ctl-layer")).to_be_hidden(timeout=TIMEOUT)
    expect(root.locator(".attnx-tile")).to_have_count(2, timeout=TIMEOUT)

    one = page.locator(f"#{root_id(single)}")
    expect(one.locator(".attnx-title")).to_have_text("One map", timeout=TIMEOUT)
    expect(one.locator(".attnx-ctl-head")).to_be_hidden(timeout=TIMEOUT)
    expect(one.locator(".attnx-ov")).to_be_hidden(timeout=TIMEOUT)
    assert background(cell(one, 4, 0)) == rgb(WEIGHTS[1, 1, 4, 0])


@pytest.mark.browser
def test_controls_are_labelled_and_the_panel_stays_light_in_dark_mode(page):
    fragment = explore(WEIGHTS, TOKENS)._repr_html_()
    theme = ("<style>body{background:#121212;color:#e0e0e0}"
             "button,select{background:#2a2a2a;color:#eeeeee}label{color:#9ab}</style>")
    root = show(page, fragment, html_attrs='data-theme="dark"', head=theme)
    for name in ("Layer", "Head", "Query token", "Colours"):
        control = root.get_by_label(name, exact=True)
        expect(control).to_have_count(1, timeout=TIMEOUT)
        assert control.evaluate("e => e.tagName") == "SELECT"
    assert root.locator("[role=grid] [role=gridcell]").count() == 25

    def luminance(css: str) -> float:
        r, g, b = (int(x) for x in re.findall(r"\d+", css)[:3])
        return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255

    assert background(root) == "rgb(255, 255, 255)"
    for selector in (".attnx-caption", ".attnx-readout", ".attnx-bars-title", "label",
                     "select", ".attnx-toggle", ".attnx-qbtn"):
        element = root.locator(selector).first
        colour = element.evaluate("e => getComputedStyle(e).color")
        assert luminance(colour) < 0.3, (selector, colour)
    for selector in ("select", ".attnx-toggle"):
        element = root.locator(selector).first
        assert luminance(background(element)) > 0.85, selector


@pytest.mark.browser
def test_saved_file_works_offline(page, tmp_path):
    path = explore(WEIGHTS, TOKENS).save(tmp_path / "explorer.html")
    page.goto(path.as_uri())
    root = page.locator(".attnbook-explorer")
    expect(root).to_have_attribute("data-attnx-ready", "1", timeout=TIMEOUT)
    cell(root, 4, 4).hover()
    expect(root.locator(".attnx-r-w")).to_have_text(fmt(WEIGHTS[0, 0, 4, 4]), timeout=TIMEOUT)
    assert all(url.startswith("file:") for url in page.seen["requests"])


@pytest.mark.browser
def test_key_labels_sit_over_their_columns(page):
    """Each key label is centred over its column of cells, whatever the fonts."""
    root = show(page, explore(WEIGHTS, TOKENS)._repr_html_())
    heads = root.locator(".attnx-colhead")
    expect(heads).to_have_count(len(TOKENS), timeout=TIMEOUT)
    for j in range(len(TOKENS)):
        head_box = heads.nth(j).bounding_box()
        cell_box = cell(root, 0, j).bounding_box()
        head_centre = head_box["x"] + head_box["width"] / 2
        cell_centre = cell_box["x"] + cell_box["width"] / 2
        assert abs(head_centre - cell_centre) < 1.0, (j, head_box, cell_box)


#: Each label's drawn text, in the order of its axis, as [left, top, right, bottom, font px];
#: a label hidden to thin a crowded axis counts as absent.
LABEL_BOXES = """(root, selector) => Array.from(root.querySelectorAll(selector))
    .filter(e => getComputedStyle(e).visibility === "visible").map(e => {
    const r = document.createRange(); r.selectNodeContents(e);
    const b = r.getBoundingClientRect();
    return [b.left, b.top, b.right, b.bottom, parseFloat(getComputedStyle(e).fontSize)]; })"""


@pytest.mark.browser
def test_labels_stay_apart_on_a_phone(browser):
    """At 390 px, a map of 23 queries and 18 keys (Whisper's clip, one key a second) shrinks
    its cells to fit the column, and its labels shrink with them: no key label runs into the
    next, no query label into the one below, none is under 9 px, every query keeps its label
    and at least every second key does."""
    queries = [f"word{i}" for i in range(23)]
    keys = [f"{j} s" for j in range(18)]
    fragment = explore(softmax_weights(2, 23, 18, seed=5), queries,
                       key_tokens=keys)._repr_html_()
    with watched_tab(browser, {"width": 390, "height": 900}, TIMEOUT) as tab:
        root = show(tab, fragment)
        for selector, axis in ((".attnx-colhead .attnx-vtext", 0), (".attnx-qbtn", 1)):
            boxes = root.evaluate(LABEL_BOXES, selector)
            assert len(boxes) >= (9 if axis == 0 else 23), (selector, len(boxes))
            assert min(box[4] for box in boxes) >= 9, (selector, boxes[:2])
            overlaps = [k for k in range(len(boxes) - 1)
                        if boxes[k + 1][axis] < boxes[k][axis + 2] - 0.5]
            assert not overlaps, (selector, [boxes[k:k + 2] for k in overlaps[:2]])
        # The map still fits the phone's column: the cells shrank, nothing scrolls.
        assert root.evaluate("r => r.scrollWidth <= r.clientWidth + 1")


#: The head tiles' rows, as the number of tiles in each; and each control's label and
#: its select, as [label top, label bottom, select top, select bottom].
TILE_ROWS = """r => { const rows = new Map();
    for (const t of r.querySelectorAll(".attnx-tile")) {
        const top = Math.round(t.getBoundingClientRect().top);
        rows.set(top, (rows.get(top) || 0) + 1); }
    return Array.from(rows.values()); }"""
CONTROL_LINES = """r => Array.from(r.querySelectorAll(".attnx-ctl:not([hidden])"), c => {
    const l = c.querySelector("label").getBoundingClientRect();
    const s = c.querySelector("select").getBoundingClientRect();
    return [l.top, l.bottom, s.top, s.bottom]; })"""


@pytest.mark.browser
@pytest.mark.parametrize("width", [390, 1280])
def test_head_tiles_make_even_rows_and_each_select_stays_by_its_name(browser, width):
    """Nine heads (SmolLM2's) on a phone make rows of three, not 4, 4 and a lone ninth;
    and every select, the colour scale's too, sits on the line of its name."""
    fragment = explore(softmax_weights(1, 9, 6, 6, seed=2), list("abcdef"))._repr_html_()
    with watched_tab(browser, {"width": width, "height": 900}, TIMEOUT) as tab:
        root = show(tab, fragment)
        rows = root.evaluate(TILE_ROWS)
        assert sum(rows) == 9 and max(rows) - min(rows) <= 1, rows
        if width == 390:
            assert len(rows) > 1, rows  # (the case this is about: a wrapping column)
        for label_top, label_bottom, top, bottom in root.evaluate(CONTROL_LINES):
            assert top < label_bottom and label_top < bottom, (label_top, top)


@pytest.mark.browser
def test_escape_clears_the_bars_from_a_row_label(page):
    root = show(page, explore(WEIGHTS, TOKENS)._repr_html_())
    bars = root.locator(".attnx-bars-list")
    label = root.locator(".attnx-qbtn").nth(2)
    label.click()
    expect(bars).to_be_visible(timeout=TIMEOUT)
    label.press("Escape")
    expect(bars).to_be_hidden(timeout=TIMEOUT)


@pytest.mark.browser
def test_clearing_the_query_clears_the_bars_title(page):
    """With no query picked the bars' title asks for one again: it had kept the last
    query's words ("Query 'animal' (row 2) attends to, in layer 5, head 2:") over no bars,
    after "(none)", Escape, or a change of head."""
    root = show(page, explore(WEIGHTS, TOKENS)._repr_html_())
    title = root.locator(".attnx-bars-title")
    ask = title.text_content()
    assert ask.startswith("Pick a query token")
    for clear in ("none", "escape"):
        label = root.locator(".attnx-qbtn").nth(2)
        label.click()
        expect(title).to_contain_text(TOKENS[2], timeout=TIMEOUT)
        if clear == "none":
            root.get_by_label("Query token").select_option("-1")
        else:
            label.press("Escape")
        expect(title).to_have_text(ask, timeout=TIMEOUT)
        root.get_by_label("Head", exact=True).select_option("1")
        expect(title).to_have_text(ask, timeout=TIMEOUT)
        root.get_by_label("Head", exact=True).select_option("0")


@pytest.mark.browser
def test_a_tap_anywhere_on_a_row_label_picks_that_row(page):
    """The whole label cell is the row's button, not only its text: on a phone, whose map has
    rows 15 px tall, a tap beside a short label picked a neighbouring row."""
    root = show(page, explore(WEIGHTS, TOKENS)._repr_html_())
    bars = root.locator(".attnx-bars-title")
    for i in (1, 3):
        head = root.locator(".attnx-rowhead").nth(i).bounding_box()
        page.mouse.click(head["x"] + 3, head["y"] + head["height"] / 2)  # its far left
        expect(root.locator(".attnx-qbtn").nth(i)).to_have_attribute("aria-pressed", "true",
                                                                      timeout=TIMEOUT)
        expect(bars).to_contain_text(TOKENS[i], timeout=TIMEOUT)


@pytest.mark.browser
def test_a_tap_on_a_cell_reads_it_out_on_a_touch_screen(browser):
    """Where nothing hovers (a phone), a tap on a cell reads its weight out, as the hint
    says, and a tap on another cell reads that one."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True,
                                  is_mobile=True)
    try:
        tab = context.new_page()
        root = show(tab, explore(WEIGHTS, TOKENS)._repr_html_())
        expect(root.locator(".attnx-r-hint")).to_have_text(HINT.format("weight"))
        for i, j in ((1, 3), (4, 0)):
            root.locator(f'.attnx-cell[data-q="{i}"][data-k="{j}"]').tap()
            expect(root.locator(".attnx-r-w")).to_have_text(fmt(WEIGHTS[0, 0, i, j]),
                                                           timeout=TIMEOUT)
            expect(root.locator(".attnx-r-q")).to_have_text(TOKENS[i], timeout=TIMEOUT)
        expect(root.locator(".attnx-r-hint")).to_be_hidden()
    finally:
        context.close()


# ------------------------------------------------------------ several sentences, contributions

SCREENSHOTS = Path(__file__).resolve().parents[1] / "_build" / "screenshots" / "explorer"
BUDGET = 150_000  # bytes: the explorer with its sentences, as shipped in the page
IT_TIRED = "The animal didn't cross the street because it was too tired"
SENTENCES = {
    '"it" is the animal': IT_TIRED,
    '"it" is the street (control)': IT_TIRED.replace("tired", "wide"),
    'river "bank"': "I sat on the river bank.",
    'money "bank"': "I deposited cash at the bank.",
}


# Session-wide: the tests that drive Chromium run after the others (conftest), and a
# module fixture would be built again for them.
@pytest.fixture(scope="session")
def sentences_explorer():
    return explore_sentences(SENTENCES, title="all-MiniLM-L6-v2")


def shipped_bytes(text: str | None) -> np.ndarray:
    """A base64url byte string of the fragment, decoded back to numbers in [0, 1]."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return np.frombuffer(raw, dtype=np.uint8) / 255


def test_value_vectors_reproduce_the_models_per_head_context():
    """sum_j A_ij v_j equals the model's own attention output before W_o, in every layer."""
    from attnbook.pretrained import encode, load_model

    loaded = load_model()
    values, weights, tokens = value_vectors(IT_TIRED, loaded)
    layers, heads, n, d_head = values.shape
    assert (layers, heads) == (loaded.num_layers, loaded.num_heads)
    assert heads * d_head == loaded.width and len(tokens) == n
    captured = []
    hooks = [layer.attention.self.register_forward_hook(
        lambda module, args, output: captured.append(output[0][0].detach()))
        for layer in loaded.model.encoder.layer]
    try:
        encoding, _ = encode(IT_TIRED, loaded)
        with torch.no_grad():
            loaded.model(**encoding, output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(captured) == layers
    for layer in range(layers):
        context = (weights[layer] @ values[layer]).transpose(0, 1).flatten(1)  # (n, d_model)
        torch.testing.assert_close(context, captured[layer].float(), atol=1e-5, rtol=1e-4)
    # Through W_o, the contributions add up to the layer's attention output minus its bias.
    _, norms, _ = value_contributions(IT_TIRED, loaded)
    dense = loaded.model.encoder.layer[2].attention.output.dense
    w_o = dense.weight.T.unflatten(0, (heads, d_head))  # (heads, d_head, d_model)
    terms = weights[2][..., None] * (values[2] @ w_o)[:, None]  # (heads, n, n, d_model)
    with torch.no_grad():
        torch.testing.assert_close(terms.sum(dim=(0, 2)) + dense.bias, dense(captured[2]),
                                   atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(norms[2], terms.norm(dim=-1))


def test_contributions_differ_from_weights_on_cls(sentences_explorer):
    """The point of the second view: [CLS] gets weight but delivers little."""
    shares = sentences_explorer.contributions
    assert shares.shape == sentences_explorer.weights.shape
    np.testing.assert_allclose(shares.sum(axis=-1), 1.0, atol=1e-9)
    weight_on_cls = sentences_explorer.weights[..., 0].mean()
    contribution_on_cls = shares[..., 0].mean()
    assert contribution_on_cls < 0.5 * weight_on_cls


def test_several_sentences_fit_the_budget(sentences_explorer, record_property):
    fragment = sentences_explorer.to_html()
    size = len(fragment.encode("utf-8"))
    record_property("fragment_kB", round(size / 1000, 1))
    assert size <= BUDGET, f"{size / 1000:.1f} kB"
    assert "//" not in fragment and "http" not in fragment
    assert re.search(r"<[^>]*\s(src|href|srcset|action|data)\s*=", fragment) is None
    data = script_data(fragment)
    sets = [data, *data["more"]]
    assert [s["label"] for s in sets] == list(SENTENCES)
    explorers = [sentences_explorer, *sentences_explorer.others]
    for entry, explorer in zip(sets, explorers, strict=True):
        assert entry["tokens"] == explorer.tokens
        for key, which in (("w", "weights"), ("c", "contributions")):
            np.testing.assert_allclose(shipped_bytes(entry[key]),
                                       explorer.shipped(which).ravel(), atol=1e-12)
            np.testing.assert_allclose(explorer.shipped(which), getattr(explorer, which),
                                       atol=0.5 / 255 + 1e-12)
    tokens = [e.tokens for e in explorers]
    assert "it" in tokens[0] and "tired" in tokens[0] and "wide" in tokens[1]
    assert "bank" in tokens[2] and "river" in tokens[2] and "cash" in tokens[3]


def test_single_sentence_data_is_unchanged_without_contributions():
    """Backwards compatible: one sentence, no contributions, 4 decimals as integers."""
    data = script_data(explore(WEIGHTS, TOKENS).to_html())
    assert data["scale"] == 10_000 and data["digits"] == 4
    assert data["more"] == [] and data["c"] is None
    assert all(isinstance(v, int) for v in data["w"])


@pytest.mark.parametrize(("make", "error", "fragment"), [
    pytest.param(lambda: explore_sentences(["a b"]), TypeError,
                 "sentences must be a mapping of label to text, got list", id="list"),
    pytest.param(lambda: explore_sentences({}), ValueError,
                 "sentences must hold at least one sentence", id="empty"),
    pytest.param(lambda: explore_sentences({"x": 3}), TypeError,
                 "sentences must map strings to strings, got str -> int", id="int-text"),
    pytest.param(lambda: AttentionExplorer(WEIGHTS, TOKENS, contributions=torch.ones(2, 3, 5, 4)),
                 ValueError, "contributions must have the shape of the weights", id="shape"),
    pytest.param(lambda: AttentionExplorer(WEIGHTS, TOKENS, contributions=-WEIGHTS),
                 ValueError, "contributions must be finite and non-negative", id="negative"),
    pytest.param(lambda: AttentionExplorer(WEIGHTS, TOKENS, label=3), TypeError,
                 "label must be a string or None, got int", id="label"),
])
def test_bad_sentences_or_contributions_are_refused(make, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        make()


def test_print_fallback_shows_both_views(sentences_explorer):
    import matplotlib.image

    png = sentences_explorer.to_png()
    pixels = matplotlib.image.imread(io.BytesIO(png))
    one_view = matplotlib.image.imread(io.BytesIO(explore(WEIGHTS, TOKENS).to_png()))
    assert pixels.shape[1] > 1.5 * one_view.shape[1]  # two maps side by side


HINT = "Hover over or tap a cell, or focus one and use the arrow keys, to read its {}."


def with_contributions() -> AttentionExplorer:
    return AttentionExplorer(WEIGHTS, TOKENS, contributions=WEIGHTS.flip(-1))


def test_contribution_note_says_what_is_measured():
    """The note defines a contribution as the chapter does: the length of A_ij f(x_j), where
    f(x_j) is the value vector carried through the head's slice of W_o, not v_j alone."""
    fragment = with_contributions().to_html()
    note = re.search(r'<div class="attnx-view-note" hidden>(.*?)</div>', fragment, re.S)
    assert note, "the contributions view has no note"
    text = " ".join(re.sub(r"<[^>]+>", "", note.group(1)).replace("&times;", "x").split())
    assert text == ("Contribution: the length of weight x the value vector after the output "
                    "projection Wo (this head's slice of it), each row scaled to add up to 1.")
    assert "W<sub>o</sub>" in note.group(1)
    # The hint names the weight until the script switches it (see the browser test below).
    hint = re.search(r'<span class="attnx-r-hint">(.*?)</span>(?=<span class="attnx-r-body")',
                     fragment, re.S)
    assert hint and re.sub(r"<[^>]+>", "", hint.group(1)) == HINT.format("weight")
    assert '<span class="attnx-hint-what">weight</span>' in hint.group(1)


@pytest.mark.browser
def test_each_view_names_what_it_shows(page):
    """The hint, the readout, the colour bar and the note say "weight" or "contribution"."""
    root = show(page, with_contributions().to_html())
    view = root.get_by_label("Show", exact=True)
    hint, note = root.locator(".attnx-r-hint"), root.locator(".attnx-view-note")
    for code, noun in (("w", "weight"), ("c", "contribution"), ("w", "weight")):
        view.select_option(code)
        expect(hint).to_be_visible(timeout=TIMEOUT)
        expect(hint).to_have_text(HINT.format(noun), timeout=TIMEOUT)
        for name in (".attnx-r-what", ".attnx-cbar-name"):
            expect(root.locator(name)).to_have_text(noun, timeout=TIMEOUT)
        if noun == "contribution":
            expect(note).to_be_visible(timeout=TIMEOUT)
            expect(note).to_contain_text("the value vector after the output projection Wo",
                                         timeout=TIMEOUT)
        else:
            expect(note).to_be_hidden(timeout=TIMEOUT)
    view.select_option("c")
    cell(root, 1, 2).hover()
    expect(root.locator(".attnx-r-body")).to_contain_text(
        f"contribution {fmt3(with_contributions().shipped('contributions')[0, 0, 1, 2])}",
        timeout=TIMEOUT)
    expect(hint).to_be_hidden(timeout=TIMEOUT)


def hostile_pair() -> AttentionExplorer:
    tokens = ["a", MALICIOUS, CLOSER, "x & y", "<!--"]
    first = AttentionExplorer(WEIGHTS, TOKENS, contributions=WEIGHTS.flip(-1), label="plain")
    second = AttentionExplorer(softmax_weights(2, 3, 5, 5, seed=3), tokens,
                               contributions=WEIGHTS, label=MALICIOUS)
    first.others = [second]
    return first


def fmt3(value: float) -> str:
    return f"{float(value):.3f}"


@pytest.mark.browser
def test_switching_sentence_and_view_reads_back_the_shipped_numbers(page, sentences_explorer):
    root = show(page, sentences_explorer.to_html())
    sentence = root.get_by_label("Sentence", exact=True)
    view = root.get_by_label("Show", exact=True)
    expect(sentence).to_be_visible(timeout=TIMEOUT)
    expect(sentence.locator("option")).to_have_text(list(SENTENCES), timeout=TIMEOUT)
    for index, explorer in enumerate([sentences_explorer, *sentences_explorer.others]):
        sentence.select_option(str(index))
        expect(root.locator(".attnx-qbtn")).to_have_text(explorer.tokens, timeout=TIMEOUT)
        for which, code in (("weights", "w"), ("contributions", "c")):
            view.select_option(code)
            root.get_by_label("Layer", exact=True).select_option("4")
            root.get_by_label("Head", exact=True).select_option("7")
            i, j = len(explorer.tokens) - 3, 0
            cell(root, i, j).hover()
            expected = explorer.shipped(which)[4, 7, i, j]
            expect(root.locator(".attnx-r-w")).to_have_text(fmt3(expected), timeout=TIMEOUT)
            expect(root.locator(".attnx-r-what")).to_have_text(which[:-1], timeout=TIMEOUT)
            assert abs(float(root.locator(".attnx-r-w").text_content())
                       - getattr(explorer, which)[4, 7, i, j]) <= 0.5 / 255 + 0.0005
            root.locator(".attnx-qbtn").nth(i).click()
            expect_bars(root, explorer.shipped(which)[4, 7, i], digits=3)
    assert page.seen["requests"] == []


@pytest.mark.browser
def test_sentence_and_view_menus_work_from_the_keyboard(page, sentences_explorer):
    root = show(page, sentences_explorer.to_html())
    page.keyboard.press("Tab")
    expect(root.get_by_label("Sentence", exact=True)).to_be_focused(timeout=TIMEOUT)
    page.keyboard.press("ArrowDown")
    expect(root.get_by_label("Sentence", exact=True)).to_have_value("1", timeout=TIMEOUT)
    expect(root.locator(".attnx-qbtn").nth(13)).to_have_text("wide", timeout=TIMEOUT)
    page.keyboard.press("Tab")
    expect(root.get_by_label("Show", exact=True)).to_be_focused(timeout=TIMEOUT)
    page.keyboard.press("ArrowDown")
    expect(root.get_by_label("Show", exact=True)).to_have_value("c", timeout=TIMEOUT)
    expect(root.locator(".attnx-cbar-name")).to_have_text("contribution", timeout=TIMEOUT)
    other = sentences_explorer.others[0]
    cell(root, 0, 0).focus()
    page.keyboard.press("ArrowRight")
    expect(root.locator(".attnx-r-w")).to_have_text(
        fmt3(other.shipped("contributions")[0, 0, 0, 1]), timeout=TIMEOUT)


@pytest.mark.browser
def test_hostile_tokens_and_labels_in_another_sentence_stay_text(page):
    explorer = hostile_pair()
    fragment = explorer.to_html()
    assert "<img" not in fragment and fragment.count("<script") == 1
    root = show(page, fragment)
    sentence = root.get_by_label("Sentence", exact=True)
    expect(sentence.locator("option")).to_have_text(["plain", MALICIOUS], timeout=TIMEOUT)
    sentence.select_option("1")
    tokens = explorer.others[0].tokens
    expect(root.locator(".attnx-qbtn")).to_have_text(tokens, timeout=TIMEOUT)
    cell(root, 1, 2).hover()
    expect(root.locator(".attnx-r-q")).to_have_text(MALICIOUS, timeout=TIMEOUT)
    expect(root.locator(".attnx-r-k")).to_have_text(CLOSER, timeout=TIMEOUT)
    assert page.locator("img").count() == 0 and page.locator("script").count() == 1
    assert page.seen["dialogs"] == [] and page.seen["requests"] == []


@pytest.mark.browser
def test_several_sentences_have_no_serious_accessibility_violation(page, sentences_explorer):
    from axe_playwright_python.sync_playwright import Axe

    root = show(page, sentences_explorer.to_html())
    root.get_by_label("Show", exact=True).select_option("c")
    root.locator(".attnx-qbtn").nth(2).click()
    results = Axe().run(page, options={
        "resultTypes": ["violations"],
        "rules": {"label-content-name-mismatch": {"enabled": True}}})
    ran = {rule["id"] for group in ("violations", "passes", "incomplete", "inapplicable")
           for rule in results.response[group]}
    assert {"color-contrast", "label"} <= ran
    serious = [f"{v['id']} ({v['impact']}): {v['help']} -- {v['nodes'][0]['html'][:200]}"
               for v in results.response["violations"]
               if v["impact"] in ("serious", "critical")]
    assert not serious, "\n".join(serious)


@pytest.mark.browser
@pytest.mark.parametrize("mode", ["light", "dark"])
def test_screenshots_of_several_sentences(browser, sentences_explorer, mode):
    context = browser.new_context(viewport={"width": 1000, "height": 1000}, color_scheme=mode)
    tab = context.new_page()
    try:
        fragment = sentences_explorer.to_html()
        theme = ("<style>body{background:#121212;color:#e0e0e0}"
                 "button,select{background:#2a2a2a;color:#eeeeee}</style>")
        tab.set_content(document(fragment, **({"html_attrs": 'data-theme="dark"',
                                               "head": theme} if mode == "dark" else {})))
        root = tab.locator(f"#{root_id(fragment)}")
        expect(root).to_have_attribute("data-attnx-ready", "1", timeout=TIMEOUT)
        root.get_by_label("Show", exact=True).select_option("c")
        root.locator(".attnx-qbtn").nth(10).click()
        assert root.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(255, 255, 255)"
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        target = SCREENSHOTS / f"explorer-{mode}.png"
        root.screenshot(path=str(target))
        assert target.stat().st_size > 10_000
    finally:
        context.close()


@pytest.mark.browser
def test_with_scripts_off_the_notice_shows(browser, sentences_explorer):
    context = browser.new_context(java_script_enabled=False)
    tab = context.new_page()
    try:
        fragment = sentences_explorer.to_html()
        tab.set_content(document(fragment))
        root = tab.locator(f"#{root_id(fragment)}")
        expect(root.locator(".attnx-nojs")).to_be_visible(timeout=TIMEOUT)
        expect(root.locator(".attnx-ctl-sentence")).to_be_hidden(timeout=TIMEOUT)
    finally:
        context.close()


# ---------------------------------------------------------------- causal (decoder) maps

#: (rows, key) cells of a 5-token causal map: above the diagonal, a key after its query.
ABOVE = [(i, j) for i in range(5) for j in range(5) if j > i]
RIVER_BANK = "The river bank was muddy after the storm, so we walked along the bank."
MASKED = "masked: key after the query"


def test_causal_fragment_of_thirty_layers_of_nine_heads_fits_the_budget(record_property):
    """SmolLM2's size (30 layers x 9 heads) on 12 tokens: as bytes, only the triangle."""
    weights = causal_weights(30, 9, 12, 12)
    explorer = explore(weights, [f"tok{i}" for i in range(12)], causal=True, compact=True)
    fragment = explorer.to_html()
    size = len(fragment.encode("utf-8"))
    record_property("fragment_kB", round(size / 1000, 1))
    assert size < BUDGET, f"{size / 1000:.1f} kB"
    data = script_data(fragment)
    assert data["causal"] is True and data["scale"] == 255 and data["digits"] == 3
    shipped = shipped_bytes(data["w"])
    assert shipped.size == 30 * 9 * 12 * 13 // 2  # the triangle key <= query, not 144 a map
    rows, cols = np.tril_indices(12)
    np.testing.assert_allclose(shipped, explorer.shipped()[..., rows, cols].ravel(), atol=1e-12)
    # The whole square would add about 24 kB.
    assert len(explore(weights, None, compact=True).to_html()) > size + 20_000


def test_causal_flag_reaches_the_data_and_an_encoders_data_is_unchanged():
    from attnbook.plots import HATCH_GREY, MASKED_GREY

    data = script_data(explore(CAUSAL, TOKENS, causal=True).to_html())
    assert data["causal"] is True and data["masked"] == [MASKED_GREY, HATCH_GREY]
    assert data["scale"] == 10_000 and len(data["w"]) == 2 * 3 * 15  # 4 decimals, triangle
    rows, cols = np.tril_indices(5)
    values = np.asarray(data["w"]).reshape(2, 3, 15) / 10_000
    np.testing.assert_allclose(values, CAUSAL.double().numpy()[..., rows, cols], atol=0.5e-4)
    # The same numbers without causal=True: every cell travels and no flag is added.
    plain = script_data(explore(CAUSAL, TOKENS).to_html())
    assert "causal" not in plain and "masked" not in plain and len(plain["w"]) == 2 * 3 * 25
    assert explore(CAUSAL, TOKENS, causal=True).causal and not explore(CAUSAL, TOKENS).causal


def test_sentences_must_agree_on_causal():
    first = AttentionExplorer(CAUSAL, TOKENS, causal=True, label="decoder")
    first.others = [AttentionExplorer(CAUSAL, TOKENS, label="encoder")]
    with pytest.raises(ValueError, match=re.escape(
            "every sentence needs causal=True, got causal=False for 'encoder'")):
        first.to_html()


def test_print_fallback_hatches_the_masked_cells():
    """The PNG greys out the triangle above the diagonal, and says so."""
    import matplotlib.image

    from attnbook.plots import MASKED_GREY

    def grey_share(explorer: AttentionExplorer) -> float:
        pixels = matplotlib.image.imread(io.BytesIO(explorer.to_png()))[..., :3]
        grey = np.array([int(MASKED_GREY[k:k + 2], 16) for k in (1, 3, 5)]) / 255
        return float((np.abs(pixels - grey).max(axis=-1) < 2 / 255).mean())

    causal = explore(CAUSAL, TOKENS, causal=True)
    check_print_and_web_editions(causal, '<div class="attnbook-explorer"')
    assert grey_share(causal) > 0.05  # 10 of the 25 cells
    assert grey_share(explore(CAUSAL, TOKENS)) < 0.002


@pytest.fixture(scope="session")  # as sentences_explorer
def smollm2_explorer():
    return explore_sentences({'river "bank"': RIVER_BANK}, "smollm2", title="SmolLM2-135M")


def test_smollm2_sentence_is_causal_and_fits_the_budget(smollm2_explorer, record_property):
    explorer = smollm2_explorer
    layers, heads, n, _ = explorer.shape
    assert (layers, heads) == (30, 9) and 12 <= n <= 20
    # labels are words: no byte-level "Ġ" (a leading space) reaches the widget
    assert explorer.tokens[:3] == ["The", "river", "bank"]
    assert not any("Ġ" in token for token in explorer.tokens), explorer.tokens
    assert explorer.causal and explorer.compact and explorer.contributions is None
    assert not np.triu(explorer.weights, k=1).any()  # exact: the model's mask writes 0
    fragment = explorer.to_html()
    size = len(fragment.encode("utf-8"))
    record_property("fragment_kB", round(size / 1000, 1))
    assert size < BUDGET, f"{size / 1000:.1f} kB"
    data = script_data(fragment)
    assert data["causal"] is True and data["c"] is None
    assert len(shipped_bytes(data["w"])) == 30 * 9 * n * (n + 1) // 2
    # An encoder's contributions need BERT's layers; asking for them on a decoder says so.
    with pytest.raises(ValueError, match="value vectors need a BERT-style encoder"):
        explore_sentences({"x": RIVER_BANK}, "smollm2", contributions=True)


@pytest.mark.browser
def test_causal_cells_read_as_masked_not_as_zero(page):
    """Above the diagonal: hatched grey, "masked" in the readout, the bars and the tiles;
    a weight of exactly 0 below it still reads and looks like a weight."""
    from attnbook.plots import MASKED_GREY

    grey = "rgb({}, {}, {})".format(*(int(MASKED_GREY[k:k + 2], 16) for k in (1, 3, 5)))
    root = show(page, explore(CAUSAL, TOKENS, causal=True).to_html())
    masked_cells = root.locator(".attnx-cell.attnx-masked")
    expect(masked_cells).to_have_count(len(ABOVE), timeout=TIMEOUT)
    assert [tuple(int(c.get_attribute(a)) for a in ("data-q", "data-k"))
            for c in masked_cells.all()] == ABOVE
    for i, j in ABOVE:
        assert background(cell(root, i, j)) == grey
        assert cell(root, i, j).get_attribute("data-w") == "masked"
    assert "repeating-linear-gradient" in cell(root, 0, 4).evaluate(
        "e => getComputedStyle(e).backgroundImage")
    expect(cell(root, 0, 4)).to_have_attribute("aria-label",
                                               f"query [CLS], key down: {MASKED}")
    # Exactly 0 below the diagonal is a weight: the darkest viridis colour, read as 0.0000.
    assert background(cell(root, 2, 0)) == rgb(0.0) != grey
    cell(root, 2, 0).hover()
    expect(root.locator(".attnx-r-w")).to_have_text("0.0000", timeout=TIMEOUT)
    expect(root.locator(".attnx-r-what")).to_have_text("weight", timeout=TIMEOUT)

    cell(root, 1, 3).hover()
    expect(root.locator(".attnx-r-what")).to_have_text(MASKED, timeout=TIMEOUT)
    expect(root.locator(".attnx-r-w")).to_be_hidden(timeout=TIMEOUT)
    expect(root.locator(".attnx-r-k")).to_have_text(TOKENS[3], timeout=TIMEOUT)
    assert "0.0000" not in root.locator(".attnx-readout").text_content()

    cell(root, 3, 3).focus()  # the keyboard reads the same
    expect(root.locator(".attnx-r-w")).to_have_text(fmt(CAUSAL[0, 0, 3, 3]), timeout=TIMEOUT)
    page.keyboard.press("ArrowRight")
    expect(cell(root, 3, 4)).to_be_focused(timeout=TIMEOUT)
    expect(root.locator(".attnx-r-what")).to_have_text(MASKED, timeout=TIMEOUT)
    page.keyboard.press("Enter")  # the row as bars: the keys after the query are masked
    expect(root.locator(".attnx-bar-val")).to_have_text(
        [fmt(CAUSAL[0, 0, 3, j]) for j in range(4)] + ["masked"], timeout=TIMEOUT)
    tracks = root.locator(".attnx-bar-track")
    assert [t.evaluate("e => e.classList.contains('attnx-masked')") for t in tracks.all()] == \
        [False] * 4 + [True]
    root.locator(".attnx-qbtn").nth(1).click()
    expect(root.locator(".attnx-bar-val")).to_have_text(
        [fmt(CAUSAL[0, 0, 1, j]) for j in range(2)] + ["masked"] * 3, timeout=TIMEOUT)

    tile = root.locator(".attnx-tile canvas").nth(1)
    for (i, j), expected in (((0, 4), grey), ((4, 0), rgb(CAUSAL[0, 1, 4, 0]))):
        r, g, b = tile.evaluate(
            f"c => Array.from(c.getContext('2d').getImageData({j}, {i}, 1, 1).data.slice(0, 3))")
        assert f"rgb({r}, {g}, {b})" == expected
    # The stretched scale skips the mask, and the first row, whose one key has weight 1 in
    # every head: with it, every causal head stretched to 1, the same as the fixed scale.
    root.get_by_label("Colours").select_option("head")
    top = float(np.rint(CAUSAL[0, 0, 1:].max().item() * 10_000) / 10_000)
    assert top < 0.99
    expect(root.locator(".attnx-cbar-hi")).to_have_text(f"{top:.3g}", timeout=TIMEOUT)
    expect(cell(root, 0, 4)).to_have_css("background-color", grey, timeout=TIMEOUT)
    expect(root.locator(".attnx-legend")).to_contain_text("masked (key after the query)",
                                                          timeout=TIMEOUT)
    assert page.seen["errors"] == [] and page.seen["requests"] == []


@pytest.mark.browser
def test_smollm2_explorer_shows_its_triangle(page, smollm2_explorer):
    """The real decoder in Chromium: every cell above the diagonal reads as masked, in every
    layer picked, and the page logs no error."""
    explorer = smollm2_explorer
    n = explorer.shape[2]
    root = show(page, explorer.to_html())
    expect(root.locator(".attnx-cell.attnx-masked")).to_have_count(n * (n - 1) // 2,
                                                                   timeout=TIMEOUT)
    expect(root.locator(".attnx-tile")).to_have_count(9, timeout=TIMEOUT)
    root.get_by_label("Layer", exact=True).select_option("29")
    root.get_by_label("Head", exact=True).select_option("8")
    cell(root, 2, n - 1).hover()
    expect(root.locator(".attnx-r-what")).to_have_text(MASKED, timeout=TIMEOUT)
    expect(root.locator(".attnx-r-where")).to_have_text("(layer 29, head 8)", timeout=TIMEOUT)
    cell(root, n - 1, 2).hover()
    expect(root.locator(".attnx-r-w")).to_have_text(
        fmt3(explorer.shipped()[29, 8, n - 1, 2]), timeout=TIMEOUT)
    assert page.seen["errors"] == [] and page.seen["requests"] == []


# ------------------------------------------------ the readout, a phone and a laptop, dark mode


def readout(root) -> tuple[str, str, str, str, str]:
    """What the readout says: query token, row, key token, column, weight."""
    return tuple(root.locator(f".attnx-r-{part}").text_content()
                 for part in ("q", "i", "k", "j", "w"))


@pytest.mark.browser
def test_the_readout_follows_the_selected_row(page):
    """Selecting a query (its row label, the menu, Enter or a click on a cell) moves the
    readout to that row: to the row's strongest key, or to the cell that selected it."""
    root = show(page, explore(WEIGHTS, TOKENS)._repr_html_())
    body = root.locator(".attnx-r-body")

    def top(head: int, row: int) -> int:
        return int(torch.argmax(WEIGHTS[0, head, row]))

    cell(root, 0, 4).hover()
    expect(root.locator(".attnx-r-q")).to_have_text(TOKENS[0], timeout=TIMEOUT)
    for row in (3, 1):
        root.locator(".attnx-qbtn").nth(row).click()
        expect(root.locator(".attnx-r-i")).to_have_text(str(row), timeout=TIMEOUT)
        j = top(0, row)
        assert readout(root) == (TOKENS[row], str(row), TOKENS[j], str(j),
                                 fmt(WEIGHTS[0, 0, row, j]))
        assert body.is_visible()
        # The row label and the key's label are the highlighted ones.
        expect(root.locator(".attnx-qbtn.attnx-hl")).to_have_text(TOKENS[row], timeout=TIMEOUT)
        expect(root.locator(".attnx-colhead.attnx-hl")).to_have_attribute("title", TOKENS[j],
                                                                           timeout=TIMEOUT)
    # Another head: the readout stays on the selected row and shows that head's weight.
    root.get_by_label("Head", exact=True).select_option("2")
    expect(root.locator(".attnx-r-w")).to_have_text(fmt(WEIGHTS[0, 2, 1, top(0, 1)]),
                                                    timeout=TIMEOUT)
    root.get_by_label("Query token").select_option("4")
    expect(root.locator(".attnx-r-i")).to_have_text("4", timeout=TIMEOUT)
    assert readout(root)[2:] == (TOKENS[top(2, 4)], str(top(2, 4)),
                                 fmt(WEIGHTS[0, 2, 4, top(2, 4)]))
    cell(root, 2, 0).click()
    expect(root.locator(".attnx-r-i")).to_have_text("2", timeout=TIMEOUT)
    assert readout(root) == (TOKENS[2], "2", TOKENS[0], "0", fmt(WEIGHTS[0, 2, 2, 0]))
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    expect(root.locator(".attnx-qbtn").nth(3)).to_have_attribute("aria-pressed", "true",
                                                                 timeout=TIMEOUT)
    assert readout(root) == (TOKENS[3], "3", TOKENS[0], "0", fmt(WEIGHTS[0, 2, 3, 0]))


@pytest.mark.browser
def test_a_causal_row_reads_its_strongest_allowed_key(page):
    root = show(page, explore(CAUSAL, TOKENS, causal=True)._repr_html_())
    root.locator(".attnx-qbtn").nth(2).click()
    expect(root.locator(".attnx-r-i")).to_have_text("2", timeout=TIMEOUT)
    assert readout(root) == (TOKENS[2], "2", TOKENS[2], "2", fmt(0.75))


def natural_widths(root) -> list[tuple[str, float, float, int, int]]:
    """Per visible menu: its label, the width its longest choice needs, its width, and its
    scrollWidth and clientWidth."""
    return root.evaluate("""r => Array.from(r.querySelectorAll('.attnx-controls select'))
      .filter(e => e.checkVisibility()).map(e => {
        const c = e.cloneNode(true);
        c.style.maxWidth = 'none';
        c.style.width = 'auto';
        c.style.position = 'absolute';
        c.style.visibility = 'hidden';
        e.parentNode.appendChild(c);
        const need = c.getBoundingClientRect().width;
        c.remove();
        return [e.labels[0].textContent, need, e.getBoundingClientRect().width,
                e.scrollWidth, e.clientWidth];
      })""")


@pytest.mark.browser
@pytest.mark.parametrize("mode", ["light", "dark"])
@pytest.mark.parametrize("width", [390, 1280])
def test_explorer_fits_the_book_column_and_its_menus_are_not_cut(browser, width, mode):
    """In the book's page (its theme, light or dark) at 390 and 1280 px: the explorer never
    widens the page, every menu (the Colours menu with either choice) is as wide as its
    longest choice, and a 20-token map fits the column without scrolling."""
    small = explore(WEIGHTS, TOKENS, layer_names=["layer a", "layer b"]).to_html()
    tokens = [f"tok{i}" for i in range(20)]
    big = explore(softmax_weights(1, 2, 20, 20), tokens).to_html()
    with watched_tab(browser, {"width": width, "height": 1000}, TIMEOUT,
                     local_only=True) as tab:
        tab.set_content(book_page(small, big, mode=mode))
        roots = [tab.locator(f"#{root_id(f)}") for f in (small, big)]
        for root in roots:
            expect(root).to_have_attribute("data-attnx-ready", "1", timeout=TIMEOUT)
        for choice in ("fixed", "head"):
            for n, root in enumerate(roots):
                root.get_by_label("Colours").select_option(choice)
                menus = natural_widths(root)
                names = {"Layer", "Head", "Query token", "Colours"} - ({"Layer"} if n else set())
                assert {m[0] for m in menus} == names
                for name, need, has, scroll, client in menus:
                    assert need <= has + 0.5 and scroll <= client, (name, need, has, width)
                box = root.evaluate("e => [e.scrollWidth, e.clientWidth, "
                                    "e.getBoundingClientRect().right]")
                assert box[0] <= box[1] and box[2] <= width, box
        assert tab.evaluate("() => document.documentElement.scrollWidth") <= width
        wrap = roots[1].locator(".attnx-mapwrap")
        assert wrap.evaluate("e => e.scrollWidth <= e.clientWidth"), width
        size = roots[1].evaluate("e => parseFloat(getComputedStyle(e)"
                                 ".getPropertyValue('--attnx-cell'))")
        assert (size >= 10) if width == 390 else (size == 22), size  # 448 // 20 on a laptop
        roots[0].locator(".attnx-qbtn").nth(3).click()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        roots[0].screenshot(path=str(SCREENSHOTS / f"explorer-{width}-{mode}.png"))


@pytest.mark.browser
@pytest.mark.parametrize("width", [390, 1280])
def test_in_the_books_dark_mode_the_explorer_is_a_light_panel_with_dark_ink(browser, width):
    """Under the theme's real dark-mode CSS: a white panel, every text on it at WCAG AA
    contrast (4.5:1) against what lies behind it, and no grey frame of the theme around it."""
    fragment = explore(WEIGHTS, TOKENS).to_html()
    with watched_tab(browser, {"width": width, "height": 1000}, TIMEOUT,
                     local_only=True) as tab:
        tab.set_content(book_page(fragment, mode="dark"))
        root = tab.locator(f"#{root_id(fragment)}")
        expect(root).to_have_attribute("data-attnx-ready", "1", timeout=TIMEOUT)
        assert tab.evaluate("() => getComputedStyle(document.body).backgroundColor") == \
            "rgb(18, 18, 18)"  # the page is dark...
        assert background(root) == "rgb(255, 255, 255)"  # ... and the panel is white
        frame = root.evaluate("e => { const s = getComputedStyle(e.parentNode);"
                              " return [s.backgroundColor, s.paddingLeft]; }")
        assert frame == ["rgba(0, 0, 0, 0)", "0px"], frame
        root.locator(".attnx-qbtn").nth(1).click()
        cell(root, 1, 2).hover()
        pairs = root.evaluate("""r => {
          const behind = e => {
            for (let x = e; x; x = x.parentElement) {
              const c = getComputedStyle(x).backgroundColor;
              if (c !== 'rgba(0, 0, 0, 0)') { return c; }
            }
            return 'rgb(255, 255, 255)';
          };
          const picks = ['.attnx-caption', '.attnx-axis', '.attnx-readout', '.attnx-r-where',
            '.attnx-bars-title', '.attnx-bar-val', '.attnx-bar-key', 'label', 'select',
            '.attnx-toggle', '.attnx-qbtn[aria-pressed="false"]',
            '.attnx-qbtn[aria-pressed="true"]', '.attnx-help', '.attnx-cbar-lo',
            '.attnx-tile-label', '.attnx-vtext'];
          return picks.map(p => { const e = r.querySelector(p);
            return [p, getComputedStyle(e).color, behind(e)]; });
        }""")
        for selector, ink, paper in pairs:
            assert contrast(ink, paper) >= 4.5, (selector, ink, paper)
        assert any(paper != "rgb(255, 255, 255)" for _, _, paper in pairs)  # not vacuous


@pytest.mark.browser
def test_every_menu_of_several_sentences_fits_a_phone(browser, sentences_explorer):
    """The Sentence, Show, Layer, Head, Query token and Colours menus at 390 px: no choice is
    cut off, and the panel stays within the column."""
    fragment = sentences_explorer.to_html()
    with watched_tab(browser, {"width": 390, "height": 1000}, TIMEOUT,
                     local_only=True) as tab:
        tab.set_content(book_page(fragment, mode="dark"))
        root = tab.locator(f"#{root_id(fragment)}")
        expect(root).to_have_attribute("data-attnx-ready", "1", timeout=TIMEOUT)
        for label in SENTENCES:
            root.get_by_label("Sentence", exact=True).select_option(label=label)
            menus = natural_widths(root)
            assert {m[0] for m in menus} == {"Sentence", "Show", "Layer", "Head",
                                             "Query token", "Colours"}
            for name, need, has, scroll, client in menus:
                if name != "Query token":  # a long token may be cut; the readout spells it
                    assert need <= has + 0.5 and scroll <= client, (name, need, has)
            assert root.evaluate("e => e.scrollWidth <= e.clientWidth")
        assert tab.evaluate("() => document.documentElement.scrollWidth") <= 390
