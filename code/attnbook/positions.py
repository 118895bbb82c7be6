"""How attention learns word order: absolute, rotary and linear-bias positions.

Attention alone is permutation equivariant: shuffle the tokens and the outputs shuffle the
same way. Models break the symmetry in one of two places:

- **on the token vectors**, before the first layer: :func:`sinusoidal` (Vaswani et al.,
  2017) or a learned table (an ``nn.Embedding``), added to the token embeddings;
- **in the scores** of every layer: :func:`rope` rotates queries and keys by angles that grow
  with the position (Su et al., 2021), so ``q . k`` depends on the offset between them;
  :func:`alibi_bias` adds ``-slope * (i - j)`` to the scores (Press et al., 2022).

Rotary positions come in two layouts that pair the features differently:

- ``"half-split"`` (GPT-NeoX, and Hugging Face's ``rotate_half`` in its LLaMA and most other
  models): feature ``i`` pairs with feature ``i + D/2``;
- ``"interleaved"`` (RoFormer, GPT-J, Meta's original LLaMA code): feature ``2i`` pairs with
  ``2i + 1``. Hugging Face's script that converts Meta's LLaMA weights reorders the rows of
  ``W_q`` and ``W_k`` so that the half-split code gives the same scores.

Pair ``i`` turns at the frequency ``base ** (-2i / D)`` in both. One ``layout`` switch sets
both the pairing and the rotation, so they cannot drift apart, and
:func:`interleaved_order` is the reordering of the features that turns one into the other.

Positions are an explicit input of :func:`rope`; the angles are computed in float32 (float64
for float64 input) and shared by queries and keys.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from ._validate import require_choice, require_int, require_real, require_tensor

__all__ = [
    "alibi_bias",
    "alibi_slopes",
    "interleaved_order",
    "rope",
    "rope_frequencies",
    "sinusoidal",
]

Layout = Literal["half-split", "interleaved"]
_LAYOUTS = {"half-split": "half-split", "interleaved": "interleaved"}


def _even(name: str, value: object) -> int:
    value = require_int(name, value)
    if value % 2:
        raise ValueError(f"{name} must be even (features come in pairs), got {value}")
    return value


def _base(base: object) -> float:
    base = require_real("base", base)
    if base <= 1:
        raise ValueError(f"base must be a number > 1, got {base}")
    return base


def sinusoidal(L: int, E: int, base: float = 10000.0) -> Tensor:
    """The fixed positional encoding of Vaswani et al. (2017), in the paper's layout.

    ``PE[pos, 2i] = sin(pos / base^(2i/E))`` and ``PE[pos, 2i+1] = cos(pos / base^(2i/E))``:
    sine and cosine of one frequency sit side by side (interleaved).

    Args:
        L: the number of positions ``0 .. L-1``.
        E: the width of the encoding; must be even.
        base: the longest wavelength is ``2 pi base``; the paper uses 10000.

    Returns:
        A float32 tensor of shape ``(L, E)``.

    Raises:
        TypeError: ``L`` or ``E`` not an int, ``base`` not a number.
        ValueError: ``L < 1``, ``E`` odd or ``< 2``, ``base <= 1``.
    """
    L = require_int("L", L)
    E = _even("E", E)
    base = _base(base)
    position = torch.arange(L, dtype=torch.float64)[:, None]  # (L, 1)
    frequency = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)  # (E/2,)
    angle = position * frequency  # (L, E/2)
    pairs = torch.stack([angle.sin(), angle.cos()], dim=-1)  # (L, E/2, 2)
    return pairs.flatten(-2).float()  # (L, E)


def rope_frequencies(D: int, base: float = 10000.0, *,
                     dtype: torch.dtype = torch.float32) -> Tensor:
    """The angle per position of each rotary pair: ``theta_i = base ** (-2i / D)``.

    Returns:
        A tensor of shape ``(D/2,)``: pair 0 turns fastest (1 radian per position), the
        last pair slowest.

    Raises:
        TypeError, ValueError: ``D`` not a positive even int, ``base`` not a number > 1.
    """
    D = _even("D", D)
    base = _base(base)
    return base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D).to(dtype)  # (D/2,)


def _positions(positions: object, L: int) -> Tensor:
    positions = require_tensor("positions", positions)
    if positions.dtype.is_floating_point or positions.dtype.is_complex or \
            positions.dtype == torch.bool:
        raise TypeError(
            f"positions must be an integer tensor (e.g. torch.arange(L)), got dtype "
            f"{positions.dtype}"
        )
    if positions.dim() < 1 or positions.shape[-1] != L:
        raise ValueError(
            f"positions must have shape (..., L) with L={L} (the length of x), got shape "
            f"{tuple(positions.shape)}"
        )
    return positions


def rope(x: Tensor, positions: Tensor, base: float = 10000.0, *,
         layout: Layout = "half-split") -> Tensor:
    """Rotary position embedding: rotate each feature pair of ``x`` by ``position * theta``.

    Pair ``i`` (features ``i`` and ``i + D/2`` in the half-split layout, ``2i`` and ``2i+1``
    in the interleaved one) turns by the angle ``m * theta_i`` at position ``m``, with
    ``theta_i = base ** (-2i / D)`` (:func:`rope_frequencies`). Rotations preserve length,
    and ``rope(q, m) . rope(k, n)`` depends on ``m`` and ``n`` only through ``m - n``.

    Args:
        x: queries or keys, ``(..., L, D)``; ``D`` must be even.
        positions: integer tensor ``(..., L)`` broadcastable against ``x``'s leading
            dimensions: the position of each row (e.g. ``torch.arange(L)``, or
            ``torch.arange(offset, offset + L)`` for new tokens after a cache).
        base: the frequency base; 10000 in RoFormer and in LLaMA 1 and 2.
        layout: ``"half-split"`` (GPT-NeoX, Hugging Face) or ``"interleaved"`` (RoFormer,
            GPT-J, Meta's LLaMA code). The two give different results on the same ``x``.

    Returns:
        A tensor like ``x``, rotated. The angles are computed in float32 (float64 for a
        float64 ``x``), then the result is cast back to ``x.dtype``.

    Raises:
        TypeError: ``x`` not a floating tensor, ``positions`` not an integer tensor.
        ValueError: ``D`` odd, ``positions`` whose last size is not ``L``, an unknown
            ``layout``, ``base <= 1``.
    """
    x = require_tensor("x", x)
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., L, D), got shape {tuple(x.shape)}")
    L, D = x.shape[-2:]
    if D % 2:
        raise ValueError(f"the last dimension of x (D) must be even, got shape {tuple(x.shape)}")
    positions = _positions(positions, L)
    layout = require_choice("layout", layout, _LAYOUTS)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    angle = positions.to(work)[..., None] * rope_frequencies(D, base, dtype=work)  # (..., L, D/2)
    cos, sin = angle.cos(), angle.sin()  # (..., L, D/2)
    x_work = x.to(work)
    if layout == "half-split":
        first, second = x_work[..., : D // 2], x_work[..., D // 2:]  # (..., L, D/2) each
    else:
        first, second = x_work[..., 0::2], x_work[..., 1::2]  # (..., L, D/2) each
    turned = (first * cos - second * sin, first * sin + second * cos)  # 2 x (..., L, D/2)
    if layout == "half-split":
        out = torch.cat(turned, dim=-1)  # (..., L, D)
    else:
        out = torch.stack(turned, dim=-1).flatten(-2)  # (..., L, D)
    return out.to(x.dtype)


def interleaved_order(D: int) -> Tensor:
    """The feature order that turns the half-split layout into the interleaved one.

    ``order = [0, D/2, 1, D/2 + 1, ...]``: for any ``x`` and positions,
    ``rope(x[..., order], p, layout="interleaved") == rope(x, p)[..., order]``. Reordering
    the rows of ``W_q`` and ``W_k`` this way converts weights trained for one layout into
    weights for the other (Hugging Face's LLaMA conversion script applies the inverse
    reordering to Meta's interleaved weights).

    Raises:
        TypeError, ValueError: ``D`` not a positive even int.
    """
    D = _even("D", D)
    half = torch.arange(D // 2)
    return torch.stack([half, half + D // 2], dim=-1).flatten()  # (D,)


def alibi_slopes(num_heads: int) -> Tensor:
    """The head slopes of ALiBi, exactly as the paper's ``get_slopes``.

    For ``n`` a power of two, head ``h = 1 .. n`` gets ``2 ** (-8h / n)``. Otherwise the
    paper takes the slopes of the closest power of two ``p < n`` and adds every other slope
    of ``2p`` heads until there are ``n``.

    Returns:
        A float32 tensor of shape ``(num_heads,)``, in the paper's order (largest first
        when ``num_heads`` is a power of two).

    Raises:
        TypeError, ValueError: ``num_heads`` not a positive int.
    """
    num_heads = require_int("num_heads", num_heads)

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    if num_heads & (num_heads - 1) == 0:
        slopes = power_of_two(num_heads)
    else:
        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)  # (num_heads,)


def alibi_bias(num_heads: int, L: int, S: int | None = None) -> Tensor:
    """ALiBi's linear biases ``-slope_h * (i - j)`` for query ``i`` and key ``j``.

    Queries are the last ``L`` of ``S`` positions, as in :func:`~attnbook.masks.causal_mask`
    with ``offset=S - L``: query ``i`` sits at position ``S - L + i``. Past keys get a
    penalty that grows linearly with the distance; the bias is meant to be used with the
    causal mask (future keys would get a bonus).

    Args:
        num_heads: the number of heads; head ``h`` uses ``alibi_slopes(num_heads)[h]``.
        L: the number of queries.
        S: the number of keys; defaults to ``L``, and must be at least ``L``.

    Returns:
        A float32 tensor of shape ``(num_heads, L, S)``, to add to the scaled scores.

    Raises:
        TypeError, ValueError: sizes that are not positive ints, ``S < L``.
    """
    slopes = alibi_slopes(num_heads)  # (h,)
    L = require_int("L", L)
    S = L if S is None else require_int("S", S)
    if S < L:
        raise ValueError(
            f"S must be at least L (the queries are the last L of S positions), got L={L}, "
            f"S={S}"
        )
    query = torch.arange(S - L, S, dtype=torch.float32)[:, None]  # (L, 1)
    key = torch.arange(S, dtype=torch.float32)[None, :]  # (1, S)
    return -slopes[:, None, None] * (query - key)  # (h, L, S)
