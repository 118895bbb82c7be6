"""Checkers for the book's "implement" exercises and for the problem set in ``exercises/``.

Each checker runs the reader's function or class on several seeded inputs and compares what
comes back with the package's own implementation. It ends in one of two ways:

- every check passes: it prints one line, ``✓ check_stable_softmax: all 8 checks passed.``
- a check fails: it raises :class:`ExerciseCheckError` (an ``AssertionError``) whose message
  names the failing check, what was expected, what came back (shapes, dtypes, a few values,
  the largest difference) and a hint. An exception raised by the reader's own code is reported
  as theirs, with its type, its message and the line of their code that raised it, and chained
  to it so a full traceback still shows that line. In IPython and Jupyter the error is shown
  as its message alone, without the checkers' own frames.

An argument of the wrong kind (a class or a number where a function is wanted) gets a
``TypeError`` that names it, before any check runs.

The checkers never change what they are given: the reader's functions get fresh copies of the
inputs (and a check fails if they change them in place), and a module is copied, never trained
or modified. Random inputs come from seeded generators, and the global random state is left as
it was.

Each checker is named after what it checks and lives in a module named after its chapter
(:mod:`attnbook.checks.harness` runs the checks and words the messages, and
:mod:`attnbook.checks.compare` holds the comparisons they share):

- ``static-embeddings``: :func:`check_nearest_by_cosine` on
  ``nearest_by_cosine(table, query, k, exclude=None)``
- ``dot-product-similarity``: :func:`check_batched_raw_attention` on
  ``batched_raw_attention(x)``
- ``scaling``: :func:`check_stable_softmax` on ``my_softmax(scores)``
- ``attention-maps``: :func:`check_row_entropy` on ``row_entropy(weights)``
- ``pytorch-implementation``: :func:`check_simple_attention` on the class
  ``MySimpleAttention``
- ``causal-masks``: :func:`check_masked_softmax` on ``my_masked_softmax(scores, mask)``
  and :func:`check_causal_mask` on ``my_causal_mask(L, S=None)``
- ``multi-head-attention``: :func:`check_split_merge_heads` on ``my_split_heads(x, num_heads)``
  and ``my_merge_heads(heads)``, and :func:`check_multi_head_attention` on
  ``my_multi_head_attention(q, k, v, num_heads)``
- ``attention-layer``: :func:`check_padded_causal_mask` on ``padded_causal_mask(lengths, L)``
  and :func:`check_peeks_ahead` on ``peeks_ahead(layer, x)``
- ``training-attention``: :func:`check_repeat_pattern` on ``repeat_pattern(L, period)``
- ``efficient-attention``: :func:`check_online_normalizer` on ``online_normalizer(stream)``
- ``positions``: :func:`check_sinusoidal` on ``my_sinusoidal(L, E)``,
  :func:`check_rope_interleaved` on ``rope_interleaved(x, positions, base=10000.0)`` and
  :func:`check_alibi_slopes` on ``my_alibi_slopes(num_heads)``
- ``language-model``: :func:`check_repeat_kv` on ``repeat_kv(kv, num_heads)``,
  :func:`check_cache_bytes_per_token` on ``cache_bytes_per_token(config, bytes_per_number)``,
  :func:`check_cached_rope_step` on ``cached_rope_step(q_new, k_new, v_new, cache, base)``
  and :func:`check_window_mask` on ``window_mask(L, recent, sinks)``
- ``induction-heads``: :func:`check_prefix_matching_score` on
  ``prefix_matching_score(weights, period)``, :func:`check_mean_ablation` on
  ``mean_ablate(merged, head, num_heads)`` and :func:`check_copying_score` on
  ``copying_score(w_v, w_o, embed, unembed)``
- ``cache-budget``: :func:`check_quantize_keys` on ``quantize_keys(keys, bits, group)``
  and :func:`check_evict_one` on ``evict_one(received, positions, recent, sinks)``
- ``whisper``: :func:`check_dtw` on ``my_dtw(cost)``,
  :func:`check_cross_attention_steps` on ``my_cross_steps(cross, sound, text)`` and
  :func:`check_word_rows` on ``my_word_rows(prompt_length, pieces)``
"""

from __future__ import annotations

from .attention_layer import check_padded_causal_mask, check_peeks_ahead
from .attention_maps import check_row_entropy
from .cache_budget import check_evict_one, check_quantize_keys
from .causal_masks import check_causal_mask, check_masked_softmax
from .dot_product_similarity import check_batched_raw_attention
from .efficient_attention import check_online_normalizer
from .harness import ExerciseCheckError, NotWrittenYet
from .induction_heads import (
    check_copying_score,
    check_mean_ablation,
    check_prefix_matching_score,
)
from .language_model import (
    check_cache_bytes_per_token,
    check_cached_rope_step,
    check_repeat_kv,
    check_window_mask,
)
from .multi_head_attention import check_multi_head_attention, check_split_merge_heads
from .positions import check_alibi_slopes, check_rope_interleaved, check_sinusoidal
from .pytorch_implementation import check_simple_attention
from .scaling import check_stable_softmax
from .static_embeddings import check_nearest_by_cosine
from .training_attention import check_repeat_pattern
from .whisper import check_cross_attention_steps, check_dtw, check_word_rows

__all__ = [
    "ExerciseCheckError",
    "NotWrittenYet",
    "check_alibi_slopes",
    "check_batched_raw_attention",
    "check_cache_bytes_per_token",
    "check_cached_rope_step",
    "check_causal_mask",
    "check_copying_score",
    "check_cross_attention_steps",
    "check_dtw",
    "check_evict_one",
    "check_masked_softmax",
    "check_mean_ablation",
    "check_multi_head_attention",
    "check_nearest_by_cosine",
    "check_online_normalizer",
    "check_padded_causal_mask",
    "check_peeks_ahead",
    "check_prefix_matching_score",
    "check_quantize_keys",
    "check_repeat_kv",
    "check_repeat_pattern",
    "check_rope_interleaved",
    "check_row_entropy",
    "check_simple_attention",
    "check_sinusoidal",
    "check_split_merge_heads",
    "check_stable_softmax",
    "check_window_mask",
    "check_word_rows",
]
