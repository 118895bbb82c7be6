"""The checker of the chapter ``causal-masks``: :func:`check_masked_softmax`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..attention import masked_softmax
from ..masks import causal_mask, padding_mask
from .harness import Checks, Mismatch, call_reader, expect_close, name_of, number, randn

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_masked_softmax"]


#: The fill value of a common wrong masked softmax, reproduced to recognise that mistake.
_BIG_NEGATIVE_FILL = -1e9




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
                 "softmax.", lambda: torch.softmax(wide, dim=-1).to(scores.dtype))])
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
