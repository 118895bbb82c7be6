"""Solution of exercises/static_embeddings, written from scratch in plain torch."""

from __future__ import annotations

import torch


def nearest_by_cosine(table: torch.Tensor, query: torch.Tensor, k: int,
                      exclude: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids (k,) and cosines (k,) of the k rows of table (V, E) closest to query (E,)."""
    unit_rows = table / table.norm(dim=1, keepdim=True)  # (V, E)
    cosines = unit_rows @ (query / query.norm())  # (V,)
    if exclude is not None:
        cosines[exclude] = float("-inf")
    values, ids = cosines.topk(k)
    return ids, values
