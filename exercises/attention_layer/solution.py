"""Exercises attention-layer-ex1 and attention-layer-ex2: the causal mask of a padded batch,
and a test that finds the first token a layer peeks at.

Replace each `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/attention_layer` from the repository root.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def padded_causal_mask(lengths: torch.Tensor, L: int) -> torch.Tensor:
    """The causal mask of ``B`` sequences padded at the end to ``L`` tokens.

    Args:
        lengths: ``(B,)`` integers, the number of real tokens of each sequence.
        L: the padded length.

    Returns:
        A boolean ``(B, 1, L, L)`` tensor, True where query ``i`` of sequence ``b`` may
        attend to key ``j``: ``j <= i`` and ``j < lengths[b]``.
    """
    raise NotImplementedError(
        "implement padded_causal_mask(lengths, L): a boolean (B, 1, L, L) mask, True where "
        "query i of sequence b may attend to key j, that is j <= i and j < lengths[b] (see "
        "exercises/attention_layer/README.md)"
    )


def peeks_ahead(layer: Callable, x: torch.Tensor) -> int | None:
    """The first position whose token changes an earlier output of ``layer``, or None.

    Args:
        layer: called as ``layer(x)``, it returns ``(output, weights)``, output
            ``(B, L, d_model)``.
        x: the input ``(B, L, d_model)``; token ``t`` is ``x[:, t]``. Not changed.

    Returns:
        The first ``t`` such that changing token ``t`` changes an output at a position
        before ``t``, or None if there is none (the layer is causal).
    """
    raise NotImplementedError(
        "implement peeks_ahead(layer, x): the first position t whose token, once changed, "
        "changes an output at a position before t, or None (see "
        "exercises/attention_layer/README.md)"
    )
