"""Every chapter executes without error on numeric set-ups other than the build machine's.

The strict book build runs each chapter once, with this machine's thread count, vector kernels
and timings. Here every chapter runs again, as a plain notebook (``chapter_runner``), in each
environment of ``PORTABLE``: one thread, sixteen threads, a baseline CPU, and scrambled
clocks. A chapter that
asserts an exact float equality, a near-tie or a timing verdict fails in at least one of them,
and the failure names the chapter, the cell (with its line) and the environment.

The runs go two at a time, in fresh processes, to keep ``make test`` short on two cores.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import pytest
from chapter_runner import ENVIRONMENTS, describe, notebook_chapters, outcome

pytestmark = pytest.mark.chapters

PORTABLE = ["one-thread", "many-threads", "baseline-cpu", "scrambled-clock"]
CHAPTERS = notebook_chapters()


@pytest.fixture(scope="session")
def portability_runs(request: pytest.FixtureRequest) -> dict[tuple[str, str], Future]:
    """Start the runs of every selected (environment, chapter) test, the longest first."""
    wanted = [(item.callspec.params["environment"], item.callspec.params["chapter"])
              for item in request.session.items
              if getattr(item, "originalname", "") == "test_chapter_runs"]
    wanted.sort(key=lambda combo: -combo[1].stat().st_size)
    # spawn, not fork: by now the session may hold threads (the site server, Playwright).
    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
    futures = {(env, chapter.stem): pool.submit(outcome, chapter, env)
               for env, chapter in wanted}
    yield futures
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
@pytest.mark.parametrize("environment", PORTABLE)
def test_chapter_runs(portability_runs: dict, environment: str, chapter: Path) -> None:
    seconds, problem = portability_runs[(environment, chapter.stem)].result()
    assert problem is None, problem
    assert seconds > 0


def test_the_environments_differ_from_the_build() -> None:
    assert set(PORTABLE) <= set(ENVIRONMENTS) and "default" not in PORTABLE
    assert describe("one-thread") == "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1"
    assert "ATEN_CPU_CAPABILITY=default" in describe("baseline-cpu")
    assert len(CHAPTERS) >= 9 and all(path.suffix == ".md" for path in CHAPTERS)
