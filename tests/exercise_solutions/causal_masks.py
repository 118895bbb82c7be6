"""Solution of exercises/causal_masks, written from scratch in plain torch."""

from __future__ import annotations

import torch


def my_masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked row softmax, True = may attend; a row with no allowed key gives zeros."""
    has_key = mask.any(dim=-1, keepdim=True)  # (..., L, 1)
    keep = mask | ~has_key  # empty rows keep every score, so their softmax stays finite
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
    return weights.masked_fill(~mask, 0.0)


def my_causal_mask(L: int, S: int | None = None) -> torch.Tensor:
    """(L, S) bool: query i, at position S - L + i, may see key j when j <= S - L + i."""
    S = L if S is None else S
    position = torch.arange(L)[:, None] + (S - L)  # (L, 1): each query's place in the text
    return torch.arange(S)[None, :] <= position  # (L, S)
