"""The checker of the chapter ``dot-product-similarity``: :func:`check_batched_raw_attention`."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..attention import raw_self_attention
from .compare import Mismatch, expect_close, expect_pair, randn, shapes
from .harness import Checks, call_reader, error_hints, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_batched_raw_attention"]


_raw_attention_hint = error_hints(
    (RuntimeError, "",
     "for a 3-D tensor `x.T` reverses all three dimensions; transpose only the last two, "
     "`x.transpose(-2, -1)`, so the batch dimension stays in front."),
)


def check_batched_raw_attention(attention_fn: Callable) -> None:
    """Check ``attention_fn(x) -> (output, weights)``: raw self-attention on a batch.

    The exercise of the chapter ``dot-product-similarity``: ``x`` is ``(B, L, E)``,
    ``weights = softmax(x x^T)`` over the last dimension is ``(B, L, L)`` and
    ``output = weights x`` is ``(B, L, E)``, with no scaling. The reference is
    :func:`attnbook.attention.raw_self_attention`.

    Checks several batch shapes (more tokens than features and fewer, one token) in float32
    and float64.
    """
    attention_fn = require_function("attention_fn", attention_fn)
    checks = Checks("check_batched_raw_attention", _raw_attention_hint)
    call = f"{name_of(attention_fn)}(x)"

    def run(x: Tensor) -> None:
        result = call_reader(call, attention_fn, x.clone(), names=("x",))
        got_output, got_weights = expect_pair(call, result,
                                              "output", "weights")
        expected = raw_self_attention(x)
        B, L, E = x.shape
        scores = x @ x.transpose(-2, -1)  # (B, L, L)
        if isinstance(got_output, Tensor) and isinstance(got_weights, Tensor) and \
                got_output.shape == (B, L, L) and got_weights.shape == (B, L, E) and L != E:
            raise Mismatch(f"the result has shapes ({shapes(got_output, got_weights)}), "
                           f"expected ({(B, L, E)}, {(B, L, L)})", [],
                           "return `(output, weights)` in that order.")
        expect_close("weights", got_weights, expected.weights,
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
                           lambda: scores),
                          ("the weights are the softmax of the scores, not the scores "
                           "divided by their sum: scores can be negative, so that gives "
                           "negative 'weights', and a sum near 0 blows them up. Use "
                           "torch.softmax(scores, dim=-1).",
                           lambda: scores / scores.sum(dim=-1, keepdim=True))])
        expect_close("output", got_output, expected.output,
                     hint="output = weights @ x: row i mixes the tokens with row i of "
                           "the weights.",
                     mistakes=[("the rows of the weights must mix the tokens: use "
                                "`weights @ x`, not the transposed weights.",
                                lambda: expected.weights.transpose(-2, -1) @ x)])

    with checks.case("x of shape (2, 5, 8), float32"):
        run(randn(2, 5, 8, seed=21))
    with checks.case("more tokens than features, x of shape (3, 7, 4), float32"):
        run(randn(3, 7, 4, seed=22))
    with checks.case("one sequence of one token, x of shape (1, 1, 6)"):
        run(randn(1, 1, 6, seed=23))
    with checks.case("x of shape (4, 6, 16), float64"):
        run(randn(4, 6, 16, seed=24, dtype=torch.float64, scale=0.5))
    checks.passed()
