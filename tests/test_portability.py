"""Every chapter executes without error on a numeric set-up other than the build machine's.

The strict book build runs each chapter once, with one thread (``conftest``: the suite gives
every process it starts one), this machine's vector kernels and its clock. Here every
chapter runs again, as a plain notebook (``chapter_runner``), in the environment of
``PORTABLE``, which turns three independent knobs at once: four threads (sixteen for a
chapter that measures memory), a baseline CPU's kernels, and a clock that reverses the order
of measured durations. A
chapter that asserts an exact float equality, a near-tie, a timing verdict or a
thread-dependent result fails in it, and the failure names the chapter, the cell (with its
line) and the environment. ``test_planted_fragility_is_caught`` plants such chapters and shows
that the run rejects each one.

The runs start when the session does (``conftest.chapter_runs``), in fresh processes at a
lower priority, one at a time beside the book build and two at a time beside the browser and
PDF tests after it, so that their time overlaps; the tests here only collect the outcomes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chapter_runner import (
    BOOK,
    ENVIRONMENTS,
    STARTUP,
    ChapterFailure,
    describe,
    execute_chapter,
    for_chapter,
    notebook_chapters,
    parts,
    quiet_kernel_manager,
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


def test_the_environment_turns_every_knob() -> None:
    """The run changes the thread count, the vector kernels and the clock (reversed), and
    is not the build's own set-up."""
    used = [name for environment in PORTABLE for name in parts(environment)]
    assert "default" not in used
    assert {"four-threads", "baseline-cpu", "reversed-clock"} <= set(used)
    assert "threads.py at kernel start" in describe(PORTABLE[0])
    assert "ATEN_CPU_CAPABILITY=default" in describe(PORTABLE[0])
    assert "ATTNBOOK_CLOCK_REVERSE=1" in describe(PORTABLE[0])
    assert "scramble.py at kernel start" in describe(PORTABLE[0])
    assert len(CHAPTERS) >= 9 and all(path.suffix == ".md" for path in CHAPTERS)


#: Timings read through the reversed clock, in a fresh interpreter: (name, seconds) lines.
REVERSED_PROBE = """\
import runpy, sys, time
runpy.run_path(sys.argv[1])

def seconds(wait, clock=time.perf_counter):
    start = clock()
    time.sleep(wait)
    return clock() - start

print("short", seconds(0.001))
print("long", seconds(0.1))
print("short_ns", seconds(0.001, time.perf_counter_ns) / 1e9)
print("long_ns", seconds(0.1, time.perf_counter_ns) / 1e9)
rounds = {wait: [seconds(wait) for _ in range(3)] for wait in (0.001, 0.1)}
print("short_min", min(rounds[0.001]))
print("long_min", min(rounds[0.1]))
start, turns = time.perf_counter(), 0
while time.perf_counter() - start < 10.0:  # a loop that spends a budget of 10 s
    turns += 1
print("turns", turns)
"""


def test_the_reversed_clock_turns_every_timing_verdict_around(tmp_path: Path) -> None:
    """Through the reversed clock a short wait measures several times longer than a long
    one (seconds and nanoseconds, one reading or the minimum over rounds), every step is at
    least a second, so a loop that spends a time budget stops after a few turns."""
    import os
    import subprocess
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(REVERSED_PROBE)
    env = {**os.environ, **ENVIRONMENTS["reversed-clock"]}
    out = subprocess.run([sys.executable, str(probe), str(STARTUP["reversed-clock"])],
                         env=env, capture_output=True, text=True, timeout=60, check=True)
    seen = {name: float(value) for name, value in
            (line.split() for line in out.stdout.splitlines())}
    for short, long in (("short", "long"), ("short_ns", "long_ns"),
                        ("short_min", "long_min")):
        # The long wait reads at most 1 + 1/0.1 = 11 s; the short one more than twice that
        # as long as it really waits under 48 ms, even on a loaded machine.
        assert 1.0 <= seen[long] and 2 * seen[long] < seen[short], \
            f"{short} read {seen[short]} s, {long} {seen[long]} s"
    assert seen["turns"] <= 10


@pytest.mark.parametrize("environment", ["default+one-thread", "one-thread+one-thread",
                                         "scrambled-clock+mirrored-clock", "two-threads",
                                         "one-thread+many-threads",
                                         "four-threads+many-threads"])
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
    """Execute a chapter made of ``cells`` where the suite would run it when it asks for
    ``environment`` (``for_chapter``): the notebook, or the ChapterFailure it raised."""
    chapter = tmp_path / f"{name}.md"
    chapter.write_text(FRONT + "".join(CELL.format(cell) for cell in cells))
    try:
        return execute_chapter(chapter, for_chapter(environment, chapter), timeout=180)[1]
    except ChapterFailure as failure:
        return failure


def test_a_chapter_runs_without_a_heartbeat_thread(tmp_path: Path, monkeypatch) -> None:
    """The runner's kernel client starts no heartbeat channel, whose thread can hang the
    cleanup after a chapter (``quiet_kernel_manager``); the chapter still runs and the
    kernel is still known to be alive."""
    from jupyter_client.channels import HBChannel

    started = []
    monkeypatch.setattr(HBChannel, "start", lambda channel: started.append(channel))
    notebook = run_planted(tmp_path, "quiet", ["print(6 * 7)"], "default")
    assert not isinstance(notebook, ChapterFailure), str(notebook)
    assert notebook.cells[-1].outputs[0]["text"] == "42\n"
    assert started == []
    manager = quiet_kernel_manager()(kernel_name="python3")
    assert manager.client().parent is manager  # so is_alive asks the manager


@pytest.fixture(scope="module")
def build_machine(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    """What the prelude prints in the build's own environment."""
    notebook = run_planted(tmp_path_factory.mktemp("probe"), "probe", [PRELUDE], "default")
    assert not isinstance(notebook, ChapterFailure), str(notebook)
    return [line.split(maxsplit=2) if index == 0 else [line]
            for index, line in enumerate(notebook.cells[0].outputs[0]["text"].splitlines())]


def test_a_chapter_that_measures_memory_runs_with_sixteen_threads() -> None:
    """Where the run has four threads, the chapters that measure memory get sixteen (and
    nothing else changes); the others keep the run's own environment."""
    measuring = [path.stem for path in CHAPTERS if for_chapter(PORTABLE[0], path) != PORTABLE[0]]
    assert "efficient-attention" in measuring and "scaling" not in measuring
    swapped = for_chapter(PORTABLE[0], BOOK / "efficient-attention.md")
    assert swapped == PORTABLE[0].replace("four-threads", "many-threads")
    assert "OMP_NUM_THREADS=16" in describe(swapped)
    assert for_chapter("one-thread+baseline-cpu", BOOK / "efficient-attention.md") == \
        "one-thread+baseline-cpu"


@pytest.mark.parametrize(("environment", "threads", "kernels"), [
    (PORTABLE[0], "4", "DEFAULT"),
    ("one-thread+scrambled-clock", "1", None),  # the others, kept for a chapter's author
    ("mirrored-clock", None, None),
])
def test_each_environment_is_what_it_claims(tmp_path: Path, build_machine: list[list[str]],
                                            environment: str, threads: str,
                                            kernels: str | None) -> None:
    """The run really changes what the kernel sees: its threads, its vector kernels and its
    clock."""
    machine = build_machine[0]
    assert machine[2] == "True", f"the unscrambled clock measured wrong: {machine}"
    notebook = run_planted(tmp_path, "probe", [PRELUDE], environment)
    assert not isinstance(notebook, ChapterFailure), str(notebook)
    seen = notebook.cells[0].outputs[0]["text"].splitlines()[0].split()
    expected = [threads or machine[0], kernels or machine[1], "False"]
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
    "a memory measurement with room for eight threads' scratch": """\
from attnbook.efficient import peak_memory_bytes

# 4 KiB of scratch a thread, as some kernels allocate
peak = peak_memory_bytes(lambda: torch.empty(torch.get_num_threads() * 1024))
assert peak <= 8 * 4096""",
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
    "a timing verdict with a margin: at least twice as fast": """def seconds(work):
    start = time.perf_counter()
    work()
    return time.perf_counter() - start

assert 2 * seconds(lambda: time.sleep(0.001)) < seconds(lambda: time.sleep(0.2))""",
    "a timing verdict through timeit": """import timeit

short = timeit.timeit("time.sleep(0.001)", setup="import time", number=1)
assert short < timeit.Timer("time.sleep(0.05)", setup="import time").timeit(1)""",
}

#: Which runs must reject each planted chapter. A run rejects what leans on a knob it turns:
#: on a build machine with the run's own thread count it does not change, and on one whose
#: own kernels are the baseline the vector kernels do not. The reversed clock turns every
#: one-step timing verdict around on any machine.
THREADS = {"one-thread": "1", "four-threads": "4", "many-threads": "16"}


def rejected_by(kind: str, threads: str, kernels: str) -> list[str]:
    """The runs that must reject ``kind`` on a build machine with this many threads and
    these vector kernels (a run that changes neither cannot)."""
    def turns_threads(environment: str) -> bool:
        return any(THREADS.get(name, threads) != threads for name in parts(environment))

    def turns_kernels(environment: str) -> bool:
        return "baseline-cpu" in parts(environment) and kernels != "DEFAULT"

    if kind == "an exact equality of a sum in vector lanes":
        return [env for env in PORTABLE if turns_kernels(env)]
    if kind == "a memory claim that counts the threads":
        return [env for env in PORTABLE if turns_threads(env)]
    if kind.startswith("a memory measurement"):  # a workstation's sixteen threads break it
        return PORTABLE if int(threads) <= 8 else []
    if kind.startswith("a timing verdict"):
        return PORTABLE
    return [env for env in PORTABLE if turns_threads(env) or turns_kernels(env)]


def test_planted_fragility_is_caught(tmp_path: Path, build_machine: list[list[str]]) -> None:
    """Each fragile chapter runs cleanly on the build machine and fails in the runs that
    change what it leans on, with a message naming the environment."""
    threads, kernels = build_machine[0][:2]
    sums, small = build_machine[1][0].rsplit(" ", 1)
    cells = {kind: code.format(sums=sums, small=small, threads=threads)
             for kind, code in FRAGILE.items()}
    control = run_planted(tmp_path, "control", [PRELUDE, *cells.values()], "default")
    assert not isinstance(control, ChapterFailure), f"not fragile at home: {control}"
    run_threads = {THREADS[name] for env in PORTABLE for name in parts(env) if name in THREADS}
    for index, (kind, cell) in enumerate(cells.items()):
        environments = rejected_by(kind, threads, kernels)
        if threads not in run_threads and kernels != "DEFAULT":  # every knob can turn here
            assert environments, f"{kind}: no run turns the knob it leans on"
        rejected = []
        for environment in environments:
            result = run_planted(tmp_path, f"fragile{index}", [PRELUDE, cell], environment)
            if isinstance(result, ChapterFailure):
                ran = for_chapter(environment, tmp_path / f"fragile{index}.md")
                assert result.cell_index == 1 and result.environment == ran
                assert "AssertionError" in result.error and describe(ran) in str(result)
                rejected.append(environment)
        assert rejected == environments, f"{kind}: let through by " \
            f"{sorted(set(environments) - set(rejected))}"
