"""The checkers of the chapter ``causal-masks``: :func:`check_causal_mask` and
:func:`check_masked_softmax`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..attention import masked_softmax
from ..masks import causal_mask, padding_mask
from .compare import Mismatch, Mistake, expect_close, expect_mask, number, randn
from .harness import Checks, call_reader, error_hints, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_causal_mask", "check_masked_softmax"]


#: The fill value of a common wrong masked softmax, reproduced to recognise that mistake.
_BIG_NEGATIVE_FILL = -1e9


# ------------------------------------------------------------------ the causal mask

_CAUSAL_HINT = (
    "the L queries are the last L of the S tokens, so query i sits at position S - L + i "
    "and may see key j when j <= i + (S - L): "
    "`torch.ones(L, S, dtype=torch.bool).tril(S - L)`."
)


_causal_hint = error_hints(
    (TypeError, "required positional argument",
     "S is optional: `def my_causal_mask(L, S=None)`, and without it the mask is square, "
     "S = L."),
    (TypeError, "NoneType",
     "S defaults to None: start with `S = L if S is None else S`, so that "
     "`my_causal_mask(L)` is the square mask."),
)


def _tril(L: int, S: int, offset: int) -> Tensor:
    return torch.ones(L, S, dtype=torch.bool).tril(offset)


def check_causal_mask(mask_fn: Callable) -> None:
    """Check ``mask_fn(L, S=None) -> (L, S) bool``: the causal mask, square or with a cache.

    The exercise ``causal-masks-ex5`` of the chapter ``causal-masks``: the ``L`` queries
    are the last ``L`` of ``S`` tokens (``S - L`` keys come from earlier steps, kept in a
    cache), so query ``i`` sits at position ``S - L + i`` and may attend to key ``j`` when
    ``j <= i + S - L``. ``S`` defaults to ``L``, the square mask ``j <= i``. True means "may
    attend". The reference is :func:`attnbook.masks.causal_mask` with ``offset=S - L``.

    Checks square masks (and the default ``S``), one new query after a cache, a few new
    queries after a cache, and a single token. Its hints name a diagonal that is missing or
    one key too far, the top-left alignment of ``F.scaled_dot_product_attention``'s
    ``is_causal`` when ``L != S``, an offset off by one, the polarity reversed, the
    transpose, a mask that ignores ``S``, and masks that are not boolean.
    """
    mask_fn = require_function("mask_fn", mask_fn)
    checks = Checks("check_causal_mask", _causal_hint)
    name = name_of(mask_fn)

    def run(L: int, S: int | None) -> None:
        args = (L,) if S is None else (L, S)
        call = f"{name}({', '.join(str(a) for a in args)})"
        keys = L if S is None else S
        shift = keys - L
        expected = causal_mask(L, keys, offset=shift)  # (L, S), bool
        mistakes: list[Mistake] = [
            ("off by one: a query may see itself, so the diagonal belongs to the mask: "
             "`j <= i`, not `j < i` (`tril(0)`, not `tril(-1)`)." if shift == 0 else
             f"off by one: query i sits at position S - L + i = {shift} + i and may see "
             f"itself, so key j is allowed when j <= i + {shift}, not j < i + {shift}.",
             lambda: _tril(L, keys, shift - 1)),
            ("off by one: query i may see key i but not key i + 1, which is the next "
             "token, the one it must predict: `j <= i`, not `j <= i + 1`." if shift == 0
             else f"off by one: query i may see keys up to its own position "
             f"S - L + i = {shift} + i, not one past it.", lambda: _tril(L, keys, shift + 1)),
            (f"the queries are the LAST {L} of the {keys} tokens: query i sits at position "
             f"S - L + i, so it sees the {shift} cached keys too. `tril()` with no offset "
             f"aligns the top-left corner, as `F.scaled_dot_product_attention(..., "
             f"is_causal=True)` does when L != S; shift the diagonal by S - L = {shift}.",
             lambda: _tril(L, keys, 0)),
            (f"the offset is S - L = {shift}, not L - S = {-shift}: the queries come after "
             f"the cached keys, so they see more keys, not fewer.",
             lambda: _tril(L, keys, -shift)),
            ("True means 'may attend', as in F.scaled_dot_product_attention: yours is "
             "True where the query may not (nn.MultiheadAttention's polarity). Negate it.",
             lambda: ~expected),
            ("rows are queries i and columns keys j: you built the transpose (`triu` "
             "keeps the upper triangle, the later keys).",
             lambda: expected.T if L == keys else _tril(keys, L, 0).T),
        ]
        got = call_reader(call, mask_fn, *args, names=("L", "S"))
        expect_mask(f"the mask {call}", got, expected, mistakes=mistakes, hint=_CAUSAL_HINT,
                    shape_hint=f"(L, S) = ({L}, {keys}): one row per query, L of them, and "
                               f"one column per key, S of them"
                               + (", the cached ones included." if shift else "."))

    checks.run_all(run, [
        ("6 tokens, S left at its default: the square mask", 6, None),
        ("5 queries and 5 keys, S given", 5, 5),
        ("one new token after a cache of 6: L = 1, S = 7", 1, 7),
        ("3 new tokens after a cache of 5: L = 3, S = 8", 3, 8),
        ("4 new tokens after a cache of 1: L = 4, S = 5", 4, 5),
        ("a single token: [[True]]", 1, None),
    ])


_EPS_HINT = (
    "you renormalise with a small eps, w / (w.sum() + eps): in float16, eps = 1e-12 rounds "
    "to 0 (the smallest positive float16 is about 6e-8), so a row with no allowed key is "
    "0 / 0 = NaN there, although it works in float32. Fill the forbidden scores with "
    "float('-inf') before the softmax instead, and write zeros into rows with no allowed key."
)
_RENORMALISED_HINT = (
    "a softmax over all the keys, times the mask, then renormalised, loses the allowed keys "
    "when their scores are far below a forbidden one: their exp underflows to 0 in the full "
    "softmax, and nothing is left to renormalise. Fill the forbidden scores with "
    "float('-inf') before the softmax, so that only the allowed keys compete."
)


def _renormalised(scores: Tensor, mask: Tensor, eps: float | None) -> Tensor:
    """A softmax times the mask, renormalised by ``sum + eps`` in the scores' dtype, or
    (``eps=None``) with rows whose sum is 0 set to 0."""
    weights = torch.softmax(scores, dim=-1) * mask
    total = weights.sum(dim=-1, keepdim=True)
    if eps is None:
        return torch.where(total > 0, weights / total.clamp(min=torch.finfo(total.dtype).tiny),
                           0.0)
    return weights / (total + eps)


def _over_queries(scores: Tensor, mask: Tensor) -> Tensor:
    """The right masking, with the softmax over dim=-2 (the queries) instead of the keys."""
    keep = mask | ~mask.any(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-2)
    return weights.masked_fill(~mask, 0.0)


def _masked_softmax_hint(error: Exception) -> str | None:
    message = str(error)
    if "overflow" in message:
        return ("float16 cannot hold that fill value (its largest magnitude is 65504; -1e9 "
                "and float32's finfo.min are far beyond it): fill with float('-inf') "
                "instead, and give rows with no allowed key a separate path.")
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
    """
    masked_softmax_fn = require_function("masked_softmax_fn", masked_softmax_fn)
    checks = Checks("check_masked_softmax", _masked_softmax_hint)
    call = f"{name_of(masked_softmax_fn)}(scores, mask)"

    def run(scores: Tensor, mask: Tensor, *, atol: float | None = None) -> Tensor:
        got = call_reader(call, masked_softmax_fn, scores.clone(), mask.clone(),
                          names=("scores", "mask"))
        expected = masked_softmax(scores.float(), mask).to(scores.dtype)
        full_mask = mask.expand_as(scores)
        wide = scores.float()
        expect_close(
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
                 "softmax.", lambda: torch.softmax(wide, dim=-1).to(scores.dtype)),
                (_RENORMALISED_HINT, lambda: _renormalised(scores, mask, None)),
                (_EPS_HINT, lambda: _renormalised(scores, mask, 1e-12)),
                ("the softmax runs over the keys, the last dimension (dim=-1), so that each "
                 "query's weights sum to 1; yours normalises over the queries.",
                 lambda: _over_queries(wide, mask).to(scores.dtype))])
        leaked = got.detach()[~full_mask]
        if (leaked != 0).any():
            raise Mismatch(
                f"{int((leaked != 0).sum())} forbidden weights are not exactly 0",
                [f"largest forbidden weight {number(float(leaked.abs().max()))}"],
                "fill forbidden scores with float('-inf'), not a finite number such as "
                "-100 or -1e4: exp(-100) is tiny but not 0, and is not small at all when "
                "the allowed scores are themselves very negative.")
        return got

    causal = causal_mask(5)
    empty_rows = (padding_mask([2], 4).flip(-1) & causal_mask(4))[0]  # rows 0, 1 empty
    with checks.case("a causal mask, scores (5, 5), float32"):
        run(randn(5, 5, seed=61, scale=3.0), causal)
    with checks.case("causal and padding masks, scores (3, 4, 6), mask (3, 4, 6)"):
        run(randn(3, 4, 6, seed=62, scale=3.0),
            padding_mask([6, 3, 1], 6) & causal_mask(4, 6))
    with checks.case("rows with no allowed key (rows 0 and 1), float32"):
        run(randn(4, 4, seed=63, scale=3.0), empty_rows)
    with checks.case("rows with no allowed key (rows 0 and 1), float16"):
        run(randn(4, 4, seed=63, scale=3.0, dtype=torch.float16), empty_rows)
    with checks.case("causal mask in float16, scores (2, 6, 6)"):
        run(randn(2, 6, 6, seed=64, scale=3.0, dtype=torch.float16), causal_mask(6))
    with checks.case("a padding mask (2, 1, 5) that broadcasts over scores (2, 3, 5)"):
        run(randn(2, 3, 5, seed=65), padding_mask([5, 2]))
    with checks.case("an all-True mask gives the plain softmax, scores (3, 4)"):
        run(randn(3, 4, seed=66), torch.ones(3, 4, dtype=torch.bool))
    with checks.case("allowed scores near -2e4 and a forbidden key, float32"):
        run(torch.tensor([[-2.0e4, -2.01e4, -1.99e4, 0.0]]),
            torch.tensor([[True, True, True, False]]))
    with checks.case("gradients are finite and right, with rows that allow no key"):
        scores = randn(4, 4, seed=67, scale=3.0)
        upstream = randn(4, 4, seed=68)
        mine = scores.clone().requires_grad_()
        got = call_reader(call, masked_softmax_fn, mine, empty_rows.clone(),
                          names=("scores", "mask"))
        got = expect_close("the weights", got, masked_softmax(scores, empty_rows),
                           hint="the same scores and mask as check 3, now with "
                                 "requires_grad=True.")
        no_gradient = Mismatch("no gradient flows back to the scores", [],
                               "keep the computation differentiable: no `.detach()`, "
                               "`torch.no_grad()` or tensors rebuilt from `.tolist()`.")
        if not got.requires_grad:
            raise no_gradient
        (got * upstream).sum().backward()
        if mine.grad is None:
            raise no_gradient
        reference_scores = scores.clone().requires_grad_()
        (masked_softmax(reference_scores, empty_rows) * upstream).sum().backward()
        expect_close(
            "the gradient of the scores", mine.grad, reference_scores.grad,
            hint="the gradient flows only through the allowed scores.",
            nan_hint="the softmax of a row of only -inf is NaN, and so is its gradient: "
                     "replacing the NaN weights afterwards does not stop it flowing back "
                     "when the -inf was added to the scores. Let empty rows keep their "
                     "scores for the softmax, then set their weights to 0.")
    checks.passed()
