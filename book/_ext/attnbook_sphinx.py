"""Build rules of the book that Jupyter Book's configuration cannot express.

Every hook this extension connects, in the order of a build:

``config-inited``
    :func:`invalidate_stale_cache`: myst-nb's execution cache keys on the cells' source only,
    so a change to the ``attnbook`` package (its Python and the assets it ships into pages)
    or to the pinned requirements would leave stale outputs. A fingerprint of those files
    decides; when it changes, the execution cache and Sphinx's saved environment are cleared
    and every chapter runs again.

    :func:`drive_buttons_from_repository`: the repository, issue and Binder launch buttons
    are on exactly when ``repository.url`` is set in ``_config.yml``.

    :func:`keep_one_search_field`: no second search field in a header bar.

``env-get-outdated``
    :func:`rewrite_pages_when_site_files_change`: Sphinx writes nothing when no page changed,
    not even the static files; a change to the site's stylesheet, script or templates makes
    every page out of date.

    :func:`reexecute_pages_that_read_the_book`: the teaching page's cells read the chapters
    and the exercise folders (words, times, points); its cached outputs are dropped and the
    page runs again when one of those changes, though its own cells did not.

``html-page-context``
    :func:`offer_executed_notebook`: every chapter offers its executed notebook (``.ipynb``,
    with outputs) next to its MyST source; the student edition strips both of the worked
    solutions (:func:`without_solutions`, :func:`notebook_without_solutions`).

    :func:`fix_citation_list_role` and :func:`name_cell_toggles_by_their_text`: two
    accessibility repairs of the theme's and myst-nb's markup. Each warns (which fails the
    strict build) when the markup it repairs appears in a form it does not recognise.

post-transforms of the web pages
    :class:`MarkStartersTodo`: a checker's "To do" on an untouched starter is framed as a
    task, not as an error. :class:`KeepPunctuationWithMaths`: the comma or full stop after
    an inline formula never starts a line alone. :class:`LinkFiguresToTheirFile`: a figure
    is a link to its picture, which a phone reader opens full size. Line breaks that split
    what reads as one thing: :class:`KeepShortCodeWhole` (short inline code),
    :class:`KeepCitationsWithTheirWord` ("[2]"), :class:`KeepNumbersWithTheirUnits`
    ("20 ms"); and :class:`KeepSpacesOutOfLinks` (a link's underline starts at its word).

the builder ``student`` (:class:`StudentEditionBuilder`, ``make student``)
    The student edition: the site without the worked solutions, in ``_build/student``. It
    shares the saved environment and the execution cache of ``_build``, so after a full
    build it executes and reads nothing, and only writes the pages. The post-transform
    :class:`LeaveOutSolutions` removes every worked solution from its pages
    (sphinx-exercise's own ``hide_solutions`` drops only the opening of a gated solution,
    and the solution's text and code would show); :func:`render_student_pages_as_html`
    lets myst-nb render its outputs as for the site, :func:`name_student_edition` names the
    edition in every footer, and the builder strips the chapters' sources and notebooks it
    offers for download (:func:`strip_offered_sources`).

post-transform :class:`DropEmptySectionsInPrint`
    In the PDF, citations are footnotes on their pages, so each chapter's "References"
    section would print as a bare heading: such empty sections are left out of print.

``build-finished``
    :func:`copy_mathjax`: MathJax is served from the site itself, so the built HTML requests
    nothing from another host (``HF_HUB_OFFLINE=1`` in every kernel, set in :func:`setup`,
    keeps the build itself offline too).

    :func:`link_pdf_when_built`: the front page links to the PDF edition only when the PDF
    is in the site; ``make pdf`` calls :func:`point_pdf_link` again after copying it there.

    :func:`forget_failed_build`: after a build that failed or warned, the next build reads
    every page again (:class:`WarningCounter` counts the warnings).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging as std_logging
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.builders.html import StandaloneHTMLBuilder
from sphinx.config import Config
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: Files whose content decides whether cached chapter outputs are still valid.
#: What the chapters' outputs depend on besides their own cells: the package's code and the
#: assets it ships into the page (the playgrounds' and explorer's scripts and styles).
FINGERPRINT_GLOBS = ("code/attnbook/**/*.py", "code/attnbook/**/*.js", "code/attnbook/**/*.css",
                     "code/attnbook/**/*.html", "requirements.txt",
                     "requirements-student.txt", "pyproject.toml")
FINGERPRINT_FILE = ".attnbook-fingerprint"
#: The site's own stylesheet, script and page templates: a change to one must reach the
#: built site though no chapter changed.
SITE_GLOBS = ("book/_static/**/*", "book/_templates/**/*")
#: Pages whose cells read other files of the book, and those files: the teaching page counts
#: every chapter's words and exercises and reads the exercise folders' grading.
READS_THE_BOOK = {"book/teaching": ("_toc.yml", "book/*.md", "exercises/*/grading.toml",
                                    "exercises/*/test_*.py")}
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
#: What every chapter's kernel inherits (unless the caller set it): offline, and OpenMP threads
#: that sleep when idle. Chapters that time many small kernels (blockwise attention, short
#: training loops) run several times slower when idle threads spin on a shared 2-core machine.
KERNEL_ENV = {**OFFLINE_ENV, "OMP_WAIT_POLICY": "PASSIVE"}


def fingerprint(root: Path, globs: tuple[str, ...] = FINGERPRINT_GLOBS) -> str:
    """A hash of the files under ``root`` that ``globs`` match (by default the package
    sources and the pinned requirements)."""
    digest = hashlib.sha256()
    for pattern in globs:
        for path in sorted(p for p in root.glob(pattern) if p.is_file()):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(b"\0")
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()


def _cache_dir(app: Sphinx, config: Config) -> Path:
    configured = config["nb_execution_cache_path"]
    if configured:
        return Path(configured)
    return Path(app.outdir).parent / ".jupyter_cache"


def invalidate_stale_cache(app: Sphinx, config: Config) -> None:
    """Clear the execution cache and the saved environment when the package changed."""
    cache_dir = _cache_dir(app, config)
    stamp = cache_dir.parent / FINGERPRINT_FILE
    current = fingerprint(Path(app.srcdir))
    previous = stamp.read_text().strip() if stamp.exists() else None
    if previous == current:
        return
    if previous is not None or cache_dir.exists():
        logger.info("[attnbook] package or requirements changed: re-executing every chapter")
    shutil.rmtree(cache_dir, ignore_errors=True)
    # Without this, Sphinx would not even re-read the unchanged chapter files.
    Path(app.doctreedir, "environment.pickle").unlink(missing_ok=True)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(current + "\n")


def reexecute_pages_that_read_the_book(app: Sphinx, env: object, added: set[str],
                                        changed: set[str], removed: set[str]) -> list[str]:
    """The pages of :data:`READS_THE_BOOK` whose files changed since the last build, with
    their cached outputs dropped so that they run again.

    myst-nb's cache keys a page on its own cells; the teaching page's cells read the chapters
    and the exercise folders, so without this an edited chapter would leave its old word count
    on the teaching page.
    """
    seen = getattr(env, "attnbook_read_files", {})
    outdated = []
    for docname, globs in READS_THE_BOOK.items():
        current = fingerprint(Path(app.srcdir), globs)
        if seen.get(docname) not in (None, current):
            from jupyter_cache import get_cache

            cache = get_cache(str(_cache_dir(app, app.config)))
            source = str(Path(app.srcdir, f"{docname}.md"))
            for record in cache.list_cache_records():
                if record.uri == source:
                    cache.remove_cache(record.pk)
            logger.info(f"[attnbook] {docname} reads files that changed: running it again")
            outdated.append(docname)
        seen[docname] = current
    env.attnbook_read_files = seen
    return outdated


def rewrite_pages_when_site_files_change(app: Sphinx, env: object, added: set[str],
                                          changed: set[str], removed: set[str]) -> list[str]:
    """Every page, when the site's stylesheet, script or templates changed since the last
    build; none otherwise.

    When no page is out of date Sphinx ends a build before writing anything, static files
    included: an edit to ``book/_static/attnbook.css`` alone would never reach the site.
    """
    current = fingerprint(Path(app.srcdir), SITE_GLOBS)
    previous = getattr(env, "attnbook_site_files", None)
    env.attnbook_site_files = current
    if previous == current:
        return []
    if previous is not None:
        logger.info("[attnbook] the site's style, script or templates changed: "
                    "writing every page again")
    return sorted(env.found_docs)


#: The services the launch buttons open a chapter in, once the book has a public repository.
#: Binder runs the repository's requirements (jupytext opens the MyST chapters as notebooks).
#: Colab opens only .ipynb files from GitHub, and the chapters are MyST Markdown, so it stays
#: off: a Colab button would open a text file.
LAUNCH_SERVICES = {"binderhub_url": "https://mybinder.org"}


def drive_buttons_from_repository(app: Sphinx, config: Config) -> None:
    """Switch the repository, issue and launch buttons on exactly when ``repository.url`` is set.

    ``_config.yml`` holds the repository's address in one place. Until the book has a public
    home it stays empty and no button points at a made-up address; setting it turns on the
    source-repository button, "open an issue" and launching a chapter on Binder.
    """
    options = config.html_theme_options
    public = bool((options.get("repository_url") or "").strip())
    options["use_repository_button"] = public
    options["use_issues_button"] = public
    launch = options.setdefault("launch_buttons", {})
    for key, service in LAUNCH_SERVICES.items():
        launch[key] = service if public else ""
    launch["colab_url"] = ""


def keep_one_search_field(app: Sphinx, config: Config) -> None:
    """No header bar above the page: search stays in the sidebar, as on a Jupyter Book 1 page.

    sphinx-book-theme 1.3.0 empties pydata-sphinx-theme's header, but pydata-sphinx-theme
    0.17.1 (the version it pins) puts a search field back into it unless the book's own
    options name ``navbar_persistent``, so every page showed a bar with a second search field.
    """
    config.html_theme_options.setdefault("navbar_persistent", [])


STUDENT_NOTE = ("<p>Student edition: the worked solutions are left out; the exercises and "
                "their checks are all here.</p>")


class StudentEditionBuilder(StandaloneHTMLBuilder):
    """The site without its worked solutions (see :class:`LeaveOutSolutions`). Each page's
    offered source and notebook are stripped of them as soon as the page is written
    (:func:`strip_offered_sources`), so not even a failed build leaves one behind."""

    name = "student"
    epilog = "The student edition is in %(outdir)s."

    def handle_page(self, pagename: str, *args: object, **kwargs: object) -> None:
        try:
            super().handle_page(pagename, *args, **kwargs)
        finally:
            strip_offered_sources(Path(self.outdir), pagename)


def render_student_pages_as_html(app: Sphinx, config: Config) -> None:
    """myst-nb chooses each cell output's format (an SVG, a PNG, HTML) by the builder's name,
    and knows no ``student``: give it the ``html`` builder's choices. Added in every build,
    so the configuration, and with it the saved environment, is the same for both."""
    from myst_nb.core.render import base_render_priority

    html = base_render_priority()["html"]
    config.nb_mime_priority_overrides = [
        *config.nb_mime_priority_overrides,
        *((StudentEditionBuilder.name, mime, priority) for mime, priority in html.items())]


def name_student_edition(app: Sphinx, pagename: str, templatename: str, context: dict,
                         doctree: object) -> None:
    """Every page of the student edition says in its footer what it leaves out."""
    if app.builder.name == StudentEditionBuilder.name:
        context["theme_extra_footer"] = (context.get("theme_extra_footer") or "") \
            + STUDENT_NOTE


#: The lines that open and close a gated worked solution (backtick or colon fences).
_OPENS = re.compile(r"^[ \t]*(`{3,}|:{3,})\{solution-start\}")
_CLOSES = re.compile(r"^[ \t]*(`{3,}|:{3,})\{solution-end\}")
#: Any solution directive: none may be left once the gated blocks are out.
_ANY_SOLUTION = re.compile(r"\{solution(?:-start|-end)?\}")


class _SolutionStripper:
    """Drops the lines of gated worked solutions, fed line by line across the cells of a
    notebook or the lines of a MyST file: from a ``{solution-start}`` line to the fence
    that closes its ``{solution-end}``."""

    def __init__(self) -> None:
        self.inside = False
        self.closing: str | None = None  # the fence that closes a {solution-end} just read

    def feed(self, lines: list[str]) -> list[str]:
        kept = []
        for line in lines:
            if self.closing is not None:
                if line.strip() == self.closing:
                    self.closing = None
                elif line.strip() and not line.strip().startswith(":"):
                    raise ValueError(f"a {{solution-end}} is not closed by {self.closing}")
            elif self.inside:
                end = _CLOSES.match(line)
                if end:
                    self.inside, self.closing = False, end.group(1)
            elif _OPENS.match(line):
                self.inside = True
            elif _CLOSES.match(line):
                raise ValueError("a {solution-end} without its {solution-start}")
            else:
                kept.append(line)
        return kept

    def finish(self) -> None:
        if self.inside or self.closing is not None:
            raise ValueError("a {solution-start} without its {solution-end}")


def _refuse_what_is_left(text: str) -> None:
    if _ANY_SOLUTION.search(text):
        raise ValueError("a worked solution that is not a gated {solution-start} .. "
                         "{solution-end} block: the student edition cannot leave it out")


def without_solutions(text: str) -> str:
    """A chapter's MyST source without its worked solutions: each gated block from the
    ``{solution-start}`` line to the fence closing its ``{solution-end}``.

    Raises:
        ValueError: an unbalanced block, or a solution in another form (the student
            edition fails rather than leave one in).
    """
    stripper = _SolutionStripper()
    kept = "".join(stripper.feed(text.splitlines(keepends=True)))
    stripper.finish()
    _refuse_what_is_left(kept)
    return kept


def notebook_without_solutions(notebook: object) -> object:
    """The notebook of a chapter without its worked solutions: the cells inside a gated
    block, and the lines of the markdown cells that open and close it. Cells without a
    solution are left as they are. Changes ``notebook`` and returns it.

    Raises:
        ValueError: as :func:`without_solutions`.
    """
    stripper, kept = _SolutionStripper(), []
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            if not stripper.inside:
                kept.append(cell)
            continue
        if not stripper.inside and not _ANY_SOLUTION.search(cell.source):
            kept.append(cell)
            continue
        source = "".join(stripper.feed(cell.source.splitlines(keepends=True))).strip("\n")
        _refuse_what_is_left(source)
        if source.strip():
            cell.source = source
            kept.append(cell)
    stripper.finish()
    notebook.cells = kept
    return notebook


def strip_offered_sources(outdir: Path, pagename: str) -> None:
    """Leave the worked solutions out of the source and notebook offered for a page
    (``_sources/<page>.md``, ``.ipynb``). A file that cannot be stripped is deleted, and
    the error raised: the student edition never offers a solution."""
    import nbformat

    for path in sorted((outdir / "_sources").glob(f"{pagename}.*")):
        try:
            if path.suffix == ".ipynb":
                notebook = nbformat.read(path, as_version=4)
                nbformat.write(notebook_without_solutions(notebook), path)
            else:
                path.write_text(without_solutions(path.read_text(encoding="utf-8")),
                                encoding="utf-8")
        except Exception:
            path.unlink()
            raise


def mathjax_source() -> Path:
    """The folder of MathJax 3's browser build inside the installed wheel."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "MathJax is not installed: run `pip install -r requirements.txt` "
            "(it provides django-static-mathjax)"
        )
    source = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" / "es5"
    if not (source / "tex-chtml.js").is_file():
        raise FileNotFoundError(f"MathJax's tex-chtml.js is missing from {source}")
    return source


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    """Serve MathJax from ``_static/mathjax`` of the built site."""
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    if (target / "tex-chtml.js").is_file():
        return
    # Only the TeX-to-HTML build and what it loads on demand: no SVG output, no Node entry
    # point, no speech-rule maps (per-language data for an explorer the book leaves off).
    unused = ("svg", "*svg*.js", "mml-*.js", "*-full*.js", "node-main.js", "mathmaps")
    shutil.copytree(mathjax_source(), target, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(*unused))


#: The PDF edition, as ``make pdf`` names it in the site, and the front page's two forms of
#: the line that offers it: a link when the file is there, a note when it is not (a
#: ``make book`` build without ``make pdf``), so a reader never follows a link to a 404.
PDF_NAME = "attention-computed.pdf"
PDF_LINK = f'<a href="../{PDF_NAME}" download>download {PDF_NAME}</a>'
PDF_ABSENT = (f'<span class="attnbook-pdf-absent">{PDF_NAME} is not in this build'
              " (<code>make pdf</code> adds it)</span>")


def point_pdf_link(site: Path) -> bool:
    """Make the front page's PDF line a link if the PDF is in ``site``, else a note.

    Returns whether the line is a link. Raises ``ValueError`` if the front page has neither
    form (its markup changed, and this would silently stop working).
    """
    page = Path(site) / "book" / "intro.html"
    html = page.read_text(encoding="utf-8")
    if PDF_LINK not in html and PDF_ABSENT not in html:
        raise ValueError(f"{page} has no line offering {PDF_NAME}; update PDF_LINK")
    live = (Path(site) / PDF_NAME).is_file()
    wanted = html.replace(PDF_ABSENT, PDF_LINK) if live else html.replace(PDF_LINK, PDF_ABSENT)
    if wanted != html:
        page.write_text(wanted, encoding="utf-8")
    return live


def link_pdf_when_built(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    if (Path(app.outdir) / "book" / "intro.html").is_file():
        try:
            point_pdf_link(Path(app.outdir))
        except ValueError as error:
            logger.warning(str(error))


def offer_executed_notebook(app: Sphinx, pagename: str, templatename: str,
                            context: dict, doctree: object) -> None:
    """Let readers download each chapter as an executed ``.ipynb``, outputs included.

    myst-nb writes every MyST chapter as a notebook to ``jupyter_execute/``, but with the
    outputs only when it executed the chapter in this build; a chapter taken from the
    execution cache is written without them. So take the outputs from the cache, put the
    notebook next to the page's source, and tell the theme's download button about it (the
    theme itself offers it only when a launch service is configured).
    """
    written = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if app.builder.format != "html" or not written.is_file():
        return
    import nbformat
    from jupyter_cache import get_cache

    notebook = nbformat.read(written, as_version=4)
    if not any(cell.get("outputs") for cell in notebook.cells):
        try:
            _, notebook = get_cache(str(_cache_dir(app, app.config))).merge_match_into_notebook(
                notebook)
        except KeyError:
            logger.warning(f"[attnbook] no cached outputs for {pagename}", type="attnbook")
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def _repair(pagename: str, context: dict, markup: str, repaired: str,
            unrepaired: re.Pattern[str]) -> None:
    """Replace ``markup`` by ``repaired`` in the page body; warn if ``unrepaired`` survives.

    The repairs below match the exact markup of the pinned theme and myst-nb. If an upgrade
    changes it, the replacement would silently do nothing: the warning fails the strict build.
    """
    body = context.get("body")
    if not body:
        return
    body = body.replace(markup, repaired)
    left = unrepaired.search(body)
    if left:
        logger.warning(f"[attnbook] {pagename}: markup this extension repairs changed form, "
                       f"update it: {left.group(0)[:120]}", type="attnbook", subtype="markup")
    context["body"] = body


#: A bibliography container that still claims to be a list, in any attribute order.
UNREPAIRED_CITATION_LIST = re.compile(r'<div(?=[^>]*\bcitation-list\b)(?=[^>]*role="list")[^>]*>')
#: A cell toggle whose accessible name is not its visible text.
UNREPAIRED_TOGGLE = re.compile(r'<summary[^>]*aria-label="Toggle hidden content"[^>]*>')


def fix_citation_list_role(app: Sphinx, pagename: str, templatename: str,
                           context: dict, doctree: object) -> None:
    """Drop ``role="list"`` from the bibliography's container.

    Its entries carry ``role="doc-biblioentry"``, not ``listitem``, so screen readers (and
    axe-core's aria-required-children rule) see a list with no items.
    """
    _repair(pagename, context, '<div role="list" class="citation-list">',
            '<div class="citation-list">', UNREPAIRED_CITATION_LIST)


def name_cell_toggles_by_their_text(app: Sphinx, pagename: str, templatename: str,
                                    context: dict, doctree: object) -> None:
    """Let "Show code cell source" name the toggle of a hidden cell.

    myst-nb labels each toggle's ``<summary>`` "Toggle hidden content" while it shows "Show
    code cell source", so a speech-input user cannot say what they see (axe-core:
    label-content-name-mismatch, WCAG 2.5.3). Without the label the visible text names it.
    """
    _repair(pagename, context, '<summary aria-label="Toggle hidden content">', "<summary>",
            UNREPAIRED_TOGGLE)


#: How a checker's message on an untouched exercise starter begins (attnbook.checks shows a
#: ``NotWrittenYet`` so in IPython).
TODO_PREFIX = "To do: "


class MarkStartersTodo(SphinxPostTransform):
    """Give the class ``attnbook-todo`` to a cell output that is a checker's "To do" message.

    On an untouched starter the checker has nothing to check yet; it says what to write. The
    book's stylesheet shows that as an instruction, not in the red frame of an error.
    """

    formats = ("html",)  # the site and the student edition
    default_priority = 200

    def run(self, **kwargs: object) -> None:
        for block in self.document.findall(nodes.literal_block):
            if {"output", "traceback"} <= set(block["classes"]) \
                    and block.astext().startswith(TODO_PREFIX):
                block["classes"].append("attnbook-todo")


#: What may not start a line after an inline formula, or end one before it.
_CLOSING = re.compile(r"^[.,;:!?)\]}\u2019\u201d\u2026%]+")
_OPENING = re.compile(r"[(\[{\u2018\u201c]+$")


class KeepPunctuationWithMaths(SphinxPostTransform):
    """Keep an inline formula on one line with the punctuation that touches it.

    A browser may break a line between an inline formula (an inline box, as MathJax draws
    it) and the comma or full stop after it, which then starts the next line alone. The
    formula and the punctuation on either side of it (no space between) go into one
    ``span.attnbook-nowrap``, which the book's stylesheet keeps on one line.
    """

    formats = ("html",)  # the site and the student edition
    default_priority = 200

    def run(self, **kwargs: object) -> None:
        for math in list(self.document.findall(nodes.math)):
            parent = math.parent
            index = parent.index(math)
            before = parent[index - 1] if index > 0 else None
            after = parent[index + 1] if index + 1 < len(parent) else None
            opening = _OPENING.search(before.astext()) \
                if isinstance(before, nodes.Text) else None
            closing = _CLOSING.match(after.astext()) if isinstance(after, nodes.Text) else None
            if not opening and not closing:
                continue
            span = nodes.inline(classes=["attnbook-nowrap"])
            if opening:
                span += nodes.Text(opening.group())
            parent.replace(math, span)
            span += math
            if closing:
                span += nodes.Text(closing.group())
                _shorten(parent, after, after.astext()[closing.end():])
            if opening:
                _shorten(parent, before, before.astext()[:opening.start()])


def _shorten(parent: nodes.Element, text: nodes.Text, rest: str) -> None:
    """Replace ``text`` in ``parent`` by ``rest``, or remove it when nothing is left.

    Found by identity: a Text node is a string, and docutils' ``replace`` and ``remove``
    find a child by equality, so they would take the first child with the same letters.
    """
    index = next(k for k, child in enumerate(parent.children) if child is text)
    del parent[index]
    if rest:
        parent.insert(index, nodes.Text(rest))


#: Inline code at most this long is kept on one line (about 200 px: a phone's column holds
#: 42 such characters).
SHORT_CODE = 24


class KeepShortCodeWhole(SphinxPostTransform):
    """Give the class ``attnbook-whole`` to inline code of at most ``SHORT_CODE`` characters.

    The book's stylesheet lets inline code break anywhere, so that a long name never pushes
    a phone's page sideways; short code then broke too, at full width ("make" above "book",
    "LICENSE-" above "CONTENT"). Marked code goes to the next line whole instead.
    """

    formats = ("html",)  # the site and the student edition
    default_priority = 200

    def run(self, **kwargs: object) -> None:
        for code in self.document.findall(nodes.literal):
            if len(code.astext()) <= SHORT_CODE:
                code["classes"].append("attnbook-whole")


#: A unit after a number's space: the space becomes a no-break space.
UNIT = r"(?:ms|s|%|KB|MB|GB|KiB|MiB|GiB|px|min|µs|ns)(?!\w)"
_NUMBER_SPACE_UNIT = re.compile(r"(?<=\d) (?=" + UNIT + ")")
_SPACE_UNIT = re.compile(r"^ (?=" + UNIT + ")")


class KeepNumbersWithTheirUnits(SphinxPostTransform):
    """Join a number and its unit ("20 ms", "60 %", "about 2 GB") with a no-break space, so
    that a line never ends at the number and starts the next with the unit. A glued number
    (an element of its own) followed by " ms" is joined the same way."""

    formats = ("html",)  # the site and the student edition
    default_priority = 200

    def run(self, **kwargs: object) -> None:
        skip = (nodes.literal, nodes.literal_block, nodes.math, nodes.math_block, nodes.raw)
        # Element by element, each Text child by its index: a Text node's own parent link
        # is not always its place in the tree.
        for element in list(self.document.findall(nodes.Element)):
            if any(isinstance(node, skip) for node in _self_and_ancestors(element)):
                continue
            for index, child in enumerate(element.children):
                if not isinstance(child, nodes.Text):
                    continue
                new = _NUMBER_SPACE_UNIT.sub("\u00a0", child.astext())
                if index > 0 and element[index - 1].astext()[-1:].isdigit():
                    new = _SPACE_UNIT.sub("\u00a0", new)
                if new != child.astext():
                    element[index] = nodes.Text(new)


def _self_and_ancestors(node: nodes.Node) -> Iterator[nodes.Node]:
    while node is not None:
        yield node
        node = node.parent


class KeepSpacesOutOfLinks(SphinxPostTransform):
    """Move the spaces that start or end a link's text out of the link.

    sphinx-exercise titles a solution "Solution to" + a link " Exercise 9.2": the link's
    underline and focus ring began with the space. The space now stands before the link.
    """

    formats = ("html",)  # the site and the student edition
    default_priority = 200  # after sphinx-exercise writes the solutions' titles (21)

    def run(self, **kwargs: object) -> None:
        for link in list(self.document.findall(nodes.reference)):
            if link.parent is None or not link.children:
                continue
            first = link[0]
            if isinstance(first, nodes.Text) and first.astext()[:1].isspace():
                link[0] = nodes.Text(first.astext().lstrip())
                link.parent.insert(link.parent.index(link), nodes.Text(" "))
            last = link[-1]
            if isinstance(last, nodes.Text) and last.astext()[-1:].isspace():
                link[-1] = nodes.Text(last.astext().rstrip())
                link.parent.insert(link.parent.index(link) + 1, nodes.Text(" "))


class KeepCitationsWithTheirWord(SphinxPostTransform):
    """Join a footnote citation "[2]" to the word before it with a no-break space.

    The chapters write "the decoder uses this mask {footcite}`...`", or put the citation at
    the start of a source line: a browser could break the line at that space (or line break)
    and start the next line with "[2]" alone.
    """

    formats = ("html",)  # the site and the student edition
    default_priority = 200

    def run(self, **kwargs: object) -> None:
        for reference in list(self.document.findall(nodes.footnote_reference)):
            parent = reference.parent
            index = next(k for k, child in enumerate(parent.children) if child is reference)
            before = parent[index - 1] if index > 0 else None
            if isinstance(before, nodes.Text) and before.astext()[-1:].isspace():
                parent[index - 1] = nodes.Text(before.astext().rstrip() + "\u00a0")


class LinkFiguresToTheirFile(SphinxPostTransform):
    """Make every figure a chapter draws a link to its picture file.

    On a phone the column shows a figure a few centimetres wide; the link opens the figure
    alone, where the reader can zoom into it (the pictures are SVG, sharp at any size).
    Sphinx links only the images that a directive scales; a cell's output is not scaled.
    """

    formats = ("html",)  # the site and the student edition
    default_priority = 200

    def run(self, **kwargs: object) -> None:
        from sphinx.util.osutil import relative_uri

        to_images = relative_uri(self.app.builder.get_target_uri(self.env.docname), "_images")
        outputs = self.document.findall(
            lambda node: isinstance(node, nodes.container) and "cell_output" in node["classes"])
        for image in [image for output in outputs for image in output.findall(nodes.image)]:
            if isinstance(image.parent, nodes.reference):
                continue
            uri = next(iter(image.get("candidates", {}).values()), image["uri"])
            if uri not in self.env.images:
                logger.warning("attnbook: a figure's picture %s is not among the "
                               "build's images; it is left without a link", uri,
                               location=image)
                continue
            link = nodes.reference(
                "", "", internal=True, classes=["attnbook-figure-link"],
                refuri=f"{to_images}/{quote(self.env.images[uri][1])}",
                reftitle="Open the figure alone, full size")
            image.replace_self(link)
            link += image


class LeaveOutSolutions(SphinxPostTransform):
    """In the student edition, remove every worked solution (sphinx-exercise's merged
    ``solution_node``) from the page."""

    builders = (StudentEditionBuilder.name,)
    default_priority = 5  # before the other post-transforms look at the page

    def run(self, **kwargs: object) -> None:
        from sphinx_exercise.nodes import solution_node

        for solution in list(self.document.findall(solution_node)):
            solution.parent.remove(solution)


class DropEmptySectionsInPrint(SphinxPostTransform):
    """Leave out of the PDF a section that has nothing left but its title.

    Each chapter ends with a "References" section holding its ``footbibliography``. On the
    web that is the list of the chapter's sources; in print, Sphinx's LaTeX writer moves
    every footnote to the page that cites it (priority 600), which empties the section.
    """

    builders = ("latex",)
    default_priority = 650  # after LaTeXFootnoteTransform

    def run(self, **kwargs: object) -> None:
        for section in list(self.document.findall(nodes.section)):
            rest = [child for child in section.children if not isinstance(child, nodes.title)]
            if all(not child.astext().strip() and not any(child.findall(nodes.image))
                   for child in rest):
                section.parent.remove(section)


class WarningCounter(std_logging.Handler):
    """Counts the warnings of a build, as Sphinx's warning stream does.

    A handler on Sphinx's logger namespace, so it sees every warning of every extension; like
    Sphinx's own count, it skips the warnings that ``suppress_warnings`` silences.
    """

    def __init__(self, app: Sphinx) -> None:
        super().__init__(level=std_logging.WARNING)
        self.app = app
        self.count = 0

    def emit(self, record: std_logging.LogRecord) -> None:
        config = getattr(self.app, "config", None)
        silenced = getattr(config, "suppress_warnings", None) or ()
        if not logging.is_suppressed_warning(getattr(record, "type", None),
                                             getattr(record, "subtype", None), silenced):
            self.count += 1


def forget_failed_build(app: Sphinx, exception: Exception | None, *,
                        warnings: WarningCounter) -> None:
    """After a failed or warning build, make the next build read every page again.

    Sphinx saves its environment even when a strict build fails, so a second run with no
    change would read nothing, emit no warning and pass. (Executed outputs stay cached.)
    """
    std_logging.getLogger(logging.NAMESPACE).removeHandler(warnings)
    if exception is not None or warnings.count:
        Path(app.doctreedir, "environment.pickle").unlink(missing_ok=True)


def setup(app: Sphinx) -> dict[str, object]:
    # A change to this file changes this value, and Sphinx then writes every page again.
    own_hash = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    app.add_config_value("attnbook_sphinx_hash", own_hash, "html")
    app.add_builder(StudentEditionBuilder)
    app.connect("config-inited", render_student_pages_as_html)
    for key, value in KERNEL_ENV.items():
        os.environ.setdefault(key, value)
    # The converted SmolLM2 lives in the checkout's .cache, as the Makefile and tests say.
    os.environ.setdefault("ATTNBOOK_CACHE", str(Path(app.srcdir, ".cache").resolve()))
    # The kernels inherit this environment. A non-interactive MPLBACKEND such as Agg would
    # stop matplotlib's inline backend, and every figure would vanish from the pages.
    os.environ.pop("MPLBACKEND", None)
    # Run before myst-nb reads anything (config-inited precedes loading the environment).
    app.connect("config-inited", invalidate_stale_cache, priority=100)
    app.connect("config-inited", drive_buttons_from_repository)
    app.connect("config-inited", keep_one_search_field)
    # Before the theme builds its download menu (priority 501).
    app.connect("env-get-outdated", rewrite_pages_when_site_files_change)
    app.connect("env-get-outdated", reexecute_pages_that_read_the_book)
    app.connect("html-page-context", offer_executed_notebook, priority=500)
    app.connect("html-page-context", fix_citation_list_role)
    app.connect("html-page-context", name_cell_toggles_by_their_text)
    app.connect("html-page-context", name_student_edition)
    app.connect("build-finished", copy_mathjax)
    app.connect("build-finished", link_pdf_when_built)
    app.add_post_transform(LeaveOutSolutions)
    app.add_post_transform(DropEmptySectionsInPrint)
    app.add_post_transform(MarkStartersTodo)
    app.add_post_transform(KeepPunctuationWithMaths)
    app.add_post_transform(LinkFiguresToTheirFile)
    app.add_post_transform(KeepSpacesOutOfLinks)
    app.add_post_transform(KeepShortCodeWhole)
    app.add_post_transform(KeepNumbersWithTheirUnits)
    app.add_post_transform(KeepCitationsWithTheirWord)
    warnings = WarningCounter(app)
    std_logging.getLogger(logging.NAMESPACE).addHandler(warnings)
    app.connect("build-finished", functools.partial(forget_failed_build, warnings=warnings))
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    # ``python attnbook_sphinx.py SITE``: what ``make pdf`` runs after copying the PDF in.
    if len(sys.argv) != 2:
        sys.exit("usage: python attnbook_sphinx.py BUILT_HTML_DIRECTORY")
    state = "links to" if point_pdf_link(Path(sys.argv[1])) else "has a note instead of"
    print(f"The front page {state} the PDF edition.")
