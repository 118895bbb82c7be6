"""Induction heads: the data that calls for them, a model small enough to grow them, and
the measurements that find them, in a toy model and in a real one.

An *induction head* completes a pattern it has seen earlier in the same text: at a token
``A`` whose earlier occurrence was followed by ``B``, it attends to that ``B`` and
predicts ``B`` again (Elhage et al., 2021). On a sequence of random tokens repeated twice,
that is the only way to predict the second copy, so the loss there shows whether a model
has them.

- :func:`repeat_twice` and :class:`RepeatedTokens` make such sequences, with the masks of
  the positions whose next token is in the first copy (unpredictable) and in the second.
- :class:`AttentionOnlyTransformer` is the smallest model that can grow the circuit:
  token and position embeddings, attention layers that add to a residual stream, no MLP.
  Its ``bypass`` option cuts one path: later layers' queries, keys or values read only
  the embeddings, not the earlier layers' outputs.
- :func:`train_induction` trains it and records the loss on both copies.
- :func:`previous_token_score`, :func:`prefix_matching_score` and :func:`copying_scores`
  score heads from their weights; :func:`ablate_heads` switches heads off.

The same scores and ablations work on :class:`attnbook.decoder.Decoder` (SmolLM2).
Shapes: tokens ``(B, L)``; attention weights ``(..., L, S)``; ``layers`` is a list of
:class:`~attnbook.layers.MultiHeadAttention`.
"""

from __future__ import annotations

import contextlib
import numbers
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import require_choice, require_generator, require_int, require_real, require_tensor
from .decoder import Decoder
from .layers import MultiHeadAttention
from .timing import one_thread

__all__ = [
    "AttentionOnlyTransformer",
    "CircuitOutput",
    "InductionBatch",
    "InductionHistory",
    "RepeatedTokens",
    "ablate_heads",
    "attention_layers",
    "copy_losses",
    "copying_score",
    "copying_scores",
    "prefix_matching_score",
    "previous_token_score",
    "repeat_twice",
    "replace_heads",
    "train_induction",
]

#: Seed of the held-out batch :func:`train_induction` evaluates on, the same for every seed.
_HELD_OUT_SEED = 1_000_003
#: The target past a sequence's end: cross-entropy's ``ignore_index``, not a mask fill.
IGNORED_TARGET = -100
#: The inputs a ``bypass`` may name.
_INPUTS = ("query", "key", "value")


# --------------------------------------------------------------------------------------
# Data: random tokens, repeated
# --------------------------------------------------------------------------------------


class InductionBatch(NamedTuple):
    """Next-token data on repeated sequences, all ``(B, L)``.

    ``inputs`` and ``targets`` are token ids (``targets[:, t]`` is the token after
    ``inputs[:, t]``, or ``-100``, which cross-entropy ignores, past a sequence's end);
    ``first`` marks the positions whose target is in the first copy (random: no model can
    predict it), ``second`` those whose target is in the second copy (a repeat of a token
    the position can see).
    """

    inputs: Tensor
    targets: Tensor
    first: Tensor
    second: Tensor


def repeat_twice(tokens: Tensor) -> InductionBatch:
    """The sequences ``tokens`` followed by ``tokens`` again, as next-token data.

    With ``T`` tokens in a copy, the sequence has ``2T`` tokens; ``inputs`` are the first
    ``2T - 1`` and ``targets`` the last ``2T - 1``. The target of position ``t`` is in the
    second copy for ``t >= T``; it is in the first for ``t <= T - 2``; position ``T - 1``
    (which predicts the first token again) is in neither.

    Args:
        tokens: ``(B, T)`` or ``(T,)`` integer token ids, ``T >= 2``.

    Raises:
        TypeError: for a tensor that does not hold integers.
        ValueError: for another shape or ``T < 2``.
    """
    tokens = _token_ids("tokens", tokens)
    T = tokens.shape[1]
    if T < 2:
        raise ValueError(f"tokens must hold at least 2 tokens per copy, got T={T}")
    sequence = torch.cat([tokens, tokens], dim=1)  # (B, 2T)
    t = torch.arange(2 * T - 1)  # (2T - 1,)
    first = (t <= T - 2).expand(tokens.shape[0], -1)  # (B, 2T - 1)
    second = (t >= T).expand(tokens.shape[0], -1)  # (B, 2T - 1)
    return InductionBatch(sequence[:, :-1], sequence[:, 1:], first, second)


@dataclass(frozen=True)
class RepeatedTokens:
    """Random sequences repeated twice, each copy of a random length.

    A sequence draws its copy length ``T`` uniformly from ``min_period .. max_period`` and
    ``T`` tokens uniformly from ``0 .. vocab_size - 1``, then repeats them. All sequences
    are stored at the longest length, ``2 * max_period - 1`` inputs; after its own end a
    sequence continues with fresh random tokens, whose targets are ``-100`` (ignored). A
    causal model never sees them from the real positions.

    Why vary ``T``: with a fixed copy length, every answer sits a fixed distance back, and
    one attention layer can learn to look that far back by position alone. A varying
    length leaves only the content route: find where the current token occurred before.

    Args:
        vocab_size: tokens are ``0 .. vocab_size - 1``; at least 2.
        min_period: the shortest copy, at least 2.
        max_period: the longest copy, at least ``min_period``.
    """

    vocab_size: int = 32
    min_period: int = 6
    max_period: int = 16

    def __post_init__(self) -> None:
        require_int("vocab_size", self.vocab_size, minimum=2)
        require_int("min_period", self.min_period, minimum=2)
        require_int("max_period", self.max_period, minimum=self.min_period)

    @property
    def length(self) -> int:
        """The input length of every batch: ``2 * max_period - 1``."""
        return 2 * self.max_period - 1

    def batch(self, batch_size: int, generator: torch.Generator) -> InductionBatch:
        """A seeded batch of ``batch_size`` sequences (the same generator state gives the
        same batch).

        Raises:
            TypeError: ``batch_size`` not an int, ``generator`` not a ``torch.Generator``.
            ValueError: ``batch_size < 1``.
        """
        batch_size = require_int("batch_size", batch_size)
        generator = require_generator(generator)
        periods = torch.randint(self.min_period, self.max_period + 1, (batch_size, 1),
                                generator=generator)  # (B, 1)
        copy = torch.randint(self.vocab_size, (batch_size, self.max_period),
                             generator=generator)  # (B, max_period)
        fresh = torch.randint(self.vocab_size, (batch_size, self.length + 1),
                              generator=generator)  # (B, 2 max_period)
        j = torch.arange(self.length + 1)  # (2 max_period,)
        repeated = copy.gather(1, (j % periods).long())  # (B, 2 max_period): copy[j mod T]
        sequence = torch.where(j < 2 * periods, repeated, fresh)  # (B, 2 max_period)
        t = j[:-1]  # (L,): the input positions
        targets = sequence[:, 1:].masked_fill(t > 2 * periods - 2, IGNORED_TARGET)  # (B, L)
        first = t <= periods - 2  # (B, L)
        second = (t >= periods) & (t <= 2 * periods - 2)  # (B, L)
        return InductionBatch(sequence[:, :-1], targets, first, second)


def _token_ids(name: str, tokens: object) -> Tensor:
    tokens = require_tensor(name, tokens)
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    if tokens.dim() == 1:
        tokens = tokens[None]  # (1, T)
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T) or (T,), got {tuple(tokens.shape)}")
    return tokens.long()


def copy_losses(logits: Tensor, batch: InductionBatch) -> tuple[float, float]:
    """The mean cross-entropy (nats) on the first copy's targets and on the second's.

    Args:
        logits: ``(B, L, vocab)`` for ``batch.inputs``.
        batch: an :class:`InductionBatch`.

    Returns:
        ``(first, second)`` as Python floats.

    Raises:
        ValueError: for logits whose ``(B, L)`` is not the batch's.
    """
    logits = require_tensor("logits", logits)
    if logits.dim() != 3 or logits.shape[:2] != batch.targets.shape:
        raise ValueError(f"logits must have shape (B, L, vocab) with (B, L) = "
                         f"{tuple(batch.targets.shape)}, got {tuple(logits.shape)}")
    losses = F.cross_entropy(logits.transpose(1, 2).float(), batch.targets.clamp(min=0),
                             reduction="none")  # (B, L)
    return float(losses[batch.first].mean()), float(losses[batch.second].mean())


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------


class CircuitOutput(NamedTuple):
    """What :class:`AttentionOnlyTransformer` returns: ``logits`` ``(B, L, vocab_size)``
    and the attention ``weights`` of every layer, ``(layers, B, h, L, L)``."""

    logits: Tensor
    weights: Tensor


class AttentionOnlyTransformer(nn.Module):
    """Attention layers on a residual stream, nothing else (Elhage et al., 2021).

    ``x = token_embedding(tokens) + position_embedding``; then for each layer
    ``x = x + attention(x)`` (causal, multi-head, no bias); then ``logits = unembed(x)``.
    There is no MLP and no normalisation, so every path from the input to the logits is a
    product of the weight matrices, and a layer reads what earlier layers wrote.

    Positions are learned and added to the stream (as in GPT-2), so that what a head reads
    is all in the stream: nothing position-dependent happens inside the layers.

    Args:
        vocab_size: number of tokens.
        max_len: the longest input.
        d_model: width of the stream.
        num_heads: heads per layer (dividing ``d_model``).
        num_layers: attention layers.
    """

    def __init__(self, vocab_size: int, max_len: int, d_model: int = 32, num_heads: int = 4,
                 num_layers: int = 2) -> None:
        super().__init__()
        self.vocab_size = require_int("vocab_size", vocab_size, minimum=2)
        self.max_len = require_int("max_len", max_len)
        require_int("num_layers", num_layers)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(
            MultiHeadAttention(d_model, num_heads, bias=False, causal=True)
            for _ in range(num_layers))
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens: Tensor, *, bypass: str | Collection[str] | None = None
                ) -> CircuitOutput:
        """Logits and attention weights for ``tokens`` ``(B, L)`` or ``(L,)``.

        Args:
            tokens: integer ids in ``0 .. vocab_size - 1``, ``L <= max_len``.
            bypass: ``"query"``, ``"key"``, ``"value"`` or a collection of them: in every
                layer after the first, those inputs read only the embeddings (tokens and
                positions) instead of the whole stream, so no earlier layer's output
                reaches them. ``None``: the ordinary model.

        Raises:
            TypeError, ValueError: bad tokens or an unknown ``bypass``.
        """
        tokens = _token_ids("tokens", tokens)
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"tokens must have at most max_len={self.max_len} positions, "
                             f"got {tokens.shape[1]}")
        if bool((tokens < 0).any()) or bool((tokens >= self.vocab_size).any()):
            raise ValueError(f"tokens must lie in 0 .. {self.vocab_size - 1}")
        cut = _bypass(bypass)
        x = self.embed(tokens) + self.positions.weight[:tokens.shape[1]]  # (B, L, d_model)
        embeddings = x
        all_weights = []
        for index, layer in enumerate(self.layers):
            inputs = {name: (embeddings if index and name in cut else x) for name in _INPUTS}
            out, weights = layer(inputs["query"], inputs["key"], inputs["value"])
            x = x + out  # (B, L, d_model)
            all_weights.append(weights)  # (B, h, L, L)
        return CircuitOutput(self.unembed(x), torch.stack(all_weights))


def _bypass(bypass: object) -> frozenset[str]:
    if bypass is None:
        return frozenset()
    names = [bypass] if isinstance(bypass, str) else bypass
    if not isinstance(names, Collection) or not all(isinstance(n, str) and n in _INPUTS
                                                    for n in names):
        raise ValueError(f"bypass must be None, one of {list(_INPUTS)} or a collection of "
                         f"them, got {bypass!r}")
    return frozenset(names)


# --------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------


@dataclass
class InductionHistory:
    """What :func:`train_induction` records on its held-out batch.

    Attributes:
        steps: the steps after which the model was evaluated (the first is 0).
        first: the loss (nats) on the first copy's targets at those steps.
        second: the loss on the second copy's targets.
        seconds: the wall-clock time of the training loop, evaluations included.
    """

    steps: list[int] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    second: list[float] = field(default_factory=list)
    seconds: float = 0.0


def train_induction(model: AttentionOnlyTransformer, data: RepeatedTokens, *, steps: int,
                    batch_size: int = 32, lr: float = 5e-3, seed: int = 0,
                    eval_every: int = 20, eval_batch_size: int = 256) -> InductionHistory:
    """Train ``model`` in place with Adam on fresh batches of ``data``, next-token
    cross-entropy on every position of every sequence.

    The batches come from a generator seeded with ``seed``, and the global random state is
    forked and seeded for the duration, so a call is reproducible on one machine. Every
    ``eval_every`` steps (and before the first) the model is measured on one held-out
    batch, the same for every seed. The loop runs on one thread.

    Raises:
        TypeError, ValueError: a bad model, data, size, rate or seed, before any training.
    """
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got "
                        f"{type(model).__name__}")
    if not isinstance(data, RepeatedTokens):
        raise TypeError(f"data must be a RepeatedTokens, got {type(data).__name__}")
    if data.length > model.max_len or data.vocab_size > model.vocab_size:
        raise ValueError(f"data needs max_len >= {data.length} and vocab_size >= "
                         f"{data.vocab_size}; the model has {model.max_len} and "
                         f"{model.vocab_size}")
    steps = require_int("steps", steps)
    batch_size = require_int("batch_size", batch_size)
    lr = require_real("lr", lr)
    if lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    seed = require_int("seed", seed, minimum=0)
    eval_every = require_int("eval_every", eval_every)
    held_out = data.batch(require_int("eval_batch_size", eval_batch_size),
                          torch.Generator().manual_seed(_HELD_OUT_SEED))
    generator = torch.Generator().manual_seed(seed)
    history = InductionHistory()

    def record(step: int) -> None:
        model.eval()
        with torch.no_grad():
            first, second = copy_losses(model(held_out.inputs).logits, held_out)
        model.train()
        history.steps.append(step)
        history.first.append(first)
        history.second.append(second)

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    with one_thread(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        start = time.perf_counter()
        record(0)
        for step in range(1, steps + 1):
            batch = data.batch(batch_size, generator)
            logits = model(batch.inputs).logits  # (B, L, vocab)
            loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % eval_every == 0 or step == steps:
                record(step)
        history.seconds = time.perf_counter() - start
    model.eval()
    return history


# --------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------


def _square_weights(weights: object) -> Tensor:
    weights = require_tensor("weights", weights)
    if weights.dim() < 2 or not weights.is_floating_point():
        raise ValueError(f"weights must be floating point with shape (..., L, S), got "
                         f"{weights.dtype} {tuple(weights.shape)}")
    return weights


def previous_token_score(weights: Tensor) -> Tensor:
    """The mean weight each query puts on the key just before it.

    Args:
        weights: ``(..., L, S)`` causal self-attention weights (queries at the last ``L``
            of ``S`` key positions), ``L >= 2``.

    Returns:
        ``(...)``: for queries ``1 .. L-1``, the mean of the weight on key ``t - 1``.
        A head that always looks one token back scores 1.
    """
    weights = _square_weights(weights)
    L, S = weights.shape[-2:]
    if L < 2 or S < L:
        raise ValueError(f"weights must have L >= 2 queries and S >= L keys, got "
                         f"{tuple(weights.shape)}")
    offset = S - L  # query t sits at key position t + offset
    return weights[..., 1:, :].diagonal(offset=offset, dim1=-2, dim2=-1).mean(-1)


def prefix_matching_score(weights: Tensor, period: int) -> Tensor:
    """The mean weight each query in the second copy puts on the token after the earlier
    occurrence of its own token.

    On :func:`repeat_twice` data with ``period`` tokens a copy, the query at ``t >= period``
    holds the token that was at ``t - period``, so the token after it is at
    ``t - period + 1``: an induction head attends there.

    Args:
        weights: ``(..., L, L)`` self-attention weights on such a sequence, with
            ``period < L <= 2 * period``.
        period: the length ``T`` of one copy.

    Returns:
        ``(...)``: the mean over queries ``T .. L-1`` of the weight on key ``t - T + 1``.
    """
    weights = _square_weights(weights)
    L, S = weights.shape[-2:]
    period = require_int("period", period, minimum=2)
    if L != S or not period < L <= 2 * period:
        raise ValueError(f"weights must be (..., L, L) with period < L <= 2 * period "
                         f"(period={period}), got {tuple(weights.shape)}")
    # Rows T .. L-1, keys 1 .. L-T: the diagonal of that block.
    return weights[..., period:, 1:L - period + 1].diagonal(dim1=-2, dim2=-1).mean(-1)


def copying_score(w_v: Tensor, w_o: Tensor, embed: Tensor, unembed: Tensor, *,
                  norm_in: Tensor | None = None, norm_out: Tensor | None = None) -> float:
    """How much a head's output raises the logit of the token it attends to.

    A head that attends to a token ``j`` adds ``W_O W_V x_j`` to the stream. Along the
    direct path to the logits (no later layer), token ``j``'s embedding reaches the
    logits through the ``vocab x vocab`` matrix
    ``M = U diag(norm_out) W_O W_V diag(norm_in) E^T``. A copying head raises token
    ``j``'s own logit: ``M`` has mostly positive eigenvalues (Elhage et al., 2021). The
    score is ``sum(Re λ) / sum(|λ|)`` over the eigenvalues of ``M``, from ``+1`` (pure
    copying) to ``-1``; the eigenvalues come from the small ``d_head x d_head`` matrix
    ``W_V diag(norm_in) E^T U diag(norm_out) W_O``, which has the same non-zero ones.
    The normalisations' division by the vector's size is left out: it scales ``M`` by a
    positive number and does not change the score.

    Args:
        w_v: ``(d_head, d_model)`` the head's value projection.
        w_o: ``(d_model, d_head)`` the head's columns of the output projection.
        embed: ``(vocab, d_model)`` token embeddings ``E``.
        unembed: ``(vocab, d_model)`` the unembedding ``U`` (the same as ``embed`` when
            tied).
        norm_in, norm_out: ``(d_model,)`` the gains of the normalisations before the head
            and before the unembedding; ``None``: none.

    Raises:
        TypeError: an argument that is not a tensor.
        ValueError: shapes that do not fit together.
    """
    w_v, w_o = require_tensor("w_v", w_v), require_tensor("w_o", w_o)
    embed, unembed = require_tensor("embed", embed), require_tensor("unembed", unembed)
    d_head, d_model = w_v.shape if w_v.dim() == 2 else (None, None)
    if (d_head is None or w_o.shape != (d_model, d_head) or embed.dim() != 2
            or embed.shape[1] != d_model or unembed.dim() != 2 or unembed.shape[1] != d_model):
        raise ValueError(f"expected w_v (d_head, d_model), w_o (d_model, d_head), embed and "
                         f"unembed (vocab, d_model); got {tuple(w_v.shape)}, "
                         f"{tuple(w_o.shape)}, {tuple(embed.shape)}, {tuple(unembed.shape)}")
    for name, gain in (("norm_in", norm_in), ("norm_out", norm_out)):
        if gain is not None and require_tensor(name, gain).shape != (d_model,):
            raise ValueError(f"{name} must have shape (d_model,) = ({d_model},), got "
                             f"{tuple(gain.shape)}")
    with torch.no_grad():
        e_u = embed.double().T @ unembed.double()  # (d_model, d_model)
        return float(_copying(w_v, w_o, e_u, norm_in, norm_out))


def _copying(w_v: Tensor, w_o: Tensor, e_u: Tensor, norm_in: Tensor | None,
             norm_out: Tensor | None) -> Tensor:
    """:func:`copying_score` with ``E^T U`` ``(d_model, d_model)`` computed once."""
    d_model = e_u.shape[0]
    g_in = torch.ones(d_model, dtype=torch.float64) if norm_in is None else norm_in.double()
    g_out = torch.ones(d_model, dtype=torch.float64) if norm_out is None else norm_out.double()
    small = (w_v.double() * g_in) @ e_u @ (g_out[:, None] * w_o.double())  # (d_head, d_head)
    eigenvalues = torch.linalg.eigvals(small)  # (d_head,) complex
    return eigenvalues.real.sum() / eigenvalues.abs().sum()


def copying_scores(model: AttentionOnlyTransformer | Decoder) -> Tensor:
    """:func:`copying_score` of every head of ``model``: ``(layers, heads)`` float64.

    For a :class:`~attnbook.decoder.Decoder` the embedding table is also the unembedding,
    and the gains of each block's attention RMSNorm and of the final RMSNorm enter ``M``;
    a head of a grouped-query layer uses its key/value head's value projection.
    """
    if isinstance(model, AttentionOnlyTransformer):
        embed, unembed, norm_out = model.embed.weight, model.unembed.weight, None
        norms_in = [None] * len(model.layers)
    elif isinstance(model, Decoder):
        embed = unembed = model.embed.weight
        norm_out = model.norm.weight.detach()
        norms_in = [block.attn_norm.weight.detach() for block in model.blocks]
    else:
        raise TypeError(f"model must be an AttentionOnlyTransformer or a Decoder, got "
                        f"{type(model).__name__}")
    with torch.no_grad():
        e_u = embed.double().T @ unembed.double()  # (d_model, d_model)
        scores = []
        for layer, norm_in in zip(attention_layers(model), norms_in, strict=True):
            group = layer.num_heads // layer.num_kv_heads
            d = layer.d_head
            w_v = layer.v_proj.weight.unflatten(0, (layer.num_kv_heads, d))  # (h_kv, d, dm)
            w_o = layer.out_proj.weight.unflatten(1, (layer.num_heads, d))  # (dm, h, d)
            scores.append(torch.stack([
                _copying(w_v[head // group], w_o[:, head], e_u, norm_in, norm_out)
                for head in range(layer.num_heads)]))
    return torch.stack(scores)  # (layers, heads)


# --------------------------------------------------------------------------------------
# Ablation
# --------------------------------------------------------------------------------------


def replace_heads(merged: Tensor, heads: Iterable[int], num_heads: int, *,
                  how: str = "zero") -> Tensor:
    """``merged`` with the features of ``heads`` replaced: what an ablated head passes on.

    ``merged`` is what enters a multi-head layer's output projection: the heads' outputs
    side by side, head ``i`` in features ``i * d_head .. (i + 1) * d_head - 1``. Those
    features become zeros (``how="zero"``) or their mean over the batch and the positions
    (``how="mean"``). ``merged`` itself is not changed.

    Args:
        merged: ``(B, L, num_heads * d_head)`` or ``(L, num_heads * d_head)``.
        heads: head indices in ``0 .. num_heads - 1``.
        num_heads: the number of heads side by side (dividing the last dimension).
        how: ``"zero"`` or ``"mean"``.

    Returns:
        A new tensor of ``merged``'s shape.
    """
    merged = require_tensor("merged", merged)
    num_heads = require_int("num_heads", num_heads)
    how = require_choice("how", how, {"zero": "zero", "mean": "mean"})
    if merged.dim() not in (2, 3) or merged.shape[-1] % num_heads:
        raise ValueError(f"merged must have shape (B, L, num_heads * d_head) or (L, ...) "
                         f"with num_heads={num_heads} dividing the last dimension, got "
                         f"{tuple(merged.shape)}")
    heads = [require_int("head", head, minimum=0, maximum=num_heads - 1) for head in heads]
    split = merged.unflatten(-1, (num_heads, -1)).clone()  # (..., L, h, d_head)
    positions = tuple(range(merged.dim() - 1))  # the batch and position dimensions
    for head in heads:
        part = split[..., head, :]  # (..., L, d_head)
        split[..., head, :] = (torch.zeros_like(part) if how == "zero"
                               else part.mean(dim=positions, keepdim=True).expand_as(part))
    return split.flatten(-2)  # (..., L, num_heads * d_head)



def attention_layers(model: nn.Module) -> list[MultiHeadAttention]:
    """The attention layers of ``model``, first to last: those of an
    :class:`AttentionOnlyTransformer` or of a :class:`~attnbook.decoder.Decoder`."""
    if isinstance(model, AttentionOnlyTransformer):
        return list(model.layers)
    if isinstance(model, Decoder):
        return [block.attn for block in model.blocks]
    raise TypeError(f"model must be an AttentionOnlyTransformer or a Decoder, got "
                    f"{type(model).__name__}")


@contextlib.contextmanager
def ablate_heads(model: nn.Module, heads: Iterable[tuple[int, int]], *,
                 how: str = "zero") -> Iterator[None]:
    """Inside the block, the given heads of ``model`` contribute nothing of their own.

    A head's output (its ``d_head`` features, before the output projection) is replaced
    by zeros (``how="zero"``), or by its mean over the batch and the positions of the
    same forward pass (``how="mean"``: the head still adds its average, but no longer
    depends on the input). Outside the block the model is unchanged.

    Args:
        model: an :class:`AttentionOnlyTransformer` or a :class:`~attnbook.decoder.Decoder`.
        heads: ``(layer, head)`` pairs.
        how: ``"zero"`` or ``"mean"``.

    Raises:
        TypeError, ValueError: for another model, a pair out of range or an unknown ``how``.
    """
    layers = attention_layers(model)
    how = require_choice("how", how, {"zero": "zero", "mean": "mean"})
    chosen: dict[int, list[int]] = {}
    for pair in heads:
        if (not isinstance(pair, tuple | list) or len(pair) != 2 or not all(
                isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in pair)):
            raise TypeError(f"heads must hold (layer, head) pairs of ints, got {pair!r}")
        layer, head = int(pair[0]), int(pair[1])
        if not (0 <= layer < len(layers) and 0 <= head < layers[layer].num_heads):
            raise ValueError(f"head ({layer}, {head}) is not in the model: layers 0 .. "
                             f"{len(layers) - 1}, heads 0 .. {layers[0].num_heads - 1}")
        chosen.setdefault(layer, []).append(head)

    def hook_for(layer: MultiHeadAttention, indices: list[int]):  # noqa: ANN202
        def hook(module: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            return (replace_heads(args[0], indices, layer.num_heads, how=how),)
        return hook

    handles = [layers[index].out_proj.register_forward_pre_hook(hook_for(layers[index], idx))
               for index, idx in chosen.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
