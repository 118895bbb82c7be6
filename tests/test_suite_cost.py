"""The record of what `make test` cost (``conftest.record_suite_cost``), and `make bench`'s
report of it (``benchmarks/bench_suite.py``)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import conftest
import pytest
from chapter_runner import notebook_chapters
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_suite  # noqa: E402

#: Two made-up portability environments: the record and the table hold any number of them.
TWO = ["one-thread+reversed-clock", "many-threads"]


@pytest.fixture(autouse=True)
def two_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "PORTABLE", TWO)
    monkeypatch.setattr(bench_suite, "PORTABLE", TWO)


def finished(seconds: float, problem: str | None = None) -> Future:
    future: Future = Future()
    future.set_result((seconds, problem))
    return future


@pytest.fixture
def record_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "suite-cost.json"
    monkeypatch.setattr(conftest, "BUILD", tmp_path)
    monkeypatch.setattr(conftest, "SUITE_COST", path)
    monkeypatch.setattr(bench_suite, "SUITE_COST", path)
    return path


def test_the_record_holds_each_run_and_each_chapter_digest(record_file: Path) -> None:
    failed: Future = Future()
    failed.set_exception(RuntimeError("the worker died"))
    futures = {(env, path.stem): finished(10.0) for env in TWO
               for path in notebook_chapters()}
    futures.update({(TWO[0], "scaling"): finished(41.26),
                    (TWO[1], "scaling"): finished(37.5, "a cell failed"),
                    (TWO[0], "notation"): failed})
    conftest.record_suite_cost(futures)
    record = json.loads(record_file.read_text())
    # A failed chapter still took its time; a run that never finished has none.
    assert record["chapter_runs"]["scaling"] == {TWO[0]: 41.3, TWO[1]: 37.5}
    assert record["chapter_runs"]["notation"] == {TWO[1]: 10.0}
    scaling = (ROOT / "book" / "scaling.md").read_bytes()
    assert record["digests"]["scaling"] == hashlib.sha256(scaling).hexdigest()
    assert set(record["digests"]) == {path.stem for path in notebook_chapters()}
    assert record["portable"] == TWO and record["session_seconds"] > 0
    assert isinstance(record["timeline"], dict)
    seconds = [s for _, s in record["tests"]]
    assert seconds == sorted(seconds, reverse=True)


def test_a_partial_session_keeps_the_last_full_record(record_file: Path) -> None:
    """A -k subset, or a session stopped before its runs ended, writes nothing."""
    subset = {(TWO[0], "scaling"): finished(41.0)}
    conftest.record_suite_cost(subset)
    assert not record_file.exists()
    unfinished = {(env, path.stem): finished(10.0) for env in TWO
                  for path in notebook_chapters()}
    unfinished[(TWO[1], "scaling")] = Future()  # still running
    conftest.record_suite_cost(unfinished)
    assert not record_file.exists()


def test_stale_chapters_are_the_new_and_the_changed() -> None:
    chapters = notebook_chapters()
    digests = {path.stem: bench_suite.digest(path) for path in chapters}
    assert bench_suite.stale_chapters({"digests": digests}) == []
    changed = {**digests, chapters[0].stem: "0" * 64}
    del changed[chapters[1].stem]
    assert bench_suite.stale_chapters({"digests": changed}) == chapters[:2]


def test_the_table_puts_the_costliest_first_with_shares() -> None:
    record = {"chapter_runs": {"a": {TWO[0]: 10.0, TWO[1]: 20.0},
                               "b": {TWO[0]: 50.0, TWO[1]: 40.0}},
              "build_execution": {"b": 45.0}}
    lines = bench_suite.chapter_table(record, {"c": {TWO[0]: 5.0, TWO[1]: 5.0}})
    rows = [line.split() for line in lines[1:4]]
    assert [row[0] for row in rows] == ["b", "a", "c"]
    assert rows[0][1:6] == ["45.0", "50.0", "40.0", "90.0", "69.2%"]
    assert rows[1][1] == "cached" and "(measured now)" in lines[3]
    assert lines[4].split()[:5] == ["total", "45.0", "65.0", "65.0", "130.0"]


def test_bench_prints_the_slowest_tests_of_the_record(record_file: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    tests = [[f"tests/test_x.py::test_{i}", float(100 - i)] for i in range(40)]
    digests = {path.stem: bench_suite.digest(path) for path in notebook_chapters()}
    record_file.write_text(json.dumps({
        "finished": "2026-11-28 23:00:00", "session_seconds": 1200.0, "cores": 2,
        "portable": TWO, "tests": tests, "chapter_runs": {"scaling": {
            TWO[0]: 40.0, TWO[1]: 38.0}},
        "build_execution": {"scaling": 42.0}, "digests": digests,
        "timeline": {"build": 700.4, "runs": 1150.6}}))
    assert bench_suite.main(["--no-run"]) == 0
    out = capsys.readouterr().out
    assert "20.0 min of pytest, 40 tests" in out
    assert "build ended 700 s into the session, the last chapter run 1151 s in" in out
    assert "test_14\n" in out and "test_15\n" not in out  # the slowest 15 only
    assert "New or changed" not in out
    assert "scaling" in out and "42.0" in out


def test_without_a_record_bench_says_how_to_make_one(record_file: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    assert bench_suite.main([]) == 0
    out = capsys.readouterr().out
    assert "`make test` writes it" in out and "running them now" not in out


def wait_until(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_paced_runs_keep_to_their_width_until_widened() -> None:
    """One run at a time while the build runs, two after it: no more, and every outcome (a
    result or an exception) reaches its future."""
    release = threading.Event()

    def job(value: int) -> int:
        release.wait(30)
        if value == 3:
            raise ValueError("the chapter failed")
        return value * 10

    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = conftest.PacedRuns(pool, [(f"job{i}", job, (i,)) for i in range(5)], width=1)
        assert wait_until(lambda: runs._running == 1)
        time.sleep(0.2)  # time enough to hand out a second job, if it were allowed
        assert runs._running == 1 and runs.most_at_once == 1
        runs.widen()
        assert wait_until(lambda: runs._running == 2)
        release.set()
        assert wait_until(lambda: all(f.done() for f in runs.futures.values()))
    assert runs.most_at_once == 2
    assert [runs.futures[f"job{i}"].result() for i in (0, 1, 2, 4)] == [0, 10, 20, 40]
    with pytest.raises(ValueError, match="the chapter failed"):
        runs.futures["job3"].result()
    assert set(runs.finished) == set(runs.futures)


def test_paced_runs_stop_handing_out_jobs() -> None:
    release = threading.Event()
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = conftest.PacedRuns(pool, [(i, release.wait, (30,)) for i in range(3)], width=1)
        assert wait_until(lambda: runs._running == 1)
        runs.stop()
        release.set()
        assert wait_until(lambda: runs.futures[0].done())
        time.sleep(0.2)  # a job handed out after stop would be running by now
    assert not runs.futures[1].done() and not runs.futures[2].done()
    with pytest.raises(ValueError, match="width must be at least 1"):
        conftest.PacedRuns(pool, [], width=0)


class FakeBuilds:
    """Stands in for ``conftest.run_build``: notes each build's arguments and whether the
    strict build's future was settled when it started, and fails the builds it is told to."""

    def __init__(self, book: Future, failing: tuple[str, ...] = ()) -> None:
        self.book = book
        self.calls: list[tuple[str, int]] = []
        self.settled_before: list[bool] = []
        self.failing = failing

    def __call__(self, *extra: str, niceness: int = 0) -> subprocess.CompletedProcess[str]:
        name = "pdf" if "pdflatex" in extra else "student" if "student" in extra else "html"
        self.calls.append((name, niceness))
        self.settled_before.append(self.book.done())
        code = 1 if name in self.failing else 0
        return subprocess.CompletedProcess(["jupyter-book"], code, f"{name} log", "")


def builds(*, rebuild: bool = True, pdf: bool = True) -> tuple[Future, ...]:
    """The three futures the background thread settles (None for one not selected)."""
    return Future(), Future() if rebuild else None, Future() if pdf else None


def test_the_rebuild_runs_before_the_site_is_handed_out_and_the_pdf_after() -> None:
    book, rebuild, pdf = builds()
    fake, timeline = FakeBuilds(book), {}
    conftest._build_in_turn(book, rebuild, pdf, fake, timeline)
    assert fake.calls == [("html", 0), ("html", 0), ("pdf", conftest.BACKGROUND_NICENESS)]
    # The site's tests start when `book` is settled: after the rebuild, before the PDF.
    assert fake.settled_before == [False, False, True]
    assert book.result().returncode == 0
    assert rebuild.result().stdout == "html log"
    seconds, result = pdf.result()
    assert result.stdout == "pdf log" and seconds >= 0
    assert set(timeline) == {"build"}


def test_the_student_edition_is_built_last_from_the_same_environment() -> None:
    book, rebuild, pdf = builds()
    student: Future = Future()
    fake = FakeBuilds(book)
    conftest._build_in_turn(book, rebuild, pdf, fake, {}, student=student)
    assert fake.calls == [("html", 0), ("html", 0), ("pdf", conftest.BACKGROUND_NICENESS),
                          ("student", conftest.BACKGROUND_NICENESS)]
    seconds, result = student.result()
    assert result.stdout == "student log" and seconds >= 0
    failed_book, failed_student = Future(), Future()
    conftest._build_in_turn(failed_book, None, None, FakeBuilds(failed_book, ("html",)), {},
                            student=failed_student)
    with pytest.raises(RuntimeError, match="the strict build failed"):
        failed_student.result(timeout=0)


def test_a_failed_strict_build_settles_every_waiting_build() -> None:
    book, rebuild, pdf = builds()
    fake = FakeBuilds(book, failing=("html",))
    conftest._build_in_turn(book, rebuild, pdf, fake, {})
    assert fake.calls == [("html", 0)]  # nothing more is built after a failed build
    assert book.result().returncode == 1
    for future in (rebuild, pdf):
        with pytest.raises(RuntimeError, match="the strict build failed"):
            future.result(timeout=0)


def test_only_the_selected_builds_run() -> None:
    book, rebuild, pdf = builds(rebuild=False, pdf=False)
    fake = FakeBuilds(book)
    conftest._build_in_turn(book, rebuild, pdf, fake, {})
    assert fake.calls == [("html", 0)]
    assert book.result().returncode == 0


def test_a_build_that_raises_reaches_its_fixture() -> None:
    def broken(*extra: str, niceness: int = 0) -> subprocess.CompletedProcess[str]:
        raise OSError("jupyter-book is missing")

    book, rebuild, pdf = builds()
    conftest._build_in_turn(book, rebuild, pdf, broken, {})
    with pytest.raises(OSError, match="jupyter-book is missing"):
        book.result(timeout=0)
    for future in (rebuild, pdf):
        with pytest.raises(RuntimeError, match="the strict build failed"):
            future.result(timeout=0)


def test_the_student_kit_installs_once_the_strict_build_is_settled(monkeypatch) -> None:
    book, installed = Future(), Future()
    started: list[bool] = []
    monkeypatch.setattr(conftest, "install_student_kit",
                        lambda where: started.append(book.done()) or (where, where, 0.0))
    thread = threading.Thread(target=conftest._install_after,
                              args=(book, installed, Path("kit")))
    thread.start()
    time.sleep(0.2)
    assert not started and not installed.done()  # waits for the build
    book.set_exception(RuntimeError("the build failed"))  # whatever its outcome
    thread.join(timeout=10)
    assert started == [True] and installed.result(timeout=0) == (Path("kit"), Path("kit"), 0.0)
    alone = Future()
    conftest._install_after(None, alone, Path("kit"))  # no build in the session: at once
    assert alone.result(timeout=0)[2] == 0.0
