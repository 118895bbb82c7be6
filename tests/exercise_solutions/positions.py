"""Solutions of the chapter `positions`, written from scratch in plain torch.

exercises/positions holds the chapter's three checked exercises: my_sinusoidal (positions-ex1),
rope_interleaved (positions-ex2) and my_alibi_slopes (positions-ex3).
"""

from __future__ import annotations

import math

import torch


def my_sinusoidal(L: int, E: int) -> torch.Tensor:
    """(L, E): PE[pos, 2i] = sin(pos / 10000^(2i/E)), PE[pos, 2i+1] = cos(the same)."""
    position = torch.arange(L, dtype=torch.float64)[:, None]  # (L, 1)
    frequency = 10000.0 ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)  # (E/2,)
    angle = position * frequency  # (L, E/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2).float()  # (L, E)


def rope_interleaved(x: torch.Tensor, positions: torch.Tensor,
                     base: float = 10000.0) -> torch.Tensor:
    """(..., L, D): features 2i and 2i+1 turned by positions · base^(-2i/D)."""
    D = x.shape[-1]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = base ** (-torch.arange(0, D, 2, dtype=work) / D)  # (D/2,)
    angle = positions.to(work)[..., None] * theta  # (..., L, D/2)
    cos, sin = angle.cos(), angle.sin()
    first, second = x[..., 0::2].to(work), x[..., 1::2].to(work)  # (..., L, D/2) each
    turned = torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return turned.flatten(-2).to(x.dtype)  # (..., L, D/2, 2) -> (..., L, D)


def my_alibi_slopes(num_heads: int) -> torch.Tensor:
    """(num_heads,): the slopes of the paper's get_slopes, in its order."""

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_two(closest)
    if closest < num_heads:
        slopes += power_of_two(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes)
