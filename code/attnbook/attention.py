"""Scaled dot-product attention, the one implementation the whole book uses.

Shapes follow :func:`torch.nn.functional.scaled_dot_product_attention`:

- query ``q``: ``(..., L, E)``
- key ``k``:   ``(..., S, E)``
- value ``v``: ``(..., S, Ev)``
- weights:     ``(..., L, S)``
- output:      ``(..., L, Ev)``

The leading ``...`` dimensions broadcast. A mask is boolean and ``True`` means
"this query may attend to this key", exactly as in PyTorch's SDPA.

A query row whose mask allows no key gets all-zero weights and an all-zero output.
Filling masked scores with a large negative number (``-1e9``, ``-100``) is avoided on
purpose: it does not fit in float16, and it turns a fully masked row into a uniform
average over keys it was told to ignore.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ._validate import (
    broadcast_batch,
    check_bias,
    check_mask,
    check_qkv,
    require_tensor,
    scale_factor,
)

__all__ = [
    "AttentionOutput",
    "attention",
    "attention_scores",
    "grouped_attention",
    "masked_softmax",
    "raw_self_attention",
]


class AttentionOutput(NamedTuple):
    """What attention returns: the output and, when asked for, the weights.

    ``output`` has shape ``(..., L, Ev)``; ``weights`` has shape ``(..., L, S)`` or is
    ``None`` when the caller passed ``return_weights=False``.
    """

    output: Tensor
    weights: Tensor | None


def attention_scores(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """Scores ``scale * q @ k^T`` of shape ``(..., L, S)``, before any mask or softmax."""
    # Scaling q, (..., L, E), costs less than scaling the (..., L, S) scores.
    return (q * scale) @ k.transpose(-2, -1)  # (..., L, S)


def masked_softmax(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Row softmax over the last dimension, with forbidden entries exactly zero.

    ``mask`` is boolean, broadcastable to ``scores`` (``True`` = keep). A row in which
    the mask keeps nothing comes out all zeros rather than NaN, and its gradient is
    zero rather than NaN, in every floating dtype. ``scores`` is left unchanged.
    """
    return _masked_softmax(scores, mask, overwrite=False)


def _masked_softmax(scores: Tensor, mask: Tensor | None, *, overwrite: bool) -> Tensor:
    """``masked_softmax``; with ``overwrite=True`` it may fill ``scores`` in place."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    # In place only when the mask does not widen the scores: masked_fill_ cannot grow
    # ``scores`` to the broadcast shape (mask (B, L, S) with scores (L, S), for instance).
    in_place = overwrite and torch.broadcast_shapes(scores.shape, mask.shape) == scores.shape
    fill = Tensor.masked_fill_ if in_place else Tensor.masked_fill
    has_key = mask.any(dim=-1, keepdim=True)  # (..., L, 1)
    if bool(has_key.all()):
        return torch.softmax(fill(scores, ~mask, float("-inf")), dim=-1)
    # Rows with no allowed key would be softmax(-inf, ..., -inf) = NaN. Let those rows see
    # every key (finite softmax, finite gradient), then zero them out.
    keep = mask | ~has_key
    weights = torch.softmax(fill(scores, ~keep, float("-inf")), dim=-1)
    return weights.masked_fill(~mask, 0.0)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    bias: Tensor | None = None,
    scale: float | None = None,
    return_weights: bool = True,
) -> AttentionOutput:
    """Scaled dot-product attention: ``softmax(scale * q k^T + bias, masked) v``.

    Args:
        q: queries, ``(..., L, E)``.
        k: keys, ``(..., S, E)``.
        v: values, ``(..., S, Ev)``.
        mask: optional boolean tensor broadcastable to ``(..., L, S)``; ``True`` means the
            query may attend to the key. Masked weights are exactly 0, and a query with
            no allowed key gets zero weights and a zero output.
        bias: optional finite float tensor broadcastable to ``(..., L, S)``, added to the
            scaled scores before the mask and the softmax (ALiBi's linear biases, see
            :func:`attnbook.positions.alibi_bias`). It is not a mask: forbidding a key is
            the boolean ``mask``'s job.
        scale: factor applied to the scores. ``None`` means ``1 / sqrt(E)``; ``1.0``
            gives unscaled attention.
        return_weights: when ``False``, ``weights`` is ``None`` and PyTorch's fused
            kernel is used.

    Returns:
        ``AttentionOutput(output, weights)`` with output ``(..., L, Ev)`` and weights
        ``(..., L, S)`` (or ``None``). Leading dimensions broadcast across q, k, v and
        mask.

    Raises:
        TypeError: non-tensor inputs, non-float or mismatched dtypes, a non-boolean mask,
            a bias that is not a float tensor, a scale that is not a number.
        ValueError: shapes that do not fit together, a mask that does not broadcast.
    """
    q, k, v = check_qkv(q, k, v)
    L, S = q.shape[-2], k.shape[-2]
    batch_shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
    if mask is not None:
        mask = check_mask(mask, L, S)
        batch_shapes.append(mask.shape[:-2])
    if bias is not None:
        bias = check_bias(bias, L, S, q.dtype)
        batch_shapes.append(bias.shape[:-2])
    names = ["q", "k", "v"] + ["mask"] * (mask is not None) + ["bias"] * (bias is not None)
    listed = ", ".join(names) if len(names) == 3 else ", ".join(names[:-1]) + " and " + names[-1]
    batch = broadcast_batch(*batch_shapes, names=listed)
    scale = scale_factor(scale, q.shape[-1])
    if not isinstance(return_weights, bool):
        raise TypeError(f"return_weights must be a bool, got {type(return_weights).__name__}")

    if not return_weights:
        # The fused kernel broadcasts less than matmul does: give it whole batches.
        q, k, v = (t.expand(*batch, *t.shape[-2:]) for t in (q, k, v))
        return AttentionOutput(_fused_attention(q, k, v, mask, scale, bias), None)

    scores = attention_scores(q, k, scale)  # (..., L, S)
    if bias is not None:
        scores = scores + bias  # (..., L, S)
    weights = _masked_softmax(scores, mask, overwrite=True)  # (..., L, S)
    return AttentionOutput(weights @ v, weights)  # (..., L, Ev)


def _fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                     scale: float, bias: Tensor | None = None) -> Tensor:
    """PyTorch's fused SDPA, with rows that have no allowed key set to zero."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    has_key = mask.any(dim=-1, keepdim=True)  # (..., L, 1)
    # Recent PyTorch (2.5 and later) returns zeros on rows with no allowed key; older
    # versions returned NaN. Do not depend on either: give those rows every key (finite
    # values and gradients) and zero their output afterwards.
    allowed = mask if bool(has_key.all()) else mask | ~has_key
    if bias is not None:
        # SDPA takes one float mask: the bias where allowed, -inf where forbidden.
        allowed = bias.masked_fill(~allowed, float("-inf"))
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    return output if bool(has_key.all()) else output.masked_fill(~has_key, 0.0)


def grouped_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    bias: Tensor | None = None,
    scale: float | None = None,
    return_weights: bool = True,
) -> AttentionOutput:
    """:func:`attention` with fewer key/value heads than query heads (grouped-query).

    ``q`` has ``h`` heads and ``k``, ``v`` have ``h_kv`` heads, with ``h_kv`` dividing
    ``h``: key/value head ``j`` serves the ``g = h / h_kv`` consecutive query heads
    ``j*g .. j*g + g - 1`` (the order of LLaMA's ``repeat_kv``). ``h_kv = h`` is ordinary
    multi-head attention and ``h_kv = 1`` is multi-query attention. The keys and values
    are shared by broadcasting, never copied ``g`` times.

    Args:
        q: queries, ``(..., h, L, E)``.
        k: keys, ``(..., h_kv, S, E)``.
        v: values, ``(..., h_kv, S, Ev)``.
        mask, bias: as in :func:`attention`, except that with 3 or more dimensions their
            dimension ``-3`` is the head dimension, of size ``h`` or 1.
        scale, return_weights: as in :func:`attention`.

    Returns:
        ``AttentionOutput`` with output ``(..., h, L, Ev)`` and weights ``(..., h, L, S)``
        (or ``None``).

    Raises:
        TypeError: as :func:`attention`.
        ValueError: tensors without a head dimension, ``h_kv`` that does not divide ``h``,
            and whatever :func:`attention` refuses.
    """
    q, k, v = check_qkv(q, k, v)
    if q.dim() < 3 or k.dim() < 3 or v.dim() < 3:
        raise ValueError(
            f"q, k and v must have a head dimension, (..., heads, length, width): got "
            f"shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    h, h_kv = q.shape[-3], k.shape[-3]
    if v.shape[-3] != h_kv or h % h_kv:
        raise ValueError(
            f"k and v must have the same number of heads h_kv, and h_kv must divide the "
            f"h={h} heads of q: got k with {h_kv} and v with {v.shape[-3]} heads"
        )
    groups = h // h_kv
    q = q.unflatten(-3, (h_kv, groups))  # (..., h_kv, g, L, E)
    k, v = k.unsqueeze(-3), v.unsqueeze(-3)  # (..., h_kv, 1, S, E): shared by the group
    extra = {}
    for name, tensor in (("mask", mask), ("bias", bias)):
        if isinstance(tensor, Tensor) and tensor.dim() >= 3:
            if tensor.shape[-3] == h:
                tensor = tensor.unflatten(-3, (h_kv, groups))  # (..., h_kv, g, L, S)
            elif tensor.shape[-3] == 1:
                tensor = tensor.unsqueeze(-3)  # (..., 1, 1, L, S)
            else:
                raise ValueError(
                    f"{name} must have a head dimension of size h={h} or 1, got shape "
                    f"{tuple(tensor.shape)}"
                )
        extra[name] = tensor
    output, weights = attention(q, k, v, extra["mask"], bias=extra["bias"], scale=scale,
                                return_weights=return_weights)
    output = output.flatten(-4, -3)  # (..., h, L, Ev)
    return AttentionOutput(output, None if weights is None else weights.flatten(-4, -3))


def raw_self_attention(x: Tensor) -> AttentionOutput:
    """Raw, unscaled self-attention ``softmax(x x^T) x`` with no projections.

    Args:
        x: token vectors, ``(..., n, E)``.

    Returns:
        ``AttentionOutput`` with output ``(..., n, E)`` and weights ``(..., n, n)``.
    """
    x = require_tensor("x", x)
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., n, E), got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    return attention(x, x, x, scale=1.0)
