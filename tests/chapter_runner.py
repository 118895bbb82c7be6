"""Execute a chapter as a plain notebook, outside Sphinx, in a chosen numeric environment.

The book's build runs every chapter once, on the build machine, with its thread count and its
CPU's vector kernels. Floating-point results differ in the last bits between those set-ups, so
a chapter whose asserts hold on one machine can fail on a reader's. This module runs a chapter
the way the build does (jupytext reads the MyST source, nbclient runs it in a fresh kernel,
from ``book/``), but in an environment the caller picks, and reports the first failing cell.

Used by ``tests/test_portability.py``; also a command for contributors::

    .venv/bin/python tests/chapter_runner.py --env one-thread+baseline-cpu book/scaling.md
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
sys.path.insert(0, str(BOOK / "_ext"))

from attnbook_sphinx import KERNEL_ENV  # noqa: E402

#: The numeric perturbations a chapter must survive, besides the build machine's own set-up.
#: ``one-thread``: every parallel reduction splits its work differently than with several.
#: ``baseline-cpu``: PyTorch's plain (non-AVX) kernels and MKL restricted to SSE4.2, which
#: stands in for an older or different CPU.
#: ``four-threads``: four threads, even on a machine with fewer cores
#: (``kernel_startup/threads.py``: PyTorch caps ``OMP_NUM_THREADS`` at the core count): every
#: reduction large enough to be split is split differently than with one thread.
#: ``many-threads``: sixteen threads, as on a workstation. Besides splitting reductions
#: differently, some kernels (PyTorch's fused attention among them) allocate scratch memory
#: per thread, so a claim about memory can depend on the thread count too: a chapter that
#: measures memory runs with sixteen where the suite's run has four (:func:`for_chapter`).
#: Waiting threads sleep (``OMP_WAIT_POLICY=PASSIVE``) instead of spinning:
#: which thread sums which part does not change, and where there are fewer cores than threads
#: spinning only burns them (measured alone on 2 cores: the positions chapter 91 s against 71 s,
#: cache-budget 211 s of CPU against 185 s).
#: ``reversed-clock``: every timer's reading advances by a step that is shorter the longer the
#: real wait since the last reading (``kernel_startup/scramble.py``), so two measured
#: durations come out in reverse order of the real ones: a timing verdict that holds on the
#: build machine fails here, on any machine, where a random clock lets it through half the
#: time. ``scrambled-clock``: random readings, standing in for a machine so loaded, or so
#: different, that any timing comparison can come out either way; ``mirrored-clock``: the
#: same random steps in reverse order of size.
#: The startup files are IPython startup files, run in the chapter's kernel before its first
#: cell.
#:
#: An environment may combine several of these with ``+`` (``one-thread+baseline-cpu``): the
#: variables and startup files of each apply together. They are independent knobs (thread
#: count, vector kernels, clock): a result that moves when one knob turns has no reason to
#: move back when another turns too, so one run that turns three catches what each would
#: catch alone (``test_portability`` plants fragile chapters to check it).
ENVIRONMENTS: dict[str, dict[str, str]] = {
    "default": {},
    "one-thread": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    "baseline-cpu": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "four-threads": {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4",
                     "OMP_WAIT_POLICY": "PASSIVE"},
    "many-threads": {"OMP_NUM_THREADS": "16", "MKL_NUM_THREADS": "16",
                     "OMP_WAIT_POLICY": "PASSIVE"},
    "scrambled-clock": {"ATTNBOOK_CLOCK_SEED": "20261125"},
    "mirrored-clock": {"ATTNBOOK_CLOCK_SEED": "20261125", "ATTNBOOK_CLOCK_MIRROR": "1"},
    "reversed-clock": {"ATTNBOOK_CLOCK_REVERSE": "1"},
}
_STARTUP_FOLDER = Path(__file__).with_name("kernel_startup")
STARTUP = {
    "four-threads": _STARTUP_FOLDER / "threads.py",
    "many-threads": _STARTUP_FOLDER / "threads.py",
    "scrambled-clock": _STARTUP_FOLDER / "scramble.py",
    "mirrored-clock": _STARTUP_FOLDER / "scramble.py",
    "reversed-clock": _STARTUP_FOLDER / "scramble.py",
}


#: The environments that set the thread count.
THREAD_COUNTS = {"one-thread", "four-threads", "many-threads"}
#: What a chapter's text calls when it measures memory (``attnbook.peak_memory_bytes`` and
#: what Python and PyTorch offer besides, ``max_memory_allocated`` and the like included);
#: a mention in the prose counts too, which at worst runs a chapter with more threads than
#: it needs.
MEASURES_MEMORY = re.compile(r"(peak_memory_bytes|tracemalloc|memory_allocated|memory_reserved"
                             r"|memory_stats|profile_memory|getrusage|memory_info)\b")


def for_chapter(environment: str, chapter: Path) -> str:
    """The environment ``chapter`` runs in when the suite asks for ``environment``.

    A chapter that measures memory (:data:`MEASURES_MEMORY`) runs with sixteen threads where
    ``environment`` has four: scratch memory that grows with the thread count must fit the
    chapter's claims on a workstation too. Every other chapter runs in ``environment``: four
    threads split every large reduction differently from the build's one, as sixteen do,
    and on two cores they cost less CPU time to wake for each of SmolLM2's parallel matrix
    products (the language-model chapter, alone: 96 s of CPU against 114 s).
    """
    names = parts(environment)
    if "four-threads" in names and MEASURES_MEMORY.search(Path(chapter).read_text()):
        return "+".join("many-threads" if name == "four-threads" else name for name in names)
    return environment


def parts(environment: str) -> list[str]:
    """The single environments a (possibly combined) environment is made of."""
    if not isinstance(environment, str):
        raise TypeError(f"environment must be a str such as 'one-thread+baseline-cpu', got "
                        f"{type(environment).__name__}")
    names = environment.split("+")
    unknown = [name for name in names if name not in ENVIRONMENTS]
    if unknown or (len(names) > 1 and "default" in names) or len(set(names)) < len(names):
        raise ValueError(f"environment must be one of {sorted(ENVIRONMENTS)}, or several of "
                         f"them but 'default' joined with '+', got {environment!r}")
    clocks = [name for name in names if STARTUP.get(name) == STARTUP["scrambled-clock"]]
    if len(clocks) > 1:
        raise ValueError(f"environment must scramble the clock at most once, got {environment!r}")
    if len(THREAD_COUNTS & set(names)) > 1:
        raise ValueError(f"environment must set the thread count at most once, got "
                         f"{environment!r}")
    return names


def variables(environment: str) -> dict[str, str]:
    """The variables of every part of ``environment``, merged."""
    merged: dict[str, str] = {}
    for name in parts(environment):
        merged.update(ENVIRONMENTS[name])
    return merged


@dataclass
class ChapterFailure(Exception):
    """A chapter's cell raised where no error was expected."""

    chapter: str
    environment: str
    cell_index: int
    cell_source: str
    error: str

    def __str__(self) -> str:
        first_lines = "\n".join(self.cell_source.splitlines()[:6])
        source = BOOK / f"{self.chapter}.md"
        text = source.read_text() if source.is_file() else ""
        where = text.find(self.cell_source) if self.cell_source else -1
        line = f", line {text.count(chr(10), 0, where) + 1}" if where >= 0 else ""
        return (f"book/{self.chapter}.md{line}: code cell {self.cell_index} failed in the "
                f"'{self.environment}' environment ({describe(self.environment)}):\n"
                f"{self.error}\n--- the cell begins ---\n{first_lines}")


def describe(environment: str) -> str:
    """The environment's variables, as a reader would export them."""
    words = [f"{k}={v}" for k, v in variables(environment).items()]
    words += [f"{STARTUP[name].name} at kernel start" for name in parts(environment)
              if name in STARTUP]
    return " ".join(words) or "the machine's own settings"


def kernel_env(environment: str, scratch: Path) -> dict[str, str]:
    """The full environment for the chapter's kernel; ``scratch`` is an empty folder."""
    # What the book's build gives its kernels, then the environment's own variables.
    env = {**KERNEL_ENV, **os.environ, **variables(environment)}
    startups = [STARTUP[name] for name in parts(environment) if name in STARTUP]
    if startups:
        folder = scratch / "profile_default" / "startup"
        folder.mkdir(parents=True)
        for index, path in enumerate(startups):
            shutil.copy(path, folder / f"{index:02d}-{path.name}")
        env["IPYTHONDIR"] = str(scratch)
    # The inline backend draws the figures, as in the build; a non-interactive backend set by
    # the caller would silently skip them.
    env.pop("MPLBACKEND", None)
    return env


@functools.cache
def quiet_kernel_manager() -> type:
    """A kernel manager whose clients start no heartbeat channel.

    nbclient shuts the kernel down before it stops the client's channels. If the heartbeat
    thread pings in between, it waits for an answer from a kernel that is gone, and
    stopping the channels joins that thread forever (a hang seen once in a full
    ``make test``, in the planted chapters' cleanup; jupyter_client#771 reports the like).
    A client made by its kernel manager asks the manager, not the heartbeat, whether the
    kernel lives, so nothing is lost without it.
    """
    from jupyter_client.asynchronous import AsyncKernelClient
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class QuietKernelClient(AsyncKernelClient):
        def start_channels(self, shell: bool = True, iopub: bool = True, stdin: bool = True,
                           hb: bool = True, control: bool = True) -> None:
            super().start_channels(shell, iopub, stdin, False, control)

    class QuietKernelManager(AsyncKernelManager):
        @default("client_factory")
        def _quiet_client(self) -> type:
            return QuietKernelClient

    return QuietKernelManager


def execute_chapter(chapter: Path, environment: str,
                    timeout: int = 600) -> tuple[float, object]:
    """Run every code cell of ``chapter`` in ``environment``.

    Returns the seconds it took and the executed notebook.

    Raises ``ChapterFailure`` naming the chapter, the cell and the environment when a cell
    not tagged ``raises-exception`` raises.
    """
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = jupytext.read(chapter)
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            kernel_manager_class=quiet_kernel_manager(),
                            resources={"metadata": {"path": str(chapter.parent)}})
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            client.execute(env=kernel_env(environment, Path(scratch)))
    except CellExecutionError as error:
        code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
        for index, cell in enumerate(code_cells):
            expected = "raises-exception" in cell.get("metadata", {}).get("tags", [])
            errors = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
            if errors and not expected:
                summary = f"{errors[0]['ename']}: {errors[0]['evalue']}"
                raise ChapterFailure(chapter.stem, environment, index, cell.source,
                                     summary) from None
        raise ChapterFailure(chapter.stem, environment, -1, "", str(error)[-2000:]) from None
    return time.perf_counter() - start, notebook


GLUE_REFERENCE = re.compile(r"\{glue:text\}`([^`:]+)(?::([^`]*))?`")


def glued_values(notebook) -> dict[str, str]:
    """Every value the executed notebook glued, as the text the page would show."""
    values = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None:
                data = output.get("data", {})
                values[name] = data.get("text/plain",
                                        data.get("application/papermill.record/text/plain"))
    return values


def notebook_chapters() -> list[Path]:
    """The book's pages that are notebooks (their front matter names a kernel)."""
    return sorted(path for path in BOOK.glob("*.md")
                  if "kernelspec:" in path.read_text().split("\n---", 1)[0])


def outcome(chapter: Path, environment: str) -> tuple[float, str | None]:
    """(seconds, None) when the chapter runs cleanly where the suite runs it for
    ``environment`` (:func:`for_chapter`), else (seconds, what went wrong)."""
    environment = for_chapter(environment, chapter)
    start = time.perf_counter()
    try:
        _, notebook = execute_chapter(chapter, environment)
    except ChapterFailure as failure:
        return time.perf_counter() - start, str(failure)
    problems = glue_problems(chapter, notebook)
    report = (f"book/{chapter.name}: glue references the strict build would reject in the "
              f"'{environment}' environment:\n" + "\n".join(problems)) if problems else None
    return time.perf_counter() - start, report


def glue_problems(chapter: Path, notebook) -> list[str]:
    """What the strict build would reject in the prose's glue references.

    A ``{glue:text}`` reference to a name no cell glued, and a formatted reference
    (``name:.2f``) to a value that is not a plain Python number (a NumPy or torch scalar
    glues as ``np.float64(...)``, which the format cannot read).
    """
    values = glued_values(notebook)
    problems = []
    for name, spec in GLUE_REFERENCE.findall(chapter.read_text()):
        if name not in values:
            problems.append(f"{name}: referenced in the prose, never glued")
            continue
        if spec:
            try:
                number = ast.literal_eval(values[name])
                format(number, spec)
                if isinstance(number, bool) or not isinstance(number, int | float):
                    raise TypeError(type(number).__name__)
            except (ValueError, TypeError, SyntaxError) as error:
                problems.append(f"{name}: glued {values[name]!r}, which the format "
                                f"'{spec}' cannot show ({error})")
    return problems


def _environment_argument(text: str) -> str:
    try:
        parts(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="default", type=_environment_argument,
                        help="one of " + ", ".join(ENVIRONMENTS) + ", or several joined "
                             "with '+' (one-thread+baseline-cpu)")
    parser.add_argument("chapters", nargs="+", type=Path)
    args = parser.parse_args(argv)
    status = 0
    for chapter in args.chapters:
        # As the suite runs it: sixteen threads where a chapter that measures memory asks four.
        environment = for_chapter(args.env, chapter)
        try:
            seconds, notebook = execute_chapter(chapter.resolve(), environment)
            problems = glue_problems(chapter, notebook)
            verdict = "GLUE" if problems else "ok"
            print(f"{verdict:5s} {chapter.stem:28s} {environment:15s} {seconds:6.1f} s",
                  flush=True)
            for problem in problems:
                print(f"      {problem}", flush=True)
            status |= bool(problems)
        except ChapterFailure as failure:
            print(f"FAIL  {failure}", flush=True)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
