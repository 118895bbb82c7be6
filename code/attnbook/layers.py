"""Attention layers with learned projections, from the simplest to multi-head.

Every layer computes its attention with :func:`attnbook.attention.attention`; none keeps a
second copy of the softmax or the masking rules.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._validate import (
    check_mask,
    layer_input,
    require_choice,
    require_divides,
    require_int,
    require_real,
    require_tensor,
)
from .attention import AttentionOutput, attention, grouped_attention
from .efficient import KVCache
from .masks import causal_mask
from .positions import alibi_bias, rope

__all__ = ["MultiHeadAttention", "SelfAttention", "SimpleAttention"]


class SimpleAttention(nn.Module):
    """Self-attention with query, key and value projections and NO scaling.

    ``softmax(Q K^T) V`` with ``Q, K, V = x W_q, x W_k, x W_v``. The unscaled version the
    book starts from; :class:`SelfAttention` adds the ``1/sqrt(d_k)`` factor.

    Args:
        n_embd: the width of the token vectors; each projection is
            ``nn.Linear(n_embd, n_embd)``.
    """

    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.n_embd = n_embd = require_int("n_embd", n_embd)
        self.query = nn.Linear(n_embd, n_embd)
        self.key = nn.Linear(n_embd, n_embd)
        self.value = nn.Linear(n_embd, n_embd)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> AttentionOutput:
        """``x``: ``(B, L, n_embd)`` -> output ``(B, L, n_embd)``, weights ``(B, L, L)``."""
        x = layer_input("x", x, self.n_embd, self.query.weight.dtype)
        q, k, v = self.query(x), self.key(x), self.value(x)  # each (B, L, n_embd)
        return attention(q, k, v, mask, scale=1.0)


class SelfAttention(nn.Module):
    """One head of scaled self-attention with its own projections.

    ``softmax(Q K^T / sqrt(d_k)) V`` with ``Q, K, V = x W_q, x W_k, x W_v``, each
    projection ``nn.Linear(d_model, d_k)``.

    Args:
        d_model: the width of the token vectors.
        d_k: the width of queries, keys and values; defaults to ``d_model``.
        bias: whether the projections have a bias.
    """

    def __init__(self, d_model: int, d_k: int | None = None, *, bias: bool = True) -> None:
        super().__init__()
        self.d_model = d_model = require_int("d_model", d_model)
        self.d_k = d_model if d_k is None else require_int("d_k", d_k)
        self.query = nn.Linear(d_model, self.d_k, bias=bias)
        self.key = nn.Linear(d_model, self.d_k, bias=bias)
        self.value = nn.Linear(d_model, self.d_k, bias=bias)

    def forward(self, x: Tensor, mask: Tensor | None = None, *,
                return_weights: bool = True) -> AttentionOutput:
        """``x``: ``(B, L, d_model)`` -> output ``(B, L, d_k)``, weights ``(B, L, L)``."""
        x = layer_input("x", x, self.d_model, self.query.weight.dtype)
        q, k, v = self.query(x), self.key(x), self.value(x)  # each (B, L, d_k)
        return attention(q, k, v, mask, return_weights=return_weights)


class MultiHeadAttention(nn.Module):
    """Multi-head attention as in Vaswani et al. (2017), with grouped-query heads as an option.

    The model width ``d_model`` is split into ``num_heads`` heads of width
    ``d_head = d_model // num_heads``; each head attends on its own, the heads are merged
    back and projected.

    With ``num_kv_heads`` below ``num_heads`` (grouped-query attention, Ainslie et al.,
    2023), the key and value projections make only ``num_kv_heads`` heads, each shared by
    ``num_heads / num_kv_heads`` consecutive query heads; ``num_kv_heads=1`` is
    multi-query attention (Shazeer, 2019). The key and value projections then have
    ``num_kv_heads * d_head`` outputs, and a :class:`~attnbook.efficient.KVCache` stores
    only those heads.

    Args:
        d_model: the width of the token vectors.
        num_heads: the number of query heads; must divide ``d_model``.
        num_kv_heads: the number of key/value heads, dividing ``num_heads``; ``None``
            means ``num_heads``.
        bias: whether the four projections have a bias.
        causal: whether every query sees only the keys at its position and before (the
            last ``L`` of ``S`` key positions, as in ``forward``), on top of any mask.
        position: where the layer puts positions into the scores: ``None`` (nowhere: the
            layer is permutation equivariant unless its input carries positions),
            ``"rope"`` (queries and keys rotated by :func:`~attnbook.positions.rope`,
            half-split, after the projections) or ``"alibi"`` (the biases of
            :func:`~attnbook.positions.alibi_bias` added to the scores; causal attention
            only, so ``forward`` then needs a mask).
        rope_base: the frequency base of ``"rope"``.

    Raises:
        ValueError: if ``num_heads`` is not at least 1 or does not divide ``d_model``,
            ``num_kv_heads`` does not divide ``num_heads``, an unknown ``position``, or
            ``"rope"`` with an odd ``d_head``.
    """

    def __init__(self, d_model: int, num_heads: int, *, num_kv_heads: int | None = None,
                 bias: bool = True, causal: bool = False, position: str | None = None,
                 rope_base: float = 10000.0) -> None:
        super().__init__()
        self.d_model = d_model = require_int("d_model", d_model)
        self.num_heads = num_heads = require_int("num_heads", num_heads)
        self.d_head = require_divides("num_heads", num_heads, "d_model", d_model,
                                      ": each head needs d_model / num_heads features")
        self.num_kv_heads = num_heads if num_kv_heads is None else require_int(
            "num_kv_heads", num_kv_heads)
        require_divides("num_kv_heads", self.num_kv_heads, "num_heads", num_heads,
                        ": each key/value head serves the same number of query heads")
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
        self.causal = causal
        self.position = None if position is None else require_choice(
            "position", position, {"rope": "rope", "alibi": "alibi"})
        self.rope_base = require_real("rope_base", rope_base)
        if self.position == "rope" and self.d_head % 2:
            raise ValueError(
                f'position="rope" needs an even d_head (features rotate in pairs), got '
                f"d_head={self.d_head}"
            )
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        kv_width = self.num_kv_heads * self.d_head
        self.k_proj = nn.Linear(d_model, kv_width, bias=bias)
        self.v_proj = nn.Linear(d_model, kv_width, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: Tensor, heads: int | None = None) -> Tensor:
        """``(..., L, heads * d_head)`` -> ``(..., heads, L, d_head)``: a view, then a
        transpose. ``heads`` defaults to ``num_heads`` (pass ``num_kv_heads`` for keys
        and values)."""
        x = require_tensor("x", x)
        heads = self.num_heads if heads is None else require_int("heads", heads)
        width = heads * self.d_head
        if x.dim() < 2 or x.shape[-1] != width:
            expected = (f"d_model={width}" if heads == self.num_heads
                        else f"{heads} heads x d_head={self.d_head} = {width}")
            raise ValueError(f"x must have shape (..., L, {expected}), got {tuple(x.shape)}")
        x = x.unflatten(-1, (heads, self.d_head))  # (..., L, heads, d_head)
        return x.transpose(-3, -2)  # (..., heads, L, d_head)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(..., h, L, d_head)`` -> ``(..., L, d_model)``, the inverse of ``split_heads``."""
        x = require_tensor("x", x)
        if x.dim() < 3 or x.shape[-3] != self.num_heads or x.shape[-1] != self.d_head:
            raise ValueError(
                f"x must have shape (..., h={self.num_heads}, L, d_head={self.d_head}), "
                f"got {tuple(x.shape)}"
            )
        x = x.transpose(-3, -2)  # (..., L, h, d_head)
        return x.flatten(-2)  # (..., L, d_model)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Tensor | None = None,
        return_weights: bool = True,
        *,
        cache: KVCache | None = None,
    ) -> AttentionOutput:
        """Attend from ``query`` to ``key``/``value``.

        With ``position="rope"`` or ``"alibi"``, the keys sit at positions ``0 .. S-1`` and
        the queries at the last ``L`` of them, ``S-L .. S-1`` (self-attention: both
        ``0 .. L-1``).

        With a ``cache`` (causal self-attention while generating), the ``L`` new tokens
        sit at positions ``cache.next_position`` onwards: their keys and values (after
        RoPE, ``num_kv_heads`` heads) are appended to the cache, and their queries attend
        over everything it holds.

        Args:
            query: ``(B, L, d_model)``.
            key: ``(B, S, d_model)``; defaults to ``query`` (self-attention).
            value: ``(B, S, d_model)``; defaults to ``key``.
            mask: boolean, ``True`` = may attend, broadcastable to ``(L, S)``,
                ``(B, L, S)`` or ``(B, h, L, S)``; a mask without a head dimension
                applies to every head.
            return_weights: when ``False``, the weights are ``None`` and the fused kernel
                is used.
            cache: a :class:`~attnbook.efficient.KVCache` of this layer's earlier keys
                and values; only with ``causal=True``, no ``key``, ``value`` or ``mask``,
                and no ALiBi.

        Returns:
            ``AttentionOutput`` with output ``(B, L, d_model)`` and per-head weights
            ``(B, h, L, S)`` (with a cache, ``S`` is what the cache holds).
        """
        if cache is not None:
            return self._forward_cached(query, cache, return_weights)
        dtype = self.q_proj.weight.dtype
        query = layer_input("query", query, self.d_model, dtype, batched=True)
        key = query if key is None else layer_input("key", key, self.d_model, dtype,
                                                     batched=True)
        value = key if value is None else layer_input("value", value, self.d_model, dtype,
                                                       batched=True)
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"key and value must have the same (B, S): key has shape {tuple(key.shape)}, "
                f"value has shape {tuple(value.shape)}"
            )
        if key.shape[0] != query.shape[0]:
            raise ValueError(
                f"query and key must have the same batch size B: query has shape "
                f"{tuple(query.shape)}, key has shape {tuple(key.shape)}"
            )
        L, S = query.shape[1], key.shape[1]
        if mask is not None:
            mask = check_mask(mask, L, S)
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)  # (B, 1, L, S): the same mask for every head
            elif mask.dim() > 4:
                raise ValueError(
                    f"mask must broadcast to (L, S), (B, L, S) or (B, h, L, S), got shape "
                    f"{tuple(mask.shape)}"
                )

        if self.causal:
            allowed = causal_mask(L, S, offset=S - L, device=query.device)  # (L, S)
            mask = allowed if mask is None else mask & allowed
        if self.position == "alibi" and mask is None:
            raise ValueError(
                'position="alibi" needs a mask, normally the causal mask: its bias '
                "-slope * (i - j) rewards the keys after each query, so it is meant for "
                "causal attention (or build the layer with causal=True)"
            )
        if self.position is not None and S < L:
            raise ValueError(
                f'position="{self.position}" puts the L={L} queries at the last L of the '
                f"S={S} key positions, so S must be at least L"
            )

        q = self.split_heads(self.q_proj(query))  # (B, h, L, d_head)
        k = self.split_heads(self.k_proj(key), self.num_kv_heads)  # (B, h_kv, S, d_head)
        v = self.split_heads(self.v_proj(value), self.num_kv_heads)  # (B, h_kv, S, d_head)
        score_bias = None
        if self.position == "rope":
            key_positions = torch.arange(S, device=k.device)  # (S,)
            q = rope(q, key_positions[S - L:], self.rope_base)  # (B, h, L, d_head)
            k = rope(k, key_positions, self.rope_base)  # (B, h, S, d_head)
        elif self.position == "alibi":
            score_bias = alibi_bias(self.num_heads, L, S).to(q.device)  # (h, L, S)
        attend = attention if self.num_kv_heads == self.num_heads else grouped_attention
        heads, weights = attend(q, k, v, mask, bias=score_bias,
                                return_weights=return_weights)
        output = self.out_proj(self.merge_heads(heads))  # (B, L, d_model)
        return AttentionOutput(output, weights)  # weights: (B, h, L, S) or None

    def _forward_cached(self, x: Tensor, cache: KVCache,
                        return_weights: bool) -> AttentionOutput:
        """``forward`` for new tokens ``x`` ``(B, L, d_model)`` with a key/value cache."""
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}")
        if not self.causal or self.position == "alibi":
            raise ValueError(
                "a cache needs causal self-attention: build the layer with causal=True "
                "(and RoPE or no positions, not ALiBi)"
            )
        x = layer_input("query", x, self.d_model, self.q_proj.weight.dtype, batched=True)
        L = x.shape[1]
        q = self.split_heads(self.q_proj(x))  # (B, h, L, d_head)
        k = self.split_heads(self.k_proj(x), self.num_kv_heads)  # (B, h_kv, L, d_head)
        v = self.split_heads(self.v_proj(x), self.num_kv_heads)  # (B, h_kv, L, d_head)
        if self.position == "rope":
            # The cache, not len(cache), knows where the new tokens are in the text.
            positions = torch.arange(cache.next_position, cache.next_position + L,
                                     device=x.device)  # (L,)
            q = rope(q, positions, self.rope_base)
            k = rope(k, positions, self.rope_base)
        cache.append(k, v)
        heads, weights = cache.attend(q, return_weights=return_weights)  # (B, h, L, d_head)
        return AttentionOutput(self.out_proj(self.merge_heads(heads)), weights)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of a ``batch_first=True`` ``nn.MultiheadAttention`` with the same weights.

        The copy gives the same output and the same per-head weights as ``module`` (called
        with ``need_weights=True, average_attn_weights=False`` and the opposite mask
        polarity, ``attn_mask=~mask``). Dropout is not copied: compare in ``eval()`` mode.

        Raises:
            TypeError: if ``module`` is not an ``nn.MultiheadAttention``.
            ValueError: for a module this class cannot mirror (``batch_first=False``,
                different key/value widths, ``add_bias_kv`` or ``add_zero_attn``).
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(
                f"module must be an nn.MultiheadAttention, got {type(module).__name__}"
            )
        if not module.batch_first:
            raise ValueError("module must be built with batch_first=True, as this class is")
        if not module._qkv_same_embed_dim:
            raise ValueError("module must have kdim == vdim == embed_dim")
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("module must not use add_bias_kv or add_zero_attn")
        has_bias = module.in_proj_bias is not None
        copy = cls(module.embed_dim, module.num_heads, bias=has_bias)
        copy = copy.to(device=module.in_proj_weight.device, dtype=module.in_proj_weight.dtype)
        weights = module.in_proj_weight.detach().chunk(3)  # 3 x (d_model, d_model)
        biases = module.in_proj_bias.detach().chunk(3) if has_bias else (None,) * 3
        projections = (copy.q_proj, copy.k_proj, copy.v_proj)
        for proj, weight, bias in zip(projections, weights, biases, strict=True):
            proj.weight.data.copy_(weight)
            if bias is not None:
                proj.bias.data.copy_(bias)
        copy.out_proj.weight.data.copy_(module.out_proj.weight.detach())
        if has_bias:
            copy.out_proj.bias.data.copy_(module.out_proj.bias.detach())
        return copy
