"""The checkers of the chapter ``positions``: :func:`check_sinusoidal`,
:func:`check_rope_interleaved` and :func:`check_alibi_slopes`.

The references are the package's own :func:`~attnbook.positions.sinusoidal`,
:func:`~attnbook.positions.rope` with ``layout="interleaved"`` and
:func:`~attnbook.positions.alibi_slopes`. The typical wrong answers are built from them too
(another layout, another base, shifted positions), so that a hint can name the mistake.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..positions import alibi_slopes, interleaved_order, rope, sinusoidal
from .compare import Mismatch, Mistake, as_tensor, describe, expect_close, randn, values
from .harness import Checks, call_reader, error_hints, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_alibi_slopes", "check_rope_interleaved", "check_sinusoidal"]


# ------------------------------------------------------------------ the sinusoidal encoding

_SINUSOIDAL_HINT = (
    "PE[pos, 2i] = sin(pos / 10000^(2i/E)) and PE[pos, 2i+1] = cos(pos / 10000^(2i/E)), "
    "for the positions pos = 0 .. L-1 and the pairs i = 0 .. E/2-1."
)
#: float32 angles of position 1000 are off by about 3e-5: any honest way of computing passes.
_SINUSOIDAL_TOLERANCE = 1e-4


def _floating(label: str, got: Tensor, expected: Tensor, hint: str) -> None:
    """Fail if ``got``, of the right shape, has an integer or boolean dtype."""
    if got.shape == expected.shape and not got.is_floating_point():
        raise Mismatch(
            f"{label} has dtype {got.dtype}, expected a floating dtype such as torch.float32",
            [f"expected: {describe(expected)}", f"got:      {describe(got)}"], hint)


def _swap_within_pairs(E: int) -> Tensor:
    """``[1, 0, 3, 2, ...]``: column ``2i`` and ``2i+1`` exchanged."""
    return torch.arange(E).view(-1, 2).flip(-1).flatten()  # (E,)


def _per_column_exponent(L: int, E: int) -> Tensor:
    """The encoding with the exponent ``j/E`` of column ``j``, odd columns included."""
    angle = torch.arange(L, dtype=torch.float64)[:, None] \
        / 10000.0 ** (torch.arange(E, dtype=torch.float64) / E)  # (L, E)
    return torch.where(torch.arange(E) % 2 == 0, angle.sin(), angle.cos())  # (L, E)


def check_sinusoidal(sinusoidal_fn: Callable) -> None:
    """Check ``sinusoidal_fn(L, E) -> PE``: the sinusoidal encoding of Vaswani et al.

    The exercise ``positions-ex1`` of the chapter ``positions``: an ``(L, E)`` float tensor,
    one row per position ``0 .. L-1``, in the paper's interleaved layout
    ``PE[pos, 2i] = sin(pos / 10000^(2i/E))``, ``PE[pos, 2i+1] = cos(pos / 10000^(2i/E))``.
    The reference is :func:`attnbook.positions.sinusoidal`; any floating dtype is accepted,
    and values must agree to 1e-4 (what float32 angles of position 1000 allow).

    Checks small and wide encodings, the smallest (``L = 1``, ``E = 2``) and a long one
    (``L = 1000``). Its hints name the half-split layout (all sines, then all cosines),
    sine and cosine swapped, the exponent ``i/E`` or ``j/E`` instead of ``2i/E``, positions
    that start at 1, and shapes such as ``(E, L)`` or ``(1, L, E)``.
    """
    sinusoidal_fn = require_function("sinusoidal_fn", sinusoidal_fn)
    checks = Checks("check_sinusoidal")
    name = name_of(sinusoidal_fn)

    def run(L: int, E: int) -> None:
        call = f"{name}({L}, {E})"
        expected = sinusoidal(L, E)  # (L, E), float32
        mistakes: list[Mistake] = [
            ("the paper interleaves: column 2i holds the sine and column 2i+1 the cosine of "
             "the same frequency. All sines, then all cosines, is the half-split layout "
             "(tensor2tensor's get_timing_signal_1d): stack the two and flatten, "
             "`torch.stack([sin, cos], dim=-1).flatten(-2)`, or fill `pe[:, 0::2]` and "
             "`pe[:, 1::2]`.", lambda: expected[:, interleaved_order(E).argsort()]),
            ("sine and cosine are swapped: the even columns 2i hold the sine, the odd "
             "columns 2i+1 the cosine (row 0 is [0, 1, 0, 1, ...]).",
             lambda: expected[:, _swap_within_pairs(E)]),
            ("the exponent is 2i/E, with i the pair (i = 0 .. E/2-1), not i/E: pair i turns "
             "at 1 / 10000^(2i/E), so the slowest pair has a wavelength near 2π·10000. "
             "Write `10000 ** (torch.arange(0, E, 2) / E)`.",
             lambda: sinusoidal(L, E, base=100.0)),
            ("columns 2i and 2i+1 share one frequency, 1 / 10000^(2i/E): the cosine of "
             "column 2i+1 uses the exponent 2i/E, not (2i+1)/E.",
             lambda: _per_column_exponent(L, E)),
            ("positions start at 0: the first row is position 0, sin(0) = 0 and cos(0) = 1. "
             "Use `torch.arange(L)`, not `torch.arange(1, L + 1)`.",
             lambda: sinusoidal(L + 1, E)[1:]),
            ("one row per position and one column per feature: the shape is (L, E), "
             "not (E, L).", lambda: expected.T),
            ("return the (L, E) table itself, without a batch dimension in front: "
             "`pe.unsqueeze(0)` belongs where you add it to token embeddings (B, L, E).",
             lambda: expected[None]),
            ("flatten the pairs: (L, E/2, 2) -> (L, E) with `.flatten(-2)`.",
             lambda: expected.unflatten(-1, (E // 2, 2))),
        ]
        got = call_reader(call, sinusoidal_fn, L, E, names=("L", "E"))
        got = as_tensor(f"the encoding {call}", got, expected, _SINUSOIDAL_HINT)
        _floating(f"the encoding {call}", got, expected,
                  "sines and cosines are fractions: build the table from float tensors "
                  "(`torch.arange(L, dtype=torch.float32)`) or call `.float()`.")
        expect_close(
            f"the encoding {call}", got, expected, atol=_SINUSOIDAL_TOLERANCE, rtol=0,
            check_dtype=False, hint=_SINUSOIDAL_HINT, mistakes=mistakes,
            note="rows are positions 0 .. L-1; row 0 is [0, 1, 0, 1, ...] (sin 0, cos 0)")

    checks.run_all(run, [
        ("4 positions, 6 features", 4, 6),
        ("50 positions, 16 features", 50, 16),
        ("the smallest, 1 position and 2 features: [[0, 1]]", 1, 2),
        ("128 positions, 64 features", 128, 64),
        ("10 positions, 512 features, as in the paper's base model", 10, 512),
        ("a long one, 1000 positions and 10 features", 1000, 10),
    ])


# --------------------------------------------------------------------- rotary, interleaved

_ROPE_HINT = (
    "pair i is (x[..., 2i], x[..., 2i+1]); at position m it turns by the angle m·θ_i, "
    "θ_i = base^(-2i/D): (x1, x2) -> (x1·cos - x2·sin, x1·sin + x2·cos), and the turned "
    "pair goes back to features 2i and 2i+1."
)
_NORM_HINT = (
    "a rotation keeps the length of every pair, and so of every row of x, but yours "
    "changes it: the turned pair is (x1·cos - x2·sin, x1·sin + x2·cos), with the cosine "
    "on the feature itself and the sine on its partner, one minus sign."
)
_ROPE_IN_PLACE_HINT = (
    "work out of place: `x[..., 0::2]` is a view of x, so `x[..., 0::2] = ...` or `x1 *= "
    "cos` changes the caller's queries. Build a new tensor (`torch.stack([...], dim=-1)"
    ".flatten(-2)`)."
)
_FLOAT64_HINT = (
    "your values are right to about float32 precision, but the input is float64: compute "
    "the angles in x's dtype, `torch.arange(0, D, 2, dtype=x.dtype)` and "
    "`positions.to(x.dtype)`. Float32 angles are off by about 1e-7 times the position."
)


_rope_hint = error_hints(
    (RuntimeError, "must match the size",
     "positions has the shape (..., L) and may have leading dimensions (one row of positions "
     "per sequence): `positions[..., None] * theta` gives the angles (..., L, D/2), whatever "
     "comes in front; `positions[:, None]` does not."),
    (RuntimeError, "last dimension of size 2",
     "torch.view_as_complex reads each pair from a last dimension of size 2: "
     "`x.unflatten(-1, (-1, 2))` turns (..., L, D) into (..., L, D/2, 2)."),
)


def _row_lengths_changed(got: object, x: Tensor) -> bool:
    """True if ``got`` has ``x``'s shape, is finite, and the length of some row differs."""
    if not isinstance(got, Tensor) or got.shape != x.shape or not got.is_floating_point():
        return False
    g = got.detach().double()
    return bool(torch.isfinite(g).all()) and not torch.allclose(
        g.norm(dim=-1), x.double().norm(dim=-1), rtol=1e-3, atol=1e-5)


def _about_float32(got: object, expected: Tensor) -> bool:
    """True if ``got`` agrees with the float64 ``expected`` only to float32 precision."""
    return (expected.dtype == torch.float64 and isinstance(got, Tensor)
            and got.shape == expected.shape and got.is_floating_point()
            and torch.allclose(got.detach().double(), expected, atol=1e-4, rtol=1e-3))


def check_rope_interleaved(rope_fn: Callable) -> None:
    """Check ``rope_fn(x, positions, base=10000.0)``: rotary positions, interleaved layout.

    The exercise ``positions-ex2`` of the chapter ``positions`` (RoFormer, GPT-J): features
    ``2i`` and ``2i+1`` of ``x`` ``(..., L, D)`` form pair ``i``, which turns by
    ``positions[..., m] · base^(-2i/D)``; ``positions`` is an integer tensor ``(..., L)``
    broadcastable against the leading dimensions of ``x``. The result has the shape and the
    dtype of ``x``, and ``x`` is not changed. The reference is
    :func:`attnbook.positions.rope` with ``layout="interleaved"``.

    Checks single and batched inputs, positions after a cache, positions that are not
    consecutive, one row of positions per sequence, another base, a single pair, float64
    at large positions, and that the scores ``q · k`` of the reader's function on features
    reordered with :func:`~attnbook.positions.interleaved_order` are the half-split scores.
    Its hints name the half-split layout, the wrong direction, positions ignored or off by
    one, the frequencies ``base^(-i/D)``, a change in place, and rows whose length changes.
    """
    rope_fn = require_function("rope_fn", rope_fn)
    checks = Checks("check_rope_interleaved", _rope_hint)
    name = name_of(rope_fn)

    def rotated(x: Tensor, positions: Tensor, base: float | None) -> object:
        given = x.clone()
        args = (given, positions.clone()) + (() if base is None else (base,))
        call = f"{name}(x, positions{'' if base is None else f', {base}'})"
        try:
            return call_reader(call, rope_fn, *args, names=("x", "positions", "base"))
        except Mismatch as changed:  # call_reader's only Mismatch: an argument changed
            changed.hint = _ROPE_IN_PLACE_HINT
            if not torch.equal(given, x):  # show a row that changed: row 0 is not turned
                row = tuple(int(i) for i in (given != x).nonzero()[0][:-1])
                where = "".join(f"[{i}]" for i in row)
                changed.details = [f"x{where} before: {values(x[row])}",
                                   f"x{where} after:  {values(given.detach()[row])}"]
            raise

    def run(x: Tensor, positions: Tensor, base: float | None = None) -> None:
        got = rotated(x, positions, base)
        b = 10000.0 if base is None else base
        D = x.shape[-1]
        order = interleaved_order(D)
        L = x.shape[-2]

        def turned(p: Tensor, base: float = b, layout: str = "interleaved") -> Tensor:
            return rope(x, p, base, layout=layout)

        expected = turned(positions)
        mistakes: list[Mistake] = [
            ("you paired feature i with feature i + D/2: that is the half-split layout "
             "(GPT-NeoX, Hugging Face's rotate_half). Here neighbours pair up: features 2i and "
             "2i+1, `x[..., 0::2]` and `x[..., 1::2]`.",
             lambda: turned(positions, layout="half-split")),
            ("the pairs are right, but the turned pairs go back half-split, all first "
             "features then all second ones (`torch.cat`): interleave them again, "
             "`torch.stack([first, second], dim=-1).flatten(-2)`.",
             lambda: expected[..., order.argsort()]),
            ("you read the half-split pairs (i, i + D/2) and wrote them back interleaved: "
             "read the neighbours, `x[..., 0::2]` and `x[..., 1::2]`.",
             lambda: turned(positions, layout="half-split")[..., order]),
            ("you rotate the wrong way: the angle is +m·θ_i, so the turned pair is "
             "(x1·cos - x2·sin, x1·sin + x2·cos), the sine's minus sign on the first "
             "feature.", lambda: turned(-positions)),
            ("use the positions you are given, not `torch.arange(L)`: tokens after a cache "
             "start at an offset, and positions need not be consecutive.",
             lambda: turned(torch.arange(L))),
            ("your positions are one too far: position m turns by exactly m·θ_i, and "
             "position 0 is not turned at all.", lambda: turned(positions + 1)),
            ("your positions are one short: position m turns by exactly m·θ_i.",
             lambda: turned(positions - 1)),
            ("the frequency of pair i is base^(-2i/D), for i = 0 .. D/2-1, not base^(-i/D): "
             "write `base ** (-torch.arange(0, D, 2) / D)`.",
             lambda: turned(positions, base=math.sqrt(b))),
            ("the base is an argument: use the `base` you are given, not 10000.",
             lambda: turned(positions, base=10000.0)),
            ("flatten the pairs back: (..., L, D/2, 2) -> (..., L, D) with `.flatten(-2)`.",
             lambda: expected.unflatten(-1, (D // 2, 2))),
        ]
        if _row_lengths_changed(got, x):
            hint = _NORM_HINT
        elif _about_float32(got, expected):
            hint = _FLOAT64_HINT
        else:
            hint = _ROPE_HINT
        expect_close("the rotated x", got, expected, hint=hint, mistakes=mistakes,
                     note=f"positions {values(positions.flatten(), limit=8)}")

    with checks.case("x (5, 8), float32, positions 0 .. 4"):
        run(randn(5, 8, seed=91), torch.arange(5))
    with checks.case("a batch of heads, x (2, 3, 6, 16), positions 0 .. 5"):
        run(randn(2, 3, 6, 16, seed=92), torch.arange(6))
    with checks.case("new tokens after a cache of 100, x (6, 8), positions 100 .. 105"):
        run(randn(6, 8, seed=93), torch.arange(100, 106))
    with checks.case("positions that are not consecutive, x (6, 12)"):
        run(randn(6, 12, seed=94), torch.tensor([0, 3, 4, 9, 20, 57]))
    with checks.case("one row of positions per sequence, positions (2, 1, 4) for x "
                     "(2, 3, 4, 12): the second sequence is padded on the left"):
        run(randn(2, 3, 4, 12, seed=95), torch.tensor([[[0, 1, 2, 3]], [[0, 0, 1, 2]]]))
    with checks.case("another base, base=500.0, x (5, 8)"):
        run(randn(5, 8, seed=96), torch.arange(5), 500.0)
    with checks.case("a single pair, x (1, 2) at position 7"):
        run(randn(1, 2, seed=97), torch.tensor([7]))
    with checks.case("float64 x (2, 5, 16) at positions 1000 .. 1004: float64 in, float64 "
                     "out"):
        run(randn(2, 5, 16, seed=98, dtype=torch.float64), torch.arange(1000, 1005))
    with checks.case("the scores q·k on features reordered with interleaved_order(16) are "
                     "the half-split scores"):
        q, k = randn(6, 16, seed=99), randn(6, 16, seed=100)  # (L, D) each
        positions = torch.arange(6)
        order = interleaved_order(16)
        q_turned = expect_close("the rotated q[..., order]", rotated(q[..., order], positions,
                                                                     None),
                                rope(q[..., order], positions, layout="interleaved"),
                                hint=_ROPE_HINT)
        k_turned = expect_close("the rotated k[..., order]", rotated(k[..., order], positions,
                                                                     None),
                                rope(k[..., order], positions, layout="interleaved"),
                                hint=_ROPE_HINT)
        half_split = rope(q, positions) @ rope(k, positions).T  # (L, L)
        expect_close("the scores q·k", q_turned @ k_turned.T, half_split,
                     hint="reordering the features of q and k the same way does not change "
                          "q·k; with the order of interleaved_order(D), the interleaved "
                          "rotation turns the same pairs as the half-split one.")
    checks.passed()


# ----------------------------------------------------------------------------- ALiBi slopes

_ALIBI_HINT = (
    "the paper's get_slopes: for n a power of two, head h = 1 .. n gets 2^(-8h/n); "
    "otherwise take the p = 2^floor(log2 n) slopes of p heads, then the first n - p of "
    "every other slope of 2p heads, `slopes(2p)[0::2][:n - p]`."
)


def _power_of_two(n: int, first: int = 1) -> list[float]:
    """``2^(-8h/n)`` for ``h = first .. first + n - 1``."""
    return [2.0 ** (-8.0 * h / n) for h in range(first, first + n)]


def _paper_like(n: int, *, first: int = 1, extra: slice = slice(0, None, 2),
                extras_first: bool = False) -> Tensor:
    """The paper's recipe with one thing changed, to recognise a mistake."""
    closest = 2 ** math.floor(math.log2(n))
    slopes = _power_of_two(closest, first)
    extras = _power_of_two(2 * closest, first)[extra][: n - closest]
    return torch.tensor(extras + slopes if extras_first else slopes + extras,
                        dtype=torch.float64)  # (n,)


_alibi_hint = error_hints(
    (RecursionError, "",
     "the recursion never ends: for n not a power of two, call the power-of-two formula for "
     "p and 2p (both powers of two), not get_slopes(n) again."),
    (IndexError, "",
     "take the extra slopes from 2p heads with a slice, `[0::2][:n - p]`: a slice never runs "
     "past the end."),
)


def check_alibi_slopes(slopes_fn: Callable) -> None:
    """Check ``slopes_fn(num_heads) -> slopes``: the head slopes of ALiBi.

    The exercise ``positions-ex3`` of the chapter ``positions``: a float tensor of shape
    ``(num_heads,)``, exactly the paper's ``get_slopes`` (Press et al., 2022) in its order:
    ``2^(-8h/n)`` for heads ``h = 1 .. n`` when ``n`` is a power of two; otherwise the
    slopes of the closest power of two ``p < n``, then every other slope of ``2p`` heads
    until there are ``n``. The reference is :func:`attnbook.positions.alibi_slopes`; any
    floating dtype is accepted.

    Checks 8 heads (the paper's), 16, 1 and 2, then 12, 6, 3 and 20 heads, which are not
    powers of two. Its hints name the naive ``2^(-8h/n)`` on those, heads counted from 0,
    a wrong sign, and a wrong order (ascending, sorted, or the extra slopes first).
    """
    slopes_fn = require_function("slopes_fn", slopes_fn)
    checks = Checks("check_alibi_slopes", _alibi_hint)
    name = name_of(slopes_fn)

    def run(n: int) -> None:
        call = f"{name}({n})"
        expected = alibi_slopes(n)  # (n,), float32
        closest = 2 ** math.floor(math.log2(n))
        note = (f"n = {n} is a power of two: head h = 1 .. {n} gets 2^(-8h/{n})"
                if closest == n else
                f"n = {n} is not a power of two: the {closest} slopes of {closest} heads, "
                f"then slopes({2 * closest})[0::2][:{n - closest}]")
        mistakes: list[Mistake] = [
            (f"for n not a power of two the paper does not use 2^(-8h/n): it keeps the "
             f"slopes of the closest power of two below n, here the {closest} slopes of "
             f"{closest} heads, then adds every other slope of {2 * closest} heads, "
             f"`slopes({2 * closest})[0::2][:{n - closest}]`.",
             lambda: torch.tensor(_power_of_two(n), dtype=torch.float64)),
            ("the closest power of two is the one below n, 2^floor(log2 n): the paper "
             "does not cut the slopes of the next power of two short.",
             lambda: torch.tensor(_power_of_two(2 * closest)[:n], dtype=torch.float64)),
            ("heads count from 1: the first slope is 2^(-8/n) (1/2 for 8 heads), not "
             "2^0 = 1.", lambda: _paper_like(n, first=0)),
            ("the slopes are positive, and below 1: ALiBi subtracts slope·distance from the "
             "scores, so the minus sign belongs in the bias, not in the slope.",
             lambda: -expected),
            ("the exponent is negative: 2^(-8h/n), so the slopes fall from 2^(-8/n) to "
             "2^(-8) (from 1/2 to 1/256 for 8 heads).", lambda: 1 / expected.double()),
            ("the order is wrong: head 1 gets the largest slope 2^(-8/n) and they fall from "
             "there, largest first.", lambda: expected.flip(0)),
            ("keep the paper's order, do not sort: the slopes of the closest power of two "
             "first, then the extra ones from twice as many heads.",
             lambda: expected.sort(descending=True).values),
            ("the extra slopes come after the ones of the closest power of two, not before: "
             "`slopes(p) + slopes(2p)[0::2][:n - p]`.", lambda: _paper_like(n, extras_first=True)),
            ("take every other slope of 2p heads starting with the first, `[0::2]`: "
             "`[1::2]` repeats slopes the first p heads already have.",
             lambda: _paper_like(n, extra=slice(1, None, 2))),
            ("return one slope per head, shape (num_heads,): reshape it to (h, 1, 1) where "
             "you multiply it with the distances.", lambda: expected[:, None, None]),
            ("return one slope per head, shape (num_heads,), without a dimension in front.",
             lambda: expected[None]),
        ]
        got = call_reader(call, slopes_fn, n, names=("num_heads",))
        if isinstance(got, list | tuple) and got and all(
                isinstance(v, numbers.Real) and not isinstance(v, bool) for v in got):
            raise Mismatch(f"the slopes {call} are a {type(got).__name__} of {len(got)} "
                           f"numbers, expected a torch.Tensor of shape ({n},)",
                           [f"got: {values(list(got), limit=8)}"],
                           "return a tensor: `torch.tensor(slopes)`.")
        got = as_tensor(f"the slopes {call}", got, expected, _ALIBI_HINT)
        _floating(f"the slopes {call}", got, expected,
                  "the slopes are fractions such as 1/2 and 1/4: return a float tensor.")
        expect_close(f"the slopes {call}", got, expected, atol=1e-8, rtol=1e-5,
                     check_dtype=False, hint=_ALIBI_HINT, mistakes=mistakes, note=note)

    checks.run_all(run, [
        ("8 heads, as in the paper: 1/2, 1/4, ..., 1/256", 8),
        ("16 heads", 16),
        ("1 head: 2^-8", 1),
        ("2 heads: 2^-4 and 2^-8", 2),
        ("12 heads, not a power of two", 12),
        ("6 heads", 6),
        ("3 heads", 3),
        ("20 heads", 20),
    ])
