"""Reference solution of exercises/static_embeddings: the arithmetic of nearest_tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def nearest_by_cosine(table: torch.Tensor, query: torch.Tensor, k: int,
                      exclude: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    cosines = F.cosine_similarity(table, query[None, :], dim=1)  # (n_vocab,)
    if exclude is not None:
        cosines[exclude] = float("-inf")
    values, ids = cosines.topk(k)
    return ids, values
