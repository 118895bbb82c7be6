"""The built book: every page, no errors, glued values, offline, working links, cache."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from bs4 import BeautifulSoup
from conftest import HTML, ROOT, chapter_pages, run_build, toc_pages
from test_exactness_lint import parse_cells

sys.path.insert(0, str(ROOT / "book" / "_ext"))
import attnbook_sphinx  # noqa: E402
from attnbook_sphinx import UNREPAIRED_CITATION_LIST, UNREPAIRED_TOGGLE  # noqa: E402

from attnbook.course import reading_minutes  # noqa: E402

pytestmark = pytest.mark.book

PAGES = toc_pages()
#: Attributes through which a page loads a resource (not links the reader may follow).
RESOURCE_ATTRIBUTES = {
    "script": "src", "img": "src", "iframe": "src", "source": "src", "audio": "src",
    "video": "src", "embed": "src", "object": "data",
}
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


def parse(page: str) -> BeautifulSoup:
    """A fresh parse of the built ``page``: for a caller that changes the tree."""
    return BeautifulSoup((HTML / f"{page}.html").read_text(encoding="utf-8"), "html.parser")


@functools.cache
def _parsed(page: str, stamp: tuple[int, int]) -> BeautifulSoup:
    return parse(page)


def soup(page: str) -> BeautifulSoup:
    """The built ``page``, parsed once for all the tests that only read it (parsing every
    page takes seconds, and most tests read every page). A page rewritten since, as the PDF
    fixture rewrites the front page's link, is parsed again. Do not change the tree: use
    :func:`parse` for that."""
    stat = (HTML / f"{page}.html").stat()
    return _parsed(page, (stat.st_mtime_ns, stat.st_size))


@pytest.mark.parametrize("page", PAGES)
def test_every_toc_page_is_built(built_book: Path, page: str) -> None:
    html = soup(page)
    assert html.find("main") is not None, f"{page}.html has no main content"
    assert html.find("h1") is not None, f"{page}.html has no title"


#: A symbol written as a plain identifier (``d_head``): in the text it is typeset, $d_{head}$;
#: an underscore belongs in code only.
PLAIN_SYMBOL = re.compile(r"\b[dh]_(?:model|head|k|v|ff|kv)\b")


@pytest.mark.parametrize("page", PAGES)
def test_symbols_are_typeset_outside_code(built_book: Path, page: str) -> None:
    """Headings, tables and prose name d_head, d_model, d_k ... in mathematics, as the
    notation page writes them, not as code identifiers with a bare underscore."""
    article = parse(page).select_one("main article")
    for element in article.select("div.cell, div.highlight, pre, code, .math, script"):
        element.decompose()
    text = article.get_text(" ")
    plain = [" ".join(text[max(0, m.start() - 30):m.end() + 10].split())
             for m in PLAIN_SYMBOL.finditer(text)]
    assert not plain, f"{page}: symbols with a bare underscore outside code: {plain[:4]}"


@pytest.mark.parametrize("page", PAGES)
def test_no_error_output(built_book: Path, page: str) -> None:
    """No traceback anywhere; no error output except the message of a cell tagged to raise on
    purpose."""
    html = soup(page)
    for cell in html.select("div.cell"):
        text = cell.get_text()
        assert "Traceback (most recent call last)" not in text, f"{page}: {text[:500]}"
        if "tag_raises-exception" in cell.get("class", []):
            # A cell that fails on purpose shows the message, a few lines at most.
            shown = [line for output in cell.select(".cell_output")
                     for line in output.get_text().splitlines() if line.strip()]
            assert 1 <= len(shown) <= 12, f"{page}: a failing cell shows {len(shown)} lines"
            continue
        assert not cell.select(".output.traceback, .output.error"), f"{page}: error output"
        stderr = cell.select(".output.stderr")
        assert not stderr, f"{page} prints to stderr: {stderr[0].get_text()[:300]}"
    assert "system-message" not in str(html), f"{page} shows a docutils error message"


@pytest.mark.parametrize("page", PAGES)
def test_no_resource_from_another_host(built_book: Path, page: str) -> None:
    html = soup(page)
    for tag, attribute in RESOURCE_ATTRIBUTES.items():
        for element in html.find_all(tag):
            url = element.get(attribute, "")
            assert not EXTERNAL.match(url), f"{page} loads <{tag} {attribute}={url!r}>"
    for link in html.find_all("link"):
        rel = set(link.get("rel", []))
        url = link.get("href", "")
        if rel & {"stylesheet", "preload", "icon", "modulepreload", "manifest", "prefetch",
                  "preconnect", "dns-prefetch"}:
            assert not EXTERNAL.match(url), f"{page} loads <link rel={rel} href={url!r}>"
    for style in html.find_all("style"):
        assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", style.get_text()), page


def test_static_css_loads_nothing_from_another_host(built_book: Path) -> None:
    offenders = []
    for css in (HTML / "_static").rglob("*.css"):
        text = css.read_text(encoding="utf-8", errors="replace")
        if re.search(r"@import\s+url\(\s*['\"]?https?://|url\(\s*['\"]?https?://", text):
            offenders.append(str(css.relative_to(HTML)))
    assert not offenders, f"stylesheets that fetch from another host: {offenders}"


def test_mathjax_is_served_by_the_site(built_book: Path) -> None:
    html = soup("book/notation")
    sources = [s.get("src", "") for s in html.find_all("script")]
    mathjax = [s for s in sources if "tex-chtml" in s]
    assert mathjax, f"no MathJax script on the notation page: {sources}"
    for src in mathjax:
        assert not EXTERNAL.match(src)
        target = (HTML / "book" / src.split("?")[0]).resolve()
        assert target.is_file(), f"MathJax script {src} is not in the built site"


@functools.cache
def _ids(path: Path, stamp: tuple[int, int]) -> frozenset[str]:
    return frozenset(re.findall(r'\bid="([^"]+)"', path.read_text(encoding="utf-8")))


def ids_on(path: Path) -> frozenset[str]:
    """The ids of the elements of the built page at ``path`` (read again if it changed)."""
    stat = path.stat()
    return _ids(path, (stat.st_mtime_ns, stat.st_size))


@pytest.mark.parametrize("page", PAGES)
def test_internal_links_resolve(built_book: Path, page: str) -> None:
    """Every link on the page that stays in the site (the text's, the sidebar's, the
    buttons', a download's, the PDF's) and every file it loads is there, and a link to a
    place on a page finds an element with that id."""
    html = soup(page)
    here = (HTML / page).parent
    targets = [(tag.name, tag["href"]) for tag in html.select("a[href], link[href]")]
    targets += [(tag.name, tag[attribute]) for tag_name, attribute in RESOURCE_ATTRIBUTES.items()
                for tag in html.select(f"{tag_name}[{attribute}]")]
    checked = 0
    for tag, href in targets:
        parts = urlsplit(href)
        if parts.scheme or parts.netloc or EXTERNAL.match(href) \
                or (tag == "link" and not parts.path):
            continue
        target = (here / unquote(parts.path)).resolve() if parts.path else HTML / f"{page}.html"
        assert target.is_file(), f"{page}: {tag} {href!r} points at a missing file"
        if parts.fragment and target.suffix == ".html":
            assert unquote(parts.fragment) in ids_on(target), \
                f"{page}: {tag} {href!r} points at no element of {target.name}"
        checked += 1
    assert checked > 20, f"{page}: only {checked} links and resources in the site"


def test_no_index_pages_nothing_links_to(built_book: Path) -> None:
    """The build writes no general index and no "Proof Index" (sphinx-proof's labels): the
    book has no index, and those pages were empty lists nothing linked to. A copy left by a
    build before this rule is older than the front page, which every build since wrote."""
    front = (HTML / "book" / "intro.html").stat().st_mtime_ns
    for leftover in ("genindex.html", "prf-prf.html"):
        path = HTML / leftover
        assert not path.exists() or path.stat().st_mtime_ns < front, f"the build wrote {leftover}"


@pytest.mark.parametrize("page", chapter_pages())
def test_every_chapter_has_its_parts(built_book: Path, page: str) -> None:
    """Goals, predict prompts, figures with alt text, summary, exercises, references."""
    html = soup(page)
    main = html.select_one("main")
    text = main.get_text(" ")
    assert "Learning goals" in text, f"{page} has no learning goals"
    assert text.count("Predict before you run") >= 2, f"{page}: fewer than 2 predict prompts"
    figures = main.select("figure img")
    assert figures, f"{page} has no figure"
    for image in figures:
        assert image.get("alt") and not image["alt"].endswith(".png"), f"{page}: {image}"
    headings = [h.get_text(" ").strip().rstrip("#").strip() for h in main.select("h2")]
    for section in ("Summary", "Exercises", "References"):
        assert any(h.endswith(section) for h in headings), f"{page} has no {section} section"
    assert len(main.select(".exercise")) >= 3, f"{page} has fewer than 3 exercises"
    assert len(main.select(".solution")) >= 3, f"{page} has fewer than 3 solutions"
    assert main.select('[role="doc-footnote"], aside.footnote'), f"{page} cites nothing"


@pytest.mark.parametrize("page", chapter_pages())
def test_chapter_offers_its_executed_notebook_and_source(built_book: Path, page: str) -> None:
    html = soup(page)
    links = {a["href"] for a in html.select("a[href]")}
    here = (HTML / page).parent
    notebook = [h for h in links if h.endswith(f"_sources/{page}.ipynb")]
    source = [h for h in links if h.endswith(f"_sources/{page}.md")]
    assert notebook and source, f"{page}: no .ipynb or .md download link"
    executed = json.loads((here / notebook[0]).resolve().read_text(encoding="utf-8"))
    outputs = [o for c in executed["cells"] if c["cell_type"] == "code"
               for o in c.get("outputs", [])]
    assert any(o.get("output_type") in ("display_data", "execute_result") for o in outputs), \
        f"{page}: the downloadable notebook has no outputs"
    assert (here / source[0]).resolve().is_file()


#: Page weight budget of a chapter: its HTML and its own images (theme assets excluded).
PAGE_BUDGET_BYTES = 1_500_000
MAX_IMAGE_PIXELS_WIDE = 1400


@pytest.mark.parametrize("page", chapter_pages())
def test_chapter_page_weight(built_book: Path, page: str) -> None:
    from PIL import Image

    html_file = HTML / f"{page}.html"
    images = {(html_file.parent / img["src"]).resolve()
              for img in soup(page).select("main img[src]")
              if not EXTERNAL.match(img["src"]) and not img["src"].startswith("data:")}
    total = html_file.stat().st_size + sum(path.stat().st_size for path in images)
    assert total < PAGE_BUDGET_BYTES, f"{page}: {total / 1e6:.2f} MB with its images"
    for path in images:
        if path.suffix == ".svg":  # matplotlib's: width="460.8pt", 4/3 px a point
            width = float(re.search(r'<svg[^>]*\swidth="([\d.]+)pt"', path.read_text(
                encoding="utf-8")).group(1)) * 4 / 3
        else:
            with Image.open(path) as image:
                width = image.width
        assert width <= MAX_IMAGE_PIXELS_WIDE, f"{path.name} is {width:.0f} px wide"


#: A chapter a programmer new to transformers can read in one sitting. The code budget was
#: 300 lines of up to 88 characters; the same amount of code in lines that fit the column
#: (76 characters, ``test_exactness_lint.CODE_COLUMN``) takes more of them.
MAX_VISIBLE_CODE_LINES = round(300 * 88 / 76)
#: The whole page's prose, Going deeper, exercises and references included: what one sitting
#: needs is the main path (at most MAIN_PATH_WORDS, below); this bounds the rest, which a
#: reader takes in later sittings.
MAX_PROSE_WORDS = 5500
WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")


def reading_load(page: str) -> tuple[int, int, list[str]]:
    """(visible code lines, prose words, visible code lines calling ``glue(``) of a page.

    Visible code is every non-blank line of a cell's input that is shown open: inputs of
    ``remove-input`` cells are not in the page, and ``hide-input`` ones are folded away.
    Prose is the article's text outside cells, code blocks and mathematics.
    """
    article = parse(page).select_one("main article")  # its cells are removed below
    code, glue_lines = 0, []
    for cell in article.select("div.cell"):
        source = cell.select_one("div.cell_input")
        if source is None or "tag_hide-input" in cell.get("class", []):
            continue
        lines = [line for line in source.get_text().splitlines() if line.strip()]
        code += len(lines)
        glue_lines += [line.strip() for line in lines if "glue(" in line]
    for element in article.select("div.cell, div.highlight, pre, .math"):
        element.decompose()
    return code, len(WORD.findall(article.get_text(" "))), glue_lines


@pytest.mark.parametrize("page", chapter_pages())
def test_chapter_fits_one_sitting(built_book: Path, page: str) -> None:
    code, words, glue_lines = reading_load(page)
    assert code <= MAX_VISIBLE_CODE_LINES, f"{page}: {code} visible code lines"
    assert words <= MAX_PROSE_WORDS, f"{page}: {words} words of prose"
    assert not glue_lines, f"{page} shows its glue calls: {glue_lines[:3]}"


def test_reading_load_counts_what_a_reader_sees(built_book: Path) -> None:
    """The measure is not vacuous: chapters have visible code and prose, and a page's hidden
    inputs are not counted."""
    for page in chapter_pages():
        code, words, _ = reading_load(page)
        assert code > 20 and words > 1000, f"{page}: {code} code lines, {words} words"
    page = chapter_pages()[0]
    html = soup(page)
    hidden = sum(len(cell.select_one("div.cell_input").get_text().splitlines())
                 for cell in html.select("div.cell.tag_hide-input")
                 if cell.select_one("div.cell_input"))
    shown = sum(len(cell.select_one("div.cell_input").get_text().splitlines())
                for cell in html.select("div.cell") if cell.select_one("div.cell_input"))
    assert reading_load(page)[0] <= shown - hidden


#: The main path, what a student must read in one sitting (about an hour): prose words outside
#: code, outputs, folded boxes, and the sections a reader may leave for later.
MAIN_PATH_WORDS = 2200
#: The h2 sections that are not on the main path.
OFF_PATH_SECTION = re.compile(r"going deeper|exercises|summary|references", re.IGNORECASE)
#: What is read only on a click, or is not prose.
OFF_PATH_CLASSES = {"cell", "highlight", "dropdown", "sd-dropdown", "toggle", "toggle-hidden",
                    "solution"}
#: A word of prose, as ``../shared/tools/main_path.py`` counts it: numbers are not words here
#: (``WORD`` above counts them, for the whole page's load).
PROSE_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")


def off_main_path(tag) -> bool:
    for node in [tag, *tag.parents]:
        if node.name in ("details", "pre", "code") and node is not tag:
            return True
        if OFF_PATH_CLASSES & set(node.get("class") or []):
            return True
        if node.name == "section":
            heading = node.find("h2", recursive=False)
            if heading is not None and OFF_PATH_SECTION.search(heading.get_text(" ")):
                return True
    return False


def main_path_words(article) -> int:
    return sum(len(PROSE_WORD.findall(tag.get_text(" ")))
               for tag in article.find_all(["p", "li", "figcaption"])
               if tag.find_parent(["p", "li", "figcaption"]) is None and not off_main_path(tag))


def main_path(page: str) -> dict:
    """A chapter's main path: its prose words, its h2 sections and which of them open with a
    takeaway, and the recap before the first section (its bullet items' words)."""
    article = soup(page).select_one("main article")
    words = main_path_words(article)
    sections, missing = 0, []
    for section in article.find_all("section"):
        heading = section.find("h2", recursive=False)
        if heading is None or OFF_PATH_SECTION.search(heading.get_text(" ")):
            continue
        sections += 1
        first = section.find("p", recursive=False)
        opening = first.find(recursive=False) if first is not None else None
        if not (opening is not None and opening.name == "strong"
                and first.get_text(" ").strip().startswith("Takeaway:")):
            missing.append(heading.get_text(" ").strip().rstrip("#").strip())
    title = article.find("h1").parent
    recap = []
    for paragraph in title.find_all("p", recursive=False):
        text = " ".join(paragraph.get_text(" ").split())
        if re.search(r"needs from earlier chapters|need before you start", text):
            items = paragraph.find_next_sibling("ul")
            bullets = items.find_all("li", recursive=False) if items is not None else []
            recap = [len(PROSE_WORD.findall(li.get_text(" "))) for li in bullets]
    return {"words": words, "sections": sections, "no_takeaway": missing, "recap": recap}


def one_sitting_faults(page: str) -> list[str]:
    path = main_path(page)
    faults = []
    if path["words"] > MAIN_PATH_WORDS:
        faults.append(f"{path['words']} words of main-path prose (at most {MAIN_PATH_WORDS})")
    if path["no_takeaway"]:
        faults.append(f"sections without an opening takeaway: {path['no_takeaway']}")
    if len(path["recap"]) < 2 or min(path["recap"]) < 8:
        faults.append(f"no recap of what it needs, a sentence per idea: {path['recap']}")
    headings = [h.get_text(" ") for h in soup(page).select("main article h2")]
    if not any("Going deeper" in h for h in headings):
        faults.append("no Going deeper section")
    return faults


@pytest.mark.parametrize("page", chapter_pages())
def test_chapter_main_path_fits_one_sitting(built_book: Path, page: str) -> None:
    """At most 2,200 words to read before the summary, a recap with content, a takeaway
    opening every section, and a Going deeper section for what left the main path."""
    assert not one_sitting_faults(page), f"{page}: {one_sitting_faults(page)}"


#: The bug gallery is a reference page, not a chapter: a reader comes from a chapter's link to
#: one section and reads it alone, so each section, not the page, is held to a short read.
GALLERY_SECTION_WORDS = 400


def test_the_bug_gallery_is_read_a_section_at_a_time(built_book: Path) -> None:
    """Each of the gallery's sections is a short read of its own (at most 400 words of prose
    outside code and folded boxes), and the page tells the reader to read them so."""
    article = soup("book/bug-gallery").select_one("main article")
    assert "book/bug-gallery" not in chapter_pages()
    assert "The sections stand alone" in article.get_text(" ")
    sections = {section.find("h2", recursive=False).get_text(" ").strip().rstrip("#").strip():
                main_path_words(section) for section in article.find_all("section")
                if section.find("h2", recursive=False) is not None}
    assert len(sections) >= 12, sections
    long = {title: words for title, words in sections.items()
            if words > GALLERY_SECTION_WORDS}
    assert not long, f"bug-gallery sections over {GALLERY_SECTION_WORDS} words: {long}"


#: How far the teacher's page's count of a chapter's main path, made on the chapter's source
#: (``attnbook.course.main_path_words``), may stray from the count on the built page.
TEACHING_COUNT_TOLERANCE = 0.10


def test_teaching_page_reading_load_is_the_built_pages(built_book: Path) -> None:
    """The teacher's page gives each chapter's main-path words and reading time; they agree
    with the built chapter within 10 %, and the time is the words at the stated pace."""
    table = next(t for t in soup("book/teaching").select("main article table")
                 if "main path, words" in t.get_text())
    rows = {}
    for row in table.select("tbody tr"):
        cells = [cell.get_text(" ").strip() for cell in row.select("td")]
        number = int(cells[0].split(".")[0])
        rows[number] = (int(cells[1].replace(",", "")), int(cells[2].split()[0]))
    pages = chapter_pages()
    assert sorted(rows) == list(range(1, len(pages) + 1))
    for number, page in enumerate(pages, start=1):
        words, minutes = rows[number]
        built = main_path(page)["words"]
        assert abs(words - built) <= TEACHING_COUNT_TOLERANCE * built, (
            f"{page}: the teacher's page counts {words} words, the built page {built}")
        assert minutes == reading_minutes(words)


def test_main_path_count_leaves_out_what_a_reader_may_skip(built_book: Path) -> None:
    """The count is not vacuous: it is well above zero, below the whole page's prose, and
    it grows when a folded answer is unfolded into a plain paragraph."""
    page = "book/attention-layer"
    path = main_path(page)
    assert path["sections"] >= 3 and 1000 < path["words"] < reading_load(page)[1]
    article = soup(page).select_one("main article")
    answer = next(d for d in article.select("details.sd-dropdown") if not off_main_path(
        d.find_parent("section")))
    answer_words = main_path_words(answer)
    assert answer_words == 0, "a folded answer is off the main path"
    answer.name, answer["class"] = "div", []
    unfolded = main_path_words(answer)
    assert unfolded > 0 and main_path_words(article) == path["words"] + unfolded


def test_front_page_links_to_the_pdf_exactly_when_the_site_has_it(built_book: Path) -> None:
    """A build without ``make pdf`` shows a note, not a link that would answer 404."""
    intro = (HTML / "book" / "intro.html").read_text(encoding="utf-8")
    has_pdf = (HTML / attnbook_sphinx.PDF_NAME).is_file()
    assert (attnbook_sphinx.PDF_LINK in intro) == has_pdf
    assert (attnbook_sphinx.PDF_ABSENT in intro) != has_pdf


def project() -> dict:
    """pyproject.toml's ``[project]`` table."""
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def edition() -> str:
    """The book's edition is the package's version."""
    return project()["version"]


def test_licence_files_say_what_the_book_says() -> None:
    code_licence = (ROOT / "LICENSE").read_text(encoding="utf-8")
    content_licence = (ROOT / "LICENSE-CONTENT").read_text(encoding="utf-8")
    assert code_licence.startswith("MIT License")
    assert "Creative Commons Attribution 4.0 International Public License" in content_licence
    assert project()["license"] == {"text": "MIT"}


@pytest.mark.parametrize("page", PAGES)
def test_every_page_states_its_edition_and_licences(built_book: Path, page: str) -> None:
    footer = soup(page).select_one("footer .extra_footer")
    assert footer is not None, f"{page} has no footer of the book's own"
    text = " ".join(footer.get_text(" ").split())
    assert f"Edition {edition()}." in text, f"{page}: the footer does not name edition {edition()}"
    assert "CC BY 4.0" in text and "MIT" in text, f"{page}: the footer names no licence"
    if page == "book/intro":
        body = " ".join(soup(page).select_one("main article").get_text(" ").split())
        assert f"This is edition {edition()}." in body and "LICENSE-CONTENT" in body
    if page == "book/changes":
        headings = [" ".join(h.get_text(" ").split()) for h in soup(page).select("main h2")]
        assert any(f"Edition {edition()}" in h for h in headings), \
            f"the changes page has no section for edition {edition()}: {headings}"

def test_no_build_machine_path_in_the_site(built_book: Path) -> None:
    """Pages and downloadable notebooks never print where the book was built."""
    offenders = []
    for path in [*HTML.rglob("*.html"), *HTML.rglob("*.ipynb")]:
        text = path.read_text(encoding="utf-8", errors="replace")
        for leak in (str(ROOT), "/tmp/ipykernel_", "site-packages/"):
            if leak in text:
                offenders.append(f"{path.relative_to(HTML)}: {leak}")
    assert not offenders, offenders[:10]


def test_glued_values_on_the_notation_page(built_book: Path) -> None:
    """The notation page glues the weights' shape and the default scale of its example."""
    text = soup("book/notation").get_text(" ")
    B, L, S, E = 2, 3, 5, 4  # the sizes the page's cell uses
    assert str((B, L, S)) in text
    assert f"{1 / E**0.5:.3f}" in text


@pytest.mark.parametrize("page", PAGES)
def test_links_and_citations_keep_their_spacing(built_book: Path, page: str) -> None:
    """A link's underline starts at its first word ("Solution to Exercise 9.2" linked
    " Exercise 9.2"), and a footnote citation "[2]" is tied to the word before it, so it
    never starts a line alone."""
    main = soup(page).select_one("main article")
    spaced = [link.get_text() for link in main.select("a.reference")
              if link.get_text().startswith(" ") or link.get_text().endswith(" ")]
    assert not spaced, f"{page}: links that start or end with a space: {spaced[:5]}"
    loose = [str(citation.previous_sibling)[-20:]
             for citation in main.select("a.footnote-reference")
             if str(citation.previous_sibling or "").endswith((" ", "\n"))]
    assert not loose, f"{page}: citations that may start a line alone, after: {loose[:5]}"


@pytest.mark.parametrize("page", PAGES)
def test_every_arxiv_reference_links_to_its_abstract(built_book: Path, page: str) -> None:
    """A reference to an arXiv paper links to its abstract, the same way in every list: ten
    entries had named their number in plain text, which a reader could not follow."""
    entries = soup(page).select("main div.citation, main aside.footnote")
    arxiv = [entry for entry in entries if "arxiv" in entry.get_text().lower()]
    unlinked = [entry.get_text(" ", strip=True)[:70] for entry in arxiv
                if not entry.select('a[href^="https://arxiv.org/abs/"]')]
    assert not unlinked, f"{page}: arXiv references without a link: {unlinked[:4]}"
    twice = [entry.get_text(" ", strip=True)[:70] for entry in arxiv
             if entry.get_text().count("arXiv:") > 1]
    assert not twice, f"{page}: references that name their arXiv number twice: {twice[:4]}"


#: A number, an ordinary space and a unit: a line may end between them.
NUMBER_SPACE_UNIT = re.compile(r"\d (?:ms|s|%|KB|MB|GB|KiB|MiB|GiB|px|min|µs|ns)(?!\w)")


@pytest.mark.parametrize("page", PAGES)
def test_a_number_keeps_its_unit_on_its_line(built_book: Path, page: str) -> None:
    """"20 ms", "60 %", "about 2 GB": the space between a number and its unit does not
    break, so no line starts with a unit (three pages had "20" at a line's end and "ms" on
    the next). Code and maths are left as they are."""
    article = soup(page).select_one("main article")
    loose = [text[max(0, match.start() - 15):match.end()]
             for text in article.find_all(string=True)
             if not text.find_parent(["code", "pre", "script", "style"])
             and not text.find_parent(class_="math")
             for match in NUMBER_SPACE_UNIT.finditer(text)]
    assert not loose, f"{page}: a unit may start a line in {len(loose)} places: {loose[:4]}"


#: What TeX looks like in plain text: a subscript, a command, a dollar, a superscript.
TEX_IN_TEXT = re.compile(r"[A-Za-z]_[A-Za-z0-9{]|\\[a-zA-Z]+|\$|\^")


@pytest.mark.parametrize("page", PAGES)
def test_a_reference_to_a_heading_shows_no_tex(built_book: Path, page: str) -> None:
    """A {ref} takes its words from the heading's plain text, so a heading with maths
    ("Folding the scale into $W_q$") was cited as "Folding the scale into W_q": such a
    reference names its own words."""
    references = soup(page).select("main article a.reference span.std-ref")
    raw = [ref.get_text() for ref in references if TEX_IN_TEXT.search(ref.get_text())]
    assert not raw, f"{page}: references that show TeX: {raw[:4]}"


@pytest.mark.parametrize("page", PAGES)
def test_no_unrendered_markup(built_book: Path, page: str) -> None:
    """A role or directive the parser did not know would show up as raw text."""
    text = soup(page).select_one("main").get_text(" ")
    for raw in ("{glue", "{prf:", "{exercise", "{solution", "{cite", "{footcite", "{ref}",
                "{numref}", "```"):
        assert raw not in text, f"{page} shows raw markup {raw!r}"


def test_extensions_render_on_the_notation_page(built_book: Path) -> None:
    html = soup("book/notation")
    assert html.select(".proof.definition, div.definition"), "no sphinx-proof definition"
    assert html.select(".exercise"), "no sphinx-exercise exercise"
    assert html.select(".solution"), "no sphinx-exercise solution"
    footnotes = html.select('aside.footnote, [role="doc-footnote"]')
    assert any("Attention is all you need" in f.get_text() for f in footnotes), \
        "the bibtex reference did not render"


def test_no_change_rebuild_executes_nothing(
        no_change_rebuild: subprocess.CompletedProcess[str]) -> None:
    result = no_change_rebuild
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert "Executing notebook" not in log, "a no-change rebuild re-executed a chapter"


SAMPLE_REPOSITORY = "https://github.com/example-org/attention-computed"


def button_links(html: BeautifulSoup) -> set[str]:
    """The addresses of the header's repository, issue and launch buttons."""
    return {a["href"] for a in html.select(".article-header-buttons a[href], "
                                           ".header-article-items a[href]")
            if a["href"].startswith("https://")}


def test_buttons_stay_off_without_a_repository_url(built_book: Path) -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == "", "the published build must not name a repository"
    for page in ("book/notation", *chapter_pages()):
        assert not button_links(soup(page)), f"{page} has a repository or launch button"


def test_setting_the_repository_url_switches_the_buttons_on(tmp_path: Path) -> None:
    """A test build of two pages with a sample repository address in the one setting (the
    front page's links to pages left out of it are let through)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["repository"]["url"] = SAMPLE_REPOSITORY
    config["sphinx"]["local_extensions"] = {"attnbook_sphinx": str(ROOT / "book" / "_ext")}
    config["sphinx"]["config"]["suppress_warnings"] = [
        *config["sphinx"]["config"].get("suppress_warnings", []), "ref.ref"]
    config_file = tmp_path / "_config.yml"
    config_file.write_text(yaml.safe_dump(config))
    toc_file = tmp_path / "_toc.yml"
    toc_file.write_text(yaml.safe_dump({"format": "jb-book", "root": "book/intro",
                                        "chapters": [{"file": "book/notation"}]}))
    result = run_build("--config", str(config_file), "--toc", str(toc_file),
                       "--path-output", str(tmp_path))
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    page = tmp_path / "_build" / "html" / "book" / "notation.html"
    links = button_links(BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser"))
    assert SAMPLE_REPOSITORY in links
    assert any(link.startswith(f"{SAMPLE_REPOSITORY}/issues/new") for link in links), links
    assert any(link.startswith("https://mybinder.org/v2/gh/example-org/attention-computed/")
               for link in links), links
    assert not any("colab" in link for link in links), "Colab cannot open MyST chapters"


def test_the_markup_repairs_reach_every_page(built_book: Path) -> None:
    """The extension's two accessibility repairs match the markup the pinned theme writes."""
    bibliography = soup("book/bibliography")
    lists = bibliography.select("div.citation-list")
    assert lists, "the bibliography page has no citation list to repair"
    assert all(div.get("role") is None for div in lists)
    toggles = 0
    for page in PAGES:
        text = (HTML / f"{page}.html").read_text(encoding="utf-8")
        assert not UNREPAIRED_CITATION_LIST.search(text), page
        assert not UNREPAIRED_TOGGLE.search(text), page
        toggles += sum("aria-label" not in summary.attrs
                       for summary in BeautifulSoup(text, "html.parser").select(
                           "details.hide summary"))
    assert toggles >= 20, f"only {toggles} cell toggles named by their text"


# -- the student edition ----------------------------------------------------------------------

STUDENT = HTML.parent / "student"
SOLUTION_BLOCK = re.compile(r"^```\{solution-start\}.*?^```\{solution-end\}", re.MULTILINE
                            | re.DOTALL)
#: Tags that take a cell's input off the page (``hide-input`` only folds it: still in the page).
REMOVED_INPUT = {"remove-input", "remove-cell"}


def solution_only_lines(source: str) -> list[str]:
    """For each worked solution of a chapter's MyST source that shows code, its longest code
    line that appears nowhere else in the chapter: text only the solution shows."""
    outside = SOLUTION_BLOCK.sub("", source)
    lines = []
    for block in SOLUTION_BLOCK.findall(source):
        code = [line.strip() for cell in parse_cells(block) if not cell.tags & REMOVED_INPUT
                for line in cell.code.splitlines()
                if len(line.strip()) > 12 and not line.lstrip().startswith("#")
                and line.strip() not in outside]
        if code:
            lines.append(max(code, key=len))
    return lines


def test_the_student_edition_has_every_exercise_and_no_worked_solution(
        student_build: tuple[float, subprocess.CompletedProcess[str]]) -> None:
    seconds, result = student_build
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"make student's build failed:\n{log[-6000:]}"
    assert "Executing notebook" not in log, "the student edition executed a chapter again"
    checked = 0
    for page in PAGES:
        source = (ROOT / f"{page}.md").read_text(encoding="utf-8")
        opened = source.count("```{solution-start}")
        full = soup(page)
        student = BeautifulSoup((STUDENT / f"{page}.html").read_text(encoding="utf-8"),
                                "html.parser")
        assert attnbook_sphinx.STUDENT_NOTE in str(student), f"{page}: no edition note"
        assert attnbook_sphinx.STUDENT_NOTE not in str(full)
        assert len(full.select("main .solution")) == opened, page
        assert not student.select("main .solution"), page
        assert len(student.select("main .exercise")) == len(full.select("main .exercise"))
        # The site's own repairs reach the student pages too, outside the solutions.
        for selector in (".attnbook-todo", ".attnbook-nowrap", "a.attnbook-figure-link"):
            outside = [tag for tag in full.select(f"main {selector}")
                       if tag.find_parent(class_="solution") is None]
            assert len(student.select(f"main {selector}")) == len(outside), (page, selector)
        full_text = full.select_one("main").get_text()
        student_text = student.select_one("main").get_text()
        for line in solution_only_lines(source):
            assert line in full_text, (page, line)
            assert line not in student_text, f"{page} shows its solution's {line!r}"
            checked += 1
        for offered in (STUDENT / "_sources").glob(f"{page}.*"):
            text = offered.read_text(encoding="utf-8")
            assert "solution-start" not in text and "solution-end" not in text, offered
            for line in solution_only_lines(source):
                assert json.dumps(line)[1:-1] not in text and line not in text, (offered, line)
    assert checked >= 40, checked  # the solutions with code, in every chapter that has them
    # The teacher's grading advice (how to grade, what the grader cannot stop) is left out
    # of the student edition's teaching page, and only there.
    advice = "a copy of its source passes"
    assert advice in soup("book/teaching").select_one("main").get_text(" ")
    assert advice not in (STUDENT / "book" / "teaching.html").read_text(encoding="utf-8")
    # No PDF in the student edition (the PDF is the full one): its front page says so.
    intro = (STUDENT / "book" / "intro.html").read_text(encoding="utf-8")
    assert not (STUDENT / attnbook_sphinx.PDF_NAME).exists()
    assert attnbook_sphinx.PDF_ABSENT in intro and attnbook_sphinx.PDF_LINK not in intro
    print(f"the student edition: built in {seconds:.0f} s, {checked} solutions' code checked")
