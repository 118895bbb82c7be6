"""Boolean attention masks. ``True`` means "may attend", as in PyTorch's SDPA.

Beware: ``torch.nn.MultiheadAttention`` reads a boolean ``attn_mask`` the other way round
(``True`` = may NOT attend). Pass it ``~mask``.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch import Tensor

from ._validate import require_int

__all__ = ["causal_mask", "padding_mask", "position_mask", "sliding_window_mask"]



def causal_mask(L: int, S: int | None = None, *, offset: int = 0,
                device: torch.device | str | None = None) -> Tensor:
    """The causal mask: query ``i`` may attend to keys ``0..i + offset``.

    With the default ``offset=0`` each query sees itself and the keys before it. A positive
    ``offset`` lets query ``i`` see ``offset`` keys past its own position: with a cache of
    ``S`` keys and the last ``L`` queries, ``offset=S - L`` puts query ``i`` at position
    ``S - L + i``.

    Args:
        L: number of queries.
        S: number of keys; defaults to ``L``.
        offset: how far past key ``i`` query ``i`` may see (any int; a negative offset
            leaves the first rows with no key).
        device: where to create the mask.

    Returns:
        A boolean tensor of shape ``(L, S)``, ``True`` where ``j <= i + offset``.

    Raises:
        TypeError: if ``L``, ``S`` or ``offset`` is not an int.
        ValueError: if ``L`` or ``S`` is smaller than 1.
    """
    L = require_int("L", L)
    S = L if S is None else require_int("S", S)
    offset = require_int("offset", offset, minimum=None)
    return torch.ones(L, S, dtype=torch.bool, device=device).tril(offset)  # (L, S)


def position_mask(query_positions: Tensor, key_positions: Tensor, *,
                  recent: int | None = None, sinks: int = 0) -> Tensor:
    """The causal mask between tokens at given positions, with an optional sliding window.

    A query at position ``p`` may attend to a key at position ``j`` when ``j <= p`` and,
    with a window, when the key is one of the ``recent`` latest positions up to ``p``
    (``p - j < recent``) or one of the first ``sinks`` positions of the text
    (``j < sinks``), the "attention sinks" that StreamingLLM keeps (Xiao et al., 2024).
    Positions need not be contiguous: a key/value cache that dropped old tokens passes the
    positions it still holds.

    Args:
        query_positions: ``(L,)`` integer positions of the queries.
        key_positions: ``(S,)`` integer positions of the keys.
        recent: the window's width, counting the query itself; ``None`` for no window.
        sinks: how many first positions stay visible whatever the window.

    Returns:
        A boolean tensor of shape ``(L, S)``, ``True`` where the query may attend.

    Raises:
        TypeError: for positions that are not integer tensors, or a non-int ``recent`` or
            ``sinks``.
        ValueError: for positions that are not one-dimensional, ``recent`` below 1 or
            negative ``sinks``.
    """
    for name, positions in (("query_positions", query_positions),
                            ("key_positions", key_positions)):
        if not isinstance(positions, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(positions).__name__}")
        if positions.dtype.is_floating_point or positions.dtype.is_complex or \
                positions.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got dtype {positions.dtype}")
        if positions.dim() != 1:
            raise ValueError(f"{name} must be one-dimensional, got shape "
                             f"{tuple(positions.shape)}")
    sinks = require_int("sinks", sinks, minimum=0)
    p, j = query_positions[:, None], key_positions[None, :]  # (L, 1), (1, S)
    allowed = j <= p  # (L, S)
    if recent is not None:
        recent = require_int("recent", recent)
        allowed &= (p - j < recent) | (j < sinks)
    return allowed  # (L, S)


def sliding_window_mask(L: int, recent: int, *, sinks: int = 0,
                        device: torch.device | str | None = None) -> Tensor:
    """The ``(L, L)`` causal mask of a sliding window with ``sinks`` kept first tokens.

    Query ``i`` sees key ``j <= i`` when ``i - j < recent`` or ``j < sinks``: the mask
    that a cache of the ``sinks`` first and the ``recent`` latest tokens imposes, so one
    forward pass under it gives what token-by-token decoding with that cache gives.
    ``recent >= L`` is the plain causal mask. See :func:`position_mask`.

    Raises:
        TypeError: for non-int arguments.
        ValueError: for ``L`` or ``recent`` below 1, or negative ``sinks``.
    """
    L = require_int("L", L)
    positions = torch.arange(L, device=device)  # (L,)
    return position_mask(positions, positions, recent=require_int("recent", recent),
                         sinks=sinks)


def padding_mask(lengths: Sequence[int] | Tensor, max_len: int | None = None) -> Tensor:
    """A key-padding mask for a batch of sequences padded at the end.

    Args:
        lengths: the real length of each of the ``B`` sequences (ints or a 1-D integer
            tensor).
        max_len: the padded length; defaults to the longest length.

    Returns:
        A boolean tensor of shape ``(B, 1, max_len)``, ``True`` on real tokens. The middle
        dimension of size 1 broadcasts over queries, so it can be passed to attention with
        weights of shape ``(B, L, max_len)``.

    Raises:
        TypeError: if ``lengths`` holds something other than integers, or ``max_len`` is
            not an int.
        ValueError: for a negative length, a length beyond ``max_len``, no lengths with no
            ``max_len``, or ``lengths`` that is not one-dimensional.
    """
    if isinstance(lengths, Tensor):
        if lengths.dtype.is_floating_point or lengths.dtype.is_complex or \
                lengths.dtype == torch.bool:
            raise TypeError(f"lengths must hold integers, got a tensor of dtype {lengths.dtype}")
        if lengths.dim() != 1:
            raise ValueError(
                f"lengths must be one-dimensional (B,), got shape {tuple(lengths.shape)}"
            )
        device = lengths.device
        values = [int(n) for n in lengths.tolist()]
    else:
        if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
            raise TypeError(
                f"lengths must be a sequence of ints or a 1-D tensor, got "
                f"{type(lengths).__name__}"
            )
        for n in lengths:
            if isinstance(n, bool) or not isinstance(n, numbers.Integral):
                raise TypeError(f"lengths must hold ints, got {type(n).__name__} ({n!r})")
        device = None
        values = [int(n) for n in lengths]
    for n in values:
        if n < 0:
            raise ValueError(f"lengths must be non-negative, got {n} in {values}")
    if max_len is None:
        if not values:
            raise ValueError("lengths is empty: pass max_len to say how long the mask is")
        max_len = max(values)
    else:
        max_len = require_int("max_len", max_len, minimum=0)
        too_long = [n for n in values if n > max_len]
        if too_long:
            raise ValueError(f"lengths {too_long} exceed max_len={max_len}")
    positions = torch.arange(max_len, device=device)  # (max_len,)
    real = torch.tensor(values, dtype=torch.long, device=device)  # (B,)
    return (positions < real[:, None])[:, None, :]  # (B, 1, max_len)
