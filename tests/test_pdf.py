"""The PDF edition: the whole book through Sphinx's LaTeX builder and XeLaTeX.

One build per session (after the HTML book, whose execution cache it re-uses), then checks a
teacher would make before printing: every chapter and its figures are there, nothing reads
"??", LaTeX resolved every reference, and the site offers the PDF for download.

Needs TeX Live and poppler-utils: ``make test`` installs Debian's packages when run as root
(``make tex``) and otherwise says which to install.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from bs4 import BeautifulSoup
from conftest import BUILD, HTML, ROOT, toc_pages

pytestmark = pytest.mark.book

LATEX = BUILD / "latex"
#: The file name of the PDF, in the LaTeX output and at the root of the site.
PDF_NAME = Path(yaml.safe_load((ROOT / "_config.yml").read_text())["latex"]["latex_documents"]
                ["targetname"]).with_suffix(".pdf").name
#: A sensible length: ten chapters of 10 to 40 pages each, with front and back matter.
PAGE_RANGE = (120, 450)
#: What LaTeX writes to its log when a reference, a citation or a glyph is missing, or when
#: the last run still had references to settle. (The log wraps lines at 79 characters, so
#: these match the start of each message only.)
LOG_PROBLEMS = re.compile(
    r"LaTeX Warning: (?:Reference|Citation|Hyper reference)"
    r"|LaTeX Warning: There were undefined references"
    r"|LaTeX Warning: Label\(s\) may have changed"
    r"|Package natbib Warning: Citation"
    r"|Missing character: There is no"
)


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: `make test` installs TeX Live and poppler-utils "
                    "when run as root (`make tex`); otherwise install the packages it names")
    return path


def run(*command: str) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True,
                          timeout=300).stdout


def normalise(text: str) -> str:
    """Text as pdftotext gives it, with the typographic quotes and the ligatures LaTeX makes
    turned back into ASCII, soft hyphens dropped and whitespace collapsed."""
    table = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"',
                           "\u00ad": None, "\ufb01": "fi", "\ufb02": "fl", "\ufb00": "ff"})
    return " ".join(text.translate(table).split())


def chapter_titles() -> dict[str, str]:
    """The title (the first level-1 heading) of every page of the TOC but the front page."""
    titles = {}
    for page in toc_pages()[1:]:
        source = (ROOT / f"{page}.md").read_text(encoding="utf-8")
        match = re.search(r"^# (.+)$", source, re.MULTILINE)
        assert match, f"{page}.md has no title"
        titles[page] = match.group(1).strip()
    return titles


@pytest.fixture(scope="session")
def built_pdf(pdf_build: tuple[float, subprocess.CompletedProcess[str]],
              record_testsuite_property) -> Path:
    """``jupyter-book build . --builder pdflatex`` (what ``make pdf`` runs; conftest's
    background thread starts it when the HTML build is done), copied into the site as
    ``make pdf`` does."""
    for name in ("xelatex", "latexmk"):
        tool(name)
    seconds, result = pdf_build
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"the PDF build failed:\n{log[-6000:]}"
    pdf = LATEX / PDF_NAME
    assert pdf.is_file(), f"no {PDF_NAME} in {LATEX}:\n{log[-3000:]}"
    shutil.copyfile(pdf, HTML / PDF_NAME)
    # As make pdf does: the front page's line becomes a link now that the PDF is there.
    switch = subprocess.run([sys.executable, str(ROOT / "book" / "_ext" / "attnbook_sphinx.py"),
                             str(HTML)], capture_output=True, text=True)
    assert switch.returncode == 0 and "links to" in switch.stdout, switch.stdout + switch.stderr
    record_testsuite_property("pdf_build_seconds", round(seconds, 1))
    print(f"\nthe PDF edition built in {seconds:.0f} s")
    return pdf


@pytest.fixture(scope="session")
def pdf_text(built_pdf: Path) -> str:
    return run(tool("pdftotext"), "-enc", "UTF-8", str(built_pdf), "-")


def test_page_count_and_size(built_pdf: Path, record_property) -> None:
    info = run(tool("pdfinfo"), str(built_pdf))
    pages = int(re.search(r"^Pages:\s+(\d+)", info, re.MULTILINE).group(1))
    megabytes = built_pdf.stat().st_size / 1e6
    record_property("pages", pages)
    record_property("megabytes", round(megabytes, 1))
    print(f"\n{PDF_NAME}: {pages} pages, {megabytes:.1f} MB")
    assert PAGE_RANGE[0] <= pages <= PAGE_RANGE[1], f"{pages} pages"
    assert megabytes < 50, f"the PDF weighs {megabytes:.1f} MB"
    assert re.search(r"^Title:\s+Attention, Computed", info, re.MULTILINE), info


def contents_pages(pages: list[str]) -> list[int]:
    """The numbers of the pages of the table of contents: the ones full of dot leaders."""
    return [number for number, text in enumerate(pages, 1) if text.count(". . . . .") >= 5]


def test_the_pdf_has_a_table_of_contents(pdf_text: str) -> None:
    pages = pdf_text.split("\f")
    contents = contents_pages(pages)
    assert contents, "the PDF has no table of contents"
    assert contents == list(range(contents[0], contents[-1] + 1)), contents
    assert contents[0] <= 5, f"the contents start on page {contents[0]}"
    assert "contents" in normalise(pages[contents[0] - 1]).casefold()


@pytest.mark.parametrize(("page", "title"), chapter_titles().items())
def test_every_chapter_title_is_in_the_contents_and_the_text(pdf_text: str, page: str,
                                                              title: str) -> None:
    pages = pdf_text.split("\f")
    contents = contents_pages(pages)
    wanted = normalise(title).casefold()
    where = [number for number, text in enumerate(pages, 1)
             if wanted in normalise(text).casefold()]
    assert where, f"{page}: {title!r} is nowhere in the PDF"
    assert set(where) & set(contents), f"{page}: {title!r} is not in the table of contents"
    assert [n for n in where if n > max(contents)], f"{page}: {title!r} has no chapter"


#: Cells whose output the PDF leaves out, as sphinx-jupyterbook-latex does (hidden online).
HIDDEN_IN_PRINT = ".tag_hide-cell, .tag_hide-output"


def html_figures(page: str) -> tuple[int, int]:
    """What a page of the HTML book shows in its content: images (cell outputs and figures)
    and interactive widgets (an HTML output with a script: the attention explorer, the
    playgrounds), which the PDF shows as one still picture each."""
    html = BeautifulSoup((HTML / f"{page}.html").read_text(encoding="utf-8"), "html.parser")
    article = html.find("article") or html.find("main")
    for hidden in article.select(HIDDEN_IN_PRINT):
        hidden.decompose()
    widgets = [output for output in article.select(".output.text_html") if output.find("script")]
    return len(article.find_all("img")), len(widgets)


def latex_images_by_page(tex: str) -> dict[str, list[str]]:
    """The images the LaTeX source includes, by the page of the book they belong to."""
    starts = [(m.start(), m.group(1)) for m in
              re.finditer(r"\\label\{\\detokenize\{([^:}]+)::doc\}\}", tex)]
    found = {}
    for (begin, page), (end, _) in zip(starts, starts[1:] + [(len(tex), "")], strict=True):
        found[page] = ["".join(parts) for parts in re.findall(
            r"\\sphinxincludegraphics(?:\[[^\]]*\])?\{\{([^}]+)\}([^}]*)\}", tex[begin:end])]
    return found


@pytest.fixture(scope="session")
def tex_source(built_pdf: Path) -> str:
    return built_pdf.with_suffix(".tex").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", toc_pages())
def test_every_figure_of_the_html_page_is_in_the_pdf(tex_source: str, page: str) -> None:
    images, widgets = html_figures(page)
    included = latex_images_by_page(tex_source).get(page)
    assert included is not None, f"{page} is not in the LaTeX source"
    assert len(included) == images + widgets, (
        f"{page}: the LaTeX source includes {len(included)} images; the HTML page shows "
        f"{images} images and {widgets} interactive widgets")


def test_figures_keep_their_online_numbers(pdf_text: str) -> None:
    """A teacher who says "Fig. 4.2" means the same figure in print and online: the chapters
    are numbered alike (the notation page, unnumbered online, is chapter 0 in print)."""
    online = set()
    for page in toc_pages():
        html = BeautifulSoup((HTML / f"{page}.html").read_text(encoding="utf-8"), "html.parser")
        online |= {normalise(span.get_text()) for span in
                   html.select("figure .caption-number, .figure .caption-number")}
    online = {number for number in online if re.fullmatch(r"Fig\. \d+\.\d+", number)}
    assert len(online) >= 20, sorted(online)
    printed = set(re.findall(r"Fig\. \d+\.\d+", normalise(pdf_text)))
    assert printed == online, (f"only in print: {sorted(printed - online)}; "
                               f"only online: {sorted(online - printed)}")


def test_the_pdf_holds_every_included_image(built_pdf: Path, tex_source: str) -> None:
    included = [name for names in latex_images_by_page(tex_source).values() for name in names]
    assert len(included) >= 20, f"only {len(included)} images in the whole book"
    assert not [n for n in included if n.lower().endswith((".svg", ".html", ".gif"))]
    listing = run(tool("pdfimages"), "-list", str(built_pdf)).splitlines()[2:]
    images = [line for line in listing if line.split()[2] == "image"]
    assert len(images) == len(included), (
        f"pdfimages finds {len(images)} images in the PDF; the LaTeX source includes "
        f"{len(included)}")


def test_interactive_widgets_are_still_pictures_in_print(tex_source: str) -> None:
    pages = [page for page in toc_pages() if html_figures(page)[1]]
    assert "book/attention-maps" in pages, "the HTML book shows no attention explorer"
    # What the HTML page shows as a widget, the LaTeX source holds as a PNG (the widget's
    # own still picture, which carries the note that the online edition is interactive).
    assert "attnx-" not in tex_source and "<script" not in tex_source
    by_page = latex_images_by_page(tex_source)
    for page in pages:
        assert all(name.endswith(".png") for name in by_page[page]), by_page[page]


#: LaTeX's sectioning commands, outermost first.
HEADING_LEVELS = ("part", "chapter", "section", "subsection", "subsubsection")
HEADING = re.compile(r"^\\(" + "|".join(HEADING_LEVELS) + r")\*?\{.*$", re.MULTILINE)
#: What Sphinx writes after a heading that prints nothing.
INVISIBLE = re.compile(r"\\label\{\\detokenize\{[^}]*\}\}|\\sphinxstepscope|\s+")


def test_no_heading_prints_alone(tex_source: str) -> None:
    """A heading with nothing under it before the next heading of its level or higher (such
    as a "References" section whose citations all became footnotes) would print bare."""
    body = tex_source[tex_source.index(r"\begin{document}"):tex_source.index(r"\end{document}")]
    headings = list(HEADING.finditer(body))
    assert len(headings) >= 30
    bare = []
    for here, after in zip(headings, headings[1:] + [None], strict=True):
        level = HEADING_LEVELS.index(here.group(1))
        if after is not None and HEADING_LEVELS.index(after.group(1)) > level:
            continue  # its content is the subsections that follow
        content = body[here.end():after.start() if after else len(body)]
        if not INVISIBLE.sub("", content).replace(r"\backmatter", ""):
            bare.append(here.group(0))
    assert not bare, f"{len(bare)} headings print with nothing under them: {bare[:5]}"


def test_no_unresolved_reference_in_the_text(pdf_text: str) -> None:
    text = normalise(pdf_text)
    for marker in ("??", "[?]"):
        at = text.find(marker)
        assert at < 0, f"the PDF reads {marker!r}: ...{text[max(0, at - 120):at + 60]}..."


def test_latex_log_has_no_undefined_reference_or_missing_glyph(built_pdf: Path) -> None:
    log = built_pdf.with_suffix(".log").read_text(encoding="utf-8", errors="replace")
    problems = [log[m.start():m.start() + 160] for m in LOG_PROBLEMS.finditer(log)]
    assert not problems, f"{len(problems)} problems in the LaTeX log:\n" + "\n".join(problems[:10])


def squash(text: str) -> str:
    """Letters and digits only, lower case: immune to line breaks, hyphenation and case."""
    return re.sub(r"[^0-9a-z]", "", normalise(text).casefold())


def test_equations_are_numbered_and_referenced(tex_source: str, pdf_text: str) -> None:
    labelled = re.findall(r"\\begin\{equation\}\\label\{equation:([^}]+)\}", tex_source)
    assert len(labelled) >= 5, f"only {len(labelled)} numbered equations"
    assert len({label.split(":")[0] for label in labelled}) >= 3  # in several chapters
    referenced = set(re.findall(r"\\eqref\{equation:([^}]+)\}", tex_source))
    assert referenced, "no {eq} reference reached the LaTeX source"
    assert referenced <= set(labelled), f"references to no equation: {referenced - set(labelled)}"
    # Each printed as "(chapter.number)": at the equation and at every reference to it.
    printed = re.findall(r"\(\d+\.\d+\)", normalise(pdf_text))
    assert len(printed) >= len(labelled) + len(referenced), (len(printed), len(labelled))


def test_the_bibliography_lists_every_work(pdf_text: str) -> None:
    bibliography = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    titles = re.findall(r"^\s*title\s*=\s*[{\"]+(.+?)[}\"]+,?\s*$", bibliography,
                        re.MULTILINE | re.IGNORECASE)
    assert len(titles) >= 10
    # The list of works closes the book, numbered from [1].
    back = squash(pdf_text[pdf_text.rfind("[1]"):])
    missing = [title for title in titles if squash(title)[:40] not in back]
    assert not missing, f"{len(missing)} of {len(titles)} works missing: {missing[:5]}"


def test_site_offers_the_pdf_from_the_front_page(built_pdf: Path) -> None:
    site_copy = HTML / PDF_NAME
    assert site_copy.read_bytes() == built_pdf.read_bytes()
    intro = BeautifulSoup((HTML / "book" / "intro.html").read_text(encoding="utf-8"),
                          "html.parser")
    links = [a["href"] for a in intro.select("main a[href]")
             if urlsplit(a["href"]).path.endswith(".pdf")]
    assert links, "the front page does not link to the PDF"
    for href in links:
        target = (HTML / "book" / urlsplit(href).path).resolve()
        assert target == site_copy.resolve(), f"the front page links to {href}"


def test_the_pdf_states_its_licences_and_edition(pdf_text: str) -> None:
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    # Hyphenation may break a word at a line end: compare with the hyphens taken out.
    text = re.sub(r"(\w)- (\w)", r"\1\2", normalise(pdf_text))
    assert "CC BY 4.0" in text and "MIT licence" in text
    assert f"This is edition {version}." in text
