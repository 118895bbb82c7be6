"""Watching attention learn: synthetic tasks whose right answer has a known attention map,
a tiny model made of :mod:`attnbook.layers`, a seeded training loop, and an honest
evaluation of next-token prediction.

Two tasks, each with the map that solves it:

- :class:`ReversalTask`: output position ``i`` is the input token at ``L - 1 - i``; the
  required map is the anti-diagonal. Learned without a mask.
- :class:`RepeatTask`: next-token prediction on a random prefix of ``period`` tokens that
  repeats (``a b c d a b c d a``). Once the prefix is over, the next token is the one
  ``period`` places back, which the query at ``t`` finds at key ``t + 1 - period``: the
  required map is a diagonal below the main one. Learned with the causal mask.

A task draws seeded batches ``(inputs, targets)``, both ``(B, L)`` ``torch.long``, from a
``torch.Generator``; ``required_pattern(L)`` gives the ``(L, L)`` map of the keys that hold
each query's answer, and ``answerable(L)`` the positions whose target lies among the keys
they may read (in a next-token task, the past).

:class:`TinyAttentionModel` adds a positional embedding to a token embedding, then runs one
:class:`~attnbook.layers.MultiHeadAttention` layer, a small MLP and a linear readout; its
forward returns the logits and the attention weights. Positions are what make the tasks
possible: attention without them, and without a mask, is permutation equivariant, so it
cannot tell the first token from the last (``positions="none"`` shows it; a causal mask
breaks the symmetry).

:func:`train` fits a model with Adam and returns a :class:`TrainingHistory` (losses,
held-out accuracy, agreement with the required map, and the mean attention map at each
evaluation). :func:`pattern_agreement` measures how close weights are to a required map.
:func:`generate` and :func:`honest_accuracy` predict token by token from the past alone.
:func:`mask_experiment` trains the same model with the causal mask and with
:func:`future_mask`, which lets each position read the token it must predict.

Masks are boolean and ``True`` means "may attend", as everywhere in :mod:`attnbook`.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import check_mask, require_generator, require_int, require_real, require_tensor
from .layers import MultiHeadAttention
from .masks import causal_mask
from .positions import sinusoidal
from .timing import one_thread

__all__ = [
    "Evaluation",
    "MaskExperiment",
    "MaskRun",
    "ModelOutput",
    "RepeatTask",
    "ReversalTask",
    "Task",
    "TinyAttentionModel",
    "TrainingHistory",
    "evaluate",
    "future_mask",
    "generate",
    "honest_accuracy",
    "lookahead_mask",
    "mask_experiment",
    "pattern_agreement",
    "train",
]

#: Seed offset of held-out batches: they never come from the generator training draws from.
_HELD_OUT = 1_000_003

#: A function ``n -> (n, n)`` boolean mask, such as :func:`~attnbook.masks.causal_mask`.
MaskFn = Callable[[int], Tensor]


def _require_rate(name: str, value: object) -> float:
    value = require_real(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return value


def _require_mask_fn(name: str, mask_fn: object) -> MaskFn | None:
    if mask_fn is not None and not callable(mask_fn):
        raise TypeError(
            f"{name} must be a function n -> (n, n) boolean mask (such as causal_mask) or "
            f"None, got {type(mask_fn).__name__}"
        )
    return mask_fn  # type: ignore[return-value]


# --------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------


@runtime_checkable
class Task(Protocol):
    """What :func:`train` needs from a task: ``vocab_size`` tokens, sequences of
    ``length``, seeded batches, the required map and the answerable positions."""

    vocab_size: int
    length: int

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``(inputs, targets)``, both ``(batch_size, length)`` ``torch.long``."""
        ...

    def required_pattern(self, L: int | None = None) -> Tensor:
        """The ``(L, L)`` map of the keys that hold each query's answer."""
        ...

    def answerable(self, L: int | None = None) -> Tensor:
        """``(L,)`` boolean: the positions whose target lies among the keys they may read."""
        ...


@dataclass(frozen=True)
class ReversalTask:
    """Reverse a random sequence: ``targets[:, i] == inputs[:, L - 1 - i]``.

    Every position is answerable, by attending to its mirror position, so the required
    map is the anti-diagonal. The task is meant to be learned without a mask.

    Args:
        vocab_size: tokens are drawn uniformly from ``0 .. vocab_size - 1``.
        length: the sequence length ``L``.

    Raises:
        TypeError: a size that is not an int.
        ValueError: ``vocab_size < 2`` or ``length < 2``.
    """

    vocab_size: int = 10
    length: int = 8

    def __post_init__(self) -> None:
        require_int("vocab_size", self.vocab_size, minimum=2)
        require_int("length", self.length, minimum=2)

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """A seeded batch ``(inputs, targets)``, both ``(batch_size, L)`` ``torch.long``.

        The same generator state gives the same batch.

        Raises:
            TypeError: ``batch_size`` not an int, ``generator`` not a ``torch.Generator``.
            ValueError: ``batch_size < 1``.
        """
        batch_size = require_int("batch_size", batch_size)
        generator = require_generator(generator)
        inputs = torch.randint(self.vocab_size, (batch_size, self.length),
                               generator=generator)  # (B, L)
        return inputs, inputs.flip(-1)  # (B, L), (B, L)

    def required_pattern(self, L: int | None = None) -> Tensor:
        """The anti-diagonal: ``(L, L)`` float, row ``i`` is 1 at key ``L - 1 - i``.

        ``L`` defaults to ``self.length``.
        """
        L = self.length if L is None else require_int("L", L)
        return torch.eye(L).flip(-1)  # (L, L)

    def answerable(self, L: int | None = None) -> Tensor:
        """``(L,)`` boolean, all ``True``: every target is somewhere in the input."""
        L = self.length if L is None else require_int("L", L)
        return torch.ones(L, dtype=torch.bool)  # (L,)


@dataclass(frozen=True)
class RepeatTask:
    """Next-token prediction on a random prefix that repeats.

    A sequence ``s`` of ``length + 1`` tokens repeats a random prefix of ``period`` tokens,
    ``s[j] = prefix[j % period]`` (with period 4: ``a b c d a b c d a``). The inputs are
    ``s[:-1]`` and the targets ``s[1:]``, so position ``t`` predicts ``s[t + 1]``.

    The first ``period - 1`` targets are random and not in the past: no model that predicts
    from the past alone beats chance on them. From
    ``t = period - 1`` on, the target ``s[t + 1]`` equals the input at ``t + 1 - period``,
    which the causal mask lets the query at ``t`` see. The required map is therefore the
    diagonal ``period - 1`` places below the main one, on those rows only (plus the earlier
    copies when ``length >= 2 * period``). The task is meant to be learned with
    :func:`~attnbook.masks.causal_mask`.

    Args:
        vocab_size: prefix tokens are drawn uniformly from ``0 .. vocab_size - 1``.
        length: the input length ``L``.
        period: the prefix length, from 2 to ``length``; defaults to ``length // 2``, so
            the second half of the inputs repeats the first.

    Raises:
        TypeError: a size that is not an int.
        ValueError: ``vocab_size < 2``, ``length < 3``, or ``period`` out of range.
    """

    vocab_size: int = 10
    length: int = 16
    period: int | None = None

    def __post_init__(self) -> None:
        require_int("vocab_size", self.vocab_size, minimum=2)
        require_int("length", self.length, minimum=3)
        if self.period is None:
            object.__setattr__(self, "period", self.length // 2)
        period = require_int("period", self.period, minimum=2)
        if period > self.length:
            raise ValueError(
                f"period must be at most length={self.length}, got {period}: otherwise no "
                f"input token repeats"
            )

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """A seeded batch ``(inputs, targets)``, both ``(batch_size, L)`` ``torch.long``.

        Raises:
            TypeError: ``batch_size`` not an int, ``generator`` not a ``torch.Generator``.
            ValueError: ``batch_size < 1``.
        """
        batch_size = require_int("batch_size", batch_size)
        generator = require_generator(generator)
        prefix = torch.randint(self.vocab_size, (batch_size, self.period),
                               generator=generator)  # (B, period)
        positions = torch.arange(self.length + 1) % self.period  # (L + 1,)
        sequence = prefix[:, positions]  # (B, L + 1)
        return sequence[:, :-1], sequence[:, 1:]  # (B, L), (B, L)

    def required_pattern(self, L: int | None = None) -> Tensor:
        """The ``(L, L)`` float map of the keys that hold each query's answer.

        Row ``t >= period - 1`` spreads 1 evenly over the keys ``j <= t`` with
        ``j = t + 1 (mod period)``: key ``t + 1 - period`` and, in inputs longer than two
        periods, its copies further back. Rows ``t < period - 1`` are all zero: their
        target is random, and no key in their past holds it. ``L`` defaults to
        ``self.length``.
        """
        L = self.length if L is None else require_int("L", L)
        query = torch.arange(L)[:, None]  # (L, 1)
        key = torch.arange(L)[None, :]  # (1, L)
        # Key j holds s[j] and query t wants s[t + 1]: the same prefix token when
        # j = t + 1 (mod period); the causal mask allows j <= t.
        carries = (causal_mask(L) & ((query + 1 - key) % self.period == 0)).float()  # (L, L)
        return carries / carries.sum(-1, keepdim=True).clamp(min=1)  # (L, L)

    def answerable(self, L: int | None = None) -> Tensor:
        """``(L,)`` boolean: ``True`` from position ``period - 1`` on."""
        L = self.length if L is None else require_int("L", L)
        return torch.arange(L) >= self.period - 1  # (L,)


def _check_task(task: object) -> Task:
    if not isinstance(task, Task):
        raise TypeError(
            f"task must be a task such as ReversalTask() or RepeatTask() (with vocab_size, "
            f"length, batch, required_pattern and answerable), got {type(task).__name__}"
        )
    return task


# --------------------------------------------------------------------------------------
# Wrong masks, for the experiment
# --------------------------------------------------------------------------------------


def future_mask(L: int) -> Tensor:
    """A WRONG mask for next-token prediction: query ``i`` sees keys ``i .. L-1``.

    It is :func:`~attnbook.masks.causal_mask` transposed (``triu`` where ``tril`` was
    meant): every position sees itself and the future, none sees the past. Position ``t``
    can read the token it is asked to predict at key ``t + 1``.

    Returns:
        A boolean ``(L, L)`` tensor, ``True`` = may attend.

    Raises:
        TypeError: if ``L`` is not an int.
        ValueError: if ``L < 1``.
    """
    return causal_mask(L).T  # (L, L)


def lookahead_mask(L: int, lookahead: int = 1) -> Tensor:
    """A WRONG causal mask that lets query ``i`` see keys ``0 .. i + lookahead``.

    With ``lookahead=1`` it is the causal mask off by one: position ``t`` sees the past
    and the token it is asked to predict. ``lookahead=0`` gives
    :func:`~attnbook.masks.causal_mask`, ``lookahead >= L - 1`` no mask at all.

    Returns:
        A boolean ``(L, L)`` tensor, ``True`` = may attend.

    Raises:
        TypeError: if ``L`` or ``lookahead`` is not an int.
        ValueError: if ``L < 1`` or ``lookahead < 0``.
    """
    L = require_int("L", L)
    lookahead = require_int("lookahead", lookahead, minimum=0)
    return causal_mask(L, offset=lookahead)  # (L, L)


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------


class ModelOutput(NamedTuple):
    """What :class:`TinyAttentionModel` returns: ``logits`` ``(B, L, vocab_size)`` and the
    attention ``weights`` ``(B, h, L, L)``."""

    logits: Tensor
    weights: Tensor


#: Where :class:`TinyAttentionModel` can take its positions from.
_POSITIONS = ("learned", "sinusoidal", "rope", "alibi", "none")


class TinyAttentionModel(nn.Module):
    """A one-layer attention model: embeddings, one attention layer, an MLP, a readout.

    ``x = token_embedding(tokens) + positions``, ``h = attention(x, mask)``,
    ``h = h + mlp(h)``, ``logits = readout(h)``.

    There is no residual around the attention, on purpose. (Attention is the only step that
    moves information between positions in any transformer, residual or not; a residual only
    carries each position's own vector forward.) Without it, the vector the MLP and the
    readout see at position ``i`` is just the mix of the values row ``i`` attends to, so the
    map shows everything a prediction is built from. The cost: rows that put their weights
    on the same keys get the same vector and so the same prediction, even when their
    targets differ (in :class:`RepeatTask`, position 0 and the positions that want the
    prefix's first token again).

    Args:
        vocab_size: the number of tokens.
        max_len: the longest sequence the model reads.
        d_model: the width of the token vectors.
        num_heads: attention heads; must divide ``d_model``.
        d_mlp: the hidden width of the MLP; ``0`` leaves the MLP out.
        positions: ``"learned"`` (an ``nn.Embedding(max_len, d_model)``), ``"sinusoidal"``
            (fixed, :func:`~attnbook.positions.sinusoidal`), both added to the token
            embeddings; ``"rope"`` or ``"alibi"``, applied in the attention scores (see
            :class:`~attnbook.layers.MultiHeadAttention`'s ``position``); or ``"none"``
            (no position at all: the model is then permutation equivariant without a
            mask).
        seed: seeds the initial weights without touching the global random state;
            ``None`` draws them from the global random state.

    Raises:
        TypeError, ValueError: sizes that are not positive ints, ``num_heads`` that does
            not divide ``d_model``, an unknown ``positions``.
    """

    def __init__(self, vocab_size: int, max_len: int, d_model: int = 32, num_heads: int = 1,
                 *, d_mlp: int = 64,
                 positions: Literal["learned", "sinusoidal", "rope", "alibi", "none"] = "learned",
                 seed: int | None = 0) -> None:
        super().__init__()
        self.vocab_size = require_int("vocab_size", vocab_size, minimum=2)
        self.max_len = require_int("max_len", max_len)
        d_model = require_int("d_model", d_model)
        d_mlp = require_int("d_mlp", d_mlp, minimum=0)
        if positions not in _POSITIONS:
            raise ValueError(
                f"positions must be one of {', '.join(map(repr, _POSITIONS))}, got "
                f"{positions!r}"
            )
        self.positions = positions
        if seed is not None:
            seed = require_int("seed", seed, minimum=0)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.token_embedding = nn.Embedding(vocab_size, d_model)
            self.position_embedding = (nn.Embedding(max_len, d_model)
                                       if positions == "learned" else None)
            in_scores = positions if positions in ("rope", "alibi") else None
            self.attention = MultiHeadAttention(d_model, num_heads, position=in_scores)
            self.mlp = (nn.Sequential(nn.Linear(d_model, d_mlp), nn.ReLU(),
                                      nn.Linear(d_mlp, d_model)) if d_mlp else None)
            self.readout = nn.Linear(d_model, vocab_size)
        if positions == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal(max_len, d_model),
                                 persistent=False)  # (max_len, d_model)

    @classmethod
    def for_task(cls, task: Task, **kwargs: object) -> TinyAttentionModel:
        """A model sized for ``task`` (its ``vocab_size`` and ``length``); ``kwargs`` are
        the other arguments of the class."""
        task = _check_task(task)
        return cls(task.vocab_size, task.length, **kwargs)  # type: ignore[arg-type]

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> ModelOutput:
        """Logits and attention weights for a batch of token sequences.

        Args:
            tokens: ``(B, L)`` integer tokens in ``0 .. vocab_size - 1``, ``L <= max_len``.
            mask: optional boolean mask broadcastable to ``(L, L)``, ``(B, L, L)`` or
                ``(B, h, L, L)``; ``True`` = may attend.

        Returns:
            ``ModelOutput(logits, weights)``, ``(B, L, vocab_size)`` and ``(B, h, L, L)``.

        Raises:
            TypeError: ``tokens`` not an integer tensor, ``mask`` not boolean.
            ValueError: ``tokens`` not 2-D, longer than ``max_len`` or out of range; a
                ``mask`` that does not fit.
        """
        tokens = _check_tokens("tokens", tokens, self.vocab_size, self.max_len)
        L = tokens.shape[1]
        if mask is not None:
            check_mask(mask, L, L)
        x = self.token_embedding(tokens)  # (B, L, d)
        if self.position_embedding is not None:
            x = x + self.position_embedding(torch.arange(L, device=tokens.device))  # (B, L, d)
        elif self.positions == "sinusoidal":
            x = x + self.sinusoid[:L]  # (B, L, d)
        hidden, weights = self.attention(x, mask=mask)  # (B, L, d), (B, h, L, L)
        if self.mlp is not None:
            hidden = hidden + self.mlp(hidden)  # (B, L, d)
        return ModelOutput(self.readout(hidden), weights)  # (B, L, V), (B, h, L, L)


def _check_tokens(name: str, tokens: object, vocab_size: int, max_len: int) -> Tensor:
    tokens = require_tensor(name, tokens)
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer tokens (torch.long), got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (B, L), got shape {tuple(tokens.shape)}")
    if not 1 <= tokens.shape[1] <= max_len:
        raise ValueError(
            f"{name} has length L={tokens.shape[1]} (shape {tuple(tokens.shape)}), but the "
            f"model reads 1 <= L <= max_len={max_len}"
        )
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"{name} must lie in 0 .. {vocab_size - 1} (vocab_size={vocab_size}), got values "
            f"from {int(tokens.min())} to {int(tokens.max())}"
        )
    return tokens.long()


def _check_model(model: object) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be an nn.Module such as TinyAttentionModel, got {type(model).__name__}"
        )
    return model


# --------------------------------------------------------------------------------------
# Measuring attention against the required map
# --------------------------------------------------------------------------------------


def pattern_agreement(weights: Tensor, required: Tensor, *,
                      kind: Literal["mass", "argmax"] = "mass") -> float:
    """How close attention weights are to the map a task requires, from 0 to 1.

    Only queries whose ``required`` row is not all zero count (in :class:`RepeatTask` the
    first rows have no key that holds the answer). A key is required where ``required``
    is positive.

    - ``kind="mass"``: the attention mass each query puts on its required keys,
      ``sum_j weights[..., i, j] * (required[i, j] > 0)``, averaged over the queries and
      every leading dimension (batch, heads). 1.0 is exactly the pattern; a uniform row
      over ``S`` keys, one of them required, scores ``1/S``.
    - ``kind="argmax"``: the fraction of queries whose most attended key is required.

    Args:
        weights: attention weights ``(..., L, S)``, for example ``(B, h, L, S)``; pass
            ``weights[:, head]`` to score one head.
        required: the required map ``(L, S)``, as from ``task.required_pattern(L)``.
        kind: ``"mass"`` or ``"argmax"``.

    Returns:
        A float in ``[0, 1]``.

    Raises:
        TypeError: non-tensors, non-float weights, ``kind`` not a string.
        ValueError: shapes that do not match, an unknown ``kind``, or a ``required`` map
            with no non-zero row.
    """
    weights = require_tensor("weights", weights)
    required = require_tensor("required", required)
    if not weights.is_floating_point():
        raise TypeError(f"weights must be a floating-point tensor, got dtype {weights.dtype}")
    if required.dim() != 2:
        raise ValueError(f"required must have shape (L, S), got shape {tuple(required.shape)}")
    if weights.dim() < 2 or weights.shape[-2:] != required.shape:
        raise ValueError(
            f"weights must have shape (..., L, S) = (..., {required.shape[0]}, "
            f"{required.shape[1]}) to match required, got shape {tuple(weights.shape)}"
        )
    if not isinstance(kind, str):
        raise TypeError(f'kind must be the string "mass" or "argmax", got {type(kind).__name__}')
    if kind not in ("mass", "argmax"):
        raise ValueError(f'kind must be "mass" or "argmax", got {kind!r}')
    is_required = (required > 0).to(weights.device)  # (L, S)
    rows = is_required.any(-1)  # (L,)
    if not bool(rows.any()):
        raise ValueError("required has no non-zero row: there is no pattern to compare with")
    weights = weights.detach()
    if kind == "mass":
        per_query = (weights * is_required).sum(-1)  # (..., L)
    else:
        best = weights.argmax(-1, keepdim=True)  # (..., L, 1)
        per_query = is_required.expand_as(weights).gather(-1, best).squeeze(-1)  # (..., L)
    return float(per_query[..., rows].float().mean())


# --------------------------------------------------------------------------------------
# Training and evaluation
# --------------------------------------------------------------------------------------


class Evaluation(NamedTuple):
    """A model measured on one held-out batch, with teacher forcing (every position sees
    the true inputs the mask allows).

    ``loss``: mean cross-entropy over every position, in nats. ``accuracy``: the fraction
    of argmax predictions that are right, on the answerable positions. ``agreement``:
    :func:`pattern_agreement` (``"mass"``) of the head that agrees best.
    """

    loss: float
    accuracy: float
    agreement: float


@dataclass
class TrainingHistory:
    """What :func:`train` records.

    Attributes:
        losses: the training loss (mean cross-entropy, nats) of each step; ``losses[i]``
            is step ``i + 1``.
        eval_steps: the steps after which the model was evaluated on the held-out batch;
            the first is 0, before any training.
        accuracies: held-out accuracy on the answerable positions at those steps.
        agreements: held-out :func:`pattern_agreement` of the best head at those steps.
        maps: the attention weights averaged over the held-out batch at those steps, each
            ``(h, L, L)``: the learned maps as they form.
        final: the :class:`Evaluation` on a second, fresh held-out batch after training.
        seconds: the wall-clock time of the training loop.
    """

    losses: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)
    agreements: list[float] = field(default_factory=list)
    maps: list[Tensor] = field(default_factory=list)
    final: Evaluation | None = None
    seconds: float = 0.0

    @property
    def final_accuracy(self) -> float:
        """Held-out accuracy after training; ``nan`` before :func:`train` has run."""
        return math.nan if self.final is None else self.final.accuracy


def _check_square_mask(mask: object, L: int) -> Tensor | None:
    return None if mask is None else check_mask(mask, L, L)


def _held_out(task: Task, batch_size: int, seed: int, which: int = 1) -> tuple[Tensor, Tensor]:
    return task.batch(batch_size, torch.Generator().manual_seed(seed + which * _HELD_OUT))


@contextlib.contextmanager
def _inference(model: nn.Module) -> Iterator[None]:
    """Eval mode on one thread (deterministic sums), then the model's own mode back."""
    was_training = model.training
    model.eval()
    try:
        with one_thread():
            yield
    finally:
        model.train(was_training)


@torch.no_grad()
def _measure(model: nn.Module, task: Task, inputs: Tensor, targets: Tensor,
             mask: Tensor | None) -> tuple[Evaluation, Tensor]:
    """Evaluate on one batch; also return the batch-mean attention map ``(h, L, L)``."""
    with _inference(model):
        logits, weights = model(inputs, mask)  # (B, L, V), (B, h, L, L)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    answerable = task.answerable(task.length)  # (L,)
    correct = logits.argmax(-1) == targets  # (B, L)
    accuracy = correct[:, answerable].float().mean()
    required = task.required_pattern(task.length)  # (L, L)
    agreement = max(pattern_agreement(weights[:, head], required)
                    for head in range(weights.shape[1]))
    return Evaluation(float(loss), float(accuracy), agreement), weights.mean(0)  # (h, L, L)


def evaluate(model: nn.Module, task: Task, *, mask: Tensor | None = None,
             batch_size: int = 1024, seed: int = 0) -> Evaluation:
    """Loss, accuracy and agreement with the required map on a held-out batch.

    Every position sees the true inputs the ``mask`` allows (teacher forcing), as in
    training; use :func:`honest_accuracy` to predict from the past alone. The batch is the
    held-out batch :func:`train` evaluates on with the same ``seed``, never a training
    batch.

    Args:
        model: e.g. a :class:`TinyAttentionModel`.
        task: e.g. :class:`ReversalTask` or :class:`RepeatTask`.
        mask: boolean ``(L, L)`` mask, ``True`` = may attend; ``None`` for none.
        batch_size: sequences in the batch.
        seed: which held-out batch.

    Returns:
        An :class:`Evaluation`.

    Raises:
        TypeError, ValueError: a bad model, task, mask, batch size or seed.
    """
    model = _check_model(model)
    task = _check_task(task)
    mask = _check_square_mask(mask, task.length)
    batch_size = require_int("batch_size", batch_size)
    seed = require_int("seed", seed, minimum=0)
    return _measure(model, task, *_held_out(task, batch_size, seed), mask)[0]


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = round(width * done / total)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def train(
    model: nn.Module,
    task: Task,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    mask: Tensor | None = None,
    seed: int = 0,
    progress: bool = True,
    eval_every: int | None = None,
    eval_batch_size: int = 1024,
    progress_lines: int = 5,
) -> TrainingHistory:
    """Train ``model`` in place on fresh batches of ``task``, with Adam and cross-entropy.

    Each step draws a new batch from a generator seeded with ``seed``, and the global
    random state is forked and seeded for the duration, so the same call on the same
    initial model gives the same history and weights (and leaves the caller's random state
    alone). The loss averages the cross-entropy over every position, answerable or not.
    The loop runs on one thread (the caller's setting is restored afterwards).

    Args:
        model: a model whose ``forward(tokens, mask)`` returns ``(logits, weights)`` with
            shapes ``(B, L, V)`` and ``(B, h, L, L)``, like :class:`TinyAttentionModel`.
        task: a :class:`Task`, such as :class:`ReversalTask` or :class:`RepeatTask`.
        steps: the number of optimisation steps.
        batch_size: sequences per step.
        lr: Adam's learning rate.
        mask: boolean ``(L, L)`` mask (``True`` = may attend) for every forward pass, in
            training and evaluation; ``None`` lets every position see every other.
        seed: seeds the training batches and picks the held-out batches.
        progress: print ``progress_lines`` short lines to standard output (nothing goes
            to standard error); ``False`` prints nothing.
        eval_every: evaluate on the held-out batch every this many steps (also before
            the first step, after the last, and at each progress line); defaults to
            ``steps // 20``, at least 1.
        eval_batch_size: sequences in each held-out batch.
        progress_lines: how many lines ``progress`` prints.

    Returns:
        A :class:`TrainingHistory`. ``history.final`` is measured after training on a
        second held-out batch, fresh to the model.

    Raises:
        TypeError, ValueError: a bad model, task, mask, size, rate or seed, before any
            training.
    """
    model = _check_model(model)
    task = _check_task(task)
    steps = require_int("steps", steps)
    batch_size = require_int("batch_size", batch_size)
    lr = _require_rate("lr", lr)
    mask = _check_square_mask(mask, task.length)
    seed = require_int("seed", seed, minimum=0)
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool, got {type(progress).__name__}")
    eval_every = (max(1, steps // 20) if eval_every is None
                  else require_int("eval_every", eval_every))
    eval_batch_size = require_int("eval_batch_size", eval_batch_size)
    progress_lines = require_int("progress_lines", progress_lines)
    params = list(model.parameters())
    if not params:
        raise ValueError("model has no parameters to train")

    history = TrainingHistory()
    train_generator = torch.Generator().manual_seed(seed)
    held_out = _held_out(task, eval_batch_size, seed)
    fresh = _held_out(task, eval_batch_size, seed, which=2)
    print_at = {math.ceil(steps * k / progress_lines) for k in range(1, progress_lines + 1)}

    def record(step: int) -> Evaluation:
        result, mean_map = _measure(model, task, *held_out, mask)
        history.eval_steps.append(step)
        history.accuracies.append(result.accuracy)
        history.agreements.append(result.agreement)
        history.maps.append(mean_map)
        return result

    optimizer = torch.optim.Adam(params, lr=lr)
    with one_thread(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        start = time.perf_counter()
        record(0)
        model.train()
        for step in range(1, steps + 1):
            inputs, targets = task.batch(batch_size, train_generator)  # (B, L), (B, L)
            logits, _ = model(inputs, mask)  # (B, L, V)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            history.losses.append(loss.item())
            if step % eval_every and step not in print_at:
                continue
            result = record(step)
            if progress and step in print_at:
                recent = history.losses[-eval_every:]
                print(f"step {step:>{len(str(steps))}}/{steps} {_bar(step, steps)} "
                      f"loss {sum(recent) / len(recent):.3f}  "
                      f"held-out accuracy {result.accuracy:6.1%}", file=sys.stdout,
                      flush=True)
        history.seconds = time.perf_counter() - start
        history.final = _measure(model, task, *fresh, mask)[0]
    return history


# --------------------------------------------------------------------------------------
# Honest, token-by-token prediction
# --------------------------------------------------------------------------------------


@torch.no_grad()
def generate(model: nn.Module, prompt: Tensor, steps: int,
             mask_fn: MaskFn | None = causal_mask) -> Tensor:
    """Greedy generation, one token at a time, from the past alone.

    At each step the model reads only the tokens so far (the prompt and what it has
    generated), with the mask ``mask_fn(n)`` for the current length ``n``, and the argmax
    of its last position's logits is appended. There is no future in the input to be
    seen, so even a model trained with a future-revealing mask is tested honestly.

    Args:
        model: e.g. a :class:`TinyAttentionModel`; it runs in eval mode, and its mode is
            restored afterwards.
        prompt: ``(B, P)`` integer tokens, ``P >= 1``.
        steps: how many tokens to generate; ``0`` returns the prompt.
        mask_fn: ``n -> (n, n)`` boolean mask; :func:`~attnbook.masks.causal_mask` by
            default, or the mask the model was trained with; ``None`` for no mask.

    Returns:
        ``(B, P + steps)`` ``torch.long``: the prompt followed by the generated tokens.

    Raises:
        TypeError: ``prompt`` not an integer tensor, ``steps`` not an int, ``mask_fn``
            not callable.
        ValueError: ``prompt`` not ``(B, P)``, or ``P + steps - 1`` tokens to read beyond
            the model's ``max_len``.
    """
    model = _check_model(model)
    steps = require_int("steps", steps, minimum=0)
    mask_fn = _require_mask_fn("mask_fn", mask_fn)
    vocab_size = getattr(model, "vocab_size", None)
    max_len = getattr(model, "max_len", None)
    if isinstance(vocab_size, int) and isinstance(max_len, int):
        tokens = _check_tokens("prompt", prompt, vocab_size, max_len)  # (B, P)
        if tokens.shape[1] + steps - 1 > max_len:
            raise ValueError(
                f"a prompt of length {tokens.shape[1]} and steps={steps} make the model read "
                f"{tokens.shape[1] + steps - 1} tokens, beyond its max_len={max_len}"
            )
    else:
        tokens = _check_tokens("prompt", prompt, sys.maxsize, sys.maxsize)  # (B, P)
    with _inference(model):
        for _ in range(steps):
            n = tokens.shape[1]
            mask = None if mask_fn is None else mask_fn(n)  # (n, n)
            logits, _ = model(tokens, mask)  # (B, n, V)
            next_token = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            tokens = torch.cat([tokens, next_token], dim=1)  # (B, n + 1)
    return tokens


def honest_accuracy(model: nn.Module, task: Task, mask_fn: MaskFn | None = causal_mask, *,
                    batch_size: int = 1024, seed: int = 0) -> float:
    """Next-token accuracy when each prediction sees only the true past.

    For each answerable position ``t`` of the held-out batch, the model is given the true
    inputs ``0 .. t`` and nothing after them, with mask ``mask_fn(t + 1)``, and its next
    token (:func:`generate`, one step) is compared with the target. The result averages
    over the answerable positions and the batch.

    For a model trained with the causal mask this is the accuracy :func:`evaluate`
    reports, since the causal mask already hides the future. A model trained with a
    future-revealing mask loses the answer it used to read.

    Args:
        model: e.g. a :class:`TinyAttentionModel`.
        task: a next-token task such as :class:`RepeatTask`.
        mask_fn: the mask the model was trained with, as a function of the length.
        batch_size: sequences in the held-out batch.
        seed: which held-out batch (the one :func:`evaluate` uses with this seed).

    Returns:
        A float in ``[0, 1]``.

    Raises:
        TypeError, ValueError: a bad model, task, ``mask_fn``, batch size or seed.
    """
    model = _check_model(model)
    task = _check_task(task)
    mask_fn = _require_mask_fn("mask_fn", mask_fn)
    batch_size = require_int("batch_size", batch_size)
    seed = require_int("seed", seed, minimum=0)
    inputs, targets = _held_out(task, batch_size, seed)  # (B, L), (B, L)
    positions = torch.nonzero(task.answerable(task.length)).flatten().tolist()
    correct = 0.0
    for t in positions:
        predicted = generate(model, inputs[:, :t + 1], 1, mask_fn)[:, -1]  # (B,)
        correct += float((predicted == targets[:, t]).float().mean())
    return correct / len(positions)


# --------------------------------------------------------------------------------------
# The mask experiment
# --------------------------------------------------------------------------------------


@dataclass
class MaskRun:
    """One model of :func:`mask_experiment`, trained and measured with one mask.

    Attributes:
        model: the trained model.
        history: its :class:`TrainingHistory`.
        loss: the mean training loss over the last tenth of the steps (nats per token,
            every position).
        accuracy: :func:`honest_accuracy` on the answerable positions, with the mask the
            model was trained with.
    """

    model: TinyAttentionModel
    history: TrainingHistory
    loss: float
    accuracy: float


@dataclass
class MaskExperiment:
    """The same model trained with the causal mask and with a future-revealing mask.

    Attributes:
        causal, leaky: the two :class:`MaskRun` records.
        honest_floor: the lowest loss a model that sees only the past can expect:
            ``ln(vocab_size)`` on each unanswerable position, 0 on the others, averaged.
        chance: ``1 / vocab_size``, the accuracy of guessing.
    """

    causal: MaskRun
    leaky: MaskRun
    honest_floor: float
    chance: float


def mask_experiment(task: Task | None = None, *, steps: int = 400, batch_size: int = 64,
                    lr: float = 3e-3, seed: int = 0, leaky_mask_fn: MaskFn = future_mask,
                    progress: bool = False, **model_kwargs: object) -> MaskExperiment:
    """Train one model with the causal mask and an identical one with a leaky mask.

    Both start from the same weights, ``TinyAttentionModel.for_task(task, seed=seed,
    **model_kwargs)``, and see the same batches. The leaky model's training loss falls far
    below the honest floor, because it reads the next token instead of predicting it;
    asked to predict from the past alone (:func:`honest_accuracy`), it is near chance,
    while the causal model is right almost every time.

    Args:
        task: a next-token task; defaults to ``RepeatTask()``.
        steps, batch_size, lr, seed, progress: passed to :func:`train`.
        leaky_mask_fn: ``n -> (n, n)`` boolean mask that reveals the future; defaults to
            :func:`future_mask`. (:func:`lookahead_mask` also shows the past, and the
            model may then learn both routes to the answer: try it.)
        model_kwargs: passed to :class:`TinyAttentionModel`.

    Returns:
        A :class:`MaskExperiment`.

    Raises:
        TypeError, ValueError: a bad task, mask function or training argument.
    """
    task = RepeatTask() if task is None else _check_task(task)
    leaky_mask_fn = _require_mask_fn("leaky_mask_fn", leaky_mask_fn)
    if leaky_mask_fn is None:
        raise TypeError("leaky_mask_fn must be a function n -> (n, n) boolean mask, got None")
    L = task.length
    runs = []
    for mask_fn in (causal_mask, leaky_mask_fn):
        model = TinyAttentionModel.for_task(task, seed=seed, **model_kwargs)
        history = train(model, task, steps=steps, batch_size=batch_size, lr=lr,
                        mask=mask_fn(L), seed=seed, progress=progress)
        tail = history.losses[-max(1, steps // 10):]
        runs.append(MaskRun(model, history, sum(tail) / len(tail),
                            honest_accuracy(model, task, mask_fn, seed=seed)))
    unanswerable = int((~task.answerable(L)).sum())
    return MaskExperiment(
        causal=runs[0], leaky=runs[1],
        honest_floor=unanswerable / L * math.log(task.vocab_size),
        chance=1.0 / task.vocab_size,
    )
