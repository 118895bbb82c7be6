"""The checkers of the chapter ``cache-budget``: :func:`check_quantize_keys` and
:func:`check_evict_one`.

The references are the package's own :func:`~attnbook.compress.quantize` (per channel,
its bytes with 16-bit minima and steps) and :func:`~attnbook.compress.heavy_hitter_keep`.
The typical wrong answers are built beside them (a scale per token instead of per
channel, one group for all the tokens, ``2**bits`` levels, the minima and steps left out
of the bytes, a sink or the newest token evicted), so that a hint can name the mistake.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..compress import heavy_hitter_keep, quantize
from .compare import Mismatch, Mistake, as_scalar, expect_close, expect_number, expect_pair, values
from .harness import Checks, call_reader, error_hints, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_evict_one", "check_quantize_keys"]


# ------------------------------------------------------------------------ quantize_keys

_QUANTIZE_HINT = (
    "for each channel (a column of keys) and each block of `group` consecutive tokens "
    "(rows), take the block's minimum and step = (max - min) / (2**bits - 1), round "
    "(x - min) / step to the nearest integer, and return code · step + min."
)
_BYTES_HINT = (
    "count what a cache stores: every code in `bits` bits, packed (t · C · bits / 8 bytes), "
    "plus a 16-bit minimum and a 16-bit step (4 bytes) for every block of one channel."
)
_QUANTIZE_ERRORS = error_hints(
    (ZeroDivisionError, "", "a block whose numbers are all equal has a step of 0: keep its "
     "numbers as they are (code 0) instead of dividing by the step."),
)


def _blocks(keys: Tensor, group: int, *, per_token: bool = False) -> Tensor:
    """``keys`` ``(t, C)`` as rows of ``group`` numbers: per channel (or per token)."""
    rows = keys if per_token else keys.T  # (C, t): a channel's tokens in a row
    return rows.unflatten(-1, (-1, group))


def _rounded(keys: Tensor, bits: int, group: int, *, levels: int | None = None,
             per_token: bool = False, floor: bool = False) -> Tensor:
    """Min-max rounding written plainly, with the mistakes it can be asked to make."""
    blocks = _blocks(keys.double(), group, per_token=per_token)
    low = blocks.amin(-1, keepdim=True)
    step = (blocks.amax(-1, keepdim=True) - low) / (levels or 2 ** bits - 1)
    codes = torch.where(step > 0, (blocks - low) / torch.where(step > 0, step, 1.0), 0.0)
    codes = codes.floor() if floor else codes.round()
    out = (codes * step + low).flatten(-2)
    return (out if per_token else out.T).to(keys.dtype)


def _exact_keys(t: int, channels: int, bits: int, group: int, *, seed: int,
                wide: Tensor | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """Keys ``(t, C)`` whose every block has its minimum and maximum on exact levels and
    every other number at least 0.2 of a step from a midpoint: any correct rounding gives
    the same codes, whatever the order of its arithmetic."""
    gen = torch.Generator().manual_seed(seed)
    levels = 2 ** bits - 1
    blocks = channels * (t // group)
    low = torch.randn(blocks, 1, generator=gen, dtype=torch.float64)
    step = 0.1 + torch.rand(blocks, 1, generator=gen, dtype=torch.float64)
    if wide is not None:  # some channels many times larger than the rest
        step = step * wide.double().repeat_interleave(t // group)[:, None]
    codes = torch.randint(0, levels + 1, (blocks, group), generator=gen).double()
    codes[:, 0], codes[:, -1] = 0.0, float(levels)
    jitter = 0.6 * torch.rand(blocks, group, generator=gen, dtype=torch.float64) - 0.3
    jitter[:, 0] = jitter[:, -1] = 0.0
    x = low + (codes + jitter) * step  # (C · t/group, group)
    order = torch.randperm(group, generator=gen)  # the extremes anywhere in the block
    x = x[:, order].reshape(channels, t)
    return x.T.contiguous().to(dtype)  # (t, C)


def check_quantize_keys(quantize_fn: Callable) -> None:
    """Check ``quantize_fn(keys, bits, group) -> (rounded, nbytes)``: keys rounded per
    channel, and the bytes they take.

    The exercise ``cache-budget-ex1`` of the chapter ``cache-budget``: keys ``(t, C)`` are
    rounded to ``bits``-bit codes, min-max and asymmetric, with one minimum and one step
    for each channel in each block of ``group`` consecutive tokens (KIVI's keys);
    ``rounded`` is what the codes stand for, in the keys' shape and dtype, and ``nbytes``
    what a cache stores: the codes packed, ``bits`` each, and a 16-bit minimum and step
    per block. The references are :func:`attnbook.compress.quantize` with ``per="channel"``
    (steps in the keys' precision, for ``rounded``; 16-bit, for ``nbytes``).

    The keys are built so that no number lies near a midpoint between two levels: any
    correct rounding gives the same codes. Its hints name a scale per token instead of per
    channel, one block for all the tokens, ``2**bits`` levels instead of ``2**bits - 1``
    steps, ``floor`` instead of ``round``, a block of equal numbers (step 0), and bytes
    without the minima and steps, with a byte per code, or with 32-bit minima and steps.
    """
    quantize_fn = require_function("quantize_fn", quantize_fn)
    checks = Checks("check_quantize_keys", _QUANTIZE_ERRORS)
    name = name_of(quantize_fn)

    def run(label: str, keys: Tensor, bits: int, group: int) -> None:
        t, channels = keys.shape
        call = f"{name}({label}, bits={bits}, group={group})"
        got = call_reader(call, quantize_fn, keys, bits, group,
                          names=("keys", "bits", "group"))
        rounded, nbytes = expect_pair(call, got, "rounded", "nbytes")
        scale = torch.float64 if keys.dtype == torch.float64 else torch.float32
        expected = quantize(keys, bits, per="channel", group=group,
                            scale_dtype=scale).dequantize()
        mistakes: list[Mistake] = [
            ("that is a scale per token (a row of keys): keys have a few large channels, "
             "so each channel (a column) gets its own minimum and step, over a block of "
             "`group` tokens.", lambda: _rounded(keys, bits, channels, per_token=True)),
            (f"that is one block of all {t} tokens per channel: a channel gets a new "
             f"minimum and step every `group` = {group} tokens.",
             lambda: _rounded(keys, bits, t)),
            (f"{bits} bits give 2**bits = {2 ** bits} levels and 2**bits - 1 = "
             f"{2 ** bits - 1} steps between the minimum and the maximum: divide the range "
             f"by 2**bits - 1.", lambda: _rounded(keys, bits, group, levels=2 ** bits)),
            ("round to the nearest level (`torch.round`), not down (`floor` or `int`).",
             lambda: _rounded(keys, bits, group, floor=True)),
        ]
        expect_close(f"rounded of {call}", rounded, expected, hint=_QUANTIZE_HINT,
                     mistakes=mistakes,
                     nan_hint="NaN comes from 0 / 0: a block whose numbers are all equal "
                              "has a step of 0; give it code 0, so it comes back exactly.")
        stored = quantize(keys, bits, per="channel", group=group).nbytes
        blocks = channels * (t // group)
        code_bytes = math.ceil(t * channels * bits / 8)
        got_bytes = as_scalar(f"nbytes of {call}", nbytes,
                              "return the bytes as one number (an int).")
        expect_number(f"nbytes of {call}", got_bytes, stored, atol=0.0, rtol=0.0,
                      hint=_BYTES_HINT, nan_hint=_BYTES_HINT,
                      note=f"t={t} tokens, C={channels} channels, {blocks} blocks",
                      mistakes=[
                          ("add the minimum and the step of every block: 4 bytes (two "
                           "16-bit numbers) for each channel in each block of tokens.",
                           lambda: code_bytes),
                          ("pack the codes: a code takes `bits` bits, not a whole byte.",
                           lambda: t * channels + 4 * blocks),
                          ("the minimum and the step are stored in 16 bits, 2 bytes "
                           "each, not 4.", lambda: code_bytes + 8 * blocks),
                          ("count both the minimum and the step of each block.",
                           lambda: code_bytes + 2 * blocks),
                          ("that is bits: divide by 8 for bytes.",
                           lambda: 8 * stored),
                      ])

    wide = torch.ones(8)
    wide[[1, 6]] = 20.0  # two channels twenty times larger, as in SmolLM2's keys
    constant = _exact_keys(8, 3, 2, 4, seed=4)
    constant[4:, 1] = 0.75  # a block of one channel whose numbers are all equal
    checks.run_all(run, [
        ("8 tokens of 2 channels, 2 bits, blocks of 4 tokens", "keys", _exact_keys(
            8, 2, 2, 4, seed=1), 2, 4),
        ("two channels twenty times larger than the rest, 3 bits, blocks of 16", "keys",
         _exact_keys(32, 8, 3, 16, seed=2, wide=wide), 3, 16),
        ("1 bit: each number becomes its block's minimum or maximum", "keys",
         _exact_keys(16, 4, 1, 8, seed=3), 1, 8),
        ("a block whose numbers are all equal (step 0)", "keys", constant, 2, 4),
        ("float64 keys, 4 bits, one block of all 24 tokens", "keys",
         _exact_keys(24, 6, 4, 24, seed=5, dtype=torch.float64), 4, 24),
        ("SmolLM2's shape: 256 tokens of 3 heads x 64 channels, 2 bits, blocks of 128",
         "keys", _exact_keys(256, 192, 2, 128, seed=6), 2, 128),
    ])


# ---------------------------------------------------------------------------- evict_one

_EVICT_HINT = (
    "of the held positions, leave out the sinks (position < sinks) and the `recent` newest "
    "(position > newest - recent, the newest being the last position); of the others, "
    "evict the one that has received the least attention. Return its position, not its "
    "index in the list."
)


def check_evict_one(evict_fn: Callable) -> None:
    """Check ``evict_fn(received, positions, recent, sinks) -> int``: one step of H2O.

    The exercise ``cache-budget-ex3`` of the chapter ``cache-budget``: a heavy-hitter cache
    one position over its budget holds ``positions`` ``(t,)`` (increasing, the newest
    last), whose keys have received ``received`` ``(t,)`` attention so far; it evicts the
    position, not a sink (below ``sinks``) and not one of the ``recent`` newest, that has
    received the least. The reference is :func:`attnbook.compress.heavy_hitter_keep`.

    The cases have no ties. Its hints name evicting a sink, the newest token, a recent one
    (or a window one too wide), the most attended instead of the least, and returning the
    index instead of the position.
    """
    evict_fn = require_function("evict_fn", evict_fn)
    checks = Checks("check_evict_one")
    name = name_of(evict_fn)

    def run(received: list[float], positions: list[int], recent: int, sinks: int) -> None:
        r = torch.tensor(received, dtype=torch.float64)
        p = torch.tensor(positions)
        call = (f"{name}(received={values(r, limit=8, digits=3)}, "
                f"positions={values(p, limit=8)}, recent={recent}, sinks={sinks})")
        got = call_reader(call, evict_fn, r, p, recent, sinks,
                          names=("received", "positions", "recent", "sinks"))
        got = as_scalar(call, got, "return the evicted position as one int.")
        got = int(got) if got.is_integer() else got
        keep = heavy_hitter_keep(r, p, len(positions) - 1, recent=recent, sinks=sinks)
        kept = set(keep.tolist())
        expected_index = next(i for i in range(len(positions)) if i not in kept)
        expected = positions[expected_index]
        if got == expected:
            return
        newest = positions[-1]
        hint = _EVICT_HINT
        if got in positions:
            index = positions.index(int(got))
            if int(got) < sinks:
                hint = (f"position {int(got)} is a sink (below sinks={sinks}): sinks are "
                        f"always kept, whatever they received.")
            elif int(got) == newest:
                hint = ("that is the newest token: it has received almost nothing because "
                        "it has only just arrived; the `recent` newest are always kept.")
            elif newest - int(got) < recent:
                hint = (f"position {int(got)} is one of the recent={recent} newest "
                        f"(positions {newest - recent + 1} .. {newest}), which are kept.")
            elif newest - int(got) == recent:
                hint = (f"position {int(got)} is just outside the window of the "
                        f"recent={recent} newest, so it may be evicted; but it is not the "
                        f"least attended of the candidates.")
            elif received[index] == max(received[i] for i in range(len(positions))
                                        if positions[i] >= sinks
                                        and newest - positions[i] >= recent):
                hint = ("that is the most attended candidate: a heavy hitter is kept; "
                        "evict the least attended.")
        elif 0 <= got < len(positions) and int(got) == expected_index:
            hint = (f"that is the index of the evicted entry in the list; return its "
                    f"position, positions[{int(got)}] = {expected}.")
        raise Mismatch(f"{call} evicted {got!r}, expected position {expected}",
                       [f"received:  {values(r, limit=8, digits=3)}",
                        f"positions: {values(p, limit=8)}"], hint)

    checks.run_all(run, [
        ("the chapter's example: budget 5, 6 held",
         [0.9, 0.1, 0.6, 0.2, 0.3, 0.0], [0, 1, 2, 3, 4, 5], 2, 1),
        ("the sink has received the least", [0.05, 0.8, 0.3, 0.6, 0.4, 0.1],
         [0, 1, 2, 3, 4, 5], 2, 1),
        ("a recent token has received the least", [1.5, 0.9, 0.4, 0.7, 0.2, 0.0],
         [0, 1, 2, 3, 4, 5], 2, 1),
        ("just outside the window of the newest", [1.2, 0.9, 0.8, 0.3, 0.1, 0.05, 0.0],
         [0, 2, 5, 6, 7, 8, 9], 3, 1),
        ("after earlier evictions: positions are not indices",
         [2.0, 0.7, 0.25, 0.9, 0.6, 0.3, 0.1], [0, 1, 4, 9, 11, 12, 13], 2, 2),
        ("no sinks", [0.2, 0.9, 0.5, 0.7, 0.0], [3, 5, 6, 7, 8], 1, 0),
    ])
