"""The harness every checker runs in: numbered checks, messages a reader can act on.

A checker opens ``checks = Checks("check_x", error_hint)`` (the hint for an exception the
reader's code raised, often a table of :func:`error_hints`) and runs each check inside
``with checks.case(title):``, or a list of them with ``checks.run_all``. In a check it calls
the reader's code through :func:`call_reader` (their exception becomes a report of their line;
changing an argument in place fails) and compares with :func:`expect_close`, :func:`expect_pair` or
:func:`expect_number`, which raise :class:`Mismatch` with what was expected, what came back and
a hint; a list of known mistakes (:data:`Mistake`) picks the hint that explains the
difference. ``checks.case`` turns either failure into an :class:`ExerciseCheckError` whose
message names the check; ``checks.passed()`` prints the one line of success.

Importing this module also makes IPython and Jupyter show an :class:`ExerciseCheckError` as
its message alone (:func:`show_briefly_in_ipython`).
"""

from __future__ import annotations

import math
import numbers
import os
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True


class ExerciseCheckError(AssertionError):
    """A reader's solution failed a check. The message says which check, what was expected,
    what came back, and gives a hint."""


class NotWrittenYet(ExerciseCheckError):
    """The reader's function still raises the starter's ``NotImplementedError``: a task to
    do, not a mistake. The message says what to write, and IPython shows it as "To do"."""


#: A known wrong answer: what the mistake is (the hint), and a function computing its output.
Mistake = tuple[str, Callable[[], Tensor]]

TOLERANCE = {  # (atol, rtol) when the reader's arithmetic may differ from the package's
    torch.float16: (2e-3, 1e-2),
    torch.float32: (1e-5, 1e-4),
    torch.float64: (1e-10, 1e-8),
}

_NOT_IMPLEMENTED_TODO = (
    "replace the `raise NotImplementedError(...)` line with your implementation, then "
    "run this check again."
)
_IN_PLACE_HINT = (
    "work out of place: write `scores = scores - m` rather than `scores -= m`, and "
    "`masked_fill` rather than `masked_fill_`. The caller still needs its tensor."
)
_DTYPE_HINT = (
    "return the dtype you were given (float16 in, float16 out): avoid `.float()`, "
    "`.double()` or float64 tensors on the way, and tensors made in the default dtype "
    "(`torch.zeros(shape)` is float32: use `zeros_like` or pass `dtype=x.dtype`)."
)


class Mismatch(Exception):
    """One check found a wrong result (becomes an :class:`ExerciseCheckError`)."""

    def __init__(self, headline: str, details: Sequence[str] = (), hint: str = "") -> None:
        super().__init__(headline)
        self.headline = headline
        self.details = list(details)
        self.hint = hint


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


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32,
          scale: float = 1.0) -> Tensor:
    """Seeded Gaussian values, drawn in float64 so every dtype gets the same numbers."""
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)


def describe(t: Tensor) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}"


def number(value: float | int | bool, digits: int = 4) -> str:
    if isinstance(value, bool | int):
        return str(value)
    return f"{value:.{digits}g}"


def values(flat: Sequence | Tensor, limit: int = 6, digits: int = 4) -> str:
    items = flat.tolist() if isinstance(flat, Tensor) else list(flat)
    text = ", ".join(number(v, digits) for v in items[:limit])
    return f"[{text}{', ...' if len(items) > limit else ''}]"


def _window(t: Tensor, index: tuple[int, ...], width: int = 6,
            digits: int = 4) -> tuple[str, str]:
    """``t[row, a:b]`` around ``index``: a label and the values."""
    if t.dim() == 0:
        return "", number(t.item(), digits)
    row, column = index[:-1], index[-1]
    start = max(0, min(column - width // 2, t.shape[-1] - width))
    stop = min(t.shape[-1], start + width)
    label = "[" + ", ".join([*(str(i) for i in row), f"{start}:{stop}"]) + "]"
    return label, values(t[row][start:stop], limit=width, digits=digits)


def _distinguishing_digits(expected: float, got: float) -> int:
    """Significant digits enough to print ``expected`` and ``got`` differently (4 to 17)."""
    for digits in range(4, 18):
        if number(expected, digits) != number(got, digits):
            return digits
    return 17


#: The next lower floating dtype: a difference the size of its rounding suggests that the
#: reader's code computed in it somewhere.
_LOWER = {torch.float64: torch.float32, torch.float32: torch.float16}


def _precision_hint(got: Tensor, expected: Tensor, dtype: torch.dtype) -> str | None:
    """A hint when ``got`` misses ``expected`` by about the rounding of a lower dtype."""
    lower = _LOWER.get(dtype)
    if lower is None:
        return None
    atol, rtol = TOLERANCE[lower]
    if not torch.allclose(got, expected, atol=atol, rtol=rtol, equal_nan=True):
        return None
    name = str(lower).removeprefix("torch.")
    return (f"close, but only to about {name} precision, and the inputs are "
            f"{str(dtype).removeprefix('torch.')}: somewhere your code computes in {name} "
            f"(a `.float()` or `.half()`, `torch.tensor(...)` of Python floats, which is "
            f"float32, or a constant of that dtype). Keep the dtype of the input throughout.")


def as_tensor(label: str, got: object, expected: Tensor, hint: str) -> Tensor:
    if isinstance(got, Tensor):
        return got
    if isinstance(got, tuple | list) and got and isinstance(got[0], Tensor):
        raise Mismatch(f"{label} is a {type(got).__name__} of {len(got)} items "
                       f"({shapes(*got)}), "
                       f"expected one tensor of shape {tuple(expected.shape)}", [], hint)
    raise Mismatch(f"{label} is a {type(got).__name__}, expected a torch.Tensor of "
                   f"shape {tuple(expected.shape)}", [], hint)


def diagnose(got: Tensor, mistakes: Sequence[Mistake], atol: float, rtol: float,
             expected: Tensor | None = None) -> str | None:
    """The hint of the first known mistake whose output ``got`` reproduces.

    A mistake whose output on this input is the right answer (``expected``) explains
    nothing, and is skipped: a softmax without the maximum is right on small scores.
    """
    def close(a: Tensor, b: Tensor, factor: float) -> bool:
        return a.shape == b.shape and torch.allclose(
            a.detach().double(), b.detach().double(), atol=factor * atol,
            rtol=factor * rtol, equal_nan=True)

    for hint, wrong in mistakes:
        try:
            candidate = wrong().detach()
        except Exception:  # a mistake that cannot even run on this input is not this one
            continue
        if close(got, candidate, 10) and (expected is None
                                          or not close(candidate, expected, 1)):
            return hint
    return None


def expect_close(label: str, got: object, expected: Tensor, *, hint: str,
                 mistakes: Sequence[Mistake] = (), atol: float | None = None,
                 rtol: float | None = None, nan_hint: str | None = None,
                 check_dtype: bool = True, note: str | None = None) -> Tensor:
    """Fail unless ``got`` is a tensor of ``expected``'s shape (and dtype) and close to it.

    ``hint`` is given when no known mistake in ``mistakes`` explains the difference;
    ``nan_hint`` when ``got`` has NaN or infinities where ``expected`` has none.
    """
    default_atol, default_rtol = TOLERANCE.get(expected.dtype, (1e-5, 1e-4))
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    got = as_tensor(label, got, expected, hint)
    header = [f"expected: {describe(expected)}", f"got:      {describe(got)}"]
    notes = [note] if note else []
    if got.shape != expected.shape:
        raise Mismatch(f"wrong shape of {label}: got {tuple(got.shape)}, expected "
                       f"{tuple(expected.shape)}", header + notes,
                       diagnose(got, mistakes, atol, rtol, expected) or hint)
    if check_dtype and got.dtype != expected.dtype:
        raise Mismatch(f"wrong dtype of {label}: got {got.dtype}, expected {expected.dtype}",
                       header, _DTYPE_HINT)
    g, e = got.detach().cpu().double(), expected.detach().cpu().double()
    bad = ~torch.isfinite(g) & torch.isfinite(e)
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        where, expected_values = _window(e, index)
        _, got_values = _window(g, index)
        raise Mismatch(
            f"{label}: {int(g.isnan().sum())} NaN and {int(g.isinf().sum())} infinite "
            f"values where finite values were expected",
            [*header, f"first at index {index}",
             f"expected{where} = {expected_values}", f"got{where}      = {got_values}", *notes],
            diagnose(got, mistakes, atol, rtol, expected) or nan_hint or hint)
    if torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
        return got
    difference = (g - e).abs().nan_to_num(nan=math.inf)
    index = tuple(int(i) for i in torch.unravel_index(difference.argmax(), difference.shape))
    digits = _distinguishing_digits(float(e[index]), float(g[index]))
    where, expected_values = _window(e, index, digits=digits)
    _, got_values = _window(g, index, digits=digits)
    raise Mismatch(
        f"wrong values in {label}",
        [*header,
         f"max abs difference {number(float(difference.max()))} at index {index} "
         f"(allowed: {atol:g} + {rtol:g}·|expected|)",
         f"expected{where} = {expected_values}", f"got{where}      = {got_values}", *notes],
        diagnose(got, mistakes, atol, rtol, expected) or _precision_hint(g, e, expected.dtype)
        or hint)


def expect_pair(call: str, got: object, first: str, second: str) -> tuple[object, object]:
    """Unpack a returned ``(first, second)`` pair, or fail saying what came back."""
    hint = f"return a tuple `({first}, {second})`, for instance `return {first}, {second}`."
    if isinstance(got, Tensor):
        raise Mismatch(f"{call} returned one tensor of shape {tuple(got.shape)}, expected "
                       f"the pair ({first}, {second})", [], hint)
    if not isinstance(got, tuple | list) or len(got) != 2:
        size = f" of {len(got)} items" if isinstance(got, tuple | list) else ""
        raise Mismatch(f"{call} returned a {type(got).__name__}{size}, expected the pair "
                       f"({first}, {second})", [], hint)
    return got[0], got[1]


def shapes(*tensors: object) -> str:
    return ", ".join(str(tuple(t.shape)) if isinstance(t, Tensor) else type(t).__name__
                     for t in tensors)


def as_scalar(label: str, value: object, hint: str) -> float:
    """One number as a Python float, or a failed check."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise Mismatch(f"{label} is a tensor of shape {tuple(value.shape)}, expected one "
                           f"number", [], hint)
        return float(value.detach().cpu().reshape(()).double())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise Mismatch(f"{label} is a {type(value).__name__}, expected one number (a float)",
                   [], hint)


def expect_number(label: str, got: float, expected: float, *, atol: float, rtol: float,
                  hint: str, nan_hint: str, note: str,
                  mistakes: Sequence[tuple[str, Callable[[], float]]] = ()) -> None:
    """Fail unless the number ``got`` is within ``atol + rtol·|expected|`` of ``expected``;
    both are shown with every digit, and ``hint`` is given when no known mistake explains
    the difference."""
    if math.isfinite(expected) and not math.isfinite(got):
        headline, hint = f"{label} is {got!r} where a finite number was expected", nan_hint
    elif got == expected or (math.isfinite(expected)
                             and abs(got - expected) <= atol + rtol * abs(expected)):
        return
    else:
        headline = f"wrong value of {label}"
    for mistake, wrong in mistakes:
        try:
            candidate = float(wrong())
        except Exception:  # a mistake that cannot even run on this input is not this one
            continue
        if candidate == got or (math.isfinite(candidate) and abs(got - candidate) <=
                                10 * (atol + rtol * abs(candidate))):
            hint = mistake
            break
    details = [f"expected {label} = {expected!r}", f"got {label}      = {got!r}"]
    if math.isfinite(got) and math.isfinite(expected):
        details.append(f"difference {abs(got - expected):.3g} (allowed: {atol:g} + "
                       f"{rtol:g}·|expected|)")
    raise Mismatch(headline, [*details, note], hint)


def _picture(row: Tensor) -> str:
    """A row of a mask as ``x x . .``: x where the query may attend."""
    return " ".join("x" if bool(a) else "." for a in row)


def expect_mask(label: str, got: object, expected: Tensor, *, hint: str, shape_hint: str,
                mistakes: Sequence[Mistake] = (), note: str | None = None) -> None:
    """Fail unless ``got`` is the boolean mask ``expected`` (True = may attend), of shape
    ``(L, S)`` or with leading dimensions, ``(B, 1, L, S)``.

    The first wrong row is drawn as ``x x . .`` against the expected one (with its leading
    indices when there are any); ``hint`` is given when no known mistake in ``mistakes``
    reproduces ``got``, and ``note`` is a line saying what the input was.
    """
    got = as_tensor(label, got, expected, hint)
    header = [f"expected: {describe(expected)}", f"got:      {describe(got)}",
              *([note] if note else [])]
    if got.shape != expected.shape:
        raise Mismatch(f"wrong shape of {label}: got {tuple(got.shape)}, expected "
                       f"{tuple(expected.shape)}", header,
                       diagnose(got, mistakes, atol=0.0, rtol=0.0) or shape_hint)
    if got.dtype != torch.bool:
        additive = got.is_floating_point() and bool(torch.isinf(got).any())
        raise Mismatch(
            f"{label} has dtype {got.dtype}, expected torch.bool", header,
            "that is an additive mask, 0 or -inf: this one is boolean, True where the "
            "query may attend (`bias == 0` converts it)." if additive else
            "masks are boolean, True where the query may attend: comparisons such as "
            "`j <= i` give booleans; combine them with & and |, not * and +.")
    if torch.equal(got, expected):
        return
    first = tuple(int(i) for i in (got != expected).any(dim=-1).nonzero()[0])  # a row
    *lead, row = first
    at = ", ".join(str(i) for i in first)
    of = f" of mask[{', '.join(str(i) for i in lead)}]" if lead else ""
    raise Mismatch(
        f"wrong {label.removeprefix('the ')}: first wrong at query {row}{of}",
        [*header[2:],
         f"{'keys':<{len(f'expected[{at}] = ')}}"
         f"{' '.join(str(j % 10) for j in range(expected.shape[-1]))}",
         f"expected[{at}] = {_picture(expected[first])}",
         f"got[{at}]      = {_picture(got[first])}",
         "x: may attend, .: may not"],
        diagnose(got, mistakes, atol=0.0, rtol=0.0) or hint)
