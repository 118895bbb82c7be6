"""The checkers of the chapter ``multi-head-attention``: :func:`check_split_merge_heads` and
:func:`check_multi_head_attention`."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..attention import attention
from ..layers import MultiHeadAttention
from .compare import Mismatch, Mistake, expect_close, expect_pair, randn
from .harness import Checks, call_reader, error_hints, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_multi_head_attention", "check_split_merge_heads"]


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


_VIEW_HINT = ("after a transpose the tensor is no longer contiguous in memory, so `.view` "
              "fails: use `.reshape(...)`, `.flatten(-2)` or `.contiguous().view(...)`.")
_merge_hint = error_hints((Exception, "view", _VIEW_HINT))


def check_split_merge_heads(split_fn: Callable, merge_fn: Callable) -> None:
    """Check ``split_fn(x, num_heads)`` and ``merge_fn(heads)``.

    The exercise of the chapter ``multi-head-attention``: ``split_fn`` takes ``x`` of shape
    ``(B, L, d_model)`` to ``(B, h, L, d_head)`` with head ``i`` holding features
    ``i·d_head .. (i+1)·d_head - 1`` of every token; ``merge_fn`` is its inverse and reads
    ``h`` from the shape. The reference is :meth:`attnbook.layers.MultiHeadAttention
    .split_heads` and ``merge_heads``. Catches the reshape without transpose, which a
    round trip ``merge(split(x)) == x`` alone does not.
    """
    split_fn = require_function("split_fn", split_fn)
    merge_fn = require_function("merge_fn", merge_fn)
    checks = Checks("check_split_merge_heads", _merge_hint)
    split_name, merge_name = name_of(split_fn), name_of(merge_fn)

    def reference(d_model: int, num_heads: int) -> MultiHeadAttention:
        with torch.random.fork_rng(devices=[]):
            return MultiHeadAttention(d_model, num_heads)

    def split(x: Tensor, num_heads: int, note: str | None = None) -> Tensor:
        B, L, d_model = x.shape
        d_head = d_model // num_heads
        call = f"{split_name}(x, num_heads={num_heads})"
        got = call_reader(call, split_fn, x.clone(), num_heads, names=("x", "num_heads"))
        expected = reference(d_model, num_heads).split_heads(x)  # (B, h, L, d_head)
        return expect_close(
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
        got = call_reader(call, merge_fn, heads.clone(), names=("heads",))
        expected = reference(h * d_head, h).merge_heads(heads)  # (B, L, d_model)
        return expect_close(
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
        split(randn(3, 5, 8, seed=71), 2)
    with checks.case("split x (2, 3, 6) into 1 head"):
        split(randn(2, 3, 6, seed=72), 1)
    with checks.case("split x (2, 3, 6) into 6 heads of width 1"):
        split(randn(2, 3, 6, seed=73), 6)
    with checks.case("merge the 3 heads of x (2, 4, 12): a transposed, non-contiguous input"):
        merge(reference(12, 3).split_heads(_labelled(2, 4, 12)), _LABELS_NOTE)
    with checks.case("merge contiguous heads (1, 4, 3, 2)"):
        merge(randn(1, 4, 3, 2, seed=74))
    with checks.case("round trip: merge(split(x, 4)) == x for x (2, 5, 16)"):
        x = randn(2, 5, 16, seed=75)
        heads = call_reader(f"{split_name}(x, num_heads=4)", split_fn, x.clone(), 4,
                            names=("x", "num_heads"))
        heads = expect_close("the heads", heads, reference(16, 4).split_heads(x),
                             atol=0, rtol=0, hint=_TRANSPOSE_BEFORE_RESHAPE)
        back = call_reader(f"{merge_name}({split_name}(x, num_heads=4))", merge_fn, heads,
                           names=("heads",))
        expect_close("merge(split(x))", back, x, atol=0, rtol=0,
                     hint="merge must undo split exactly.")
    checks.passed()


# ------------------------------------------------ scaled multi-head attention, no projections

_MHA_HINT = (
    "split q, k and v into heads (B, h, L, d_head), score each head with "
    "q_h k_h^T / sqrt(d_head), softmax over the keys (dim=-1), multiply by v_h, and merge "
    "the heads back to (B, L, d_model)."
)


_mha_hint = error_hints(
    (RuntimeError, "invalid for input",
     "keys and values may have another length S than the queries' L (cross-attention): "
     "split each tensor with its own length, `x.shape[1]`."),
    (RuntimeError, "view", _VIEW_HINT),
)


def check_multi_head_attention(mha_fn: Callable) -> None:
    """Check ``mha_fn(q, k, v, num_heads) -> (output, weights)``: scaled multi-head attention.

    The exercise ``multi-head-attention-ex5``: ``q`` is ``(B, L, d_model)`` and ``k``, ``v``
    are ``(B, S, d_model)``, already projected; each is split into ``num_heads`` heads of
    width ``d_head = d_model / num_heads``, each head attends with the scale
    ``1 / sqrt(d_head)``, and the heads are merged. ``output`` is ``(B, L, d_model)`` and
    ``weights`` ``(B, h, L, S)``. The reference is :meth:`attnbook.layers.MultiHeadAttention
    .split_heads` and ``merge_heads`` around :func:`attnbook.attention.attention`.

    Every check but one has ``d_head != d_model``, so scaling by ``sqrt(d_model)`` or not at
    all fails; its hints name those, a scale of ``1/d_head``, the split or merge without the
    transpose, the softmax over the queries, weights averaged over the heads, and the pair
    in the wrong order.
    """
    mha_fn = require_function("mha_fn", mha_fn)
    checks = Checks("check_multi_head_attention", _mha_hint)
    call = f"{name_of(mha_fn)}(q, k, v, num_heads)"

    def run(B: int, L: int, S: int, d_model: int, h: int, seed: int,
            dtype: torch.dtype = torch.float32) -> None:
        d_head = d_model // h
        q = randn(B, L, d_model, seed=seed, dtype=dtype, scale=1.5)
        k = randn(B, S, d_model, seed=seed + 1, dtype=dtype, scale=1.5)
        v = randn(B, S, d_model, seed=seed + 2, dtype=dtype)
        with torch.random.fork_rng(devices=[]):
            layer = MultiHeadAttention(d_model, h)
        split, merge = layer.split_heads, layer.merge_heads

        def heads_attention(scale: float, *, blocks: bool = False) -> tuple[Tensor, Tensor]:
            """(output, weights) with the scale ``scale``; ``blocks`` splits without the
            transpose."""
            cut = ((lambda x: x.reshape(B, h, x.shape[1], d_head)) if blocks else split)
            out, weights = attention(cut(q), cut(k), cut(v), scale=scale)
            return merge(out), weights

        right = 1 / math.sqrt(d_head)
        expected_output, expected_weights = heads_attention(right)
        qk = split(q) @ split(k).transpose(-2, -1)  # (B, h, L, S), unscaled
        weight_mistakes: list[Mistake] = [
            (f"scale by 1/sqrt(d_head) = 1/sqrt({d_head}), the width of one head, not by "
             f"1/sqrt(d_model) = 1/sqrt({d_model}): each head's scores are dot products of "
             f"d_head numbers. `q.shape[-1]` read before the split is d_model.",
             lambda: heads_attention(1 / math.sqrt(d_model))[1]),
            (f"the scores are not scaled: divide each head's q k^T by sqrt(d_head) = "
             f"sqrt({d_head}) before the softmax.", lambda: heads_attention(1.0)[1]),
            (f"the scale is 1/sqrt(d_head), not 1/d_head: divide by sqrt({d_head}), "
             f"`d_head ** 0.5`.", lambda: heads_attention(1 / d_head)[1]),
            ("the softmax runs over the keys, dim=-1, so that each query's weights sum to 1; "
             "yours runs over the queries.", lambda: torch.softmax(qk * right, dim=-2)),
            ("you split into heads without the transpose: reshape to (B, L, h, d_head), then "
             "`transpose(1, 2)`; `reshape(B, h, L, d_head)` gives head i whole tokens "
             "instead of features i·d_head .. (i+1)·d_head - 1.",
             lambda: heads_attention(right, blocks=True)[1]),
            ("one map per head: the weights are (B, h, L, S), not averaged over the heads.",
             lambda: expected_weights.mean(dim=1)),
            ("one map per head, with the heads as their own dimension: (B, h, L, S). Yours "
             "folds the heads into the batch, (B·h, L, S): `unflatten(0, (B, h))` them out.",
             lambda: expected_weights.flatten(0, 1)),
        ]
        output_mistakes: list[Mistake] = [
            ("merge the heads with the transpose back: (B, h, L, d_head) -> "
             "transpose(1, 2) -> (B, L, h, d_head) -> reshape to (B, L, d_model).",
             lambda: attention(split(q), split(k), split(v), scale=right)
             .output.reshape(B, L, d_model)),
            ("the output is the heads merged, (B, L, d_model), not (B, h, L, d_head).",
             lambda: attention(split(q), split(k), split(v), scale=right).output),
            # The scale mistakes (the first three), carried through to the output.
            *[(hint, lambda wrong=wrong: merge(wrong() @ split(v)))
              for hint, wrong in weight_mistakes[:3]],
        ]
        got = call_reader(call, mha_fn, q.clone(), k.clone(), v.clone(), h,
                          names=("q", "k", "v", "num_heads"))
        got_output, got_weights = expect_pair(call, got, "output", "weights")
        if (isinstance(got_output, Tensor) and isinstance(got_weights, Tensor)
                and got_output.shape == expected_weights.shape
                and got_weights.shape == expected_output.shape):
            raise Mismatch(f"{call} returned the pair the other way round",
                           [f"first:  shape {tuple(got_output.shape)}, the weights' shape",
                            f"second: shape {tuple(got_weights.shape)}, the output's shape"],
                           "return `(output, weights)` in that order: the output "
                           "(B, L, d_model) first, then the weights (B, h, L, S).")
        note = (f"q {(B, L, d_model)}, k and v {(B, S, d_model)}, {h} heads of d_head = "
                f"{d_head}, {dtype}")
        expect_close(f"weights of {call}", got_weights, expected_weights, note=note,
                     hint=_MHA_HINT, mistakes=weight_mistakes)
        expect_close(f"output of {call}", got_output, expected_output, note=note,
                     hint=_MHA_HINT, mistakes=output_mistakes)

    with checks.case("self-attention, q, k, v (2, 5, 12), 3 heads of width 4"):
        run(2, 5, 5, 12, 3, seed=91)
    with checks.case("cross-attention, q (2, 3, 16), k and v (2, 6, 16), 4 heads of width 4"):
        run(2, 3, 6, 16, 4, seed=94)
    with checks.case("8 heads of width 2, q, k, v (1, 4, 16)"):
        run(1, 4, 4, 16, 8, seed=97)
    with checks.case("one head: d_head = d_model = 6, q, k, v (2, 4, 6)"):
        run(2, 4, 4, 6, 1, seed=100)
    with checks.case("float64, q (3, 7, 12), k and v (3, 5, 12), 2 heads of width 6"):
        run(3, 7, 5, 12, 2, seed=103, dtype=torch.float64)
    checks.passed()
