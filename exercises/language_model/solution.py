"""Exercises language-model-ex1, language-model-ex2, language-model-ex3 and language-model-ex4:
grouped key/value heads expanded, the size of a key/value cache, one decoding step with RoPE
and a cache, and a sliding window with attention sinks.

Replace each `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/language_model` from the repository root.
"""

from __future__ import annotations

import torch

from attnbook.decoder import DecoderConfig
from attnbook.efficient import KVCache
from attnbook.positions import rope  # noqa: F401  (you will want it)


def repeat_kv(kv: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Expand grouped keys or values so that every query head has its own copy.

    Args:
        kv: keys or values, ``(..., h_kv, S, E)``, any dtype; key/value head ``j`` serves
            the ``g = num_heads // h_kv`` consecutive query heads ``j·g .. j·g + g - 1``.
        num_heads: the number of query heads ``h``, a multiple of ``h_kv``.

    Returns:
        ``(..., num_heads, S, E)`` with the dtype of ``kv``: head ``i`` is a copy of
        key/value head ``i // g``. A ``num_heads`` that ``h_kv`` does not divide raises a
        ValueError that names ``num_heads``.
    """
    raise NotImplementedError(
        "implement repeat_kv(kv, num_heads): expand kv (..., h_kv, S, E) to "
        "(..., num_heads, S, E), each key/value head repeated for its g = num_heads // h_kv "
        "consecutive query heads, and raise a ValueError if h_kv does not divide num_heads "
        "(see exercises/language_model/README.md)"
    )


def cache_bytes_per_token(config: DecoderConfig, bytes_per_number: int = 4) -> int:
    """The bytes one token adds to a full key/value cache of a decoder of these sizes.

    Args:
        config: the decoder's sizes: ``num_layers``, ``num_heads``, ``num_kv_heads``,
            ``d_model`` and ``d_head = d_model // num_heads``.
        bytes_per_number: the size of one cached number: 4 for float32, 2 for bfloat16.

    Returns:
        A whole number of bytes (an int).
    """
    raise NotImplementedError(
        "implement cache_bytes_per_token(config, bytes_per_number=4): the bytes of the keys "
        "and values that one token adds to the cache of every layer, as an int (see "
        "exercises/language_model/README.md)"
    )


def cached_rope_step(q_new: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                     cache: KVCache, base: float = 10000.0) -> torch.Tensor:
    """Attend from one new token over the cache, rotated at its position in the text.

    Args:
        q_new: the new token's queries, ``(B, h, 1, E)``.
        k_new: its keys, ``(B, h_kv, 1, E)``, not rotated yet.
        v_new: its values, ``(B, h_kv, 1, E)``.
        cache: the keys (rotated) and values of the tokens before it; it may have a
            sliding window that dropped old tokens.
        base: the RoPE frequency base (100000 in SmolLM2).

    Returns:
        The attention output of the new token, ``(B, h, 1, E)``. The cache now holds
        its rotated key and its value; q_new, k_new and v_new are not changed.
    """
    raise NotImplementedError(
        "implement cached_rope_step(q_new, k_new, v_new, cache, base): rotate q_new "
        "and k_new with RoPE at the new token's position, cache.next_position, append "
        "the rotated key and v_new to the cache, and return cache.attend(q).output "
        "(see exercises/language_model/README.md)"
    )


def window_mask(L: int, recent: int, sinks: int = 0) -> torch.Tensor:
    """The mask of a sliding window with attention sinks, True where a query may attend.

    Args:
        L: the number of tokens, queries and keys alike.
        recent: how many of the latest keys a query sees, its own included.
        sinks: how many of the first keys every later query sees, whatever the window.

    Returns:
        A boolean ``(L, L)`` tensor, rows queries ``i`` and columns keys ``j``: True where
        ``j <= i`` and either ``i - j < recent`` or ``j < sinks``.
    """
    raise NotImplementedError(
        "implement window_mask(L, recent, sinks=0): a boolean (L, L) mask, True where query "
        "i may see key j: j <= i and either j is one of the recent latest keys or one of "
        "the first sinks keys (see exercises/language_model/README.md)"
    )
