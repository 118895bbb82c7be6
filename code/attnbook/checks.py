"""Checkers for the book's "implement" exercises and for the problem set in ``exercises/``.

Each checker runs the reader's function or class on several seeded inputs and compares what
comes back with the package's own implementation. It ends in one of two ways:

- every check passes: it prints one line, ``✓ check_stable_softmax: all 8 checks passed.``
- a check fails: it raises :class:`ExerciseCheckError` (an ``AssertionError``) whose message
  names the failing check, what was expected, what came back (shapes, dtypes, a few values,
  the largest difference) and a hint. An exception raised by the reader's own code is reported
  as theirs, with its type, its message and the line of their code that raised it, and chained
  to it so a full traceback still shows that line. In IPython and Jupyter the error is shown
  as its message alone, without this module's frames.

The checkers never change what they are given: the reader's functions get fresh copies of the
inputs (and a check fails if they change them in place), and a module is copied, never trained
or modified. Random inputs come from seeded generators, and the global random state is left as
it was.

One checker per chapter, named after what it checks:

- ``static-embeddings``: :func:`check_nearest_by_cosine` on
  ``nearest_by_cosine(table, query, k, exclude=None)``
- ``dot-product-similarity``: :func:`check_batched_raw_attention` on
  ``batched_raw_attention(x)``
- ``scaling``: :func:`check_stable_softmax` on ``my_softmax(scores)``
- ``attention-maps``: :func:`check_row_entropy` on ``row_entropy(weights)``
- ``pytorch-implementation``: :func:`check_simple_attention` on the class
  ``MySimpleAttention``
- ``causal-masks``: :func:`check_masked_softmax` on ``my_masked_softmax(scores, mask)``
- ``multi-head-attention``: :func:`check_split_merge_heads` on ``my_split_heads(x, num_heads)``
  and ``my_merge_heads(heads)``
- ``training-attention``: :func:`check_repeat_pattern` on ``repeat_pattern(L, period)``
- ``efficient-attention``: :func:`check_online_normalizer` on ``online_normalizer(stream)``
"""

from __future__ import annotations

import copy
import math
import numbers
import os
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import masked_softmax, raw_self_attention
from .layers import MultiHeadAttention, SimpleAttention
from .masks import causal_mask, padding_mask
from .training import RepeatTask

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True

__all__ = [
    "ExerciseCheckError",
    "check_batched_raw_attention",
    "check_masked_softmax",
    "check_nearest_by_cosine",
    "check_online_normalizer",
    "check_repeat_pattern",
    "check_row_entropy",
    "check_simple_attention",
    "check_split_merge_heads",
    "check_stable_softmax",
]

#: The fill value of a common wrong masked softmax, reproduced to recognise that mistake.
_BIG_NEGATIVE_FILL = -1e9


class ExerciseCheckError(AssertionError):
    """A reader's solution failed a check. The message says which check, what was expected,
    what came back, and gives a hint."""


# ------------------------------------------------------------------------------ machinery

#: A known wrong answer: what the mistake is (the hint), and a function computing its output.
_Mistake = tuple[str, Callable[[], Tensor]]

_TOLERANCE = {  # (atol, rtol) when the reader's arithmetic may differ from the package's
    torch.float16: (2e-3, 1e-2),
    torch.float32: (1e-5, 1e-4),
    torch.float64: (1e-10, 1e-8),
}

_NOT_IMPLEMENTED_HINT = (
    "replace the `raise NotImplementedError(...)` line with your implementation."
)
_IN_PLACE_HINT = (
    "work out of place: write `scores = scores - m` rather than `scores -= m`, and "
    "`masked_fill` rather than `masked_fill_`. The caller still needs its tensor."
)
_DTYPE_HINT = (
    "return the dtype you were given (float16 in, float16 out): avoid `.float()`, "
    "`.double()` or float64 tensors on the way."
)


class _Mismatch(Exception):
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


class _Checks:
    """Numbers the checks of one checker and turns their failures into messages."""

    def __init__(self, checker: str,
                 error_hint: Callable[[Exception], str | None] = lambda error: None) -> None:
        self.checker = checker
        self.error_hint = error_hint
        self.count = 0

    def case(self, title: str) -> _Case:
        """``with checks.case(title): ...`` runs one check."""
        self.count += 1
        return _Case(f"{self.checker}: check {self.count} ({title})", self.error_hint)

    def passed(self) -> None:
        print(f"✓ {self.checker}: all {self.count} checks passed.")


class _Case:
    """One check: a failure inside it becomes an :class:`ExerciseCheckError`."""

    def __init__(self, where: str, error_hint: Callable[[Exception], str | None]) -> None:
        self.where = where
        self.error_hint = error_hint

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, failure: BaseException | None,
                 traceback: object) -> bool:
        if isinstance(failure, _ReaderRaised):
            error = failure.error
            if isinstance(error, NotImplementedError):
                hint = _NOT_IMPLEMENTED_HINT
            else:
                hint = self.error_hint(error) or (
                    "the line above is where your code raised it; call your function on "
                    "a small input to see the whole traceback."
                )
            raised_at = _reader_line(error)
            raise ExerciseCheckError(
                f"{self.where}: {failure.call} raised {type(error).__name__}: {error}\n"
                + (f"  at {raised_at}\n" if raised_at else "")
                + f"  hint: {hint}"
            ) from error
        if isinstance(failure, _Mismatch):
            lines = [f"{self.where} failed: {failure.headline}"]
            lines += [f"  {line}" for line in failure.details]
            if failure.hint:
                lines.append(f"  hint: {failure.hint}")
            raise ExerciseCheckError("\n".join(lines)) from None
        return False


def _reader_line(error: BaseException) -> str | None:
    """Where the reader's code raised ``error``: ``"my_softmax, line 3: raise ..."``.

    The last frame of the traceback outside this package (and outside torch), with no file
    name: a notebook cell's file is a temporary path that means nothing to the reader.
    """
    package = str(Path(__file__).resolve().parent)
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not str(Path(frame.filename).resolve()).startswith(package)
              and f"{os.sep}torch{os.sep}" not in frame.filename]
    if not frames:
        return None
    frame = frames[-1]
    return f"{frame.name}, line {frame.lineno}: {(frame.line or '').strip()}"


def _show_briefly_in_ipython() -> None:
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
        lines = f"{kind.__name__}: {value}".splitlines()
        shell._showtraceback(kind, value, lines)  # the shell's own way to show an error
        return lines

    shell.set_custom_exc((ExerciseCheckError,), brief)


_show_briefly_in_ipython()


def _require_function(argument: str, value: object) -> Callable:
    if isinstance(value, type):
        raise TypeError(
            f"{argument} must be a function, got the class {value.__name__}: pass a "
            f"function (or an instance of the class)"
        )
    if not callable(value):
        raise TypeError(f"{argument} must be a function, got {type(value).__name__}")
    return value


def _name(fn: object) -> str:
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def _call(what: str, fn: Callable, *args: object, names: Sequence[str] = ()) -> object:
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
            raise _Mismatch(f"{what} changed its argument `{name}` in place",
                            [f"{name} before: {_values(snapshot.flatten())}",
                             f"{name} after:  {_values(arg.detach().flatten())}"],
                            _IN_PLACE_HINT)
    return result


def _nan_free(t: Tensor) -> Tensor:
    t = t.detach()
    return torch.nan_to_num(t, nan=0.123) if t.is_floating_point() else t


def _randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32,
           scale: float = 1.0) -> Tensor:
    """Seeded Gaussian values, drawn in float64 so every dtype gets the same numbers."""
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)


def _describe(t: Tensor) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}"


def _number(value: float | int | bool) -> str:
    if isinstance(value, bool | int):
        return str(value)
    return f"{value:.4g}"


def _values(flat: Sequence | Tensor, limit: int = 6) -> str:
    items = flat.tolist() if isinstance(flat, Tensor) else list(flat)
    text = ", ".join(_number(v) for v in items[:limit])
    return f"[{text}{', ...' if len(items) > limit else ''}]"


def _window(t: Tensor, index: tuple[int, ...], width: int = 6) -> tuple[str, str]:
    """``t[row, a:b]`` around ``index``: a label and the values."""
    if t.dim() == 0:
        return "", _number(t.item())
    row, column = index[:-1], index[-1]
    start = max(0, min(column - width // 2, t.shape[-1] - width))
    stop = min(t.shape[-1], start + width)
    label = "[" + ", ".join([*(str(i) for i in row), f"{start}:{stop}"]) + "]"
    return label, _values(t[row][start:stop], limit=width)


def _as_tensor(label: str, got: object, expected: Tensor, hint: str) -> Tensor:
    if isinstance(got, Tensor):
        return got
    if isinstance(got, tuple | list) and got and isinstance(got[0], Tensor):
        shapes = ", ".join(str(tuple(t.shape)) if isinstance(t, Tensor) else type(t).__name__
                           for t in got)
        raise _Mismatch(f"{label} is a {type(got).__name__} of {len(got)} items ({shapes}), "
                        f"expected one tensor of shape {tuple(expected.shape)}", [], hint)
    raise _Mismatch(f"{label} is a {type(got).__name__}, expected a torch.Tensor of "
                    f"shape {tuple(expected.shape)}", [], hint)


def _diagnose(got: Tensor, mistakes: Sequence[_Mistake], atol: float, rtol: float
              ) -> str | None:
    """The hint of the first known mistake whose output ``got`` reproduces."""
    for hint, wrong in mistakes:
        try:
            candidate = wrong().detach()
        except Exception:  # a mistake that cannot even run on this input is not this one
            continue
        if candidate.shape == got.shape and torch.allclose(
                got.detach().double(), candidate.double(), atol=10 * atol, rtol=10 * rtol,
                equal_nan=True):
            return hint
    return None


def _expect_close(label: str, got: object, expected: Tensor, *, hint: str,
                  mistakes: Sequence[_Mistake] = (), atol: float | None = None,
                  rtol: float | None = None, nan_hint: str | None = None,
                  check_dtype: bool = True, note: str | None = None) -> Tensor:
    """Fail unless ``got`` is a tensor of ``expected``'s shape (and dtype) and close to it.

    ``hint`` is given when no known mistake in ``mistakes`` explains the difference;
    ``nan_hint`` when ``got`` has NaN or infinities where ``expected`` has none.
    """
    default_atol, default_rtol = _TOLERANCE.get(expected.dtype, (1e-5, 1e-4))
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    got = _as_tensor(label, got, expected, hint)
    header = [f"expected: {_describe(expected)}", f"got:      {_describe(got)}"]
    notes = [note] if note else []
    if got.shape != expected.shape:
        raise _Mismatch(f"wrong shape of {label}: got {tuple(got.shape)}, expected "
                        f"{tuple(expected.shape)}", header + notes,
                        _diagnose(got, mistakes, atol, rtol) or hint)
    if check_dtype and got.dtype != expected.dtype:
        raise _Mismatch(f"wrong dtype of {label}: got {got.dtype}, expected {expected.dtype}",
                        header, _DTYPE_HINT)
    g, e = got.detach().cpu().double(), expected.detach().cpu().double()
    bad = ~torch.isfinite(g) & torch.isfinite(e)
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        where, expected_values = _window(e, index)
        _, got_values = _window(g, index)
        raise _Mismatch(
            f"{label}: {int(g.isnan().sum())} NaN and {int(g.isinf().sum())} infinite "
            f"values where finite values were expected",
            [*header, f"first at index {index}",
             f"expected{where} = {expected_values}", f"got{where}      = {got_values}", *notes],
            _diagnose(got, mistakes, atol, rtol) or nan_hint or hint)
    if torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
        return got
    difference = (g - e).abs().nan_to_num(nan=math.inf)
    index = tuple(int(i) for i in torch.unravel_index(difference.argmax(), difference.shape))
    where, expected_values = _window(e, index)
    _, got_values = _window(g, index)
    raise _Mismatch(
        f"wrong values in {label}",
        [*header,
         f"max abs difference {_number(float(difference.max()))} at index {index} "
         f"(allowed: {atol:g} + {rtol:g}·|expected|)",
         f"expected{where} = {expected_values}", f"got{where}      = {got_values}", *notes],
        _diagnose(got, mistakes, atol, rtol) or hint)


def _expect_pair(call: str, got: object, first: str, second: str) -> tuple[object, object]:
    """Unpack a returned ``(first, second)`` pair, or fail saying what came back."""
    hint = f"return a tuple `({first}, {second})`, for instance `return {first}, {second}`."
    if isinstance(got, Tensor):
        raise _Mismatch(f"{call} returned one tensor of shape {tuple(got.shape)}, expected "
                        f"the pair ({first}, {second})", [], hint)
    if not isinstance(got, tuple | list) or len(got) != 2:
        size = f" of {len(got)} items" if isinstance(got, tuple | list) else ""
        raise _Mismatch(f"{call} returned a {type(got).__name__}{size}, expected the pair "
                        f"({first}, {second})", [], hint)
    return got[0], got[1]


def _shapes(*tensors: object) -> str:
    return ", ".join(str(tuple(t.shape)) if isinstance(t, Tensor) else type(t).__name__
                     for t in tensors)


# --------------------------------------------------------------------- static-embeddings


def _nearest_reference(table: Tensor, query: Tensor, k: int, exclude: int | None
                       ) -> tuple[Tensor, Tensor]:
    """The arithmetic of :func:`attnbook.pretrained.nearest_tokens`: ids (k,), cosines (k,)."""
    cosines = F.cosine_similarity(table, query[None, :], dim=1)  # (V,)
    if exclude is not None:
        cosines[exclude] = float("-inf")
    values, ids = cosines.topk(k)
    return ids, values


def check_nearest_by_cosine(nearest_fn: Callable, *, pretrained: bool = False) -> None:
    """Check ``nearest_fn(table, query, k, exclude=None) -> (ids, cosines)``.

    The exercise of the chapter ``static-embeddings``: ``table`` is ``(V, E)``, ``query``
    is ``(E,)``; the answer is the ids ``(k,)`` of the ``k`` rows with the largest cosine to
    ``query``, most similar first, leaving out row ``exclude`` when it is given, and their
    cosines ``(k,)``. The reference is the arithmetic of
    :func:`attnbook.pretrained.nearest_tokens`.

    Checks seeded random tables (rows of very different lengths, a long query, an excluded
    row, ``k = 1`` and ``k = V - 1``); with ``pretrained=True`` also the real embedding
    table of :func:`attnbook.pretrained.load_model` against ``nearest_tokens``.

    Raises:
        TypeError: if ``nearest_fn`` is not a function.
        ExerciseCheckError: at the first failing check.
    """
    nearest_fn = _require_function("nearest_fn", nearest_fn)
    checks = _Checks("check_nearest_by_cosine")
    name = _name(nearest_fn)

    def run(table: Tensor, query: Tensor, k: int, exclude: int | None,
            tokens: Callable[[list[int]], list[str]] | None = None) -> None:
        args = (table.clone(), query.clone(), k) + ((exclude,) if exclude is not None else ())
        call = f"{name}(table, query, k={k}" + (f", exclude={exclude})" if exclude is not None
                                                else ")")
        result = _call(call, nearest_fn, *args,
                       names=("table", "query", "k", "exclude"))
        got_ids, got_cosines = _expect_pair(call, result, "ids", "cosines")
        ids, cosines = _nearest_reference(table, query, k, exclude)
        try:
            got_ids = torch.as_tensor(got_ids).detach().cpu()
        except (TypeError, ValueError, RuntimeError):
            raise _Mismatch(f"ids is a {type(got_ids).__name__}, expected a tensor of {k} "
                            f"ints", [], "return the ids that `topk` gives you.") from None
        if got_ids.shape != ids.shape or got_ids.is_floating_point():
            raise _Mismatch(f"ids has shape {tuple(got_ids.shape)} and dtype {got_ids.dtype}, "
                            f"expected shape {tuple(ids.shape)} of integers",
                            [f"got ids = {_values(got_ids.flatten(), 10)}"],
                            "`values, ids = cosines.topk(k)` gives k integer ids; return "
                            "`ids, values`.")
        got_list, expected_list = got_ids.tolist(), ids.tolist()
        if got_list != expected_list:
            rank = next(i for i, (a, b) in enumerate(zip(got_list, expected_list, strict=True))
                        if a != b)
            if tokens is None:
                shown_expected, shown_got = _values(expected_list, 10), _values(got_list, 10)
            else:
                shown_expected, shown_got = tokens(expected_list), tokens(got_list)
            by_dot = (table @ query).topk(k).indices.tolist() if exclude is None else None
            if exclude is not None and exclude in got_list:
                hint = (f"leave out row exclude={exclude}: set its cosine to -inf before "
                        f"`topk`.")
            elif sorted(got_list) == sorted(expected_list):
                hint = "most similar first: sort by decreasing cosine (`topk` does)."
            elif got_list == by_dot:
                hint = ("you ranked by the raw dot product, which favours long rows; cosine "
                        "divides by the length of each row and of the query.")
            else:
                hint = ("the cosine of row i is table[i] · query / (|table[i]| |query|); "
                        "normalise the rows along dim=1 (`keepdim=True`).")
            raise _Mismatch(
                f"wrong ids from rank {rank} on",
                [f"expected ids: {shown_expected}", f"got ids:      {shown_got}",
                 f"expected cosines: {_values(cosines, 10)}"], hint)
        unit_rows = table / table.norm(dim=1, keepdim=True)  # (V, E)
        _expect_close("cosines", got_cosines, cosines,
                      hint="cosine = dot product of the two vectors divided by both lengths.",
                      mistakes=[("divide by the length of the query too: a cosine lies "
                                 "between -1 and 1.", lambda: (unit_rows @ query)[ids])])

    tables = {seed: _randn(50, 8, seed=seed) for seed in (1, 2)}
    with checks.case("a random table (50, 8), query (8,), k=5"):
        run(tables[1], _randn(8, seed=11), 5, None)
    with checks.case("rows of very different lengths, k=5"):
        lengths = 10.0 ** torch.linspace(-2, 2, 50)[torch.randperm(
            50, generator=torch.Generator().manual_seed(3))]
        run(tables[2] * lengths[:, None], _randn(8, seed=12), 5, None)
    with checks.case("a query of length 100, k=5"):
        query = _randn(8, seed=13)
        run(tables[1], 100 * query / query.norm(), 5, None)
    with checks.case("query = row 7 of the table, exclude=7, k=5"):
        run(tables[2], tables[2][7], 5, 7)
    with checks.case("k=1"):
        run(tables[1], _randn(8, seed=14), 1, None)
    with checks.case("k=49 (every row but the excluded one), exclude=0"):
        run(tables[2], tables[2][0], 49, 0)
    if pretrained:
        from .pretrained import load_model, nearest_tokens

        model = load_model()
        table = model.embedding_table.float()  # (V, E)
        for word in ("bank", "river"):
            with checks.case(f"the real {model.name} table {tuple(table.shape)}, "
                             f"query {word!r}, k=10"):
                token_id = model.tokenizer.convert_tokens_to_ids(word)
                reference = nearest_tokens(word, k=10, model=model)
                ids, _ = _nearest_reference(table, table[token_id], 10, token_id)
                if model.tokenizer.convert_ids_to_tokens(ids.tolist()) != \
                        [token for token, _ in reference]:
                    # Not the reader's fault: the package contradicts itself.
                    raise AssertionError("check_nearest_by_cosine's reference disagrees with "
                                         "attnbook.pretrained.nearest_tokens")
                run(table, table[token_id], 10, token_id,
                    tokens=model.tokenizer.convert_ids_to_tokens)
    checks.passed()


# ----------------------------------------------------------------- dot-product-similarity


def _raw_attention_hint(error: Exception) -> str | None:
    if isinstance(error, RuntimeError):
        return ("for a 3-D tensor `x.T` reverses all three dimensions; transpose only the "
                "last two, `x.transpose(-2, -1)`, so the batch dimension stays in front.")
    return None


def check_batched_raw_attention(attention_fn: Callable) -> None:
    """Check ``attention_fn(x) -> (output, weights)``: raw self-attention on a batch.

    The exercise of the chapter ``dot-product-similarity``: ``x`` is ``(B, L, E)``,
    ``weights = softmax(x x^T)`` over the last dimension is ``(B, L, L)`` and
    ``output = weights x`` is ``(B, L, E)``, with no scaling. The reference is
    :func:`attnbook.attention.raw_self_attention`.

    Checks several batch shapes (more tokens than features and fewer, one token) in float32
    and float64.

    Raises:
        TypeError: if ``attention_fn`` is not a function.
        ExerciseCheckError: at the first failing check.
    """
    attention_fn = _require_function("attention_fn", attention_fn)
    checks = _Checks("check_batched_raw_attention", _raw_attention_hint)
    call = f"{_name(attention_fn)}(x)"

    def run(x: Tensor) -> None:
        result = _call(call, attention_fn, x.clone(), names=("x",))
        got_output, got_weights = _expect_pair(call, result,
                                               "output", "weights")
        expected = raw_self_attention(x)
        B, L, E = x.shape
        scores = x @ x.transpose(-2, -1)  # (B, L, L)
        if isinstance(got_output, Tensor) and isinstance(got_weights, Tensor) and \
                got_output.shape == (B, L, L) and got_weights.shape == (B, L, E) and L != E:
            raise _Mismatch(f"the result has shapes ({_shapes(got_output, got_weights)}), "
                            f"expected ({(B, L, E)}, {(B, L, L)})", [],
                            "return `(output, weights)` in that order.")
        _expect_close("weights", got_weights, expected.weights,
                      hint="weights = softmax(x x^T) over the last dimension: row i holds "
                           "token i's weights over all L tokens.",
                      mistakes=[
                          ("did you divide by sqrt(E)? Raw self-attention is unscaled: "
                           "softmax(x x^T).",
                           lambda: torch.softmax(scores / math.sqrt(E), dim=-1)),
                          ("the softmax runs over the wrong dimension: use dim=-1, so "
                           "that each row (one query) sums to 1.",
                           lambda: torch.softmax(scores, dim=-2)),
                          ("the softmax runs over the batch (dim=0): use dim=-1.",
                           lambda: torch.softmax(scores, dim=0)),
                          ("these are the scores x x^T: apply the softmax to them.",
                           lambda: scores)])
        _expect_close("output", got_output, expected.output,
                      hint="output = weights @ x: row i mixes the tokens with row i of "
                           "the weights.",
                      mistakes=[("the rows of the weights must mix the tokens: use "
                                 "`weights @ x`, not the transposed weights.",
                                 lambda: expected.weights.transpose(-2, -1) @ x)])

    with checks.case("x of shape (2, 5, 8), float32"):
        run(_randn(2, 5, 8, seed=21))
    with checks.case("more tokens than features, x of shape (3, 7, 4), float32"):
        run(_randn(3, 7, 4, seed=22))
    with checks.case("one sequence of one token, x of shape (1, 1, 6)"):
        run(_randn(1, 1, 6, seed=23))
    with checks.case("x of shape (4, 6, 16), float64"):
        run(_randn(4, 6, 16, seed=24, dtype=torch.float64, scale=0.5))
    checks.passed()


# ------------------------------------------------------------------------------- scaling

_OVERFLOW_HINT = (
    "exp overflowed (or every exp underflowed to 0, and 0/0 is NaN). Subtract each row's "
    "maximum, `scores.amax(dim=-1, keepdim=True)`, before `torch.exp`: the softmax does "
    "not change, and the largest exponent becomes exp(0) = 1."
)


def check_stable_softmax(softmax_fn: Callable) -> None:
    """Check ``softmax_fn(scores) -> weights``: a numerically stable row softmax.

    The exercise of the chapter ``scaling``: a softmax over the last dimension of scores of
    any shape ``(..., S)`` that never overflows, returning the same shape and dtype. The
    reference is :func:`torch.softmax` (the softmax inside
    :func:`attnbook.attention.masked_softmax`).

    Checks small and batched scores, scores of size 1e4, rows at very different levels,
    very negative rows, and float16 and float64.

    Raises:
        TypeError: if ``softmax_fn`` is not a function.
        ExerciseCheckError: at the first failing check.
    """
    softmax_fn = _require_function("softmax_fn", softmax_fn)
    checks = _Checks("check_stable_softmax")
    call = f"{_name(softmax_fn)}(scores)"

    def run(scores: Tensor) -> None:
        got = _call(call, softmax_fn, scores.clone(), names=("scores",))
        reference = torch.softmax(scores.double(), dim=-1).to(scores.dtype)
        exps = (scores.double() - scores.double().amax(dim=-1, keepdim=True)).exp()
        naive = scores.exp()
        global_max = (scores - scores.max()).exp()
        _expect_close(
            "the weights", got, reference,
            hint="softmax(s)_j = exp(s_j - m) / sum_k exp(s_k - m) over the last dimension, "
                 "with m the row's maximum.",
            nan_hint=_OVERFLOW_HINT,
            mistakes=[
                (_OVERFLOW_HINT, lambda: naive / naive.sum(dim=-1, keepdim=True)),
                ("subtract each row's own maximum (`amax(dim=-1, keepdim=True)`), not the "
                 "maximum of the whole tensor: rows far below it underflow to 0/0.",
                 lambda: global_max / global_max.sum(dim=-1, keepdim=True)),
                ("normalise over the last dimension (dim=-1), so that each row sums to 1.",
                 lambda: torch.softmax(scores.double(), dim=0)),
                ("normalise over the last dimension (dim=-1), so that each row sums to 1.",
                 lambda: torch.softmax(scores.double(), dim=-2)),
                ("divide each row by its own sum: `exps.sum(dim=-1, keepdim=True)`; without "
                 "keepdim the sums line up with the wrong dimension.",
                 lambda: exps / exps.sum(dim=-1))])

    with checks.case("random scores (3, 5), float32"):
        run(_randn(3, 5, seed=31))
    with checks.case("one row of scores (6,)"):
        run(_randn(6, seed=32))
    with checks.case("a batch of scores (2, 3, 4, 6): softmax over the last dimension"):
        run(_randn(2, 3, 4, 6, seed=33))
    with checks.case("huge scores, 1e4 · randn (64, 10), float32"):
        run(_randn(64, 10, seed=34, scale=1e4))
    with checks.case("one row near +1e4 and one near -1e4, shape (2, 5)"):
        run(_randn(2, 5, seed=35) + torch.tensor([[1e4], [-1e4]]))
    with checks.case("very negative scores, all below -1000, shape (3, 4)"):
        run(_randn(3, 4, seed=36) - 2000.0)
    with checks.case("float16 scores (12, 0) and (-3, 11): exp(12) does not fit in float16"):
        run(torch.tensor([[12.0, 0.0], [-3.0, 11.0]], dtype=torch.float16))
    with checks.case("float64 scores (5, 7)"):
        run(_randn(5, 7, seed=37, dtype=torch.float64, scale=30.0))
    checks.passed()


# ------------------------------------------------------------------------ attention-maps


def _entropy_reference(weights: Tensor) -> Tensor:
    """-sum_j a_j ln a_j over the last dimension, in float64, with 0 ln 0 = 0."""
    a = weights.double()
    terms = torch.where(a > 0, a * a.clamp_min(1e-300).log(), torch.zeros_like(a))
    return (0.0 - terms.sum(dim=-1)).to(weights.dtype)  # (..., L); 0 - 0 is +0, not -0


def check_row_entropy(entropy_fn: Callable) -> None:
    """Check ``entropy_fn(weights) -> entropy``: the entropy of every row of attention maps.

    The exercise of the chapter ``attention-maps``: ``weights`` is ``(layers, heads, L, S)``
    with rows that sum to 1; the result is ``(layers, heads, L)``, entry
    ``H = -sum_j a_j ln a_j`` in nats, with ``0 ln 0`` counted as 0. The reference is that
    formula, computed directly in float64.

    Checks random maps, one-hot rows (entropy 0, no NaN), uniform rows (``ln S``), causal
    maps with exact zeros, maps with ``L != S``, and peaked float32 maps with tiny weights.

    Raises:
        TypeError: if ``entropy_fn`` is not a function.
        ExerciseCheckError: at the first failing check.
    """
    entropy_fn = _require_function("entropy_fn", entropy_fn)
    checks = _Checks("check_row_entropy")
    call = f"{_name(entropy_fn)}(weights)"

    def run(weights: Tensor) -> None:
        got = _call(call, entropy_fn, weights.clone(), names=("weights",))
        expected = _entropy_reference(weights)
        S = weights.shape[-1]
        atol, rtol = _TOLERANCE[weights.dtype]
        _expect_close(
            "the entropy", got, expected, atol=max(atol, 1e-7), rtol=max(rtol, 1e-6),
            hint="H_i = -sum_j A_ij ln A_ij: one number per row (per query), summed over "
                 "the keys, the last dimension.",
            nan_hint="0·ln 0 must count as 0, but torch.log(0) = -inf and 0·(-inf) = NaN: "
                     "use `torch.special.xlogy(a, a)`, which is 0 where a = 0.",
            mistakes=[
                ("did you forget the minus sign? H = -sum a ln a is never negative.",
                 lambda: -expected),
                ("entropy in nats uses the natural logarithm (torch.log), not log2.",
                 lambda: expected / math.log(2)),
                ("sum over the keys (dim=-1), not the mean.", lambda: expected / S),
                ("one entropy per row: sum over the last dimension (the keys), dim=-1.",
                 lambda: _entropy_reference(weights.transpose(-2, -1))),
                ("one number per row: drop `keepdim=True`.", lambda: expected[..., None]),
            ])

    random_maps = torch.softmax(_randn(2, 3, 5, 5, seed=41, dtype=torch.float64, scale=2.0),
                                dim=-1)
    with checks.case("random maps (2, 3, 5, 5), float64"):
        run(random_maps)
    with checks.case("one-hot rows (identity maps, shape (1, 2, 4, 4)): entropy 0, no NaN"):
        run(torch.eye(4).expand(1, 2, 4, 4).clone())
    with checks.case("uniform rows over 4 keys (shape (1, 1, 4, 4)): entropy ln 4"):
        run(torch.full((1, 1, 4, 4), 0.25))
    with checks.case("causal maps with exact zeros (2, 2, 6, 6)"):
        run(masked_softmax(_randn(2, 2, 6, 6, seed=42), causal_mask(6)))
    with checks.case("3 queries and 7 keys, weights (1, 2, 3, 7) -> entropy (1, 2, 3)"):
        run(torch.softmax(_randn(1, 2, 3, 7, seed=43), dim=-1))
    with checks.case("peaked float32 maps with tiny weights (softmax of 30 · randn)"):
        run(torch.softmax(_randn(2, 2, 5, 5, seed=44, scale=30.0), dim=-1))
    checks.passed()


# ---------------------------------------------------------------- pytorch-implementation

_PROJECTIONS = ("query", "key", "value")


def _module_hint(error: Exception) -> str | None:
    if isinstance(error, RuntimeError | IndexError):
        return ("forward must accept a batch (B, L, n_embd) and a single sequence "
                "(L, n_embd): transpose the keys with `k.transpose(-2, -1)`, not `k.T` or "
                "`k.transpose(1, 2)`, and take the softmax over dim=-1.")
    return None


def _check_projections(module: nn.Module, owner: str, n_embd: int | None) -> int:
    """Fail unless ``module`` has square ``nn.Linear`` layers query, key and value with a bias;
    return their width."""
    children = ", ".join(f"{name}: {type(child).__name__}"
                         for name, child in module.named_children()) or "none"
    hint = ("in __init__, create `self.query = nn.Linear(n_embd, n_embd)`, and `self.key` "
            "and `self.value` the same way (with a bias, the default).")
    for name in _PROJECTIONS:
        layer = getattr(module, name, None)
        if layer is None:
            raise _Mismatch(f"{owner} has no layer named `{name}`",
                            [f"your module's layers: {children}"], hint)
        if not isinstance(layer, nn.Linear):
            raise _Mismatch(f"{owner}.{name} is {type(layer).__name__}, expected an "
                            f"nn.Linear", [f"your module's layers: {children}"], hint)
        width = layer.in_features if n_embd is None else n_embd
        if (layer.in_features, layer.out_features) != (width, width):
            raise _Mismatch(f"{owner}.{name} is nn.Linear({layer.in_features}, "
                            f"{layer.out_features}), expected nn.Linear({width}, {width})",
                            [], hint)
        if layer.bias is None:
            raise _Mismatch(f"{owner}.{name} has no bias", [], hint)
        n_embd = width
    assert n_embd is not None
    return n_embd


def _reference_copy(module: nn.Module, n_embd: int) -> SimpleAttention:
    """A fresh :class:`SimpleAttention` with the projections of ``module`` (read only)."""
    reference = SimpleAttention(n_embd).to(module.query.weight.dtype)
    with torch.no_grad():
        for name in _PROJECTIONS:
            getattr(reference, name).weight.copy_(getattr(module, name).weight)
            getattr(reference, name).bias.copy_(getattr(module, name).bias)
    return reference


def check_simple_attention(layer: type[nn.Module] | nn.Module) -> None:
    """Check a ``SimpleAttention``: ``softmax(Q K^T) V`` with no scaling.

    The exercise of the chapter ``pytorch-implementation``: an ``nn.Module`` built as
    ``layer(n_embd)`` with three ``nn.Linear(n_embd, n_embd)`` named ``query``, ``key`` and
    ``value``, whose ``forward(x)`` takes ``(B, L, n_embd)`` or ``(L, n_embd)`` and returns
    ``(output, weights)`` of shapes ``(..., L, n_embd)`` and ``(..., L, L)``. The reference
    is :class:`attnbook.layers.SimpleAttention` with the reader's weights copied into it.

    Args:
        layer: the class (it is built with ``n_embd = 8`` and ``5``) or one instance (it is
            copied first). Either way the reader's objects are left untouched.

    Raises:
        TypeError: if ``layer`` is neither an ``nn.Module`` subclass nor an instance of one.
        ExerciseCheckError: at the first failing check.
    """
    if isinstance(layer, type):
        if not issubclass(layer, nn.Module):
            raise TypeError(f"layer must be an nn.Module subclass or instance, got the class "
                            f"{layer.__name__}, which does not derive from nn.Module")
        owner = layer.__name__
    elif isinstance(layer, nn.Module):
        owner = type(layer).__name__
    else:
        raise TypeError(f"layer must be an nn.Module subclass or instance, got "
                        f"{type(layer).__name__}")
    checks = _Checks("check_simple_attention", _module_hint)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the reader's initialisation: reproducible, global state kept
        if isinstance(layer, type):
            for n_embd in (8, 5):
                with checks.case(f"{owner}({n_embd}) builds query, key and value as "
                                 f"nn.Linear({n_embd}, {n_embd})"):
                    module = _call(f"{owner}({n_embd})", layer, n_embd)
                    _check_projections(module, owner, n_embd)
                _check_simple_attention_module(checks, module, owner)
        else:
            with checks.case(f"your {owner} has query, key and value as square nn.Linear"):
                _check_projections(layer, owner, None)
            try:
                module = copy.deepcopy(layer)  # run on a copy: the reader's stays as it is
            except Exception as error:
                raise TypeError(f"layer could not be copied with copy.deepcopy "
                                f"({type(error).__name__}: {error}); pass the class "
                                f"instead") from error
            _check_simple_attention_module(checks, module, owner)
    checks.passed()


def _check_simple_attention_module(checks: _Checks, module: nn.Module, owner: str) -> None:
    """The forward checks of :func:`check_simple_attention` on one module the checker owns."""
    n = module.query.in_features
    reference = _reference_copy(module, n)
    state = {key: value.clone() for key, value in module.state_dict().items()}
    call = f"{owner}.forward(x)"

    def run(x: Tensor) -> None:
        x = x.to(module.query.weight.dtype)
        with torch.no_grad():
            result = _call(call, module, x.clone(), names=("x",))
            got_output, got_weights = _expect_pair(call, result, "output", "weights")
            expected = reference(x)
            q, k = reference.query(x), reference.key(x)  # each (..., L, n_embd)
            scores = q @ k.transpose(-2, -1)  # (..., L, L)
        weights = expected.weights
        _expect_close(
            "weights", got_weights, weights,
            hint="weights = softmax(Q K^T) over the last dimension, with Q = self.query(x) "
                 "and K = self.key(x).",
            mistakes=[
                (f"did you divide by sqrt(n_embd) = sqrt({n})? This exercise is unscaled: "
                 f"softmax(Q K^T) V.", lambda: torch.softmax(scores / math.sqrt(n), dim=-1)),
                ("the softmax runs over the wrong dimension: use dim=-1, so that each "
                 "query's row sums to 1.", lambda: torch.softmax(scores, dim=-2)),
                ("the scores are Q K^T (row i: query i against every key), not K Q^T.",
                 lambda: torch.softmax(scores.transpose(-2, -1), dim=-1)),
                ("compute the scores from the projections q = self.query(x) and "
                 "k = self.key(x), not from x itself.",
                 lambda: torch.softmax(x @ x.transpose(-2, -1), dim=-1)),
                ("these are the scores Q K^T: apply the softmax to them.", lambda: scores)])
        _expect_close(
            "output", got_output, expected.output,
            hint="output = weights @ V with V = self.value(x).",
            mistakes=[("mix the values V = self.value(x), not x.", lambda: weights @ x),
                      ("mix the values V = self.value(x), not the queries.",
                       lambda: weights @ q),
                      ("mix the values V = self.value(x), not the keys.",
                       lambda: weights @ k)])

    with checks.case(f"{owner}({n}) on a batch x of shape (2, 5, {n})"):
        run(_randn(2, 5, n, seed=51))
    with checks.case(f"{owner}({n}) on a single sequence x of shape (7, {n})"):
        run(_randn(7, n, seed=52))
    with checks.case(f"{owner}({n}) on one token, x of shape (3, 1, {n})"):
        run(_randn(3, 1, n, seed=53))
    with checks.case(f"{owner}({n}) on larger inputs, 3 · randn (2, 6, {n})"):
        run(_randn(2, 6, n, seed=54, scale=3.0))
    with checks.case(f"{owner}({n}): forward leaves the parameters unchanged and gradients "
                     f"reach query, key and value"):
        for key, value in module.state_dict().items():
            if not torch.equal(value, state[key]):
                raise _Mismatch(f"forward changed the parameter {key}", [],
                                "forward must only read the layers' weights.")
        x = _randn(2, 4, n, seed=55).to(module.query.weight.dtype)
        output, weights = _expect_pair(call, _call(call, module, x, names=("x",)),
                                       "output", "weights")
        module.zero_grad(set_to_none=True)
        loss = (output * _randn(2, 4, n, seed=56).to(x.dtype)).sum()
        try:
            loss.backward()
        except RuntimeError as error:
            raise _Mismatch("no gradient flows from the output back to the layers",
                            [f"backward() raised: {error}"],
                            "keep the computation differentiable: no `torch.no_grad()`, "
                            "`.detach()`, `.item()` or `.numpy()` inside forward.") from None
        for name in _PROJECTIONS:
            grad = getattr(module, name).weight.grad
            if grad is None or not torch.isfinite(grad).all() or not grad.any():
                raise _Mismatch(f"no gradient reaches {name}.weight", [],
                                "keep the computation differentiable: no `torch.no_grad()`, "
                                "`.detach()` or new tensors built from `.tolist()`.")
        module.zero_grad(set_to_none=True)


# ------------------------------------------------------------------------- causal-masks


def _masked_softmax_hint(error: Exception) -> str | None:
    message = str(error)
    if "overflow" in message:
        return ("float16 cannot hold -1e9 (its largest magnitude is 65504): fill with "
                "float('-inf') instead, and give rows with no allowed key a separate path.")
    if isinstance(error, IndexError | RuntimeError):
        return ("the mask may broadcast (a (B, 1, S) padding mask applies to every query): "
                "use `masked_fill` and `mask.any(dim=-1, keepdim=True)`, not boolean "
                "indexing with the mask.")
    return None


def check_masked_softmax(masked_softmax_fn: Callable) -> None:
    """Check ``masked_softmax_fn(scores, mask) -> weights``: a masked row softmax.

    The exercise of the chapter ``causal-masks``: ``scores`` is ``(..., L, S)`` and ``mask``
    a boolean tensor broadcastable to it, ``True`` = may attend. The weights have the shape
    and dtype of ``scores``; forbidden entries are exactly 0, a row with no allowed key is
    all zeros (never NaN, never uniform), and gradients are finite. The reference is
    :func:`attnbook.attention.masked_softmax`.

    Checks a causal mask, causal plus padding masks, fully masked rows in float32 and
    float16, a broadcast padding mask, an all-True mask, very negative allowed scores, and
    the gradient.

    Raises:
        TypeError: if ``masked_softmax_fn`` is not a function.
        ExerciseCheckError: at the first failing check.
    """
    masked_softmax_fn = _require_function("masked_softmax_fn", masked_softmax_fn)
    checks = _Checks("check_masked_softmax", _masked_softmax_hint)
    call = f"{_name(masked_softmax_fn)}(scores, mask)"

    def run(scores: Tensor, mask: Tensor, *, atol: float | None = None) -> Tensor:
        got = _call(call, masked_softmax_fn, scores.clone(), mask.clone(),
                    names=("scores", "mask"))
        expected = masked_softmax(scores.float(), mask).to(scores.dtype)
        full_mask = mask.expand_as(scores)
        wide = scores.float()
        _expect_close(
            "the weights", got, expected, atol=atol,
            hint="a softmax over the allowed keys of each row (mask True), exactly 0 on the "
                 "forbidden ones, and all zeros on a row with no allowed key.",
            nan_hint="a row with no allowed key is softmax(-inf, ..., -inf) = NaN: let such "
                     "rows keep their scores for the softmax, then set their weights to 0.",
            mistakes=[
                *((f"a finite fill value such as {fill:g} is not 'minus infinity': it is not "
                   f"small when the allowed scores are themselves very negative, so forbidden "
                   f"keys get weight. Fill with float('-inf').",
                   lambda fill=fill: torch.softmax(wide.masked_fill(~mask, fill), dim=-1)
                   .masked_fill(~mask.any(dim=-1, keepdim=True), 0.0).to(scores.dtype))
                  for fill in (-1e4, -100.0)),
                ("True means 'may attend': keep the scores where the mask is True and fill "
                 "where it is False (nn.MultiheadAttention uses the opposite polarity).",
                 lambda: masked_softmax(wide, ~mask).to(scores.dtype)),
                ("a row with no allowed key must come out all zeros: filling with -1e9 "
                 "turns it into a uniform average over keys it must not see.",
                 # The reader's likely mistake, reproduced to recognise it: never the fill
                 # value of the package itself.
                 lambda: torch.softmax(wide.masked_fill(~mask, _BIG_NEGATIVE_FILL), dim=-1)
                 .to(scores.dtype)),
                ("apply the mask: fill the forbidden scores with float('-inf') before the "
                 "softmax.", lambda: torch.softmax(wide, dim=-1).to(scores.dtype))])
        leaked = got.detach()[~full_mask]
        if (leaked != 0).any():
            raise _Mismatch(
                f"{int((leaked != 0).sum())} forbidden weights are not exactly 0",
                [f"largest forbidden weight {_number(float(leaked.abs().max()))}"],
                "fill forbidden scores with float('-inf'), not a finite number such as "
                "-100 or -1e4: exp(-100) is tiny but not 0, and is not small at all when "
                "the allowed scores are themselves very negative.")
        return got

    causal = causal_mask(5)
    empty_rows = (padding_mask([2], 4).flip(-1) & causal_mask(4))[0]  # rows 0, 1 empty
    with checks.case("a causal mask, scores (5, 5), float32"):
        run(_randn(5, 5, seed=61, scale=3.0), causal)
    with checks.case("causal and padding masks, scores (3, 4, 6), mask (3, 4, 6)"):
        run(_randn(3, 4, 6, seed=62, scale=3.0),
            padding_mask([6, 3, 1], 6) & causal_mask(4, 6))
    with checks.case("rows with no allowed key (rows 0 and 1), float32"):
        run(_randn(4, 4, seed=63, scale=3.0), empty_rows)
    with checks.case("rows with no allowed key (rows 0 and 1), float16"):
        run(_randn(4, 4, seed=63, scale=3.0, dtype=torch.float16), empty_rows)
    with checks.case("causal mask in float16, scores (2, 6, 6)"):
        run(_randn(2, 6, 6, seed=64, scale=3.0, dtype=torch.float16), causal_mask(6))
    with checks.case("a padding mask (2, 1, 5) that broadcasts over scores (2, 3, 5)"):
        run(_randn(2, 3, 5, seed=65), padding_mask([5, 2]))
    with checks.case("an all-True mask gives the plain softmax, scores (3, 4)"):
        run(_randn(3, 4, seed=66), torch.ones(3, 4, dtype=torch.bool))
    with checks.case("allowed scores near -2e4 and a forbidden key, float32"):
        run(torch.tensor([[-2.0e4, -2.01e4, -1.99e4, 0.0]]),
            torch.tensor([[True, True, True, False]]))
    with checks.case("gradients are finite and right, with rows that allow no key"):
        scores = _randn(4, 4, seed=67, scale=3.0)
        upstream = _randn(4, 4, seed=68)
        mine = scores.clone().requires_grad_()
        got = _call(call, masked_softmax_fn, mine, empty_rows.clone(),
                    names=("scores", "mask"))
        got = _expect_close("the weights", got, masked_softmax(scores, empty_rows),
                            hint="the same scores and mask as check 3, now with "
                                 "requires_grad=True.")
        no_gradient = _Mismatch("no gradient flows back to the scores", [],
                                "keep the computation differentiable: no `.detach()`, "
                                "`torch.no_grad()` or tensors rebuilt from `.tolist()`.")
        if not got.requires_grad:
            raise no_gradient
        (got * upstream).sum().backward()
        if mine.grad is None:
            raise no_gradient
        reference_scores = scores.clone().requires_grad_()
        (masked_softmax(reference_scores, empty_rows) * upstream).sum().backward()
        _expect_close(
            "the gradient of the scores", mine.grad, reference_scores.grad,
            hint="the gradient flows only through the allowed scores.",
            nan_hint="the softmax of a row of only -inf is NaN, and so is its gradient: "
                     "replacing the NaN weights afterwards does not stop it flowing back "
                     "when the -inf was added to the scores. Let empty rows keep their "
                     "scores for the softmax, then set their weights to 0.")
    checks.passed()


# ----------------------------------------------------------------- multi-head-attention

_TRANSPOSE_BEFORE_RESHAPE = (
    "did you forget the transpose before the reshape? `x.view(B, h, L, d_head)` cuts memory "
    "into blocks of whole tokens instead of giving head i features i·d_head .. "
    "(i+1)·d_head - 1 of every token. Reshape to (B, L, h, d_head), then `transpose(1, 2)`."
)
_LABELS_NOTE = "input: x[b, t, f] = 1000·b + 100·t + f, so every value names its token t " \
               "and feature f"


def _labelled(B: int, L: int, d_model: int) -> Tensor:
    """``x[b, t, f] = 1000 b + 100 t + f``: each value says where it came from."""
    b = torch.arange(B)[:, None, None]
    t = torch.arange(L)[None, :, None]
    f = torch.arange(d_model)[None, None, :]
    return (1000 * b + 100 * t + f).float()  # (B, L, d_model)


def _merge_hint(error: Exception) -> str | None:
    if "view" in str(error):
        return ("after a transpose the tensor is no longer contiguous in memory, so `.view` "
                "fails: use `.reshape(...)`, `.flatten(-2)` or `.contiguous().view(...)`.")
    return None


def check_split_merge_heads(split_fn: Callable, merge_fn: Callable) -> None:
    """Check ``split_fn(x, num_heads)`` and ``merge_fn(heads)``.

    The exercise of the chapter ``multi-head-attention``: ``split_fn`` takes ``x`` of shape
    ``(B, L, d_model)`` to ``(B, h, L, d_head)`` with head ``i`` holding features
    ``i·d_head .. (i+1)·d_head - 1`` of every token; ``merge_fn`` is its inverse and reads
    ``h`` from the shape. The reference is :meth:`attnbook.layers.MultiHeadAttention
    .split_heads` and ``merge_heads``. Catches the reshape without transpose, which a
    round trip ``merge(split(x)) == x`` alone does not.

    Raises:
        TypeError: if ``split_fn`` or ``merge_fn`` is not a function.
        ExerciseCheckError: at the first failing check.
    """
    split_fn = _require_function("split_fn", split_fn)
    merge_fn = _require_function("merge_fn", merge_fn)
    checks = _Checks("check_split_merge_heads", _merge_hint)
    split_name, merge_name = _name(split_fn), _name(merge_fn)

    def reference(d_model: int, num_heads: int) -> MultiHeadAttention:
        with torch.random.fork_rng(devices=[]):
            return MultiHeadAttention(d_model, num_heads)

    def split(x: Tensor, num_heads: int, note: str | None = None) -> Tensor:
        B, L, d_model = x.shape
        d_head = d_model // num_heads
        call = f"{split_name}(x, num_heads={num_heads})"
        got = _call(call, split_fn, x.clone(), num_heads, names=("x", "num_heads"))
        expected = reference(d_model, num_heads).split_heads(x)  # (B, h, L, d_head)
        return _expect_close(
            f"{call} for x of shape {(B, L, d_model)}", got, expected, atol=0, rtol=0,
            note=note,
            hint=f"head i holds features i·d_head .. (i+1)·d_head - 1 of every token: "
                 f"(B, L, d_model) -> (B, L, h, d_head) -> transpose(1, 2) -> "
                 f"(B, h, L, d_head), here {(B, num_heads, L, d_head)}.",
            mistakes=[
                (_TRANSPOSE_BEFORE_RESHAPE, lambda: x.reshape(B, num_heads, L, d_head)),
                ("the transpose swaps the wrong dimensions: after the reshape to (B, L, h, "
                 "d_head), swap L and h with `transpose(1, 2)`.",
                 lambda: x.reshape(B, L, num_heads, d_head).transpose(-2, -1)),
                ("reshape to (B, L, h, d_head), then transpose; reshaping to (B, L, d_head, "
                 "h) puts features of different heads side by side.",
                 lambda: x.reshape(B, L, d_head, num_heads).transpose(1, 3))])

    def merge(heads: Tensor, note: str | None = None) -> Tensor:
        B, h, L, d_head = heads.shape
        call = f"{merge_name}(heads)"
        got = _call(call, merge_fn, heads.clone(), names=("heads",))
        expected = reference(h * d_head, h).merge_heads(heads)  # (B, L, d_model)
        return _expect_close(
            f"{call} for heads of shape {(B, h, L, d_head)}", got, expected, atol=0, rtol=0,
            note=note,
            hint="merging undoes the split: (B, h, L, d_head) -> transpose(1, 2) -> "
                 "(B, L, h, d_head) -> reshape to (B, L, h·d_head).",
            mistakes=[("did you forget to transpose back before the reshape? "
                       "`heads.reshape(B, L, d_model)` mixes tokens; transpose(1, 2) first.",
                       lambda: heads.reshape(B, L, h * d_head))])

    with checks.case("split x (2, 4, 12) into 3 heads of width 4"):
        split(_labelled(2, 4, 12), 3, _LABELS_NOTE)
    with checks.case("split x (3, 5, 8) into 2 heads, random values"):
        split(_randn(3, 5, 8, seed=71), 2)
    with checks.case("split x (2, 3, 6) into 1 head"):
        split(_randn(2, 3, 6, seed=72), 1)
    with checks.case("split x (2, 3, 6) into 6 heads of width 1"):
        split(_randn(2, 3, 6, seed=73), 6)
    with checks.case("merge the 3 heads of x (2, 4, 12): a transposed, non-contiguous input"):
        merge(reference(12, 3).split_heads(_labelled(2, 4, 12)), _LABELS_NOTE)
    with checks.case("merge contiguous heads (1, 4, 3, 2)"):
        merge(_randn(1, 4, 3, 2, seed=74))
    with checks.case("round trip: merge(split(x, 4)) == x for x (2, 5, 16)"):
        x = _randn(2, 5, 16, seed=75)
        heads = _call(f"{split_name}(x, num_heads=4)", split_fn, x.clone(), 4,
                      names=("x", "num_heads"))
        heads = _expect_close("the heads", heads, reference(16, 4).split_heads(x),
                              atol=0, rtol=0, hint=_TRANSPOSE_BEFORE_RESHAPE)
        back = _call(f"{merge_name}({split_name}(x, num_heads=4))", merge_fn, heads,
                     names=("heads",))
        _expect_close("merge(split(x))", back, x, atol=0, rtol=0,
                      hint="merge must undo split exactly.")
    checks.passed()


# ------------------------------------------------------------------- training-attention


def _carries(L: int, period: int, *, offset: int = 1, causal: bool = True,
             nearest: bool = False, normalise: bool = True) -> Tensor:
    """The ``(L, L)`` map over the keys ``j`` with ``t + offset - j`` a multiple of
    ``period`` (only ``j <= t`` when ``causal``; only the nearest such key when ``nearest``),
    each row divided by its number of keys when ``normalise``."""
    query = torch.arange(L)[:, None]  # (L, 1)
    key = torch.arange(L)[None, :]  # (1, L)
    carries = (query + offset - key) % period == 0  # (L, L)
    if causal:
        carries &= key <= query
    if nearest:
        carries &= key >= query + offset - period
    carries = carries.float()
    return carries / carries.sum(-1, keepdim=True).clamp(min=1) if normalise else carries


def _wrapped_nearest(L: int, period: int) -> Tensor:
    """``R[t, t + 1 - period] = 1`` for every row, Python's negative indices included."""
    wrapped = torch.zeros(L, L)
    rows = torch.arange(L)
    wrapped[rows, (rows + 1 - period) % L] = 1.0
    return wrapped


def _repeat_pattern_hint(error: Exception) -> str | None:
    if isinstance(error, ZeroDivisionError):
        return ("a row t < period - 1 has no key holding its target: leave it at zero "
                "instead of dividing by its number of keys, 0.")
    if isinstance(error, IndexError):
        return ("keys run from 0 to L - 1: key t + 1 - period exists only from row "
                "t = period - 1 on.")
    return None


def check_repeat_pattern(pattern_fn: Callable) -> None:
    """Check ``pattern_fn(L, period) -> map``: the required map of the repeat task.

    The exercise of the chapter ``training-attention``: the ``(L, L)`` float map of
    ``RepeatTask(length=L, period=period)``, whose row ``t`` spreads 1 evenly over the keys
    ``j <= t`` with ``t + 1 - j`` a multiple of ``period`` (the keys holding the token
    ``x_{t+1}``), and whose rows ``t < period - 1``, which no key can answer, stay zero. The
    reference is :meth:`attnbook.training.RepeatTask.required_pattern`, and the row sums
    must be 1 exactly where :meth:`~attnbook.training.RepeatTask.answerable` is True.

    Checks the chapter's task (``L = 16``, period 8), prefixes that repeat three and four
    times, period 2, ``period = L``, the smallest task and a longer one.

    Raises:
        TypeError: if ``pattern_fn`` is not a function.
        ExerciseCheckError: at the first failing check.
    """
    pattern_fn = _require_function("pattern_fn", pattern_fn)
    checks = _Checks("check_repeat_pattern", _repeat_pattern_hint)
    name = _name(pattern_fn)
    hint = ("row t spreads 1 evenly over the keys j <= t with t + 1 - j a multiple of "
            "period, the keys that hold x_(t+1); rows t < period - 1 stay zero.")

    def run(L: int, period: int) -> None:
        call = f"{name}({L}, {period})"
        task = RepeatTask(length=L, period=period)
        expected = task.required_pattern()  # (L, L), float32
        mistakes: list[_Mistake] = [
            ("key j holds x_j, and query t must predict x_(t+1): take the keys with "
             "t + 1 - j a multiple of period. With t - j you point at copies of the query's "
             "own token.", lambda: _carries(L, period, offset=0)),
            ("only keys j <= t: the causal mask hides the later ones, and key t + 1 holds "
             "the very token to predict.", lambda: _carries(L, period, causal=False)),
            ("for t < period - 1 the index t + 1 - period is negative, and R[t, -k] "
             "silently writes to column L - k, a later key: leave those rows at zero.",
             lambda: _wrapped_nearest(L, period)),
            ("every earlier copy holds the answer: spread 1 evenly over key t + 1 - period "
             "and its copies further back, t + 1 - 2·period and so on, as long as they are "
             ">= 0.", lambda: _carries(L, period, nearest=True)),
            ("spread 1 evenly: divide each row by its number of keys, so that a row with k "
             "keys gets 1/k on each.", lambda: _carries(L, period, normalise=False)),
            ("rows are queries and columns keys: R[t, j] is the weight query t gives to key "
             "j, and you built the transpose.", lambda: expected.T),
        ]
        got = _call(call, pattern_fn, L, period, names=("L", "period"))
        got = _as_tensor(f"the map {call}", got, expected, hint)
        if got.shape == expected.shape and not got.is_floating_point():
            raise _Mismatch(
                f"the map {call} has dtype {got.dtype}, expected a floating dtype such as "
                f"torch.float32", [f"expected: {_describe(expected)}",
                                   f"got:      {_describe(got)}"],
                "the weights are fractions (1/2 when two keys hold the answer): build the "
                "map with `torch.zeros(L, L)`, a float tensor, or call `.float()`.")
        if got.shape == expected.shape and torch.isfinite(got.detach()).all():
            sums = got.detach().cpu().double().sum(-1)  # (L,)
            answerable = task.answerable().double()  # (L,)
            if not torch.allclose(sums, answerable, atol=1e-5, rtol=0):
                t = int(((sums - answerable).abs() > 1e-5).nonzero()[0])
                if t < period - 1:
                    fallback = ("rows t < period - 1 have no key holding their target: "
                                "leave them all zero.")
                elif sums[t] > 1:
                    fallback = "spread 1 evenly: divide each row by its number of keys."
                else:
                    fallback = ("from t = period - 1 on, row t has at least the key "
                                "t + 1 - period: its weights sum to 1.")
                raise _Mismatch(
                    f"wrong row sums of the map {call}: row {t} sums to "
                    f"{_number(float(sums[t]))}, expected {_number(float(answerable[t]))}",
                    [f"expected row sums: {_values(answerable, L)}",
                     f"got row sums:      {_values(sums, L)}",
                     f"rows 0 to {period - 2} cannot be answered: their target is a fresh "
                     f"random token (RepeatTask.answerable() is False there)"],
                    _diagnose(got, mistakes, 1e-6, 1e-5) or fallback)
        _expect_close(
            f"the map {call}", got, expected, atol=1e-6, rtol=1e-5, check_dtype=False,
            hint=hint, mistakes=mistakes,
            nan_hint="a row with no key divides 0 by 0, which is NaN: leave such rows at "
                     "zero (divide by the number of keys clamped to at least 1, "
                     "`counts.clamp(min=1)`).")

    with checks.case("the chapter's task, L=16 and period=8: the prefix repeats twice"):
        run(16, 8)
    with checks.case("L=9, period=4: rows 7 and 8 have their answer at two keys"):
        run(9, 4)
    with checks.case("L=12, period=3: the last row has its answer at four keys"):
        run(12, 3)
    with checks.case("L=7, period=2"):
        run(7, 2)
    with checks.case("period = L = 6: only the last row can be answered"):
        run(6, 6)
    with checks.case("the smallest task, L=3 and period=2"):
        run(3, 2)
    with checks.case("a longer input, L=25 and period=5"):
        run(25, 5)
    checks.passed()


# ------------------------------------------------------------------ efficient-attention

_ONLINE_OVERFLOW_HINT = (
    "exp overflowed: e^z does not fit in a float once z is above about 709. Exponentiate "
    "only z - m, with m the running maximum, so that no term exceeds 1."
)
_LOW_PRECISION_HINT = (
    "the scores are Python floats, that is float64; a float32 tensor such as "
    "`torch.tensor(z)` rounds them. Compute with `math.exp` and `max`, or in torch.float64."
)


def _online_normalizer_hint(error: Exception) -> str | None:
    message = str(error)
    if isinstance(error, OverflowError):
        return _ONLINE_OVERFLOW_HINT
    if isinstance(error, TypeError) and any(
            text in message for text in ("len()", "subscriptable", "reversed")):
        return ("the scores arrive as an iterator: read them once, in order, with "
                "`for z in stream:`. It has no length and no indexing, and it cannot go back.")
    if isinstance(error, TypeError) and "Tensor" in message:
        return ("the scores are Python floats: use `math.exp` and `max`, not `torch.exp` "
                "and `torch.maximum` (or turn each one into a float64 tensor first).")
    if isinstance(error, ValueError) and "empty" in message:
        return ("the stream can be read only once: after `max(stream)` nothing is left. "
                "Keep the maximum and the sum up to date in one loop.")
    return None


def _as_scalar(label: str, value: object, hint: str) -> float:
    """One number as a Python float, or a failed check."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise _Mismatch(f"{label} is a tensor of shape {tuple(value.shape)}, expected one "
                            f"number", [], hint)
        return float(value.detach().cpu().reshape(()).double())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise _Mismatch(f"{label} is a {type(value).__name__}, expected one number (a float)",
                    [], hint)


def _expect_number(label: str, got: float, expected: float, *, atol: float, rtol: float,
                   hint: str, nan_hint: str, note: str,
                   mistakes: Sequence[tuple[str, Callable[[], float]]] = ()) -> None:
    """Fail unless the number ``got`` is within ``atol + rtol·|expected|`` of ``expected``;
    both are shown with every digit, and ``hint`` is given when no known mistake explains
    the difference."""
    if math.isfinite(expected) and not math.isfinite(got):
        headline, hint = f"{label} is {got!r} where a finite number was expected", nan_hint
    elif abs(got - expected) <= atol + rtol * abs(expected):
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
    if math.isfinite(got):
        details.append(f"difference {abs(got - expected):.3g} (allowed: {atol:g} + "
                       f"{rtol:g}·|expected|)")
    raise _Mismatch(headline, [*details, note], hint)


def _without_rescaling(row: Tensor) -> Tensor:
    """``ell`` when the old terms are never rescaled: ``sum_j exp(z_j - max(z_0..z_j))``."""
    return torch.exp(row - row.cummax(0).values).sum()


def _rescaled_upwards(scores: Sequence[float]) -> float:
    """``ell`` when the rescaling factor is ``exp(m_new - m_old)`` instead of its inverse."""
    m, ell = -math.inf, 0.0
    for z in scores:
        m_new = max(m, z)
        ell = (ell * math.exp(m_new - m) if ell else 0.0) + math.exp(z - m_new)
        m = m_new
    return ell


def check_online_normalizer(normalizer_fn: Callable) -> None:
    """Check ``normalizer_fn(stream) -> (m, ell)``: the one-pass online normaliser.

    The exercise of the chapter ``efficient-attention`` (Milakov and Gimelshein's online
    softmax): ``stream`` is an iterator over the scores ``z_j`` of one row, Python floats,
    which can be read only once; the answer is the pair of numbers ``m = max_j z_j`` and
    ``ell = sum_j exp(z_j - m)``. Then ``exp(z_j - m) / ell`` is the softmax and
    ``m + log(ell)`` the log-sum-exp of the row, which are compared with
    :func:`torch.softmax` and :func:`torch.logsumexp`.

    Checks rows of 1 to 1000 scores (random, rising so that the maximum moves at every
    step, falling, all equal), scores near 1000 and of order 1e4 where ``exp(z)`` overflows,
    scores all below -1000, and masked scores ``-inf`` after the first one. A row whose
    every score is ``-inf`` has no maximum and is not checked.

    Raises:
        TypeError: if ``normalizer_fn`` is not a function.
        ExerciseCheckError: at the first failing check.
    """
    normalizer_fn = _require_function("normalizer_fn", normalizer_fn)
    checks = _Checks("check_online_normalizer", _online_normalizer_hint)
    call = f"{_name(normalizer_fn)}(stream)"
    pair_hint = "return the pair `(m, ell)` of two numbers, for instance `return m, ell`."

    def run(row: Tensor) -> None:
        row = row.double()  # (S,)
        scores = row.tolist()
        result = _call(call, normalizer_fn, (z for z in scores), names=("stream",))
        got_m, got_ell = _expect_pair(call, result, "m", "ell")
        low = [isinstance(v, Tensor) and v.is_floating_point() and v.dtype != torch.float64
               for v in (got_m, got_ell)]
        got_m = _as_scalar("m", got_m, pair_hint)
        got_ell = _as_scalar("ell", got_ell, pair_hint)
        m = float(row.max())
        ell = float(torch.exp(row - m).sum())
        note = f"the row: {len(scores)} scores {_values(scores)}"
        _expect_number(
            "m", got_m, m, atol=1e-12, rtol=1e-12, note=note,
            hint=_LOW_PRECISION_HINT if low[0] else
            "m is the largest score of the row: update it with every score, "
            "`m = max(m, z)`, starting from float('-inf').",
            nan_hint="start m at float('-inf') and update it with `m = max(m, z)`: it is "
                     "then the largest score, finite as soon as one score is.",
            mistakes=[
                ("return the pair (m, ell) in that order: the maximum first, then the sum.",
                 lambda: ell),
                ("start the running maximum at float('-inf'), not 0: when every score is "
                 "negative, 0 is above all of them.", lambda: max(m, 0.0)),
                ("m must be the maximum of all the scores: update it with every score, "
                 "`m = max(m, z)`, not only with the first.", lambda: scores[0]),
                ("m is the running maximum, not the last score read: `m = max(m, z)`.",
                 lambda: scores[-1])])
        _expect_number(
            "ell", got_ell, ell, atol=1e-12, rtol=1e-9, note=note,
            hint=_LOW_PRECISION_HINT if low[1] else
            "ell is the sum of exp(z_j - m) over the whole row, with m the final maximum.",
            nan_hint=_ONLINE_OVERFLOW_HINT,
            mistakes=[
                ("ell is 0: the stream can be read only once, and a second loop over it sees "
                 "nothing. Update m and ell together, in one loop.", lambda: 0.0),
                ("when a score beats the maximum, rescale the sum so far: "
                 "`ell = ell * exp(m_old - m_new) + exp(z - m_new)`. Without it the old "
                 "terms stay relative to the old maximum.", lambda: _without_rescaling(row)),
                ("the rescaling factor is exp(m_old - m_new), at most 1: the old terms "
                 "shrink when the maximum rises.", lambda: _rescaled_upwards(scores)),
                ("ell is the sum of exp(z_j - m), relative to the maximum m, not of "
                 "exp(z_j): that is what keeps every term at most 1.",
                 lambda: torch.exp(row).sum())])
        # What (m, ell) are for: the softmax and the log-sum-exp of the row.
        _expect_close("the softmax exp(z - m) / ell", torch.exp(row - got_m) / got_ell,
                      torch.softmax(row, dim=0), atol=1e-12, rtol=1e-9, note=note,
                      hint="the weights exp(z_j - m) / ell must be torch.softmax of the row.")
        _expect_number("the log-sum-exp m + log(ell)", got_m + math.log(got_ell),
                       float(torch.logsumexp(row, dim=0)), atol=1e-9, rtol=1e-12, note=note,
                       hint="m + log(ell) must be torch.logsumexp of the row.",
                       nan_hint="m + log(ell) must be torch.logsumexp of the row.")

    with checks.case("100 random scores, randn (100,)"):
        run(_randn(100, seed=81, dtype=torch.float64))
    with checks.case("a single score: m = z and ell = 1"):
        run(torch.tensor([0.7]))
    with checks.case("20 rising scores: the maximum moves at every step"):
        run(torch.linspace(-3.0, 6.0, 20, dtype=torch.float64))
    with checks.case("20 falling scores: the maximum never moves after the first"):
        run(torch.linspace(6.0, -3.0, 20, dtype=torch.float64))
    with checks.case("5 equal scores 2.0: ell = 5"):
        run(torch.full((5,), 2.0, dtype=torch.float64))
    with checks.case("100 scores near 1000, 1000 + randn (100,): exp(z) overflows"):
        run(1000.0 + _randn(100, seed=82, dtype=torch.float64))
    with checks.case("1000 huge scores, 1e4 · randn (1000,)"):
        run(_randn(1000, seed=83, dtype=torch.float64, scale=1e4))
    with checks.case("very negative scores, -2000 + randn (50,)"):
        run(-2000.0 + _randn(50, seed=84, dtype=torch.float64))
    with checks.case("masked keys: scores of -inf after the first score"):
        scores = _randn(8, seed=85, dtype=torch.float64)
        scores[[1, 4, 5, 7]] = -math.inf
        run(scores)
    checks.passed()
