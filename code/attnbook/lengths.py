"""Length generalisation: train at one length, test at longer ones, for each way of giving
attention positions.

Two synthetic next-token tasks, both learned under the causal mask, each needing a different
kind of position:

- :class:`~attnbook.training.RepeatTask` (a random prefix of ``period`` tokens that repeats):
  the answer sits a fixed offset back, ``period - 1`` keys before the query. It needs
  *relative offsets*.
- :class:`LastMarkerTask`: a few token values are markers; the answer at each position is the
  most recent marker so far. It needs *recency*: the closest of several candidates.

:func:`length_experiment` trains a :class:`~attnbook.training.TinyAttentionModel` with each
position scheme of :mod:`attnbook.positions` (and none), several seeds each, at the training
length, and measures the held-out accuracy at multiples of that length.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ._validate import require_generator, require_int, require_real
from .masks import causal_mask
from .training import Task, TinyAttentionModel, evaluate, train

__all__ = ["SCHEMES", "LastMarkerTask", "LengthExperiment", "length_experiment"]

#: The position schemes of :class:`~attnbook.training.TinyAttentionModel`, in the book's order.
SCHEMES = ("none", "learned", "sinusoidal", "rope", "alibi")


@dataclass(frozen=True)
class LastMarkerTask:
    """Predict the most recent marker: a task that needs recency.

    Token values ``0 .. markers - 1`` are markers, the rest are filler. Each position is a
    marker with probability ``rate`` (position 0 always is), drawn uniformly among the
    markers; otherwise it is a uniform filler token. The target at position ``t`` is the
    most recent marker at or before ``t``. A model that averages over all earlier markers
    (what attention without positions does under the causal mask) is wrong whenever an
    earlier, different marker outweighs the latest one.

    Args:
        vocab_size: the number of token values, markers included.
        length: the sequence length ``L``.
        markers: how many of the values are markers, at least 2 and fewer than
            ``vocab_size``.
        rate: the probability that a position (after the first) is a marker.

    Raises:
        TypeError: a size that is not an int, a rate that is not a number.
        ValueError: sizes out of range, ``rate`` outside ``(0, 1)``.
    """

    vocab_size: int = 16
    length: int = 16
    markers: int = 4
    rate: float = 0.25

    def __post_init__(self) -> None:
        require_int("vocab_size", self.vocab_size, minimum=3)
        require_int("length", self.length, minimum=2)
        require_int("markers", self.markers, minimum=2, maximum=self.vocab_size - 1)
        rate = require_real("rate", self.rate)
        if not 0 < rate < 1:
            raise ValueError(f"rate must be between 0 and 1 (exclusive), got {rate}")

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """A seeded batch ``(inputs, targets)``, both ``(batch_size, L)`` ``torch.long``."""
        batch_size = require_int("batch_size", batch_size)
        generator = require_generator(generator)
        shape = (batch_size, self.length)
        filler = torch.randint(self.markers, self.vocab_size, shape, generator=generator)
        marker = torch.randint(self.markers, shape, generator=generator)  # (B, L)
        is_marker = torch.rand(shape, generator=generator) < self.rate  # (B, L)
        is_marker[:, 0] = True
        inputs = torch.where(is_marker, marker, filler)  # (B, L)
        # The position of the latest marker so far: a running maximum of marker positions.
        latest = torch.where(is_marker, torch.arange(self.length), 0).cummax(-1).values
        return inputs, inputs.gather(1, latest)  # (B, L), (B, L)

    def required_pattern(self, L: int | None = None) -> Tensor:
        """The expected map ``(L, L)``: row ``t`` holds the probability that key ``j``
        is the latest marker, ``rate * (1 - rate) ** (t - j)`` for ``0 < j <= t`` and
        ``(1 - rate) ** t`` for ``j = 0``. Which key holds the answer depends on the
        sequence; this is its average."""
        L = self.length if L is None else require_int("L", L)
        t = torch.arange(L, dtype=torch.float64)[:, None]  # (L, 1)
        j = torch.arange(L, dtype=torch.float64)[None, :]  # (1, L)
        keep = (1 - self.rate) ** (t - j)  # (L, L)
        chance = torch.where(j == 0, keep, self.rate * keep)  # (L, L)
        return (chance * causal_mask(L)).float()  # (L, L)

    def answerable(self, L: int | None = None) -> Tensor:
        """``(L,)`` boolean, all ``True``: position 0 is always a marker."""
        L = self.length if L is None else require_int("L", L)
        return torch.ones(L, dtype=torch.bool)  # (L,)


@dataclass(frozen=True)
class _PastLength:
    """``task`` scored only at positions ``start`` and later: the same batches and map, fewer
    answerable positions."""

    task: Task
    start: int

    @property
    def vocab_size(self) -> int:
        return self.task.vocab_size

    @property
    def length(self) -> int:
        return self.task.length

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return self.task.batch(batch_size, generator)

    def required_pattern(self, L: int | None = None) -> Tensor:
        return self.task.required_pattern(L)

    def answerable(self, L: int | None = None) -> Tensor:
        answerable = self.task.answerable(L)  # (L,)
        return answerable & (torch.arange(answerable.shape[0]) >= self.start)  # (L,)


@dataclass
class LengthExperiment:
    """What :func:`length_experiment` measured.

    Attributes:
        schemes: the position schemes, in order.
        seeds: the seeds of each scheme.
        lengths: the evaluation lengths; the first is the training length.
        steps: the training steps of each model.
        accuracy: held-out accuracy over every answerable position, a float64 tensor
            ``(schemes, seeds, lengths)``.
        beyond: held-out accuracy over the answerable positions at or past the training
            length only, the same shape; ``nan`` at the training length, which has none.
        seconds: the wall-clock time of all the training and evaluation.
    """

    schemes: tuple[str, ...]
    seeds: tuple[int, ...]
    lengths: tuple[int, ...]
    steps: int
    accuracy: Tensor
    beyond: Tensor
    seconds: float

    def mean(self) -> Tensor:
        """The accuracy averaged over seeds, ``(schemes, lengths)``."""
        return self.accuracy.mean(1)

    def spread(self) -> tuple[Tensor, Tensor]:
        """The lowest and highest accuracy over seeds, each ``(schemes, lengths)``."""
        return self.accuracy.amin(1), self.accuracy.amax(1)

    def at(self, scheme: str, length: int, *, beyond: bool = False) -> Tensor:
        """The accuracy of every seed of ``scheme`` at ``length``, ``(seeds,)``; with
        ``beyond=True``, over the positions past the training length only."""
        if scheme not in self.schemes:
            raise ValueError(f"scheme must be one of {self.schemes}, got {scheme!r}")
        if length not in self.lengths:
            raise ValueError(f"length must be one of {self.lengths}, got {length!r}")
        table = self.beyond if beyond else self.accuracy
        return table[self.schemes.index(scheme), :, self.lengths.index(length)]


def length_experiment(
    make_task: Callable[[int], Task],
    *,
    train_length: int = 16,
    factors: Sequence[int] = (1, 2, 4),
    schemes: Sequence[str] = SCHEMES,
    seeds: Sequence[int] = (0, 1, 2),
    steps: int = 200,
    batch_size: int = 32,
    lr: float = 1e-2,
    d_model: int = 32,
    num_heads: int = 4,
    eval_batch_size: int = 256,
) -> LengthExperiment:
    """Train one small model per (scheme, seed) at ``train_length``; test at longer lengths.

    Each model is a :class:`~attnbook.training.TinyAttentionModel` without an MLP, sized
    for the longest evaluation length (so a learned table has rows it never trained), and
    trained with the causal mask by :func:`~attnbook.training.train` (one thread, seeded).
    Accuracy is measured on a held-out batch of each length, over every answerable
    position.

    Args:
        make_task: ``length -> task``, e.g. ``lambda n: RepeatTask(16, n, period=4)``.
        train_length: the length trained at.
        factors: evaluation lengths as multiples of ``train_length``; must include 1.
        schemes: values of ``TinyAttentionModel``'s ``positions``.
        seeds: each seed sets the initial weights and the training batches.
        steps, batch_size, lr: the training budget (steps of ``batch_size`` sequences) and
            Adam's learning rate.
        d_model, num_heads: the model's size.
        eval_batch_size: sequences in each held-out batch.

    Returns:
        A :class:`LengthExperiment`.

    Raises:
        TypeError, ValueError: a ``make_task`` that is not callable or returns something
            else than a task of the asked length, bad sizes, an unknown scheme.
    """
    if not callable(make_task):
        raise TypeError(f"make_task must be a function length -> task, got "
                        f"{type(make_task).__name__}")
    train_length = require_int("train_length", train_length, minimum=2)
    steps = require_int("steps", steps)
    batch_size = require_int("batch_size", batch_size)
    factors = tuple(require_int("factors", f) for f in factors)
    if not factors or factors[0] != 1:
        raise ValueError(f"factors must start with 1 (the training length), got {factors}")
    unknown = [s for s in schemes if s not in SCHEMES]
    if unknown or not schemes:
        raise ValueError(f"schemes must be some of {SCHEMES}, got {tuple(schemes)}")
    seeds = tuple(require_int("seeds", s, minimum=0) for s in seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    lengths = tuple(train_length * f for f in factors)
    tasks = [make_task(n) for n in lengths]
    for n, task in zip(lengths, tasks, strict=True):
        if not isinstance(task, Task) or task.length != n:
            raise ValueError(f"make_task({n}) must return a task of length {n}, got {task!r}")

    accuracy = torch.zeros(len(schemes), len(seeds), len(lengths), dtype=torch.float64)
    beyond = torch.full_like(accuracy, math.nan)
    start = time.perf_counter()
    for a, scheme in enumerate(schemes):
        for b, seed in enumerate(seeds):
            model = TinyAttentionModel(tasks[0].vocab_size, max(lengths), d_model, num_heads,
                                       d_mlp=0, positions=scheme, seed=seed)
            train(model, tasks[0], steps=steps, batch_size=batch_size, lr=lr,
                  mask=causal_mask(train_length),
                  seed=seed, progress=False, eval_every=steps, eval_batch_size=64)
            for c, (n, task) in enumerate(zip(lengths, tasks, strict=True)):
                # The same held-out batch (same seed) for both measures.
                accuracy[a, b, c] = evaluate(model, task, mask=causal_mask(n),
                                             batch_size=eval_batch_size, seed=seed).accuracy
                if n > train_length:
                    beyond[a, b, c] = evaluate(model, _PastLength(task, train_length),
                                               mask=causal_mask(n), batch_size=eval_batch_size,
                                               seed=seed).accuracy
    return LengthExperiment(tuple(schemes), seeds, lengths, steps, accuracy, beyond,
                            time.perf_counter() - start)
