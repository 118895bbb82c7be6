"""Exercise attention-maps-ex3: the entropy of every row of a stack of attention maps.

Replace the `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/attention_maps` from the repository root.
"""

from __future__ import annotations

import torch


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats, ``-sum_j a_j ln a_j`` with ``0 ln 0 = 0``, of every row.

    Args:
        weights: attention maps ``(layers, heads, L, S)`` whose rows sum to 1.

    Returns:
        The entropies, ``(layers, heads, L)``.
    """
    raise NotImplementedError(
        "implement row_entropy(weights): for weights (layers, heads, L, S) return the "
        "entropy -sum_j a ln a of every row, shape (layers, heads, L), counting 0 ln 0 "
        "as 0 (see exercises/attention_maps/README.md)"
    )
