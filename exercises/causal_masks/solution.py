"""Exercises causal-masks-ex3 and causal-masks-ex5: a masked softmax with exact zeros and no
NaN, and the causal mask, square or after cached keys.

Replace each `raise NotImplementedError(...)` below with your code, then run
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


def my_causal_mask(L: int, S: int | None = None) -> torch.Tensor:
    """The causal mask of ``L`` queries that are the last ``L`` of ``S`` tokens.

    Args:
        L: the number of queries (the new tokens).
        S: the number of keys, cached ones included; ``None`` means ``S = L``.

    Returns:
        A boolean ``(L, S)`` tensor, True where query ``i`` (at position ``S - L + i``) may
        attend to key ``j``.
    """
    raise NotImplementedError(
        "implement my_causal_mask(L, S=None): a boolean (L, S) mask, True where query i, "
        "the token at position S - L + i, may attend to key j (see "
        "exercises/causal_masks/README.md)"
    )
