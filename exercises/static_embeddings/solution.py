"""Exercise static-embeddings-ex3: the rows of an embedding table nearest to a vector.

Replace the `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/static_embeddings` from the repository root.
"""

from __future__ import annotations

import torch


def nearest_by_cosine(table: torch.Tensor, query: torch.Tensor, k: int,
                      exclude: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids and cosines of the ``k`` rows of ``table`` closest in direction to ``query``.

    Args:
        table: the embedding table, ``(n_vocab, E)``.
        query: a vector, ``(E,)``.
        k: how many rows to return.
        exclude: a row to leave out of the answer, or ``None``.

    Returns:
        ``(ids, cosines)``, both of shape ``(k,)``, the largest cosine first.
    """
    raise NotImplementedError(
        "implement nearest_by_cosine(table, query, k, exclude=None): return the ids (k,) "
        "and cosines (k,) of the k rows of table with the largest cosine to query, most "
        "similar first (see exercises/static_embeddings/README.md)"
    )
