"""The checker of the chapter ``multi-head-attention``: :func:`check_split_merge_heads`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..layers import MultiHeadAttention
from .harness import Checks, call_reader, expect_close, name_of, randn

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_split_merge_heads"]


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
