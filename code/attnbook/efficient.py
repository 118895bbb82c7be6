"""Attention in memory that grows linearly with the sequence, and a key/value cache.

- :func:`blockwise_attention` gives the same output as :func:`attnbook.attention.attention`
  without ever holding the ``(L, S)`` matrix of scores. It streams over blocks of keys with
  the online softmax (Milakov and Gimelshein, 2018), the idea behind FlashAttention (Dao et
  al., 2022): a running row maximum ``m``, a running row sum ``r`` of exponentials
  (``row_sum`` in the code) and an output accumulator, each rescaled by
  ``exp(m_old - m_new)`` when a block raises the maximum. Its backward pass recomputes each
  tile of weights from the saved output and per-row log-sum-exp instead of storing it, so
  training needs memory linear in ``L`` as well.
- :class:`KVCache` keeps the keys and values of the positions decoded so far, so that each
  new token of a causal decoder attends to them without recomputing anything;
  :func:`decode_step` is one step of that loop.
- :func:`peak_memory_bytes` measures how much memory a computation needs at its peak, the
  number the book uses to show that blockwise attention grows linearly and full attention
  quadratically.
- :func:`memory_traffic` counts, in a model, the numbers that full and tiled attention
  move between a small fast memory and a large slow one (FlashAttention's IO analysis).

Shapes follow :func:`torch.nn.functional.scaled_dot_product_attention`: query ``q``
``(..., L, E)``, key ``k`` ``(..., S, E)``, value ``v`` ``(..., S, Ev)``, output
``(..., L, Ev)``. Masks are boolean and ``True`` means "may attend"; a query with no allowed
key gets an all-zero output, never NaN.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.profiler import ProfilerActivity, profile

from ._validate import (
    broadcast_batch,
    check_mask,
    check_qkv,
    require_int,
    require_tensor,
    scale_factor,
)
from .attention import AttentionOutput, attention, grouped_attention
from .masks import causal_mask, position_mask

__all__ = ["DEFAULT_BLOCK_SIZE", "KVCache", "MemoryTraffic", "blockwise_attention",
           "decode_step", "memory_traffic", "peak_memory_bytes"]

#: The block size that measured fastest (benchmarks/bench_efficient.py, 8 heads of width 64,
#: float32, 2 CPU threads): 256 ran 1.4-1.6x the time of PyTorch's fused kernel at L = 2048
#: and 4096, against 1.7-2.7x for 128, 2-5x for 64 and 1.5-2.2x for 512. With the
#: recomputing backward pass, 256 ran forward+backward in 1.1-1.2x the fused kernel's time at
#: L = 2048 and 4096 (the other sizes were not measured again).
DEFAULT_BLOCK_SIZE = 256

_HALF_TYPES = (torch.float16, torch.bfloat16)


def blockwise_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> AttentionOutput:
    """Scaled dot-product attention computed block by block, in memory linear in ``L``.

    The result equals ``attention(q, k, v, mask, scale=scale, return_weights=False)`` up
    to rounding: same broadcasting of the leading dimensions, same mask rule, zero output
    for a query with no allowed key. Queries are cut into blocks of ``block_size`` rows;
    for each one the keys are visited in blocks of ``block_size`` with the online softmax,
    so the only scores alive at any time are one ``(..., block_size, block_size)`` tile. The extra
    memory is ``O(L * Ev + block_size**2)`` per batch item instead of ``O(L * S)``.

    It is differentiable, and the memory stays linear in training too: the forward pass
    keeps only ``q``, ``k``, ``v``, the output and each query's log-sum-exp of scores, and
    the backward pass recomputes every tile of weights from them, as FlashAttention does
    (Dao et al., 2022). With ``A`` a tile of weights, ``dO`` the output's gradient and
    ``D = rowsum(dO * output)``, the scores' gradient is ``A * (dO v^T - D)`` (FlashAttention
    writes it ``dS = P * (dP - D)``), from which ``dq``, ``dk`` and ``dv`` accumulate tile by
    tile. A query with no allowed key gets zero
    gradients, never NaN. The backward pass is not itself differentiable (no second
    derivatives).

    Float16 and bfloat16 inputs are computed in float32 and the output is rounded back.

    Args:
        q: queries, ``(..., L, E)``.
        k: keys, ``(..., S, E)``.
        v: values, ``(..., S, Ev)``.
        mask: optional boolean tensor broadcastable to ``(..., L, S)``; ``True`` means the
            query may attend to the key.
        scale: factor applied to the scores; ``None`` means ``1 / sqrt(E)``.
        block_size: rows of queries and of keys per tile, at least 1.

    Returns:
        ``AttentionOutput(output, None)``, output ``(..., L, Ev)`` in the dtype of ``q``.
        The weights are never formed, so there are none to return.

    Raises:
        TypeError: non-tensor inputs, non-float or mismatched dtypes, a non-boolean mask,
            a scale that is not a number, a ``block_size`` that is not an int.
        ValueError: shapes that do not fit together, a mask that does not broadcast, a
            ``block_size`` below 1.
    """
    q, k, v = check_qkv(q, k, v)
    L, Ev = q.shape[-2], v.shape[-1]
    batch_shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
    if mask is not None:
        mask = check_mask(mask, L, S=k.shape[-2])
        batch_shapes.append(mask.shape[:-2])
    batch = broadcast_batch(*batch_shapes,
                            names="q, k, v" + (" and mask" if mask is not None else ""))
    scale = scale_factor(scale, q.shape[-1])
    block_size = require_int("block_size", block_size)

    dtype = q.dtype
    if L == 0:
        return AttentionOutput(q.new_zeros(*batch, 0, Ev), None)
    if dtype in _HALF_TYPES:
        # Sums of thousands of exponentials lose too much in 16 bits: accumulate in float32.
        # The conversion is differentiable, so the gradients come back in 16 bits.
        q, k, v = (t.float() for t in (q, k, v))
    # One batch shape for all three: views, no copies; autograd sums the gradients of a
    # broadcast input back to its own shape.
    q, k, v = (t.expand(*batch, *t.shape[-2:]) for t in (q, k, v))
    output = _BlockwiseAttention.apply(q, k, v, mask, scale, block_size)  # (..., L, Ev)
    return AttentionOutput(output.to(dtype), None)


def _blocks(n: int, block_size: int) -> list[slice]:
    """``0:T, T:2T, ...``: the positions of each block of at most ``block_size``."""
    return [slice(start, start + block_size) for start in range(0, n, block_size)]


def _mask_rows(mask: Tensor | None, rows: slice) -> Tensor | None:
    """The mask's rows for the queries ``rows``, ``(..., block_q, S)`` or one broadcast row."""
    if mask is None or mask.shape[-2] == 1:  # one row, broadcast to every query
        return mask
    return mask[..., rows, :]  # (..., block_q, S)


def _mask_tile(mask_rows: Tensor | None, cols: slice) -> Tensor | None:
    """The mask of one tile, ``(..., block_q, block_k)`` or broadcastable to it."""
    if mask_rows is None or mask_rows.shape[-1] == 1:  # one column, broadcast to every key
        return mask_rows
    return mask_rows[..., cols]  # (..., block_q, block_k)


def _tile_scores(q_rows: Tensor, k_cols: Tensor, allowed: Tensor | None) -> Tensor:
    """Scores of one tile, ``(..., block_q, block_k)``, ``-inf`` where the mask forbids."""
    scores = q_rows @ k_cols.transpose(-2, -1)  # (..., block_q, block_k)
    if allowed is not None:
        scores.masked_fill_(~allowed, float("-inf"))
    return scores


class _BlockwiseAttention(torch.autograd.Function):
    """The online softmax forward and the tile-by-tile recomputing backward.

    ``q``, ``k`` and ``v`` arrive with one batch shape; ``mask`` broadcasts to
    ``(..., L, S)``. Saved for the backward pass: the inputs, the output ``(..., L, Ev)``
    and the log-sum-exp ``(..., L)``, nothing of size ``L * S``.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float,
                block_size: int) -> Tensor:
        output = v.new_empty(*q.shape[:-1], v.shape[-1])  # (..., L, Ev)
        lse = q.new_empty(q.shape[:-1])  # (..., L): log of each row's sum of exp(scores)
        for rows in _blocks(q.shape[-2], block_size):
            output[..., rows, :], lse[..., rows] = _forward_rows(
                q[..., rows, :] * scale, k, v, _mask_rows(mask, rows), block_size)
        ctx.save_for_backward(q, k, v, output, lse, mask)
        ctx.scale, ctx.block_size = scale, block_size
        return output

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, output, lse, mask = ctx.saved_tensors
        scale, block_size = ctx.scale, ctx.block_size
        # exp(score - lse) is the weight itself. A row that saw no allowed key has
        # lse = -inf; +inf there makes each of its weights exp(-inf) = 0, never NaN.
        lse = lse.masked_fill(lse == float("-inf"), float("inf")).unsqueeze(-1)  # (..., L, 1)
        grad_q, grad_k, grad_v = q.new_zeros(q.shape), k.new_zeros(k.shape), v.new_zeros(v.shape)
        key_blocks = _blocks(k.shape[-2], block_size)
        for rows in _blocks(q.shape[-2], block_size):
            q_rows = q[..., rows, :] * scale  # (..., block_q, E)
            grad_out_rows = grad_output[..., rows, :]  # (..., block_q, Ev)
            # D = rowsum(dO * O), which equals rowsum(A * dA): one number per query.
            delta = (grad_out_rows * output[..., rows, :]).sum(-1, keepdim=True)
            mask_rows = _mask_rows(mask, rows)
            for cols in key_blocks:
                allowed = _mask_tile(mask_rows, cols)
                if allowed is not None and not allowed.any():
                    continue  # every weight of the tile is 0: it adds nothing
                k_cols, v_cols = k[..., cols, :], v[..., cols, :]
                weights = _tile_scores(q_rows, k_cols, allowed)  # (..., block_q, block_k)
                weights.sub_(lse[..., rows, :]).exp_()  # A = exp(scores - lse), recomputed
                grad_v[..., cols, :].add_(weights.transpose(-2, -1) @ grad_out_rows)
                grad_scores = grad_out_rows @ v_cols.transpose(-2, -1)  # dA
                grad_scores.sub_(delta).mul_(weights)  # dZ = A * (dA - D)
                grad_q[..., rows, :].add_(grad_scores @ k_cols)
                grad_k[..., cols, :].add_(grad_scores.transpose(-2, -1) @ q_rows)
                del weights, grad_scores  # one tile alive at a time
            grad_q[..., rows, :].mul_(scale)  # scores = scale * q k^T
        return grad_q, grad_k, grad_v, None, None, None


def _forward_rows(q_rows: Tensor, k: Tensor, v: Tensor, mask_rows: Tensor | None,
                  block_size: int) -> tuple[Tensor, Tensor]:
    """Output and log-sum-exp of one block of queries, streaming over blocks of keys.

    ``q_rows`` ``(..., block_q, E)`` is already scaled; ``mask_rows`` holds the mask's rows
    for these queries. Returns the output ``(..., block_q, Ev)`` and the log-sum-exp of
    each query's scores ``(..., block_q)``, ``-inf`` for a query with no allowed key.
    """
    row_max = q_rows.new_full((*q_rows.shape[:-1], 1), float("-inf"))  # (..., block_q, 1)
    row_sum = q_rows.new_zeros(row_max.shape)  # (..., block_q, 1)
    acc = v.new_zeros(*q_rows.shape[:-1], v.shape[-1])  # (..., block_q, Ev)
    for cols in _blocks(k.shape[-2], block_size):
        allowed = _mask_tile(mask_rows, cols)
        if allowed is not None and not allowed.any():
            continue  # a tile with no allowed key adds nothing and moves no maximum
        scores = _tile_scores(q_rows, k[..., cols, :], allowed)  # (..., block_q, block_k)
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
        shift = new_max  # (..., block_q, 1)
        if allowed is not None:
            # A row with no allowed key yet has max -inf; shifting it by 0 instead
            # gives exp(-inf) = 0 where exp(-inf - (-inf)) would be NaN.
            shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
        rescale = torch.exp(row_max - shift)  # (..., block_q, 1), 0 on the first tile
        probs = scores.sub_(shift).exp_()  # (..., block_q, block_k), unnormalised
        row_sum.mul_(rescale).add_(probs.sum(dim=-1, keepdim=True))
        acc.mul_(rescale).add_(probs @ v[..., cols, :])
        row_max = new_max
        # Free this tile before the next one is allocated: one tile alive, not two.
        del scores, probs
    # log(sum of exp(scores)) = max + log(row_sum); -inf + log(0) = -inf for an empty row.
    lse = (row_max + row_sum.log()).squeeze(-1)  # (..., block_q)
    # row_sum is 0 only for a row that never saw an allowed key; its acc is 0 as well.
    return acc / row_sum.masked_fill(row_sum == 0, 1.0), lse


class KVCache:
    """The keys and values of the positions decoded so far, for causal decoding.

    A causal decoder produces one token at a time, and the keys and values of earlier
    positions never change. The cache keeps them, so step ``t`` computes only the new
    position's query, key and value and attends over the ``t`` cached keys: ``O(t)`` work
    per step instead of recomputing the whole ``(t, t)`` attention.

    Two ways to store them:

    - ``KVCache()`` grows with :func:`torch.cat`: every append copies the whole cache,
      ``O(t)`` per step and ``O(n**2)`` copying over a sequence of ``n`` tokens.
    - ``KVCache(max_len=n)`` allocates room for ``n`` positions at the first append (when
      the batch shape, widths, dtype and device are known) and copies only the new tokens
      in place. Appending beyond ``max_len`` raises ``ValueError``. Because it writes in
      place, it is for inference: run the loop under ``torch.no_grad()``.

    Every append must have the batch shape, key width ``E``, value width ``Ev``, dtype and
    device of the first one.

    **Positions.** The cache counts every position it was given, so
    :attr:`next_position` is the position of the next token: the offset at which RoPE
    must rotate the next query and key (:func:`attnbook.positions.rope`). It differs from
    ``len(cache)`` once a window has dropped tokens.

    **A sliding window.** ``KVCache(recent=w, sinks=s)`` keeps only what the next query
    may see: the first ``s`` positions of the text and the ``w`` latest ones, the query's
    own included (StreamingLLM, Xiao et al., 2024). The others are dropped at the next
    append, and :meth:`attend` masks by position (:func:`attnbook.masks.position_mask`),
    so a prefill of many tokens at once gets the same window as one token at a time.

    **Grouped heads.** Keys and values of shape ``(..., h_kv, t, E)`` serve queries with
    ``h`` heads, ``h_kv`` dividing ``h`` (grouped-query attention): only the ``h_kv``
    key/value heads are stored (:func:`attnbook.attention.grouped_attention`).

    Args:
        max_len: capacity in positions, or ``None`` to grow as needed.
        recent: the sliding window's width in positions, or ``None`` to keep everything.
        sinks: with a window, how many first positions are always kept.

    Raises:
        TypeError: if ``max_len``, ``recent`` or ``sinks`` is not an int.
        ValueError: if ``max_len`` or ``recent`` is below 1, ``sinks`` is negative, or
            ``max_len`` and ``recent`` are both given (a window grows by copying).
    """

    def __init__(self, max_len: int | None = None, *, recent: int | None = None,
                 sinks: int = 0) -> None:
        self.max_len = None if max_len is None else require_int("max_len", max_len)
        self.recent = None if recent is None else require_int("recent", recent)
        self.sinks = require_int("sinks", sinks, minimum=0)
        if self.max_len is not None and self.recent is not None:
            raise ValueError(
                f"max_len={self.max_len} and recent={self.recent} cannot be combined: a "
                f"windowed cache drops tokens by copying, so leave max_len=None"
            )
        self._keys: Tensor | None = None  # (..., capacity, E)
        self._values: Tensor | None = None  # (..., capacity, Ev)
        self._positions = torch.zeros(0, dtype=torch.long)  # (t,) of the cached tokens
        self._length = 0
        self._next = 0

    def __len__(self) -> int:
        """The number of cached positions ``t``."""
        return self._length

    def __repr__(self) -> str:
        shape = "empty" if self._keys is None else (
            f"batch {tuple(self._keys.shape[:-2])}, E={self._keys.shape[-1]}, "
            f"Ev={self._values.shape[-1]}, {self._keys.dtype}")
        window = "" if self.recent is None else f"recent={self.recent}, sinks={self.sinks}, "
        return (f"KVCache(len={self._length}, next_position={self._next}, "
                f"max_len={self.max_len}, {window}{shape})")

    @property
    def next_position(self) -> int:
        """The position of the next token appended: how many positions were ever
        appended, dropped ones included. The offset for RoPE."""
        return self._next

    @property
    def positions(self) -> Tensor:
        """The positions of the cached tokens, ``(t,)``, increasing."""
        return self._positions.clone()

    @property
    def nbytes(self) -> int:
        """The bytes the cached keys and values take (``len(self)`` positions)."""
        if self._keys is None:
            return 0
        return (self.keys.numel() * self.keys.element_size()
                + self.values.numel() * self.values.element_size())

    @property
    def keys(self) -> Tensor:
        """The cached keys, ``(..., t, E)`` (a view of the storage, not a copy)."""
        self._require_filled()
        return self._keys[..., :self._length, :]  # (..., t, E)

    @property
    def values(self) -> Tensor:
        """The cached values, ``(..., t, Ev)`` (a view of the storage, not a copy)."""
        self._require_filled()
        return self._values[..., :self._length, :]  # (..., t, Ev)

    def _require_filled(self) -> None:
        if self._keys is None:
            raise ValueError("the cache is empty: append keys and values first")

    def append(self, k_new: Tensor, v_new: Tensor) -> None:
        """Add ``n`` new positions: keys ``(..., n, E)`` and values ``(..., n, Ev)``.

        ``n`` is 1 for a decoding step and the prompt's length for a prefill. Nothing is
        stored unless every check passes.

        Raises:
            TypeError: non-tensors, non-float or mismatched dtypes, a dtype other than the
                cache's.
            ValueError: shapes that do not fit each other or the cache (batch shape,
                ``E``, ``Ev``, ``n``), a device other than the cache's, an append beyond
                ``max_len``, inputs that need gradients when the cache is preallocated.
        """
        k_new = require_tensor("k_new", k_new)
        v_new = require_tensor("v_new", v_new)
        for name, t, letters in (("k_new", k_new, "(..., n, E)"),
                                 ("v_new", v_new, "(..., n, Ev)")):
            if t.dim() < 2:
                raise ValueError(f"{name} must have shape {letters}, got {tuple(t.shape)}")
            if not t.is_floating_point():
                raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
        if k_new.dtype != v_new.dtype:
            raise TypeError(
                f"k_new and v_new must share one dtype, got {k_new.dtype} and {v_new.dtype}"
            )
        if k_new.shape[:-1] != v_new.shape[:-1] or k_new.shape[-2] == 0:
            raise ValueError(
                f"k_new (..., n, E) and v_new (..., n, Ev) must have the same batch shape "
                f"and the same n >= 1: got k_new {tuple(k_new.shape)} and v_new "
                f"{tuple(v_new.shape)}"
            )
        n = k_new.shape[-2]
        if self._keys is not None:
            self._check_fits(k_new, v_new)
        if self.max_len is not None:
            if self._length + n > self.max_len:
                raise ValueError(
                    f"the cache holds {self._length} of max_len={self.max_len} positions "
                    f"and cannot take {n} more (k_new has shape {tuple(k_new.shape)})"
                )
            if torch.is_grad_enabled() and (k_new.requires_grad or v_new.requires_grad):
                raise ValueError(
                    "k_new or v_new requires grad, but a preallocated cache (max_len="
                    f"{self.max_len}) writes in place, which autograd cannot follow across "
                    "steps: decode under torch.no_grad(), or use KVCache() to grow by "
                    "torch.cat"
                )

        if self.recent is not None and self._keys is not None:
            # Drop what no query from now on may see: the next one, at position
            # next_position, sees the sinks and the positions p with next - p < recent.
            keep = (self._positions < self.sinks) | (self._next - self._positions < self.recent)
            if not bool(keep.all()):
                index = keep.nonzero().squeeze(1).to(self._keys.device)  # (kept,)
                self._keys = self._keys.index_select(-2, index)
                self._values = self._values.index_select(-2, index)
                self._positions = self._positions[keep]
                self._length = int(keep.sum())
        if self.max_len is None:
            if self._keys is None:  # a copy, so that the caller's tensors stay theirs
                self._keys, self._values = k_new.clone(), v_new.clone()
            else:
                self._keys = torch.cat([self._keys, k_new], dim=-2)  # (..., t + n, E)
                self._values = torch.cat([self._values, v_new], dim=-2)  # (..., t + n, Ev)
        else:
            if self._keys is None:
                self._keys = k_new.new_empty(*k_new.shape[:-2], self.max_len, k_new.shape[-1])
                self._values = v_new.new_empty(*v_new.shape[:-2], self.max_len,
                                               v_new.shape[-1])
            new = slice(self._length, self._length + n)
            self._keys[..., new, :] = k_new
            self._values[..., new, :] = v_new
        self._positions = torch.cat([self._positions,
                                     torch.arange(self._next, self._next + n)])
        self._length += n
        self._next += n

    def _check_fits(self, k_new: Tensor, v_new: Tensor) -> None:
        """Check that a new chunk has the batch shape, widths, dtype and device cached."""
        keys, values = self._keys, self._values
        if k_new.shape[:-2] != keys.shape[:-2]:
            raise ValueError(
                f"k_new has batch shape {tuple(k_new.shape[:-2])} (shape "
                f"{tuple(k_new.shape)}) but the cache holds batch shape "
                f"{tuple(keys.shape[:-2])}"
            )
        if k_new.shape[-1] != keys.shape[-1] or v_new.shape[-1] != values.shape[-1]:
            raise ValueError(
                f"k_new and v_new have widths E={k_new.shape[-1]}, Ev={v_new.shape[-1]} "
                f"(shapes {tuple(k_new.shape)}, {tuple(v_new.shape)}) but the cache holds "
                f"E={keys.shape[-1]}, Ev={values.shape[-1]}"
            )
        if k_new.dtype != keys.dtype:
            raise TypeError(f"k_new and v_new have dtype {k_new.dtype} but the cache holds "
                            f"{keys.dtype}; convert them with .to()")
        if k_new.device != keys.device:
            raise ValueError(f"k_new and v_new are on {k_new.device} but the cache is on "
                             f"{keys.device}")

    def attend(self, q: Tensor, *, scale: float | None = None,
               return_weights: bool = False) -> AttentionOutput:
        """Attention of the newest ``n`` positions' queries over every cached key.

        ``q`` ``(..., n, E)`` holds the queries of the last ``n`` cached positions, so the
        causal mask is aligned to the end: query ``i`` is position ``t - n + i`` and sees
        the keys ``0 .. t - n + i``. With ``n = 1`` (a decoding step) it sees every key.
        With a window, each query sees what :func:`~attnbook.masks.position_mask` allows.
        Queries ``(..., h, n, E)`` with more heads than the cached ``(..., h_kv, t, E)``
        attend by :func:`~attnbook.attention.grouped_attention`.

        Args:
            q: queries, ``(..., n, E)`` with ``1 <= n <= len(self)``.
            scale: factor applied to the scores; ``None`` means ``1 / sqrt(E)``.
            return_weights: also return the weights ``(..., n, t)``.

        Returns:
            ``AttentionOutput`` with output ``(..., n, Ev)`` and weights ``(..., n, t)`` or
            ``None``, computed by :func:`attnbook.attention.attention`.

        Raises:
            ValueError: an empty cache, more queries than cached positions, and whatever
                :func:`~attnbook.attention.attention` refuses (widths, batch shapes).
            TypeError: whatever :func:`~attnbook.attention.attention` refuses (dtypes).
        """
        self._require_filled()
        q = require_tensor("q", q)
        if q.dim() < 2 or not 1 <= q.shape[-2] <= self._length:
            raise ValueError(
                f"q must have shape (..., n, E) with 1 <= n <= {self._length} (the cached "
                f"positions), got shape {tuple(q.shape)}"
            )
        n, t = q.shape[-2], self._length
        if self.recent is not None:
            positions = self._positions.to(q.device)  # (t,)
            mask = position_mask(positions[t - n:], positions, recent=self.recent,
                                 sinks=self.sinks)  # (n, t)
        else:
            # Query i is position t - n + i: the last n rows of a (t, t) causal mask.
            mask = None if n == 1 else causal_mask(n, t, offset=t - n, device=q.device)
        keys, values = self.keys, self.values
        if (q.dim() >= 3 and keys.dim() >= 3 and q.shape[-3] != keys.shape[-3]
                and keys.shape[-3] > 1):
            return grouped_attention(q, keys, values, mask, scale=scale,
                                     return_weights=return_weights)
        return attention(q, keys, values, mask, scale=scale, return_weights=return_weights)


def decode_step(q_new: Tensor, k_new: Tensor, v_new: Tensor, cache: KVCache, *,
                scale: float | None = None) -> AttentionOutput:
    """One step of causal decoding: cache the new keys and values, then attend.

    ``q_new`` ``(..., n, E)``, ``k_new`` ``(..., n, E)`` and ``v_new`` ``(..., n, Ev)`` are
    the projections of ``n`` new positions (``n = 1`` for one token, the prompt's length
    for a prefill). Run over a sequence token by token, the outputs equal full causal
    attention, ``attention(q, k, v, causal_mask(L))``, row by row.

    Returns:
        ``AttentionOutput(output, None)`` with output ``(..., n, Ev)``.

    Raises:
        TypeError, ValueError: as :meth:`KVCache.append` and :meth:`KVCache.attend`; the
            inputs are checked before the cache changes.
    """
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}")
    q_new, k_new, v_new = check_qkv(q_new, k_new, v_new)
    if q_new.shape[-2] != k_new.shape[-2]:
        raise ValueError(
            f"q_new and k_new must hold the same n new positions: q_new has shape "
            f"{tuple(q_new.shape)}, k_new has shape {tuple(k_new.shape)}"
        )
    broadcast_batch(q_new.shape[:-2], k_new.shape[:-2], names="q_new and k_new")
    cache.append(k_new, v_new)
    return cache.attend(q_new, scale=scale)


def peak_memory_bytes(fn: Callable[[], object]) -> int:
    """The most memory, in bytes, that torch holds at once while ``fn()`` runs, beyond
    what it held before.

    How: ``torch.profiler`` with ``profile_memory=True`` records every allocation and
    free of torch's CPU allocator, with its size, in order. Their running sum is the
    memory ``fn`` holds at each moment; the result is its maximum. This is the CPU
    counterpart of ``torch.cuda.max_memory_allocated`` and, unlike the process's
    resident size or ``tracemalloc`` (which does not see torch's allocator), it is
    deterministic: the same call gives the same number on every run, whatever else the
    machine is doing.
    Tensors that ``fn`` returns count as held. Not counted: Python objects and memory
    outside torch's allocator.

    Args:
        fn: the computation, called once with no arguments.

    Returns:
        The peak in bytes, at least 0.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():
        profiler.start()
    try:
        fn()
    finally:
        with _quiet_stderr():
            profiler.stop()
    events = [event for event in profiler.profiler.kineto_results.events()
              if event.name() == "[memory]"]
    held = peak = 0
    for event in sorted(events, key=_start_time):
        held += event.nbytes()
        peak = max(peak, held)
    return peak


def _start_time(event: Any) -> int:
    """When a profiler event started: in nanoseconds (PyTorch 2.3 and later), else in
    microseconds, the finest that PyTorch 2.2 reports (equal times keep their order)."""
    start_ns = getattr(event, "start_ns", None)
    return start_ns() if start_ns is not None else event.start_us()


class MemoryTraffic(NamedTuple):
    """The numbers one head of attention moves to and from slow memory, in the model of
    :func:`memory_traffic`: counts of elements, not bytes."""

    full_reads: int
    full_writes: int
    tiled_reads: int
    tiled_writes: int
    query_block: int  #: queries per tile, the largest that fits in the fast memory
    key_block: int  #: keys (and values) per tile

    @property
    def full(self) -> int:
        """Reads plus writes of full attention."""
        return self.full_reads + self.full_writes

    @property
    def tiled(self) -> int:
        """Reads plus writes of tiled attention."""
        return self.tiled_reads + self.tiled_writes


def memory_traffic(L: int, S: int, E: int, Ev: int | None = None, *, fast_memory: int,
                   key_block: int | None = None) -> MemoryTraffic:
    """How many numbers full and tiled attention move to and from slow memory, in a model.

    The model is FlashAttention's analysis of memory traffic (Dao et al., 2022, Theorem 2).
    A small fast memory holds ``fast_memory`` numbers (a GPU's on-chip SRAM; on a CPU, a
    cache); a large slow one (a GPU's HBM; main memory) holds the inputs and the results.
    Arithmetic is free: only the numbers that travel between the two are counted, for one
    sequence and one head (multiply by ``B * h``, and by the bytes per number for bytes).
    Nothing is measured.

    - Full attention, the paper's "standard attention" (its Algorithm 0), runs three steps,
      each reading its operands from slow memory once and writing its result back: the
      scores ``Z = q k^T`` (reads ``q`` and ``k``, writes ``L * S``), the weights
      ``A = softmax(Z)`` (reads and writes ``L * S``) and the output ``A v`` (reads ``A``
      and ``v``, writes ``L * Ev``): ``4 L S + (L + S)(E + Ev)`` in all, whatever
      ``fast_memory`` is. With ``N = L = S``
      and ``d = E = Ev`` that is the paper's ``Theta(N d + N**2)``.
    - Tiled attention loops as :func:`blockwise_attention` does: over blocks of
      ``query_block`` queries outside and blocks of ``key_block`` keys inside
      (FlashAttention-2's order; FlashAttention-1 loops over the keys outside). A block of
      queries is read once and stays in fast memory with its running maximum, row sum and
      unnormalised output while every block of keys and values streams past it; scores and
      weights never leave the fast memory. The block's output and log-sum-exp are written
      once. Reads: ``L E + ceil(L / query_block) S (E + Ev)``; writes: ``L (Ev + 1)``.

    ``query_block`` is the largest number of queries, at most ``L``, whose tile fits beside
    one block of keys: the fast memory holds the queries ``(query_block, E)``, their
    unnormalised output ``(query_block, Ev)``, running maximum and row sum, one block of
    keys ``(key_block, E)`` and of values ``(key_block, Ev)``, and one tile of scores
    ``(query_block, key_block)``. So ``query_block`` grows like ``fast_memory``, and the
    keys and values are read about ``L S (E + Ev)(E + Ev + key_block) / fast_memory``
    times: the paper's ``Theta(N**2 d**2 / M)``.

    Args:
        L: the number of queries.
        S: the number of keys (and values).
        E: the width of a query and of a key.
        Ev: the width of a value; ``None`` means ``E``.
        fast_memory: the size ``M`` of the fast memory, in numbers.
        key_block: keys per block, from 1 to ``S``; ``None`` means ``min(E, S)``, as
            FlashAttention caps its inner block at the head width.

    Returns:
        ``MemoryTraffic`` with the reads and writes of both methods and the two block sizes.

    Raises:
        TypeError: if a size is not an int.
        ValueError: if a size is below 1, ``key_block`` is above ``S``, or ``fast_memory``
            cannot hold one query beside one block of keys and values.
    """
    L, S, E = (require_int(name, value) for name, value in (("L", L), ("S", S), ("E", E)))
    Ev = E if Ev is None else require_int("Ev", Ev)
    fast_memory = require_int("fast_memory", fast_memory)
    key_block = min(E, S) if key_block is None else require_int("key_block", key_block,
                                                                maximum=S)
    per_query = E + Ev + 2 + key_block  # q, u, m and r of one query, a row of scores
    key_tile = key_block * (E + Ev)  # one block of keys and of values
    query_block = min(L, (fast_memory - key_tile) // per_query)
    if query_block < 1:
        raise ValueError(
            f"fast_memory={fast_memory} cannot hold one query beside a block of "
            f"key_block={key_block} keys and values (E={E}, Ev={Ev}): it needs at least "
            f"{per_query + key_tile} numbers"
        )
    query_passes = -(-L // query_block)  # ceil: each block of queries reads all of k, v
    return MemoryTraffic(
        full_reads=(L * E + S * E) + L * S + (L * S + S * Ev),  # Z, then A, then A v
        full_writes=L * S + L * S + L * Ev,
        tiled_reads=L * E + query_passes * S * (E + Ev),
        tiled_writes=L * Ev + L,  # the output and the log-sum-exp, once
        query_block=query_block,
        key_block=key_block,
    )


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2: some torch builds print a line there as the profiler
    starts and stops, which would litter a notebook's output."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
