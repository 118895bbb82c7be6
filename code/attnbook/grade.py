"""Grade the problem set in ``exercises/``: points per test, a total, and a JSON report.

From the repository root::

    python -m attnbook.grade exercises/scaling
    python -m attnbook.grade exercises/scaling --solution alice/solution.py --json alice.json
    python -m attnbook.grade exercises/*            # every folder, one pytest run

Each folder holds a ``grading.toml`` that gives every test of the folder its points, says which
book exercise each test belongs to with its difficulty and time, and sets two rules for
``solution.py``:

- ``allowed_imports``: what the solution may import from ``attnbook`` (most folders: nothing,
  since the checkers compare with the package, a solution that only calls the package would
  pass every test);
- ``forbidden``: the calls that would make the task trivial, as dotted names
  (``"torch.softmax"``, resolved through ``import ... as``) or attribute names starting with a
  dot (``".softmax"`` forbids ``scores.softmax(-1)`` and every other ``something.softmax``).

A solution that breaks a rule, imports by name (``__import__``, ``importlib``, ``exec``,
``eval``, ``getattr``) or imports ``*`` is refused before any test runs: it scores 0 and the
report says why. The screen reads the source; it stops the easy wrappers, not a determined
cheat, so a teacher still reads what scores full points.

Grading runs the folder's own tests with pytest, in a subprocess, on a temporary copy of the
folder (so ``--solution`` never overwrites anything). A test function earns its points when
it passes, every case of it if it is parametrised; a skipped test earns nothing. The JSON
report holds the total (``score``, ``max_score``), one entry per test (``name``, ``exercise``,
``score``, ``max_score``, ``status``, ``output``) and each folder's total and refusal reasons.

The exit status is 0 when the folders were graded (whatever the score), 1 when a solution was
refused, and 2 for a usage error (a folder without ``grading.toml``, a test without points).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from xml.etree import ElementTree

from .course import DIFFICULTIES

__all__ = [
    "Exercise",
    "FolderReport",
    "Grading",
    "TestResult",
    "grade",
    "main",
    "read_grading",
    "screen",
]

#: Names that import or run code named by a string: the screen cannot see what they reach.
#: A dotted name is refused if it is one of these, or ends in one of the last three.
_BY_NAME = frozenset({"exec", "eval", "compile", "builtins.exec", "builtins.eval",
                      "builtins.compile", "sys.modules", "getattr", "builtins.getattr"})
_BY_NAME_ENDINGS = ("__import__", "import_module", "__builtins__")


@dataclass(frozen=True)
class Exercise:
    """One book exercise of a folder: its label, effort and the points of its tests."""

    label: str
    difficulty: str
    minutes: int
    #: test function name -> points
    points: Mapping[str, int]

    @property
    def max_score(self) -> int:
        return sum(self.points.values())


@dataclass(frozen=True)
class Grading:
    """A folder's ``grading.toml``."""

    folder: Path
    exercises: tuple[Exercise, ...]
    allowed_imports: tuple[str, ...]
    forbidden: tuple[str, ...]

    def points(self) -> dict[str, tuple[str, int]]:
        """test function name -> (exercise label, points)."""
        return {test: (exercise.label, value)
                for exercise in self.exercises for test, value in exercise.points.items()}


@dataclass
class TestResult:
    name: str
    exercise: str
    score: int
    max_score: int
    status: str
    output: str = ""


@dataclass
class FolderReport:
    folder: str
    score: int
    max_score: int
    tests: list[TestResult]
    refused: list[str] = field(default_factory=list)


def _string_list(table: Mapping, key: str, where: Path) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{where}: {key} must be a list of strings, got {value!r}")
    return tuple(value)


def read_grading(folder: str | os.PathLike) -> Grading:
    """Read and check ``<folder>/grading.toml``.

    Raises:
        FileNotFoundError: the folder has no ``grading.toml``.
        ValueError: a key is missing or has the wrong kind of value (the message names it).
    """
    folder = Path(folder)
    path = folder / "grading.toml"
    if not path.is_file():
        raise FileNotFoundError(f"folder: {folder} has no grading.toml; expected an exercise "
                                f"folder such as exercises/scaling")
    with path.open("rb") as file:
        table = tomllib.load(file)
    entries = table.get("exercise")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected one or more [[exercise]] tables")
    exercises = []
    for entry in entries:
        label = entry.get("label")
        if not isinstance(label, str) or not label:
            raise ValueError(f"{path}: every [[exercise]] needs a label string, got {label!r}")
        difficulty = entry.get("difficulty")
        if difficulty not in DIFFICULTIES:
            raise ValueError(f"{path}: {label}: difficulty must be one of {DIFFICULTIES}, "
                             f"got {difficulty!r}")
        minutes = entry.get("minutes")
        if not isinstance(minutes, int) or isinstance(minutes, bool) or minutes <= 0:
            raise ValueError(f"{path}: {label}: minutes must be a positive integer, "
                             f"got {minutes!r}")
        points = entry.get("points")
        if (not isinstance(points, dict) or not points
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                           for v in points.values())):
            raise ValueError(f"{path}: {label}: points must map each test function to a "
                             f"positive integer, got {points!r}")
        exercises.append(Exercise(label, difficulty, minutes, dict(points)))
    tests = [test for exercise in exercises for test in exercise.points]
    repeated = sorted({test for test in tests if tests.count(test) > 1})
    if repeated:
        raise ValueError(f"{path}: tests given points twice: {repeated}")
    rules = table.get("rules", {})
    return Grading(folder, tuple(exercises), _string_list(rules, "allowed_imports", path),
                   _string_list(rules, "forbidden", path))


#: ast.parse one source at a time: in CPython 3.11 the AST constructor keeps its recursion
#: depth in the interpreter, shared by its threads, so two parses at once (grade() called
#: from two threads, as tests/test_exercises.py does) can fail with "SystemError: AST
#: constructor recursion depth mismatch" (python/cpython#106905).
_PARSE_LOCK = threading.Lock()


def _parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _PARSE_LOCK:
        return ast.parse(source, filename)


def _test_functions(folder: Path) -> list[str]:
    """The test functions that the folder's ``test_*.py`` files define, in order."""
    names = []
    for path in sorted(folder.glob("test_*.py")):
        tree = _parse(path.read_text(), str(path))
        names += [node.name for node in tree.body
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]
    return names


def _dotted(node: ast.AST, aliases: Mapping[str, str]) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, with the name's import resolved."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def screen(source: str, *, allowed_imports: Iterable[str] = (),
           forbidden: Iterable[str] = ()) -> list[str]:
    """The reasons to refuse a solution's ``source``, empty when it keeps the rules.

    Args:
        source: the text of a ``solution.py``.
        allowed_imports: dotted names the solution may import from ``attnbook``, such as
            ``"attnbook.efficient.KVCache"`` (a module name allows everything in it).
        forbidden: dotted names it may not use (``"torch.softmax"``), or attribute names
            starting with a dot (``".softmax"``).
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be the text of a solution (str), got "
                        f"{type(source).__name__}")
    allowed = tuple(allowed_imports)
    forbidden = tuple(forbidden)
    try:
        tree = _parse(source)
    except SyntaxError as error:
        return [f"solution.py does not parse: {error.msg} (line {error.lineno})"]

    def may_import(name: str) -> bool:
        if name != "attnbook" and not name.startswith("attnbook."):
            return True
        return any(name == ok or name.startswith(ok + ".") for ok in allowed)

    aliases: dict[str, str] = {}
    reasons = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not may_import(alias.name):
                    reasons.append(f"line {node.lineno}: imports {alias.name}; "
                                   f"{_allowed_text(allowed)}")
                if alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if any(alias.name == "*" for alias in node.names):
                reasons.append(f"line {node.lineno}: from {node.module} import * hides which "
                               f"names the solution uses; import each by name")
                continue
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                if not may_import(name):
                    reasons.append(f"line {node.lineno}: imports {name}; "
                                   f"{_allowed_text(allowed)}")
                aliases[alias.asname or alias.name] = name
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute | ast.Name):
            continue
        if (isinstance(node, ast.Name) and node.id not in aliases and node.id not in _BY_NAME
                and not node.id.endswith(_BY_NAME_ENDINGS)):
            continue
        name = _dotted(node, aliases)
        if name is None:
            attribute = node.attr if isinstance(node, ast.Attribute) else None
            if attribute and f".{attribute}" in forbidden:
                reasons.append(f"line {node.lineno}: uses .{attribute}, which this exercise "
                               f"asks you to write yourself")
            continue
        if name in _BY_NAME or name.endswith(_BY_NAME_ENDINGS):
            reasons.append(f"line {node.lineno}: {name} imports or runs code by name, which "
                           f"the grader cannot check; import what you need by name")
        elif name in forbidden or f".{name.rsplit('.', 1)[-1]}" in forbidden:
            reasons.append(f"line {node.lineno}: uses {name}, which this exercise asks you "
                           f"to write yourself")
    # one reason per line and kind, in line order
    unique = dict.fromkeys(reasons)
    return sorted(unique, key=lambda reason: int(reason.split(":")[0].split()[-1])
                  if reason.startswith("line ") else 0)


def _allowed_text(allowed: Sequence[str]) -> str:
    if not allowed:
        return ("a solution may not import attnbook here: the tests compare with it, so "
                "write the code yourself")
    return "from attnbook a solution may import only " + ", ".join(allowed)


def _pytest_outcomes(copies: Path, names: Sequence[str], timeout: float
                     ) -> tuple[dict[str, dict[str, list[str]]], str]:
    """Run pytest on the copied folders ``names`` inside ``copies``.

    Returns, per folder, each test function's failure texts (an empty list for a pass; a
    parametrised test collects all its cases), and pytest's own output for errors outside
    any test (a module that does not import).
    """
    report = copies / "report.xml"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "--continue-on-collection-errors",
             f"--junitxml={report}", *names],
            cwd=copies, env=env, capture_output=True, text=True, timeout=timeout)
        log = run.stdout + run.stderr
    except subprocess.TimeoutExpired:
        return {}, f"the tests did not finish within {timeout:.0f} s (an endless loop?)"
    outcomes: dict[str, dict[str, list[str]]] = {}
    if not report.is_file():
        return outcomes, log
    for case in ElementTree.parse(report).iter("testcase"):
        # classname "<folder>.test_<folder>"; name "test_x" or "test_x[case]". A module that
        # fails to import is one case with no classname, named "<folder>.test_<folder>": its
        # error goes to every test of the folder (the key _COLLECTION below).
        problems = [child for child in case if child.tag in ("failure", "error", "skipped")]
        if case.get("classname"):
            folder = case.get("classname", "").split(".")[0]
            test = case.get("name", "").split("[")[0]
        else:
            folder, test = case.get("name", "").split(".")[0], _COLLECTION
        texts = outcomes.setdefault(folder, {}).setdefault(test, [])
        # the element's text is pytest's full report; its message attribute, a shortened
        # first part of it, is only a fallback
        texts += [(p.text or p.get("message") or p.tag).strip() for p in problems]
    return outcomes, log


#: The key of a folder's outcomes under which an error collecting its tests is kept.
_COLLECTION = "<collection>"


def grade(folders: Sequence[str | os.PathLike], *,
          solutions: Mapping[str, str | os.PathLike] | None = None,
          timeout: float = 600.0) -> list[FolderReport]:
    """Grade exercise folders: one report per folder, in the order given.

    Args:
        folders: exercise folders, each with ``grading.toml``, ``solution.py`` and tests.
        solutions: folder name -> a ``solution.py`` to grade instead of the folder's own.
        timeout: seconds for the whole pytest run.
    """
    if isinstance(folders, str | os.PathLike):
        raise TypeError("folders must be a list of exercise folders, got one path; "
                        "wrap it in a list")
    if importlib.util.find_spec("pytest") is None:
        raise ImportError("the grader runs the folders' tests with pytest, which is not "
                          "installed here: pip install pytest")
    gradings = [read_grading(folder) for folder in folders]
    names = [grading.folder.resolve().name for grading in gradings]
    if len(set(names)) != len(names):
        raise ValueError(f"folders: each folder once, got {names}")
    solutions = dict(solutions or {})
    unknown = sorted(set(solutions) - set(names))
    if unknown:
        raise ValueError(f"solutions: no folder named {unknown} among {names}")
    missing = sorted(str(path) for path in solutions.values() if not Path(path).is_file())
    if missing:
        raise ValueError(f"solutions: no such file {missing}; expected a solution.py to grade")
    for grading in gradings:
        defined = _test_functions(grading.folder)
        missing = [test for test in defined if test not in grading.points()]
        extra = [test for test in grading.points() if test not in defined]
        if missing or extra:
            raise ValueError(f"{grading.folder}/grading.toml: tests without points {missing}, "
                             f"points for tests that do not exist {extra}")
    with tempfile.TemporaryDirectory(prefix="attnbook-grade-") as temporary:
        copies = Path(temporary)
        refusals, to_run = {}, []
        for grading, name in zip(gradings, names, strict=True):
            shutil.copytree(grading.folder, copies / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            if name in solutions:
                shutil.copyfile(solutions[name], copies / name / "solution.py")
            source = (copies / name / "solution.py").read_text()
            refusals[name] = screen(source, allowed_imports=grading.allowed_imports,
                                    forbidden=grading.forbidden)
            if not refusals[name]:
                to_run.append(name)
        outcomes, log = _pytest_outcomes(copies, to_run, timeout) if to_run else ({}, "")
    reports = []
    for grading, name in zip(gradings, names, strict=True):
        results = []
        for test, (label, points) in grading.points().items():
            texts = outcomes.get(name, {}).get(test)
            collection = outcomes.get(name, {}).get(_COLLECTION)
            if refusals[name]:
                status, output = "failed", "refused: " + "; ".join(refusals[name])
            elif texts is None:
                why = "\n\n".join(collection) if collection else log[-3000:]
                status, output = "failed", "the test did not run:\n" + why
            else:
                status, output = ("passed", "") if not texts else ("failed", "\n\n".join(texts))
            results.append(TestResult(test, label, points if status == "passed" else 0,
                                      points, status, output))
        reports.append(FolderReport(str(grading.folder), sum(r.score for r in results),
                                    sum(r.max_score for r in results), results,
                                    refusals[name]))
    return reports


def _summary(text: str) -> list[str]:
    """What a failure says in brief: its error line and its hint, if it has one."""
    lines = [line.strip().removeprefix("E").strip() for line in text.splitlines()]
    error = next((line for line in lines if "Error:" in line or "error:" in line),
                 next((line for line in lines if line), ""))
    hint = next((line for line in lines if line.startswith("hint:")), None)
    return [error] + ([hint] if hint and hint != error else [])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnbook.grade",
        description="Grade exercise folders: points per test and a total.")
    parser.add_argument("folders", nargs="+", help="exercise folders, e.g. exercises/scaling")
    parser.add_argument("--solution", help="a solution.py to grade instead of the folder's "
                        "own (one folder only)")
    parser.add_argument("--json", help="also write the report as JSON to this file")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds for the whole run (default 600)")
    args = parser.parse_args(argv)
    if args.solution and len([f for f in args.folders if not Path(f).is_file()]) != 1:
        parser.error("--solution grades one folder: give exactly one")
    # ``exercises/*`` also names exercises/README.md: grade the folders among the paths
    folders = [folder for folder in args.folders if not Path(folder).is_file()]
    if not folders:
        parser.error("give at least one exercise folder, e.g. exercises/scaling")
    solutions = {Path(folders[0]).resolve().name: args.solution} if args.solution else {}
    try:
        reports = grade(folders, solutions=solutions, timeout=args.timeout)
    except (FileNotFoundError, ImportError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for report in reports:
        print(f"{report.folder}: {report.score} / {report.max_score} points")
        for reason in report.refused:
            print(f"  refused, {reason}")
        for result in report.tests:
            mark = "✓" if result.status == "passed" else "✗"
            print(f"  {mark} {result.score:>2} / {result.max_score:<2} {result.name} "
                  f"({result.exercise})")
            if result.status != "passed" and not report.refused:
                for line in _summary(result.output):
                    print(f"         {line}")
    if len(reports) > 1:
        print(f"total: {sum(r.score for r in reports)} / {sum(r.max_score for r in reports)}"
              f" points")
    if args.json:
        summary = {"score": sum(r.score for r in reports),
                   "max_score": sum(r.max_score for r in reports),
                   "tests": [{**asdict(result), "name": f"{Path(r.folder).name}::{result.name}"}
                             for r in reports for result in r.tests],
                   "folders": [{"folder": r.folder, "score": r.score, "max_score": r.max_score,
                                "refused": r.refused} for r in reports]}
        Path(args.json).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return 1 if any(report.refused for report in reports) else 0


if __name__ == "__main__":
    raise SystemExit(main())
