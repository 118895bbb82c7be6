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

__all__ = ["causal_mask", "padding_mask"]



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
