"""A decoder-only language model built from the package's attention, LLaMA-style.

This is the architecture of SmolLM2 and the LLaMA family, small enough to read in one
sitting: token embeddings (no position table), then ``num_layers`` blocks, each

    x = x + attention(rms_norm(x))      # causal, RoPE, grouped-query heads
    x = x + mlp(rms_norm(x))            # gated: down(silu(gate(x)) * up(x))

then a last RMSNorm and a linear map to one logit per vocabulary entry, with the
embedding table as its weight. The attention is :class:`attnbook.layers.MultiHeadAttention`
and the key/value cache is :class:`attnbook.efficient.KVCache`: nothing here is a second
copy of either. :func:`attnbook.pretrained.load_decoder` fills it with SmolLM2's weights.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import require_divides, require_int, require_real, require_tensor
from .efficient import KVCache
from .layers import MultiHeadAttention

__all__ = ["Decoder", "DecoderBlock", "DecoderConfig", "DecoderOutput", "GatedMLP", "RMSNorm"]


@dataclass(frozen=True)
class DecoderConfig:
    """The sizes of a :class:`Decoder`.

    Args:
        vocab_size: number of tokens in the vocabulary.
        d_model: width of the residual stream.
        num_layers: number of blocks.
        num_heads: query heads per attention layer (``d_head = d_model / num_heads``).
        num_kv_heads: key/value heads per attention layer, dividing ``num_heads``.
        d_ff: hidden width of the gated MLP.
        rope_base: the frequency base of RoPE.
        eps: the RMSNorm's epsilon.
    """

    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    d_ff: int
    rope_base: float = 10000.0
    eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "num_kv_heads",
                     "d_ff"):
            require_int(name, getattr(self, name))
        require_real("rope_base", self.rope_base)
        require_real("eps", self.eps)
        require_divides("num_heads", self.num_heads, "d_model", self.d_model)
        require_divides("num_kv_heads", self.num_kv_heads, "num_heads", self.num_heads)

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    def cache_bytes_per_token(self, bytes_per_number: int = 4) -> int:
        """What one token adds to a full key/value cache:
        ``2 * num_layers * num_kv_heads * d_head * bytes_per_number`` (keys and values)."""
        bytes_per_number = require_int("bytes_per_number", bytes_per_number)
        return 2 * self.num_layers * self.num_kv_heads * self.d_head * bytes_per_number


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension (Zhang and Sennrich,
    2019): a layer norm without the mean subtraction and without a bias. Computed in
    float32 whatever the input's dtype, as LLaMA does."""

    def __init__(self, width: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.width = require_int("width", width)
        self.eps = require_real("eps", eps)
        self.weight = nn.Parameter(torch.ones(self.width))

    def forward(self, x: Tensor) -> Tensor:
        x = require_tensor("x", x)
        if x.shape[-1:] != (self.width,):
            raise ValueError(f"x must have shape (..., {self.width}), got {tuple(x.shape)}")
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class GatedMLP(nn.Module):
    """The feed-forward part of a block: ``down(silu(gate(x)) * up(x))`` (Shazeer, 2020)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderBlock(nn.Module):
    """One block: pre-norm causal attention and a pre-norm gated MLP, each added back."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.d_model, config.eps)
        self.attn = MultiHeadAttention(
            config.d_model, config.num_heads, num_kv_heads=config.num_kv_heads, bias=False,
            causal=True, position="rope", rope_base=config.rope_base)
        self.mlp_norm = RMSNorm(config.d_model, config.eps)
        self.mlp = GatedMLP(config.d_model, config.d_ff)

    def forward(self, x: Tensor, mask: Tensor | None = None, *,
                cache: KVCache | None = None,
                return_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """``x`` ``(B, L, d_model)`` -> ``(x, weights)``, weights ``(B, h, L, S)`` or None."""
        attended, weights = self.attn(self.attn_norm(x), mask=mask, cache=cache,
                                      return_weights=return_weights)
        x = x + attended
        return x + self.mlp(self.mlp_norm(x)), weights


class DecoderOutput(NamedTuple):
    """What :meth:`Decoder.forward` returns: logits ``(B, L, vocab)``; when asked for,
    the attention weights of every layer, ``(layers, B, h, L, S)``; and when asked for,
    the hidden states ``(layers + 1, B, L, d_model)``: the residual stream entering each
    block, then the last block's output after the final RMSNorm."""

    logits: Tensor
    weights: Tensor | None
    hidden: Tensor | None = None


class Decoder(nn.Module):
    """A LLaMA-style decoder-only language model (see the module's docstring)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        if not isinstance(config, DecoderConfig):
            raise TypeError(f"config must be a DecoderConfig, got {type(config).__name__}")
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(DecoderBlock(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.d_model, config.eps)

    @classmethod
    def from_weights(cls, config: DecoderConfig, state: Mapping[str, Tensor]) -> Decoder:
        """A decoder whose parameters are the tensors of ``state`` (a full state dict),
        without the random initialisation that would be overwritten anyway (a second for
        135M parameters).

        Raises:
            TypeError: for a config that is not a :class:`DecoderConfig`.
            RuntimeError: for missing, unexpected or mis-shaped entries in ``state``
                (from ``load_state_dict``).
        """
        with _without_initialisation():
            decoder = cls(config)
        decoder.load_state_dict(state, assign=True)
        return decoder

    def new_caches(self, *, recent: int | None = None, sinks: int = 0) -> list[KVCache]:
        """One empty :class:`~attnbook.efficient.KVCache` per block (with an optional
        sliding window of ``recent`` positions and ``sinks`` first ones)."""
        return [KVCache(recent=recent, sinks=sinks) for _ in self.blocks]

    def forward(self, ids: Tensor, *, mask: Tensor | None = None,
                caches: list[KVCache] | None = None,
                return_weights: bool = False, return_hidden: bool = False) -> DecoderOutput:
        """Logits for every position of ``ids``.

        Args:
            ids: token ids, ``(B, L)`` or ``(L,)`` (a batch of one).
            mask: an extra boolean ``(L, L)`` mask on top of the causal one (a sliding
                window, for instance); not with ``caches``.
            caches: one :class:`~attnbook.efficient.KVCache` per block
                (:meth:`new_caches`): ``ids`` are then the tokens after those cached, and
                their keys and values are added.
            return_weights: also return every layer's attention weights.
            return_hidden: also return the hidden states.

        Returns:
            ``DecoderOutput(logits, weights, hidden)``: logits ``(B, L, vocab_size)``.

        Raises:
            TypeError: for ids that are not an integer tensor.
            ValueError: for ids of the wrong shape or out of the vocabulary, a cache list
                of the wrong length, or ``mask`` together with ``caches``.
        """
        ids = require_tensor("ids", ids)
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise TypeError(f"ids must hold integer token ids, got dtype {ids.dtype}")
        if ids.dim() == 1:
            ids = ids[None]  # (1, L)
        if ids.dim() != 2 or ids.shape[1] == 0:
            raise ValueError(f"ids must have shape (B, L) or (L,) with L >= 1, got "
                             f"{tuple(ids.shape)}")
        if bool((ids < 0).any()) or bool((ids >= self.config.vocab_size).any()):
            raise ValueError(f"ids must lie in 0 .. {self.config.vocab_size - 1}")
        if caches is not None:
            if mask is not None:
                raise ValueError("pass a mask or caches, not both: a cache masks by the "
                                 "positions it holds (KVCache(recent=..., sinks=...))")
            if len(caches) != len(self.blocks):
                raise ValueError(f"caches must hold one KVCache per block "
                                 f"({len(self.blocks)}), got {len(caches)}")
        x = self.embed(ids)  # (B, L, d_model)
        all_weights, hidden = [], []
        for index, block in enumerate(self.blocks):
            cache = None if caches is None else caches[index]
            hidden.append(x)
            x, weights = block(x, mask, cache=cache, return_weights=return_weights)
            all_weights.append(weights)
        x = self.norm(x)
        hidden.append(x)
        logits = F.linear(x, self.embed.weight)  # (B, L, vocab): the embedding table, tied
        return DecoderOutput(logits, torch.stack(all_weights) if return_weights else None,
                             torch.stack(hidden) if return_hidden else None)

    @torch.no_grad()
    def generate(self, ids: Tensor, new_tokens: int, *, use_cache: bool = True
                 ) -> tuple[list[int], Tensor]:
        """Greedy generation: ``new_tokens`` times, append the most likely next token.

        With ``use_cache=True`` the prompt is processed at once (prefill) and every
        later step feeds only the newest token through the model, reading the earlier
        keys and values from a cache. With ``use_cache=False`` every step runs the whole
        sequence again. Both give the same tokens.

        Args:
            ids: the prompt's token ids, ``(L,)``.
            new_tokens: how many tokens to add.

        Returns:
            ``(tokens, logits)``: the ``new_tokens`` generated ids and the logits that
            chose them, ``(new_tokens, vocab_size)``.
        """
        ids = require_tensor("ids", ids)
        if ids.dim() != 1:
            raise ValueError(f"ids must have shape (L,), got {tuple(ids.shape)}")
        new_tokens = require_int("new_tokens", new_tokens)
        if not isinstance(use_cache, bool):
            raise TypeError(f"use_cache must be a bool, got {type(use_cache).__name__}")
        caches = self.new_caches() if use_cache else None
        sequence, chosen, step_logits = ids[None], [], []
        feed = sequence  # prefill: the whole prompt
        for _ in range(new_tokens):
            logits = self(feed if use_cache else sequence, caches=caches).logits[0, -1]
            token = int(logits.argmax())
            chosen.append(token)
            step_logits.append(logits)
            feed = torch.tensor([[token]], dtype=ids.dtype)
            sequence = torch.cat([sequence, feed], dim=1)
        return chosen, torch.stack(step_logits)  # (new_tokens, vocab_size)


_INIT_LOCK = threading.Lock()


@contextlib.contextmanager
def _without_initialisation() -> Iterator[None]:
    """Build ``nn.Linear`` and ``nn.Embedding`` layers with uninitialised memory."""
    with _INIT_LOCK:
        saved = nn.Linear.reset_parameters, nn.Embedding.reset_parameters
        nn.Linear.reset_parameters = nn.Embedding.reset_parameters = _leave_uninitialised
        try:
            yield
        finally:
            nn.Linear.reset_parameters, nn.Embedding.reset_parameters = saved


def _leave_uninitialised(module: nn.Module) -> None:
    del module
