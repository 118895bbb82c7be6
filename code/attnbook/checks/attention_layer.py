"""The checkers of the chapter ``attention-layer``: :func:`check_padded_causal_mask` and
:func:`check_peeks_ahead`.

The reference of the mask is the package's :func:`~attnbook.masks.causal_mask` combined with
:func:`~attnbook.masks.padding_mask`. The reference of ``peeks_ahead`` is the construction of
each layer it is given: the package's causal :class:`~attnbook.layers.MultiHeadAttention`
(nothing leaks), the same layer fed its input one token early, a non-causal one, and causal
layers with a leak built in at a known position (one of them of relative size 1e-6, one in a
single sequence of the batch, one from a token that is a zero vector). The typical wrong
answers are built beside them, so that a hint can name the mistake.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .._validate import require_function
from ..layers import MultiHeadAttention
from ..masks import causal_mask, padding_mask
from .compare import Mismatch, Mistake, expect_mask, randn
from .harness import Checks, call_reader, error_hints, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_padded_causal_mask", "check_peeks_ahead"]


# ---------------------------------------------------------------------- the padded mask

_PADDED_HINT = (
    "query i of sequence b may see key j when j <= i (causal) and j < lengths[b] (key j is "
    "a real token): `(j <= i) & (j < lengths[:, None, None, None])` with `i` a column "
    "`arange(L)[:, None]` and `j` a row `arange(L)[None, :]`, shape (B, 1, L, L)."
)


_padded_hint = error_hints(
    ((TypeError, AttributeError), "",
     "lengths is a tensor of shape (B,) holding integers, and L an int: compare "
     "`torch.arange(L)` with `lengths[:, None]`."),
    ((RuntimeError, IndexError), "",
     "build the mask from broadcasting comparisons: `torch.arange(L)` for the positions, "
     "`lengths[:, None, None, None]` for the lengths, shape (B, 1, L, L)."),
)


def _mask_parts(lengths: Tensor, L: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The query positions ``(L, 1)``, the key positions ``(1, L)``, the real keys
    ``(B, 1, 1, L)`` and the real queries ``(B, 1, L, 1)``."""
    i = torch.arange(L)[:, None]  # (L, 1)
    j = torch.arange(L)[None, :]  # (1, L)
    real_key = padding_mask(lengths, L)[:, None]  # (B, 1, 1, L)
    real_query = real_key.transpose(-2, -1)  # (B, 1, L, 1)
    return i, j, real_key, real_query


def _padded_mistakes(lengths: Tensor, L: int, expected: Tensor) -> list[Mistake]:
    i, j, real_key, real_query = _mask_parts(lengths, L)
    causal = causal_mask(L)  # (L, L)
    longest = int(lengths.max())
    return [
        ("True means 'may attend', as in F.scaled_dot_product_attention: yours is True "
         "where the query may not (nn.MultiheadAttention's polarity). Negate it.",
         lambda: ~expected),
        ("off by one: a query may see itself, so the diagonal belongs to the mask: `j <= i`, "
         "not `j < i`.", lambda: (j < i) & real_key),
        ("the padding is on the keys: no query may see a pad token, so the mask hides key "
         "j when j >= lengths[b] (compare lengths with j, the last dimension). Yours hides "
         "the rows of the padded queries instead, and a row with no key at all gives NaN "
         "in the softmax; a padded query still sees the real keys before it (its output "
         "is ignored later).", lambda: causal & real_query),
        ("off by one: lengths[b] real tokens are keys 0 .. lengths[b] - 1, so key j is "
         "real when j < lengths[b], not j <= lengths[b]: yours keeps the first pad.",
         lambda: causal & (j <= lengths[:, None, None, None])),
        ("the padding is missing: combine the causal mask with the real keys, "
         "`(j <= i) & (j < lengths[:, None, None, None])`; yours is the causal mask alone.",
         lambda: causal.expand_as(expected)),
        ("the causal part is missing: query i may not see the keys after it, even real "
         "ones. Combine both conditions with &.", lambda: real_key.expand_as(expected)),
        ("rows are queries i and columns keys j: you built the transpose.",
         lambda: expected.transpose(-2, -1)),
        ("each mask is (L, L) whatever the lengths: the sequences are padded to L tokens, "
         "which may be more than the longest length. Build it from `torch.arange(L)`, not "
         "from `lengths.max()`.", lambda: expected[..., :longest, :longest]),
        ("the mask needs a dimension for the heads: (B, 1, L, L), so that it broadcasts "
         "over scores (B, h, L, L). A (B, L, L) mask would line its batch up with the heads: "
         "add it with `mask[:, None]`.", lambda: expected[:, 0]),
    ]


def check_padded_causal_mask(mask_fn: Callable) -> None:
    """Check ``mask_fn(lengths, L) -> (B, 1, L, L) bool``: causal attention over real keys.

    The exercise ``attention-layer-ex1`` of the chapter ``attention-layer``, its mask:
    ``lengths`` is a tensor ``(B,)`` of the real lengths of ``B`` sequences padded at the
    end to ``L`` tokens, and query ``i`` of sequence ``b`` may attend to key ``j`` when
    ``j <= i`` and ``j < lengths[b]``. True means "may attend"; the dimension of size 1
    broadcasts over the heads. The reference is :func:`attnbook.masks.causal_mask` combined
    with :func:`attnbook.masks.padding_mask`.

    Checks the chapter's two sequences, lengths without padding (the causal mask), three
    sequences, sequences of one token, a length beyond which all is padding, and a single
    token. Its hints name the polarity reversed, the diagonal missing, the padding put on
    the queries, the first pad kept (``<=``), the padding or the causal part forgotten, the
    transpose, a mask as long as the longest sequence instead of ``L``, a mask without the
    head dimension, and masks that are not boolean.
    """
    mask_fn = require_function("mask_fn", mask_fn)
    checks = Checks("check_padded_causal_mask", _padded_hint)
    name = name_of(mask_fn)

    def run(lengths: list[int], L: int) -> None:
        call = f"{name}(lengths, {L})"
        real = torch.tensor(lengths)  # (B,), int64
        expected = causal_mask(L) & padding_mask(real, L)[:, None]  # (B, 1, L, L)
        got = call_reader(call, mask_fn, real.clone(), L, names=("lengths", "L"))
        expect_mask(
            f"the mask {call}", got, expected, hint=_PADDED_HINT,
            mistakes=_padded_mistakes(real, L, expected),
            shape_hint=f"(B, 1, L, L) = ({len(lengths)}, 1, {L}, {L}): one mask per "
                       f"sequence, a 1 that broadcasts over the heads, then one row per query "
                       f"and one column per key.",
            note=f"lengths = {lengths}, L = {L}: sequence b has real keys 0 .. lengths[b] - 1")

    checks.run_all(run, [
        ("the chapter's two sequences: lengths [6, 3], L = 6", [6, 3], 6),
        ("no padding: lengths [5, 5], L = 5, the causal mask twice", [5, 5], 5),
        ("three sequences: lengths [2, 5, 4], L = 5", [2, 5, 4], 5),
        ("sequences of one token: lengths [1, 4], L = 4", [1, 4], 4),
        ("padded beyond the longest: lengths [3, 2], L = 7", [3, 2], 7),
        ("a single token: lengths [1], L = 1", [1], 1),
    ])


# ------------------------------------------------------------------------- peeks_ahead

_AT_OR_AFTER_HINT = (
    "this layer is causal, yet yours says it peeks: token t may change the outputs at "
    "positions t and later (output t sees token t), only the outputs BEFORE t must stay "
    "as they were. Compare positions 0 .. t-1, `[:, :t]`, not `[:, :t + 1]`."
)
_IN_PLACE_PEEK_HINT = (
    "copy x before you change a token: `changed = x.clone()`, then `changed[:, t] = ...`. "
    "Writing into x itself changes the caller's input (and every later comparison)."
)
_LAYER_HINT = (
    "layer is anything you can call, layer(x) -> (output, weights): a module, or a "
    "function such as the chapter's `shifted`. Call it and take `[0]`; do not rely on its "
    "attributes (`.eval()`, `.num_heads`)."
)


_peeks_hint = error_hints(
    (AttributeError, "", _LAYER_HINT),
    (TypeError, "not callable", _LAYER_HINT),
    ((RuntimeError, IndexError), "",
     "x is (B, L, d_model) and a token is x[:, t], the same position in every sequence: "
     "a new token for it is (B, d_model), `torch.randn(x.shape[0], x.shape[2])` or "
     "`x[:, t] + 1`."),
)


@dataclass(frozen=True)
class _Leak:
    """A causal layer's output at position ``target`` made to read token ``source``."""

    source: int
    target: int
    size: float = 0.5  # additive: output += size · token; or relative, see _leaky
    relative: bool = False  # output *= 1 + size · tanh(token): a change of at most 2·size
    sequence: int | None = None  # None: every sequence of the batch

    def describe(self) -> str:
        where = "" if self.sequence is None else f" in sequence {self.sequence} only"
        kind = f"of relative size {self.size:g}" if self.relative else "added"
        return f"output {self.target} reads token {self.source}{where} ({kind})"


def _leaky(base: MultiHeadAttention, leaks: tuple[_Leak, ...]) -> Callable:
    """``base`` with ``leaks`` built in: a function x -> (output, weights), as the chapter's
    ``shifted`` is."""
    def layer(x: Tensor) -> tuple[Tensor, Tensor]:
        output, weights = base(x)  # (B, L, d_model), (B, h, L, L)
        added = torch.zeros_like(output)
        factor = torch.ones_like(output)
        for leak in leaks:
            rows = slice(None) if leak.sequence is None else leak.sequence
            token = x[rows, leak.source].detach()  # (B, d_model) or (d_model,)
            if leak.relative:
                factor[rows, leak.target] = 1 + leak.size * torch.tanh(token)
            else:
                added[rows, leak.target] = leak.size * token
        return output * factor + added, weights

    return layer


def _package_layer(d_model: int, num_heads: int, *, causal: bool, seed: int,
                   dtype: torch.dtype = torch.float32) -> MultiHeadAttention:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the layer's initialisation, global state kept
        return MultiHeadAttention(d_model, num_heads, causal=causal).to(dtype).eval()


def _shifted(base: MultiHeadAttention) -> Callable:
    """The chapter's ``shifted``: ``base`` fed its input one token early."""
    def shifted(x: Tensor) -> tuple[Tensor, Tensor]:
        return base(x.roll(-1, dims=1))

    return shifted


def _position(call: str, got: object) -> int | None:
    """The reader's answer as an int or None, or a failed check."""
    hint = ("return the position t as an int (`return t`), or None when no token changes "
            "an earlier output.")
    if got is None:
        return None
    if isinstance(got, Tensor) and got.numel() == 1 and not got.is_floating_point() \
            and got.dtype != torch.bool:
        return int(got)
    if isinstance(got, numbers.Integral) and not isinstance(got, bool):
        return int(got)
    raise Mismatch(f"{call} returned {got!r} ({type(got).__name__}), expected an int "
                   f"or None", [], hint)


@dataclass(frozen=True)
class _PeekCase:
    """One check: a layer, its input, the right answer and the hint for missing it."""

    title: str
    layer: Callable
    x: Tensor
    expected: int | None
    missed: str = ""  # the hint when the reader finds no leak where there is one


def _peek_cases() -> list[_PeekCase]:
    causal = _package_layer(16, 4, causal=True, seed=80)
    x = randn(2, 6, 16, seed=81)  # (B, L, d_model)
    padded = randn(2, 8, 16, seed=82)
    padded[:, 5:] = 0.0  # three pad tokens at the end, zero vectors

    def leaking(*leaks: _Leak) -> Callable:
        return _leaky(causal, leaks)

    small = _Leak(4, 2, 1e-6, relative=True)
    return [
        _PeekCase("the package's causal MultiHeadAttention(16, 4), x (2, 6, 16): nothing "
                  "leaks, None", causal, x, None),
        _PeekCase("the same layer fed x.roll(-1, dims=1), as the chapter's `shifted`: "
                  "output 0 sees token 1", _shifted(causal), x, 1,
                  "changing token 1 changes output 0 here."),
        _PeekCase("a MultiHeadAttention without the causal mask: every output sees every "
                  "token", _package_layer(16, 4, causal=False, seed=83), x, 1,
                  "changing token 1 changes output 0 here."),
        _PeekCase(f"a causal layer whose {_Leak(3, 1).describe()}", leaking(_Leak(3, 1)), x,
                  3, "changing token 3 changes output 1 here."),
        _PeekCase(f"two leaks, {_Leak(4, 3).describe()} and {_Leak(2, 0).describe()}: the "
                  f"first position is 2", leaking(_Leak(4, 3), _Leak(2, 0)), x, 2,
                  "changing token 2 changes output 0 here."),
        _PeekCase(f"a leak from the last token: {_Leak(5, 0).describe()}",
                  leaking(_Leak(5, 0)), x, 5,
                  "token 5, the last one, changes output 0 here: try every t up to L - 1, "
                  "`for t in range(1, L)`, whose last t is L - 1."),
        _PeekCase(f"a leak in one sequence: {_Leak(3, 0, sequence=1).describe()}; "
                  f"sequence 0 is causal", leaking(_Leak(3, 0, sequence=1)), x, 3,
                  "here only sequence 1 leaks. Compare the earlier outputs of every "
                  "sequence of the batch, `[:, :t]`, not those of sequence 0 alone "
                  "(`[0, :t]`)."),
        _PeekCase(f"a small leak: {small.describe()}", leaking(small), x, 4,
                  "here changing token 4 moves output 2 by about 1e-6 of its size, which "
                  "`torch.allclose` (rtol=1e-5) and `isclose` accept as equal. A causal "
                  "layer's earlier outputs cannot change at all, not even in the last bit: "
                  "compare exactly, with `torch.equal`, so that any difference is a leak."),
        _PeekCase(f"padded input x (2, 8, 16) whose tokens 5, 6 and 7 are zero vectors, "
                  f"and {_Leak(6, 1).describe()}", leaking(_Leak(6, 1)), padded, 6,
                  "tokens 5, 6 and 7 of this input are zero vectors (padding), so a "
                  "'change' such as `changed[:, t] = 0`, `x[:, t] * 2` or a copy of the "
                  "token before it leaves token 6 as it was, and nothing can move. Replace "
                  "the token by one that surely differs: `x[:, t] + 1`, or "
                  "`torch.randn(B, d_model)`."),
        _PeekCase("a single token, x (2, 1, 16): no later token, None", causal,
                  x[:, :1].clone(), None),
        _PeekCase("the package's causal MultiHeadAttention(12, 3) in float64, x (3, 5, 12): "
                  "None", _package_layer(12, 3, causal=True, seed=84, dtype=torch.float64),
                  randn(3, 5, 12, seed=85, dtype=torch.float64), None),
    ]


def check_peeks_ahead(peeks_fn: Callable) -> None:
    """Check ``peeks_fn(layer, x) -> int | None``: the first token that changes an earlier
    output.

    The exercise ``attention-layer-ex2`` of the chapter ``attention-layer``: ``layer(x)``
    returns ``(output, weights)`` for ``x`` of shape ``(B, L, d_model)``, and the answer is
    the first position ``t`` such that changing token ``t`` (``x[:, t]``) changes an output
    at a position before ``t``, or None when no such ``t`` exists (the layer is causal).
    The right answers come from the layers' construction.

    Checks the package's causal :class:`~attnbook.layers.MultiHeadAttention` (None), the
    same layer fed ``x.roll(-1, dims=1)`` (1), a non-causal layer (1), causal layers with a
    leak built in from a later token (alone, the first of two, from the last token, in one
    sequence of the batch only, of relative size 1e-6, from a token that is a zero
    vector), a single token and a float64 layer. Its hints name the output at position
    ``t`` compared as well, a tolerance that hides a small leak, an answer off by one, a
    later leak than the first, the last position left out, a change that leaves the token
    as it was, a batch looked at in part, and ``x`` changed in place.

    The reader's function runs with the global random state forked and seeded, so its
    random tokens are reproducible and the caller's random state is left as it was.
    """
    peeks_fn = require_function("peeks_fn", peeks_fn)
    checks = Checks("check_peeks_ahead", _peeks_hint)
    name = name_of(peeks_fn)

    for case in _peek_cases():
        with checks.case(case.title):
            call = f"{name}(layer, x)"
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)  # the reader's random tokens: reproducible
                try:
                    got = call_reader(call, peeks_fn, case.layer, case.x.clone(),
                                      names=("layer", "x"))
                except Mismatch as changed:  # call_reader's only Mismatch: x changed
                    changed.hint = _IN_PLACE_PEEK_HINT
                    raise
            got = _position(call, got)
            _expect_position(call, got, case)
    checks.passed()


def _expect_position(call: str, got: int | None, case: _PeekCase) -> None:
    expected = case.expected
    if got == expected:
        return
    B, L, d_model = case.x.shape
    details = [f"expected {expected}, got {got}",
               f"x {tuple(case.x.shape)}: positions 0 .. {L - 1}"]
    if expected is None:
        hint = _AT_OR_AFTER_HINT
    elif got is None:
        hint = f"yours found no leak, but there is one: {case.missed}"
    elif got == expected - 1:
        hint = (f"off by one: return t, the position of the token you changed ({expected}), "
                f"not t - 1, the last earlier output; with `for t in range(1, L)`, "
                f"`return t`.")
    elif got == expected + 1:
        hint = (f"off by one: token {expected} already changes an earlier output. Start at "
                f"t = 1 (token 0 has no earlier output), compare `[:, :t]`, and return t.")
    elif got > expected:
        hint = (f"return the FIRST such position: token {expected} already changes an "
                f"earlier output. Try t = 1, 2, ... in order and stop at the first.")
    else:
        hint = (f"changing token {got} leaves every earlier output of this layer as it was; "
                f"compare positions 0 .. t-1 of the outputs with and without the change.")
    raise Mismatch(f"{call} returned {got}, expected {expected}", details, hint)
