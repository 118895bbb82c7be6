"""Shared fixtures: one strict build of the book per session, a local server, Chromium."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import pytest
import yaml

# Nothing in the tests may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# One thread a process for everything the session starts: the strict build's kernels, the
# planted chapters' "default" runs and this process's own torch. On two cores the build, the
# chapter runs and the tests already keep both busy, and a chapter with two threads took
# 78 s alone against 94 s with one (cache-budget, stop 48): a second thread bought 17 % of
# speed for about 65 % more CPU time. The suite still sees two thread counts, one here and
# four or sixteen in the portability run (PORTABLE). `make book` outside the tests keeps the
# machine's count. Set before torch is imported, which reads it once.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
# SmolLM2 converted once, shared by tests, chapters and the book build (as the Makefile sets).
os.environ.setdefault("ATTNBOOK_CACHE", str(ROOT / ".cache"))
# Matplotlib's font list names font files inside one Python environment; a list shared in
# the home folder with another checkout's environment can name files that are gone (and the
# chapters then print "findfont" warnings). Each checkout keeps its own, as `make` does.
os.environ.setdefault("MPLCONFIGDIR", str(ROOT / ".cache" / "matplotlib"))
BUILD = ROOT / "_build"
HTML = BUILD / "html"
#: What the last session that ran the chapters measured (``make bench`` prints it).
SUITE_COST = BUILD / "suite-cost.json"
EXECUTED = re.compile(r"book/([\w-]+)\.md: Executed notebook in ([\d.]+) seconds")

#: Seconds per test (set-up, call and tear-down), and the strict build's execution time per
#: chapter (none when the build found every chapter in its cache).
_test_seconds: dict[str, float] = defaultdict(float)
_build_seconds: dict[str, float] = {}
_session_start = time.time()
#: Seconds from the session's start to the end of the strict build and its no-change rebuild
#: ("build", when the site's tests may start) and of the last chapter run ("runs"): where the
#: two overlap, and what is left alone at the end.
_timeline: dict[str, float] = {}

#: Flags that keep headless Chromium quiet on a machine with no network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def toc_pages() -> list[str]:
    """Every document of ``_toc.yml``, as a path without suffix (``book/intro``)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                pages.append(entry["file"])
            for key in ("chapters", "sections", "parts"):
                walk(entry.get(key, []))

    walk(toc.get("parts", []) + toc.get("chapters", []))
    return pages


def chapter_pages() -> list[str]:
    """The numbered chapters: the pages of the parts whose TOC entry says ``numbered``."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [entry["file"] for part in toc.get("parts", []) if part.get("numbered")
            for entry in part.get("chapters", [])]


#: The builds running now, each the leader of its own process group (``run_build``): the
#: session's end stops those left behind, so a session stopped early (``-x``) leaves no
#: jupyter-book or XeLaTeX writing into ``_build``.
_running_builds: set[subprocess.Popen] = set()


def run_build(*extra: str, niceness: int = 0) -> subprocess.CompletedProcess[str]:
    """``jupyter-book build . -W -n --keep-going`` with this interpreter's environment,
    ``niceness`` steps below the session's priority."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [str(Path(sys.executable).with_name("jupyter-book")), "build", ".",
               "-W", "-n", "--keep-going", *extra]
    if niceness:
        command = ["nice", "-n", str(niceness), *command]
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
        _running_builds.add(process)
        try:
            stdout, stderr = process.communicate(timeout=3600)
        except subprocess.TimeoutExpired:
            _stop(process)
            raise
        finally:
            _running_builds.discard(process)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _stop(process: subprocess.Popen) -> None:
    """End ``process`` and everything it started (its process group)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


#: Fixtures that need the built site: a session with a test that uses one starts the build.
NEEDS_BOOK = {"built_book", "site_url", "pdf_build", "no_change_rebuild", "student_build"}
#: Tests that use one of these (the site, or Chromium, which the site's tests share) run after
#: all the others, which run while the book builds in the background.
GOES_LAST = NEEDS_BOOK | {"browser"}
#: The background builds of a session, started with it when a selected test needs them: the
#: strict build, then the same build again with nothing changed (it must execute nothing),
#: then the PDF edition, then the student edition, which read the same execution cache and
#: saved environment. Each touches what the others do, so one thread runs them in turn; the
#: PDF's and the student edition's run beside the site's tests at the chapter runs' lower
#: priority.
_book_build: Future | None = None
_rebuild: Future | None = None
_pdf_build: Future | None = None
_student_build: Future | None = None


#: The student kit with the light install (tests/test_student_install.py), made in a thread
#: of its own when a selected test needs it: mostly unpacking torch. It starts when the
#: strict build has ended (at once without one), so that it slows neither the build nor
#: the tests that wait for it, and its tests run with the last group.
_student_install: Future | None = None


def install_student_kit(where: Path) -> tuple[Path, Path, float]:
    """``make student-kit`` into ``where``, then a fresh venv beside the kit in which only
    ``pip install -r requirements-student.txt`` runs: (the kit, the venv, seconds)."""
    start = time.perf_counter()
    subprocess.run(["make", "-s", "student-kit", f"BUILD={where}"], cwd=ROOT, check=True,
                   capture_output=True, text=True)
    kit, venv = where / "student-kit", where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        # --no-compile: the tests need the files, not torch's bytecode written ahead.
        ["nice", "-n", str(BACKGROUND_NICENESS), str(venv / "bin" / "pip"), "install",
         "--disable-pip-version-check", "-q", "--no-compile", "-r",
         "requirements-student.txt"], cwd=kit, capture_output=True, text=True, timeout=1500)
    if install.returncode:
        raise RuntimeError("pip install -r requirements-student.txt failed in the kit:\n"
                           + install.stdout[-3000:] + install.stderr[-3000:])
    return kit, venv, time.perf_counter() - start


@pytest.fixture(scope="session")
def student_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    """The student kit and its light install: (kit, venv, seconds), from the thread that
    started with the session."""
    if _student_install is not None:
        return _student_install.result()
    return install_student_kit(tmp_path_factory.mktemp("student"))


def _install_after(book: Future | None, future: Future, where: Path) -> None:
    """Settle ``future`` with the student kit's install, once ``book`` (the strict build)
    is settled, whatever its outcome."""
    if book is not None:
        with contextlib.suppress(BaseException):
            book.result()
    _settle(future, functools.partial(install_student_kit, where))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that need the built book go after the others, and the tests of the student
    edition (built after the PDF) and kit (installed after the build) and the tests that
    only collect the background chapter runs go last (each group in its usual order)."""
    def group(item: pytest.Item) -> int:
        names = set(getattr(item, "fixturenames", ()))
        if getattr(item, "originalname", "") == "test_chapter_runs" \
                or {"student_build", "student_venv"} & names:
            return 2
        return int(bool(GOES_LAST & set(getattr(item, "fixturenames", ()))))

    items.sort(key=group)
    # test_browser reads each page's tabs in all its tests: its tests run page by page.
    browser_tests = [i for i, item in enumerate(items) if item.path.name == "test_browser.py"]
    if browser_tests:
        pages = {page: rank for rank, page in enumerate(toc_pages())}

        def page_rank(item: pytest.Item) -> int:
            callspec = getattr(item, "callspec", None)
            return pages[callspec.params["name"]] if callspec and "name" in callspec.params \
                else -1

        ordered = sorted((items[i] for i in browser_tests), key=page_rank)
        for i, item in zip(browser_tests, ordered, strict=True):
            items[i] = item


@pytest.fixture(scope="session", autouse=True)
def book_build_in_background(request: pytest.FixtureRequest) -> Iterator[None]:
    """Start the background builds with the session, in a thread that waits for each
    process in turn, if any selected test needs the built book; ``built_book``,
    ``no_change_rebuild``, ``pdf_build`` and ``student_build`` collect them. The student
    kit's install starts too, in a thread of its own, if a test needs ``student_venv``."""
    global _book_build, _rebuild, _pdf_build, _student_build, _student_install
    used = set().union(*(getattr(item, "fixturenames", ()) for item in request.session.items))
    if NEEDS_BOOK & used:
        _book_build = Future()
        _rebuild = Future() if "no_change_rebuild" in used else None
        _pdf_build = Future() if "pdf_build" in used else None
        _student_build = Future() if "student_build" in used else None
        # A daemon thread: a session that ends early (-x) does not wait for the builds.
        threading.Thread(target=_build_in_turn, daemon=True, name="book-build",
                         args=(_book_build, _rebuild, _pdf_build, run_build, _timeline),
                         kwargs={"student": _student_build}).start()
    where = None
    if "student_venv" in used:
        where = Path(tempfile.mkdtemp(prefix="attnbook-student-"))
        _student_install = Future()
        threading.Thread(target=_install_after, daemon=True, name="student-install",
                         args=(_book_build, _student_install, where)).start()
    yield
    for process in list(_running_builds):
        _stop(process)
    if where is not None and _student_install.done():
        shutil.rmtree(where, ignore_errors=True)


def _settle(future: Future | None, work: Callable[[], object]) -> None:
    """Give ``future`` what ``work()`` returns, or what it raises."""
    if future is None:
        return
    try:
        future.set_result(work())
    except BaseException as error:  # handed to the fixture, which raises it
        future.set_exception(error)


def _timed_pdf_build(build: Callable[..., subprocess.CompletedProcess[str]] | None = None
                     ) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    result = (build or run_build)("--builder", "pdflatex", niceness=BACKGROUND_NICENESS)
    return time.perf_counter() - start, result


def _timed_student_build(build: Callable[..., subprocess.CompletedProcess[str]] | None = None
                         ) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    result = (build or run_build)("--builder", "custom", "--custom-builder", "student",
                                  niceness=BACKGROUND_NICENESS)
    return time.perf_counter() - start, result


def _build_in_turn(book: Future, rebuild: Future | None, pdf: Future | None,
                   build: Callable[..., subprocess.CompletedProcess[str]],
                   timeline: dict[str, float], *, student: Future | None = None) -> None:
    """The strict build (its outcome goes to ``book``); the same build again (``rebuild``),
    before the site's tests read the pages it may touch; then the PDF (``pdf``) and the
    student edition (``student``). When the strict build fails, the other futures are
    settled with the reason, so no test waits forever. ``timeline["build"]``: when ``book``
    was settled."""
    strict: Future = Future()
    _settle(strict, build)
    ok = strict.exception() is None and strict.result().returncode == 0
    failed = RuntimeError("the strict build failed, so it was not run")
    if ok:
        _settle(rebuild, build)
    elif rebuild is not None:
        rebuild.set_exception(failed)
    timeline["build"] = round(time.time() - _session_start, 1)
    if strict.exception() is None:
        book.set_result(strict.result())
    else:
        book.set_exception(strict.exception())
    for future, timed in ((pdf, _timed_pdf_build), (student, _timed_student_build)):
        if ok:
            _settle(future, functools.partial(timed, build))
        elif future is not None:
            future.set_exception(failed)


@pytest.fixture(scope="session")
def built_book() -> Path:
    """The strict build of the whole book (re-uses the execution cache of earlier builds)."""
    result = _book_build.result() if _book_build is not None else run_build()
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"the strict book build failed:\n{log[-6000:]}"
    _build_seconds.update((name, float(s)) for name, s in EXECUTED.findall(log))
    assert (HTML / "index.html").is_file()
    return HTML


@pytest.fixture(scope="session")
def no_change_rebuild(built_book: Path) -> subprocess.CompletedProcess[str]:
    """The same build again, which the background thread ran right after the strict one."""
    return _rebuild.result() if _rebuild is not None else run_build()


@pytest.fixture(scope="session")
def pdf_build(built_book: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    """``jupyter-book build . --builder pdflatex`` (what ``make pdf`` runs) as (seconds, the
    finished process): the background thread started it when the strict build and its
    rebuild ended."""
    return _pdf_build.result() if _pdf_build is not None else _timed_pdf_build()


@pytest.fixture(scope="session")
def student_build(built_book: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    """``make student``'s build, the site without worked solutions, as (seconds, the finished
    process): the background thread started it after the PDF."""
    return _student_build.result() if _student_build is not None else _timed_student_build()


@pytest.fixture(scope="session")
def site_url(built_book: Path) -> Iterator[str]:
    """The built site, served on a free port of 127.0.0.1."""
    handler = functools.partial(_QuietHandler, directory=str(built_book))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def chromium_path() -> str:
    """The system Chromium; the browser tests fail (never skip) without it."""
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or \
        shutil.which("chromium-browser")
    if not path:
        pytest.fail("Chromium is not installed: `make test` installs Debian's chromium "
                    "when run as root; otherwise install it or set CHROMIUM=/path/to/it")
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium_path(),
                                              args=CHROMIUM_ARGS, headless=True)
        yield instance
        instance.close()


#: The environment every chapter runs in besides the build's (``test_portability``): it turns
#: three knobs at once against the build's own set-up: four threads (the suite's build has
#: one; a chapter that measures memory gets sixteen, as on a reader's workstation, since some
#: kernels' scratch memory grows with the count: ``chapter_runner.for_chapter``), a baseline
#: CPU's vector kernels, and a clock that reverses the order of measured durations.
PORTABLE = ["four-threads+baseline-cpu+reversed-clock"]
#: How much lower the background processes' priority is than the session's (``nice``). Where
#: Linux groups the CPU by session (autogroups, on here) it is nominal for the chapter runs
#: and the PDF: each kernel, and the build, starts a session of its own, which gets an equal
#: share whatever its nice value (README.md, "overlaps its parts").
BACKGROUND_NICENESS = 10
#: Chapter runs at once while the strict build runs, and after it. During the build the
#: session's own tests and the build keep both cores busy. With one run per chapter the runs
#: end about when the build does (measured on 2 cores), so the second place after it is for
#: a longer book; the site's tests (two Chromiums, the PDF) then take the cores first.
RUNS_DURING_BUILD, RUNS_AFTER_BUILD = 1, 2


class PacedRuns:
    """Jobs handed to a process pool in order, at most ``width`` of them running at a time;
    :meth:`widen` lets one more run at once. ``futures`` maps each job's key to a future of
    its outcome, and ``finished`` to its end, in seconds since the session started."""

    def __init__(self, pool, jobs: list[tuple[object, object, tuple]], width: int) -> None:
        if width < 1:
            raise ValueError(f"width must be at least 1, got {width}")
        self.futures: dict[object, Future] = {key: Future() for key, _, _ in jobs}
        self.finished: dict[object, float] = {}
        self.most_at_once = 0
        self._running = 0
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(width)
        self._stopped = False
        threading.Thread(target=self._feed, args=(pool, jobs), daemon=True,
                         name="paced-runs").start()

    def widen(self) -> None:
        self._slots.release()

    def stop(self) -> None:
        """Hand out no more jobs (the ones already running finish)."""
        self._stopped = True
        self._slots.release()

    def _feed(self, pool, jobs: list[tuple[object, object, tuple]]) -> None:
        for key, work, args in jobs:
            self._slots.acquire()
            if self._stopped:
                return
            with self._lock:
                self._running += 1
                self.most_at_once = max(self.most_at_once, self._running)
            try:
                job = pool.submit(work, *args)
            except RuntimeError:  # the pool was shut down: the session is over
                return
            job.add_done_callback(functools.partial(self._done, key))

    def _done(self, key: object, job: Future) -> None:
        with self._lock:
            self._running -= 1
        self.finished[key] = round(time.time() - _session_start, 1)
        future = self.futures[key]
        if job.cancelled():
            future.cancel()
        elif job.exception() is not None:
            future.set_exception(job.exception())
        else:
            future.set_result(job.result())
        self._slots.release()


@pytest.fixture(scope="session", autouse=True)
def chapter_runs(request: pytest.FixtureRequest, book_build_in_background: None
                 ) -> Iterator[dict[tuple[str, str], Future]]:
    """The portability runs of every selected ``test_chapter_runs``, started with the session.

    They run in fresh processes at a lower priority, the longest chapters first, one at a
    time while the book builds and two at a time after (``RUNS_DURING_BUILD``), beside the
    browser and PDF tests: the tests in ``test_portability`` only wait for their outcomes.
    Nothing starts when no chapter run is selected (``make test-fast``).
    """
    wanted = [(item.callspec.params["environment"], item.callspec.params["chapter"])
              for item in request.session.items
              if getattr(item, "originalname", "") == "test_chapter_runs"]
    if not wanted:
        yield {}
        return
    from chapter_runner import outcome  # the book's tool chain: imported only when needed

    wanted.sort(key=lambda combo: -combo[1].stat().st_size)
    # spawn, not fork: the session may already hold threads (the site server, Playwright).
    pool = ProcessPoolExecutor(max_workers=RUNS_AFTER_BUILD,
                               mp_context=multiprocessing.get_context("spawn"),
                               initializer=os.nice, initargs=(BACKGROUND_NICENESS,))
    jobs = [((env, chapter.stem), outcome, (chapter, env)) for env, chapter in wanted]
    building = _book_build is not None and not _book_build.done()
    runs = PacedRuns(pool, jobs, RUNS_DURING_BUILD if building else RUNS_AFTER_BUILD)
    if building:
        for _ in range(RUNS_AFTER_BUILD - RUNS_DURING_BUILD):
            _book_build.add_done_callback(lambda _: runs.widen())
    yield runs.futures
    runs.stop()
    pool.shutdown(cancel_futures=True)
    if runs.finished:
        _timeline["runs"] = max(runs.finished.values())
    record_suite_cost(runs.futures)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _test_seconds[report.nodeid] += report.duration


def record_suite_cost(futures: dict[tuple[str, str], Future]) -> None:
    """Write what this session measured to ``SUITE_COST``: every test's seconds, each
    chapter's run per environment and its execution in the build, with a digest of each
    chapter's source (so ``make bench`` can tell which records a later edit made stale).
    Only a session that ran every chapter in every environment to the end writes it."""
    from chapter_runner import notebook_chapters

    complete = len(futures) == len(PORTABLE) * len(notebook_chapters()) and all(
        future.done() and not future.cancelled() for future in futures.values())
    if not complete:  # a -k subset or an early stop: keep the last full record
        return
    runs: dict[str, dict[str, float]] = defaultdict(dict)
    for (environment, chapter), future in futures.items():
        if future.done() and not future.cancelled() and future.exception() is None:
            runs[chapter][environment] = round(future.result()[0], 1)
    digests = {path.stem: hashlib.sha256(path.read_bytes()).hexdigest()
               for path in (ROOT / "book").glob("*.md")}
    record = {
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "session_seconds": round(time.time() - _session_start, 1),
        "cores": os.cpu_count(),
        "portable": PORTABLE,
        "tests": sorted(((node, round(s, 2)) for node, s in _test_seconds.items()),
                        key=lambda item: -item[1]),
        "chapter_runs": runs,
        "build_execution": _build_seconds,
        "timeline": dict(_timeline),
        "digests": {name: digest for name, digest in digests.items() if name in runs},
    }
    BUILD.mkdir(exist_ok=True)
    SUITE_COST.write_text(json.dumps(record, indent=1))
