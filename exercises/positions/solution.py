"""Exercises positions-ex1, positions-ex2 and positions-ex3: the sinusoidal encoding, rotary
positions (RoPE) in the interleaved layout, and ALiBi's head slopes.

Replace each `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/positions` from the repository root.
"""

from __future__ import annotations

import torch


def my_sinusoidal(L: int, E: int) -> torch.Tensor:
    """The sinusoidal position encoding of Vaswani et al., in the paper's interleaved layout.

    Args:
        L: the number of positions, ``0 .. L-1``.
        E: the number of features (``d_model``), even.

    Returns:
        A float tensor ``(L, E)``, one row per position: ``PE[pos, 2i] = sin(pos /
        10000^(2i/E))`` and ``PE[pos, 2i+1] = cos(pos / 10000^(2i/E))`` for the pairs
        ``i = 0 .. E/2-1``.
    """
    raise NotImplementedError(
        "implement my_sinusoidal(L, E): an (L, E) float tensor whose row pos holds "
        "sin(pos / 10000^(2i/E)) in feature 2i and the cosine of the same angle in feature "
        "2i+1 (see exercises/positions/README.md)"
    )


def rope_interleaved(x: torch.Tensor, positions: torch.Tensor,
                     base: float = 10000.0) -> torch.Tensor:
    """Turn features ``2i`` and ``2i+1`` of every row of ``x`` by ``position · base^(-2i/D)``.

    Args:
        x: queries or keys, ``(..., L, D)`` with ``D`` even; float32 or float64.
        positions: integer tensor ``(..., L)``, the position of each row, broadcastable
            against the leading dimensions of ``x``.
        base: the frequency base.

    Returns:
        A new tensor with the shape and dtype of ``x``; ``x`` itself is not changed.
    """
    raise NotImplementedError(
        "implement rope_interleaved(x, positions, base=10000.0): turn each pair of neighbouring "
        "features (2i, 2i+1) of x by the angle position · base^(-2i/D), returning a new tensor "
        "with the shape and dtype of x (see exercises/positions/README.md)"
    )


def my_alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's head slopes, exactly as the paper's ``get_slopes`` gives them, in its order.

    Args:
        num_heads: the number of heads ``n``, at least 1.

    Returns:
        A float tensor ``(num_heads,)``. For ``n`` a power of two, head ``h = 1 .. n`` gets
        ``2^(-8h/n)``; otherwise the ``p = 2^floor(log2 n)`` slopes of ``p`` heads come
        first, then every other slope of ``2p`` heads (the first, the third, ...) until
        there are ``n``.
    """
    raise NotImplementedError(
        "implement my_alibi_slopes(num_heads): a float tensor (num_heads,) of the paper's "
        "get_slopes, 2^(-8h/n) for heads h = 1 .. n when n is a power of two, the slopes of "
        "the power of two below n then every other slope of twice as many heads otherwise "
        "(see exercises/positions/README.md)"
    )
