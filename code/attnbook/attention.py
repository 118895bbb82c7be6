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

import math
import numbers
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "AttentionOutput",
    "attention",
    "attention_scores",
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


def _require_tensor(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _batch_shape(*shapes: tuple[int, ...], names: str) -> torch.Size:
    try:
        return torch.broadcast_shapes(*shapes)
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of {names} do not broadcast: got "
            + ", ".join(str(tuple(s)) for s in shapes)
        ) from None


def check_mask(mask: object, L: int, S: int, name: str = "mask") -> Tensor:
    """Check that ``mask`` is a boolean tensor broadcastable to ``(..., L, S)``.

    Raises:
        TypeError: if ``mask`` is not a tensor or not boolean (the message says how to
            convert a 0/1 or additive float mask).
        ValueError: if its last two dimensions cannot broadcast to ``(L, S)``.
    """
    mask = _require_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}. "
            f"A 0/1 mask converts with `{name}.bool()`; an additive mask of 0 and -inf "
            f"converts with `{name} == 0`."
        )
    if mask.dim() < 2:
        raise ValueError(
            f"{name} must have at least 2 dimensions broadcastable to (..., L, S) = "
            f"(..., {L}, {S}), got shape {tuple(mask.shape)}"
        )
    rows, cols = mask.shape[-2:]
    if rows not in (1, L) or cols not in (1, S):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to (..., L, S) = "
            f"(..., {L}, {S})"
        )
    return mask


def _check_inputs(q: object, k: object, v: object) -> tuple[Tensor, Tensor, Tensor]:
    q = _require_tensor("q", q)
    k = _require_tensor("k", k)
    v = _require_tensor("v", v)
    for name, t, letters in (("q", q, "(..., L, E)"), ("k", k, "(..., S, E)"),
                             ("v", v, "(..., S, Ev)")):
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape {letters}, got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same feature size E: q has shape {tuple(q.shape)} "
            f"(E={q.shape[-1]}), k has shape {tuple(k.shape)} (E={k.shape[-1]})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length S: k has shape {tuple(k.shape)} "
            f"(S={k.shape[-2]}), v has shape {tuple(v.shape)} (S={v.shape[-2]})"
        )
    if k.shape[-2] == 0:
        raise ValueError(f"k must hold at least one key (S >= 1), got shape {tuple(k.shape)}")
    return q, k, v


def _check_scale(scale: object, E: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(E)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {type(scale).__name__}")
    if not math.isfinite(float(scale)):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


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
    scale: float | None = None,
    return_weights: bool = True,
) -> AttentionOutput:
    """Scaled dot-product attention: ``softmax(scale * q k^T, masked) v``.

    Args:
        q: queries, ``(..., L, E)``.
        k: keys, ``(..., S, E)``.
        v: values, ``(..., S, Ev)``.
        mask: optional boolean tensor broadcastable to ``(..., L, S)``; ``True`` means the
            query may attend to the key. Masked weights are exactly 0, and a query with
            no allowed key gets zero weights and a zero output.
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
            a scale that is not a number.
        ValueError: shapes that do not fit together, a mask that does not broadcast.
    """
    q, k, v = _check_inputs(q, k, v)
    L, S = q.shape[-2], k.shape[-2]
    batch_shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
    if mask is not None:
        mask = check_mask(mask, L, S)
        batch_shapes.append(mask.shape[:-2])
    batch = _batch_shape(*batch_shapes,
                         names="q, k, v" + (" and mask" if mask is not None else ""))
    scale = _check_scale(scale, q.shape[-1])
    if not isinstance(return_weights, bool):
        raise TypeError(f"return_weights must be a bool, got {type(return_weights).__name__}")

    if not return_weights:
        # The fused kernel broadcasts less than matmul does: give it whole batches.
        q, k, v = (t.expand(*batch, *t.shape[-2:]) for t in (q, k, v))
        return AttentionOutput(_fused_attention(q, k, v, mask, scale), None)

    scores = attention_scores(q, k, scale)  # (..., L, S)
    weights = _masked_softmax(scores, mask, overwrite=True)  # (..., L, S)
    return AttentionOutput(weights @ v, weights)  # (..., L, Ev)


def _fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                     scale: float) -> Tensor:
    """PyTorch's fused SDPA, with rows that have no allowed key set to zero."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, scale=scale)
    has_key = mask.any(dim=-1, keepdim=True)  # (..., L, 1)
    if bool(has_key.all()):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    # Recent PyTorch (2.5 and later) returns zeros on such rows; older versions returned
    # NaN. Do not depend on either: give those rows every key (finite values and
    # gradients) and zero their output afterwards.
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key, scale=scale)
    return output.masked_fill(~has_key, 0.0)


def raw_self_attention(x: Tensor) -> AttentionOutput:
    """Raw, unscaled self-attention ``softmax(x x^T) x`` with no projections.

    Args:
        x: token vectors, ``(..., n, E)``.

    Returns:
        ``AttentionOutput`` with output ``(..., n, E)`` and weights ``(..., n, n)``.
    """
    x = _require_tensor("x", x)
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., n, E), got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    return attention(x, x, x, scale=1.0)
