"""Exercise positions-ex2: rotary positions (RoPE) in the interleaved layout.

Replace the `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/positions` from the repository root.
"""

from __future__ import annotations

import torch


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
