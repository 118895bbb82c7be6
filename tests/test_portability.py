"""Every chapter executes without error on numeric set-ups other than the build machine's.

The strict book build runs each chapter once, with this machine's thread count, vector kernels
and timings. Here every chapter runs again, as a plain notebook (``chapter_runner``), in each
environment of ``PORTABLE``. Each one turns several independent knobs at once: one thread
with a baseline CPU's kernels and a scrambled clock; sixteen threads with the mirror image of
that clock (the same random steps in reverse order of size). A chapter that asserts an exact
float equality, a near-tie, a timing verdict or a thread-dependent result fails in at least
one of them, and the failure names the chapter, the cell (with its line) and the environment.
``test_planted_fragility_is_caught`` plants such chapters and shows that the two runs reject
each one.

The runs start when the session does (``conftest.chapter_runs``), in fresh processes at a
lower priority, one at a time beside the book build and two at a time beside the browser and
PDF tests after it, so that their time overlaps; the tests here only collect the outcomes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chapter_runner import (
    ENVIRONMENTS,
    STARTUP,
    ChapterFailure,
    describe,
    execute_chapter,
    notebook_chapters,
    parts,
)
from conftest import PORTABLE

pytestmark = pytest.mark.chapters

CHAPTERS = notebook_chapters()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
@pytest.mark.parametrize("environment", PORTABLE)
def test_chapter_runs(chapter_runs: dict, environment: str, chapter: Path) -> None:
    seconds, problem = chapter_runs[(environment, chapter.stem)].result()
    assert problem is None, problem
    assert seconds > 0


def test_the_environments_turn_every_knob() -> None:
    """Between them, the runs change the thread count both ways, the vector kernels and the
    clock (scrambled, then mirrored), and none is the build's own set-up."""
    used = [name for environment in PORTABLE for name in parts(environment)]
    assert "default" not in used
    assert {"one-thread", "many-threads", "baseline-cpu"} <= set(used)
    clocks = [ENVIRONMENTS[name] for name in used if STARTUP.get(name, Path()).name ==
              "scramble.py"]
    assert len(clocks) == 2 and clocks[0]["ATTNBOOK_CLOCK_SEED"] == \
        clocks[1]["ATTNBOOK_CLOCK_SEED"], "the mirror must reflect the same draws"
    assert [clock.get("ATTNBOOK_CLOCK_MIRROR") for clock in clocks] == [None, "1"]
    assert "OMP_NUM_THREADS=1" in describe(PORTABLE[0])
    assert "ATEN_CPU_CAPABILITY=default" in describe(PORTABLE[0])
    assert "sixteen_threads.py" in describe(PORTABLE[1])
    assert len(CHAPTERS) >= 9 and all(path.suffix == ".md" for path in CHAPTERS)


@pytest.mark.parametrize("environment", ["default+one-thread", "one-thread+one-thread",
                                         "scrambled-clock+mirrored-clock", "two-threads",
                                         "one-thread+many-threads"])
def test_a_combination_that_means_nothing_is_refused(environment: str) -> None:
    with pytest.raises(ValueError, match="environment must"):
        parts(environment)


def test_an_environment_must_be_text() -> None:
    with pytest.raises(TypeError, match="environment must be a str"):
        parts(["one-thread"])


#: The front matter that makes a MyST file a notebook.
FRONT = """---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
"""

#: A chapter's code cell, as MyST writes it.
CELL = "\n```{{code-cell}} ipython3\n{}\n```\n"

#: Data and measurements the planted chapters share: twelve large float32 vectors (their
#: sums split over the threads), one small one (summed by one thread, but in vector lanes),
#: and a clock check.
PRELUDE = """\
import time

import torch

vectors = [torch.randn(2**20, generator=torch.Generator().manual_seed(seed))
           for seed in range(12)]
small = torch.randn(3000, generator=torch.Generator().manual_seed(99))
sums = [vector.sum().item() for vector in vectors]

durations = []
for _ in range(5):
    start = time.perf_counter()
    time.sleep(0.05)
    durations.append(time.perf_counter() - start)
clock_true = all(0.04 < d < 0.5 for d in durations)
print(torch.get_num_threads(), torch.backends.cpu.get_cpu_capability(), clock_true)
print(repr(sums), repr(small.sum().item()))"""


def run_planted(tmp_path: Path, name: str, cells: list[str], environment: str):
    """Execute a chapter made of ``cells``: the notebook, or the ChapterFailure it raised."""
    chapter = tmp_path / f"{name}.md"
    chapter.write_text(FRONT + "".join(CELL.format(cell) for cell in cells))
    try:
        return execute_chapter(chapter, environment, timeout=180)[1]
    except ChapterFailure as failure:
        return failure


@pytest.fixture(scope="module")
def build_machine(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    """What the prelude prints in the build's own environment."""
    notebook = run_planted(tmp_path_factory.mktemp("probe"), "probe", [PRELUDE], "default")
    assert not isinstance(notebook, ChapterFailure), str(notebook)
    return [line.split(maxsplit=2) if index == 0 else [line]
            for index, line in enumerate(notebook.cells[0].outputs[0]["text"].splitlines())]


@pytest.mark.parametrize(("environment", "threads", "kernels"), [
    (PORTABLE[0], "1", "DEFAULT"),
    (PORTABLE[1], "16", None),
])
def test_each_environment_is_what_it_claims(tmp_path: Path, build_machine: list[list[str]],
                                            environment: str, threads: str,
                                            kernels: str | None) -> None:
    """Each run really changes what the kernel sees: its threads, its vector kernels (the
    sixteen-thread run keeps the machine's own) and its clock."""
    machine = build_machine[0]
    assert machine[2] == "True", f"the unscrambled clock measured wrong: {machine}"
    notebook = run_planted(tmp_path, "probe", [PRELUDE], environment)
    assert not isinstance(notebook, ChapterFailure), str(notebook)
    seen = notebook.cells[0].outputs[0]["text"].splitlines()[0].split()
    expected = [threads, kernels or machine[1], "False"]
    assert seen == expected, f"{environment}: the kernel sees {seen}, expected {expected}"


#: Chapters that hold on the build machine by luck, each the way a chapter could go wrong.
#: ``{sums}``, ``{small}`` and ``{threads}`` are what the build machine measured.
FRAGILE = {
    "an exact equality of a sum that the threads split": "assert sums == {sums}",
    "an exact equality of a sum in vector lanes": "assert small.sum().item() == {small}",
    "a near-tie: key 0 wins by one float": """\
runners_up = [torch.tensor(s).nextafter(torch.tensor(-float("inf"))) for s in {sums}]
for vector, runner_up in zip(vectors, runners_up):
    scores = torch.stack([vector.sum(), runner_up])
    assert scores.argmax() == 0""",
    "a memory claim that counts the threads": """\
scratch_bytes = torch.get_num_threads() * 4096
assert scratch_bytes == {threads} * 4096""",
    "a timing verdict: the short sleep measures shorter": """\
def seconds(work):
    start = time.perf_counter()
    work()
    return time.perf_counter() - start

assert seconds(lambda: time.sleep(0.001)) < seconds(lambda: time.sleep(0.05))""",
    "a timing verdict: the long sleep measures longer": """\
def seconds(work):
    start = time.perf_counter()
    work()
    return time.perf_counter() - start

assert seconds(lambda: time.sleep(0.05)) > seconds(lambda: time.sleep(0.001))""",
}

#: Which runs must reject each planted chapter (all of them, or any one). The sum in vector
#: lanes is the same with one thread or sixteen: only the baseline kernels of the first run
#: move it (on a machine whose own kernels are better than the baseline), which is why that
#: run turns the kernels and the threads together. A one-step timing comparison holds on the
#: scrambled clock or on its mirror image, never on both: which one rejects it depends on the
#: draws, so the test asks for one.
def rejected_by(kind: str, threads: str, kernels: str) -> tuple[str, list[str]]:
    """("all" or "any", the runs) that must reject ``kind`` on a build machine with this
    many threads and these vector kernels (a run that changes neither cannot)."""
    changes_threads = [env for env, count in zip(PORTABLE, ("1", "16"), strict=True)
                       if count != threads]
    if kind == "an exact equality of a sum in vector lanes":
        return "all", PORTABLE[:1] if kernels != "DEFAULT" else []
    if kind == "a memory claim that counts the threads":
        return "all", changes_threads
    if kind.startswith("a timing verdict"):
        return "any", PORTABLE
    return "all", PORTABLE


def test_planted_fragility_is_caught(tmp_path: Path, build_machine: list[list[str]]) -> None:
    """Each fragile chapter runs cleanly on the build machine and fails in the runs that
    change what it leans on, with a message naming the environment."""
    threads, kernels = build_machine[0][:2]
    sums, small = build_machine[1][0].rsplit(" ", 1)
    cells = {kind: code.format(sums=sums, small=small, threads=threads)
             for kind, code in FRAGILE.items()}
    control = run_planted(tmp_path, "control", [PRELUDE, *cells.values()], "default")
    assert not isinstance(control, ChapterFailure), f"not fragile at home: {control}"
    for index, (kind, cell) in enumerate(cells.items()):
        how, environments = rejected_by(kind, threads, kernels)
        rejected = []
        for environment in environments:
            result = run_planted(tmp_path, f"fragile{index}", [PRELUDE, cell], environment)
            if isinstance(result, ChapterFailure):
                assert result.cell_index == 1 and result.environment == environment
                assert "AssertionError" in result.error and describe(environment) in str(result)
                rejected.append(environment)
        if how == "all":
            assert rejected == environments, f"{kind}: let through by " \
                f"{sorted(set(environments) - set(rejected))}"
        else:
            assert rejected, f"{kind}: let through by every run"
