"""Exercises cache-budget-ex1 and cache-budget-ex3: keys rounded per channel with the bytes
they take, and one eviction step of a heavy-hitter cache.

Replace each `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/cache_budget` from the repository root.
"""

from __future__ import annotations

import torch


def quantize_keys(keys: torch.Tensor, bits: int, group: int) -> tuple[torch.Tensor, int]:
    """Round keys per channel, min-max, and count the bytes a cache stores for them.

    Args:
        keys: ``(t, C)``: ``t`` tokens of ``C`` channels, a floating dtype.
        bits: bits per code, 1 to 8.
        group: tokens per block; it divides ``t``. Each channel gets its own minimum and
            step in each block of ``group`` consecutive tokens.

    Returns:
        ``(rounded, nbytes)``: the rounded keys, ``(t, C)`` in the dtype of ``keys``, and
        the bytes stored, an int: every code in ``bits`` bits, packed, plus a 16-bit
        minimum and a 16-bit step per block. A block whose numbers are all equal comes
        back as it was.
    """
    raise NotImplementedError(
        "implement quantize_keys(keys, bits, group): for each channel and each block of "
        "group tokens, round to the nearest of 2**bits levels between the block's minimum "
        "and maximum, and return (rounded, nbytes) (see exercises/cache_budget/README.md)"
    )


def evict_one(received: torch.Tensor, positions: torch.Tensor, recent: int,
              sinks: int) -> int:
    """The position a heavy-hitter cache one position over its budget evicts.

    Args:
        received: ``(t,)``: the attention each held key has received so far.
        positions: ``(t,)``: the positions held, increasing; the last is the newest.
        recent: how many of the newest positions are always kept.
        sinks: positions below ``sinks`` are always kept.

    Returns:
        The evicted position (an int): the least attended of the positions that are
        neither sinks nor among the ``recent`` newest.
    """
    raise NotImplementedError(
        "implement evict_one(received, positions, recent, sinks): leave out the sinks and "
        "the recent newest, and return the position of the least attended of the others "
        "(see exercises/cache_budget/README.md)"
    )
