"""The checkers of the chapter ``language-model``: :func:`check_repeat_kv`,
:func:`check_cache_bytes_per_token`, :func:`check_cached_rope_step` and
:func:`check_window_mask`.

The references are the package's own :func:`~attnbook.attention.grouped_attention`,
:meth:`~attnbook.decoder.DecoderConfig.cache_bytes_per_token`,
:class:`~attnbook.efficient.KVCache` with :func:`~attnbook.positions.rope`, and
:func:`~attnbook.masks.sliding_window_mask`. The typical wrong answers are built beside
them (heads tiled, a window one key too wide, RoPE at position 0 or at ``len(cache)``),
so that a hint can name the mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from .._validate import require_function
from ..attention import attention, grouped_attention
from ..decoder import DecoderConfig
from ..efficient import KVCache
from ..masks import causal_mask, sliding_window_mask
from ..positions import rope
from .compare import (
    Mismatch,
    Mistake,
    as_scalar,
    expect_close,
    expect_mask,
    expect_number,
    randn,
    values,
)
from .harness import Checks, call_reader, error_hints, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_cache_bytes_per_token", "check_cached_rope_step", "check_repeat_kv",
           "check_window_mask"]


# --------------------------------------------------------------------------------- repeat_kv

_REPEAT_KV_HINT = (
    "key/value head j serves the g = num_heads // h_kv consecutive query heads j·g .. "
    "j·g + g - 1, so each head is repeated g times in place: "
    "`kv.repeat_interleave(g, dim=-3)` (LLaMA's repeat_kv). Count dimensions from the end: "
    "h_kv is kv.shape[-3], with or without a batch dimension in front."
)
_TILED_HINT = (
    "you tiled the heads (`.repeat`, or `torch.cat([kv] * g)`), giving key/value heads "
    "0, 1, 2, 0, 1, 2, ...: each key/value head serves g consecutive query heads, "
    "0, 0, 1, 1, 2, 2, ...; use `kv.repeat_interleave(g, dim=-3)`."
)


_repeat_kv_hint = error_hints(
    ((IndexError, RuntimeError), "dim",
     "count dimensions from the end: the heads are dim -3 of (..., h_kv, S, E), with or "
     "without a batch dimension in front."),
)


def _head_sources(got: Tensor, kv: Tensor) -> str:
    """Which head of ``kv`` each head of ``got`` is a copy of, e.g. ``[0, 0, 1, 1]``."""
    sources = []
    for i in range(got.shape[-3]):
        head = got.detach()[..., i, :, :].double()
        match = [j for j in range(kv.shape[-3])
                 if torch.allclose(head, kv[..., j, :, :].double())]
        sources.append(str(match[0]) if match else "?")
    return f"[{', '.join(sources)}]"


def check_repeat_kv(repeat_kv_fn: Callable) -> None:
    """Check ``repeat_kv_fn(kv, num_heads) -> (..., num_heads, S, E)``: grouped heads expanded.

    The exercise ``language-model-ex1`` of the chapter ``language-model``: keys or values
    ``kv`` of shape ``(..., h_kv, S, E)`` serve ``num_heads`` query heads, key/value head
    ``j`` the ``g = num_heads / h_kv`` consecutive heads ``j·g .. j·g + g - 1`` (LLaMA's
    ``repeat_kv``, :func:`torch.repeat_interleave` on the head dimension). A ``num_heads``
    that ``h_kv`` does not divide must raise ``ValueError``. The reference is
    :func:`torch.repeat_interleave`, and attention over the expanded keys and values must
    equal :func:`attnbook.attention.grouped_attention`.

    Its hints name the tiled order (``.repeat``), a repeat along the sequence, repeating
    ``num_heads`` times instead of ``g``, a batch dimension assumed, and a silent result
    (or another exception) for a ``num_heads`` that ``h_kv`` does not divide.
    """
    repeat_kv_fn = require_function("repeat_kv_fn", repeat_kv_fn)
    checks = Checks("check_repeat_kv", _repeat_kv_hint)
    name = name_of(repeat_kv_fn)

    def expanded(kv: Tensor, num_heads: int) -> object:
        call = f"{name}(kv, {num_heads})"
        return call_reader(call, repeat_kv_fn, kv.clone(), num_heads, names=("kv", "num_heads"))

    def mistakes(kv: Tensor, num_heads: int) -> list[Mistake]:
        g = num_heads // kv.shape[-3]
        tile = [1] * kv.dim()
        tile[-3] = g
        return [
            (_TILED_HINT, lambda: kv.repeat(*tile)),
            ("you repeated along the sequence, dim -2: the heads are dim -3 of "
             "(..., h_kv, S, E).", lambda: kv.repeat_interleave(g, dim=-2)),
            (f"repeat each head g = num_heads // h_kv = {g} times, not num_heads = "
             f"{num_heads} times.", lambda: kv.repeat_interleave(num_heads, dim=-3)),
        ]

    def run(kv: Tensor, num_heads: int, note: str | None = None) -> None:
        got = expanded(kv, num_heads)
        expected = kv.repeat_interleave(num_heads // kv.shape[-3], dim=-3)
        if isinstance(got, Tensor) and got.shape == expected.shape:
            sources = _head_sources(got, kv)
            lines = [f"query head -> key/value head: expected "
                     f"{_head_sources(expected, kv)}, got {sources}"]
            note = "\n  ".join([*lines, *([note] if note else [])])
        expect_close(f"{name}(kv, {num_heads}) for kv of shape {tuple(kv.shape)}", got,
                     expected, atol=0, rtol=0, hint=_REPEAT_KV_HINT,
                     mistakes=mistakes(kv, num_heads), note=note)

    def refused(kv: Tensor, num_heads: int) -> None:
        h_kv = kv.shape[-3]
        call = f"{name}(kv, {num_heads}) for kv of shape {tuple(kv.shape)}"
        hint = (f"{num_heads} query heads cannot share {h_kv} key/value heads equally: "
                f"check `num_heads % h_kv` first and raise a ValueError that names "
                f"num_heads, e.g. `raise ValueError(f\"num_heads={{num_heads}} is not a "
                f"multiple of the {{h_kv}} key/value heads\")`.")
        try:
            got = repeat_kv_fn(kv.clone(), num_heads)
        except ValueError:
            return
        except Exception as error:
            raise Mismatch(f"{call} raised {type(error).__name__}: {error}",
                           ["expected: a ValueError, before any arithmetic"], hint) from None
        shape = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
        raise Mismatch(f"{call} returned {shape}, expected a ValueError",
                       [f"{h_kv} does not divide {num_heads}, so no g works"], hint)

    with checks.case("kv (3, 4, 2) whose head j holds the number j, 6 query heads"):
        run(torch.arange(3.0)[:, None, None].expand(3, 4, 2).clone(), 6,
            "kv[j] = j everywhere, so every value names the key/value head it came from")
    with checks.case("SmolLM2's heads: kv (2, 3, 5, 8) for 9 query heads"):
        run(randn(2, 3, 5, 8, seed=201), 9)
    with checks.case("as many key/value heads as query heads: kv (1, 4, 3, 4), 4 heads"):
        run(randn(1, 4, 3, 4, seed=202), 4)
    with checks.case("multi-query: one key/value head, kv (2, 1, 3, 4), 4 heads"):
        run(randn(2, 1, 3, 4, seed=203), 4)
    with checks.case("float64 kv (1, 2, 3, 4) for 8 heads: float64 in, float64 out"):
        run(randn(1, 2, 3, 4, seed=204, dtype=torch.float64), 8)
    with checks.case("causal attention over repeat_kv(k) and repeat_kv(v) equals "
                     "grouped_attention, q (2, 9, 5, 16), k and v (2, 3, 5, 16)"):
        q = randn(2, 9, 5, 16, seed=205)
        k, v = randn(2, 3, 5, 16, seed=206), randn(2, 3, 5, 16, seed=207)
        mask = causal_mask(5)
        k_all = expect_close(f"{name}(k, 9)", expanded(k, 9), k.repeat_interleave(3, dim=-3),
                             atol=0, rtol=0, hint=_REPEAT_KV_HINT, mistakes=mistakes(k, 9))
        v_all = expect_close(f"{name}(v, 9)", expanded(v, 9), v.repeat_interleave(3, dim=-3),
                             atol=0, rtol=0, hint=_REPEAT_KV_HINT, mistakes=mistakes(v, 9))
        expect_close("attention(q, k_all, v_all, mask).output", attention(
            q, k_all, v_all, mask).output, grouped_attention(q, k, v, mask).output,
            hint=_REPEAT_KV_HINT)
    with checks.case("3 key/value heads cannot serve 8 query heads: a ValueError"):
        refused(randn(1, 3, 2, 4, seed=208), 8)
    with checks.case("3 key/value heads cannot serve 2 query heads: a ValueError"):
        refused(randn(1, 3, 2, 4, seed=209), 2)
    checks.passed()


# ------------------------------------------------------------------ cache bytes per token

_BYTES_HINT = (
    "every layer caches one key and one value per key/value head per token, d_head "
    "numbers each: 2 · num_layers · num_kv_heads · d_head · bytes_per_number."
)


def check_cache_bytes_per_token(bytes_fn: Callable) -> None:
    """Check ``bytes_fn(config, bytes_per_number) -> int``: what a token adds to the cache.

    The exercise ``language-model-ex2`` of the chapter ``language-model``: for a
    :class:`~attnbook.decoder.DecoderConfig`, the bytes one token adds to a full key/value
    cache, ``2 · num_layers · num_kv_heads · d_head · bytes_per_number``. The reference is
    :meth:`~attnbook.decoder.DecoderConfig.cache_bytes_per_token`; any whole number (an
    int, or a float or one-element tensor holding one) is accepted.

    Checks SmolLM2-135M in float32 and bfloat16, a LLaMA-2-7B-like and a Llama-3-8B-like
    configuration, multi-query attention and a tiny one. Its hints name counting the keys
    only, the query heads instead of the key/value heads, ``d_model`` instead of
    ``d_head``, one layer, numbers instead of bytes, bits, and ``bytes_per_number`` ignored.
    """
    bytes_fn = require_function("bytes_fn", bytes_fn)
    checks = Checks("check_cache_bytes_per_token")
    name = name_of(bytes_fn)

    def run(label: str, config: DecoderConfig, bytes_per_number: int) -> None:
        L, h, h_kv = config.num_layers, config.num_heads, config.num_kv_heads
        d_head, d_model, b = config.d_head, config.d_model, bytes_per_number
        call = f"{name}({label}, {b})"
        got = call_reader(call, bytes_fn, config, b, names=("config", "bytes_per_number"))
        got = as_scalar(f"{call}", got, "return one number, the bytes per token (an int).")
        mistakes: list[tuple[str, Callable[[], float]]] = [
            ("the cache holds a key and a value for every token: count both, the factor 2.",
             lambda: L * h_kv * d_head * b),
            (f"the cache holds the num_kv_heads = {h_kv} key/value heads, not the "
             f"num_heads = {h} query heads (2 · num_layers · d_model counts every query "
             f"head): sharing them is what grouped-query attention saves.",
             lambda: 2 * L * h * d_head * b),
            (f"each head stores d_head = d_model / num_heads = {d_head} numbers per token, "
             f"not d_model = {d_model}.", lambda: 2 * L * h_kv * d_model * b),
            (f"every layer has its own cache: multiply by num_layers = {L}.",
             lambda: 2 * h_kv * d_head * b),
            ("that counts numbers: multiply by bytes_per_number to get bytes.",
             lambda: 2 * L * h_kv * d_head),
            ("that is bits: a byte is 8 bits, and bytes_per_number already counts bytes.",
             lambda: 8 * 2 * L * h_kv * d_head * b),
            ("use the bytes_per_number you are given, not 4 (float32): bfloat16 takes 2.",
             lambda: 2 * L * h_kv * d_head * 4),
        ]
        expect_number(call, got, config.cache_bytes_per_token(b), atol=0.0, rtol=0.0,
                      hint=_BYTES_HINT, nan_hint=_BYTES_HINT, mistakes=mistakes,
                      note=f"num_layers={L}, num_heads={h}, num_kv_heads={h_kv}, "
                           f"d_model={d_model} (d_head={d_head}), bytes_per_number={b}")

    smollm2 = DecoderConfig(vocab_size=49152, d_model=576, num_layers=30, num_heads=9,
                            num_kv_heads=3, d_ff=1536, rope_base=100000.0)
    checks.run_all(run, [
        ("SmolLM2-135M in float32: 30 layers, 9 query and 3 key/value heads of 64",
         "smollm2", smollm2, 4),
        ("SmolLM2-135M in bfloat16, 2 bytes per number", "smollm2", smollm2, 2),
        ("LLaMA-2-7B-like: 32 layers, 32 heads of 128, no grouping", "llama2_7b",
         DecoderConfig(32000, 4096, 32, 32, 32, 11008), 2),
        ("Llama-3-8B-like: 32 layers, 32 query and 8 key/value heads of 128", "llama3_8b",
         DecoderConfig(128256, 4096, 32, 32, 8, 14336, rope_base=500000.0), 2),
        ("multi-query: 12 layers, 12 query heads and 1 key/value head of 64", "mqa",
         DecoderConfig(1000, 768, 12, 12, 1, 3072), 4),
        ("tiny: 2 layers, 4 query and 2 key/value heads of 8", "tiny",
         DecoderConfig(100, 32, 2, 4, 2, 64), 4),
    ])


# --------------------------------------------------------- one cached step with RoPE

_STEP_HINT = (
    "the new token sits at position t = cache.next_position: rotate q_new and k_new at "
    "torch.tensor([t]) with rope(x, positions, base), append the rotated key and the value "
    "with cache.append(k, v_new), then return cache.attend(q).output."
)
_STEP_IN_PLACE_HINT = (
    "work out of place: rope returns new tensors; the caller still needs q_new, k_new and "
    "v_new as they were."
)


def _step_hint(error: Exception) -> str | None:
    message = str(error)
    if "positions must be a torch.Tensor" in message:
        return ("rope wants the positions as an integer tensor of shape (1,) for one new "
                "token: `torch.tensor([cache.next_position])`.")
    if "batch shape" in message:
        return ("the cache holds the compact h_kv key/value heads: append k and v as they "
                "come, and let cache.attend share them among the query heads; do not expand "
                "them with repeat_kv first.")
    return None


_LAYOUT_HINT = (
    "you rotated in the interleaved layout: SmolLM2, like every Hugging Face LLaMA, pairs "
    "feature i with feature i + E/2, the half-split layout, rope's default."
)
_BASE_HINT = (
    "use the base you are given: SmolLM2 turns its slowest pairs with base 100000, not "
    "10000."
)


def _offset_hint(mistake: str, t: int, held: int) -> str:
    """The hint for RoPE at the wrong position: 0, len(cache), t + 1 or t - 1."""
    if mistake == "0":
        return (f"you rotated the new token at position 0 (or not at all, which is the "
                f"same), as if it began the text: it is at position {t}, and the cache "
                f"knows it: rotate at cache.next_position.")
    if mistake == "len":
        return (f"you rotated at len(cache) = {held}, the number of tokens the cache still "
                f"holds: its window has dropped {t - held}, so the new token is at position "
                f"cache.next_position = {t}, which counts every token ever appended.")
    if mistake == "+1":
        return (f"one position too far: read cache.next_position = {t} before appending; "
                f"appending the new token moves it to {t + 1}.")
    return (f"one position short: positions count from 0, so after {t} tokens the new one is "
            f"at position {t} = cache.next_position, not {t - 1}.")


class _Setting:
    """A cache that holds ``prefix`` tokens, appended in ``chunks``, and one new token."""

    def __init__(self, *, h: int, h_kv: int, E: int, chunks: Sequence[int], base: float,
                 recent: int | None = None, sinks: int = 0, batch: int = 1,
                 seed: int) -> None:
        t = sum(chunks)
        self.chunks, self.base, self.recent, self.sinks = list(chunks), base, recent, sinks
        self.keys = randn(batch, h_kv, t, E, seed=seed)  # (B, h_kv, t, E)
        self.values = randn(batch, h_kv, t, E, seed=seed + 1)  # (B, h_kv, t, E)
        self.q = randn(batch, h, 1, E, seed=seed + 2)  # (B, h, 1, E)
        self.k = randn(batch, h_kv, 1, E, seed=seed + 3)  # (B, h_kv, 1, E)
        self.v = randn(batch, h_kv, 1, E, seed=seed + 4)  # (B, h_kv, 1, E)

    def cache(self) -> KVCache:
        """A new cache with the prefix, its keys rotated at their own positions."""
        cache = KVCache(recent=self.recent, sinks=self.sinks)
        start = 0
        for n in self.chunks:
            chunk = slice(start, start + n)
            positions = torch.arange(start, start + n)
            cache.append(rope(self.keys[..., chunk, :], positions, self.base),
                         self.values[..., chunk, :])
            start += n
        return cache

    def step(self, q_position: int, k_position: int, *, layout: str = "half-split",
             base: float | None = None, v_rotated: bool = False
             ) -> tuple[Tensor, Tensor, Tensor]:
        """(output, cached key, cached value) of a step that rotates the query and the key
        at these positions, computed on a new cache. Position 0 is no rotation at all."""
        base = self.base if base is None else base

        def turned(x: Tensor, position: int) -> Tensor:
            return rope(x, torch.tensor([position]), base, layout=layout)

        cache = self.cache()
        k = turned(self.k, k_position)
        v = turned(self.v, k_position) if v_rotated else self.v
        cache.append(k, v)
        return cache.attend(turned(self.q, q_position)).output, k, v


def check_cached_rope_step(step_fn: Callable) -> None:
    """Check ``step_fn(q_new, k_new, v_new, cache, base) -> output``: one decoding step.

    The exercise ``language-model-ex3`` of the chapter ``language-model``: ``q_new``
    ``(B, h, 1, E)``, ``k_new`` and ``v_new`` ``(B, h_kv, 1, E)`` are the projections of
    one new token and ``cache`` a :class:`~attnbook.efficient.KVCache` holding the keys
    (rotated) and values of the tokens before it. The step rotates ``q_new`` and ``k_new``
    at ``cache.next_position`` with :func:`~attnbook.positions.rope` (half-split layout,
    the given ``base``), appends the rotated key and the value, and returns
    ``cache.attend(q).output`` ``(B, h, 1, E)``. The checker compares the output, the key
    and the value cached last, and the cache's new ``next_position`` with that reference.

    Checks an empty cache, a full cache, caches with a sliding window that dropped tokens
    (where ``len(cache)`` is not the position), SmolLM2's shapes and a batch of two. Its
    hints name RoPE at position 0, at ``len(cache)``, one position too far or short, a
    query or key not rotated, values rotated, the interleaved layout, the base ignored, a
    step that does not append, and expanded heads in the cache.
    """
    step_fn = require_function("step_fn", step_fn)
    checks = Checks("check_cached_rope_step", _step_hint)
    name = name_of(step_fn)

    def run(setting: _Setting) -> None:
        cache = setting.cache()
        t, held, before = cache.next_position, len(cache), cache.positions
        call = f"{name}(q_new, k_new, v_new, cache, {setting.base:g})"
        try:
            got = call_reader(call, step_fn, setting.q.clone(), setting.k.clone(),
                              setting.v.clone(), cache, setting.base,
                              names=("q_new", "k_new", "v_new", "cache", "base"))
        except Mismatch as changed:  # call_reader's only Mismatch: an argument changed
            changed.hint = _STEP_IN_PLACE_HINT
            raise
        state = (f"before the step the cache held len(cache) = {held} tokens, at positions "
                 f"{values(before, limit=8)}, and cache.next_position was {t}")
        if cache.next_position != t + 1:
            raise Mismatch(
                f"after {call}, cache.next_position is {cache.next_position}, expected {t + 1}",
                [state],
                "append the new token's rotated key and its value to the cache, "
                "`cache.append(k, v_new)`, so that the next step sees it.")
        expected, k_expected, v_expected = setting.step(t, t)
        key_mistakes: list[Mistake] = [
            (_offset_hint("0", t, held), lambda: setting.step(0, 0)[1]),
            (_offset_hint("len", t, held), lambda: setting.step(held, held)[1]),
            (_offset_hint("+1", t, held), lambda: setting.step(t + 1, t + 1)[1]),
            (_offset_hint("-1", t, held), lambda: setting.step(t - 1, t - 1)[1]),
            (_LAYOUT_HINT, lambda: setting.step(t, t, layout="interleaved")[1]),
            (_BASE_HINT, lambda: setting.step(t, t, base=10000.0)[1]),
            ("cache the h_kv key/value heads as they come: cache.attend shares them among "
             "the query heads; expanding them first stores g times as much.",
             lambda: k_expected.repeat_interleave(
                 setting.q.shape[-3] // k_expected.shape[-3], dim=-3)),
        ]
        expect_close(f"the key cached by {call}, cache.keys[..., -1:, :]",
                     cache.keys[..., -1:, :], k_expected, hint=_STEP_HINT,
                     mistakes=key_mistakes, note=state)
        expect_close(f"the value cached by {call}, cache.values[..., -1:, :]",
                     cache.values[..., -1:, :], v_expected, hint=_STEP_HINT, note=state,
                     mistakes=[("values are not rotated: RoPE turns queries and keys only, "
                                "cache v_new as it is.",
                                lambda: setting.step(t, t, v_rotated=True)[2])])
        output_mistakes: list[Mistake] = [
            (_offset_hint("0", t, held), lambda: setting.step(0, t)[0]),
            (_offset_hint("len", t, held), lambda: setting.step(held, t)[0]),
            (_offset_hint("+1", t, held), lambda: setting.step(t + 1, t)[0]),
            (_offset_hint("-1", t, held), lambda: setting.step(t - 1, t)[0]),
        ]
        expect_close(f"the output of {call}", got, expected, hint=_STEP_HINT,
                     mistakes=output_mistakes, note=state)

    with checks.case("the first token: an empty cache, q_new (1, 4, 1, 8), k_new and v_new "
                     "(1, 2, 1, 8)"):
        run(_Setting(h=4, h_kv=2, E=8, chunks=[], base=10000.0, seed=301))
    with checks.case("after 5 tokens in a full cache: next_position 5"):
        run(_Setting(h=4, h_kv=2, E=16, chunks=[1, 1, 1, 1, 1], base=10000.0, seed=311))
    with checks.case("a window of 4 with 1 sink after 9 tokens: len(cache) is 5, "
                     "next_position 9"):
        run(_Setting(h=4, h_kv=2, E=16, chunks=[1] * 9, base=10000.0, recent=4, sinks=1,
                     seed=321))
    with checks.case("SmolLM2's heads and base: q_new (1, 9, 1, 64), k_new and v_new "
                     "(1, 3, 1, 64), base 100000, after a prompt of 12 and 3 steps"):
        run(_Setting(h=9, h_kv=3, E=64, chunks=[12, 1, 1, 1], base=100000.0, seed=331))
    with checks.case("a batch of 2 and a window of 6 with 4 sinks, after a prompt of 20 "
                     "and 2 steps, base 100000"):
        run(_Setting(h=9, h_kv=3, E=32, chunks=[20, 1, 1], base=100000.0, recent=6,
                     sinks=4, batch=2, seed=341))
    checks.passed()


# ------------------------------------------------------- a sliding window with sinks

_WINDOW_HINT = (
    "query i may see key j when j <= i and either i - j < recent (the recent keys, its "
    "own included) or j < sinks (the first tokens of the text): "
    "`(j <= i) & ((i - j < recent) | (j < sinks))` with i a column and j a row of aranges."
)


def _band(L: int, recent: int, sinks: int, *, causal: str = "all",
          width: int | None = None) -> Tensor:
    """A window mask built another way, to recognise a mistake: ``causal`` is ``"all"``,
    ``"window"`` (the sinks escape it), ``"none"`` (every later key allowed) or
    ``"both ways"`` (the window reaches as far forward as back)."""
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]  # (L, 1), (1, L)
    width = recent if width is None else width
    if causal == "none":
        near = i - j < width  # every later key too: i - j is negative there
    elif causal == "both ways":
        near = (i - j).abs() < width
    else:
        near = (i - j < width) & (j <= i)
    allowed = near | (j < sinks)  # (L, L)
    return allowed & (j <= i) if causal == "all" else allowed


def check_window_mask(mask_fn: Callable) -> None:
    """Check ``mask_fn(L, recent, sinks) -> (L, L) bool``: a sliding window with sinks.

    The exercise ``language-model-ex4`` of the chapter ``language-model``: query ``i``
    may attend to key ``j`` when ``j <= i`` and either ``i - j < recent`` (the ``recent``
    latest keys, the query's own included) or ``j < sinks`` (StreamingLLM's attention
    sinks, Xiao et al., 2024). True means "may attend". The reference is
    :func:`attnbook.masks.sliding_window_mask`.

    Checks windows with and without sinks, a window as wide as the text (the causal mask),
    a window of one, more sinks than the window and a single token. Its hints name a
    window one key too wide or too narrow, the sinks forgotten, the causal part forgotten
    (for the window or for the sinks), the polarity reversed, the transpose, and masks that
    are not boolean.
    """
    mask_fn = require_function("mask_fn", mask_fn)
    checks = Checks("check_window_mask")
    name = name_of(mask_fn)

    def run(L: int, recent: int, sinks: int) -> None:
        call = f"{name}({L}, {recent}, {sinks})"
        expected = sliding_window_mask(L, recent, sinks=sinks)  # (L, L), bool
        mistakes: list[Mistake] = [
            ("the causal part is missing: `i - j < recent` holds for every later key "
             "(i - j is negative there), and a query never sees a later key. Add `j <= i`.",
             lambda: _band(L, recent, sinks, causal="none")),
            ("the causal part is missing: a query never sees a later key, so keep "
             "`j <= i` as well as the window; yours looks both ways.",
             lambda: _band(L, recent, sinks, causal="both ways")),
            ("the sinks are keys too, so the causal part applies to them: query 0 cannot "
             "see sink 1 before it exists. Put `j <= i` around the whole condition, "
             "`(j <= i) & (... | (j < sinks))`.",
             lambda: _band(L, recent, sinks, causal="window")),
            (f"off by one: your window holds recent + 1 = {recent + 1} keys. It counts the "
             f"query itself, so query i sees keys i - recent + 1 .. i: `i - j < recent`, "
             f"not `<=`.", lambda: _band(L, recent, sinks, width=recent + 1)),
            (f"off by one: your window holds recent - 1 = {recent - 1} keys. It counts the "
             f"query itself, so query i sees the {recent} keys i - recent + 1 .. i: "
             f"`i - j < recent`.", lambda: _band(L, recent, sinks, width=recent - 1)),
            (f"the sinks are missing: the first {sinks} keys stay visible to every later "
             f"query, whatever the window: `| (j < sinks)`.",
             lambda: _band(L, recent, 0)),
            ("True means 'may attend', as in F.scaled_dot_product_attention: yours is "
             "True where the query may not (nn.MultiheadAttention's polarity). Negate it.",
             lambda: ~expected),
            ("rows are queries i and columns keys j: you built the transpose.",
             lambda: expected.T),
        ]
        got = call_reader(call, mask_fn, L, recent, sinks, names=("L", "recent", "sinks"))
        expect_mask(f"the mask {call}", got, expected, mistakes=mistakes, hint=_WINDOW_HINT,
                    shape_hint="one row per query and one column per key: (L, L).")

    checks.run_all(run, [
        ("8 tokens, a window of 3, no sinks", 8, 3, 0),
        ("8 tokens, a window of 3 and 2 sinks", 8, 3, 2),
        ("10 tokens, a window of 4 and 1 sink", 10, 4, 1),
        ("12 tokens, a window of 4 and StreamingLLM's 4 sinks", 12, 4, 4),
        ("a window as wide as the text is the causal mask: 6 tokens, a window of 6", 6, 6,
         0),
        ("a window wider than the text, 6 tokens, a window of 10 and 2 sinks", 6, 10, 2),
        ("a window of 1: each query sees itself, 7 tokens", 7, 1, 0),
        ("a window of 1 and 3 sinks, 7 tokens", 7, 1, 3),
        ("more sinks than the window: 9 tokens, a window of 2 and 5 sinks", 9, 2, 5),
        ("a single token: [[True]]", 1, 1, 1),
    ])
