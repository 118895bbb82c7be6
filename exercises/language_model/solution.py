"""Exercise language-model-ex3: one decoding step with RoPE and a key/value cache.

Replace the `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/language_model` from the repository root.
"""

from __future__ import annotations

import torch

from attnbook.efficient import KVCache
from attnbook.positions import rope  # noqa: F401  (you will want it)


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
