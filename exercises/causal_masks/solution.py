"""Exercise causal-masks-ex3: a masked softmax with exact zeros and no NaN.

Replace the `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/causal_masks` from the repository root.
"""

from __future__ import annotations

import torch


def my_masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension in which only the keys where ``mask`` is True count.

    Args:
        scores: ``(..., L, S)``, float16 or float32.
        mask: boolean, broadcastable to ``scores``; True = may attend.

    Returns:
        Weights with the shape and dtype of ``scores``: exactly 0 where the mask is False,
        and all zeros on a row with no allowed key.
    """
    raise NotImplementedError(
        "implement my_masked_softmax(scores, mask): a softmax over the last dimension with "
        "weight exactly 0 where mask is False, all zeros (never NaN) on rows with no allowed "
        "key, in float16 and float32 (see exercises/causal_masks/README.md)"
    )
