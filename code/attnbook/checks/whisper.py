"""The checkers of the chapter ``whisper``: :func:`check_dtw`,
:func:`check_cross_attention_steps` and :func:`check_word_rows`.

:func:`check_dtw`'s reference is the package's :func:`~attnbook.whisper.dtw`. A path is
judged by what makes it a warping path, one rule at a time, so that a hint can name the rule
a wrong answer breaks: it starts at ``(0, 0)``, ends at ``(n - 1, m - 1)``, moves one row
down, one column right or both at every step (never back, never skipping a cell), and costs
no more than the cheapest such path. Where several paths tie for the cheapest, any of them
passes.

:func:`check_cross_attention_steps`'s reference is :func:`~attnbook.whisper.cross_keys_values`
with :func:`~attnbook.whisper.cross_attend`. Besides the output, it watches the layer's
projections run (forward hooks): what each one was given and how often, which is how it
tells keys recomputed at every step, or taken from the text, from right ones.

:func:`check_word_rows`'s reference is :func:`~attnbook.whisper.predicting_rows`: which rows
of a cross-attention map predict each word. Its hints name the row one late (the row where
a token is the input), one early, rows counted from 0 without the prompt, and rows that
start again at every word.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

from .._validate import require_function
from ..attention import attention
from ..layers import MultiHeadAttention
from ..whisper import cross_attend, cross_keys_values, dtw, predicting_rows
from .compare import Mismatch, Mistake, expect_close, randn
from .harness import Checks, call_reader, error_hints, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_cross_attention_steps", "check_dtw", "check_word_rows"]

_STEP_HINT = (
    "each step of a warping path moves one row down, one column right, or both: from "
    "(i, j) to (i + 1, j), (i, j + 1) or (i + 1, j + 1). Walking back from the last cell, "
    "go to the cheapest of (i - 1, j - 1), (i - 1, j) and (i, j - 1)."
)
_TABLE_HINT = (
    "total[i, j] = cost[i, j] + min(total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]): "
    "all three predecessors, with total = inf outside the matrix except a start of 0 before "
    "(0, 0); then walk back from the last cell to the cheapest predecessor each time."
)


def _as_path(call: str, got: object) -> np.ndarray:
    """The reader's path as an integer array ``(k, 2)``."""
    if isinstance(got, torch.Tensor):
        got = got.tolist()
    try:
        path = np.array(list(got), dtype=float)
    except (TypeError, ValueError):
        raise Mismatch(f"{call} returned {type(got).__name__}, not a list of (row, "
                       f"column) pairs", hint="return [(0, 0), ..., (n - 1, m - 1)]: "
                       "a list of tuples, or an array of shape (k, 2).") from None
    if path.ndim != 2 or path.shape[1] != 2 or not len(path):
        raise Mismatch(f"{call} returned shape {path.shape}, not (k, 2): a list of "
                       f"(row, column) pairs", hint="one (row, column) pair per cell of the "
                       "path, from (0, 0) to the last cell.")
    if not np.array_equal(path, np.round(path)):
        raise Mismatch(f"{call} returned non-integer positions: {path[:4].tolist()}",
                       hint="each pair is a cell's (row, column) index.")
    return path.astype(int)


def check_dtw(dtw_fn: Callable) -> None:
    """Check ``dtw_fn(cost) -> path``: the cheapest monotone path through a cost matrix.

    The exercise ``whisper-ex1`` of the chapter ``whisper``: ``cost`` is a float64 array
    ``(n, m)``; the path is a list of ``(row, column)`` pairs (or an array ``(k, 2)``) from
    ``(0, 0)`` to ``(n - 1, m - 1)``, each step ``(1, 0)``, ``(0, 1)`` or ``(1, 1)``, whose
    cells cost as little in total as any such path (the reference is
    :func:`attnbook.whisper.dtw`; ties between equally cheap paths pass).

    The matrices tempt the usual mistakes: a cheap cell up and to the left of a path's way
    (a path that goes back), a cheap cell two columns on (one that skips), a cheap corner
    away from ``(0, 0)`` (one that starts elsewhere), a table filled with only the diagonal
    and one other predecessor, and the single row and column, where only one path exists.
    """
    dtw_fn = require_function("dtw_fn", dtw_fn)
    checks = Checks("check_dtw")
    name = name_of(dtw_fn)

    def run(label: str, cost: np.ndarray) -> None:
        call = f"{name}({label})"
        got = call_reader(call, dtw_fn, cost.copy(), names=("cost",))
        path = _as_path(call, got)
        n, m = cost.shape
        if (n, m) != (1, 1) and tuple(path[0]) == (n - 1, m - 1) and tuple(path[-1]) == (0, 0):
            raise Mismatch(f"the path runs from ({n - 1}, {m - 1}) back to (0, 0)",
                           hint="walking back from the last cell collects the path in "
                                "reverse: reverse it before returning (`path[::-1]`).")
        if tuple(path[0]) != (0, 0):
            raise Mismatch(f"the path starts at {tuple(path[0])}, not (0, 0)",
                           hint="a warping path pins both ends: the first pair is (0, 0), "
                                "the first token with the first audio position.")
        if tuple(path[-1]) != (n - 1, m - 1):
            raise Mismatch(f"the path ends at {tuple(path[-1])}, not ({n - 1}, {m - 1})",
                           hint="a warping path pins both ends: the last pair is "
                                "(n - 1, m - 1), the last token with the last audio "
                                "position.")
        steps = np.diff(path, axis=0)
        for index, step in enumerate(steps):
            if tuple(step) not in {(1, 0), (0, 1), (1, 1)}:
                kind = ("goes back" if (step < 0).any() else
                        "skips a cell" if (step > 1).any() else "stays in place")
                raise Mismatch(
                    f"the path {kind}: from {tuple(path[index])} to "
                    f"{tuple(path[index + 1])}", hint=_STEP_HINT)
        theirs = dtw(cost)
        best = float(cost[theirs[:, 0], theirs[:, 1]].sum())
        total = float(cost[path[:, 0], path[:, 1]].sum())
        if total > best + 1e-9 * max(1.0, abs(best)):
            raise Mismatch(
                f"the path costs {total:.4g}, but a path costing {best:.4g} exists",
                [f"yours:    {[tuple(p) for p in path.tolist()]}",
                 f"cheapest: {[tuple(p) for p in theirs.tolist()]}"],
                hint=_TABLE_HINT)

    rng = np.random.default_rng(20261130)
    back = np.full((3, 4), 5.0)
    back[0, 0] = back[1, 1] = back[2, 3] = 0.0
    back[0, 2] = back[1, 3] = -1.0  # cheap, but reached only by moving back or skipping
    skip = np.full((2, 5), 1.0)
    skip[0, 0], skip[1, 2], skip[0, 3] = 0.0, 0.0, -0.5
    corner = np.full((3, 3), 1.0)
    corner[0, 0], corner[1, 1], corner[2, 2] = 3.0, 0.0, 0.0
    corner[0, 1] = -2.0  # a path may not start here instead of (0, 0)
    checks.run_all(run, [
        ("the chapter's 2 x 3 example", "[[0, 5, 5], [5, 0, 0]]",
         np.array([[0.0, 5.0, 5.0], [5.0, 0.0, 0.0]])),
        ("a random 6 x 9 cost matrix", "cost (6, 9)", rng.random((6, 9))),
        ("cheap cells that only a path going back or skipping reaches", "cost (3, 4)", back),
        ("a cheap cell two columns on", "cost (2, 5)", skip),
        ("an expensive start and a cheap cell beside it", "cost (3, 3)", corner),
        ("a tall 12 x 3 matrix", "cost (12, 3)", rng.random((12, 3))),
        ("a single row: only one path", "cost (1, 5)", rng.random((1, 5))),
        ("a single column: only one path", "cost (4, 1)", rng.random((4, 1))),
        ("one cell", "cost (1, 1)", np.array([[2.0]])),
    ])


# ------------------------------------------------------------ cross-attention, step by step

_STEPS_HINT = (
    "before the loop, keys = split(cross.k_proj(sound)) and values = split(cross.v_proj("
    "sound)); at step t, q = split(cross.q_proj(text[:, t:t + 1])), weights = softmax(q "
    "k^T / sqrt(d_head)) over all audio positions, out = cross.out_proj(merge(weights @ "
    "values)); return the steps' outputs joined, `torch.cat(outputs, dim=1)`. "
    "split: (B, n, d_model) -> (B, h, n, d_head); merge is its inverse."
)
_FROM_THE_SOUND = (
    "cross-attention's keys and values come from the sound, the encoder's output: "
    "`cross.k_proj(sound)` and `cross.v_proj(sound)`. Keys and values of the text are what "
    "the decoder's self-attention uses; here the text gives only the queries."
)
_ONCE_HINT = (
    "the sound does not change while the decoder writes: project it once, before the "
    "loop, and let every step reuse the keys and values. Calling the whole layer at each "
    "step, `cross(text[:, t:t + 1], sound)`, projects all the audio positions again."
)
_steps_hint = error_hints(
    (RuntimeError, "must match",
     "the text and the sound have different lengths (T and S): split each with its own "
     "length, `x.shape[1]`, or with `cross.split_heads(x)`."),
    (RuntimeError, "invalid for input",
     "read the heads from the layer, `cross.num_heads` heads of `cross.d_head`, not from "
     "the chapter's Whisper (6 of 64): the checks use other sizes. `cross.split_heads(x)` "
     "and `cross.merge_heads(x)` do the reshaping for you."),
    (RuntimeError, "unflatten",
     "read the heads from the layer, `cross.num_heads` heads of `cross.d_head`, not from "
     "the chapter's Whisper (6 of 64): the checks use other sizes."),
    (RuntimeError, "view", "after a transpose the tensor is no longer contiguous: use "
     "`.reshape(...)` or `.flatten(-2)` instead of `.view`."),
)


class _Watched:
    """What each projection of ``layer`` was given while the reader's code ran."""

    def __init__(self, layer: MultiHeadAttention) -> None:
        self.inputs: dict[str, list[Tensor]] = {}
        self.hooks = []
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            self.inputs[name] = []
            self.hooks.append(getattr(layer, name).register_forward_hook(
                functools.partial(self._record, self.inputs[name]), with_kwargs=True))

    @staticmethod
    def _record(seen: list[Tensor], module: nn.Module, args: tuple, kwargs: dict,
                output: object) -> None:
        given = args[0] if args else kwargs.get("input")
        if isinstance(given, Tensor):
            seen.append(given.detach().clone())

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()


def _rows(x: Tensor, width: int) -> list[bytes]:
    """The vectors ``x`` holds, ``(..., width)``, each as its bytes in float32."""
    flat = x.detach().to(torch.float32).reshape(-1, width).contiguous()
    return [row.numpy().tobytes() for row in flat]


def _check_projections(seen: dict[str, list[Tensor]], sound: Tensor, text: Tensor) -> None:
    """Raise a Mismatch naming the first projection that never ran, ran on the wrong
    vectors, or ran on an audio position more than once. Each projection's input is read
    as vectors, so any shape works: the sound whole, one clip of it, a text position
    ``text[:, t]`` or ``text[:, t:t + 1]``."""
    T, d_model = text.shape[1], text.shape[-1]
    sound_rows = {row: i for i, row in enumerate(_rows(sound, d_model))}
    text_rows = {row: i for i, row in enumerate(_rows(text, d_model))}
    for name, what in (("k_proj", "keys"), ("v_proj", "values")):
        if not seen[name]:
            raise Mismatch(f"cross.{name} never ran, so the check cannot see where the "
                           f"{what} come from",
                           hint=f"compute the {what} as `cross.{name}(sound)`: call the "
                                f"module itself, as the check watches each projection run "
                                f"(not `.forward`, `F.linear` or its weights).")
    for name in ("k_proj", "v_proj"):
        times: dict[int, int] = {}
        for given in seen[name]:
            rows = _rows(given, d_model)
            if not all(row in sound_rows for row in rows):
                source = ("the text" if all(row in text_rows for row in rows) else
                          "something that is neither the sound nor the text")
                raise Mismatch(f"cross.{name} was given {source}, shape "
                               f"{tuple(given.shape)}, not the sound {tuple(sound.shape)}",
                               hint=_FROM_THE_SOUND)
            for row in rows:
                times[sound_rows[row]] = times.get(sound_rows[row], 0) + 1
        if max(times.values()) > 1:
            raise Mismatch(f"cross.{name} projected the sound {max(times.values())} times "
                           f"for {T} steps, not once", hint=_ONCE_HINT)
    per_call = []
    for given in seen["q_proj"]:
        rows = _rows(given, d_model)
        if not all(row in text_rows for row in rows):
            raise Mismatch("cross.q_proj was given something other than the text",
                           hint="the queries come from the text being written, one position "
                                "a step: `cross.q_proj(text[:, t:t + 1])`.")
        clips = [text_rows[row] // T for row in rows]
        per_call.append(max(clips.count(clip) for clip in set(clips)))
    if not per_call or max(per_call) > 1:
        raise Mismatch(f"cross.q_proj ran on {per_call} text positions of a clip per call, "
                       f"not on one position at each of the {T} steps",
                       hint="a decoder has one new text position a step (the next token "
                            "does not exist until this one is chosen): project "
                            "`text[:, t:t + 1]` inside the loop, with `cross.q_proj`.")


def check_cross_attention_steps(steps_fn: Callable) -> None:
    """Check ``steps_fn(cross, sound, text) -> output``: cross-attention as a decoder runs it.

    The exercise ``whisper-ex4`` of the chapter ``whisper``: ``cross`` is a
    :class:`~attnbook.layers.MultiHeadAttention`, ``sound`` ``(B, S, d_model)`` the
    encoder's output and ``text`` ``(B, T, d_model)`` the decoder's vectors where
    cross-attention reads them. The function projects the sound into keys and values once,
    then at each of ``T`` steps projects one text position into queries, attends to every
    audio position (no mask, scale ``1 / sqrt(d_head)``) and applies ``cross.out_proj``;
    it returns the steps' outputs ``(B, T, d_model)``. The reference is
    :func:`attnbook.whisper.cross_keys_values` and :func:`attnbook.whisper.cross_attend`.

    Forward hooks on the four projections say what each was given: keys or values taken
    from the text, the sound projected again at every step (the whole layer called per
    step), or all text positions projected at once each fail with their own hint. The output
    is then compared, and its hints name a causal mask on the sound (at the step, or
    top-left as ``is_causal=True`` puts it), the scale left out or taken from ``d_model``,
    one head of ``d_model`` instead of ``h``, the softmax over the wrong dimension, and a
    missing output projection.
    """
    steps_fn = require_function("steps_fn", steps_fn)
    checks = Checks("check_cross_attention_steps", _steps_hint)
    name = name_of(steps_fn)

    def run(B: int, S: int, T: int, d_model: int, h: int, seed: int) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            cross = MultiHeadAttention(d_model, h)
        sound = randn(B, S, d_model, seed=seed + 1, scale=1.5)
        text = randn(B, T, d_model, seed=seed + 2, scale=1.5)
        call = f"{name}(cross, sound, text)"
        watched = _Watched(cross)
        try:
            got = call_reader(call, steps_fn, cross, sound.clone(), text.clone(),
                              names=("cross", "sound", "text"))
        finally:
            watched.remove()
        _check_projections(watched.inputs, sound, text)
        with torch.no_grad():
            expected = cross_attend(cross, text, cross_keys_values(cross, sound)).output
            d_head = d_model // h
            q = cross.split_heads(cross.q_proj(text))  # (B, h, T, d_head)
            k, v = cross_keys_values(cross, sound)  # (B, h, S, d_head) each
            T_by_S = torch.ones(T, S, dtype=torch.bool)

            def wrong(mask: Tensor | None = None, scale: float | None = None, *,
                      project: bool = True, one_head: bool = False) -> Tensor:
                if one_head:
                    out = attention(cross.q_proj(text), cross.k_proj(sound),
                                    cross.v_proj(sound), mask, scale=scale).output
                else:
                    out = cross.merge_heads(attention(q, k, v, mask, scale=scale).output)
                return cross.out_proj(out) if project else out

            mistakes: list[Mistake] = [
                ("no mask on the sound: `is_causal=True` aligns its mask top-left, so a "
                 "step's one query sees audio position 0 only. The whole clip was recorded "
                 "before the first word, so every step may attend to all of it.",
                 lambda: wrong(torch.tril(T_by_S[:1]).expand(T, S))),
                ("no mask on the sound: step t may attend to every audio position, not "
                 "only to positions 0 .. t. Nothing in the sound lies in the text's future.",
                 lambda: wrong(torch.tril(T_by_S))),
                (f"the scores are not scaled: divide q k^T by sqrt(d_head) = sqrt({d_head}) "
                 f"before the softmax.", lambda: wrong(scale=1.0)),
                (f"scale by 1/sqrt(d_head) = 1/sqrt({d_head}), the width of one head, not by "
                 f"1/sqrt(d_model) = 1/sqrt({d_model}).",
                 lambda: wrong(scale=1 / math.sqrt(d_model))),
                (f"split the vectors into {h} heads of d_head = {d_head}: each head attends "
                 f"on its own (`cross.split_heads`), then merge them back.",
                 lambda: wrong(one_head=True)),
                ("the softmax runs over the audio positions, dim=-1, so that each query's "
                 "weights sum to 1. Over dim=-2, a step's one query gets weight 1 on "
                 "every position, and the output sums all the values.",
                 lambda: cross.out_proj(cross.merge_heads(
                     v.sum(dim=-2, keepdim=True).expand(B, h, T, d_head)))),
                ("project the merged heads with `cross.out_proj`, as the layer does.",
                 lambda: wrong(project=False)),
            ]
        expect_close(f"the output of {call}", got, expected, hint=_STEPS_HINT,
                     mistakes=mistakes,
                     note=f"sound {tuple(sound.shape)}, text {tuple(text.shape)}, {h} heads "
                          f"of d_head = {d_head}")

    checks.run_all(run, [
        ("one clip: sound (1, 6, 8), text (1, 3, 8), 2 heads", 1, 6, 3, 8, 2, 401),
        ("a batch of 2: sound (2, 9, 12), text (2, 4, 12), 3 heads", 2, 9, 4, 12, 3, 411),
        ("a single step: sound (1, 5, 8), text (1, 1, 8), 4 heads", 1, 5, 1, 8, 4, 421),
        ("Whisper tiny.en's sizes: sound (1, 1500, 384), text (1, 5, 384), 6 heads",
         1, 1500, 5, 384, 6, 431),
    ])


# ---------------------------------------------------------------- the rows that predict words

_ROWS_HINT = (
    "the map's rows are the decoder's inputs: the prompt at rows 0 .. prompt_length - 1, "
    "then the text's tokens. Row r predicts the token at position r + 1, so a token at "
    "position p is predicted by row p - 1: the prompt's last row predicts the first word. "
    "Keep a running position across the words."
)


def _as_word_rows(call: str, got: object) -> list[list[int]] | list[int]:
    """The reader's rows as lists of ints: one list a word, or a flat list to diagnose."""
    if isinstance(got, torch.Tensor | np.ndarray):
        got = got.tolist()
    if not isinstance(got, list | tuple):
        raise Mismatch(f"{call} returned {type(got).__name__}, not a list with one list of "
                       f"rows a word", hint="return [[rows of word 0], [rows of word 1], ...].")
    rows = []
    for item in got:
        if isinstance(item, torch.Tensor | np.ndarray):
            item = item.tolist()
        if isinstance(item, list | tuple | range):
            item = list(item)
            if not all(isinstance(r, int | np.integer) for r in item):
                raise Mismatch(f"{call} returned rows that are not integers: {item}",
                               hint="each row is an index into the map, an int.")
            rows.append([int(r) for r in item])
        elif isinstance(item, int | np.integer):
            rows.append(int(item))
        else:
            raise Mismatch(f"{call} returned a {type(item).__name__} among its rows",
                           hint="return one list of row indices (ints) a word.")
    return rows


def check_word_rows(rows_fn: Callable) -> None:
    """Check ``rows_fn(prompt_length, pieces) -> rows``: the rows that predict each word.

    The exercise ``whisper-ex5`` of the chapter ``whisper``: a cross-attention map's rows
    are the decoder's inputs, ``prompt_length`` prompt tokens, then the words' tokens
    (``pieces``, one list of ids a word), then the end of text. For each word, the list of
    rows that predict its tokens, each one before the token's own position (the reference
    is :func:`attnbook.whisper.predicting_rows`).

    Checks the chapter's prompt of two tokens with one-token words, words of several
    tokens, prompts of 1 and 4 tokens, and one long word. Its hints name the row one late
    (where the token is the input), one early, rows counted without the prompt, rows that
    start again at every word, and a flat list instead of one list a word.
    """
    rows_fn = require_function("rows_fn", rows_fn)
    checks = Checks("check_word_rows")
    name = name_of(rows_fn)

    def run(prompt_length: int, pieces: list[list[int]]) -> None:
        call = f"{name}({prompt_length}, {pieces})"
        got = _as_word_rows(call, call_reader(call, rows_fn, prompt_length,
                                              [list(p) for p in pieces],
                                              names=("prompt_length", "pieces")))
        expected = predicting_rows(prompt_length, pieces)
        if got == expected:
            return
        flat = [row for word in expected for row in word]
        restarted = [[prompt_length - 1 + j for j in range(len(p))] for p in pieces]
        mistakes = [
            ([[r + 1 for r in w] for w in expected],
             "one row late: the row where a token is the input predicts the NEXT token. The "
             "token at position p is predicted by row p - 1 (the bug gallery's \"Word times "
             "read one row late\": every word about a word late)."),
            (predicting_rows(1, pieces),
             f"count the prompt: its {prompt_length} tokens are rows 0 .. "
             f"{prompt_length - 1}, and the text's tokens come after them."),
            ([[r - 1 for r in w] for w in expected],
             "one row early: the token at position p is predicted by row p - 1, not p - 2."),
            (restarted,
             "each word starts where the previous one ended: keep a running position, "
             "adding each word's number of tokens."),
            (flat, "one list of rows a word, [[...], [...]], not one flat list: word_times "
                   "needs to know where each word begins."),
        ]
        hint = next((advice for wrong, advice in mistakes if got == wrong and wrong != expected),
                    _ROWS_HINT)
        raise Mismatch(f"wrong rows from {call}",
                       [f"expected: {expected}", f"got:      {got}"], hint=hint)

    checks.run_all(run, [
        ("the chapter's prompt of 2 tokens, one token a word", 2, [[400], [500], [600]]),
        ("words of one to three tokens", 2, [[400], [500, 501], [600, 601, 602], [700]]),
        ("a prompt of 4 tokens", 4, [[11, 12], [13], [14]]),
        ("a prompt of 1 token", 1, [[5], [6, 7]]),
        ("one word of three tokens", 3, [[1, 2, 3]]),
    ])
