"""Solutions of the chapter `language-model`, written from scratch in plain torch.

exercises/language_model holds the chapter's four checked exercises: repeat_kv
(language-model-ex1), cache_bytes_per_token (language-model-ex2), cached_rope_step
(language-model-ex3) and window_mask (language-model-ex4).
cached_rope_step uses the cache it is given (its next_position, append and attend) and
nothing else of the package.
"""

from __future__ import annotations

import torch


def repeat_kv(kv: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(..., h_kv, S, E) -> (..., num_heads, S, E): head j serves j*g .. j*g+g-1."""
    h_kv = kv.shape[-3]
    if num_heads % h_kv:
        raise ValueError(
            f"num_heads={num_heads} is not a multiple of the {h_kv} key/value heads"
        )
    groups = num_heads // h_kv
    return kv.repeat_interleave(groups, dim=-3)  # (..., h, S, E)


def cache_bytes_per_token(config, bytes_per_number: int = 4) -> int:
    """Bytes one token adds to a full key/value cache: keys and values, every layer."""
    d_head = config.d_model // config.num_heads
    numbers = 2 * config.num_layers * config.num_kv_heads * d_head  # keys and values
    return numbers * bytes_per_number


def _rope_half_split(x: torch.Tensor, position: int, base: float) -> torch.Tensor:
    """(..., 1, E): feature i and i + E/2 turned by position · base^(-2i/E)."""
    E = x.shape[-1]
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)  # (E/2,)
    angle = (position * theta).to(x.dtype)  # (E/2,)
    first, second = x[..., : E // 2], x[..., E // 2:]  # (..., 1, E/2) each
    turned = [first * angle.cos() - second * angle.sin(),
              first * angle.sin() + second * angle.cos()]
    return torch.cat(turned, dim=-1)  # (..., 1, E)


def cached_rope_step(q_new: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                     cache, base: float = 10000.0) -> torch.Tensor:
    """One token: rotate at cache.next_position, cache k and v, attend: (B, h, 1, E)."""
    position = cache.next_position  # every token ever appended, dropped ones included
    q = _rope_half_split(q_new, position, base)  # (B, h, 1, E)
    k = _rope_half_split(k_new, position, base)  # (B, h_kv, 1, E)
    cache.append(k, v_new)
    return cache.attend(q).output  # (B, h, 1, E)


def window_mask(L: int, recent: int, sinks: int = 0) -> torch.Tensor:
    """(L, L) bool: query i sees key j <= i if i - j < recent or j < sinks."""
    i = torch.arange(L)[:, None]  # (L, 1), the queries
    j = torch.arange(L)[None, :]  # (1, L), the keys
    return (j <= i) & ((i - j < recent) | (j < sinks))  # (L, L)
