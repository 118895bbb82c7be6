"""Mutation tests of the problem set: every exercise folder against the field's typical bugs.

A *mutant* is a wrong solution that a student could write: √d_model instead of √d_head, a
causal mask one key off, a softmax in float32 on float64 scores, two passes over a stream
that can be read once. The mutants and the right answers in other styles are the tables of
tests/test_checks.py (``WRONG`` and ``PASSING``), where each is run through the book's
checker; here each one also becomes the ``solution.py`` of its folder in ``exercises/``, and
the folder's own tests run on it, in this process.

For every folder:

- every mutant fails the folder's tests, and one of the failures carries the hint that names
  its mistake (the last expected fragment of its ``WRONG`` entry); the book's checker fails
  with the same hint, so the chapter and the problem set say the same thing;
- every right answer (the reference solution and the other styles) passes every test of the
  folder and the checker;
- the folder has at least :data:`MOST_MUTANTS` mutants and two right answers of each of its
  functions.

An entry that no solution.py can define (an instance where the folder asks for a class), or
of a function that only a chapter checks, runs through the checker alone.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_checks import PASSING, SOLVED, WRONG

from attnbook.checks import ExerciseCheckError

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"

#: At least this many typical mistakes for every folder.
MOST_MUTANTS = 5

#: checker -> (folder, the names of the functions it checks, in the checker's order)
CHECKED: dict[Callable, tuple[str, tuple[str, ...]]] = {
    checker: (folder, names) for folder, _, checker, names in SOLVED.values()
}
FOLDERS = sorted(path.name for path in EXERCISES.iterdir()
                 if (path / "solution.py").is_file())


def folder_functions(folder: str) -> set[str]:
    """What the folder's stub asks for: the public functions and classes it defines."""
    path = EXERCISES / folder / "solution.py"
    spec = importlib.util.spec_from_file_location(f"_mutant_stub_{folder}", path)
    stub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stub)
    return {name for name, value in vars(stub).items()
            if not name.startswith("_") and getattr(value, "__module__", None) == stub.__name__}


FUNCTIONS = {folder: folder_functions(folder) for folder in FOLDERS}


def in_folder(checker: Callable, args: tuple = ()) -> str | None:
    """The folder whose solution.py holds what ``checker`` checks, or None: book only, or
    ``args`` are not what a solution.py defines (an instance where a class is asked for)."""
    folder, names = CHECKED[checker]
    definable = all(isinstance(arg, type) or inspect.isfunction(arg) for arg in args)
    return folder if definable and set(names) <= FUNCTIONS.get(folder, set()) else None


@contextlib.contextmanager
def as_solution(folder: str, definitions: dict[str, object]) -> Iterator[types.ModuleType]:
    """The folder's test module, importing ``definitions`` as its ``.solution``.

    The reference solution supplies whatever ``definitions`` leaves out, so a mutant of one
    function of a folder runs with the right versions of the others.
    """
    package = f"_mutant_{folder}"
    reference = importlib.import_module(f"exercise_solutions.{folder}")
    solution = types.ModuleType(f"{package}.solution")
    solution.__dict__.update({name: getattr(reference, name) for name in FUNCTIONS[folder]})
    solution.__dict__.update(definitions)
    parent = types.ModuleType(package)
    parent.__path__ = []  # a package: `from .solution import ...` resolves in it
    path = EXERCISES / folder / f"test_{folder}.py"
    spec = importlib.util.spec_from_file_location(f"{package}.test_{folder}", path)
    tests = importlib.util.module_from_spec(spec)
    modules = {package: parent, solution.__name__: solution, tests.__name__: tests}
    sys.modules.update(modules)
    try:
        spec.loader.exec_module(tests)
        yield tests
    finally:
        for name in modules:
            sys.modules.pop(name, None)


def run_folder(folder: str, definitions: dict[str, object]) -> dict[str, str | None]:
    """Every ``test_*`` function of the folder on ``definitions``: its failure or None."""
    results: dict[str, str | None] = {}
    with as_solution(folder, definitions) as tests, \
            contextlib.redirect_stdout(io.StringIO()):
        for name, test in vars(tests).items():
            if name.startswith("test_") and callable(test):
                try:
                    test()
                except Exception as failure:  # a failed assert or the mutant's own error
                    results[name] = f"{type(failure).__name__}: {failure}"
                else:
                    results[name] = None
    return results


def run_checker(checker: Callable, args: tuple) -> str | None:
    """The book's checker on ``args``: its failure message, or None when it passes."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            checker(*args)
        except ExerciseCheckError as failure:
            return str(failure)
    return None


def hint_of(message: str) -> str:
    """The hint line of a checker's message."""
    assert "\n  hint: " in message, message
    return message.split("\n  hint: ", 1)[1]


def names_the_mistake(message: str, naming: str) -> bool:
    """Whether ``naming`` is in the message's first line (what failed) or in its hint: not
    only in the numbers between them."""
    return naming in message.splitlines()[0] or naming in hint_of(message)


def mutants_of(folder: str) -> list[tuple[str, Callable, tuple, list[str]]]:
    return [entry for entry in WRONG if CHECKED[entry[1]][0] == folder]


def right_answers_of(folder: str) -> list[tuple[str, Callable, tuple]]:
    """The reference solution of each checked function, then every other style."""
    reference = importlib.import_module(f"exercise_solutions.{folder}")
    answers = [(f"reference {checker.__name__}", checker,
                tuple(getattr(reference, name) for name in names))
               for checker, (home, names) in CHECKED.items() if home == folder]
    answers += [(f"{checker.__name__} on {getattr(args[0], '__name__', repr(args[0]))}",
                 checker, args) for checker, args in PASSING if CHECKED[checker][0] == folder]
    return answers


@pytest.fixture(scope="module")
def timings() -> Iterator[dict[str, float]]:
    spent: dict[str, float] = {}
    yield spent
    slowest = max(spent, key=spent.get) if spent else None
    if slowest:
        print(f"\nmutation tests: slowest folder {slowest}, {spent[slowest]:.1f} s; all "
              f"{sum(spent.values()):.1f} s")


def test_every_folder_has_its_mutants_and_right_answers():
    assert set(FOLDERS) == {folder for folder, _ in CHECKED.values()}
    for folder in FOLDERS:
        in_the_folder = [entry for entry in mutants_of(folder)
                         if in_folder(entry[1], entry[2])]
        assert len(in_the_folder) >= MOST_MUTANTS, (
            f"exercises/{folder}: {len(in_the_folder)} mutants, expected {MOST_MUTANTS}")
        for checker, (home, _) in CHECKED.items():
            if home == folder:
                styles = [a for a in right_answers_of(folder) if a[1] is checker]
                assert len(styles) >= 2, f"{checker.__name__}: one right answer only"


@pytest.mark.parametrize("folder", FOLDERS)
def test_mutants_fail_with_the_hint_that_names_them(folder, timings):
    start = time.perf_counter()
    for title, checker, args, parts in mutants_of(folder):
        naming = parts[-1]
        book = run_checker(checker, args)
        assert book is not None, f"{title}: {checker.__name__} passed a wrong solution"
        assert names_the_mistake(book, naming), (
            f"{title}: the checker's message does not name the mistake ({naming!r}):\n{book}")
        home = in_folder(checker, args)
        if home is None:
            continue
        _, names = CHECKED[checker]
        results = run_folder(home, dict(zip(names, args, strict=True)))
        failures = [message for message in results.values() if message is not None]
        assert failures, f"{title}: every test of exercises/{home} passed a wrong solution"
        assert any(hint_of(book) in message for message in failures), (
            f"{title}: no test of exercises/{home} gives the checker's hint "
            f"{hint_of(book)!r}; the failures were:\n" + "\n".join(failures))
    timings[folder] = timings.get(folder, 0.0) + time.perf_counter() - start


@pytest.mark.parametrize("folder", FOLDERS)
def test_right_answers_in_every_style_pass(folder, timings):
    start = time.perf_counter()
    for title, checker, args in right_answers_of(folder):
        book = run_checker(checker, args)
        assert book is None, f"{title}: the checker refused a right answer:\n{book}"
        home = in_folder(checker, args)
        if home is None:
            continue
        _, names = CHECKED[checker]
        results = run_folder(home, dict(zip(names, args, strict=True)))
        failed = {name: message for name, message in results.items() if message}
        assert not failed, f"{title}: exercises/{home} refused a right answer: {failed}"
        assert len(results) >= 2
    timings[folder] = timings.get(folder, 0.0) + time.perf_counter() - start
