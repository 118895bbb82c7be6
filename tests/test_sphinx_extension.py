"""The book's Sphinx extension (book/_ext/attnbook_sphinx.py), hook by hook.

Most tests call a hook with the objects Sphinx would pass it; the last one builds a two-page
book to see the whole build react to a warning.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from docutils import nodes

sys.path.insert(0, str(ROOT / "book" / "_ext"))
import attnbook_sphinx  # noqa: E402


def test_fingerprint_follows_the_package(tmp_path: Path) -> None:
    (tmp_path / "code" / "attnbook").mkdir(parents=True)
    module = tmp_path / "code" / "attnbook" / "attention.py"
    module.write_text("x = 1\n")
    (tmp_path / "requirements.txt").write_text("torch==2.13.0\n")
    first = attnbook_sphinx.fingerprint(tmp_path)
    assert attnbook_sphinx.fingerprint(tmp_path) == first
    module.write_text("x = 2\n")
    second = attnbook_sphinx.fingerprint(tmp_path)
    assert second != first
    (tmp_path / "requirements.txt").write_text("torch==2.13.1\n")
    third = attnbook_sphinx.fingerprint(tmp_path)
    assert third not in (first, second)
    # An asset the package ships into the page re-executes the chapters too; bytecode does not.
    assets = tmp_path / "code" / "attnbook" / "playground_assets"
    assets.mkdir()
    (assets / "dot.js").write_text("let x = 1;\n")
    fourth = attnbook_sphinx.fingerprint(tmp_path)
    assert fourth != third
    (assets / "dot.css").write_text(".x {}\n")
    assert attnbook_sphinx.fingerprint(tmp_path) != fourth
    fifth = attnbook_sphinx.fingerprint(tmp_path)
    bytecode = tmp_path / "code" / "attnbook" / "__pycache__"
    bytecode.mkdir()
    (bytecode / "attention.cpython-311.pyc").write_bytes(b"\0")
    assert attnbook_sphinx.fingerprint(tmp_path) == fifth


def test_changed_package_clears_the_execution_cache(tmp_path: Path) -> None:
    (tmp_path / "code" / "attnbook").mkdir(parents=True)
    module = tmp_path / "code" / "attnbook" / "layers.py"
    module.write_text("x = 1\n")
    build = tmp_path / "_build"
    cache = build / ".jupyter_cache"
    doctrees = build / ".doctrees"
    app = types.SimpleNamespace(srcdir=str(tmp_path), outdir=str(build / "html"),
                                doctreedir=str(doctrees))
    config = {"nb_execution_cache_path": ""}

    def fill() -> None:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "global.db").write_text("cached")
        doctrees.mkdir(parents=True, exist_ok=True)
        (doctrees / "environment.pickle").write_text("env")

    attnbook_sphinx.invalidate_stale_cache(app, config)  # first build records the state
    fill()
    attnbook_sphinx.invalidate_stale_cache(app, config)  # nothing changed: cache kept
    assert (cache / "global.db").exists() and (doctrees / "environment.pickle").exists()
    module.write_text("x = 2\n")
    attnbook_sphinx.invalidate_stale_cache(app, config)  # package changed: cache cleared
    assert not cache.exists()
    assert not (doctrees / "environment.pickle").exists()


BIBLIOGRAPHY_AS_PINNED = '<div role="list" class="citation-list"><div role="doc-biblioentry">'
TOGGLE_AS_PINNED = '<details class="hide above-input"><summary aria-label="Toggle hidden content">'


@pytest.mark.parametrize(("hook", "pinned", "repaired"), [
    (attnbook_sphinx.fix_citation_list_role, BIBLIOGRAPHY_AS_PINNED,
     '<div class="citation-list"><div role="doc-biblioentry">'),
    (attnbook_sphinx.name_cell_toggles_by_their_text, TOGGLE_AS_PINNED,
     '<details class="hide above-input"><summary>'),
])
def test_repairs_fix_the_pinned_markup_silently(hook, pinned: str, repaired: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    context = {"body": f"<p>before</p>{pinned}<p>after</p>"}
    with caplog.at_level(logging.WARNING):
        hook(None, "book/page", "page.html", context, None)
    assert context["body"] == f"<p>before</p>{repaired}<p>after</p>"
    assert not caplog.records


@pytest.mark.parametrize(("hook", "changed"), [
    # The same markup with its attributes in another order, or one more attribute.
    (attnbook_sphinx.fix_citation_list_role, '<div class="citation-list" role="list">'),
    (attnbook_sphinx.fix_citation_list_role, '<div role="list" class="citation-list wide">'),
    (attnbook_sphinx.name_cell_toggles_by_their_text,
     '<summary class="x" aria-label="Toggle hidden content">'),
])
def test_repairs_warn_when_the_markup_changed_form(hook, changed: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A theme upgrade that changes the markup fails the strict build instead of being
    silently left unrepaired."""
    context = {"body": f"<p>text</p>{changed}"}
    with caplog.at_level(logging.WARNING):
        hook(None, "book/page", "page.html", context, None)
    assert [record.levelno for record in caplog.records] == [logging.WARNING]
    assert "book/page" in caplog.records[0].getMessage()


def test_pages_without_the_markup_are_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    for hook in (attnbook_sphinx.fix_citation_list_role,
                 attnbook_sphinx.name_cell_toggles_by_their_text):
        context = {"body": '<div role="list" class="other"><summary>Show</summary></div>'}
        before = dict(context)
        with caplog.at_level(logging.WARNING):
            hook(None, "book/page", "page.html", context, None)
        assert context == before
    assert not caplog.records


def counted(counter: attnbook_sphinx.WarningCounter, *entries: tuple) -> int:
    """Log ``(level, type, subtype)`` entries through a logger that ``counter`` listens to."""
    logger = logging.getLogger("attnbook-test-counter")
    logger.propagate = False
    logger.addHandler(counter)
    try:
        for level, type_, subtype in entries:
            extra = {} if type_ is None else {"type": type_, "subtype": subtype}
            logger.log(level, "message", extra=extra)
    finally:
        logger.removeHandler(counter)
    return counter.count


def test_warning_counter_counts_as_sphinx_does() -> None:
    app = types.SimpleNamespace(config=types.SimpleNamespace(
        suppress_warnings=["myst.header", "attnbook.*"]))
    counter = attnbook_sphinx.WarningCounter(app)
    # Silenced by suppress_warnings, and below the warning level: not counted.
    assert counted(counter, (logging.WARNING, "myst", "header"),
                   (logging.WARNING, "attnbook", "markup"), (logging.INFO, None, None)) == 0
    assert counted(counter, (logging.WARNING, "myst", "xref_missing"),
                   (logging.ERROR, None, None)) == 2


def test_warning_counter_works_before_the_configuration_exists() -> None:
    counter = attnbook_sphinx.WarningCounter(types.SimpleNamespace())
    assert counted(counter, (logging.WARNING, "myst", "header")) == 1


@pytest.mark.book
@pytest.mark.parametrize("broken", [False, True])
def test_a_warning_build_is_read_again_next_time(tmp_path: Path, broken: bool) -> None:
    """Sphinx keeps its environment after a strict build fails on a warning; the extension
    deletes it, so the next run reads the page again and fails again."""
    book = tmp_path / "book"
    book.mkdir()
    config = {"title": "Two builds", "execute": {"execute_notebooks": "off"},
              "sphinx": {"local_extensions": {"attnbook_sphinx": str(ROOT / "book" / "_ext")}}}
    (book / "_config.yml").write_text(yaml.safe_dump(config))
    (book / "_toc.yml").write_text(yaml.safe_dump({"format": "jb-book", "root": "index"}))
    target = "nowhere" if broken else "home"
    (book / "index.md").write_text(f"(home)=\n# Home\n\nSee {{ref}}`{target}`.\n")
    command = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(book),
               "-W", "-n", "--keep-going"]
    environment = book / "_build" / ".doctrees" / "environment.pickle"
    for _ in range(2):
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        log = result.stdout + result.stderr
        assert (result.returncode != 0) == broken, log[-3000:]
        assert environment.exists() != broken, log[-3000:]
    assert ("nowhere" in log) == broken


def test_front_page_links_to_the_pdf_only_when_it_is_there(tmp_path: Path) -> None:
    page = tmp_path / "book" / "intro.html"
    page.parent.mkdir()
    page.write_text(f"<p>In print: {attnbook_sphinx.PDF_LINK}.</p>", encoding="utf-8")
    assert attnbook_sphinx.point_pdf_link(tmp_path) is False
    assert attnbook_sphinx.PDF_ABSENT in page.read_text() and "href" not in page.read_text()
    (tmp_path / attnbook_sphinx.PDF_NAME).write_bytes(b"%PDF-1.7")
    assert attnbook_sphinx.point_pdf_link(tmp_path) is True
    assert page.read_text() == f"<p>In print: {attnbook_sphinx.PDF_LINK}.</p>"
    page.write_text("<p>In print: a link in a new form.</p>", encoding="utf-8")
    with pytest.raises(ValueError, match="update PDF_LINK"):
        attnbook_sphinx.point_pdf_link(tmp_path)


def test_a_checkers_to_do_on_a_starter_is_marked_and_other_errors_are_not() -> None:
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    document = new_document("page", get_default_settings(Parser))
    outputs = {
        "todo": nodes.literal_block("", "To do: check_x: f(x) is not written yet (...)\n",
                                    classes=["output", "traceback"]),
        "error": nodes.literal_block("", "ExerciseCheckError: check_x: check 1 failed\n",
                                     classes=["output", "traceback"]),
        "printed": nodes.literal_block("", "To do: a line a cell printed\n",
                                       classes=["output", "stream"]),
    }
    for block in outputs.values():
        document += block
    attnbook_sphinx.MarkStartersTodo(document).run()
    marked = {name for name, block in outputs.items() if "attnbook-todo" in block["classes"]}
    assert marked == {"todo"}


def _page(*children: nodes.Node, env: object = None) -> nodes.document:
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    document = new_document("page", get_default_settings(Parser))
    document.settings.env = env
    paragraph = nodes.paragraph()
    paragraph.extend(children)
    document += paragraph
    return document


@pytest.mark.parametrize(("before", "after", "kept", "left"), [
    ("the weights ", ", which sum to one.", "ø,", ["the weights ", " which sum to one."]),
    ("a score (", ") each.", "(ø)", ["a score ", " each."]),
    ("is ", "\u2019s row", "ø\u2019", ["is ", "s row"]),
    ("so ", ".", "ø.", ["so "]),
])
def test_punctuation_touching_a_formula_is_kept_on_its_line(before: str, after: str,
                                                           kept: str, left: list[str]) -> None:
    document = _page(nodes.Text(before), nodes.math("", "ø"), nodes.Text(after))
    attnbook_sphinx.KeepPunctuationWithMaths(document).run()
    paragraph = document[0]
    spans = [child for child in paragraph if isinstance(child, nodes.inline)]
    assert len(spans) == 1 and spans[0]["classes"] == ["attnbook-nowrap"]
    assert spans[0].astext() == kept
    assert [child.astext() for child in paragraph if isinstance(child, nodes.Text)] == left
    assert paragraph.astext() == before + "ø" + after


def test_punctuation_equal_to_text_elsewhere_in_the_paragraph_moves_once() -> None:
    """Text nodes compare as strings: the "." after the formula is the one that moves, not
    an equal "." earlier in the paragraph (which doubled full stops in three chapters)."""
    document = _page(nodes.Text("."), nodes.math("", "a"), nodes.Text("."),
                     nodes.Text(", "), nodes.math("", "b"), nodes.Text(", "))
    attnbook_sphinx.KeepPunctuationWithMaths(document).run()
    paragraph = document[0]
    assert paragraph.astext() == ".a., b, "
    assert [span.astext() for span in paragraph.findall(nodes.inline)] == ["a.", "b,"]


def test_a_formula_with_spaces_around_it_is_left_alone() -> None:
    document = _page(nodes.Text("then "), nodes.math("", "x"), nodes.Text(" is"))
    attnbook_sphinx.KeepPunctuationWithMaths(document).run()
    assert not list(document.findall(nodes.inline))
    assert document[0].astext() == "then x is"


@pytest.mark.parametrize(("words", "outside", "inside"), [
    (" Exercise 9.2", ["Solution to", " "], "Exercise 9.2"),
    ("Exercise 9.2 ", ["Solution to", " "], "Exercise 9.2"),
    (" both ", ["Solution to", " ", " "], "both"),
    ("Exercise 9.2", ["Solution to"], "Exercise 9.2"),
])
def test_a_link_starts_and_ends_with_its_words(words: str, outside: list[str],
                                              inside: str) -> None:
    """sphinx-exercise's solution titles link " Exercise 9.2", space first: the space moves
    out of the link, so its underline starts at the word."""
    link = nodes.reference("", "", nodes.Text(words), refuri="#ex")
    document = _page(nodes.Text("Solution to"), link)
    attnbook_sphinx.KeepSpacesOutOfLinks(document).run()
    paragraph = document[0]
    assert link.astext() == inside
    assert [child.astext() for child in paragraph if isinstance(child, nodes.Text)] == outside
    assert paragraph.astext() == "Solution to" + words


def test_a_footnote_citation_stays_with_the_word_before_it() -> None:
    """"uses this mask [2]": the space before the citation does not break, so "[2]" never
    starts a line alone; a citation that touches its word is left as it is."""
    spaced = nodes.footnote_reference("", "2", refid="f2")
    touching = nodes.footnote_reference("", "3", refid="f3")
    broken = nodes.footnote_reference("", "4", refid="f4")
    document = _page(nodes.Text("the decoder uses this mask "), spaced, nodes.Text(". Then"),
                     touching, nodes.Text(" as a source line ends\n"), broken)
    attnbook_sphinx.KeepCitationsWithTheirWord(document).run()
    paragraph = document[0]
    assert paragraph.astext() == ("the decoder uses this mask\u00a02. Then3"
                                  " as a source line ends\u00a04")
    assert paragraph[1] is spaced and paragraph[3] is touching and paragraph[5] is broken


def test_short_inline_code_is_marked_to_stay_whole() -> None:
    short = nodes.literal("", "make book")
    edge = nodes.literal("", "x" * attnbook_sphinx.SHORT_CODE)
    long = nodes.literal("", "torch.nn.functional.scaled_dot_product_attention")
    document = _page(short, nodes.Text(" and "), edge, nodes.Text(" then "), long)
    attnbook_sphinx.KeepShortCodeWhole(document).run()
    assert "attnbook-whole" in short["classes"] and "attnbook-whole" in edge["classes"]
    assert "attnbook-whole" not in long["classes"]


def test_a_number_and_its_unit_are_joined_by_a_no_break_space() -> None:
    """"20 ms", "60 %", "2 GB" are joined; "3 sizes", "5 minutes" and code are not; a glued
    number (an element) followed by " ms" is joined too."""
    glued = nodes.inline("", "", nodes.Text("20"))
    code = nodes.literal("", "sleep 2 s")
    document = _page(nodes.Text("every 20 ms, 60 % or 2 GB; 3 sizes, 5 minutes "), code,
                     nodes.Text(" and "), glued, nodes.Text(" ms apart"))
    attnbook_sphinx.KeepNumbersWithTheirUnits(document).run()
    nbsp = "\u00a0"
    assert document[0].astext() == (f"every 20{nbsp}ms, 60{nbsp}% or 2{nbsp}GB; 3 sizes, "
                                    f"5 minutes sleep 2 s and 20{nbsp}ms apart")


def test_a_figure_in_a_cell_output_links_to_its_picture(caplog) -> None:
    builder = types.SimpleNamespace(get_target_uri=lambda docname: f"{docname}.html")
    env = types.SimpleNamespace(
        docname="book/scaling", app=types.SimpleNamespace(builder=builder),
        temp_data={}, images={"_build/jupyter_execute/a.svg": ({"book/scaling"}, "a b.svg")})

    def image(uri: str) -> nodes.image:
        return nodes.image(uri=uri, candidates={"image/svg+xml": uri})

    in_output = nodes.container(classes=["cell_output"])
    in_output += image("_build/jupyter_execute/a.svg")
    unknown = nodes.container(classes=["cell_output"])
    unknown += image("_build/jupyter_execute/missing.svg")
    document = _page(nodes.Text("x"), env=env)
    document += [in_output, unknown, image("book/logo.svg")]
    attnbook_sphinx.LinkFiguresToTheirFile(document).run()
    links = list(document.findall(nodes.reference))
    assert len(links) == 1
    assert links[0]["refuri"] == "../_images/a%20b.svg"
    assert isinstance(links[0][0], nodes.image) and links[0].parent is in_output
    assert "missing.svg" in caplog.text


def test_a_change_to_the_sites_style_rewrites_every_page(tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    style = tmp_path / "book" / "_static" / "attnbook.css"
    style.parent.mkdir(parents=True)
    style.write_text("a { color: red; }\n")
    (tmp_path / "book" / "intro.md").write_text("# Intro\n")
    app = types.SimpleNamespace(srcdir=str(tmp_path))
    env = types.SimpleNamespace(found_docs={"book/intro", "book/scaling"})

    def outdated() -> list[str]:
        return attnbook_sphinx.rewrite_pages_when_site_files_change(app, env, set(), set(),
                                                                    set())

    assert outdated() == ["book/intro", "book/scaling"]  # the first build that knows
    assert outdated() == []
    (tmp_path / "book" / "intro.md").write_text("# Intro, changed\n")  # Sphinx sees that
    assert outdated() == []
    style.write_text("a { color: blue; }\n")
    assert outdated() == ["book/intro", "book/scaling"]
    assert "writing every page again" in caplog.text
    assert outdated() == []


CHAPTER_WITH_SOLUTIONS = """\
# A chapter

```{exercise-start}
:label: x-ex1
```

Write `f`.

```{code-cell} ipython3
def f():
    raise NotImplementedError
```

```{exercise-end}
```

```{solution-start} x-ex1
:class: dropdown
```

The worked answer says why.

```{code-cell} ipython3
def f():
    return 42  # the worked answer
```

```{solution-end}
```

Text between the two.

```{solution-start} x-ex1
```

A second worked answer.

```{solution-end}
```
"""


def test_the_student_sources_keep_the_exercise_and_lose_the_solutions() -> None:
    stripped = attnbook_sphinx.without_solutions(CHAPTER_WITH_SOLUTIONS)
    assert "worked answer" not in stripped and "solution-" not in stripped
    assert "raise NotImplementedError" in stripped and "Text between the two." in stripped
    assert stripped.rstrip().endswith("Text between the two.")
    with pytest.raises(ValueError, match="without its"):
        attnbook_sphinx.without_solutions(CHAPTER_WITH_SOLUTIONS.rsplit("```{solution-end}",
                                                                        1)[0])
    # Windows line endings, colon fences and longer fences are stripped the same way.
    assert attnbook_sphinx.without_solutions(CHAPTER_WITH_SOLUTIONS.replace("\n", "\r\n")) \
        == stripped.replace("\n", "\r\n")
    colons = (":::{solution-start} x-ex1\nThe worked answer.\n:::\n\n:::{solution-end}\n:::\n"
              "After.\n")
    assert attnbook_sphinx.without_solutions(colons) == "After.\n"
    fours = "````{solution-start} x-ex1\n````\nThe worked answer.\n````{solution-end}\n````\n"
    assert attnbook_sphinx.without_solutions(fours) == ""
    # What it cannot strip, it refuses: the student edition never offers a solution.
    for form in ("```{solution} x-ex1\nThe worked answer.\n```\n",
                 "```{solution-end}\n```\n", "```{solution-start} x\n```\nopen\n"):
        with pytest.raises(ValueError, match="solution"):
            attnbook_sphinx.without_solutions(form)


def test_the_student_notebooks_keep_the_exercise_and_lose_the_solutions() -> None:
    import jupytext

    notebook = jupytext.reads("---\njupytext:\n  text_representation:\n    format_name: myst\n"
                              "kernelspec:\n  name: python3\n  display_name: Python 3\n---\n"
                              + CHAPTER_WITH_SOLUTIONS, fmt="myst")
    assert sum(cell.cell_type == "code" for cell in notebook.cells) == 2
    stripped = attnbook_sphinx.notebook_without_solutions(notebook)
    sources = [cell.source for cell in stripped.cells]
    assert [cell.cell_type for cell in stripped.cells].count("code") == 1
    assert not any("worked answer" in s or "solution-" in s for s in sources), sources
    assert any("Text between the two." in s for s in sources)
    assert any("exercise-end" in s for s in sources)
    unclosed = jupytext.reads(CHAPTER_WITH_SOLUTIONS.rsplit("```{solution-end}", 1)[0],
                              fmt="myst")
    with pytest.raises(ValueError, match="without its"):
        attnbook_sphinx.notebook_without_solutions(unclosed)
    # A notebook without solutions comes back as it was, blank lines and all.
    plain = jupytext.reads("# Title\n\n\nText.\n\n```{code-cell} ipython3\nx = 1\n```\n",
                           fmt="myst")
    before = [cell.source for cell in plain.cells]
    assert [c.source for c in attnbook_sphinx.notebook_without_solutions(plain).cells] == before


def test_an_offered_source_that_cannot_be_stripped_is_not_offered(tmp_path: Path) -> None:
    sources = tmp_path / "_sources" / "book"
    sources.mkdir(parents=True)
    (sources / "good.md").write_text(CHAPTER_WITH_SOLUTIONS, encoding="utf-8")
    (sources / "bad.md").write_text("```{solution} x\nThe worked answer.\n```\n")
    attnbook_sphinx.strip_offered_sources(tmp_path, "book/good")
    assert "worked answer" not in (sources / "good.md").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="cannot leave it out"):
        attnbook_sphinx.strip_offered_sources(tmp_path, "book/bad")
    assert not (sources / "bad.md").exists()


def test_the_student_edition_removes_every_solution_from_a_page() -> None:
    from sphinx_exercise.nodes import exercise_node, solution_node

    document = _page(nodes.Text("x"))
    exercise, solution = exercise_node(), solution_node()
    solution += nodes.paragraph(text="the worked answer")
    section = nodes.section()
    section += [exercise, solution, nodes.paragraph(text="after")]
    document += section
    attnbook_sphinx.LeaveOutSolutions(document).run()
    assert not list(document.findall(solution_node))
    assert list(document.findall(exercise_node)) and "after" in document.astext()
    assert "worked answer" not in document.astext()
    assert attnbook_sphinx.LeaveOutSolutions.builders == ("student",)


def test_the_teaching_page_runs_again_when_a_chapter_changes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Its cells read the chapters: a chapter edit drops its cached outputs, and only then."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    caplog.set_level(logging.INFO)
    (tmp_path / "book").mkdir()
    (tmp_path / "_toc.yml").write_text("root: book/intro\n")
    chapter = tmp_path / "book" / "scaling.md"
    chapter.write_text("# Scaling\n")
    teaching = tmp_path / "book" / "teaching.md"
    teaching.write_text("# Teaching\n")
    build = tmp_path / "_build"
    cache = get_cache(str(build / ".jupyter_cache"))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    cache.cache_notebook_bundle(CacheBundleIn(notebook, uri=str(teaching)),
                                check_validity=False)
    app = types.SimpleNamespace(srcdir=str(tmp_path), outdir=str(build / "html"),
                                config={"nb_execution_cache_path": ""})
    env = types.SimpleNamespace()

    def outdated() -> list[str]:
        return attnbook_sphinx.reexecute_pages_that_read_the_book(app, env, set(), set(),
                                                                  set())

    assert outdated() == []  # the first build that knows records what the page read
    assert outdated() == []
    assert len(cache.list_cache_records()) == 1
    chapter.write_text("# Scaling, with one more word\n")
    assert outdated() == ["book/teaching"]
    assert cache.list_cache_records() == []  # so myst-nb executes the page again
    assert "book/teaching reads files that changed" in caplog.text
    assert outdated() == []
