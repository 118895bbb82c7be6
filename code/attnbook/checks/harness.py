"""The harness every checker runs in: numbered checks, messages a reader can act on.

A checker opens ``checks = Checks("check_x", error_hint)`` (the hint for an exception the
reader's code raised, often a table of :func:`error_hints`) and runs each check inside
``with checks.case(title):``, or a list of them with ``checks.run_all``. In a check it calls
the reader's code through :func:`call_reader` (their exception becomes a report of their line;
changing an argument in place fails) and compares with the functions of
:mod:`~attnbook.checks.compare`, which raise :class:`~attnbook.checks.compare.Mismatch` with
what was expected, what came back and a hint. ``checks.case`` turns either failure into an
:class:`ExerciseCheckError` whose message names the check; ``checks.passed()`` prints the one
line of success.

Importing this module also makes IPython and Jupyter show an :class:`ExerciseCheckError` as
its message alone (:func:`show_briefly_in_ipython`).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from .compare import Mismatch, values

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True


class ExerciseCheckError(AssertionError):
    """A reader's solution failed a check. The message says which check, what was expected,
    what came back, and gives a hint."""


class NotWrittenYet(ExerciseCheckError):
    """The reader's function still raises the starter's ``NotImplementedError``: a task to
    do, not a mistake. The message says what to write, and IPython shows it as "To do"."""


_NOT_IMPLEMENTED_TODO = (
    "replace the `raise NotImplementedError(...)` line with your implementation, then "
    "run this check again."
)
_IN_PLACE_HINT = (
    "work out of place: write `scores = scores - m` rather than `scores -= m`, and "
    "`masked_fill` rather than `masked_fill_`. The caller still needs its tensor."
)
class _ReaderRaised(Exception):
    """The reader's code raised ``error`` while doing ``call``."""

    def __init__(self, call: str, error: Exception) -> None:
        super().__init__(call)
        self.call = call
        self.error = error


class Checks:
    """Numbers the checks of one checker and turns their failures into messages."""

    def __init__(self, checker: str,
                 error_hint: Callable[[Exception], str | None] = lambda error: None) -> None:
        self.checker = checker
        self.error_hint = error_hint
        self.count = 0

    def case(self, title: str) -> _Case:
        """``with checks.case(title): ...`` runs one check."""
        self.count += 1
        return _Case(self.checker, f"{self.checker}: check {self.count} ({title})",
                     self.error_hint)

    def passed(self) -> None:
        print(f"✓ {self.checker}: all {self.count} checks passed.")

    def run_all(self, run: Callable[..., None], cases: list[tuple]) -> None:
        """Runs ``run(*arguments)`` as one check per ``(title, *arguments)`` of ``cases``,
        then says that all passed.

        Raises:
            ValueError: no cases (nothing would be checked).
        """
        if not cases:
            raise ValueError("cases must hold at least one (title, *arguments) tuple")
        for title, *arguments in cases:
            with self.case(title):
                run(*arguments)
        self.passed()


#: One rule of :func:`error_hints`: the exception types it applies to, a text the error's
#: message must contain ("" for any), and the hint.
HintRule = tuple[type[BaseException] | tuple[type[BaseException], ...], str, str]


def error_hints(*rules: HintRule) -> Callable[[BaseException], str | None]:
    """An ``error_hint`` for :class:`Checks` from a table: the hint of the first rule whose
    types the error is an instance of and whose text its message contains, else None.

    Raises:
        TypeError: a rule that is not ``(type or tuple of types, str, str)``.
    """
    for rule in rules:
        kinds = rule[0] if isinstance(rule, tuple) and rule else None
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if not (isinstance(rule, tuple) and len(rule) == 3
                and all(isinstance(kind, type) and issubclass(kind, BaseException)
                        for kind in kinds)
                and isinstance(rule[1], str) and isinstance(rule[2], str)):
            raise TypeError(f"rules must be (exception type or types, text, hint) tuples, "
                            f"got {rule!r}")

    def hint(error: BaseException) -> str | None:
        message = str(error)
        for kinds, text, advice in rules:
            if isinstance(error, kinds) and text in message:
                return advice
        return None

    return hint


class _Case:
    """One check: a failure inside it becomes an :class:`ExerciseCheckError`."""

    def __init__(self, checker: str, where: str,
                 error_hint: Callable[[Exception], str | None]) -> None:
        self.checker = checker
        self.where = where
        self.error_hint = error_hint

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, failure: BaseException | None,
                 traceback: object) -> bool:
        if isinstance(failure, _ReaderRaised):
            error = failure.error
            raised_at = _reader_line(error)
            if isinstance(error, NotImplementedError):
                raise NotWrittenYet(
                    f"{self.checker}: {failure.call} is not written yet (it raises "
                    f"NotImplementedError: {error})\n"
                    + (f"  at {raised_at}\n" if raised_at else "")
                    + f"  to do: {_NOT_IMPLEMENTED_TODO}"
                ) from error
            hint = self.error_hint(error) or (
                "the line above is where your code raised it; call your function on "
                "a small input to see the whole traceback."
            )
            raise ExerciseCheckError(
                f"{self.where}: {failure.call} raised {type(error).__name__}: {error}\n"
                + (f"  at {raised_at}\n" if raised_at else "")
                + f"  hint: {hint}"
            ) from error
        if isinstance(failure, Mismatch):
            lines = [f"{self.where} failed: {failure.headline}"]
            lines += [f"  {line}" for line in failure.details]
            if failure.hint:
                lines.append(f"  hint: {failure.hint}")
            raise ExerciseCheckError("\n".join(lines)) from None
        return False


def _reader_line(error: BaseException) -> str | None:
    """Where the reader's code raised ``error``: ``"my_softmax, line 3: raise ..."``.

    The last frame of the traceback outside the package attnbook (and outside torch), with
    no file name: a notebook cell's file is a temporary path that means nothing to the reader.
    """
    package = str(Path(__file__).resolve().parents[1])
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not str(Path(frame.filename).resolve()).startswith(package)
              and f"{os.sep}torch{os.sep}" not in frame.filename]
    if not frames:
        return None
    frame = frames[-1]
    return f"{frame.name}, line {frame.lineno}: {(frame.line or '').strip()}"


def show_briefly_in_ipython() -> None:
    """In IPython and Jupyter, show an :class:`ExerciseCheckError` as its message alone.

    The message already says which check failed, what was expected, what came back, where
    the reader's code raised and a hint; the forty lines of this module's frames under it
    would hide it. Elsewhere (plain Python, pytest) nothing changes. This replaces any other
    custom exception handler the shell had.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # IPython is not installed: nothing to configure
        return
    shell = get_ipython()
    if shell is None:
        return

    def brief(shell: object, kind: type, value: BaseException, tb: object,
              tb_offset: int | None = None) -> list[str]:
        label = "To do" if isinstance(value, NotWrittenYet) else kind.__name__
        lines = f"{label}: {value}".splitlines()
        shell._showtraceback(kind, value, lines)  # the shell's own way to show an error
        return lines

    shell.set_custom_exc((ExerciseCheckError,), brief)


show_briefly_in_ipython()


def name_of(fn: object) -> str:
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def call_reader(what: str, fn: Callable, *args: object, names: Sequence[str] = ()) -> object:
    """Call the reader's ``fn(*args)``: their exceptions become :class:`_ReaderRaised`, and
    changing a tensor argument in place is a failed check."""
    before = [arg.detach().clone() if isinstance(arg, Tensor) else None for arg in args]
    try:
        result = fn(*args)
    except Exception as error:
        raise _ReaderRaised(what, error) from error
    for position, (arg, snapshot) in enumerate(zip(args, before, strict=True)):
        if snapshot is not None and not torch.equal(_nan_free(arg), _nan_free(snapshot)):
            name = names[position] if position < len(names) else f"argument {position + 1}"
            raise Mismatch(f"{what} changed its argument `{name}` in place",
                           [f"{name} before: {values(snapshot.flatten())}",
                            f"{name} after:  {values(arg.detach().flatten())}"],
                           _IN_PLACE_HINT)
    return result


def _nan_free(t: Tensor) -> Tensor:
    t = t.detach()
    return torch.nan_to_num(t, nan=0.123) if t.is_floating_point() else t
