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
from chapter_runner import ENVIRONMENTS, describe, execute_chapter, notebook_chapters, outcome

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


#: A one-cell chapter that reports what its kernel sees: threads, vector kernels, and whether
#: five 50 ms sleeps measure as about 50 ms each.
PROBE = """---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---

```{code-cell} ipython3
import time

import torch

durations = []
for _ in range(5):
    start = time.perf_counter()
    time.sleep(0.05)
    durations.append(time.perf_counter() - start)
clock_true = all(0.04 < d < 0.5 for d in durations)
print(torch.get_num_threads(), torch.backends.cpu.get_cpu_capability(), clock_true)
```
"""


@pytest.mark.parametrize(("environment", "threads", "kernels", "clock_true"), [
    ("one-thread", "1", None, "True"),
    ("many-threads", "16", None, "True"),
    ("baseline-cpu", None, "DEFAULT", "True"),
    ("scrambled-clock", None, None, "False"),
])
def test_each_environment_is_what_it_claims(tmp_path: Path, environment: str,
                                            threads: str | None, kernels: str | None,
                                            clock_true: str) -> None:
    """Each environment really changes what the kernel sees (and only that: the default
    environment's vector kernels and clock are the machine's own)."""
    probe = tmp_path / "probe.md"
    probe.write_text(PROBE)
    _, notebook = execute_chapter(probe, environment, timeout=120)
    _, default = execute_chapter(probe, "default", timeout=120)
    seen = notebook.cells[0].outputs[0]["text"].split()
    machine = default.cells[0].outputs[0]["text"].split()
    assert machine[2] == "True", f"the unscrambled clock measured wrong: {machine}"
    expected = [threads or machine[0], kernels or machine[1], clock_true]
    assert seen == expected, f"{environment}: the kernel sees {seen}, expected {expected}"
