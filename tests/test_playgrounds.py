"""``attnbook.playgrounds``: four self-contained HTML playgrounds, statically and in Chromium.

The Chromium tests drive each playground as a reader would (pointer drags, the keyboard, the
controls), then read the numbers the page computed back from its ``data-`` attributes and
compare them with the package on the same inputs: ``attnbook.attention.attention`` for the
dot products, ``masked_softmax`` and a plain-torch ``-1e9`` fill for the masks, ``view`` +
``transpose``, the buggy ``reshape`` and ``MultiHeadAttention.split_heads`` for the heads,
``attnbook.positions.rope`` for the rotary positions.
"""

from __future__ import annotations

import fnmatch
import io
import json
import re
import tomllib
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

from attnbook.attention import attention, masked_softmax
from attnbook.layers import MultiHeadAttention
from attnbook.masks import causal_mask, padding_mask
from attnbook.playgrounds import (
    MASK_PRESETS,
    DotProductPlayground,
    MaskPlayground,
    MultiheadSplitPlayground,
    RopePlayground,
    dot_product_playground,
    mask_playground,
    multihead_split_playground,
    rope_playground,
)
from attnbook.positions import rope, rope_frequencies

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "_build" / "screenshots" / "playgrounds"
TIMEOUT = 20_000
TOL = 1e-6
BUDGET = 40_000  # bytes per fragment, as shipped in the page
MALICIOUS = "<img src=x onerror=alert(1)>"
CLOSER = "</script><script>alert(2)</script>"
AXE_OPTIONS = {"resultTypes": ["violations"],
               "rules": {"label-content-name-mismatch": {"enabled": True}}}
DARK_THEME = ("<style>body{background:#121212;color:#e0e0e0}"
              "button,select,input{background:#2a2a2a;color:#eeeeee}label{color:#9ab}"
              "table,th,td{border:1px solid #555;color:#ddd;background:#1e1e1e}</style>")


def root_id(fragment: str) -> str:
    match = re.match(r'<div class="attnbook-pg attnbook-pg-\w+" id="(attnpg-[0-9a-z-]+)"',
                     fragment)
    assert match, fragment[:200]
    return match.group(1)


def script_data(fragment: str) -> dict:
    match = re.search(r"var D = (\{.*?\});\n", fragment, re.S)
    assert match
    return json.loads(match.group(1))


def document(*fragments: str, html_attrs: str = "", head: str = "") -> str:
    return (f'<!DOCTYPE html><html lang="en" {html_attrs}><head><meta charset="utf-8">'
            f"<title>playground test</title>{head}</head><body>{''.join(fragments)}"
            "</body></html>")


ALL = {
    "dot": dot_product_playground,
    "mask": mask_playground,
    "split": multihead_split_playground,
    "rope": rope_playground,
}


# ----------------------------------------------------------------- the fragments themselves


@pytest.mark.parametrize("kind", ALL)
def test_fragment_is_self_contained_and_scoped(kind):
    fragment = ALL[kind](title="http://example.org/x")._repr_html_()
    assert fragment.startswith(f'<div class="attnbook-pg attnbook-pg-{kind}"')
    assert fragment.endswith("</div>")
    assert "//" not in fragment  # no URL of any scheme, no protocol-relative URL, no JS comment
    assert re.search(r"<[^>]*\s(src|href|srcset|action|data|xmlns)\s*=", fragment) is None
    assert "<link" not in fragment.lower() and "@import" not in fragment
    assert "url(" not in fragment and "import(" not in fragment
    assert fragment.count("<script") == 1 and fragment.count("</script>") == 1
    assert fragment.count("<style>") == 1
    assert "innerHTML" not in fragment and "eval(" not in fragment
    assert_css_scoped(fragment, ".attnbook-pg")
    ids = re.findall(r'\sid="([^"]+)"', fragment)
    assert len(ids) == len(set(ids)) and all(i.startswith(root_id(fragment)) for i in ids)
    assert script_data(fragment)["title"] == "http://example.org/x"


@pytest.mark.parametrize("kind", ALL)
def test_every_fragment_gets_a_fresh_id(kind):
    playground = ALL[kind]()
    assert root_id(playground.to_html()) != root_id(playground.to_html())


LARGEST = {
    "dot": lambda: dot_product_playground(
        keys=[[1.5, -2.0], [3.0, 4.0], [-5.0, 1.0], [2.5, 2.5], [0.1, -6.0]],
        values=[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [0.5, 0.5]],
        labels=[f"a fairly long key name {j}" for j in range(5)], title="Largest"),
    "mask": lambda: mask_playground(10, np.random.default_rng(0).normal(size=(10, 10)),
                                    tokens=[f"token-{i:02d}" for i in range(10)], title="L"),
    "split": lambda: multihead_split_playground(8, 16, 4, tokens=[f"t{i}" * 5 for i in range(8)],
                                                title="Largest"),
    "rope": lambda: rope_playground(torch.randn(128, dtype=torch.float64),
                                    torch.randn(128, dtype=torch.float64), base=500000.0,
                                    position_q=4000, position_k=4096, pair=63,
                                    max_position=4096, layout="interleaved", title="Largest"),
}


@pytest.mark.parametrize("kind", ALL)
def test_fragment_size_within_budget(kind, record_property):
    for playground in (ALL[kind](), LARGEST[kind]()):
        size = len(playground.to_html().encode("utf-8"))
        record_property(f"{kind}_kB", round(size / 1000, 1))
        assert size <= BUDGET, f"{kind}: {size / 1000:.1f} kB"


def test_labels_are_escaped_in_the_source():
    fragments = [
        dot_product_playground(labels=["a", MALICIOUS, CLOSER, "x & y"],
                               query_label="<!--")._repr_html_(),
        mask_playground(4, tokens=["a", MALICIOUS, CLOSER, "x & y"])._repr_html_(),
        multihead_split_playground(tokens=["a", MALICIOUS, CLOSER, "x & y"])._repr_html_(),
        rope_playground(title=MALICIOUS + CLOSER + "<!--")._repr_html_(),
    ]
    for fragment in fragments:
        assert "<img" not in fragment and "alert(1)>" not in fragment
        assert fragment.count("</script>") == 1 and "<!--" not in fragment
        assert "\\u003cimg src=x onerror=alert(1)\\u003e" in fragment
    for fragment in fragments[:2]:  # the split's fallback names no token
        assert "&lt;img src=x onerror=alert(1)&gt;" in fragment  # in the static fallback


def test_assets_are_declared_package_data():
    from importlib.resources import files

    assets = sorted(p.name for p in (files("attnbook") / "playground_assets").iterdir()
                    if p.name.endswith((".js", ".css")))
    assert assets == ["common.css", "common.js", "dot.css", "dot.js", "mask.css", "mask.js",
                      "rope.css", "rope.js", "split.css", "split.js"]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["attnbook"]
    for name in assets:
        assert any(fnmatch.fnmatch(f"playground_assets/{name}", p) for p in patterns), name


@pytest.mark.parametrize("kind", ALL)
def test_print_edition_gets_a_png_and_the_web_the_html(kind):
    pixels = check_print_and_web_editions(ALL[kind](),
                                          f'<div class="attnbook-pg attnbook-pg-{kind}"')
    assert pixels.shape[0] > 300 and pixels.shape[1] > 600


def test_static_fallbacks_hold_the_package_numbers():
    dot = dot_product_playground()
    q, k = torch.tensor([[3.0, 1.0]], dtype=torch.float64), torch.tensor(
        [[3.0, 1.0], [1.5, 0.5], [4.5, 1.5], [2.0, 6.0]], dtype=torch.float64)
    out, w = attention(q, k, k)
    fragment = dot.to_html()
    for value in w[0]:
        assert f"<td class=\"pg-num\">{float(value):.4f}</td>" in fragment
    assert f"Output: ({float(out[0, 0]):.2f}, {float(out[0, 1]):.2f})" in fragment

    mask = mask_playground()
    expected = masked_softmax(torch.from_numpy(mask.scores), causal_mask(5))
    cells = re.findall(r'<td class="pg-num">([0-9.]+)</td>', mask.to_html())
    assert cells == [f"{float(v):.2f}" for v in expected.flatten()]
    assert "tokens 0, 1" in multihead_split_playground().to_html()


def rope_expected(q: torch.Tensor, k: torch.Tensor, m: int, n: int, *, base: float = 1e4,
                  layout: str = "half-split") -> dict:
    """What the rotary playground must show at positions (m, n), by the package's rope.

    The pairs are written out here from their definition (half-split: ``(j, j + D/2)``,
    interleaved: ``(2j, 2j + 1)``), not taken from the playground.
    """
    q_rot = rope(q[None], torch.tensor([m]), base, layout=layout)[0]  # (D,)
    k_rot = rope(k[None], torch.tensor([n]), base, layout=layout)[0]  # (D,)
    half = q.shape[0] // 2
    pairs = (torch.stack([torch.arange(half), torch.arange(half) + half], -1)
             if layout == "half-split" else torch.arange(2 * half).view(half, 2))  # (D/2, 2)
    return {"q_rot": q_rot, "k_rot": k_rot, "score": float(q_rot @ k_rot), "pairs": pairs,
            "shares": (q_rot * k_rot)[pairs].sum(-1),  # (D/2,)
            "theta": rope_frequencies(2 * half, base, dtype=torch.float64)}


def test_rope_fallback_and_still_hold_the_package_numbers():
    import matplotlib.text
    from matplotlib.figure import Figure

    playground = rope_playground()
    q, k = torch.from_numpy(playground.query), torch.from_numpy(playground.key)
    assert (playground.position_q, playground.position_k, playground.pair) == (5, 2, 0)
    fragment = playground.to_html()
    fallback = re.search(r'<div class="pg-nojs">(.*?)</div>', fragment, re.S).group(1)
    rows = re.findall(r"<tr>((?:<td[^>]*>[^<]*</td>)+)</tr>", fallback)
    cells = [re.findall(r">([^<]*)</td>", row) for row in rows]
    for (m, n), shown in zip([(5, 2), (6, 3), (15, 12)], cells, strict=True):
        expected = rope_expected(q, k, m, n)
        assert shown[:3] == [str(m), str(n), "3"]
        assert float(shown[3]) == pytest.approx(expected["score"], abs=5e-5)
        assert float(shown[4]) == pytest.approx(float(expected["shares"][0]), abs=5e-5)
    assert len({row[3] for row in cells}) == 1  # the same score at every shift, as printed
    assert "pair 0 (features 0 and 4) turns by \u03b8 = 1 rad per position" in fallback

    # The print edition's still: the package's score and share, and the window of scores is
    # rope's, constant along each diagonal.
    expected = rope_expected(q, k, 5, 2)
    figure = Figure(figsize=(8.0, 3.6))
    playground._draw(figure)
    texts = " ".join(t.get_text() for t in figure.findobj(matplotlib.text.Text))
    assert f"score {expected['score']:.4f}, pair 0's share {float(expected['shares'][0]):.4f}" \
        in texts
    assert "offset m \u2212 n = 3" in texts
    start, scores = playground._score_window()
    assert start == 0 and scores.shape == (21, 21)
    for m, n in ((5, 2), (0, 20), (20, 0)):
        assert scores[m, n] == pytest.approx(rope_expected(q, k, m, n)["score"], abs=1e-12)
    for offset in range(-20, 21):
        diagonal = np.diagonal(scores, offset=-offset)  # entries with m - n == offset
        assert np.ptp(diagonal) < 1e-12
    assert playground.score() == pytest.approx(expected["score"], abs=1e-12)
    torch.testing.assert_close(torch.from_numpy(playground.shares(7, 4)),
                               rope_expected(q, k, 7, 4)["shares"], atol=1e-12, rtol=0)


@pytest.mark.parametrize("layout", ["half-split", "interleaved"])
def test_rope_pairs_follow_the_layout(layout):
    q, k = torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    playground = rope_playground(q, k, base=100.0, layout=layout)
    expected = rope_expected(q, k, 5, 2, base=100.0, layout=layout)
    assert torch.equal(playground.pair_features(), expected["pairs"])  # exact: indices
    assert script_data(playground.to_html())["pairs"] == expected["pairs"].tolist()
    q_rot, k_rot = playground.rotated()
    torch.testing.assert_close(torch.from_numpy(q_rot), expected["q_rot"], atol=1e-12, rtol=0)
    torch.testing.assert_close(torch.from_numpy(k_rot), expected["k_rot"], atol=1e-12, rtol=0)
    assert script_data(playground.to_html())["theta"] == pytest.approx(
        expected["theta"].tolist(), rel=1e-15)


def test_presets_are_the_package_masks():
    playground = mask_playground(6)
    pads = padding_mask([6 - playground.pad], 6)[0]  # (1, 6)
    assert playground.pad == 2
    assert torch.equal(playground.preset_mask("causal"), causal_mask(6))  # exact: booleans
    assert torch.equal(playground.preset_mask("upper"), torch.ones(6, 6).triu().bool())  # exact
    assert torch.equal(playground.preset_mask("padding"), pads.expand(6, 6))  # exact: booleans
    assert torch.equal(playground.preset_mask("left-padding"),  # exact: booleans
                       pads.flip(-1) & causal_mask(6))
    assert not playground.preset_mask("left-padding")[:2].any()  # two rows with no key


def test_the_package_module_imports_on_its_own():
    import attnbook.playgrounds as module

    assert module.dot_product_playground is dot_product_playground


# ------------------------------------------------------------------------- bad input

BAD_INPUTS = [
    pytest.param(lambda: dot_product_playground(query="ab"), TypeError,
                 ["query must be a 2-D vector", "got str"], id="query-str"),
    pytest.param(lambda: dot_product_playground(query=[1.0, 2.0, 3.0]), ValueError,
                 ["query must be one 2-D vector", "(3,)"], id="query-3d"),
    pytest.param(lambda: dot_product_playground(query=[float("nan"), 1.0]), ValueError,
                 ["query must be finite"], id="query-nan"),
    pytest.param(lambda: dot_product_playground(keys=torch.ones(6, 2)), ValueError,
                 ["keys must have shape (S, 2) with 1 <= S <= 5", "(6, 2)"], id="keys-6"),
    pytest.param(lambda: dot_product_playground(keys=torch.ones(3, 3)), ValueError,
                 ["keys must have shape (S, 2)", "(3, 3)"], id="keys-3d"),
    pytest.param(lambda: dot_product_playground(keys=torch.ones(2, 2, dtype=torch.bool)),
                 TypeError, ["keys must hold real numbers", "torch.bool"], id="keys-bool"),
    pytest.param(lambda: dot_product_playground(keys=[[1.0, 99.0]]), ValueError,
                 ["keys must lie within [-20, 20]", "99"], id="keys-far"),
    pytest.param(lambda: dot_product_playground(values=torch.ones(3, 2)), ValueError,
                 ["values must have the shape of keys, (4, 2)", "(3, 2)"], id="values"),
    pytest.param(lambda: dot_product_playground(scale="big"), TypeError,
                 ["scale must be a positive real number or None", "got str"], id="scale-str"),
    pytest.param(lambda: dot_product_playground(scale=True), TypeError,
                 ["scale must be a positive real number", "got bool"], id="scale-bool"),
    pytest.param(lambda: dot_product_playground(scale=-1.0), ValueError,
                 ["scale must be between 0.001 and 1000", "-1.0"], id="scale-negative"),
    pytest.param(lambda: dot_product_playground(labels="abcd"), TypeError,
                 ["labels must be a sequence of strings, not one str"], id="labels-str"),
    pytest.param(lambda: dot_product_playground(labels=["a", "b"]), ValueError,
                 ["labels has 2 entries, expected 4"], id="labels-count"),
    pytest.param(lambda: dot_product_playground(query_label=3), TypeError,
                 ["query_label must be a string, got int"], id="query-label"),
    pytest.param(lambda: dot_product_playground(title=3), TypeError,
                 ["title must be a string or None, got int"], id="title"),
    pytest.param(lambda: mask_playground(2.5), TypeError,
                 ["length must be an int, got float"], id="mask-length-float"),
    pytest.param(lambda: mask_playground(11), ValueError,
                 ["length must be between 1 and 10, got 11"], id="mask-length-big"),
    pytest.param(lambda: mask_playground(0), ValueError,
                 ["length must be between 1 and 10, got 0"], id="mask-length-0"),
    pytest.param(lambda: mask_playground(scores=torch.ones(3, 4)), ValueError,
                 ["scores must be a square (L, L) matrix", "(3, 4)"], id="scores-rect"),
    pytest.param(lambda: mask_playground(4, scores=torch.ones(3, 3)), ValueError,
                 ["length is 4 but scores has shape (3, 3)"], id="scores-length"),
    pytest.param(lambda: mask_playground(scores=torch.full((3, 3), float("inf"))), ValueError,
                 ["scores must be finite"], id="scores-inf"),
    pytest.param(lambda: mask_playground(scores=torch.full((3, 3), 5e3)), ValueError,
                 ["scores must lie within [-1000, 1000]"], id="scores-huge"),
    pytest.param(lambda: mask_playground(scores="abc"), TypeError,
                 ["scores must be an (L, L) matrix", "got str"], id="scores-str"),
    pytest.param(lambda: mask_playground(scores=torch.ones(11, 11)), ValueError,
                 ["L (the size of scores) must be between 1 and 10, got 11"], id="scores-11"),
    pytest.param(lambda: mask_playground(preset="triangle"), ValueError,
                 ["preset must be one of 'none', 'causal', 'upper'", "'triangle'"],
                 id="preset"),
    pytest.param(lambda: mask_playground(3, tokens=["a"]), ValueError,
                 ["tokens has 1 entries, expected 3"], id="mask-tokens"),
    pytest.param(lambda: multihead_split_playground(num_heads=3), ValueError,
                 ["num_heads must be a positive divisor of d_model=8, got 3"], id="heads-3"),
    pytest.param(lambda: multihead_split_playground(num_heads=0), ValueError,
                 ["num_heads must be a positive divisor of d_model=8, got 0"], id="heads-0"),
    pytest.param(lambda: multihead_split_playground(num_heads=2.0), TypeError,
                 ["num_heads must be an int, got float"], id="heads-float"),
    pytest.param(lambda: multihead_split_playground(d_model=17), ValueError,
                 ["d_model must be between 1 and 16, got 17"], id="d-model"),
    pytest.param(lambda: multihead_split_playground(length=9), ValueError,
                 ["length must be between 1 and 8, got 9"], id="split-length"),
    pytest.param(lambda: multihead_split_playground(length=3, tokens=["a", "b"]), ValueError,
                 ["length must be between 1 and 2, got 3"], id="split-length-tokens"),
    pytest.param(lambda: multihead_split_playground(tokens=[str(i) for i in range(9)]),
                 ValueError, ["tokens must hold 1 to 8 labels", "got 9"], id="split-tokens"),
    pytest.param(lambda: multihead_split_playground(tokens="abcd"), TypeError,
                 ["tokens must be a sequence of strings, not one str"], id="split-tokens-str"),
    pytest.param(lambda: rope_playground(query="abcd"), TypeError,
                 ["query must be a vector of even width D", "got str"], id="rope-query-str"),
    pytest.param(lambda: rope_playground(query=torch.ones(7), key=torch.ones(7)), ValueError,
                 ["query must be one vector of even width D", "(7,)"], id="rope-odd"),
    pytest.param(lambda: rope_playground(query=torch.ones(2, 8)), ValueError,
                 ["query must be one vector of even width D", "(2, 8)"], id="rope-2d"),
    pytest.param(lambda: rope_playground(query=torch.ones(130), key=torch.ones(130)),
                 ValueError, ["2 <= D <= 128", "(130,)"], id="rope-wide"),
    pytest.param(lambda: rope_playground(key=torch.ones(6)), ValueError,
                 ["key must have the shape of query, (8,)", "(6,)"], id="rope-key-shape"),
    pytest.param(lambda: rope_playground(key=torch.ones(8, dtype=torch.bool)), TypeError,
                 ["key must hold real numbers", "torch.bool"], id="rope-key-bool"),
    pytest.param(lambda: rope_playground(key=[float("inf")] + [0.0] * 7), ValueError,
                 ["key must be finite"], id="rope-key-inf"),
    pytest.param(lambda: rope_playground(base="big"), TypeError,
                 ["base must be a real number > 1", "got str"], id="rope-base-str"),
    pytest.param(lambda: rope_playground(base=1.0), ValueError,
                 ["base must be a finite number > 1", "1.0"], id="rope-base-1"),
    pytest.param(lambda: rope_playground(base=float("inf")), ValueError,
                 ["base must be a finite number > 1", "inf"], id="rope-base-inf"),
    pytest.param(lambda: rope_playground(layout="adjacent"), ValueError,
                 ["layout must be 'half-split' or 'interleaved'", "'adjacent'"],
                 id="rope-layout"),
    pytest.param(lambda: rope_playground(position_q=21), ValueError,
                 ["position_q must be between 0 and 20, got 21"], id="rope-m-big"),
    pytest.param(lambda: rope_playground(position_k=-1), ValueError,
                 ["position_k must be between 0 and 20, got -1"], id="rope-n-negative"),
    pytest.param(lambda: rope_playground(position_q=2.0), TypeError,
                 ["position_q must be an int, got float"], id="rope-m-float"),
    pytest.param(lambda: rope_playground(pair=4), ValueError,
                 ["pair must be between 0 and 3, got 4"], id="rope-pair"),
    pytest.param(lambda: rope_playground(pair=True), TypeError,
                 ["pair must be an int, got bool"], id="rope-pair-bool"),
    pytest.param(lambda: rope_playground(max_position=0), ValueError,
                 ["max_position must be between 1 and 4096, got 0"], id="rope-max-0"),
    pytest.param(lambda: rope_playground(max_position=3), ValueError,
                 ["position_q must be between 0 and 3, got 5"], id="rope-max-below-m"),
    pytest.param(lambda: rope_playground(title=["t"]), TypeError,
                 ["title must be a string or None, got list"], id="rope-title"),
]


@pytest.mark.parametrize(("make", "error", "fragments"), BAD_INPUTS)
def test_bad_input_is_refused_before_any_html(monkeypatch, make, error, fragments):
    for cls in (DotProductPlayground, MaskPlayground, MultiheadSplitPlayground, RopePlayground):
        monkeypatch.setattr(cls, "to_html", lambda self: pytest.fail("HTML for bad input"))
    assert_refused(make, error, fragments)


# ------------------------------------------------------------------------- Chromium


@pytest.fixture
def page(browser):
    """A fresh tab that records page errors, dialogs and requests, and checks them at the end."""
    with watched_tab(browser, {"width": 1000, "height": 900}, TIMEOUT, local_only=True) as tab:
        yield tab


def show(tab, *fragments: str, **kwargs: str) -> list:
    tab.set_content(document(*fragments, **kwargs))
    roots = [tab.locator(f"#{root_id(f)}") for f in fragments]
    for root in roots:
        expect(root).to_have_attribute("data-pg-ready", "1", timeout=TIMEOUT)
    assert tab.seen["requests"] == []
    return roots


# --------------------------------------------------- 1. dot products


def dot_state(root) -> dict:
    return root.evaluate("""r => ({
      points: Array.from(r.querySelectorAll('.pg-handle'),
                         h => [Number(h.dataset.p), Number(h.dataset.x), Number(h.dataset.y)]),
      w: Array.from(r.querySelectorAll('.pg-w'), e => Number(e.dataset.w)),
      shown: Array.from(r.querySelectorAll('.pg-w'), e => e.textContent),
      scores: Array.from(r.querySelectorAll('td[data-v]'), e => Number(e.dataset.v)),
      out: [Number(r.querySelector('.pg-outxy').dataset.x),
            Number(r.querySelector('.pg-outxy').dataset.y)],
      scale: Number(r.dataset.scale),
      top: r.querySelector('tr.pg-top th').textContent})""")


def check_dot(state: dict, values: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """The page's numbers equal the package's attention on the page's own vectors."""
    points = sorted(state["points"])
    q = torch.tensor([points[0][1:]], dtype=torch.float64)  # (1, 2)
    k = torch.tensor([p[1:] for p in points[1:]], dtype=torch.float64)  # (S, 2)
    v = k if values is None else values
    out, w = attention(q, k, v, scale=state["scale"])
    torch.testing.assert_close(torch.tensor(state["w"], dtype=torch.float64), w[0],
                               atol=TOL, rtol=0)
    torch.testing.assert_close(torch.tensor(state["out"], dtype=torch.float64), out[0],
                               atol=TOL, rtol=0)
    dots = (k @ q[0]).tolist()
    scaled = [state["scale"] * d for d in dots]
    page_scores = state["scores"]  # per key: q.k then c q.k
    assert page_scores[0::2] == pytest.approx(dots, abs=TOL)
    assert page_scores[1::2] == pytest.approx(scaled, abs=TOL)
    assert state["shown"] == [f"{float(x):.4f}" for x in w[0]]
    return q, k, w[0]


def handle(root, index: int):
    return root.locator(f'.pg-handle[data-p="{index}"]')


#: Where a data point is drawn on the screen, read off the grid: its outermost vertical
#: lines are x = lo and x = hi, its outermost horizontal ones y = hi and y = lo.
SCREEN_POINT = """(svg, [x, y, lo, hi]) => {
    const lines = Array.from(svg.querySelectorAll("line.pg-gridline, line.pg-axis"));
    const at = (l, a) => l[a].baseVal.value;
    const xs = lines.filter(l => at(l, "x1") === at(l, "x2")).map(l => at(l, "x1"));
    const ys = lines.filter(l => at(l, "y1") === at(l, "y2")).map(l => at(l, "y1"));
    const [left, right] = [Math.min(...xs), Math.max(...xs)];
    const [top, bottom] = [Math.min(...ys), Math.max(...ys)];
    const p = new DOMPoint(left + (x - lo) / (hi - lo) * (right - left),
                           top + (hi - y) / (hi - lo) * (bottom - top));
    const s = p.matrixTransform(svg.getScreenCTM());
    return [s.x, s.y];
}"""


def screen_point(root, data: dict, x: float, y: float) -> tuple[float, float]:
    """Where the data point (x, y) is on the screen."""
    sx, sy = root.locator(".pg-svg").evaluate(SCREEN_POINT, [x, y, data["lo"], data["hi"]])
    return sx, sy


@pytest.mark.browser
def test_dot_opening_state_and_the_keyboard(page):
    fragment = dot_product_playground()._repr_html_()
    (root,) = show(page, fragment)
    state = dot_state(root)
    assert sorted(state["points"]) == [[0, 3, 1], [1, 3, 1], [2, 1.5, 0.5], [3, 4.5, 1.5],
                                       [4, 2, 6]]
    assert state["scale"] == 1 / 2 ** 0.5
    check_dot(state)
    assert state["top"] == "long aligned"

    # "Make the long, misaligned key win": two steps of 1 to the right, with the keyboard.
    misaligned = handle(root, 4)
    misaligned.focus()
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("ArrowUp")  # a step of 0.1
    expect(misaligned).to_have_attribute("data-x", "4", timeout=TIMEOUT)
    expect(misaligned).to_have_attribute("data-y", "6.1", timeout=TIMEOUT)
    expect(misaligned).to_have_attribute("aria-label", "key long misaligned at (4.0, 6.1)")
    state = dot_state(root)
    _, _, w = check_dot(state)
    assert state["top"] == "long misaligned" and w[3] - w.max() == 0  # exact: it is the max
    assert w[3] - w[2] > 0.5  # and by a wide margin

    # Arrow keys on the query move the query; Left then Down return it.
    query = handle(root, 0)
    query.focus()
    for key in ("ArrowLeft", "ArrowLeft", "ArrowDown"):
        page.keyboard.press(key)
    expect(query).to_have_attribute("data-x", "2.8", timeout=TIMEOUT)
    expect(query).to_have_attribute("data-y", "0.9", timeout=TIMEOUT)
    check_dot(dot_state(root))


#: Axis numbers drawn where a point's label covers part of them, as "tick under label".
TICKS_UNDER_LABELS = """r => {
    const shown = e => getComputedStyle(e).visibility !== "hidden";
    // A label covers its box and its white halo, 2 units of the drawing around it.
    const halo = 2 * r.querySelector(".pg-svg").getScreenCTM().a;
    const labels = Array.from(r.querySelectorAll(".pg-lab")).filter(shown)
        .map(e => [e.textContent, e.getBoundingClientRect()]);
    const hits = [];
    for (const tick of Array.from(r.querySelectorAll(".pg-tick")).filter(shown)) {
        const b = tick.getBoundingClientRect();
        for (const [name, o] of labels)
            if (b.left < o.right + halo && o.left - halo < b.right &&
                b.top < o.bottom + halo && o.top - halo < b.bottom)
                hits.push(`${tick.textContent} under ${name}`);
    }
    return hits;
}"""


@pytest.mark.browser
def test_dot_labels_never_half_cover_an_axis_number(page):
    fragment = dot_product_playground()._repr_html_()
    (root,) = show(page, fragment)
    # The axis numbers sit outside the grid, so the long misaligned key's label at (2, 6),
    # which crosses the y axis, leaves every one of them in sight.
    assert root.evaluate(TICKS_UNDER_LABELS) == []
    hidden = root.locator(".pg-tick").evaluate_all(
        "ts => ts.filter(t => getComputedStyle(t).visibility === 'hidden')"
        ".map(t => t.textContent)")
    assert hidden == []
    misaligned = handle(root, 4)
    misaligned.focus()
    for key in ("Shift+ArrowLeft", "Shift+ArrowLeft", "Shift+ArrowDown", "Shift+ArrowDown"):
        page.keyboard.press(key)  # along the y axis, past its numbers
        expect(misaligned).to_have_attribute("aria-label", re.compile("key long misaligned"))
        assert root.evaluate(TICKS_UNDER_LABELS) == [], key
    assert root.locator(".pg-tick").evaluate_all(
        "ts => ts.filter(t => getComputedStyle(t).visibility !== 'hidden').length") >= 8
    # A key in the grid's bottom-left corner, its label beside the x axis's numbers.
    short = handle(root, 2)
    short.focus()
    for key in ("Shift+ArrowLeft",) * 4 + ("Shift+ArrowDown",) * 3:
        page.keyboard.press(key)
    expect(short).to_have_attribute("aria-label", re.compile(r"at \(-2\.0, -2\.0\)"))
    assert root.evaluate(TICKS_UNDER_LABELS) == []


#: Pairs of point labels whose boxes meet, as the reader sees them.
LABELS_THAT_MEET = """r => {
    const boxes = Array.from(r.querySelectorAll(".pg-handle .pg-lab"))
        .map(e => [e.textContent, e.getBoundingClientRect()]);
    const met = [];
    boxes.forEach(([a, p], i) => boxes.slice(i + 1).forEach(([b, o]) => {
        if (p.left < o.right && o.left < p.right && p.top < o.bottom && o.top < p.bottom)
            met.push(`${a} / ${b}`);
    }));
    return met;
}"""


@pytest.mark.browser
def test_dot_labels_stay_apart_when_points_crowd(page):
    """A key walked through the crowd around the query (the exact match on it, the long
    aligned key beside it), a tenth at a time: no two labels ever meet."""
    fragment = dot_product_playground()._repr_html_()
    (root,) = show(page, fragment)
    assert root.evaluate(LABELS_THAT_MEET) == []
    walker = handle(root, 2)  # "short aligned", from (1.5, 0.5)
    walker.focus()
    met, steps = {}, 0
    for row, (across, up) in enumerate([("ArrowRight", None), ("ArrowLeft", "ArrowUp"),
                                        ("ArrowRight", "ArrowUp"), ("ArrowLeft", "ArrowUp")]):
        for key in ([up] * 5 if up else []) + [across] * 40:
            page.keyboard.press(key)
            steps += 1
            seen = root.evaluate(LABELS_THAT_MEET)
            if seen:
                met[walker.get_attribute("aria-label")] = seen
        # each row of the walk ends 4 across from where it started, 0.5 higher
        assert float(walker.get_attribute("data-y")) == 0.5 + 0.5 * row
    assert steps == 4 * 40 + 3 * 5
    assert met == {}, f"labels meet at {len(met)} of {steps} steps, e.g. {list(met.items())[:3]}"


#: Every point's label that covers another point's dot (not one on its own point, as the
#: exact match's ring around the query), lies across an arrow's shaft (the output's
#: included), or whose white halo touches an axis, read off the screen: each shaft sampled
#: at 60 points along it.
LABEL_CLASHES = """r => {
    const G = 2;  // px: an arrow that only grazes a label's box (its glyphs' line spacing)
    const svg = r.querySelector(".pg-svg"), m = svg.getScreenCTM();
    const H = 2 * m.a;  // px: the halo around a label's letters (HALO in dot.js)
    const at = (line, n) => { const p = svg.createSVGPoint();
        p.x = +line.getAttribute("x" + n); p.y = +line.getAttribute("y" + n);
        return p.matrixTransform(m); };
    const shafts = Array.from(r.querySelectorAll(".pg-vec line.pg-shaft"),
                              line => [at(line, 1), at(line, 2)]);
    const inside = (b, x, y) => b.left + G < x && x < b.right - G
                                && b.top + G < y && y < b.bottom - G;
    const handles = Array.from(r.querySelectorAll(".pg-handle")), clashes = [];
    handles.forEach(h => {
        const label = h.querySelector(".pg-lab"), box = label.getBoundingClientRect();
        handles.forEach(o => {
            const dot = o.querySelector(".pg-dot").getBoundingClientRect();
            const same = o.getAttribute("transform") === h.getAttribute("transform");
            if (!same && box.left < dot.right && dot.left < box.right
                    && box.top < dot.bottom && dot.top < box.bottom)
                clashes.push(`${label.textContent} on the dot of `
                             + o.querySelector(".pg-lab").textContent);
        });
        shafts.forEach(([a, b], i) => {
            for (let t = 0; t <= 1; t += 1 / 60)
                if (inside(box, a.x + t * (b.x - a.x), a.y + t * (b.y - a.y))) {
                    clashes.push(`${label.textContent} across arrow ${i}`);
                    break;
                }
        });
        r.querySelectorAll("line.pg-axis").forEach(axis => {
            const [a, b] = [at(axis, 1), at(axis, 2)];
            const across = a.y === b.y
                ? box.top - H < a.y && a.y < box.bottom + H
                  && Math.min(a.x, b.x) < box.right && box.left < Math.max(a.x, b.x)
                : box.left - H < a.x && a.x < box.right + H
                  && Math.min(a.y, b.y) < box.bottom && box.top < Math.max(a.y, b.y);
            if (across) clashes.push(`${label.textContent} on an axis`);
        });
    });
    return clashes;
}"""


@pytest.mark.browser
def test_dot_labels_keep_off_the_dots_and_the_arrows(page):
    """No point's label covers another point's dot, lies across an arrow or touches an axis:
    as the playground opens (where an audit saw "short aligned" on the x axis), and after
    the query goes to (1.9, 1.9) and the exact match to (8, 8), where an audit saw the
    query's dot on "long aligned" and the output arrow through "exact match"."""
    fragment = dot_product_playground()._repr_html_()
    labels = script_data(fragment)["labels"]
    (root,) = show(page, fragment)
    assert root.evaluate(LABEL_CLASHES) == []
    moves = [(0, ["ArrowLeft"] * 11 + ["ArrowUp"] * 9, "1.9"),  # the query, by tenths
             (1 + labels.index("exact match"), ["Shift+ArrowRight"] * 5
              + ["Shift+ArrowUp"] * 7, "8")]  # from (3, 1), by units
    for index, keys, at in moves:
        point = handle(root, index)
        point.focus()
        for key in keys:
            page.keyboard.press(key)
        expect(point).to_have_attribute("data-x", at, timeout=TIMEOUT)
        expect(point).to_have_attribute("data-y", at, timeout=TIMEOUT)
        assert root.evaluate(LABEL_CLASHES) == [], f"point {index} at ({at}, {at})"


#: Each label's box on the screen that reaches past the drawing's, by how many px.
LABELS_CUT = """r => {
    const frame = r.querySelector(".pg-svg").getBoundingClientRect();
    return Array.from(r.querySelectorAll(".pg-lab"), t => [t.textContent,
            t.getBoundingClientRect()])
        .map(([text, b]) => [text, Math.max(frame.left - b.left, b.right - frame.right,
                                            frame.top - b.top, b.bottom - frame.bottom)])
        .filter(([, past]) => past > 0.5);
}"""


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_dot_labels_stay_inside_the_drawing(browser, width):
    """A point's label stays inside the drawing wherever the point goes: at the grid's
    edges and corners the label had run past the frame and been cut ("act match" for
    "exact match" at (-1, 0) on a desktop, "long align" at (6.5, 1.5) on a phone)."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        tab = context.new_page()
        tab.seen = {"requests": []}
        fragment = dot_product_playground()._repr_html_()
        data = script_data(fragment)
        (root,) = show(tab, fragment)
        assert root.evaluate(LABELS_CUT) == []
        for name in ("exact match", "long aligned", "short aligned"):
            point = handle(root, 1 + data["labels"].index(name))
            point.focus()
            # To each corner and the middle of each edge of the grid, by units.
            for keys in (["Shift+ArrowLeft"] * 12, ["Shift+ArrowDown"] * 12,
                         ["Shift+ArrowRight"] * 6, ["Shift+ArrowRight"] * 6,
                         ["Shift+ArrowUp"] * 6, ["Shift+ArrowUp"] * 6,
                         ["Shift+ArrowLeft"] * 6, ["Shift+ArrowLeft"] * 6,
                         ["Shift+ArrowDown"] * 6):
                for key in keys:
                    tab.keyboard.press(key)
                at = (point.get_attribute("data-x"), point.get_attribute("data-y"))
                assert root.evaluate(LABELS_CUT) == [], f"{name} at {at}"
    finally:
        context.close()


def colours_at(page, points: list[tuple[float, float]]) -> list[np.ndarray]:
    """The colour drawn at each screen point, as RGB in [0, 1]."""
    import matplotlib.image

    shot = matplotlib.image.imread(io.BytesIO(page.screenshot()))[..., :3]
    scale = shot.shape[1] / page.viewport_size["width"]
    return [shot[round(y * scale), round(x * scale)] for x, y in points]


def hex_rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])


@pytest.mark.browser
def test_dot_a_key_on_the_query_stays_in_sight(page):
    """The exact match starts where the query is, and the query is drawn over it: its colour
    shows as a ring around the query's dot, and once moved off it is a plain dot again."""
    fragment = dot_product_playground()._repr_html_()
    data = script_data(fragment)
    (root,) = show(page, fragment)
    exact = data["labels"].index("exact match")
    assert data["keys"][exact] == data["q"]
    x, y = screen_point(root, data, *data["q"])
    scale = root.locator(".pg-svg").evaluate("s => s.getScreenCTM().a")
    ring = [(x + dx * 9 * scale, y + dy * 9 * scale) for dx, dy in
            ((1, 0), (-1, 0), (0, 1), (0, -1))]
    orange, dark = hex_rgb(data["colours"][exact]), hex_rgb(data["qColour"])
    centre, *around = colours_at(page, [(x, y)] + ring)
    assert np.abs(centre - dark).max() < 0.1, centre  # the query's dot on top
    for colour in around:  # and the key's colour all round it (not the arrows' alone)
        assert np.abs(colour - orange).max() < 0.25, (around, orange)  # (antialiasing)
    key = handle(root, 1 + exact)
    key.focus()
    page.keyboard.press("Shift+ArrowUp")
    expect(key).to_have_attribute("data-y", str(data["q"][1] + 1).removesuffix(".0"),
                                  timeout=TIMEOUT)
    assert key.locator(".pg-dot").get_attribute("r") == handle(root, 0).locator(
        ".pg-dot").get_attribute("r")  # apart, a key's dot is the query's size


@pytest.mark.browser
def test_dot_pointer_drag_and_the_scale_slider(page):
    fragment = dot_product_playground()._repr_html_()
    data = script_data(fragment)
    (root,) = show(page, fragment)

    # Drag the query (drawn on top of the exact match) to (1, 3), with the mouse.
    start = screen_point(root, data, 3.0, 1.0)
    page.mouse.move(*start)
    page.mouse.down()
    for t in (0.25, 0.5, 0.75, 1.0):
        page.mouse.move(start[0] + t * (screen_point(root, data, 1.0, 3.0)[0] - start[0]),
                        start[1] + t * (screen_point(root, data, 1.0, 3.0)[1] - start[1]))
    page.mouse.up()
    query = handle(root, 0)
    expect(query).to_have_attribute("data-x", "1", timeout=TIMEOUT)
    expect(query).to_have_attribute("data-y", "3", timeout=TIMEOUT)
    state = dot_state(root)
    assert sorted(state["points"])[1][1:] == [3, 1]  # the exact match stayed
    check_dot(state)
    assert state["top"] == "long misaligned"

    # "Watch the weights turn one-hot as the scale grows": the slider's far end.
    slider = root.get_by_label("Scale c")
    slider.focus()
    page.keyboard.press("End")
    expect(slider).to_have_value("1.5", timeout=TIMEOUT)
    assert dot_state(root)["scale"] == pytest.approx(10 ** 1.5, rel=1e-12)
    _, _, w = check_dot(dot_state(root))
    assert w.max() > 0.999
    page.keyboard.press("Home")
    expect(slider).to_have_value("-2", timeout=TIMEOUT)
    assert dot_state(root)["scale"] == pytest.approx(0.01, rel=1e-12)
    _, _, w = check_dot(dot_state(root))
    assert w.max() - w.min() < 0.05  # nearly uniform
    page.keyboard.press("ArrowRight")
    _, _, w = check_dot(dot_state(root))
    assert dot_state(root)["scale"] == pytest.approx(10 ** -1.99, rel=1e-9)
    assert slider.get_attribute("aria-valuetext").startswith("c = 0.0102")

    # The buttons: 1 / sqrt(d_k) exactly, then 1, then Reset.
    # The button names d_k as the book writes it, not in TeX's underscore.
    root.get_by_role("button", name="c = 1/√2 (1/√dₖ)", exact=True).click()
    expect(root).to_have_attribute("data-scale", "0.7071067811865475", timeout=TIMEOUT)
    root.get_by_role("button", name="c = 1", exact=True).click()
    expect(root).to_have_attribute("data-scale", "1", timeout=TIMEOUT)
    check_dot(dot_state(root))
    root.get_by_role("button", name="Reset").click()
    expect(query).to_have_attribute("data-x", "3", timeout=TIMEOUT)
    check_dot(dot_state(root))


@pytest.mark.browser
def test_dot_fixed_values_and_other_keys(page):
    keys = [[1.0, -2.0], [-3.0, 0.5], [2.0, 2.0]]
    values = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    fragment = dot_product_playground([0.5, 1.5], keys, values.tolist(), scale=2.0,
                                      labels=["a", "b", "c"])._repr_html_()
    (root,) = show(page, fragment)
    check_dot(dot_state(root), values)
    handle(root, 2).focus()
    for _ in range(5):
        page.keyboard.press("ArrowRight")
    expect(handle(root, 2)).to_have_attribute("data-x", "-2.5", timeout=TIMEOUT)
    check_dot(dot_state(root), values)


# --------------------------------------------------- 2. masks


def mask_state(root) -> dict:
    return root.evaluate("""r => ({
      w: Array.from(r.querySelectorAll('.pg-cell'), c => Number(c.dataset.w)),
      raw: Array.from(r.querySelectorAll('.pg-cell'), c => c.dataset.w),
      allowed: Array.from(r.querySelectorAll('.pg-cell'), c => c.dataset.allowed === '1'),
      pressed: Array.from(r.querySelectorAll('.pg-cell'), c => c.getAttribute('aria-pressed')),
      sums: Array.from(r.querySelectorAll('.pg-sum'), c => c.textContent),
      preset: r.dataset.preset})""")


def page_mask(state: dict, size: int) -> torch.Tensor:
    mask = torch.tensor(state["allowed"]).reshape(size, size)
    assert state["pressed"] == ["true" if a else "false" for a in state["allowed"]]
    return mask


def check_mask(state: dict, scores: torch.Tensor, *, fill: bool = False) -> torch.Tensor:
    size = scores.shape[0]
    mask = page_mask(state, size)
    weights = torch.tensor(state["w"], dtype=torch.float64).reshape(size, size)
    assert not any(r in ("NaN", "") for r in state["raw"])
    if fill:  # what a -1e9 fill gives, in plain torch (float32, as a model would run it)
        expected = torch.softmax(scores.float().masked_fill(~mask, -1e9), dim=-1).double()
    else:
        expected = masked_softmax(scores, mask)
    torch.testing.assert_close(weights, expected, atol=TOL, rtol=0)
    return weights


def cell_button(root, i: int, j: int):
    return root.locator(f'.pg-cell[data-i="{i}"][data-j="{j}"]')


@pytest.mark.browser
def test_mask_cells_toggle_and_rows_renormalise(page):
    playground = mask_playground()
    scores = torch.from_numpy(playground.scores)
    (root,) = show(page, playground.to_html())
    state = mask_state(root)
    assert state["preset"] == "causal"
    assert torch.equal(page_mask(state, 5), causal_mask(5))  # exact: booleans
    check_mask(state, scores)

    # Click: forbid key 1 for query 3; the row renormalises over keys 0, 2, 3.
    before = check_mask(mask_state(root), scores)[3]
    cell_button(root, 3, 1).click()
    expect(cell_button(root, 3, 1)).to_have_attribute("aria-pressed", "false", timeout=TIMEOUT)
    state = mask_state(root)
    assert state["preset"] == "custom"
    after = check_mask(state, scores)[3]
    assert after[1] == 0  # exact: a forbidden key gets exactly 0
    kept = torch.tensor([0, 2, 3])
    torch.testing.assert_close(after[kept], before[kept] / before[kept].sum(), atol=TOL, rtol=0)

    # Keyboard: Space on the only key of row 0 leaves that row without keys: zeros, not NaN.
    first = cell_button(root, 0, 0)
    first.focus()
    page.keyboard.press("Space")
    expect(first).to_have_attribute("aria-pressed", "false", timeout=TIMEOUT)
    state = mask_state(root)
    weights = check_mask(state, scores)
    assert state["raw"][:5] == ["0"] * 5 and weights[0].sum() == 0  # exact: zeros
    assert state["sums"][0] == "no key: zeros"
    expect(root.locator(".pg-say")).to_contain_text("1 row has no allowed key")

    # The -1e9 fill: that row becomes uniform over the five keys it was told to ignore.
    root.get_by_label("Fill forbidden scores with −1e9 instead").check()
    expect(first).to_have_class(re.compile("pg-leak"), timeout=TIMEOUT)
    weights = check_mask(mask_state(root), scores, fill=True)
    torch.testing.assert_close(weights[0], torch.full((5,), 0.2, dtype=torch.float64),
                               atol=TOL, rtol=0)
    torch.testing.assert_close(weights[1:], masked_softmax(scores, page_mask(
        mask_state(root), 5))[1:], atol=TOL, rtol=0)  # rows with keys: no difference
    assert first.text_content() == "0.20"
    expect(root.locator(".pg-say")).to_contain_text(
        "1 row with no allowed key spreads its weight evenly over keys it was told to ignore")
    root.get_by_label("Fill forbidden scores with −1e9 instead").uncheck()
    check_mask(mask_state(root), scores)

    # Arrow keys move the one tab stop of the grid; Enter toggles too.
    first.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    target = cell_button(root, 1, 2)
    expect(target).to_be_focused(timeout=TIMEOUT)
    assert target.get_attribute("tabindex") == "0" and first.get_attribute("tabindex") == "-1"
    page.keyboard.press("Enter")
    expect(target).to_have_attribute("aria-pressed", "true", timeout=TIMEOUT)
    weights = check_mask(mask_state(root), scores)
    assert weights[1, 2] > 0  # a future key, now allowed, takes weight


@pytest.mark.browser
def test_mask_presets_match_the_package(page):
    scores = torch.tensor(np.random.default_rng(1).normal(size=(6, 6)) * 2)
    playground = mask_playground(scores=scores, preset="none")
    (root,) = show(page, playground.to_html())
    pads = padding_mask([4], 6)[0]  # (1, 6): two pads at the end
    expected = {
        "none": torch.ones(6, 6, dtype=torch.bool),
        "causal": causal_mask(6),
        "upper": torch.triu(torch.ones(6, 6)).bool(),
        "padding": pads.expand(6, 6),
        "left-padding": pads.flip(-1) & causal_mask(6),
    }
    assert list(expected) == list(MASK_PRESETS)
    for name, words in MASK_PRESETS.items():
        button = root.get_by_role("button", name=words, exact=True)
        button.click()
        expect(button).to_have_attribute("aria-pressed", "true", timeout=TIMEOUT)
        state = mask_state(root)
        assert state["preset"] == name
        assert torch.equal(page_mask(state, 6), expected[name]), name  # exact: booleans
        check_mask(state, scores)
    # Causal with padding at the start: the first two rows have no key.
    assert [s.startswith("no key") for s in mask_state(root)["sums"]] == [True] * 2 + [False] * 4
    root.get_by_label("Fill forbidden scores with −1e9 instead").check()
    weights = check_mask(mask_state(root), scores, fill=True)
    torch.testing.assert_close(weights[:2], torch.full((2, 6), 1 / 6, dtype=torch.float64),
                               atol=TOL, rtol=0)


# --------------------------------------------------- 3. head splits


def split_state(root) -> dict:
    return root.evaluate("""r => {
      const read = sel => Array.from(r.querySelectorAll(sel + ' table.pg-head'),
        t => Array.from(t.querySelectorAll('tbody tr'),
          tr => Array.from(tr.querySelectorAll('td'),
            td => Number(td.dataset.t) * 1000 + Number(td.dataset.f))));
      const x = Array.from(r.querySelectorAll('table.pg-x tbody tr'),
        tr => Array.from(tr.querySelectorAll('td'),
          td => Number(td.dataset.t) * 1000 + Number(td.dataset.f)));
      return {x: x, correct: read('.pg-correct'), buggy: read('.pg-buggy'),
              L: Number(r.dataset.l), h: Number(r.dataset.h),
              what: r.querySelector('.pg-buggy .pg-what').textContent,
              cut: r.querySelector('.pg-buggy .pg-cut').textContent};
    }""")


def check_split(state: dict, length: int, d_model: int, heads: int) -> None:
    """The page's two splits are torch's, on x[t, f] = 1000 t + f."""
    assert (state["L"], state["h"]) == (length, heads)
    x = (1000 * torch.arange(length)[:, None] + torch.arange(d_model)[None, :])  # (L, d_model)
    d_head = d_model // heads
    correct = x.view(length, heads, d_head).transpose(0, 1)  # (h, L, d_head)
    buggy = x.reshape(heads, length, d_head)  # (h, L, d_head): the bug
    package = MultiHeadAttention(d_model, heads).split_heads(x.double())
    assert torch.equal(package, correct.double())  # exact: integers moved, not computed
    assert state["x"] == x.tolist()
    assert state["correct"] == correct.tolist()
    assert state["buggy"] == buggy.tolist()


@pytest.mark.browser
def test_split_heads_follow_torch_as_h_and_l_change(page):
    fragment = multihead_split_playground()._repr_html_()
    (root,) = show(page, fragment)
    check_split(split_state(root), 4, 8, 2)
    assert split_state(root)["what"].startswith("head 0 holds tokens 0 and 1; head 1 holds "
                                                "tokens 2 and 3.")
    heads = root.get_by_label("Heads h")
    tokens = root.get_by_label("Tokens L")
    for h in (1, 2, 4, 8):
        heads.select_option(str(h))
        for length in (1, 3, 5, 8):
            tokens.fill(str(length))
            expect(root).to_have_attribute("data-l", str(length), timeout=TIMEOUT)
            check_split(split_state(root), length, 8, h)
            state = split_state(root)
            if h == 1 or length == 1:  # the reshape happens to read x in the right order
                assert torch.equal(torch.tensor(state["buggy"]), torch.tensor(state["correct"]))
                assert "splits agree" in state["what"] and state["cut"] == "", (h, length)
            else:
                assert "a piece of one token" in state["what"], (h, length)
    # h = 2 does not divide L = 3: a token is cut between two buggy heads.
    heads.select_option("2")
    tokens.fill("3")
    expect(root).to_have_attribute("data-l", "3", timeout=TIMEOUT)
    assert split_state(root)["cut"] == "token 1 is cut between heads 0 and 1."
    # Out-of-range input is ignored while typing and put back on change, and said both times.
    note = root.locator(".pg-note")
    expect(note).to_be_hidden()
    tokens.fill("12")
    expect(note).to_have_text("Tokens L takes a whole number from 1 to 8.", timeout=TIMEOUT)
    tokens.dispatch_event("change")
    expect(tokens).to_have_value("3", timeout=TIMEOUT)
    expect(note).to_have_text("Tokens L must be a whole number from 1 to 8: the picture keeps "
                              "L = 3.", timeout=TIMEOUT)
    check_split(split_state(root), 3, 8, 2)
    tokens.fill("3")
    expect(note).to_be_hidden(timeout=TIMEOUT)

    # The keyboard alone: arrow keys on the select and the number field.
    heads.focus()
    page.keyboard.press("ArrowDown")
    expect(root).to_have_attribute("data-h", "4", timeout=TIMEOUT)
    tokens.focus()
    page.keyboard.press("ArrowUp")
    expect(root).to_have_attribute("data-l", "4", timeout=TIMEOUT)
    check_split(split_state(root), 4, 8, 4)


@pytest.mark.browser
def test_split_headings_fit_and_read_as_english_at_every_width(page):
    fragment = multihead_split_playground()._repr_html_()
    (root,) = show(page, fragment)
    heads, tokens = root.get_by_label("Heads h"), root.get_by_label("Tokens L")
    for h in (1, 2, 4, 8):
        heads.select_option(str(h))
        expect(root).to_have_attribute("data-h", str(h), timeout=TIMEOUT)
        # Each group heading over x's columns fits the columns it spans (at h = 8 they
        # ran together as "featuresfeaturesfeatures...").
        overflowing = root.evaluate("""r => Array.from(r.querySelectorAll('.pg-hgroup'))
            .filter(g => g.scrollWidth > g.clientWidth + 1).map(g => g.textContent)""")
        assert not overflowing, f"h = {h}: headings wider than their columns: {overflowing}"
    tokens.fill("1")
    expect(root).to_have_attribute("data-l", "1", timeout=TIMEOUT)
    what = root.locator(".pg-correct .pg-what").text_content()
    assert what == ("Every head holds the one token, 1 feature of it: head 0 feature 0, "
                    "head 1 feature 1, and so on.")
    heads.select_option("2")
    tokens.fill("3")
    expect(root).to_have_attribute("data-l", "3", timeout=TIMEOUT)
    assert root.locator(".pg-correct .pg-what").text_content() == (
        "Every head holds all 3 tokens, 4 features of each: head 0 features 0\u2013\u20603, "
        "head 1 features 4\u2013\u20607.")  # a word joiner after each dash: no break there


@pytest.mark.browser
def test_split_with_other_widths(page):
    fragment = multihead_split_playground(5, 12, 3, tokens=list("abcde"))._repr_html_()
    (root,) = show(page, fragment)
    check_split(split_state(root), 5, 12, 3)
    assert root.get_by_label("Heads h").locator("option").all_text_contents() == [
        f"{h} (d_head = {12 // h})" for h in (1, 2, 3, 4, 6, 12)]
    assert root.get_by_label("Tokens L").get_attribute("max") == "5"
    root.get_by_label("Heads h").select_option("6")
    check_split(split_state(root), 5, 12, 6)


# --------------------------------------------------- 4. rotary positions


def rope_state(root) -> dict:
    return root.evaluate("""r => {
      const d = r.dataset, text = c => r.querySelector(c).textContent;
      return {m: Number(d.m), n: Number(d.n), i: Number(d.i), offset: Number(d.offset),
              score: Number(d.score), share: Number(d.share), angleQ: Number(d.angleQ),
              angleK: Number(d.angleK), between: Number(d.between),
              qRot: d.qRot.split(' ').map(Number), kRot: d.kRot.split(' ').map(Number),
              prev: d.prevScore === undefined ? null : Number(d.prevScore),
              shares: Array.from(r.querySelectorAll('.pg-pairs tbody td[data-v]'),
                                 e => Number(e.dataset.v)),
              top: r.querySelector('.pg-pairs tr.pg-top th').textContent,
              shown: [text('.pg-score'), text('.pg-share'), text('.pg-offset'),
                      text('.pg-sum')],
              outputs: [text('.pg-m-out'), text('.pg-n-out')],
              say: text('.pg-say'), prevText: text('.pg-prev'),
              prevHidden: r.querySelector('.pg-prev').hidden};
    }""")


def check_rope(state: dict, q: torch.Tensor, k: torch.Tensor, *, base: float = 1e4,
               layout: str = "half-split") -> dict:
    """The page's numbers are rope's on its positions; the angle between the drawn pairs is
    the angle they had before rotation plus (m - n) theta_i."""
    m, n, i = state["m"], state["n"], state["i"]
    expected = rope_expected(q, k, m, n, base=base, layout=layout)
    torch.testing.assert_close(torch.tensor(state["qRot"], dtype=torch.float64),
                               expected["q_rot"], atol=TOL, rtol=0)
    torch.testing.assert_close(torch.tensor(state["kRot"], dtype=torch.float64),
                               expected["k_rot"], atol=TOL, rtol=0)
    assert state["score"] == pytest.approx(expected["score"], abs=TOL)
    torch.testing.assert_close(torch.tensor(state["shares"], dtype=torch.float64),
                               expected["shares"], atol=TOL, rtol=0)
    assert state["share"] == pytest.approx(float(expected["shares"][i]), abs=TOL)
    theta = float(expected["theta"][i])
    assert state["angleQ"] == pytest.approx(m * theta, abs=TOL)
    assert state["angleK"] == pytest.approx(n * theta, abs=TOL)
    a, b = expected["pairs"][i].tolist()
    start = np.arctan2(float(q[b]), float(q[a])) - np.arctan2(float(k[b]), float(k[a]))
    between = start + (m - n) * theta
    assert abs((state["between"] - between + np.pi) % (2 * np.pi) - np.pi) < TOL
    assert state["offset"] == m - n
    assert state["top"] == str(i)
    assert state["outputs"] == [f"m = {m}", f"n = {n}"]
    shown = [f"{x:.4f}".replace("-0.0000", "0.0000") for x in (state["score"], state["share"])]
    assert state["shown"] == [shown[0], shown[1], str(m - n), shown[0]]
    return expected


@pytest.mark.browser
def test_rope_sliders_and_keyboard_match_the_package(page):
    playground = rope_playground()
    q, k = torch.from_numpy(playground.query), torch.from_numpy(playground.key)
    (root,) = show(page, playground.to_html())
    state = rope_state(root)
    assert (state["m"], state["n"], state["i"]) == (5, 2, 0)
    assert state["prev"] is None and state["prevHidden"]
    check_rope(state, q, k)

    m_slider, n_slider = root.get_by_label("Query position m"), root.get_by_label("Key position n")
    pair_slider = root.get_by_label("Frequency pair i")
    assert [m_slider.get_attribute("max"), pair_slider.get_attribute("max")] == ["20", "3"]

    # The keyboard: m up three, then to the end and back to the start.
    m_slider.focus()
    before = rope_state(root)["score"]
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    expect(root).to_have_attribute("data-m", "8", timeout=TIMEOUT)
    state = rope_state(root)
    check_rope(state, q, k)
    assert state["prev"] == pytest.approx(rope_expected(q, k, 7, 2)["score"], abs=TOL)
    assert not state["prevHidden"] and "m = 7, n = 2, offset 5" in state["prevText"]
    assert state["say"].startswith("The offset went from 5 to 6")
    assert abs(state["score"] - before) > 0.1  # a new offset, a new score
    assert m_slider.get_attribute("aria-valuetext") == "m = 8"
    page.keyboard.press("End")
    expect(root).to_have_attribute("data-m", "20", timeout=TIMEOUT)
    check_rope(rope_state(root), q, k)
    page.keyboard.press("Home")
    expect(root).to_have_attribute("data-m", "0", timeout=TIMEOUT)
    check_rope(rope_state(root), q, k)

    # n and the pair, with the keyboard after Tab.
    n_slider.focus()
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    expect(root).to_have_attribute("data-n", "0", timeout=TIMEOUT)
    state = check_rope(rope_state(root), q, k)
    assert rope_state(root)["score"] == pytest.approx(float(q @ k), abs=TOL)  # both at 0
    page.keyboard.press("Tab")
    expect(pair_slider).to_be_focused(timeout=TIMEOUT)
    for pair in (1, 2, 3):
        page.keyboard.press("ArrowRight")
        expect(root).to_have_attribute("data-i", str(pair), timeout=TIMEOUT)
        state = rope_state(root)
        check_rope(state, q, k)
        assert state["score"] == pytest.approx(float(q @ k), abs=TOL)  # the drawn pair only
    assert pair_slider.get_attribute("aria-valuetext") == "pair 3, features 3 and 7"

    # The sliders set directly, as a drag or a click leaves them, at several settings.
    for m, n, pair in ((11, 4, 0), (4, 11, 1), (20, 13, 2), (17, 17, 0), (3, 19, 3)):
        m_slider.fill(str(m))
        n_slider.fill(str(n))
        pair_slider.fill(str(pair))
        expect(root).to_have_attribute("data-i", str(pair), timeout=TIMEOUT)
        state = rope_state(root)
        assert (state["m"], state["n"]) == (m, n)
        check_rope(state, q, k)

    # A click on the middle of the m slider's track: whatever m it lands on, rope agrees.
    box = m_slider.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    expect(root).to_have_attribute("data-m", re.compile(r"^(9|10|11)$"), timeout=TIMEOUT)
    check_rope(rope_state(root), q, k)


@pytest.mark.browser
def test_rope_readouts_keep_each_value_with_its_name_on_a_phone(page):
    page.set_viewport_size({"width": 390, "height": 844})
    (root,) = show(page, rope_playground()._repr_html_())
    for m in ("0", "20"):  # the shortest and the longest readouts
        root.get_by_label("Query position m").fill(m)
        parted = root.evaluate("""r => Array.from(r.querySelectorAll(
                '.pg-scoreline, .pg-vecline')).flatMap(line => {
            // The line box of each text piece: a value that starts a line below its name.
            const lines = [], range = document.createRange();
            const walk = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
            let t, last = null;
            while ((t = walk.nextNode())) {
                if (!t.data.trim()) continue;
                range.selectNodeContents(t);
                const top = range.getClientRects()[0].top;
                if (last && /=\\s*$/.test(last.data) && top > last.top + 4)
                    lines.push(`"${last.data.trim()}" / "${t.data.trim()}"`);
                last = {data: t.data, top: Array.from(range.getClientRects()).pop().top};
            }
            return lines;
        })""")
        assert parted == [], f"m = {m}: a value starts a line after its '=': {parted}"


#: The rotary drawing in each state: visit(state) after each pair i, each m and each n is
#: set through the sliders, as a reader sets them; the number of states visited.
ROPE_EACH_STATE = """const each = (r, visit) => {
    const set = (cls, v) => {
        const slider = r.querySelector('.' + cls);
        slider.value = String(v);
        slider.dispatchEvent(new Event('input'));
    };
    const last = Number(r.querySelector('.pg-m').max), pairs = Number(r.querySelector('.pg-i').max);
    let states = 0;
    for (let i = 0; i <= pairs; i++) {
        set('pg-i', i);
        for (let m = 0; m <= last; m++) for (let n = 0; n <= last; n++) {
            set('pg-m', m);
            set('pg-n', n);
            states++;
            visit([i, m, n]);
        }
    }
    return states;
};
"""

#: Every state of the rotary drawing (each pair i, each m and n): where a label's box leaves
#: the drawing (2 units kept for its white outline) or meets the axes' caption at the
#: bottom, and where the two labels' boxes meet.
ROPE_LABEL_SWEEP = "r => {" + ROPE_EACH_STATE + """
    const size = r.querySelector('.pg-svg').viewBox.baseVal.width;
    const caption = r.querySelector('.pg-svg .pg-tick').getBBox();
    const labels = [...r.querySelectorAll('.pg-svg .pg-lab')];
    const box = t => { const b = t.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; };
    const outside = [], overlapping = [];
    const check = state => {
        const [a, b] = labels.map(box);
        for (const [x0, y0, x1, y1] of [a, b])
            if (x0 < 2 || y0 < 2 || x1 > size - 2 || y1 > caption.y) outside.push(state);
        if (a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]) overlapping.push(state);
    };
    check("opening");  // drawn once before any slider moves
    const states = each(r, check);
    return {labels: labels.length, width: Math.min(...labels.map(t => t.getBBox().width)),
            states, outside, overlapping};
}"""


@pytest.mark.browser
def test_rope_labels_stay_in_the_drawing_and_apart(page):
    """"q at m" and "k at n" stay inside the drawing, off its caption and off each other in
    every state: each pair, each m and each n."""
    (root,) = show(page, rope_playground()._repr_html_())
    seen = root.evaluate(ROPE_LABEL_SWEEP)
    assert seen["labels"] == 2 and seen["width"] > 20  # both drawn, with their text
    assert seen["states"] == 4 * 21 * 21
    assert seen["outside"] == [], f"{len(seen['outside'])} states, e.g. {seen['outside'][:5]}"
    assert seen["overlapping"] == [], \
        f"{len(seen['overlapping'])} states, e.g. {seen['overlapping'][:5]}"


#: In every state, each line of the drawing (axes, orbits, arcs, shafts, arrowheads) that
#: runs through the axes' caption, read off the screen: each line's outline sampled every
#: half unit, its points taken to the screen with getScreenCTM, against the caption's box
#: grown by half the line's stroke; and the caption's size and place on the screen.
ROPE_CAPTION_CROSSINGS = "r => {" + ROPE_EACH_STATE + """
    const svg = r.querySelector('.pg-svg'), caption = svg.querySelector('.pg-tick');
    const lines = [...svg.querySelectorAll('line, polyline, polygon, circle, path')];
    const crossed = {};
    const states = each(r, state => {
        const m = svg.getScreenCTM(), c = caption.getBoundingClientRect();
        for (const line of lines) {
            const w = parseFloat(getComputedStyle(line).strokeWidth || '0') / 2 * m.a;
            const near = line.getBoundingClientRect();
            if (near.right + w < c.left || c.right < near.left - w
                    || near.bottom + w < c.top || c.bottom < near.top - w) continue;
            const length = line.getTotalLength();
            for (let s = 0; s <= length; s += 0.5) {
                const p = line.getPointAtLength(s).matrixTransform(m);
                if (c.left - w < p.x && p.x < c.right + w
                        && c.top - w < p.y && p.y < c.bottom + w) {
                    const name = line.getAttribute('class') || line.parentNode.getAttribute('class')
                                 || line.tagName;
                    (crossed[name] = crossed[name] || []).push(state);
                    break;
                }
            }
        }
    });
    const c = caption.getBoundingClientRect(), frame = svg.getBoundingClientRect();
    return {states, crossed, text: caption.textContent,
            size: parseFloat(getComputedStyle(caption).fontSize) * svg.getScreenCTM().a,
            inside: frame.left <= c.left && c.right <= frame.right && frame.top <= c.top
                    && c.bottom <= frame.bottom && c.right <= document.documentElement.clientWidth};
}"""


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_rope_caption_is_crossed_by_no_line(page, width):
    """The caption "across: feature a, up: feature b" sits where no line of the drawing runs
    through it, in every state, and is read at 10 px or more inside the drawing's frame, at
    a desktop's width and on a phone (an audit saw the y axis through it in every state)."""
    page.set_viewport_size({"width": width, "height": 900})
    (root,) = show(page, rope_playground()._repr_html_())
    seen = root.evaluate(ROPE_CAPTION_CROSSINGS)
    assert seen["states"] == 4 * 21 * 21
    assert seen["text"] == "across: feature 3, up: feature 7"  # the last pair swept
    crossed = {name: f"{len(states)} states, e.g. {states[:3]}"
               for name, states in seen["crossed"].items()}
    assert crossed == {}, f"lines through the caption: {crossed}"
    assert seen["size"] >= 10, f"the caption is {seen['size']:.1f} px"
    assert seen["inside"], "the caption leaves the drawing's frame or the screen"


#: In every state, each label ("q at m", "k at n") that lies on an arrow drawn after the
#: turn (its shaft, with the shaft's stroke, or its head) or on an axis, read off the
#: screen: the label's box grown by HALO units (the part of its white outline that reaches
#: past its box), each shaft and each edge of each head sampled every half pixel.
ROPE_LABELS_ON_LINES = "r => {" + ROPE_EACH_STATE + """
    const HALO = 1;
    const svg = r.querySelector('.pg-svg');
    const labels = [...svg.querySelectorAll('.pg-lab')];
    const names = ['q', 'k'], arrows = [...svg.querySelectorAll('.pg-vr')];
    const axes = [...svg.querySelectorAll('line.pg-axis')];
    const half = line => parseFloat(getComputedStyle(line).strokeWidth) / 2;
    const ends = (line, m) => [1, 2].map(n => new DOMPoint(
        +line.getAttribute('x' + n), +line.getAttribute('y' + n)).matrixTransform(m));
    const corners = (polygon, m) => [...polygon.points].map(
        p => new DOMPoint(p.x, p.y).matrixTransform(m));
    const runs = (box, a, b, w) => {  // the segment a-b, w px either side of it, meets box
        const steps = Math.max(1, Math.ceil(Math.hypot(b.x - a.x, b.y - a.y) / 0.5));
        for (let s = 0; s <= steps; s++) {
            const x = a.x + s / steps * (b.x - a.x), y = a.y + s / steps * (b.y - a.y);
            if (box.left - w < x && x < box.right + w && box.top - w < y && y < box.bottom + w)
                return true;
        }
        return false;
    };
    const clashes = [];
    const states = each(r, state => {
        const m = svg.getScreenCTM(), g = HALO * m.a;
        for (const label of labels) {
            const b = label.getBoundingClientRect();
            const box = {left: b.left - g, right: b.right + g,
                         top: b.top - g, bottom: b.bottom + g};
            const on = [];
            arrows.forEach((arrow, k) => {
                const shaft = arrow.querySelector('line'), [a, e] = ends(shaft, m);
                if (runs(box, a, e, half(shaft) * m.a)) on.push(names[k] + ' shaft');
                const p = corners(arrow.querySelector('polygon'), m);
                if (p.some((c, j) => runs(box, c, p[(j + 1) % p.length], 0)))
                    on.push(names[k] + ' head');
            });
            axes.forEach((axis, k) => {
                const [a, e] = ends(axis, m);
                if (runs(box, a, e, half(axis) * m.a)) on.push(k ? 'y axis' : 'x axis');
            });
            if (on.length) clashes.push(`${JSON.stringify(state)} ${label.textContent}: ${on}`);
        }
    });
    return {states, clashes};
}"""


@pytest.mark.browser
def test_rope_labels_keep_off_the_arrows_and_the_axes(page):
    """In every state (each pair i, each m, each n) neither label lies on an arrow, shaft
    or head, nor on an axis. An audit saw "k at 1" hide the q arrowhead at i = 1, m = 12,
    n = 1, and 18 more states like it."""
    (root,) = show(page, rope_playground()._repr_html_())
    seen = root.evaluate(ROPE_LABELS_ON_LINES)
    assert seen["states"] == 4 * 21 * 21
    clashes = seen["clashes"]
    assert clashes == [], f"{len(clashes)} labels on a line, e.g. {clashes[:6]}"


@pytest.mark.browser
def test_rope_shift_both_keeps_the_score_and_turns_the_arrows(page):
    playground = rope_playground(position_q=16, position_k=13, pair=1)
    q, k = torch.from_numpy(playground.query), torch.from_numpy(playground.key)
    (root,) = show(page, playground.to_html())
    first = rope_state(root)
    check_rope(first, q, k)
    plus = root.get_by_role("button", name="Shift both +1")
    minus = root.get_by_role("button", name="Shift both \u22121")
    theta = float(rope_frequencies(8, 1e4, dtype=torch.float64)[1])

    def arrows(state: dict) -> list[float]:
        return [*state["qRot"][1::4], *state["kRot"][1::4]]  # pair 1: features 1 and 5

    seen = [first]
    for button, m in ((plus, 17), (plus, 18), (minus, 17), (minus, 16), (minus, 15)):
        button.click()
        expect(root).to_have_attribute("data-m", str(m), timeout=TIMEOUT)
        state = rope_state(root)
        check_rope(state, q, k)
        assert (state["m"] - state["n"], state["offset"]) == (3, 3)
        assert state["score"] == pytest.approx(first["score"], abs=TOL)
        assert state["share"] == pytest.approx(first["share"], abs=TOL)
        assert state["between"] == pytest.approx(first["between"], abs=TOL)
        assert state["prev"] == pytest.approx(first["score"], abs=TOL)
        step = state["angleQ"] - seen[-1]["angleQ"]
        assert abs(step) == pytest.approx(theta, abs=TOL)  # each turned by theta_1 more...
        assert state["angleK"] - seen[-1]["angleK"] == pytest.approx(step, abs=TOL)
        assert max(abs(x - y) for x, y in zip(arrows(state), arrows(seen[-1]),
                                              strict=True)) > 0.01  # ...and they moved
        assert "the offset is still 3, and the score is unchanged" in state["say"]
        assert f"score {first['shown'][0]}." in state["prevText"]
        seen.append(state)

    # The keyboard: Enter and Space on the buttons shift too.
    plus.focus()
    page.keyboard.press("Enter")
    expect(root).to_have_attribute("data-m", "16", timeout=TIMEOUT)
    page.keyboard.press("Space")
    expect(root).to_have_attribute("data-m", "17", timeout=TIMEOUT)
    assert rope_state(root)["score"] == pytest.approx(first["score"], abs=TOL)

    # At the end of the range the button stays focusable, says why, and changes nothing.
    for _ in range(3):
        page.keyboard.press("Enter")
    expect(root).to_have_attribute("data-m", "20", timeout=TIMEOUT)
    expect(plus).to_have_attribute("aria-disabled", "true", timeout=TIMEOUT)
    page.keyboard.press("Enter")
    expect(root.locator(".pg-say")).to_have_text(
        "Cannot shift by +1: positions run from 0 to 20.", timeout=TIMEOUT)
    expect(plus).to_be_focused()
    assert (rope_state(root)["m"], rope_state(root)["n"]) == (20, 17)
    assert minus.get_attribute("aria-disabled") == "false"

    # Moving m alone changes the offset and the score; Reset goes back to the start.
    root.get_by_label("Query position m").fill("19")
    state = rope_state(root)
    check_rope(state, q, k)
    assert abs(state["score"] - first["score"]) > 0.01
    assert state["say"].startswith("The offset went from 3 to 2")
    root.get_by_role("button", name="Reset").click()
    expect(root).to_have_attribute("data-m", "16", timeout=TIMEOUT)
    state = rope_state(root)
    check_rope(state, q, k)
    assert (state["n"], state["i"], state["prev"], state["prevHidden"]) == (13, 1, None, True)


@pytest.mark.browser
@pytest.mark.parametrize("layout", ["half-split", "interleaved"])
def test_rope_other_widths_bases_and_layouts(page, layout):
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(12, generator=generator, dtype=torch.float64)
    k = torch.randn(12, generator=generator, dtype=torch.float64)
    playground = rope_playground(q, k, base=50.0, position_q=0, position_k=40, pair=5,
                                 max_position=64, layout=layout)
    (root,) = show(page, playground.to_html())
    check_rope(rope_state(root), q, k, base=50.0, layout=layout)
    features = [(2 * j, 2 * j + 1) if layout == "interleaved" else (j, j + 6) for j in range(6)]
    assert root.locator(".pg-pairs tbody tr td:nth-child(2)").all_text_contents() == [
        f"{a}, {b}" for a, b in features]
    for m, n, pair in ((64, 0, 0), (33, 30, 2), (7, 50, 4)):
        root.get_by_label("Query position m").fill(str(m))
        root.get_by_label("Key position n").fill(str(n))
        root.get_by_label("Frequency pair i").fill(str(pair))
        expect(root).to_have_attribute("data-i", str(pair), timeout=TIMEOUT)
        shifted = check_rope(rope_state(root), q, k, base=50.0, layout=layout)
        if m < 64:
            root.get_by_role("button", name="Shift both +1").click()
            expect(root).to_have_attribute("data-m", str(m + 1), timeout=TIMEOUT)
            state = rope_state(root)
            check_rope(state, q, k, base=50.0, layout=layout)
            assert state["score"] == pytest.approx(shifted["score"], abs=TOL)


# --------------------------------------------------- all four


def every_playground(label: str = "") -> list[str]:
    if not label:
        return [make()._repr_html_() for make in ALL.values()]
    return [
        dot_product_playground(labels=["a", label, CLOSER, "x & y"],
                               query_label=label)._repr_html_(),
        mask_playground(4, tokens=["a", label, CLOSER, "x & y"])._repr_html_(),
        multihead_split_playground(tokens=["a", label, CLOSER, "x & y"])._repr_html_(),
        rope_playground(title=label + CLOSER)._repr_html_(),
    ]


@pytest.mark.browser
def test_hostile_labels_are_shown_as_text(page):
    dot, mask, split, rotary = show(page, *every_playground(MALICIOUS))
    assert page.locator("img").count() == 0 and page.locator("script").count() == 4
    expect(dot.locator(".pg-tbody th")).to_have_text(["a", MALICIOUS, CLOSER, "x & y"])
    assert handle(dot, 0).locator(".pg-lab").text_content() == MALICIOUS[:17] + "\u2026"
    assert handle(dot, 0).get_attribute("aria-label").startswith(f"query {MALICIOUS} at")
    expect(mask.locator(".pg-live tbody th")).to_have_text(["a", MALICIOUS, CLOSER, "x & y"])
    assert MALICIOUS in cell_button(mask, 1, 0).get_attribute("aria-label")
    expect(split.locator("table.pg-x tbody th")).to_have_text(["a", MALICIOUS, CLOSER, "x & y"])
    expect(rotary.locator(".pg-title")).to_have_text(MALICIOUS + CLOSER)
    assert rotary.get_attribute("aria-label") == f"Rotary position playground: {MALICIOUS}{CLOSER}"
    assert page.evaluate("() => typeof window.alert") == "function"
    assert page.seen["dialogs"] == []


@pytest.mark.browser
def test_every_control_is_reached_with_tab(page):
    roots = show(page, *every_playground())
    for root in roots:
        # Each control that should be a tab stop gets a marker; then Tab visits them all.
        expected = root.evaluate("""r => {
          const stops = Array.from(r.querySelectorAll('button, input, select, [tabindex]'))
            .filter(e => e.tabIndex >= 0 && !e.closest('[hidden]'));
          stops.forEach((e, n) => e.setAttribute('data-stop', String(n)));
          return stops.length;
        }""")
        assert expected >= 2
        root.locator('[data-stop="0"]').focus()
        visited = set()
        for _ in range(expected + 3):
            visited.add(page.evaluate("() => document.activeElement.getAttribute('data-stop')"))
            page.keyboard.press("Tab")
        assert {str(n) for n in range(expected)} <= visited
    # The mask grid is one tab stop (a roving tabindex); every cell stays a button.
    assert roots[1].locator(".pg-cell[tabindex='0']").count() == 1
    assert roots[1].locator("button.pg-cell").count() == 25


@pytest.mark.browser
def test_no_serious_accessibility_violation(page):
    from axe_playwright_python.sync_playwright import Axe

    show(page, *every_playground())
    results = Axe().run(page, options=AXE_OPTIONS)
    ran = {rule["id"] for group in ("violations", "passes", "incomplete", "inapplicable")
           for rule in results.response[group]}
    assert {"color-contrast", "label", "label-content-name-mismatch"} <= ran
    serious = [f"{v['id']} ({v['impact']}): {v['help']} -- {v['nodes'][0]['html'][:200]}"
               for v in results.response["violations"]
               if v["impact"] in ("serious", "critical")]
    assert not serious, "\n".join(serious)


@pytest.mark.browser
def test_with_scripts_off_the_static_fallback_shows(browser):
    context = browser.new_context(java_script_enabled=False)
    tab = context.new_page()
    try:
        fragments = every_playground()
        tab.set_content(document(*fragments))
        for fragment in fragments:
            root = tab.locator(f"#{root_id(fragment)}")
            expect(root.locator(".pg-nojs")).to_be_visible(timeout=TIMEOUT)
            expect(root.locator(".pg-live")).to_be_hidden(timeout=TIMEOUT)
            assert "needs JavaScript" in root.locator(".pg-nojs").inner_text()
    finally:
        context.close()


@pytest.mark.browser
def test_saved_file_works_offline(page, tmp_path):
    path = mask_playground(3, preset="none").save(tmp_path / "mask.html")
    page.goto(path.as_uri())
    root = page.locator(".attnbook-pg")
    expect(root).to_have_attribute("data-pg-ready", "1", timeout=TIMEOUT)
    assert mask_state(root)["allowed"] == [True] * 9
    assert all(url.startswith("file:") for url in page.seen["requests"])


@pytest.mark.browser
@pytest.mark.parametrize("mode", ["light", "dark"])
def test_screenshots_and_the_panel_stays_light(browser, mode):
    """Each playground in the page's light and dark modes, saved for a person to look at."""
    context = browser.new_context(viewport={"width": 820, "height": 900}, color_scheme=mode)
    tab = context.new_page()
    try:
        fragments = every_playground()
        head, attrs = (DARK_THEME, 'data-theme="dark"') if mode == "dark" else ("", "")
        tab.set_content(document(*fragments, html_attrs=attrs, head=head))
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for kind, fragment in zip(ALL, fragments, strict=True):
            root = tab.locator(f"#{root_id(fragment)}")
            expect(root).to_have_attribute("data-pg-ready", "1", timeout=TIMEOUT)
            assert root.evaluate("e => getComputedStyle(e).backgroundColor") == \
                "rgb(255, 255, 255)"
            for selector in ("button, select, input", "label", "th", ".pg-say", "td",
                             ".pg-help, .pg-legend"):
                colour = root.locator(f".pg-live {selector}").first.evaluate(
                    "e => getComputedStyle(e).color")
                r, g, b = (int(c) for c in re.findall(r"\d+", colour)[:3])
                assert 0.2126 * r + 0.7152 * g + 0.0722 * b < 80, (kind, selector, colour)
            target = SCREENSHOTS / f"{kind}-{mode}.png"
            root.screenshot(path=str(target))
            assert target.stat().st_size > 10_000
    finally:
        context.close()


# ------------------------------------------------ a phone and a laptop, light and dark

#: The book's page at a phone's width (its column is about 356 px) and at a laptop's.
WIDTHS = (390, 1280)


def fit_report(root) -> dict:
    """How ``root`` sits in the page: widths, and each scrolling box with its cue."""
    return root.evaluate("""r => {
      const shown = e => !!e && e.checkVisibility();
      return {
        doc: document.documentElement.scrollWidth, view: innerWidth,
        root: [r.scrollWidth, r.clientWidth, r.getBoundingClientRect().right],
        boxes: Array.from(r.querySelectorAll('.pg-scroller'), s => {
          const wrap = s.parentNode, note = wrap.previousElementSibling;
          const b = s.getBoundingClientRect();
          return {over: s.scrollWidth > s.clientWidth + 1, shown: shown(s),
                  left: b.left, right: b.left + s.clientWidth,
                  more: wrap.classList.contains('pg-more-r'),
                  shadow: getComputedStyle(wrap, '::after').opacity,
                  note: note && note.classList.contains('pg-cue') && shown(note)
                    ? note.textContent : null,
                  tab: s.tabIndex};
        })};
    }""")


def check_fits(kind: str, root, width: int) -> dict:
    """Nothing widens the page or sticks out of the panel; a box that scrolls says so."""
    report = fit_report(root)
    assert report["doc"] <= report["view"] == width, (kind, report)
    scroll, client, right = report["root"]
    assert scroll <= client and right <= width, (kind, report["root"])
    for box in report["boxes"]:
        if not box["shown"]:
            continue
        if box["over"]:
            assert box["note"] and "scroll" in box["note"], (kind, box)
            assert box["more"] and box["shadow"] == "1" and box["tab"] == 0, (kind, box)
        else:
            assert box["note"] is None and not box["more"] and box["shadow"] == "0", (kind, box)
            assert box["tab"] == -1, (kind, box)
    return report


def dot_weight_column_in_view(root) -> list[bool]:
    """Per key: its weight (bar and number) lies inside the visible part of the table's box."""
    return root.evaluate("""r => {
      const s = r.querySelector('.pg-scroller'), b = s.getBoundingClientRect();
      const left = b.left, right = b.left + s.clientWidth;
      return Array.from(r.querySelectorAll('.pg-wcell'), c => {
        const w = c.querySelector('.pg-w').getBoundingClientRect();
        const bar = c.querySelector('.pg-bar').getBoundingClientRect();
        return bar.left >= left - 0.5 && w.right <= right + 0.5 && w.width > 10
          && w.right <= innerWidth;
      });
    }""")


@pytest.mark.browser
@pytest.mark.parametrize("mode", ["light", "dark"])
@pytest.mark.parametrize("width", WIDTHS)
def test_every_playground_fits_the_book_column(browser, width, mode):
    """In the book's own page (its theme's CSS, light or dark) at 390 and 1280 px: no
    playground widens the page or overflows its panel; a wide table scrolls in its own box
    with a note and a shadow; the dot playground's weights are in the first view."""
    fragments = [make()._repr_html_() for make in ALL.values()] + \
        [make()._repr_html_() for make in LARGEST.values()]
    kinds = [*ALL, *(f"{kind}-largest" for kind in LARGEST)]
    with watched_tab(browser, {"width": width, "height": 900}, TIMEOUT,
                     local_only=True) as tab:
        tab.set_content(book_page(*fragments, mode=mode))
        roots = [tab.locator(f"#{root_id(f)}") for f in fragments]
        reports = {}
        for kind, root in zip(kinds, roots, strict=True):
            expect(root).to_have_attribute("data-pg-ready", "1", timeout=TIMEOUT)
            reports[kind] = check_fits(kind, root, width)
            # A light panel with dark ink, whatever the page's mode.
            assert root.evaluate("e => getComputedStyle(e).backgroundColor") == \
                "rgb(255, 255, 255)"
            for selector in (".pg-live th", ".pg-live label", ".pg-help, .pg-legend",
                             ".pg-cue", ".pg-live button, .pg-live select"):
                ink = root.locator(selector).first.evaluate("e => getComputedStyle(e).color")
                assert contrast(ink, "rgb(255, 255, 255)") >= 4.5, (kind, selector, ink)
        for kind in ("dot", "dot-largest"):
            assert all(dot_weight_column_in_view(roots[kinds.index(kind)])), kind
        for kind in ("mask", "mask-largest"):
            # The checkbox stays beside its words (later fragments' shared CSS must not undo
            # the mask's own layout).
            box, words = (roots[kinds.index(kind)].locator(s).bounding_box()
                          for s in (".pg-fill", "label[for$='-fill']"))
            assert words["y"] < box["y"] + box["height"] / 2 < words["y"] + words["height"]
            assert box["x"] + box["width"] <= words["x"]
            # The corner heading ("query, key") takes at most two lines, on a phone too.
            lines = roots[kinds.index(kind)].locator(".pg-corner").first.evaluate(
                """c => { const r = document.createRange(); r.selectNodeContents(c);
                  return new Set(Array.from(r.getClientRects(),
                                             b => Math.round(b.top))).size; }""")
            assert 1 <= lines <= 2, (kind, width, lines)
        # The rotary playground's sliders start at one x, each readout beside or under its
        # own slider, inside the panel.
        sliders = roots[kinds.index("rope")].evaluate("""r => Array.from(
            r.querySelectorAll('.pg-controls input[type=range]'), s => {
              const b = s.getBoundingClientRect(), o = s.nextElementSibling
                .getBoundingClientRect(), p = r.getBoundingClientRect();
              return [b.left, b.right, o.left, o.top, b.top, p.right, b.bottom];
            })""")
        assert len(sliders) == 3 and len({round(s[0]) for s in sliders}) == 1, sliders
        for left, right, out_left, out_top, top, panel, bottom in sliders:
            assert right - left >= 100 and out_left >= left - 0.5 and out_top >= top - 12
            assert right <= panel, sliders
            # A readout under its slider clears the focus ring (3 px, 2 px out) and a gap.
            assert out_top < top or out_top >= bottom + 6, (bottom, out_top)
        # The split's two panels are as wide as their heads need, beside each other when
        # both fit the row: at 1280 px no head is cut behind a scroll bar for any h.
        split = roots[kinds.index("split")]
        for h in ("1", "2", "4", "8"):
            split.get_by_label("Heads h").select_option(h)
            cut = split.locator(".pg-heads").evaluate_all(
                "hs => hs.filter(h => h.scrollWidth > h.clientWidth + 1)"
                ".map(h => `${h.scrollWidth} in ${h.clientWidth}`)")
            assert width == 390 or cut == [], (h, cut)
        dot_box = reports["dot"]["boxes"][0]
        if width == 390:
            # The phone is the case the cue is for: the dot table and the big mask scroll.
            assert dot_box["over"] and "k, q\u00b7k and the score" in dot_box["note"]
            assert reports["mask-largest"]["boxes"][0]["over"]
        else:
            assert not dot_box["over"]  # a laptop shows every column at once
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for kind, root in zip(kinds, roots, strict=True):
            if not kind.endswith("largest"):
                root.screenshot(path=str(SCREENSHOTS / f"{kind}-{width}-{mode}.png"))


@pytest.mark.browser
def test_the_scroll_cue_follows_the_scrolling(browser):
    """On a phone: scrolling the dot table to its end moves the shadow to the left edge
    and brings the score column into view; the keys scroll it too, once it has focus."""
    fragment = dot_product_playground()._repr_html_()
    with watched_tab(browser, {"width": 390, "height": 900}, TIMEOUT, local_only=True) as tab:
        tab.set_content(book_page(fragment))
        root = tab.locator(f"#{root_id(fragment)}")
        expect(root).to_have_attribute("data-pg-ready", "1", timeout=TIMEOUT)
        wrap, box = root.locator(".pg-scroll"), root.locator(".pg-scroller")
        expect(wrap).to_have_class(re.compile(r"\bpg-more-r\b"), timeout=TIMEOUT)
        expect(wrap).not_to_have_class(re.compile(r"\bpg-more-l\b"), timeout=TIMEOUT)
        expect(box).to_have_attribute("tabindex", "0", timeout=TIMEOUT)

        def score_in_view() -> bool:
            return box.evaluate("""s => {
              const b = s.getBoundingClientRect(), c = s.querySelector('tbody td:last-child');
              return c.getBoundingClientRect().right <= b.left + s.clientWidth + 0.5; }""")

        assert not score_in_view()
        box.focus()
        tab.keyboard.press("End")
        tab.keyboard.press("ArrowRight")
        tab.wait_for_function("s => s.scrollLeft > 0", arg=box.element_handle(),
                              timeout=TIMEOUT)
        box.evaluate("s => { s.scrollLeft = s.scrollWidth; }")
        expect(wrap).to_have_class(re.compile(r"\bpg-more-l\b"), timeout=TIMEOUT)
        expect(wrap).not_to_have_class(re.compile(r"\bpg-more-r\b"), timeout=TIMEOUT)
        assert score_in_view()
        assert wrap.evaluate("w => getComputedStyle(w, '::before').opacity") == "1"
        # Each row's name (the key's label) stays at the box's left edge, drawn over the
        # cells that scrolled under it (and under the shadow, which is drawn over it).
        names = box.evaluate("""s => { const b = s.getBoundingClientRect();
            return Array.from(s.querySelectorAll('tbody th'), th => {
              const r = th.getBoundingClientRect(), x = r.left + r.width / 2,
                    y = r.top + r.height / 2, hit = document.elementFromPoint(x, y);
              return [Math.round(r.left - b.left), th.contains(hit)]; }); }""")
        assert len(names) == 4 and all(left == 0 and on_top for left, on_top in names), names
        # The weights still match the package after the reordering of the columns.
        check_dot(dot_state(root))


def touch_swipe(tab, start: tuple[float, float], end: tuple[float, float]) -> None:
    """A finger put down at ``start`` and moved to ``end`` in ten steps, then lifted."""
    cdp = tab.context.new_cdp_session(tab)
    cdp.send("Input.dispatchTouchEvent", {"type": "touchStart",
                                          "touchPoints": [{"x": start[0], "y": start[1]}]})
    for t in range(1, 11):
        x, y = (a + t / 10 * (b - a) for a, b in zip(start, end, strict=True))
        cdp.send("Input.dispatchTouchEvent", {"type": "touchMove",
                                              "touchPoints": [{"x": x, "y": y}]})
    cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
    cdp.detach()


@pytest.mark.browser
def test_dot_a_swipe_over_the_plot_scrolls_the_page_and_a_dot_drags(browser):
    """On a phone, a swipe that starts on the plot's empty grid or on a label scrolls the
    page, as a swipe on text does; only a swipe that starts on a point's dot moves it. The
    whole plot had taken every touch: the page would not scroll past it, and a swipe from a
    label moved that label's point (from (2, 6) to (5.4, 8))."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True,
                                  is_mobile=True)
    try:
        tab = context.new_page()
        tab.seen = {"requests": []}
        tab.on("request", lambda request: tab.seen["requests"].append(request.url))
        fragment = dot_product_playground()._repr_html_()
        data = script_data(fragment)
        (root,) = show(tab, fragment)
        tab.evaluate("document.body.insertAdjacentHTML('beforeend', "
                     "'<div style=\"height: 3000px\"></div>')")
        root.locator(".pg-svg").scroll_into_view_if_needed()
        misaligned = handle(root, 1 + data["labels"].index("long misaligned"))

        def label_middle() -> tuple[float, float]:
            box = misaligned.locator(".pg-lab").bounding_box()
            return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2

        # Where nothing is drawn (no point, arrow or label), then on the label.
        for place in (lambda: screen_point(root, data, 6.0, -1.0), label_middle):
            root.locator(".pg-svg").scroll_into_view_if_needed()
            before, start = tab.evaluate("window.scrollY"), place()
            touch_swipe(tab, start, (start[0], start[1] - 150))
            tab.wait_for_timeout(300)
            assert tab.evaluate("window.scrollY") > before + 50, start
            assert misaligned.get_attribute("data-x") == "2"
            assert misaligned.get_attribute("data-y") == "6"
        misaligned.scroll_into_view_if_needed()
        dot = screen_point(root, data, 2.0, 6.0)
        before = tab.evaluate("window.scrollY")
        touch_swipe(tab, dot, (dot[0] + 40, dot[1]))
        expect(misaligned).not_to_have_attribute("data-x", "2", timeout=TIMEOUT)
        assert misaligned.get_attribute("data-y") == "6"
        assert tab.evaluate("window.scrollY") == before
    finally:
        context.close()
