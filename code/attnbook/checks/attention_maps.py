"""The checker of the chapter ``attention-maps``: :func:`check_row_entropy`."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..attention import masked_softmax
from ..masks import causal_mask
from .compare import TOLERANCE, expect_close, randn
from .harness import Checks, call_reader, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_row_entropy"]


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
    """
    entropy_fn = require_function("entropy_fn", entropy_fn)
    checks = Checks("check_row_entropy")
    call = f"{name_of(entropy_fn)}(weights)"

    def run(weights: Tensor) -> None:
        got = call_reader(call, entropy_fn, weights.clone(), names=("weights",))
        expected = _entropy_reference(weights)
        S = weights.shape[-1]
        atol, rtol = TOLERANCE[weights.dtype]
        expect_close(
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

    random_maps = torch.softmax(randn(2, 3, 5, 5, seed=41, dtype=torch.float64, scale=2.0),
                                dim=-1)
    with checks.case("random maps (2, 3, 5, 5), float64"):
        run(random_maps)
    with checks.case("one-hot rows (identity maps, shape (1, 2, 4, 4)): entropy 0, no NaN"):
        run(torch.eye(4).expand(1, 2, 4, 4).clone())
    with checks.case("uniform rows over 4 keys (shape (1, 1, 4, 4)): entropy ln 4"):
        run(torch.full((1, 1, 4, 4), 0.25))
    with checks.case("causal maps with exact zeros (2, 2, 6, 6)"):
        run(masked_softmax(randn(2, 2, 6, 6, seed=42), causal_mask(6)))
    with checks.case("3 queries and 7 keys, weights (1, 2, 3, 7) -> entropy (1, 2, 3)"):
        run(torch.softmax(randn(1, 2, 3, 7, seed=43), dim=-1))
    with checks.case("peaked float32 maps with tiny weights (softmax of 30 · randn)"):
        run(torch.softmax(randn(2, 2, 5, 5, seed=44, scale=30.0), dim=-1))
    checks.passed()
