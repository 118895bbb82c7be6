"""Solution of exercises/attention_layer, written from scratch in plain torch."""

from __future__ import annotations

from collections.abc import Callable

import torch


def padded_causal_mask(lengths: torch.Tensor, L: int) -> torch.Tensor:
    """(B, 1, L, L) bool: query i of sequence b may see key j when j <= i and j < lengths[b]."""
    i = torch.arange(L)[:, None]  # (L, 1): the queries
    j = torch.arange(L)[None, :]  # (1, L): the keys
    real_key = j < lengths[:, None, None, None]  # (B, 1, 1, L)
    return (j <= i) & real_key  # (B, 1, L, L)


def peeks_ahead(layer: Callable, x: torch.Tensor) -> int | None:
    """The first position t whose token changes an output before t, or None."""
    with torch.no_grad():
        output = layer(x)[0]  # (B, L, d_model)
        for t in range(1, x.shape[1]):
            changed = x.clone()
            changed[:, t] = x[:, t] + 1  # surely a different token
            if not torch.equal(layer(changed)[0][:, :t], output[:, :t]):  # exact
                return t
    return None
