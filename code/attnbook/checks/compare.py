"""What a check compares, and how a difference is told: the ``expect_*`` functions.

:func:`expect_close` compares a reader's tensor with the package's: shape, then dtype, then
values within a tolerance for the dtype (:data:`TOLERANCE`). :func:`expect_pair`,
:func:`expect_number` and :func:`expect_mask` do the same for a pair of results, one number
and a boolean mask. Each raises :class:`Mismatch` with what was expected, what came back and a
hint; a list of known mistakes (:data:`Mistake`) picks the hint that explains the difference.
:mod:`~attnbook.checks.harness` turns a :class:`Mismatch` into the reader's message.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True

#: A known wrong answer: what the mistake is (the hint), and a function computing its output.
Mistake = tuple[str, Callable[[], Tensor]]

TOLERANCE = {  # (atol, rtol) when the reader's arithmetic may differ from the package's
    torch.float16: (2e-3, 1e-2),
    torch.float32: (1e-5, 1e-4),
    torch.float64: (1e-10, 1e-8),
}

_DTYPE_HINT = (
    "return the dtype you were given (float16 in, float16 out): avoid `.float()`, "
    "`.double()` or float64 tensors on the way, and tensors made in the default dtype "
    "(`torch.zeros(shape)` is float32: use `zeros_like` or pass `dtype=x.dtype`)."
)


class Mismatch(Exception):
    """One check found a wrong result (becomes an
    :class:`~attnbook.checks.harness.ExerciseCheckError`)."""

    def __init__(self, headline: str, details: Sequence[str] = (), hint: str = "") -> None:
        super().__init__(headline)
        self.headline = headline
        self.details = list(details)
        self.hint = hint


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
