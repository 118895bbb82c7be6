"""``attnbook.checks``: right answers pass, typical wrong ones fail with a teacher's message.

Each checker must pass the package's own implementation, print exactly one line, name the
first failing check with what was expected, what came back and a hint, report the reader's
exceptions as theirs, leave the reader's objects (and the global random state) alone, and
refuse arguments of the wrong kind with a TypeError that names them.
"""

from __future__ import annotations

import ast
import importlib
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_solutions.attention_layer import padded_causal_mask, peeks_ahead
from exercise_solutions.cache_budget import evict_one, quantize_keys
from exercise_solutions.causal_masks import my_causal_mask, my_masked_softmax
from exercise_solutions.dot_product_similarity import batched_raw_attention
from exercise_solutions.efficient_attention import online_normalizer
from exercise_solutions.induction_heads import copying_score, mean_ablate, prefix_matching_score
from exercise_solutions.language_model import (
    cache_bytes_per_token,
    cached_rope_step,
    repeat_kv,
    window_mask,
)
from exercise_solutions.multi_head_attention import (
    my_merge_heads,
    my_split_heads,
)
from exercise_solutions.positions import my_alibi_slopes, my_sinusoidal, rope_interleaved
from exercise_solutions.pytorch_implementation import MySimpleAttention
from exercise_solutions.scaling import my_softmax
from exercise_solutions.static_embeddings import nearest_by_cosine
from exercise_solutions.training_attention import repeat_pattern
from exercise_solutions.whisper import my_cross_steps, my_word_rows
from test_positions import papers_get_slopes
from torch import nn

from attnbook.checks import (
    ExerciseCheckError,
    NotWrittenYet,
    check_alibi_slopes,
    check_batched_raw_attention,
    check_cache_bytes_per_token,
    check_cached_rope_step,
    check_causal_mask,
    check_copying_score,
    check_cross_attention_steps,
    check_dtw,
    check_evict_one,
    check_masked_softmax,
    check_mean_ablation,
    check_multi_head_attention,
    check_nearest_by_cosine,
    check_online_normalizer,
    check_padded_causal_mask,
    check_peeks_ahead,
    check_prefix_matching_score,
    check_quantize_keys,
    check_repeat_kv,
    check_repeat_pattern,
    check_rope_interleaved,
    check_row_entropy,
    check_simple_attention,
    check_sinusoidal,
    check_split_merge_heads,
    check_stable_softmax,
    check_window_mask,
    check_word_rows,
    compare,
    harness,
)
from attnbook.efficient import KVCache
from attnbook.positions import rope

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = Path(__file__).resolve().parent / "exercise_solutions"

# ------------------------------------------------------------------------ right answers
# The right answers are the hand-written solutions in tests/exercise_solutions/, which the
# chapters' solution cells must agree with (test_solution_files_and_chapters_agree below).
# These are right answers of another form.


def online_normalizer_in_float64_tensors(stream):
    """float64 tensors, and masked scores skipped rather than shifted by 0."""
    m = torch.tensor(float("-inf"), dtype=torch.float64)
    row_sum = torch.tensor(0.0, dtype=torch.float64)
    for z in stream:
        if z == float("-inf"):
            continue  # a masked key adds exp(-inf) = 0
        z = torch.tensor(z, dtype=torch.float64)
        m_new = torch.maximum(m, z)
        row_sum = row_sum * torch.exp(m - m_new) + torch.exp(z - m_new)
        m = m_new
    return m, row_sum


def online_normalizer_with_a_branch(stream):
    """Rescale only when the maximum moves; the first real score starts the sum."""
    m, row_sum = -math.inf, 0.0
    for z in stream:
        if z > m:
            row_sum = row_sum * math.exp(m - z) + 1.0  # exp(m - z) = 0 while m = -inf
            m = z
        elif z > -math.inf:
            row_sum += math.exp(z - m)
    return m, row_sum


def sinusoidal_as_in_the_annotated_transformer(L, E):
    """float32 throughout, the frequencies through exp and log, and the columns filled."""
    pe = torch.zeros(L, E)
    position = torch.arange(0, L).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, E, 2) * -(math.log(10000.0) / E))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def sinusoidal_with_loops(L, E):
    """One number at a time with math, returned in float64."""
    return torch.tensor([[math.sin(pos / 10000 ** (j / E)) if j % 2 == 0
                          else math.cos(pos / 10000 ** ((j - 1) / E)) for j in range(E)]
                         for pos in range(L)], dtype=torch.float64)


def rope_with_complex_numbers(x, positions, base=10000.0):
    """Meta's LLaMA way: each pair a complex number, multiplied by e^(i·angle)."""
    D = x.shape[-1]
    real = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = 1.0 / base ** (torch.arange(0, D, 2, dtype=real) / D)  # (D/2,)
    angle = positions.to(real)[..., None] * theta  # (..., L, D/2)
    pairs = torch.view_as_complex(x.to(real).unflatten(-1, (D // 2, 2)).contiguous())
    turned = pairs * torch.polar(torch.ones_like(angle), angle)  # (..., L, D/2), complex
    return torch.view_as_real(turned).flatten(-2).to(x.dtype)  # (..., L, D)


def rope_as_in_gpt_j(x, positions, base=10000.0):
    """GPT-J's rotate_every_two, with every angle repeated for both features of its pair."""
    D = x.shape[-1]
    theta = 1.0 / base ** (torch.arange(0, D, 2, dtype=x.dtype) / D)  # (D/2,)
    angle = torch.einsum("...l,f->...lf", positions.to(x.dtype), theta)  # (..., L, D/2)
    sin, cos = angle.sin().repeat_interleave(2, -1), angle.cos().repeat_interleave(2, -1)
    every_two = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)  # (..., L, D)
    return x * cos + every_two * sin


def alibi_slopes_as_in_the_paper(num_heads):
    """The paper's get_slopes, verbatim (it returns a list), wrapped in a tensor."""
    return torch.tensor(papers_get_slopes(num_heads))


def alibi_slopes_vectorised(num_heads):
    """All exponents at once, in float64: h/p for the p heads, then the odd h/(2p)."""
    p = 1 << (num_heads.bit_length() - 1)  # the largest power of two <= num_heads
    exponents = torch.cat([torch.arange(1, p + 1, dtype=torch.float64) / p,
                           (2 * torch.arange(num_heads - p, dtype=torch.float64) + 1) / (2 * p)])
    return 2.0 ** (-8.0 * exponents)  # (num_heads,)


def repeat_kv_as_in_llama(kv, num_heads):
    """transformers' repeat_kv: a view expanded on a new group dimension, then reshaped."""
    *batch, h_kv, S, E = kv.shape
    if num_heads % h_kv:
        raise ValueError(f"num_heads={num_heads} is not a multiple of h_kv={h_kv}")
    groups = num_heads // h_kv
    expanded = kv[..., :, None, :, :].expand(*batch, h_kv, groups, S, E)
    return expanded.reshape(*batch, num_heads, S, E)


def cache_bytes_from_the_config(config, bytes_per_number=4):
    """Through the config's own d_head, as a float: 2.0 for keys and values."""
    return 2.0 * config.num_layers * config.num_kv_heads * config.d_head * bytes_per_number


def cached_rope_step_with_the_package(q_new, k_new, v_new, cache, base=10000.0):
    positions = torch.tensor([cache.next_position])
    cache.append(rope(k_new, positions, base), v_new)
    return cache.attend(rope(q_new, positions, base)).output


def window_mask_with_loops(L, recent, sinks=0):
    mask = torch.zeros(L, L, dtype=torch.bool)
    for i in range(L):
        for j in range(i + 1):
            mask[i, j] = i - j < recent or j < sinks
    return mask


def prefix_matching_with_a_loop(weights, period):
    """One query at a time, the weights summed as tensors and divided by their number."""
    L = weights.shape[-1]
    picked = [weights[..., t, t - period + 1] for t in range(period, L)]
    return sum(picked) / len(picked)


def prefix_matching_with_an_offset_diagonal(weights, period):
    """The whole diagonal t - j = T - 1 (queries T - 1 .. L - 1), then its first entry,
    query T - 1 of the first copy, dropped."""
    return weights.diagonal(offset=1 - period, dim1=-2, dim2=-1)[..., 1:].mean(-1)


def mean_ablate_through_the_heads(merged, head, num_heads):
    """Unflatten to (B, L, h, d_head), overwrite one head, flatten back."""
    heads = merged.unflatten(-1, (num_heads, -1)).clone()
    heads[..., head, :] = heads[..., head, :].mean(dim=(0, 1))
    return heads.flatten(-2)


def mean_ablate_with_a_mask(merged, head, num_heads):
    """No slicing at all: every feature's mean, chosen where the feature is the head's."""
    d_head = merged.shape[-1] // num_heads
    feature = torch.arange(merged.shape[-1])
    own = (feature >= head * d_head) & (feature < (head + 1) * d_head)
    return torch.where(own, merged.mean(dim=(0, 1), keepdim=True), merged)


def copying_score_from_the_vocab(w_v, w_o, embed, unembed):
    """The (V, V) matrix M itself, in the inputs' dtype, returned as a 0-dim tensor."""
    eigenvalues = torch.linalg.eigvals(unembed @ w_o @ w_v @ embed.T)  # (V,), complex
    return eigenvalues.real.sum() / eigenvalues.abs().sum()


def copying_score_with_numpy(w_v, w_o, embed, unembed):
    """numpy's eigvals on the small matrix, returning a numpy float64."""
    import numpy as np

    small = w_v.numpy() @ embed.numpy().T @ unembed.numpy() @ w_o.numpy()
    eigenvalues = np.linalg.eigvals(small.astype(np.float64))
    return eigenvalues.real.sum() / np.abs(eigenvalues).sum()


def padded_mask_with_tril(lengths, L):
    """The chapter's way: the causal triangle, and the real keys broadcast over it."""
    real_key = torch.arange(L) < lengths[:, None]  # (B, L)
    return torch.ones(L, L, dtype=torch.bool).tril() & real_key[:, None, None, :]


def padded_mask_with_loops(lengths, L):
    mask = torch.zeros(len(lengths), 1, L, L, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        for i in range(L):
            for j in range(min(i + 1, n)):
                mask[b, 0, i, j] = True
    return mask


def peeks_with_random_tokens(layer, x):
    """The chapter's solution: a random new token, an exact comparison."""
    with torch.no_grad():
        output = layer(x)[0]
        for t in range(1, x.shape[1]):
            changed = x.clone()
            changed[:, t] = torch.randn(x.shape[0], x.shape[2])
            if not torch.equal(layer(changed)[0][:, :t], output[:, :t]):
                return t
    return None


def peeks_with_noise_and_ne(layer, x):
    """Noise added to the token, any difference counted with !=, gradients left on."""
    output = layer(x)[0]
    for t in range(1, x.shape[1]):
        changed = torch.cat([x[:, :t], x[:, t:t + 1] + torch.randn_like(x[:, t:t + 1]),
                             x[:, t + 1:]], dim=1)
        if (layer(changed)[0][:, :t] != output[:, :t]).any():
            return t
    return None


# ----------------------------------------------------------------------- typical mistakes


def nearest_by_dot_product(table, query, k, exclude=None):
    scores = table @ query
    if exclude is not None:
        scores[exclude] = float("-inf")
    values, ids = scores.topk(k)
    return ids, values / (table.norm(dim=1)[ids] * query.norm())


def nearest_least_similar_first(table, query, k, exclude=None):
    ids, values = nearest_by_cosine(table, query, k, exclude)
    return ids.flip(0), values.flip(0)


def nearest_ignoring_exclude(table, query, k, exclude=None):
    return nearest_by_cosine(table, query, k)


def nearest_query_not_normalised(table, query, k, exclude=None):
    ids, _ = nearest_by_cosine(table, query, k, exclude)
    return ids, ((table / table.norm(dim=1, keepdim=True)) @ query)[ids]


def raw_attention_scaled(x):
    weights = torch.softmax(x @ x.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1)
    return weights @ x, weights


def raw_attention_over_queries(x):
    weights = torch.softmax(x @ x.transpose(-2, -1), dim=1)
    return weights @ x, weights


def raw_attention_swapped(x):
    output, weights = batched_raw_attention(x)
    return weights, output


def raw_attention_dot_t(x):
    weights = torch.softmax(x @ x.permute(2, 1, 0), dim=-1)  # what x.T does to a 3-D tensor
    return weights @ x, weights


def naive_softmax(scores):
    exps = torch.exp(scores)
    return exps / exps.sum(dim=-1, keepdim=True)


def softmax_global_max(scores):
    exps = torch.exp(scores - scores.max())
    return exps / exps.sum(dim=-1, keepdim=True)


def softmax_in_float32(scores):
    return my_softmax(scores.float())


def softmax_in_place(scores):
    scores -= scores.amax(dim=-1, keepdim=True)
    exps = scores.exp()
    return exps / exps.sum(dim=-1, keepdim=True)


def softmax_over_dim_0(scores):
    return my_softmax(scores.transpose(0, -1)).transpose(0, -1)


def entropy_with_log(weights):
    return -(weights * weights.log()).sum(dim=-1)


def entropy_in_bits(weights):
    return -(torch.special.xlogy(weights, weights) / math.log(2)).sum(dim=-1)


def entropy_without_minus(weights):
    return torch.special.xlogy(weights, weights).sum(dim=-1)


def entropy_keepdim(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=-1, keepdim=True)


class ScaledAttention(MySimpleAttention):
    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        return weights @ v, weights


class BatchOnlyAttention(MySimpleAttention):
    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        weights = torch.softmax(q @ k.transpose(1, 2), dim=-1)
        return weights @ v, weights


class MixesInputs(MySimpleAttention):
    def forward(self, x):
        _, weights = super().forward(x)
        return weights @ x, weights


class OutputOnly(MySimpleAttention):
    def forward(self, x):
        return super().forward(x)[0]


class NoGradient(MySimpleAttention):
    def forward(self, x):
        with torch.no_grad():
            return super().forward(x)


class OtherNames(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.W_q = nn.Linear(n_embd, n_embd)
        self.W_k = nn.Linear(n_embd, n_embd)
        self.W_v = nn.Linear(n_embd, n_embd)


def masked_fill_minus_1e9(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)


def masked_nan_rows(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def masked_wrong_polarity(scores, mask):
    return my_masked_softmax(scores, ~mask)


def masked_fill_minus_100(scores, mask):
    weights = torch.softmax(scores.masked_fill(~mask, -100.0), dim=-1)
    return weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)


def masked_additive_nan_gradient(scores, mask):
    additive = torch.zeros_like(scores).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores + additive, dim=-1).nan_to_num(0.0)


def masked_in_place(scores, mask):
    scores.masked_fill_(~(mask | ~mask.any(dim=-1, keepdim=True)), float("-inf"))
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


def causal_with_tril(L, S=None):
    return torch.ones(L, L if S is None else S, dtype=torch.bool).tril()


def causal_without_the_diagonal(L, S=None):
    S = L if S is None else S
    return torch.arange(S)[None, :] < torch.arange(L)[:, None] + (S - L)


def causal_one_too_far(L, S=None):
    S = L if S is None else S
    return torch.arange(S)[None, :] <= torch.arange(L)[:, None] + (S - L) + 1


def causal_offset_reversed(L, S=None):
    S = L if S is None else S
    return torch.ones(L, S, dtype=torch.bool).tril(L - S)


def causal_masking_the_future(L, S=None):
    S = L if S is None else S
    return torch.ones(L, S, dtype=torch.bool).triu(S - L + 1)  # True = hide


def causal_upper_triangle(L, S=None):
    S = L if S is None else S
    return torch.ones(L, S, dtype=torch.bool).triu(S - L)


def causal_square_only(L, S=None):
    return torch.ones(L, L, dtype=torch.bool).tril()


def causal_as_floats(L, S=None):
    S = L if S is None else S
    return torch.ones(L, S).tril(S - L)


def causal_additive(L, S=None):
    S = L if S is None else S
    return torch.zeros(L, S).masked_fill(~my_causal_mask(L, S), float("-inf"))


def causal_needs_S(L, S):
    return my_causal_mask(L, S)


def split_without_transpose(x, num_heads):
    B, L, d_model = x.shape
    return x.view(B, num_heads, L, d_model // num_heads)


def merge_without_transpose(heads):
    B, h, L, d_head = heads.shape
    return heads.reshape(B, L, h * d_head)


def merge_with_view(heads):
    B, h, L, d_head = heads.shape
    return heads.transpose(1, 2).view(B, L, h * d_head)


def _heads(q, k, v, num_heads, *, scale=None, split=my_split_heads, dim=-1):
    q_h, k_h, v_h = (split(t, num_heads) for t in (q, k, v))
    scale = 1 / math.sqrt(q_h.shape[-1]) if scale is None else scale(q, q_h)
    weights = torch.softmax(q_h @ k_h.transpose(-2, -1) * scale, dim=dim)
    return weights @ v_h, weights  # (B, h, L, d_head), (B, h, L, S)


def mha_scaled_by_d_model(q, k, v, num_heads):
    out, weights = _heads(q, k, v, num_heads, scale=lambda q, q_h: q.shape[-1] ** -0.5)
    return my_merge_heads(out), weights


def mha_unscaled(q, k, v, num_heads):
    out, weights = _heads(q, k, v, num_heads, scale=lambda q, q_h: 1.0)
    return my_merge_heads(out), weights


def mha_scaled_by_d_head(q, k, v, num_heads):
    out, weights = _heads(q, k, v, num_heads, scale=lambda q, q_h: 1 / q_h.shape[-1])
    return my_merge_heads(out), weights


def mha_split_without_transpose(q, k, v, num_heads):
    out, weights = _heads(q, k, v, num_heads, split=split_without_transpose)
    return my_merge_heads(out), weights


def mha_softmax_over_queries(q, k, v, num_heads):
    out, weights = _heads(q, k, v, num_heads, dim=-2)
    return my_merge_heads(out), weights


def mha_merge_without_transpose(q, k, v, num_heads):
    out, weights = _heads(q, k, v, num_heads)
    return out.reshape(q.shape), weights


def mha_weights_averaged(q, k, v, num_heads):
    out, weights = _heads(q, k, v, num_heads)
    return my_merge_heads(out), weights.mean(dim=1)


def mha_pair_swapped(q, k, v, num_heads):
    out, weights = _heads(q, k, v, num_heads)
    return weights, my_merge_heads(out)


def mha_with_chunk_and_stack(q, k, v, num_heads):
    """Heads as a list of feature chunks, stacked; a hand-written softmax."""
    def split(t):
        return torch.stack(t.chunk(num_heads, dim=-1), dim=1)  # (B, h, T, d_head)

    q_h, k_h, v_h = split(q), split(k), split(v)
    scores = q_h @ k_h.transpose(-2, -1) / math.sqrt(q_h.shape[-1])
    exp = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    weights = exp / exp.sum(dim=-1, keepdim=True)
    return torch.cat((weights @ v_h).unbind(dim=1), dim=-1), weights


def mha_with_permute_and_einsum(q, k, v, num_heads):
    B, L, d_model = q.shape
    d_head = d_model // num_heads

    def split(t):
        return t.view(t.shape[0], t.shape[1], num_heads, d_head).permute(0, 2, 1, 3)

    scores = torch.einsum("bhld,bhsd->bhls", split(q), split(k)) / d_head ** 0.5
    weights = scores.softmax(dim=-1)
    out = torch.einsum("bhls,bhsd->bhld", weights, split(v))
    return out.permute(0, 2, 1, 3).reshape(B, L, d_model), weights


def _carrying_keys(L, period, offset=1):
    query, key = torch.arange(L)[:, None], torch.arange(L)[None, :]
    return ((key <= query) & ((query + offset - key) % period == 0)).float()  # (L, L)


def pattern_own_token(L, period):
    carries = _carrying_keys(L, period, offset=0)
    return carries / carries.sum(-1, keepdim=True).clamp(min=1)


def pattern_nearest_copy_only(L, period):
    R = torch.zeros(L, L)
    for t in range(period - 1, L):
        R[t, t + 1 - period] = 1.0
    return R


def pattern_negative_index(L, period):
    R = torch.zeros(L, L)
    for t in range(L):
        R[t, t + 1 - period] = 1.0  # t + 1 - period < 0 wraps around to a later key
    return R


def pattern_not_normalised(L, period):
    return _carrying_keys(L, period)


def pattern_nan_rows(L, period):
    carries = _carrying_keys(L, period)
    return carries / carries.sum(-1, keepdim=True)


def pattern_boolean(L, period):
    return _carrying_keys(L, period).bool()


def pattern_with_future_keys(L, period):
    query, key = torch.arange(L)[:, None], torch.arange(L)[None, :]
    carries = ((query + 1 - key) % period == 0).float()
    return carries / carries.sum(-1, keepdim=True).clamp(min=1)


def pattern_transposed(L, period):
    return repeat_pattern(L, period).T


def pattern_dividing_by_zero(L, period):
    R = torch.zeros(L, L)
    for t in range(L):
        keys = [j for j in range(t + 1) if (t + 1 - j) % period == 0]
        share = 1 / len(keys)
        for j in keys:
            R[t, j] = share
    return R


def online_without_rescaling(stream):
    m, row_sum = float("-inf"), 0.0
    for z in stream:
        m = max(m, z)
        row_sum += math.exp(z - m)
    return m, row_sum


def online_rescaled_upwards(stream):
    m, row_sum = float("-inf"), 0.0
    for z in stream:
        m_new = max(m, z)
        row_sum = (row_sum * math.exp(m_new - m) if row_sum else 0.0) + math.exp(z - m_new)
        m = m_new
    return m, row_sum


def online_sum_of_exp(stream):
    m, row_sum = float("-inf"), 0.0
    for z in stream:
        m = max(m, z)
        row_sum += math.exp(z)
    return m, row_sum


def online_two_passes(stream):
    m = max(stream)
    return m, sum(math.exp(z - m) for z in stream)


def online_stored_in_a_list(stream):
    scores = list(stream)
    m = max(scores)
    return m, sum(math.exp(z - m) for z in scores)


def online_stored_as_copies(stream):
    scores = [float(z) for z in stream]  # new objects: the stream cannot see them held
    m = max(scores)
    return m, math.fsum(math.exp(z - m) for z in scores) if m > -math.inf else 0.0


def online_starting_at_minus_1e30(stream):
    m, row_sum = -1e30, 0.0  # the normaliser's version of the -1e9 fill
    for z in stream:
        m_new = max(m, z)
        row_sum = row_sum * math.exp(m - m_new) + math.exp(z - m_new)
        m = m_new
    return m, row_sum


def online_without_the_guard(stream):
    m, row_sum = float("-inf"), 0.0
    for z in stream:
        m_new = max(m, z)
        row_sum = row_sum * math.exp(m - m_new) + math.exp(z - m_new)
        m = m_new
    return m, row_sum


def online_starting_at_zero(stream):
    m, row_sum = 0.0, 0.0
    for z in stream:
        m_new = max(m, z)
        row_sum = row_sum * math.exp(m - m_new) + math.exp(z - m_new)
        m = m_new
    return m, row_sum


def online_swapped(stream):
    m, row_sum = online_normalizer(stream)
    return row_sum, m


def online_with_len(stream):
    scores = [next(stream) for _ in range(len(stream))]
    return max(scores), 1.0


def online_in_float32(stream):
    m, row_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
    for z in stream:
        z = torch.tensor(z)  # float32
        m_new = torch.maximum(m, z)
        row_sum = row_sum * torch.exp(m - m_new) + torch.exp(z - m_new)
        m = m_new
    return m, row_sum


def online_logsumexp_only(stream):
    m, row_sum = online_normalizer(stream)
    return m + math.log(row_sum)


def _sinusoidal_from(position, frequency, *, split=False, cos_first=False):
    """(L, E) from positions (L,) and frequencies (E/2,): a way to get the encoding wrong."""
    angle = position[:, None] * frequency  # (L, E/2)
    first, second = (angle.cos(), angle.sin()) if cos_first else (angle.sin(), angle.cos())
    if split:
        return torch.cat([first, second], dim=-1)  # (L, E)
    return torch.stack([first, second], dim=-1).flatten(-2)  # (L, E)


def sinusoidal_half_split(L, E):
    return _sinusoidal_from(torch.arange(L), 10000 ** (-torch.arange(0, E, 2) / E), split=True)


def sinusoidal_cos_first(L, E):
    return _sinusoidal_from(torch.arange(L), 10000 ** (-torch.arange(0, E, 2) / E),
                            cos_first=True)


def sinusoidal_exponent_i_over_E(L, E):
    return _sinusoidal_from(torch.arange(L), 10000 ** (-torch.arange(E // 2) / E))


def sinusoidal_exponent_of_the_column(L, E):
    pe = torch.zeros(L, E)
    for pos in range(L):
        for j in range(E):
            angle = pos / 10000 ** (j / E)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def sinusoidal_from_position_1(L, E):
    return _sinusoidal_from(torch.arange(1, L + 1), 10000 ** (-torch.arange(0, E, 2) / E))


def sinusoidal_transposed(L, E):
    return my_sinusoidal(L, E).T


def sinusoidal_with_a_batch_dimension(L, E):
    return my_sinusoidal(L, E).unsqueeze(0)


def sinusoidal_as_integers(L, E):
    return my_sinusoidal(L, E).long()


def _rope_with(x, angle, *, pairs="interleaved", out="interleaved", sign=1.0):
    """x (..., L, D) turned by angle (..., L, D/2): a way to get RoPE wrong."""
    D = x.shape[-1]
    if pairs == "interleaved":
        first, second = x[..., 0::2], x[..., 1::2]
    else:
        first, second = x[..., : D // 2], x[..., D // 2:]
    cos, sin = angle.cos(), sign * angle.sin()
    turned = (first * cos - second * sin, first * sin + second * cos)
    if out == "interleaved":
        return torch.stack(turned, dim=-1).flatten(-2)
    return torch.cat(turned, dim=-1)


def _angles(x, positions, base=10000.0, exponent=2):
    D = x.shape[-1]
    theta = base ** (-exponent * torch.arange(D // 2) / D)  # (D/2,)
    return positions[..., None] * theta  # (..., L, D/2)


def rope_half_split(x, positions, base=10000.0):
    return _rope_with(x, _angles(x, positions, base), pairs="half-split", out="half-split")


def rope_half_split_out(x, positions, base=10000.0):
    return _rope_with(x, _angles(x, positions, base), out="half-split")


def rope_backwards(x, positions, base=10000.0):
    return _rope_with(x, _angles(x, positions, base), sign=-1.0)


def rope_arange(x, positions, base=10000.0):
    return rope_interleaved(x, torch.arange(x.shape[-2]), base)


def rope_from_position_1(x, positions, base=10000.0):
    return rope_interleaved(x, positions + 1, base)


def rope_frequencies_i_over_D(x, positions, base=10000.0):
    return _rope_with(x, _angles(x, positions, base, exponent=1))


def rope_in_place(x, positions, base=10000.0):
    first, second = x[..., 0::2], x[..., 1::2]  # views of x
    angle = _angles(x, positions, base)
    first_before = first.clone()
    first.mul_(angle.cos()).sub_(second * angle.sin())
    second.mul_(angle.cos()).add_(first_before * angle.sin())
    return x


def rope_not_a_rotation(x, positions, base=10000.0):
    angle = _angles(x, positions, base)
    first, second = x[..., 0::2], x[..., 1::2]
    turned = (first * angle.cos() + second * angle.sin(), first * angle.sin() + second *
              angle.cos())
    return torch.stack(turned, dim=-1).flatten(-2)


def rope_float32_angles(x, positions, base=10000.0):
    return _rope_with(x, _angles(x, positions, base))  # float32 theta, even for float64 x


def rope_in_float32(x, positions, base=10000.0):
    return rope_interleaved(x.float(), positions, base)


def rope_one_dimensional_positions(x, positions, base=10000.0):
    D = x.shape[-1]
    angle = positions[:, None] * base ** (-torch.arange(0, D, 2) / D)  # needs positions (L,)
    return _rope_with(x, angle)


def rope_ignoring_base(x, positions, base=10000.0):
    return rope_interleaved(x, positions)


def rope_complex_without_pairs(x, positions, base=10000.0):
    D = x.shape[-1]
    angle = _angles(x, positions, base)  # (..., L, D/2)
    pairs = torch.view_as_complex(x)  # needs (..., L, D/2, 2)
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angle), angle)).reshape(
        *x.shape[:-1], D)


def _slopes(n, first=1):
    return [2.0 ** (-8.0 * h / n) for h in range(first, first + n)]


def alibi_naive(num_heads):
    return torch.tensor(_slopes(num_heads))


def alibi_heads_from_0(num_heads):
    closest = 2 ** math.floor(math.log2(num_heads))
    extra = _slopes(2 * closest, first=0)[0::2][: num_heads - closest]
    return torch.tensor(_slopes(closest, first=0) + extra)


def alibi_negative(num_heads):
    return -my_alibi_slopes(num_heads)


def alibi_ascending(num_heads):
    return my_alibi_slopes(num_heads).flip(0)


def alibi_sorted(num_heads):
    return my_alibi_slopes(num_heads).sort(descending=True).values


def alibi_extras_first(num_heads):
    closest = 2 ** math.floor(math.log2(num_heads))
    return torch.tensor(_slopes(2 * closest)[0::2][: num_heads - closest] + _slopes(closest))


def alibi_as_a_list(num_heads):
    return my_alibi_slopes(num_heads).tolist()


def alibi_for_broadcasting(num_heads):
    return my_alibi_slopes(num_heads)[:, None, None]


def alibi_endless_recursion(num_heads):
    return alibi_endless_recursion(num_heads)


def repeat_kv_tiled(kv, num_heads):
    tiles = [1] * kv.dim()
    tiles[-3] = num_heads // kv.shape[-3]
    return kv.repeat(*tiles)


def repeat_kv_concatenated(kv, num_heads):
    return torch.cat([kv] * (num_heads // kv.shape[-3]), dim=-3)


def repeat_kv_along_the_sequence(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.shape[-3], dim=-2)


def repeat_kv_num_heads_times(kv, num_heads):
    return kv.repeat_interleave(num_heads, dim=-3)


def repeat_kv_with_a_batch_only(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.shape[1], dim=1)


def repeat_kv_unchecked(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.shape[-3], dim=-3)


def repeat_kv_reshape_unchecked(kv, num_heads):
    *batch, h_kv, S, E = kv.shape
    expanded = kv[..., :, None, :, :].expand(*batch, h_kv, num_heads // h_kv, S, E)
    return expanded.reshape(*batch, num_heads, S, E)


def bytes_keys_only(config, bytes_per_number=4):
    return cache_bytes_per_token(config, bytes_per_number) // 2


def bytes_query_heads(config, bytes_per_number=4):
    return 2 * config.num_layers * config.num_heads * config.d_head * bytes_per_number


def bytes_d_model(config, bytes_per_number=4):
    return 2 * config.num_layers * config.num_kv_heads * config.d_model * bytes_per_number


def bytes_as_without_grouping(config, bytes_per_number=4):
    return 2 * config.num_layers * config.d_model * bytes_per_number


def bytes_one_layer(config, bytes_per_number=4):
    return 2 * config.num_kv_heads * config.d_head * bytes_per_number


def bytes_counting_numbers(config, bytes_per_number=4):
    return 2 * config.num_layers * config.num_kv_heads * config.d_head


def bytes_in_bits(config, bytes_per_number=4):
    return 8 * cache_bytes_per_token(config, bytes_per_number)


def bytes_always_float32(config, bytes_per_number=4):
    return cache_bytes_per_token(config, 4)


def bytes_as_a_string(config, bytes_per_number=4):
    return f"{cache_bytes_per_token(config, bytes_per_number)} bytes"


def _step_at(q_new, k_new, v_new, cache, base, q_position, k_position, **rope_options):
    cache.append(rope(k_new, torch.tensor([k_position]), base, **rope_options), v_new)
    return cache.attend(rope(q_new, torch.tensor([q_position]), base, **rope_options)).output


def step_at_position_0(q_new, k_new, v_new, cache, base=10000.0):
    return _step_at(q_new, k_new, v_new, cache, base, 0, 0)


def step_at_len_cache(q_new, k_new, v_new, cache, base=10000.0):
    return _step_at(q_new, k_new, v_new, cache, base, len(cache), len(cache))


def step_query_after_appending(q_new, k_new, v_new, cache, base=10000.0):
    position = cache.next_position
    cache.append(rope(k_new, torch.tensor([position]), base), v_new)
    return cache.attend(rope(q_new, torch.tensor([cache.next_position]), base)).output


def step_counting_from_1(q_new, k_new, v_new, cache, base=10000.0):
    t = cache.next_position - 1
    return _step_at(q_new, k_new, v_new, cache, base, t, t)


def step_query_not_rotated(q_new, k_new, v_new, cache, base=10000.0):
    cache.append(rope(k_new, torch.tensor([cache.next_position]), base), v_new)
    return cache.attend(q_new).output


def step_key_not_rotated(q_new, k_new, v_new, cache, base=10000.0):
    q = rope(q_new, torch.tensor([cache.next_position]), base)
    cache.append(k_new, v_new)
    return cache.attend(q).output


def step_values_rotated(q_new, k_new, v_new, cache, base=10000.0):
    position = torch.tensor([cache.next_position])
    cache.append(rope(k_new, position, base), rope(v_new, position, base))
    return cache.attend(rope(q_new, position, base)).output


def step_interleaved(q_new, k_new, v_new, cache, base=10000.0):
    t = cache.next_position
    return _step_at(q_new, k_new, v_new, cache, base, t, t, layout="interleaved")


def step_ignoring_the_base(q_new, k_new, v_new, cache, base=10000.0):
    return cached_rope_step(q_new, k_new, v_new, cache)


def step_without_appending(q_new, k_new, v_new, cache, base=10000.0):
    return cached_rope_step(q_new, k_new, v_new, KVCache(), base)


def step_caching_expanded_heads(q_new, k_new, v_new, cache, base=10000.0):
    groups = q_new.shape[1] // k_new.shape[1]
    return cached_rope_step(q_new, k_new.repeat_interleave(groups, dim=1),
                            v_new.repeat_interleave(groups, dim=1), cache, base)


def step_with_an_int_position(q_new, k_new, v_new, cache, base=10000.0):
    position = cache.next_position
    cache.append(rope(k_new, position, base), v_new)
    return cache.attend(rope(q_new, position, base)).output


def step_rotating_in_place(q_new, k_new, v_new, cache, base=10000.0):
    q_new.copy_(rope(q_new, torch.tensor([cache.next_position]), base))
    return cached_rope_step(q_new, k_new, v_new, cache, base)


def _window_from(L, recent, sinks, *, causal=True, sinks_causal=True, both_ways=False,
                 width=None):
    """(L, L) bool: a way to get the window wrong."""
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    width = recent if width is None else width
    near = (i - j).abs() < width if both_ways else i - j < width
    if causal:
        near = near & (j <= i)
    sink = (j < sinks) & (j <= i) if sinks_causal else j < sinks
    return near | sink


def window_not_causal(L, recent, sinks=0):
    return _window_from(L, recent, sinks, causal=False, sinks_causal=False)


def window_both_ways(L, recent, sinks=0):
    return _window_from(L, recent, sinks, causal=False, both_ways=True)


def window_sinks_see_the_future(L, recent, sinks=0):
    return _window_from(L, recent, sinks, sinks_causal=False)


def window_one_too_wide(L, recent, sinks=0):
    return _window_from(L, recent, sinks, width=recent + 1)


def window_one_too_narrow(L, recent, sinks=0):
    return _window_from(L, recent, sinks, width=recent - 1)


def window_without_sinks(L, recent, sinks=0):
    return _window_from(L, recent, 0)


def window_reversed(L, recent, sinks=0):
    return ~window_mask(L, recent, sinks)


def window_transposed(L, recent, sinks=0):
    return window_mask(L, recent, sinks).T


def window_as_floats(L, recent, sinks=0):
    return window_mask(L, recent, sinks).float()


def window_additive(L, recent, sinks=0):
    return torch.zeros(L, L).masked_fill(~window_mask(L, recent, sinks), float("-inf"))


def window_with_a_batch_dimension(L, recent, sinks=0):
    return window_mask(L, recent, sinks)[None]


def _prefix_over(weights, period, queries, shift=1):
    """The mean over ``queries`` of the weight on key t - period + shift: a way to get the
    prefix-matching score wrong."""
    picked = [weights[..., t, t - period + shift] for t in queries]
    return torch.stack(picked, dim=-1).mean(-1)


def prefix_on_the_earlier_occurrence(weights, period):
    L = weights.shape[-1]
    return weights[..., period:, :L - period].diagonal(dim1=-2, dim2=-1).mean(-1)


def prefix_over_all_queries(weights, period):
    t = torch.arange(weights.shape[-1])
    return weights[..., t, t - period + 1].mean(-1)  # negative keys wrap around


def prefix_divided_by_L(weights, period):
    return prefix_matching_score(weights, period) * (weights.shape[-1] - period) / \
        weights.shape[-1]


def prefix_from_query_T_minus_1(weights, period):
    return weights.diagonal(offset=1 - period, dim1=-2, dim2=-1).mean(-1)


def prefix_from_query_T_plus_1(weights, period):
    return _prefix_over(weights, period, range(period + 1, weights.shape[-1]))


def prefix_without_the_last_query(weights, period):
    return _prefix_over(weights, period, range(period, weights.shape[-1] - 1))


def prefix_one_key_too_far(weights, period):
    return _prefix_over(weights, period, range(period, weights.shape[-1]), shift=2)


def prefix_transposed(weights, period):
    return prefix_matching_score(weights.transpose(-2, -1), period)


def prefix_summed(weights, period):
    return prefix_matching_score(weights, period) * (weights.shape[-1] - period)


def prefix_one_mean_for_all(weights, period):
    return prefix_matching_score(weights, period).mean()


def prefix_default_diagonal(weights, period):
    L = weights.shape[-1]
    return weights[..., period:, 1:L - period + 1].diagonal().mean(-1)


def prefix_as_a_float(weights, period):
    return float(prefix_matching_score(weights, period).mean())


def prefix_in_place(weights, period):
    weights[..., :period, :] = 0.0  # "the first copy does not count"
    return prefix_matching_score(weights, period)


def prefix_in_float64(weights, period):
    return prefix_matching_score(weights.double(), period)


def _ablate_with(merged, start, width, value):
    out = merged.clone()
    out[..., start:start + width] = value(merged[..., start:start + width])
    return out


def ablate_at_head_times_num_heads(merged, head, num_heads):
    d_head = merged.shape[-1] // num_heads
    return _ablate_with(merged, head * num_heads, d_head,
                        lambda part: part.mean(dim=(0, 1), keepdim=True))


def ablate_over_the_features(merged, head, num_heads):
    d_head = merged.shape[-1] // num_heads
    return _ablate_with(merged, head * d_head, d_head,
                        lambda part: part.mean(dim=-1, keepdim=True))


def ablate_per_sequence(merged, head, num_heads):
    d_head = merged.shape[-1] // num_heads
    return _ablate_with(merged, head * d_head, d_head,
                        lambda part: part.mean(dim=1, keepdim=True))


def ablate_over_the_batch(merged, head, num_heads):
    d_head = merged.shape[-1] // num_heads
    return _ablate_with(merged, head * d_head, d_head,
                        lambda part: part.mean(dim=0, keepdim=True))


def ablate_with_zeros(merged, head, num_heads):
    d_head = merged.shape[-1] // num_heads
    return _ablate_with(merged, head * d_head, d_head, torch.zeros_like)


def ablate_every_head(merged, head, num_heads):
    return merged.mean(dim=(0, 1), keepdim=True).expand_as(merged)


def ablate_returning_the_head_only(merged, head, num_heads):
    d_head = merged.shape[-1] // num_heads
    return mean_ablate(merged, head, num_heads)[..., head * d_head:(head + 1) * d_head]


def ablate_in_place(merged, head, num_heads):
    d_head = merged.shape[-1] // num_heads
    part = slice(head * d_head, (head + 1) * d_head)
    merged[..., part] = merged[..., part].mean(dim=(0, 1), keepdim=True)
    return merged


def _small(w_v, w_o, embed, unembed):
    return w_v.double() @ embed.double().T @ unembed.double() @ w_o.double()  # (d, d)


def copying_trace_over_its_size(w_v, w_o, embed, unembed):
    trace = torch.trace(_small(w_v, w_o, embed, unembed))
    return float(trace / trace.abs())


def copying_over_the_diagonal(w_v, w_o, embed, unembed):
    small = _small(w_v, w_o, embed, unembed)
    return float(torch.trace(small) / small.diagonal().abs().sum())


def copying_with_singular_values(w_v, w_o, embed, unembed):
    small = _small(w_v, w_o, embed, unembed)
    return float(torch.trace(small) / torch.linalg.svdvals(small).sum())


def copying_over_absolute_real_parts(w_v, w_o, embed, unembed):
    eigenvalues = torch.linalg.eigvals(_small(w_v, w_o, embed, unembed))
    return float(eigenvalues.real.sum() / eigenvalues.real.abs().sum())


def copying_unweighted_mean(w_v, w_o, embed, unembed):
    eigenvalues = torch.linalg.eigvals(_small(w_v, w_o, embed, unembed))
    return float((eigenvalues.real / eigenvalues.abs()).mean())


def copying_nan_where_the_trace_is_zero(w_v, w_o, embed, unembed):
    """Right, except that it divides by the trace, which only the rotation has at 0: the
    checker's message for a NaN."""
    small = _small(w_v, w_o, embed, unembed)
    trace = torch.trace(small)
    return float(copying_score(w_v, w_o, embed, unembed) * trace / trace)


def copying_with_eigvalsh(w_v, w_o, embed, unembed):
    eigenvalues = torch.linalg.eigvalsh(_small(w_v, w_o, embed, unembed))
    return float(eigenvalues.sum() / eigenvalues.abs().sum())


def copying_without_the_embeddings(w_v, w_o, embed, unembed):
    eigenvalues = torch.linalg.eigvals(w_o.double() @ w_v.double())  # (d_model,)
    return float(eigenvalues.real.sum() / eigenvalues.abs().sum())


def copying_with_embed_and_unembed_swapped(w_v, w_o, embed, unembed):
    return copying_score(w_v, w_o, unembed, embed)


def copying_as_a_complex_tensor(w_v, w_o, embed, unembed):
    eigenvalues = torch.linalg.eigvals(_small(w_v, w_o, embed, unembed))
    return eigenvalues.sum() / eigenvalues.abs().sum()


def copying_as_a_python_complex(w_v, w_o, embed, unembed):
    return complex(copying_as_a_complex_tensor(w_v, w_o, embed, unembed))


def copying_per_eigenvalue(w_v, w_o, embed, unembed):
    eigenvalues = torch.linalg.eigvals(_small(w_v, w_o, embed, unembed))
    return eigenvalues.real / eigenvalues.abs()


def copying_in_float32(w_v, w_o, embed, unembed):
    small = w_v.float() @ embed.float().T @ unembed.float() @ w_o.float()
    eigenvalues = torch.linalg.eigvals(small)
    return float(eigenvalues.real.sum() / eigenvalues.abs().sum())


def copying_normalising_in_place(w_v, w_o, embed, unembed):
    w_v /= w_v.norm()  # the score does not depend on the scale, but w_v is the caller's
    return copying_score(w_v, w_o, embed, unembed)


# ----------------------------------------- more right answers, in other styles (issue 24)


def nearest_with_cosine_similarity(table, query, k, exclude=None):
    """F.cosine_similarity and a full sort."""
    cosines = F.cosine_similarity(table, query[None, :], dim=-1)  # (V,)
    if exclude is not None:
        cosines = cosines.masked_fill(torch.arange(len(table)) == exclude, -math.inf)
    order = cosines.argsort(descending=True)[:k]
    return order, cosines[order]


def raw_attention_with_einsum(x):
    weights = torch.einsum("ble,bse->bls", x, x).softmax(dim=-1)
    return torch.einsum("bls,bse->ble", weights, x), weights


def raw_attention_with_bmm(x):
    weights = torch.softmax(torch.bmm(x, x.mT), dim=2)  # x is (B, L, E): dim 2 is the keys
    return torch.bmm(weights, x), weights


def softmax_with_a_hand_written_max(scores):
    """The row maximum by folding torch.maximum over the columns; no amax."""
    m = scores[..., 0]
    for column in scores.unbind(dim=-1)[1:]:
        m = torch.maximum(m, column)
    exps = torch.exp(scores - m[..., None])
    return exps / exps.sum(dim=-1, keepdim=True)


def softmax_with_max_values(scores):
    exps = (scores - scores.max(dim=-1, keepdim=True).values).exp()
    return exps / exps.sum(-1, keepdim=True)


def entropy_with_eps_in_the_log(weights):
    return -(weights * torch.log(weights + 1e-12)).sum(dim=-1)


def entropy_with_where(weights):
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))
    return -(weights * logs).sum(-1)


class EinsumAttention(nn.Module):
    """The same three layers, the products written with einsum."""

    def __init__(self, n_embd):
        super().__init__()
        self.query = nn.Linear(n_embd, n_embd)
        self.key = nn.Linear(n_embd, n_embd)
        self.value = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        scores = torch.einsum("...le,...se->...ls", self.query(x), self.key(x))
        weights = scores.softmax(dim=-1)
        return torch.einsum("...ls,...se->...le", weights, self.value(x)), weights


def masked_softmax_with_nan_to_num(scores, mask):
    """-inf fills, then the NaN of the empty rows replaced: values and gradients right."""
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return weights.nan_to_num(0.0)


def masked_softmax_with_finfo_min(scores, mask):
    """The dtype's most negative number, then the empty rows zeroed by a guard."""
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(filled, dim=-1) * mask  # forbidden weights exactly 0
    return torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0)


def causal_mask_with_tril(L, S=None):
    S = L if S is None else S
    return torch.ones(L, S).tril(diagonal=S - L).bool()


def split_with_chunk_and_stack(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)  # (B, h, L, d_head)


def merge_with_unbind_and_cat(heads):
    return torch.cat(heads.unbind(dim=1), dim=-1)  # (B, L, h * d_head)


def split_with_view_and_permute(x, num_heads):
    B, L, d_model = x.shape
    return x.view(B, L, num_heads, d_model // num_heads).permute(0, 2, 1, 3)


def merge_with_permute_and_contiguous(heads):
    B, h, L, d_head = heads.shape
    return heads.permute(0, 2, 1, 3).contiguous().view(B, L, h * d_head)


def repeat_pattern_vectorised(L, period):
    t, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    hits = ((j <= t) & ((t + 1 - j) % period == 0)).float()  # (L, L)
    return hits / hits.sum(dim=-1, keepdim=True).clamp(min=1)


def cached_rope_step_with_rotate_half(q_new, k_new, v_new, cache, base=10000.0):
    """Hugging Face's rotate_half and cos/sin tables repeated for both halves."""
    E = q_new.shape[-1]
    theta = 1.0 / base ** (torch.arange(0, E, 2, dtype=torch.float64) / E)
    angle = (cache.next_position * theta).repeat(2)  # (E,)
    cos, sin = angle.cos().to(q_new.dtype), angle.sin().to(q_new.dtype)

    def turn(x):
        half = torch.cat([-x[..., E // 2:], x[..., :E // 2]], dim=-1)
        return x * cos + half * sin

    cache.append(turn(k_new), v_new)
    return cache.attend(turn(q_new)).output


# ------------------------------------------ more typical mistakes (issue 24)


def nearest_ids_only(table, query, k, exclude=None):
    return nearest_by_cosine(table, query, k, exclude)[0]


def nearest_excluded_with_zero(table, query, k, exclude=None):
    cosines = (table / table.norm(dim=1, keepdim=True)) @ (query / query.norm())
    if exclude is not None:
        cosines[exclude] = 0.0
    values, ids = cosines.topk(k)
    return ids, values


def raw_attention_without_softmax(x):
    weights = x @ x.transpose(-2, -1)
    return weights @ x, weights


def raw_attention_normalised_by_the_sum(x):
    scores = x @ x.transpose(-2, -1)
    weights = scores / scores.sum(dim=-1, keepdim=True)
    return weights @ x, weights


def softmax_always_in_float32(scores):
    return torch.softmax(scores.float(), dim=-1).to(scores.dtype)


def softmax_by_logsumexp(scores):
    return torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))


def softmax_max_without_keepdim(scores):
    exps = torch.exp(scores - scores.amax(dim=-1))
    return exps / exps.sum(dim=-1, keepdim=True)


def softmax_clamped(scores):
    exps = torch.exp(scores.clamp(-80.0, 80.0))
    return exps / exps.sum(dim=-1, keepdim=True)


def softmax_over_dim_1(scores):
    exps = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return exps / exps.sum(dim=1, keepdim=True)


def entropy_over_the_queries(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=-2)


def entropy_as_a_mean(weights):
    return -torch.special.xlogy(weights, weights).mean(dim=-1)


def masked_renormalised_with_eps(scores, mask):
    weights = torch.softmax(scores, dim=-1) * mask
    return weights / (weights.sum(dim=-1, keepdim=True) + 1e-12)


def masked_renormalised_with_a_guard(scores, mask):
    """AllenNLP's old way: a softmax over every key, times the mask, renormalised."""
    weights = torch.softmax(scores, dim=-1) * mask
    total = weights.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, weights / total.clamp(min=1e-30), 0.0)


def mha_weights_folded(q, k, v, num_heads):
    out, weights = _heads(q, k, v, num_heads)
    return my_merge_heads(out), weights.flatten(0, 1)


def masked_over_the_queries(scores, mask):
    keep = mask | ~mask.any(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-2)
    return weights.masked_fill(~mask, 0.0)


def _positions(L):
    return torch.arange(L)[:, None], torch.arange(L)[None, :]  # queries (L, 1), keys (1, L)


def padded_mask_of_the_pads(lengths, L):
    return ~padded_causal_mask(lengths, L)  # True = hide


def padded_mask_without_the_diagonal(lengths, L):
    i, j = _positions(L)
    return (j < i) & (j < lengths[:, None, None, None])


def padded_mask_on_the_queries(lengths, L):
    i, j = _positions(L)
    return (j <= i) & (i < lengths[:, None, None, None])


def padded_mask_keeping_one_pad(lengths, L):
    i, j = _positions(L)
    return (j <= i) & (j <= lengths[:, None, None, None])


def padded_mask_without_padding(lengths, L):
    i, j = _positions(L)
    return ((j <= i) & (lengths[:, None, None, None] > 0)).expand(len(lengths), 1, L, L)


def padded_mask_without_heads(lengths, L):
    return padded_causal_mask(lengths, L)[:, 0]  # (B, L, L)


def padded_mask_as_floats(lengths, L):
    return padded_causal_mask(lengths, L).float()


def padded_mask_of_the_longest(lengths, L):
    return padded_causal_mask(lengths, int(lengths.max()))


def _peeks(layer, x, *, width=0, step=0, change=None, same=torch.equal, sequences=slice(None),
           copy=True, order=None):
    """peeks_ahead with one mistake: outputs up to t + width compared, t + step returned,
    token t replaced by change(x, t), compared with same(), on some sequences, x changed
    in place (copy=False), or the positions tried in another order."""
    with torch.no_grad():
        output = layer(x)[0]
        for t in order or range(1, x.shape[1]):
            changed = x.clone() if copy else x
            changed[:, t] = (torch.randn(x.shape[0], x.shape[2]) if change is None
                             else change(x, t))
            new = layer(changed)[0]
            if not same(new[sequences, :t + width], output[sequences, :t + width]):
                return t + step
    return None


def peeks_including_t(layer, x):
    return _peeks(layer, x, width=1)


def peeks_with_allclose(layer, x):
    return _peeks(layer, x, same=torch.allclose)


def peeks_returning_t_minus_1(layer, x):
    return _peeks(layer, x, step=-1)


def peeks_with_zeros(layer, x):
    return _peeks(layer, x, change=lambda x, t: 0.0)


def peeks_with_the_token_before(layer, x):
    return _peeks(layer, x, change=lambda x, t: x[:, t - 1])


def peeks_at_sequence_0(layer, x):
    return _peeks(layer, x, sequences=0)


def peeks_in_place(layer, x):
    return _peeks(layer, x, copy=False)


def peeks_until_L_minus_2(layer, x):
    return _peeks(layer, x, order=range(1, x.shape[1] - 1))


def peeks_from_the_end(layer, x):
    return _peeks(layer, x, order=range(x.shape[1] - 1, 0, -1))


# ----------------------------------------------------------------------------------- tests

def quantize_keys_block_by_block(keys, bits, group):
    """Min-max rounding with Python loops over channels and blocks."""
    rounded = keys.clone()
    t, channels = keys.shape
    for c in range(channels):
        for start in range(0, t, group):
            block = keys[start:start + group, c]
            low, high = block.min(), block.max()
            if high == low:
                continue
            step = (high - low) / (2**bits - 1)
            rounded[start:start + group, c] = ((block - low) / step).round() * step + low
    blocks = channels * (t // group)
    return rounded, (t * channels * bits + 7) // 8 + 4 * blocks


def evict_one_with_masks(received, positions, recent, sinks):
    """The least attended candidate, found with tensor masks."""
    candidate = (positions >= sinks) & (positions[-1] - positions >= recent)
    index = received.masked_fill(~candidate, float("inf")).argmin()
    return positions[index]



# ------------------------------------------------------------------------- whisper: my_dtw


def _dtw_table(cost, moves=((1, 1), (1, 0), (0, 1)), free_start=False):
    """The cheapest cost of a path ending at each cell, with the moves given."""
    cost = np.asarray(cost, dtype=float)
    n, m = cost.shape
    total = np.full((n, m), np.inf)
    for i in range(n):
        for j in range(m):
            before = [total[i - a, j - b] for a, b in moves if i - a >= 0 and j - b >= 0]
            start = 0.0 if (i, j) == (0, 0) or (free_start and i == 0) else np.inf
            total[i, j] = cost[i, j] + min(before + [start])
    return total


def _walk_back(total, moves=((1, 1), (1, 0), (0, 1)), stop=lambda i, j: (i, j) == (0, 0)):
    n, m = total.shape
    path = [(n - 1, m - 1)]
    while not stop(*path[-1]):
        i, j = path[-1]
        options = [(i - a, j - b) for a, b in moves if i - a >= 0 and j - b >= 0]
        if not options:
            break
        path.append(min(options, key=lambda cell: total[cell]))
    return path


def dtw_by_recursion(cost):
    """Right: the cheapest path to each cell by memoised recursion."""
    import functools

    cost = np.asarray(cost, dtype=float)

    @functools.cache
    def best(i, j):
        if (i, j) == (0, 0):
            return cost[0, 0], ((0, 0),)
        options = [best(i - a, j - b) for a, b in ((1, 1), (1, 0), (0, 1))
                   if i - a >= 0 and j - b >= 0]
        total, path = min(options, key=lambda option: option[0])
        return total + cost[i, j], (*path, (i, j))

    return list(best(cost.shape[0] - 1, cost.shape[1] - 1)[1])


def dtw_as_an_array(cost):
    """Right: the path as a NumPy array (k, 2)."""
    return np.array(_walk_back(_dtw_table(cost))[::-1])


def dtw_reversed(cost):
    return _walk_back(_dtw_table(cost))  # from the last cell back, not reversed


def dtw_greedy(cost):
    """Steps forward to the cheapest next cell, never looking further."""
    cost = np.asarray(cost, dtype=float)
    n, m = cost.shape
    path = [(0, 0)]
    while path[-1] != (n - 1, m - 1):
        i, j = path[-1]
        options = [(i + a, j + b) for a, b in ((1, 1), (1, 0), (0, 1))
                   if i + a < n and j + b < m]
        path.append(min(options, key=lambda cell: cost[cell]))
    return path


def dtw_without_the_step_down(cost):
    """The table fills from the diagonal and the left only; walking back, the step up too."""
    total = _dtw_table(cost, moves=((1, 1), (0, 1)))
    return _walk_back(total)[::-1]


def dtw_starting_anywhere(cost):
    """A path may start anywhere in the first row (subsequence DTW)."""
    total = _dtw_table(cost, free_start=True)
    return _walk_back(total, stop=lambda i, j: i == 0 and (j == 0 or total[0, j] ==
                                                            cost[0][j]))[::-1]


def dtw_one_cell_per_row(cost):
    """Keeps only the cell where the path enters each row: steps that skip cells."""
    path = _walk_back(_dtw_table(cost))[::-1]
    kept = [path[0]] + [cell for before, cell in zip(path, path[1:], strict=False)
                        if cell[0] != before[0]]
    return kept if kept[-1] == path[-1] else [*kept, path[-1]]


def dtw_most_expensive(cost):
    """Takes the largest predecessor instead of the smallest."""
    return dtw_by_recursion(-np.asarray(cost, dtype=float))


# --------------------------------------------------------- whisper: my_cross_steps


def _cross_step_parts(cross, sound):
    """The sound's keys and values, split into heads by the layer's own helper."""
    return cross.split_heads(cross.k_proj(sound)), cross.split_heads(cross.v_proj(sound))


def cross_steps_with_sdpa(cross, sound, text):
    """Right: the layer's split and merge around PyTorch's fused kernel, no mask."""
    keys, values = _cross_step_parts(cross, sound)
    outputs = []
    for t in range(text.shape[1]):
        q = cross.split_heads(cross.q_proj(text[:, t:t + 1]))
        out = torch.nn.functional.scaled_dot_product_attention(q, keys, values)
        outputs.append(cross.out_proj(cross.merge_heads(out)))
    return torch.stack([o[:, 0] for o in outputs], dim=1)


def cross_steps_calling_the_layer(cross, sound, text):
    """Wrong: the whole layer at each step projects the sound again."""
    return torch.cat([cross(text[:, t:t + 1], sound).output for t in range(text.shape[1])],
                     dim=1)


def cross_steps_from_the_text(cross, sound, text):
    """Wrong: keys and values of the text so far, as self-attention has them."""
    outputs = []
    for t in range(text.shape[1]):
        so_far = text[:, :t + 1]
        keys, values = _cross_step_parts(cross, so_far)
        q = cross.split_heads(cross.q_proj(text[:, t:t + 1]))
        out = torch.nn.functional.scaled_dot_product_attention(q, keys, values)
        outputs.append(cross.out_proj(cross.merge_heads(out)))
    return torch.cat(outputs, dim=1)


def cross_steps_all_at_once(cross, sound, text):
    """Wrong for this exercise: every text position projected in one call."""
    keys, values = _cross_step_parts(cross, sound)
    q = cross.split_heads(cross.q_proj(text))
    out = torch.nn.functional.scaled_dot_product_attention(q, keys, values)
    return cross.out_proj(cross.merge_heads(out))


def cross_steps_is_causal(cross, sound, text):
    """Wrong: SDPA's causal mask, aligned top-left, shows one query the first position."""
    keys, values = _cross_step_parts(cross, sound)
    outputs = []
    for t in range(text.shape[1]):
        q = cross.split_heads(cross.q_proj(text[:, t:t + 1]))
        out = torch.nn.functional.scaled_dot_product_attention(q, keys, values,
                                                               is_causal=True)
        outputs.append(cross.out_proj(cross.merge_heads(out)))
    return torch.cat(outputs, dim=1)


def cross_steps_unscaled(cross, sound, text):
    """Wrong: no 1/sqrt(d_head)."""
    keys, values = _cross_step_parts(cross, sound)
    outputs = []
    for t in range(text.shape[1]):
        q = cross.split_heads(cross.q_proj(text[:, t:t + 1]))
        weights = torch.softmax(q @ keys.transpose(-2, -1), dim=-1)
        outputs.append(cross.out_proj(cross.merge_heads(weights @ values)))
    return torch.cat(outputs, dim=1)


# ----------------------------------------------------------- whisper: my_word_rows


def word_rows_with_cumsum(prompt_length, pieces):
    """Right: each word's first position from a running sum, as NumPy gives it."""
    starts = prompt_length + np.cumsum([0] + [len(p) for p in pieces[:-1]])
    return [np.arange(start - 1, start - 1 + len(p))
            for start, p in zip(starts, pieces, strict=True)]


def word_rows_one_late(prompt_length, pieces):
    """Wrong: the rows where the tokens are the input."""
    return [[r + 1 for r in word] for word in my_word_rows(prompt_length, pieces)]


def word_rows_restarting(prompt_length, pieces):
    """Wrong: every word counted from the end of the prompt."""
    return [list(range(prompt_length - 1, prompt_length - 1 + len(p))) for p in pieces]


def word_rows_without_the_prompt(prompt_length, pieces):
    """Wrong: rows counted from 0, as if the text had no prompt before it."""
    return my_word_rows(1, pieces)


def word_rows_flat(prompt_length, pieces):
    """Wrong: one flat list of rows."""
    return [r for word in my_word_rows(prompt_length, pieces) for r in word]


PASSING: list[tuple[Callable, tuple]] = [  # beyond the solution files (see below)
    (check_simple_attention, (MySimpleAttention(6),)),  # an instance rather than the class
    (check_repeat_pattern, (lambda L, period: repeat_pattern(L, period).double(),)),
    (check_multi_head_attention, (mha_with_chunk_and_stack,)),
    (check_nearest_by_cosine, (nearest_with_cosine_similarity,)),
    (check_batched_raw_attention, (raw_attention_with_einsum,)),
    (check_batched_raw_attention, (raw_attention_with_bmm,)),
    (check_stable_softmax, (softmax_with_a_hand_written_max,)),
    (check_stable_softmax, (softmax_with_max_values,)),
    (check_row_entropy, (entropy_with_eps_in_the_log,)),
    (check_row_entropy, (entropy_with_where,)),
    (check_simple_attention, (EinsumAttention,)),
    (check_masked_softmax, (masked_softmax_with_nan_to_num,)),
    (check_masked_softmax, (masked_softmax_with_finfo_min,)),
    (check_causal_mask, (causal_mask_with_tril,)),
    (check_split_merge_heads, (split_with_chunk_and_stack, merge_with_unbind_and_cat)),
    (check_split_merge_heads, (split_with_view_and_permute, merge_with_permute_and_contiguous)),
    (check_repeat_pattern, (repeat_pattern_vectorised,)),
    (check_cached_rope_step, (cached_rope_step_with_rotate_half,)),
    (check_multi_head_attention, (mha_with_permute_and_einsum,)),
    (check_online_normalizer, (online_normalizer_in_float64_tensors,)),
    (check_online_normalizer, (online_normalizer_with_a_branch,)),
    (check_sinusoidal, (sinusoidal_as_in_the_annotated_transformer,)),
    (check_sinusoidal, (sinusoidal_with_loops,)),
    (check_rope_interleaved, (rope_with_complex_numbers,)),
    (check_rope_interleaved, (rope_as_in_gpt_j,)),
    (check_alibi_slopes, (alibi_slopes_as_in_the_paper,)),
    (check_alibi_slopes, (alibi_slopes_vectorised,)),
    (check_repeat_kv, (repeat_kv_as_in_llama,)),
    (check_cache_bytes_per_token, (cache_bytes_from_the_config,)),
    (check_cache_bytes_per_token, (lambda config, b: torch.tensor(
        cache_bytes_per_token(config, b)),)),
    (check_cached_rope_step, (cached_rope_step_with_the_package,)),
    (check_window_mask, (window_mask_with_loops,)),
    (check_prefix_matching_score, (prefix_matching_with_a_loop,)),
    (check_prefix_matching_score, (prefix_matching_with_an_offset_diagonal,)),
    (check_mean_ablation, (mean_ablate_through_the_heads,)),
    (check_mean_ablation, (mean_ablate_with_a_mask,)),
    (check_copying_score, (copying_score_from_the_vocab,)),
    (check_copying_score, (copying_score_with_numpy,)),
    (check_padded_causal_mask, (padded_mask_with_tril,)),
    (check_padded_causal_mask, (padded_mask_with_loops,)),
    (check_peeks_ahead, (peeks_with_random_tokens,)),
    (check_peeks_ahead, (peeks_with_noise_and_ne,)),
    (check_quantize_keys, (quantize_keys_block_by_block,)),
    (check_quantize_keys, (lambda keys, bits, group: (
        quantize_keys(keys, bits, group)[0], torch.tensor(quantize_keys(keys, bits,
                                                                        group)[1])),)),
    (check_evict_one, (evict_one_with_masks,)),
    (check_dtw, (dtw_by_recursion,)),
    (check_dtw, (dtw_as_an_array,)),
    (check_cross_attention_steps, (cross_steps_with_sdpa,)),
    (check_cross_attention_steps, (my_cross_steps,)),
    (check_word_rows, (my_word_rows,)),
    (check_word_rows, (word_rows_with_cumsum,)),
]


@pytest.mark.parametrize(("checker", "args"), PASSING,
                         ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(PASSING)])
def test_right_answers_pass_with_one_line(checker, args, capsys):
    assert checker(*args) is None
    printed = capsys.readouterr().out
    assert re.fullmatch(rf"✓ {checker.__name__}: all \d+ checks passed\.\n", printed), printed


#: exercise label -> (its solution file, its chapter, its checker, what the solution defines).
#: A chapter with several checked exercises keeps their solutions in one file.
SOLVED: dict[str, tuple[str, str, Callable, tuple[str, ...]]] = {
    "static-embeddings-ex3": ("static_embeddings", "static-embeddings",
                              check_nearest_by_cosine, ("nearest_by_cosine",)),
    "dot-product-similarity-ex3": ("dot_product_similarity", "dot-product-similarity",
                                   check_batched_raw_attention, ("batched_raw_attention",)),
    "scaling-ex2": ("scaling", "scaling", check_stable_softmax, ("my_softmax",)),
    "attention-maps-ex3": ("attention_maps", "attention-maps", check_row_entropy,
                           ("row_entropy",)),
    "pytorch-implementation-ex1": ("pytorch_implementation", "pytorch-implementation",
                                   check_simple_attention, ("MySimpleAttention",)),
    "causal-masks-ex3": ("causal_masks", "causal-masks", check_masked_softmax,
                         ("my_masked_softmax",)),
    "causal-masks-ex5": ("causal_masks", "causal-masks", check_causal_mask,
                         ("my_causal_mask",)),
    "multi-head-attention-ex3": ("multi_head_attention", "multi-head-attention",
                                 check_split_merge_heads, ("my_split_heads", "my_merge_heads")),
    "multi-head-attention-ex5": ("multi_head_attention", "multi-head-attention",
                                 check_multi_head_attention, ("my_multi_head_attention",)),
    "attention-layer-ex1": ("attention_layer", "attention-layer", check_padded_causal_mask,
                            ("padded_causal_mask",)),
    "attention-layer-ex2": ("attention_layer", "attention-layer", check_peeks_ahead,
                            ("peeks_ahead",)),
    "training-attention-ex3": ("training_attention", "training-attention",
                               check_repeat_pattern, ("repeat_pattern",)),
    "efficient-attention-ex3": ("efficient_attention", "efficient-attention",
                                check_online_normalizer, ("online_normalizer",)),
    "positions-ex1": ("positions", "positions", check_sinusoidal, ("my_sinusoidal",)),
    "positions-ex2": ("positions", "positions", check_rope_interleaved, ("rope_interleaved",)),
    "positions-ex3": ("positions", "positions", check_alibi_slopes, ("my_alibi_slopes",)),
    "language-model-ex1": ("language_model", "language-model", check_repeat_kv,
                           ("repeat_kv",)),
    "language-model-ex2": ("language_model", "language-model", check_cache_bytes_per_token,
                           ("cache_bytes_per_token",)),
    "language-model-ex3": ("language_model", "language-model", check_cached_rope_step,
                           ("cached_rope_step",)),
    "language-model-ex4": ("language_model", "language-model", check_window_mask,
                           ("window_mask",)),
    "induction-heads-ex1": ("induction_heads", "induction-heads", check_prefix_matching_score,
                            ("prefix_matching_score",)),
    "induction-heads-ex2": ("induction_heads", "induction-heads", check_mean_ablation,
                            ("mean_ablate",)),
    "induction-heads-ex3": ("induction_heads", "induction-heads", check_copying_score,
                            ("copying_score",)),
    "cache-budget-ex1": ("cache_budget", "cache-budget", check_quantize_keys,
                         ("quantize_keys",)),
    "cache-budget-ex3": ("cache_budget", "cache-budget", check_evict_one, ("evict_one",)),
    "whisper-ex1": ("whisper", "whisper", check_dtw, ("my_dtw",)),
    "whisper-ex4": ("whisper", "whisper", check_cross_attention_steps, ("my_cross_steps",)),
    "whisper-ex5": ("whisper", "whisper", check_word_rows, ("my_word_rows",)),
}


def mask_of_the_padded_layer(namespace: dict[str, object]) -> dict[str, object]:
    """The chapter's ``PaddedCausalSelfAttention`` as ``padded_causal_mask(lengths, L)``:
    where the layer masks, its weights are exp(-inf) = 0 exactly; elsewhere positive."""
    def padded_causal_mask(lengths, L):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            layer = namespace["PaddedCausalSelfAttention"](8, 2).eval()
        x = torch.randn(len(lengths), L, 8, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            _, weights = layer(x, lengths)  # (B, h, L, L)
        return weights[:, :1] > 0  # (B, 1, L, L)

    return {"padded_causal_mask": padded_causal_mask}


#: Exercises whose chapter solves them inside a layer while the folder asks for the piece
#: the layer is built around: label -> (the classes the solution defines, the classes it
#: builds on from earlier in the chapter, what turns them into the folder's definitions).
IN_A_LAYER: dict[str, tuple[tuple[str, ...], tuple[str, ...], Callable]] = {
    "attention-layer-ex1": (("PaddedCausalSelfAttention",), ("CausalSelfAttention",),
                            mask_of_the_padded_layer),
}


def cells_defining(text: str, names: tuple[str, ...], *, every_cell: bool = True
                   ) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """The imports and the definitions of ``names`` in the code cells of ``text``: the
    imports of every cell, or (``every_cell=False``) of the cells defining one of them."""
    imports, definitions = [], []
    for cell in re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, flags=re.S):
        if not every_cell and not re.search(rf"^(def|class) ({'|'.join(names)})\b", cell,
                                            flags=re.M):
            continue
        cell = re.sub(r"\A---\n.*?\n---\n", "", cell, flags=re.S)  # front matter
        cell = re.sub(r"\A(:[^\n]*\n)+", "", cell)  # options such as :tags:
        body = ast.parse(cell).body
        imports += [node for node in body if isinstance(node, ast.Import | ast.ImportFrom)]
        definitions += [node for node in body
                        if isinstance(node, ast.FunctionDef | ast.ClassDef)
                        and node.name in names]
    return imports, definitions


def chapter_solution(chapter: str, label: str, names: tuple[str, ...]) -> dict[str, object]:
    """The definitions of ``names`` in the solution cells of exercise ``label``, run on their
    own with what every chapter imports (torch, nn, F, math) and what those cells import.
    For an exercise of :data:`IN_A_LAYER`, the solution's layer turned into them."""
    text = (ROOT / "book" / f"{chapter}.md").read_text()
    start = text.index(f"```{{solution-start}} {label}\n")
    solution = text[start:text.index("```{solution-end}", start)]
    defined, bases, adapter = IN_A_LAYER.get(label, (names, (), None))
    imports, definitions = cells_defining(solution, defined)
    assert sorted(node.name for node in definitions) == sorted(defined), (
        f"the solution of {label} in book/{chapter}.md no longer defines {defined}")
    if bases:
        base_imports, base_definitions = cells_defining(text[:start], bases,
                                                        every_cell=False)
        assert sorted(node.name for node in base_definitions) == sorted(bases), (
            f"book/{chapter}.md no longer defines {bases} before the solution of {label}")
        imports, definitions = base_imports + imports, base_definitions + definitions
    namespace = {"torch": torch, "nn": nn, "F": F, "math": math}
    exec(compile(ast.Module(body=imports + definitions, type_ignores=[]),
                 f"book/{chapter}.md", "exec"), namespace)
    if adapter is not None:
        namespace = adapter(namespace)
    return {name: namespace[name] for name in names}


@pytest.mark.parametrize("label", SOLVED)
def test_solution_files_and_chapters_agree(label, capsys):
    """The chapter's solution cell and tests/exercise_solutions/<name>.py pass one checker."""
    name, chapter, checker, names = SOLVED[label]
    from_file = vars(importlib.import_module(f"exercise_solutions.{name}"))
    for solution in (from_file, chapter_solution(chapter, label, names)):
        checker(*(solution[defined] for defined in names))
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and printed[0] == printed[1], printed
    assert re.fullmatch(rf"✓ {checker.__name__}: all \d+ checks passed\.", printed[0])


@pytest.mark.parametrize("name", sorted(path.stem for path in SOLUTIONS.glob("*.py")))
def test_solution_files_are_written_from_scratch(name):
    """A checker given its own reference can never fail, so a solution file imports nothing
    from attnbook, and what it defines is its own, derived from nothing in the package."""
    tree = ast.parse((SOLUTIONS / f"{name}.py").read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names]
    imported += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [module for module in imported if module.split(".")[0] == "attnbook"]
    module = importlib.import_module(f"exercise_solutions.{name}")
    defines = [defined for file, _, _, names in SOLVED.values() if file == name
               for defined in names]
    assert defines, f"tests/exercise_solutions/{name}.py solves no exercise of SOLVED"
    for defined in defines:
        solution = getattr(module, defined)
        assert solution.__module__ == module.__name__
        assert not [base for base in getattr(solution, "__mro__", ())
                    if base.__module__.startswith("attnbook")]


def test_nearest_by_cosine_on_the_real_table(capsys):
    check_nearest_by_cosine(nearest_by_cosine, pretrained=True)
    assert "all 8 checks passed" in capsys.readouterr().out


def _key_blocks(keys, group):
    return keys.T.unflatten(-1, (-1, group))  # (C, blocks, group)


def _from_key_blocks(blocks):
    return blocks.flatten(-2).T


def _round_blocks(blocks, bits, steps=None, rounding=torch.round):
    low = blocks.amin(-1, keepdim=True)
    step = (blocks.amax(-1, keepdim=True) - low) / (steps or 2**bits - 1)
    return rounding((blocks - low) / step) * step + low


def keys_per_token(keys, bits, group):
    return _round_blocks(keys, bits), quantize_keys(keys, bits, group)[1]


def keys_in_one_block(keys, bits, group):
    return quantize_keys(keys, bits, keys.shape[0])[0], quantize_keys(keys, bits, group)[1]


def keys_with_two_to_the_bits_steps(keys, bits, group):
    rounded = _round_blocks(_key_blocks(keys, group), bits, steps=2**bits)
    return _from_key_blocks(rounded), quantize_keys(keys, bits, group)[1]


def keys_rounded_down(keys, bits, group):
    rounded = _round_blocks(_key_blocks(keys, group), bits, rounding=torch.floor)
    return _from_key_blocks(rounded), quantize_keys(keys, bits, group)[1]


def keys_divided_by_zero_steps(keys, bits, group):
    rounded = _round_blocks(_key_blocks(keys, group), bits)
    return _from_key_blocks(rounded), quantize_keys(keys, bits, group)[1]


def key_bytes_without_scales(keys, bits, group):
    return quantize_keys(keys, bits, group)[0], keys.numel() * bits // 8


def key_bytes_unpacked(keys, bits, group):
    blocks = keys.shape[1] * (keys.shape[0] // group)
    return quantize_keys(keys, bits, group)[0], keys.numel() + 4 * blocks


def key_bytes_with_wide_scales(keys, bits, group):
    blocks = keys.shape[1] * (keys.shape[0] // group)
    return quantize_keys(keys, bits, group)[0], keys.numel() * bits // 8 + 8 * blocks


def _least(received, positions, allowed):
    candidates = [i for i, p in enumerate(positions.tolist()) if allowed(p)]
    return min(candidates, key=lambda i: float(received[i]))


def evict_ignoring_sinks(received, positions, recent, sinks):
    newest = int(positions[-1])
    return int(positions[_least(received, positions, lambda p: newest - p >= recent)])


def evict_ignoring_recent(received, positions, recent, sinks):
    return int(positions[_least(received, positions, lambda p: p >= sinks)])


def evict_with_a_narrow_window(received, positions, recent, sinks):
    return evict_one(received, positions, recent - 1, sinks)


def evict_the_most_attended(received, positions, recent, sinks):
    return evict_one(-received, positions, recent, sinks)


def evict_returning_the_index(received, positions, recent, sinks):
    newest = int(positions[-1])
    return _least(received, positions, lambda p: p >= sinks and newest - p >= recent)



WRONG: list[tuple[str, Callable, tuple, list[str]]] = [
    ("dot product", check_nearest_by_cosine, (nearest_by_dot_product,),
     ["wrong ids", "expected ids:", "got ids:", "raw dot product"]),
    ("least similar first", check_nearest_by_cosine, (nearest_least_similar_first,),
     ["wrong ids", "most similar first"]),
    ("exclude ignored", check_nearest_by_cosine, (nearest_ignoring_exclude,),
     ["exclude=7", "set its cosine to -inf"]),
    ("query not normalised", check_nearest_by_cosine, (nearest_query_not_normalised,),
     ["wrong values in cosines", "expected", "got", "length of the query"]),
    ("nearest returning the ids only", check_nearest_by_cosine, (nearest_ids_only,),
     ["returned one tensor", "`(ids, cosines)`"]),
    ("nearest excluding with a cosine of 0", check_nearest_by_cosine,
     (nearest_excluded_with_zero,), ["exclude=0", "set its cosine to -inf"]),
    ("raw attention without the softmax", check_batched_raw_attention,
     (raw_attention_without_softmax,),
     ["wrong values in weights", "these are the scores x x^T: apply the softmax"]),
    ("raw attention normalised by the sum", check_batched_raw_attention,
     (raw_attention_normalised_by_the_sum,),
     ["wrong values in weights", "not the scores divided by their sum"]),
    ("softmax always in float32", check_stable_softmax, (softmax_always_in_float32,),
     ["check 8 (float64 scores (5, 7))", "expected[4, 1:7] = [2.136629e-15, 0.5688594,",
      "got[4, 1:7]      = [2.136632e-15, 0.5688593,",
      "only to about float32 precision, and the inputs are float64"]),
    ("softmax by the log-sum-exp", check_stable_softmax, (softmax_by_logsumexp,),
     ["check 5 (one row near +1e4", "does not accept it in float32 at large scores",
      "about 0.001 apart", "s - max is exact"]),
    ("softmax with the maximum without keepdim", check_stable_softmax,
     (softmax_max_without_keepdim,),
     ["raised RuntimeError: The size of tensor a (5) must match", "without keepdim=True"]),
    ("softmax of clamped scores", check_stable_softmax, (softmax_clamped,),
     ["check 4 (huge scores", "if you clamp the scores"]),
    ("softmax over dim 1", check_stable_softmax, (softmax_over_dim_1,),
     ["check 2 (one row of scores (6,))", "raised IndexError", "count dimensions from the end"]),
    ("entropy over the queries", check_row_entropy, (entropy_over_the_queries,),
     ["check 1", "wrong values in the entropy", "sum over the last dimension (the keys)"]),
    ("entropy as a mean", check_row_entropy, (entropy_as_a_mean,),
     ["check 1", "sum over the keys (dim=-1), not the mean"]),
    ("masked softmax renormalised with eps", check_masked_softmax,
     (masked_renormalised_with_eps,),
     ["check 4 (rows with no allowed key (rows 0 and 1), float16)", "8 NaN",
      "in float16, eps = 1e-12 rounds to 0"]),
    ("masked softmax renormalised with a guard", check_masked_softmax,
     (masked_renormalised_with_a_guard,),
     ["check 8 (allowed scores near -2e4 and a forbidden key, float32)",
      "nothing is left to renormalise"]),
    ("multi-head attention with the heads folded into the batch", check_multi_head_attention,
     (mha_weights_folded,), ["got (6, 5, 5), expected (2, 3, 5, 5)", "`unflatten(0, (B, h))`"]),
    ("masked softmax over the queries", check_masked_softmax, (masked_over_the_queries,),
     ["check 1", "yours normalises over the queries"]),
    ("raw attention scaled", check_batched_raw_attention, (raw_attention_scaled,),
     ["wrong values in weights", "max abs difference", "did you divide by sqrt(E)",
      "unscaled"]),
    ("raw attention softmax over queries", check_batched_raw_attention,
     (raw_attention_over_queries,), ["wrong values in weights", "dim=-1"]),
    ("raw attention pair swapped", check_batched_raw_attention, (raw_attention_swapped,),
     ["(2, 5, 5)", "(2, 5, 8)", "return `(output, weights)`"]),
    ("raw attention with x.T", check_batched_raw_attention, (raw_attention_dot_t,),
     ["raw_attention_dot_t(x) raised RuntimeError", "x.transpose(-2, -1)"]),
    ("naive softmax", check_stable_softmax, (naive_softmax,),
     ["huge scores", "NaN", "Subtract each row's maximum"]),
    ("softmax with the global maximum", check_stable_softmax, (softmax_global_max,),
     ["NaN", "each row's own maximum"]),
    ("softmax in float32", check_stable_softmax, (softmax_in_float32,),
     ["wrong dtype", "expected torch.float16", "float16 in, float16 out"]),
    ("softmax in place", check_stable_softmax, (softmax_in_place,),
     ["changed its argument `scores` in place", "before:", "after:", "out of place"]),
    ("softmax over dim 0", check_stable_softmax, (softmax_over_dim_0,),
     ["wrong values in the weights", "dim=-1"]),
    ("entropy with log(0)", check_row_entropy, (entropy_with_log,),
     ["one-hot rows", "NaN", "xlogy"]),
    ("entropy in bits", check_row_entropy, (entropy_in_bits,),
     ["wrong values in the entropy", "natural logarithm"]),
    ("entropy without the minus sign", check_row_entropy, (entropy_without_minus,),
     ["minus sign"]),
    ("entropy with keepdim", check_row_entropy, (entropy_keepdim,),
     ["wrong shape of the entropy: got (2, 3, 5, 1), expected (2, 3, 5)", "keepdim"]),
    ("scaled SimpleAttention", check_simple_attention, (ScaledAttention,),
     ["wrong values in weights", "expected[", "got[", "did you divide by sqrt(n_embd)",
      "This exercise is unscaled"]),
    ("SimpleAttention for batches only", check_simple_attention, (BatchOnlyAttention,),
     ["single sequence", "raised IndexError", "k.transpose(-2, -1)"]),
    ("SimpleAttention mixing x", check_simple_attention, (MixesInputs,),
     ["wrong values in output", "not x"]),
    ("SimpleAttention returning the output only", check_simple_attention, (OutputOnly,),
     ["returned one tensor of shape (2, 5, 8)", "(output, weights)"]),
    ("SimpleAttention without gradient", check_simple_attention, (NoGradient,),
     ["no gradient", "torch.no_grad()"]),
    ("SimpleAttention with other names", check_simple_attention, (OtherNames,),
     ["has no layer named `query`", "W_q: Linear", "self.query = nn.Linear(n_embd, n_embd)"]),
    ("masked softmax with -1e9", check_masked_softmax, (masked_fill_minus_1e9,),
     ["rows with no allowed key", "expected[0, 0:4] = [0, 0, 0, 0]",
      "got[0, 0:4]      = [0.25, 0.25, 0.25, 0.25]", "uniform average"]),
    ("masked softmax with NaN rows", check_masked_softmax, (masked_nan_rows,),
     ["8 NaN", "softmax(-inf, ..., -inf) = NaN"]),
    ("masked softmax with the wrong polarity", check_masked_softmax, (masked_wrong_polarity,),
     ["True means 'may attend'", "nn.MultiheadAttention"]),
    ("masked softmax with -100", check_masked_softmax, (masked_fill_minus_100,),
     ["forbidden weights are not exactly 0", "float('-inf')"]),
    ("masked softmax with a NaN gradient", check_masked_softmax,
     (masked_additive_nan_gradient,), ["the gradient of the scores", "NaN"]),
    ("masked softmax in place", check_masked_softmax, (masked_in_place,),
     ["changed its argument `scores` in place"]),
    ("causal mask aligned top-left", check_causal_mask, (causal_with_tril,),
     ["check 3 (one new token after a cache of 6: L = 1, S = 7)",
      "expected[0] = x x x x x x x", "got[0]      = x . . . . . .",
      "the queries are the LAST 1 of the 7 tokens", "is_causal=True"]),
    ("causal mask without the diagonal", check_causal_mask, (causal_without_the_diagonal,),
     ["check 1 (6 tokens, S left at its default", "first wrong at query 0",
      "expected[0] = x . . . . .", "got[0]      = . . . . . .",
      "a query may see itself", "not `j < i`"]),
    ("causal mask one key too far", check_causal_mask, (causal_one_too_far,),
     ["check 1", "got[0]      = x x . . . .", "not `j <= i + 1`"]),
    ("causal mask with the offset L - S", check_causal_mask, (causal_offset_reversed,),
     ["check 3", "the offset is S - L = 6, not L - S = -6"]),
    ("causal mask of the keys to hide", check_causal_mask, (causal_masking_the_future,),
     ["check 1", "True means 'may attend'", "Negate it"]),
    ("causal mask transposed", check_causal_mask, (causal_upper_triangle,),
     ["check 1", "you built the transpose"]),
    ("causal mask ignoring S", check_causal_mask, (causal_square_only,),
     ["check 3", "wrong shape of the mask causal_square_only(1, 7): got (1, 1), expected "
      "(1, 7)", "one column per key, S of them, the cached ones included"]),
    ("causal mask as floats", check_causal_mask, (causal_as_floats,),
     ["has dtype torch.float32, expected torch.bool", "comparisons such as"]),
    ("causal mask as an additive mask", check_causal_mask, (causal_additive,),
     ["has dtype torch.float32, expected torch.bool", "that is an additive mask"]),
    ("causal mask without a default S", check_causal_mask, (causal_needs_S,),
     ["check 1", "raised TypeError", "`def my_causal_mask(L, S=None)`"]),
    ("split without transpose", check_split_merge_heads,
     (split_without_transpose, merge_without_transpose),
     ["split x (2, 4, 12) into 3 heads", "x[b, t, f] = 1000·b + 100·t + f",
      "expected[0, 0, 3, 0:4] = [300, 301, 302, 303]",
      "did you forget the transpose before the reshape?"]),
    ("merge without transpose", check_split_merge_heads,
     (my_split_heads, merge_without_transpose), ["merge", "transpose back before the reshape"]),
    ("merge with view", check_split_merge_heads, (my_split_heads, merge_with_view),
     ["merge_with_view(heads) raised RuntimeError", ".reshape(...)"]),
    ("multi-head attention scaled by sqrt(d_model)", check_multi_head_attention,
     (mha_scaled_by_d_model,),
     ["check 1 (self-attention, q, k, v (2, 5, 12), 3 heads of width 4)",
      "wrong values in weights of mha_scaled_by_d_model(q, k, v, num_heads)",
      "3 heads of d_head = 4", "not by 1/sqrt(d_model) = 1/sqrt(12)"]),
    ("multi-head attention unscaled", check_multi_head_attention, (mha_unscaled,),
     ["check 1", "wrong values in weights", "the scores are not scaled"]),
    ("multi-head attention scaled by 1/d_head", check_multi_head_attention,
     (mha_scaled_by_d_head,), ["check 1", "not 1/d_head"]),
    ("multi-head attention split without transpose", check_multi_head_attention,
     (mha_split_without_transpose,), ["check 1", "you split into heads without the transpose"]),
    ("multi-head attention with the softmax over the queries", check_multi_head_attention,
     (mha_softmax_over_queries,), ["check 1", "yours runs over the queries"]),
    ("multi-head attention merged without transpose", check_multi_head_attention,
     (mha_merge_without_transpose,),
     ["check 1", "wrong values in output", "merge the heads with the transpose back"]),
    ("multi-head attention with weights averaged over heads", check_multi_head_attention,
     (mha_weights_averaged,), ["got (2, 5, 5), expected (2, 3, 5, 5)", "one map per head"]),
    ("multi-head attention with the pair swapped", check_multi_head_attention,
     (mha_pair_swapped,), ["returned the pair the other way round", "`(output, weights)`"]),
    ("repeat pattern on the query's own token", check_repeat_pattern, (pattern_own_token,),
     ["wrong row sums", "row 0 sums to 1, expected 0", "expected row sums: [0, 0, 0,",
      "got row sums:      [1, 1, 1,", "t + 1 - j a multiple of period"]),
    ("repeat pattern with the nearest copy only", check_repeat_pattern,
     (pattern_nearest_copy_only,),
     ["check 1", "wrong values in the map pattern_nearest_copy_only(16, 8)",
      "expected[15, 0:6] = [0.5, 0, 0, 0, 0, 0]", "got[15, 0:6]      = [0, 0, 0, 0, 0, 0]",
      "every earlier copy holds the answer"]),
    ("repeat pattern with negative indices", check_repeat_pattern, (pattern_negative_index,),
     ["row 0 sums to 1, expected 0", "R[t, -k] silently writes to column L - k"]),
    ("repeat pattern not normalised", check_repeat_pattern, (pattern_not_normalised,),
     ["row 15 sums to 2, expected 1", "divide each row by its number of keys"]),
    ("repeat pattern with NaN rows", check_repeat_pattern, (pattern_nan_rows,),
     ["112 NaN", "expected[0, 0:6] = [0, 0, 0, 0, 0, 0]", "clamp(min=1)"]),
    ("repeat pattern as booleans", check_repeat_pattern, (pattern_boolean,),
     ["has dtype torch.bool, expected a floating dtype", "got:      shape (16, 16), dtype "
      "torch.bool", "the weights are fractions"]),
    ("repeat pattern with future keys", check_repeat_pattern, (pattern_with_future_keys,),
     ["row 0 sums to 1, expected 0", "the causal mask hides the later ones"]),
    ("repeat pattern transposed", check_repeat_pattern, (pattern_transposed,),
     ["wrong row sums", "you built the transpose"]),
    ("repeat pattern dividing by zero", check_repeat_pattern, (pattern_dividing_by_zero,),
     ["pattern_dividing_by_zero(16, 8) raised ZeroDivisionError", "leave it at zero"]),
    ("online normaliser without rescaling", check_online_normalizer,
     (online_without_rescaling,),
     ["check 1 (100 random scores", "wrong value of row_sum", "expected row_sum = 12.54856",
      "got row_sum      = 29.799", "the row: 100 scores", "exp(m_old - m_new)"]),
    ("online normaliser rescaled upwards", check_online_normalizer,
     (online_rescaled_upwards,), ["wrong value of row_sum", "at most 1"]),
    ("online normaliser summing exp(z)", check_online_normalizer, (online_sum_of_exp,),
     ["wrong value of row_sum", "not of exp(z_j)"]),
    ("online normaliser reading the stream twice", check_online_normalizer,
     (online_two_passes,),
     ["check 1 (100 random scores", "online_two_passes(stream) raised _ReadTwice: the stream "
      "was read to its end (100 scores) and then asked for more: it can be read only once",
      "the point of the exercise is one pass in constant memory"]),
    ("online normaliser storing the scores", check_online_normalizer,
     (online_stored_in_a_list,),
     ["check 1", "raised _StoredTheStream: the last 5 scores read were all still held "
      "when score 6 was asked for", "the point of the exercise is one pass",
      "keep no list, array or tensor of the scores"]),
    ("online normaliser storing copies of the scores", check_online_normalizer,
     (online_stored_as_copies,),
     ["check 12 (10,000 scores in constant memory", "MB at its peak on a row of 10,000 "
      "scores: its memory grows with the row", "even of copies"]),
    ("online normaliser starting at -1e30", check_online_normalizer,
     (online_starting_at_minus_1e30,),
     ["check 11 (a row of only -inf", "expected m = -inf", "got m      = -1e+30",
      "not a large negative number such as -1e30"]),
    ("online normaliser without the guard for -inf", check_online_normalizer,
     (online_without_the_guard,),
     ["check 10 (left padding: a row that begins with 3 scores of -inf)",
      "row_sum is nan where a finite number was expected", "exp(-inf + inf) = exp(nan) = nan",
      "step 2.2", "`if z == float('-inf'): continue`"]),
    ("online normaliser starting at 0", check_online_normalizer, (online_starting_at_zero,),
     ["very negative scores", "wrong value of m", "got m      = 0.0", "float('-inf'), not 0"]),
    ("online normaliser pair swapped", check_online_normalizer, (online_swapped,),
     ["wrong value of m", "in that order"]),
    ("online normaliser taking len", check_online_normalizer, (online_with_len,),
     ["online_with_len(stream) raised TypeError: object of type '_OnePassStream' has no len()",
      "`for z in stream:`"]),
    ("online normaliser in float32", check_online_normalizer, (online_in_float32,),
     ["wrong value of m", "a float32 tensor such as `torch.tensor(z)` rounds them"]),
    ("online normaliser returning the log-sum-exp", check_online_normalizer,
     (online_logsumexp_only,),
     ["returned a float, expected the pair (m, row_sum)", "`return m, row_sum`"]),
    ("sinusoidal in the half-split layout", check_sinusoidal, (sinusoidal_half_split,),
     ["check 1 (4 positions, 6 features)", "wrong values in the encoding "
      "sinusoidal_half_split(4, 6)", "expected[3, 0:6] = [0.1411, -0.99, 0.1388, 0.9903, "
      "0.006463, 1]", "got[3, 0:6]      = [0.1411, 0.1388, 0.006463, -0.99, 0.9903, 1]",
      "All sines, then all cosines, is the half-split layout"]),
    ("sinusoidal with sin and cos swapped", check_sinusoidal, (sinusoidal_cos_first,),
     ["wrong values in the encoding", "sine and cosine are swapped"]),
    ("sinusoidal with the exponent i/E", check_sinusoidal, (sinusoidal_exponent_i_over_E,),
     ["wrong values in the encoding", "the exponent is 2i/E", "not i/E"]),
    ("sinusoidal with the exponent of the column", check_sinusoidal,
     (sinusoidal_exponent_of_the_column,), ["share one frequency", "not (2i+1)/E"]),
    ("sinusoidal from position 1", check_sinusoidal, (sinusoidal_from_position_1,),
     ["row 0 is [0, 1, 0, 1, ...]", "positions start at 0", "torch.arange(1, L + 1)"]),
    ("sinusoidal transposed", check_sinusoidal, (sinusoidal_transposed,),
     ["wrong shape of the encoding sinusoidal_transposed(4, 6): got (6, 4), expected (4, 6)",
      "the shape is (L, E)"]),
    ("sinusoidal with a batch dimension", check_sinusoidal,
     (sinusoidal_with_a_batch_dimension,), ["got (1, 4, 6), expected (4, 6)",
                                            "without a batch dimension"]),
    ("sinusoidal as integers", check_sinusoidal, (sinusoidal_as_integers,),
     ["has dtype torch.int64, expected a floating dtype", "float tensors"]),
    ("RoPE in the half-split layout", check_rope_interleaved, (rope_half_split,),
     ["check 1 (x (5, 8), float32, positions 0 .. 4)", "wrong values in the rotated x",
      "positions [0, 1, 2, 3, 4]", "half-split layout", "`x[..., 0::2]` and `x[..., 1::2]`"]),
    ("RoPE returning the half-split order", check_rope_interleaved, (rope_half_split_out,),
     ["wrong values in the rotated x", "go back half-split", "torch.cat"]),
    ("RoPE rotating the wrong way", check_rope_interleaved, (rope_backwards,),
     ["wrong values in the rotated x", "you rotate the wrong way"]),
    ("RoPE ignoring the positions", check_rope_interleaved, (rope_arange,),
     ["check 3 (new tokens after a cache of 100", "positions [100, 101, 102, 103, 104, 105]",
      "use the positions you are given, not `torch.arange(L)`"]),
    ("RoPE off by one", check_rope_interleaved, (rope_from_position_1,),
     ["check 1", "your positions are one too far", "position 0 is not turned at all"]),
    ("RoPE with the frequencies base^(-i/D)", check_rope_interleaved,
     (rope_frequencies_i_over_D,), ["the frequency of pair i is base^(-2i/D)",
                                    "not base^(-i/D)"]),
    ("RoPE in place", check_rope_interleaved, (rope_in_place,),
     ["rope_in_place(x, positions) changed its argument `x` in place", "x[1] before: [",
      "x[1] after:  [", "`x[..., 0::2]` is a view of x"]),
    ("RoPE that is not a rotation", check_rope_interleaved, (rope_not_a_rotation,),
     ["wrong values in the rotated x", "a rotation keeps the length of every pair",
      "one minus sign"]),
    ("RoPE with float32 angles for float64 x", check_rope_interleaved, (rope_float32_angles,),
     ["check 8 (float64 x", "got:      shape (2, 5, 16), dtype torch.float64",
      "(allowed: 1e-10 + 1e-08·|expected|)", "right to about float32 precision",
      "torch.arange(0, D, 2, dtype=x.dtype)"]),
    ("RoPE returning float32 for float64 x", check_rope_interleaved, (rope_in_float32,),
     ["check 8", "wrong dtype of the rotated x: got torch.float32, expected torch.float64",
      "float16 in, float16 out"]),
    ("RoPE for one-dimensional positions only", check_rope_interleaved,
     (rope_one_dimensional_positions,),
     ["check 5 (one row of positions per sequence", "raised RuntimeError",
      "`positions[..., None] * theta`"]),
    ("RoPE ignoring the base", check_rope_interleaved, (rope_ignoring_base,),
     ["check 6 (another base, base=500.0", "use the `base` you are given"]),
    ("RoPE with complex numbers but no pairs", check_rope_interleaved,
     (rope_complex_without_pairs,),
     ["raised RuntimeError: Tensor must have a last dimension of size 2",
      "`x.unflatten(-1, (-1, 2))`"]),
    ("ALiBi with 2^(-8h/n) for every n", check_alibi_slopes, (alibi_naive,),
     ["check 5 (12 heads, not a power of two)", "wrong values in the slopes alibi_naive(12)",
      "expected[5:11] = [0.01562, 0.007812, 0.003906, 0.7071, 0.3536, 0.1768]",
      "n = 12 is not a power of two: the 8 slopes of 8 heads, then slopes(16)[0::2][:4]",
      "the paper does not use 2^(-8h/n)"]),
    ("ALiBi with heads counted from 0", check_alibi_slopes, (alibi_heads_from_0,),
     ["check 1 (8 heads", "got[0:6]      = [1, 0.5, 0.25,", "heads count from 1"]),
    ("ALiBi with negative slopes", check_alibi_slopes, (alibi_negative,),
     ["the slopes are positive", "the minus sign belongs in the bias"]),
    ("ALiBi smallest slope first", check_alibi_slopes, (alibi_ascending,),
     ["check 1", "the order is wrong", "largest first"]),
    ("ALiBi slopes sorted", check_alibi_slopes, (alibi_sorted,),
     ["check 5 (12 heads", "do not sort"]),
    ("ALiBi extra slopes first", check_alibi_slopes, (alibi_extras_first,),
     ["check 5 (12 heads", "the extra slopes come after"]),
    ("ALiBi slopes as a list", check_alibi_slopes, (alibi_as_a_list,),
     ["are a list of 8 numbers, expected a torch.Tensor of shape (8,)",
      "`torch.tensor(slopes)`"]),
    ("ALiBi slopes shaped for broadcasting", check_alibi_slopes, (alibi_for_broadcasting,),
     ["got (8, 1, 1), expected (8,)", "one slope per head"]),
    ("ALiBi slopes recursing forever", check_alibi_slopes, (alibi_endless_recursion,),
     ["raised RecursionError", "the recursion never ends"]),
    ("repeat_kv tiling the heads", check_repeat_kv, (repeat_kv_tiled,),
     ["check 1 (kv (3, 4, 2) whose head j holds the number j",
      "query head -> key/value head: expected [0, 0, 1, 1, 2, 2], got [0, 1, 2, 0, 1, 2]",
      "you tiled the heads (`.repeat`", "`kv.repeat_interleave(g, dim=-3)`"]),
    ("repeat_kv concatenating copies", check_repeat_kv, (repeat_kv_concatenated,),
     ["got [0, 1, 2, 0, 1, 2]", "you tiled the heads"]),
    ("repeat_kv along the sequence", check_repeat_kv, (repeat_kv_along_the_sequence,),
     ["got (3, 8, 2), expected (6, 4, 2)", "you repeated along the sequence, dim -2"]),
    ("repeat_kv num_heads times", check_repeat_kv, (repeat_kv_num_heads_times,),
     ["got (18, 4, 2), expected (6, 4, 2)", "g = num_heads // h_kv = 2 times, not num_heads"]),
    ("repeat_kv for a batch only", check_repeat_kv, (repeat_kv_with_a_batch_only,),
     ["check 1", "got (3, 4, 2), expected (6, 4, 2)", "Count dimensions from the end"]),
    ("repeat_kv with no check that h_kv divides num_heads", check_repeat_kv,
     (repeat_kv_unchecked,),
     ["check 7 (3 key/value heads cannot serve 8 query heads: a ValueError)",
      "returned (1, 6, 2, 4), expected a ValueError", "3 does not divide 8",
      "check `num_heads % h_kv` first and raise a ValueError that names num_heads"]),
    ("repeat_kv raising RuntimeError where h_kv does not divide", check_repeat_kv,
     (repeat_kv_reshape_unchecked,),
     ["check 7", "raised RuntimeError: shape '[1, 8, 2, 4]' is invalid",
      "expected: a ValueError", "raise a ValueError that names num_heads"]),
    ("cache bytes of the keys only", check_cache_bytes_per_token, (bytes_keys_only,),
     ["check 1 (SmolLM2-135M in float32", "expected bytes_keys_only(smollm2, 4) = 46080",
      "got bytes_keys_only(smollm2, 4)      = 23040", "count both, the factor 2"]),
    ("cache bytes of the query heads", check_cache_bytes_per_token, (bytes_query_heads,),
     ["= 138240", "the num_kv_heads = 3 key/value heads, not the num_heads = 9 query heads"]),
    ("cache bytes with d_model", check_cache_bytes_per_token, (bytes_d_model,),
     ["= 414720", "d_head = d_model / num_heads = 64 numbers per token, not d_model = 576"]),
    ("cache bytes as if there were no grouping", check_cache_bytes_per_token,
     (bytes_as_without_grouping,), ["= 138240", "not the num_heads = 9 query heads"]),
    ("cache bytes of one layer", check_cache_bytes_per_token, (bytes_one_layer,),
     ["= 1536", "multiply by num_layers = 30"]),
    ("cache bytes counting numbers", check_cache_bytes_per_token, (bytes_counting_numbers,),
     ["= 11520", "that counts numbers"]),
    ("cache bytes in bits", check_cache_bytes_per_token, (bytes_in_bits,),
     ["= 368640", "a byte is 8 bits"]),
    ("cache bytes always in float32", check_cache_bytes_per_token, (bytes_always_float32,),
     ["check 2 (SmolLM2-135M in bfloat16", "expected bytes_always_float32(smollm2, 2) = 23040",
      "use the bytes_per_number you are given"]),
    ("cache bytes as a string", check_cache_bytes_per_token, (bytes_as_a_string,),
     ["is a str, expected one number", "return one number"]),
    ("cached step at position 0", check_cached_rope_step, (step_at_position_0,),
     ["check 2 (after 5 tokens in a full cache", "the key cached by step_at_position_0",
      "at positions [0, 1, 2, 3, 4], and cache.next_position was 5",
      "you rotated the new token at position 0", "rotate at cache.next_position"]),
    ("cached step at len(cache)", check_cached_rope_step, (step_at_len_cache,),
     ["check 3 (a window of 4 with 1 sink after 9 tokens: len(cache) is 5, next_position 9)",
      "at positions [0, 5, 6, 7, 8], and cache.next_position was 9",
      "you rotated at len(cache) = 5", "its window has dropped 4",
      "cache.next_position = 9"]),
    ("cached step turning the query after appending", check_cached_rope_step,
     (step_query_after_appending,),
     ["check 2", "wrong values in the output", "one position too far",
      "read cache.next_position = 5 before appending"]),
    ("cached step counting positions from 1", check_cached_rope_step,
     (step_counting_from_1,),
     ["check 1 (the first token", "one position short", "positions count from 0",
      "not -1"]),
    ("cached step without turning the query", check_cached_rope_step,
     (step_query_not_rotated,),
     ["check 2", "wrong values in the output", "at position 0 (or not at all"]),
    ("cached step caching the key unturned", check_cached_rope_step, (step_key_not_rotated,),
     ["check 2", "the key cached by", "at position 0 (or not at all"]),
    ("cached step turning the values", check_cached_rope_step, (step_values_rotated,),
     ["check 2", "the value cached by", "values are not rotated"]),
    ("cached step in the interleaved layout", check_cached_rope_step, (step_interleaved,),
     ["check 2", "interleaved layout", "half-split"]),
    ("cached step ignoring the base", check_cached_rope_step, (step_ignoring_the_base,),
     ["check 4 (SmolLM2's heads and base", "use the base you are given"]),
    ("cached step that does not append", check_cached_rope_step, (step_without_appending,),
     ["check 1 (the first token", "cache.next_position is 0, expected 1",
      "`cache.append(k, v_new)`"]),
    ("cached step caching expanded heads", check_cached_rope_step,
     (step_caching_expanded_heads,),
     ["check 1", "got (1, 4, 1, 8), expected (1, 2, 1, 8)",
      "cache the h_kv key/value heads as they come"]),
    ("cached step with an int position", check_cached_rope_step,
     (step_with_an_int_position,),
     ["raised TypeError: positions must be a torch.Tensor",
      "`torch.tensor([cache.next_position])`"]),
    ("cached step turning the query in place", check_cached_rope_step,
     (step_rotating_in_place,),
     ["changed its argument `q_new` in place", "work out of place"]),
    ("window without the causal part", check_window_mask, (window_not_causal,),
     ["check 1 (8 tokens, a window of 3, no sinks)", "first wrong at query 0",
      "expected[0] = x . . . . . . .", "got[0]      = x x x x x x x x",
      "the causal part is missing", "Add `j <= i`"]),
    ("window looking both ways", check_window_mask, (window_both_ways,),
     ["check 1", "got[0]      = x x x . . . . .", "yours looks both ways"]),
    ("window whose sinks see the future", check_window_mask, (window_sinks_see_the_future,),
     ["check 2 (8 tokens, a window of 3 and 2 sinks)", "got[0]      = x x . . . . . .",
      "query 0 cannot see sink 1 before it exists"]),
    ("window one key too wide", check_window_mask, (window_one_too_wide,),
     ["check 1", "first wrong at query 3", "expected[3] = . x x x . . . .",
      "your window holds recent + 1 = 4 keys", "not `<=`"]),
    ("window one key too narrow", check_window_mask, (window_one_too_narrow,),
     ["check 1", "first wrong at query 2", "your window holds recent - 1 = 2 keys"]),
    ("window without sinks", check_window_mask, (window_without_sinks,),
     ["check 2", "expected[3] = x x x x . . . .", "got[3]      = . x x x . . . .",
      "the sinks are missing: the first 2 keys"]),
    ("window of the wrong polarity", check_window_mask, (window_reversed,),
     ["True means 'may attend'", "nn.MultiheadAttention"]),
    ("window transposed", check_window_mask, (window_transposed,),
     ["you built the transpose"]),
    ("window as floats", check_window_mask, (window_as_floats,),
     ["has dtype torch.float32, expected torch.bool", "combine them with & and |"]),
    ("window as an additive mask", check_window_mask, (window_additive,),
     ["has dtype torch.float32, expected torch.bool", "that is an additive mask"]),
    ("window with a batch dimension", check_window_mask, (window_with_a_batch_dimension,),
     ["wrong shape of the mask window_with_a_batch_dimension(8, 3, 0): got (1, 8, 8)",
      "(L, L)"]),
    ("prefix matching on the earlier occurrence", check_prefix_matching_score,
     (prefix_on_the_earlier_occurrence,),
     ["check 1 (random causal weights (L, L) = (11, 11), T = 6 (L = 2T - 1))",
      "wrong values in the score prefix_on_the_earlier_occurrence(weights, 6)",
      "queries 6 .. 10 should read keys 1 .. 5 (key t - T + 1)",
      "you took key t - T, the earlier occurrence", "the token AFTER it"]),
    ("prefix matching over all queries", check_prefix_matching_score,
     (prefix_over_all_queries,),
     ["check 1", "the L - T = 5 queries of the second copy only", "not over all L = 11",
      "a negative index wraps around"]),
    ("prefix matching divided by L", check_prefix_matching_score, (prefix_divided_by_L,),
     ["check 1", "not over all L = 11"]),
    ("prefix matching from query T - 1", check_prefix_matching_score,
     (prefix_from_query_T_minus_1,),
     ["check 1", "off by one in the queries", "query T - 1 = 5 is the last token of the "
      "first copy"]),
    ("prefix matching from query T + 1", check_prefix_matching_score,
     (prefix_from_query_T_plus_1,), ["check 1", "off by one in the queries", "not T + 1"]),
    ("prefix matching without the last query", check_prefix_matching_score,
     (prefix_without_the_last_query,),
     ["check 1", "off by one in the queries: the last one is L - 1 = 10, included"]),
    ("prefix matching one key too far", check_prefix_matching_score,
     (prefix_one_key_too_far,), ["check 1", "key t - T + 2, one too far"]),
    ("prefix matching on the transpose", check_prefix_matching_score, (prefix_transposed,),
     ["check 1", "expected = 0.09741", "got      = 0", "rows are queries and columns keys"]),
    ("prefix matching summed", check_prefix_matching_score, (prefix_summed,),
     ["check 1", "the mean, not the sum"]),
    ("prefix matching with one mean for every map", check_prefix_matching_score,
     (prefix_one_mean_for_all,),
     ["check 6 (one map per head: weights (4, 14, 14), T = 7, score (4,))",
      "got (), expected (4,)", "one score per map"]),
    ("prefix matching with diagonal() on the leading dimensions",
     check_prefix_matching_score, (prefix_default_diagonal,),
     ["check 6", "got (7,), expected (4,)", "`.diagonal(dim1=-2, dim2=-1)`"]),
    ("prefix matching as a Python float", check_prefix_matching_score, (prefix_as_a_float,),
     ["check 1", "prefix_as_a_float(weights, 6) returned a float, expected a tensor of "
      "shape ()", "`float(...)` or `.item()` keeps one"]),
    ("prefix matching in place", check_prefix_matching_score, (prefix_in_place,),
     ["changed its argument `weights` in place", "weights before:", "weights after:",
      "slices and `diagonal` are views of the weights"]),
    ("prefix matching in float64", check_prefix_matching_score, (prefix_in_float64,),
     ["wrong dtype of the score", "got torch.float64, expected torch.float32"]),
    ("mean ablation at head * num_heads", check_mean_ablation,
     (ablate_at_head_times_num_heads,),
     ["check 1 (labelled merged (2, 3, 6), 3 heads of 2, head 1)",
      "wrong values in the result of ablate_at_head_times_num_heads(merged, 1, 3)",
      "expected[0, 0, 0:6] = [0, 1, 62, 63, 4, 5]", "got[0, 0, 0:6]      = [0, 1, 2, 63, 64, 5]",
      "head 1 is features 2 .. 3", "the mean over b and t of feature f is 55 + f",
      "head 1 starts at feature head·d_head = 1·2 = 2, not head·num_heads = 3"]),
    ("mean ablation over the features", check_mean_ablation, (ablate_over_the_features,),
     ["check 1", "got[0, 0, 0:6]      = [0, 1, 2.5, 2.5, 4, 5]",
      "yours averages over the features"]),
    ("mean ablation per sequence", check_mean_ablation, (ablate_per_sequence,),
     ["check 1", "one mean per sequence (over the positions only)"]),
    ("mean ablation over the batch only", check_mean_ablation, (ablate_over_the_batch,),
     ["check 1", "yours averages over the batch only"]),
    ("zero ablation", check_mean_ablation, (ablate_with_zeros,),
     ["check 1", "got[0, 0, 0:6]      = [0, 1, 0, 0, 4, 5]", "that is zero ablation"]),
    ("mean ablation of every head", check_mean_ablation, (ablate_every_head,),
     ["check 1", "only head 1's features change"]),
    ("mean ablation returning the head only", check_mean_ablation,
     (ablate_returning_the_head_only,),
     ["check 1", "got (2, 3, 2), expected (2, 3, 6)", "return the whole tensor, shape "
      "(2, 3, 6), not head 1's part alone"]),
    ("mean ablation in place", check_mean_ablation, (ablate_in_place,),
     ["changed its argument `merged` in place", "merged before: [0, 1, 2, 3, 4, 5, ...]",
      "merged after:  [0, 1, 62, 63, 4, 5, ...]", "`out = merged.clone()` first"]),
    ("copying score as trace over its absolute value", check_copying_score,
     (copying_trace_over_its_size,),
     ["check 3 (a random head, separate embed and unembed (10, 8), w_v (2, 8))",
      "wrong value of copying_trace_over_its_size(w_v, w_o, embed, unembed)",
      "expected copying_trace_over_its_size(w_v, w_o, embed, unembed) = 0.48907",
      "got copying_trace_over_its_size(w_v, w_o, embed, unembed)      = 1.0",
      "w_v (2, 8), w_o (8, 2), embed (10, 8), unembed (10, 8), torch.float32",
      "trace/|trace|", "is only its sign"]),
    ("copying score over the diagonal", check_copying_score, (copying_over_the_diagonal,),
     ["check 3", "not of the diagonal's absolute values"]),
    ("copying score with singular values", check_copying_score,
     (copying_with_singular_values,),
     ["check 3", "wrong value", "the singular values are not the moduli of the eigenvalues"]),
    ("copying score over absolute real parts", check_copying_score,
     (copying_over_absolute_real_parts,),
     ["check 3", "got copying_over_absolute_real_parts(w_v, w_o, embed, unembed)      = 1.0",
      "sum(Re λ) / sum(|Re λ|)", "which count the imaginary parts too"]),
    ("copying score as a mean over the eigenvalues", check_copying_score,
     (copying_unweighted_mean,),
     ["check 5 (a random head, separate embed and unembed (50, 16), w_v (4, 16))",
      "weight each eigenvalue by its size"]),
    ("copying score with eigvalsh", check_copying_score, (copying_with_eigvalsh,),
     ["check 3", "wrong value", "eigvalsh assumes a symmetric matrix"]),
    ("copying score without the embeddings", check_copying_score,
     (copying_without_the_embeddings,),
     ["check 3", "wrong value", "the embeddings are part of the path"]),
    ("copying score with embed and unembed swapped", check_copying_score,
     (copying_with_embed_and_unembed_swapped,), ["check 3", "yours swaps embed and unembed"]),
    ("copying score dividing by the trace where it is 0", check_copying_score,
     (copying_nan_where_the_trace_is_zero,),
     ["check 4 (a rotation: token 0 -> token 1 -> minus token 0",
      "is nan where a finite number was expected",
      "expected copying_nan_where_the_trace_is_zero(w_v, w_o, embed, unembed) = 0.0",
      "a rotation has eigenvalues ±i", "never by a trace"]),
    ("copying score as a complex tensor", check_copying_score,
     (copying_as_a_complex_tensor,),
     ["check 1 (a pure copier", "returned a complex number, expected a real one",
      "`eigenvalues.real.sum()`"]),
    ("copying score as a Python complex", check_copying_score,
     (copying_as_a_python_complex,), ["check 1", "returned a complex number"]),
    ("copying score for every eigenvalue", check_copying_score, (copying_per_eigenvalue,),
     ["check 1", "is a tensor of shape (3,), expected one number", "return one number"]),
    ("copying score in float32 on float64 inputs", check_copying_score,
     (copying_in_float32,),
     ["check 8 (float64 inputs", "(allowed: 1e-10 + 1e-08·|expected|)",
      "right to about float32 precision only"]),
    ("copying score normalising w_v in place", check_copying_score,
     (copying_normalising_in_place,),
     ["check 1", "changed its argument `w_v` in place", "the weights belong to the model"]),
    ("padded mask of the keys to hide", check_padded_causal_mask, (padded_mask_of_the_pads,),
     ["check 1 (the chapter's two sequences: lengths [6, 3], L = 6)",
      "wrong mask padded_mask_of_the_pads(lengths, 6): first wrong at query 0 of mask[0, 0]",
      "lengths = [6, 3], L = 6", "expected[0, 0, 0] = x . . . . .",
      "got[0, 0, 0]      = . x x x x x", "True means 'may attend'", "Negate it"]),
    ("padded mask without the diagonal", check_padded_causal_mask,
     (padded_mask_without_the_diagonal,),
     ["check 1", "got[0, 0, 0]      = . . . . . .", "a query may see itself", "not `j < i`"]),
    ("padded mask on the queries", check_padded_causal_mask, (padded_mask_on_the_queries,),
     ["check 1", "first wrong at query 3 of mask[1, 0]", "expected[1, 0, 3] = x x x . . .",
      "got[1, 0, 3]      = . . . . . .", "the padding is on the keys",
      "Yours hides the rows of the padded queries instead"]),
    ("padded mask keeping one pad", check_padded_causal_mask, (padded_mask_keeping_one_pad,),
     ["check 1", "got[1, 0, 3]      = x x x x . .", "not j <= lengths[b]: yours keeps the "
      "first pad"]),
    ("padded mask without the padding", check_padded_causal_mask,
     (padded_mask_without_padding,),
     ["check 1", "got[1, 0, 3]      = x x x x . .", "the padding is missing"]),
    ("padded mask without the head dimension", check_padded_causal_mask,
     (padded_mask_without_heads,),
     ["check 1", "wrong shape of the mask padded_mask_without_heads(lengths, 6): got (2, 6, "
      "6), expected (2, 1, 6, 6)", "add it with `mask[:, None]`"]),
    ("padded mask as floats", check_padded_causal_mask, (padded_mask_as_floats,),
     ["check 1", "has dtype torch.float32, expected torch.bool", "combine them with & and |"]),
    ("padded mask as long as the longest sequence", check_padded_causal_mask,
     (padded_mask_of_the_longest,),
     ["check 5 (padded beyond the longest: lengths [3, 2], L = 7)",
      "got (2, 1, 3, 3), expected (2, 1, 7, 7)", "not from `lengths.max()`"]),
    ("peeks comparing position t too", check_peeks_ahead, (peeks_including_t,),
     ["check 1 (the package's causal MultiHeadAttention(16, 4), x (2, 6, 16): nothing leaks, "
      "None)", "peeks_including_t(layer, x) returned 1, expected None",
      "this layer is causal, yet yours says it peeks", "not `[:, :t + 1]`"]),
    ("peeks with allclose", check_peeks_ahead, (peeks_with_allclose,),
     ["check 8 (a small leak: output 2 reads token 4 (of relative size 1e-06))",
      "returned None, expected 4", "yours found no leak, but there is one",
      "compare exactly, with `torch.equal`"]),
    ("peeks returning t - 1", check_peeks_ahead, (peeks_returning_t_minus_1,),
     ["check 2 (the same layer fed x.roll(-1, dims=1)", "returned 0, expected 1",
      "off by one: return t, the position of the token you changed (1), not t - 1"]),
    ("peeks setting the token to 0", check_peeks_ahead, (peeks_with_zeros,),
     ["check 9 (padded input x (2, 8, 16) whose tokens 5, 6 and 7 are zero vectors",
      "returned None, expected 6", "leaves token 6 as it was",
      "Replace the token by one that surely differs"]),
    ("peeks copying the token before", check_peeks_ahead, (peeks_with_the_token_before,),
     ["check 9", "a copy of the token before it", "Replace the token by one that surely "
      "differs"]),
    ("peeks at sequence 0 only", check_peeks_ahead, (peeks_at_sequence_0,),
     ["check 7 (a leak in one sequence: output 0 reads token 3 in sequence 1 only (added); "
      "sequence 0 is causal)", "returned None, expected 3",
      "not those of sequence 0 alone (`[0, :t]`)"]),
    ("peeks changing x in place", check_peeks_ahead, (peeks_in_place,),
     ["check 1", "peeks_in_place(layer, x) changed its argument `x` in place",
      "copy x before you change a token: `changed = x.clone()`"]),
    ("peeks stopping before the last token", check_peeks_ahead, (peeks_until_L_minus_2,),
     ["check 6 (a leak from the last token: output 0 reads token 5 (added))",
      "returned None, expected 5", "`for t in range(1, L)`, whose last t is L - 1"]),
    ("peeks from the end", check_peeks_ahead, (peeks_from_the_end,),
     ["check 2", "returned 5, expected 1", "return the FIRST such position"]),
    ("keys rounded per token", check_quantize_keys, (keys_per_token,),
     ["check 1", "wrong values in rounded", "that is a scale per token"]),
    ("keys in one block of all tokens", check_quantize_keys, (keys_in_one_block,),
     ["check 1", "wrong values in rounded", "one block of all 8 tokens"]),
    ("keys with 2**bits steps", check_quantize_keys, (keys_with_two_to_the_bits_steps,),
     ["check 1", "2**bits - 1 = 3 steps"]),
    ("keys rounded down", check_quantize_keys, (keys_rounded_down,),
     ["wrong values in rounded", "not down"]),
    ("keys divided by a zero step", check_quantize_keys, (keys_divided_by_zero_steps,),
     ["check 4 (a block whose numbers are all equal (step 0))", "4 NaN",
      "give it code 0"]),
    ("key bytes without the scales", check_quantize_keys, (key_bytes_without_scales,),
     ["wrong value of nbytes", "expected nbytes", "= 20", "add the minimum and the step"]),
    ("key bytes unpacked", check_quantize_keys, (key_bytes_unpacked,),
     ["wrong value of nbytes", "pack the codes"]),
    ("key bytes with 32-bit scales", check_quantize_keys, (key_bytes_with_wide_scales,),
     ["wrong value of nbytes", "2 bytes each, not 4"]),
    ("eviction of a sink", check_evict_one, (evict_ignoring_sinks,),
     ["check 2 (the sink has received the least)", "evicted 0, expected position 2",
      "position 0 is a sink"]),
    ("eviction of the newest", check_evict_one, (evict_ignoring_recent,),
     ["check 1", "evicted 5, expected position 1", "that is the newest token"]),
    ("eviction of a recent token", check_evict_one, (evict_with_a_narrow_window,),
     ["check 3", "evicted 4, expected position 2", "one of the recent=2 newest"]),
    ("eviction of the most attended", check_evict_one, (evict_the_most_attended,),
     ["check 1", "evicted 2, expected position 1", "evict the least attended"]),
    ("eviction returning an index", check_evict_one, (evict_returning_the_index,),
     ["check 4", "evicted 3, expected position 6", "positions[3] = 6"]),
    ("dtw path reversed", check_dtw, (dtw_reversed,),
     ["check 1", "runs from (1, 2) back to (0, 0)", "reverse it"]),
    ("dtw greedy", check_dtw, (dtw_greedy,),
     ["but a path costing", "total[i, j] = cost[i, j] + min("]),
    ("dtw without the step down", check_dtw, (dtw_without_the_step_down,),
     ["check 2", "but a path costing 3.898 exists", "all three predecessors"]),
    ("dtw starting anywhere", check_dtw, (dtw_starting_anywhere,),
     ["the path starts at", "pins both ends"]),
    ("dtw one cell per row", check_dtw, (dtw_one_cell_per_row,),
     ["the path skips a cell", "one row down, one column right, or both"]),
    ("dtw most expensive", check_dtw, (dtw_most_expensive,),
     ["check 1", "but a path costing 0 exists", "total[i, j] = cost[i, j] + min("]),
    ("cross steps calling the layer", check_cross_attention_steps,
     (cross_steps_calling_the_layer,),
     ["check 1", "cross.k_proj projected the sound 3 times for 3 steps", "once, before the"]),
    ("cross steps from the text", check_cross_attention_steps, (cross_steps_from_the_text,),
     ["cross.k_proj was given the text, shape (1, 1, 8)", "come from the sound"]),
    ("cross steps all at once", check_cross_attention_steps, (cross_steps_all_at_once,),
     ["cross.q_proj ran on [3] text positions", "one new text position a step"]),
    ("cross steps is_causal", check_cross_attention_steps, (cross_steps_is_causal,),
     ["check 1", "wrong values in the output", "aligns its mask top-left"]),
    ("cross steps unscaled", check_cross_attention_steps, (cross_steps_unscaled,),
     ["check 1", "wrong values in the output", "the scores are not scaled"]),
    ("word rows one late", check_word_rows, (word_rows_one_late,),
     ["check 1", "expected: [[1], [2], [3]]", "got:      [[2], [3], [4]]", "one row late"]),
    ("word rows restarting", check_word_rows, (word_rows_restarting,),
     ["check 1", "got:      [[1], [1], [1]]", "keep a running position"]),
    ("word rows without the prompt", check_word_rows, (word_rows_without_the_prompt,),
     ["check 1", "got:      [[0], [1], [2]]", "count the prompt"]),
    ("word rows flat", check_word_rows, (word_rows_flat,),
     ["check 1", "got:      [1, 2, 3]", "one list of rows a word"]),
]


@pytest.mark.parametrize(("checker", "args", "parts"), [w[1:] for w in WRONG],
                         ids=[w[0] for w in WRONG])
def test_wrong_answers_fail_with_expected_got_and_hint(checker, args, parts, capsys):
    with pytest.raises(ExerciseCheckError) as raised:
        checker(*args)
    message = str(raised.value)
    assert message.startswith(f"{checker.__name__}: check "), message
    assert "\n  hint: " in message, message
    for part in parts:
        assert part in message, f"{part!r} is missing from:\n{message}"
    assert "✓" not in capsys.readouterr().out
    assert isinstance(raised.value, AssertionError)  # pytest and plain asserts treat it alike


def test_mismatch_message_shows_shapes_values_and_difference():
    with pytest.raises(ExerciseCheckError) as raised:
        check_batched_raw_attention(raw_attention_scaled)
    lines = str(raised.value).splitlines()
    assert lines[0] == ("check_batched_raw_attention: check 1 (x of shape (2, 5, 8), float32) "
                        "failed: wrong values in weights")
    assert lines[1] == "  expected: shape (2, 5, 5), dtype torch.float32"
    assert lines[2] == "  got:      shape (2, 5, 5), dtype torch.float32"
    assert re.match(r"  max abs difference [\d.]+ at index \(\d, \d, \d\)", lines[3])
    assert re.match(r"  expected\[\d, \d, 0:5\] = \[[-\d., e]+\]", lines[4])
    assert re.match(r"  got\[\d, \d, 0:5\]      = \[[-\d., e]+\]", lines[5])
    assert lines[-1].startswith("  hint: did you divide by sqrt(E)?")


READER_CALLS = [
    (check_nearest_by_cosine, 1), (check_batched_raw_attention, 1),
    (check_stable_softmax, 1), (check_row_entropy, 1), (check_masked_softmax, 2),
    (check_causal_mask, 2), (check_multi_head_attention, 4),
    (check_repeat_pattern, 2), (check_online_normalizer, 1), (check_sinusoidal, 2),
    (check_rope_interleaved, 2), (check_alibi_slopes, 1), (check_repeat_kv, 2),
    (check_cache_bytes_per_token, 2), (check_cached_rope_step, 5), (check_window_mask, 3),
    (check_prefix_matching_score, 2), (check_mean_ablation, 3), (check_copying_score, 4),
    (check_padded_causal_mask, 2), (check_peeks_ahead, 2), (check_quantize_keys, 3),
    (check_evict_one, 4), (check_dtw, 1), (check_cross_attention_steps, 1),
    (check_word_rows, 1),
]


@pytest.mark.parametrize(("checker", "arity"), READER_CALLS,
                         ids=[c.__name__ for c, _ in READER_CALLS])
def test_the_readers_exception_is_reported_as_theirs(checker, arity):
    error = ValueError("my own bug")

    def broken(*args):
        raise error

    with pytest.raises(ExerciseCheckError) as raised:
        checker(broken)
    message = str(raised.value)
    assert "broken(" in message and "raised ValueError: my own bug" in message
    assert raised.value.__cause__ is error


def test_an_untouched_starter_is_a_task_to_do_not_a_mistake():
    def my_softmax(scores):
        raise NotImplementedError("your code here")

    with pytest.raises(NotWrittenYet) as raised:
        check_stable_softmax(my_softmax)
    message = str(raised.value)
    assert message.startswith("check_stable_softmax: my_softmax(scores) is not written yet "
                              "(it raises NotImplementedError: your code here)\n")
    assert "check 1" not in message  # no failed check: nothing was checked yet
    assert "to do: replace the `raise NotImplementedError(...)` line" in message
    assert isinstance(raised.value, ExerciseCheckError)  # pytest and graders still fail it
    assert isinstance(raised.value.__cause__, NotImplementedError)


def test_another_exception_from_the_reader_is_not_a_task_to_do():
    def my_softmax(scores):
        raise ValueError("my own bug")

    with pytest.raises(ExerciseCheckError) as raised:
        check_stable_softmax(my_softmax)
    assert not isinstance(raised.value, NotWrittenYet)
    assert "check_stable_softmax: check 1 (" in str(raised.value)


def test_the_message_names_the_readers_line_but_no_file():
    def my_softmax(scores):
        row = scores[99]  # out of range for every check's input
        return row

    with pytest.raises(ExerciseCheckError) as raised:
        check_stable_softmax(my_softmax)
    message = str(raised.value)
    assert re.search(r"\n  at my_softmax, line \d+: row = scores\[99\]", message)
    assert ".py" not in message  # no file: a notebook cell's is a meaningless temporary path


def test_in_ipython_the_error_shows_as_its_message_alone():
    """The book's failing-stub cells show the checker's message, not this module's frames."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shown = []
    shell._showtraceback = lambda kind, value, lines: shown.append(lines)
    try:
        harness.show_briefly_in_ipython()
        assert shell.custom_exceptions == (ExerciseCheckError,)
        result = shell.run_cell(
            "from attnbook.checks import check_stable_softmax\n"
            "def my_softmax(scores):\n"
            "    raise NotImplementedError('your code here')\n"
            "check_stable_softmax(my_softmax)\n")
    finally:
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()
    assert isinstance(result.error_in_exec, ExerciseCheckError)  # still an error: -W fails
    assert len(shown) == 1
    lines = shown[0]
    assert lines[0].startswith("To do: check_stable_softmax: my_softmax(scores) is not "
                               "written yet")
    assert not any("Traceback" in line or ".py" in line for line in lines)


def test_a_class_that_raises_in_init_or_forward_is_reported_as_theirs():
    class Unfinished(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            raise NotImplementedError("create self.query, self.key and self.value")

    class NoForward(MySimpleAttention):
        def forward(self, x):
            raise NotImplementedError("your code here")

    with pytest.raises(ExerciseCheckError, match=r"Unfinished\(8\) is not written yet \(it "
                                                 r"raises NotImplementedError: create self.query"):
        check_simple_attention(Unfinished)
    with pytest.raises(ExerciseCheckError, match=r"NoForward.forward\(x\) is not written "
                                                 r"yet \(it raises NotImplementedError: your "
                                                 r"code here"):
        check_simple_attention(NoForward)


@pytest.mark.parametrize("layer_class", [MySimpleAttention, ScaledAttention, NoGradient])
def test_the_readers_module_is_left_unchanged(layer_class):
    torch.manual_seed(1)
    layer = layer_class(6).train()
    before = {key: value.clone() for key, value in layer.state_dict().items()}
    rng = torch.random.get_rng_state()
    try:
        check_simple_attention(layer)
    except ExerciseCheckError:
        pass  # the wrong ones fail; either way their module must be as it was
    assert layer.state_dict().keys() == before.keys()
    for key, value in layer.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all(parameter.grad is None for parameter in layer.parameters())
    assert layer.training
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_building_the_readers_class_leaves_the_global_random_state_alone():
    rng = torch.random.get_rng_state()
    check_simple_attention(MySimpleAttention)
    check_split_merge_heads(my_split_heads, my_merge_heads)
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_the_reader_gets_fresh_copies():
    seen = []

    def spy(scores):
        seen.append(scores)
        return my_softmax(scores)

    check_stable_softmax(spy)
    seen[0].fill_(0.0)  # a reader keeping and changing an input changes nothing of the checker's
    check_stable_softmax(spy)
    assert len({id(t) for t in seen}) == len(seen)


@pytest.mark.parametrize(("checker", "argument"), [
    (check_nearest_by_cosine, "nearest_fn"),
    (check_batched_raw_attention, "attention_fn"),
    (check_stable_softmax, "softmax_fn"),
    (check_row_entropy, "entropy_fn"),
    (check_masked_softmax, "masked_softmax_fn"),
    (check_repeat_pattern, "pattern_fn"),
    (check_online_normalizer, "normalizer_fn"),
    (check_sinusoidal, "sinusoidal_fn"),
    (check_rope_interleaved, "rope_fn"),
    (check_alibi_slopes, "slopes_fn"),
    (check_repeat_kv, "repeat_kv_fn"),
    (check_cache_bytes_per_token, "bytes_fn"),
    (check_cached_rope_step, "step_fn"),
    (check_window_mask, "mask_fn"),
    (check_prefix_matching_score, "prefix_fn"),
    (check_mean_ablation, "ablate_fn"),
    (check_copying_score, "copying_fn"),
    (check_padded_causal_mask, "mask_fn"),
    (check_peeks_ahead, "peeks_fn"),
    (check_quantize_keys, "quantize_fn"),
    (check_evict_one, "evict_fn"),
    (check_dtw, "dtw_fn"),
    (check_cross_attention_steps, "steps_fn"),
    (check_word_rows, "rows_fn"),
])
@pytest.mark.parametrize("bad", [None, 3, "my_softmax", torch.zeros(3), nn.Softmax])
def test_a_function_checker_refuses_what_is_not_a_function(checker, argument, bad):
    with pytest.raises(TypeError, match=rf"^{argument} must be a function, got "):
        checker(bad)


def test_a_class_where_an_instance_is_needed_is_named():
    with pytest.raises(TypeError, match="got the class Softmax: pass a function"):
        check_stable_softmax(nn.Softmax)


def test_split_merge_checker_names_the_bad_argument():
    with pytest.raises(TypeError, match="^split_fn must be a function"):
        check_split_merge_heads(None, my_merge_heads)
    with pytest.raises(TypeError, match="^merge_fn must be a function"):
        check_split_merge_heads(my_split_heads, 3)


@pytest.mark.parametrize("bad", [None, F.softmax, int, torch.zeros(2), "SimpleAttention"])
def test_simple_attention_checker_wants_a_module_class_or_instance(bad):
    with pytest.raises(TypeError, match="^layer must be an nn.Module subclass or instance"):
        check_simple_attention(bad)


def test_online_normalizer_mismatch_shows_every_digit():
    with pytest.raises(ExerciseCheckError) as raised:
        check_online_normalizer(online_in_float32)
    lines = str(raised.value).splitlines()
    assert lines[0] == ("check_online_normalizer: check 1 (100 random scores, randn (100,)) "
                        "failed: wrong value of m")
    assert re.fullmatch(r"  expected m = 2\.56794205203\d+", lines[1]), lines[1]
    assert re.fullmatch(r"  got m      = 2\.5679421\d+", lines[2]), lines[2]
    assert re.match(r"  difference 9\.\d+e-08 \(allowed: 1e-12 \+ 1e-12·\|expected\|\)",
                    lines[3]), lines[3]
    assert lines[4].startswith("  the row: 100 scores [")
    assert lines[-1].startswith("  hint: the scores are Python floats")


def test_online_normalizer_reads_a_one_pass_stream_of_floats():
    streams, rows = [], []

    def spy(stream):
        streams.append(stream)
        assert iter(stream) is stream and not hasattr(stream, "__len__")
        seen = {"count": 0, "first": [], "floats": True, "plus_inf": False}

        def watched():
            for z in stream:
                seen["count"] += 1
                seen["floats"] &= isinstance(z, float)
                seen["plus_inf"] |= z == math.inf
                if len(seen["first"]) < 5:
                    seen["first"].append(float(z))  # a copy: the score itself is let go
                yield z

        result = online_normalizer(watched())
        rows.append(seen)
        with pytest.raises(RuntimeError, match="it can be read only once"):
            next(stream)  # read to the end, once: a second pass is refused
        return result

    check_online_normalizer(spy)
    assert len(streams) == 12 and len({id(s) for s in streams}) == 12
    assert all(row["floats"] and not row["plus_inf"] for row in rows)
    assert [row["first"][0] for row in rows].count(-math.inf) == 2  # left padding, all -inf
    assert rows[-2]["first"] == [-math.inf] * 5 and rows[-2]["count"] == 5
    assert rows[-1]["count"] == 10_000


def test_online_normalizer_stream_sees_stored_scores_only():
    """Holding the running maximum and the last score is streaming; holding the row is not."""
    def holds_two(stream):
        held = []

        def latest():
            for z in stream:
                held[:] = [z]  # the latest score stays alive; m holds the largest
                yield z

        return online_normalizer(latest())

    check_online_normalizer(holds_two)
    with pytest.raises(ExerciseCheckError, match="raised _StoredTheStream"):
        check_online_normalizer(lambda stream: online_normalizer(iter(tuple(stream))))


def test_online_normalizer_accepts_numbers_of_any_kind_and_refuses_the_rest():
    def as_numpy(stream):
        import numpy as np

        m, row_sum = online_normalizer(stream)
        return np.float64(m), torch.tensor([row_sum], dtype=torch.float64)

    check_online_normalizer(as_numpy)
    with pytest.raises(ExerciseCheckError, match=r"row_sum is a tensor of shape \(2,\), expected "
                                                 r"one number"):
        check_online_normalizer(lambda stream: (online_normalizer(stream)[0],
                                                torch.ones(2, dtype=torch.float64)))
    with pytest.raises(ExerciseCheckError, match="m is a str, expected one number"):
        check_online_normalizer(lambda stream: ("m", 1.0))


def test_the_new_checkers_leave_the_global_random_state_alone():
    rng = torch.random.get_rng_state()
    check_repeat_pattern(repeat_pattern)
    check_online_normalizer(online_normalizer)
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_the_positions_checkers_pass_the_solutions_and_leave_the_random_state_alone(capsys):
    rng = torch.random.get_rng_state()
    check_sinusoidal(my_sinusoidal)
    check_rope_interleaved(rope_interleaved)
    check_alibi_slopes(my_alibi_slopes)
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert capsys.readouterr().out == ("✓ check_sinusoidal: all 6 checks passed.\n"
                                       "✓ check_rope_interleaved: all 9 checks passed.\n"
                                       "✓ check_alibi_slopes: all 8 checks passed.\n")


def test_the_rope_checker_compares_the_layouts_after_reordering():
    """Its last check runs the reader's function on features reordered with
    interleaved_order, and compares the scores with the half-split ones."""
    from attnbook.positions import interleaved_order

    seen = []

    def spy(x, positions, base=10000.0):
        seen.append(x.clone())
        return rope_interleaved(x, positions, base)

    check_rope_interleaved(spy)
    q_reordered = seen[-2]  # (6, 16): q[..., order], then k[..., order]
    order = interleaved_order(16)
    assert q_reordered.shape == (6, 16)
    assert torch.equal(q_reordered[..., order.argsort()], compare.randn(6, 16, seed=99))


def test_the_rope_checker_hands_out_integer_positions_and_float_x():
    calls = []

    def spy(x, positions, *base):
        calls.append((x.dtype, positions.dtype, base))
        return rope_interleaved(x, positions, *base)

    check_rope_interleaved(spy)
    assert {dtype for dtype, _, _ in calls} == {torch.float32, torch.float64}
    assert {dtype for _, dtype, _ in calls} == {torch.int64}
    assert ((500.0,) in {base for _, _, base in calls}) and (() in {b for _, _, b in calls})


def test_the_language_model_checkers_pass_the_solutions_and_leave_the_random_state_alone(
        capsys):
    rng = torch.random.get_rng_state()
    check_repeat_kv(repeat_kv)
    check_cache_bytes_per_token(cache_bytes_per_token)
    check_cached_rope_step(cached_rope_step)
    check_window_mask(window_mask)
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert capsys.readouterr().out == ("✓ check_repeat_kv: all 8 checks passed.\n"
                                       "✓ check_cache_bytes_per_token: all 6 checks passed.\n"
                                       "✓ check_cached_rope_step: all 5 checks passed.\n"
                                       "✓ check_window_mask: all 10 checks passed.\n")


def test_the_repeat_kv_checker_compares_with_grouped_attention():
    """Its check 6 runs attention over the reader's expanded keys and values: a function
    that gets the shapes right and the order wrong fails there too, not only on values."""
    seen = []

    def spy(kv, num_heads):
        seen.append((tuple(kv.shape), num_heads))
        return repeat_kv(kv, num_heads)

    check_repeat_kv(spy)
    assert ((2, 3, 5, 16), 9) in seen  # k and v of the grouped-attention check
    assert seen.count(((1, 3, 2, 4), 8)) == 1 and seen.count(((1, 3, 2, 4), 2)) == 1


def test_the_cached_step_checker_has_a_window_where_len_is_not_the_position():
    """Without such a cache the len(cache) mistake would pass: the checker must build one."""
    seen = []

    def spy(q_new, k_new, v_new, cache, base):
        seen.append((len(cache), cache.next_position, base, tuple(q_new.shape),
                     tuple(k_new.shape)))
        return cached_rope_step(q_new, k_new, v_new, cache, base)

    check_cached_rope_step(spy)
    assert seen[0][:2] == (0, 0)  # an empty cache first
    assert any(held < position for held, position, *_ in seen)
    assert (15, 15, 100000.0, (1, 9, 1, 64), (1, 3, 1, 64)) in seen  # SmolLM2's shapes


def test_the_cached_step_checker_hands_the_reader_a_real_cache_it_may_keep_using():
    caches = []

    def spy(q_new, k_new, v_new, cache, base):
        caches.append(cache)
        return cached_rope_step(q_new, k_new, v_new, cache, base)

    check_cached_rope_step(spy)
    assert all(isinstance(cache, KVCache) for cache in caches)
    assert len({id(cache) for cache in caches}) == len(caches)  # a new cache every check
    assert [cache.next_position for cache in caches] == [1, 6, 10, 16, 23]


@pytest.mark.parametrize(("L", "recent", "sinks"), [(8, 3, 0), (9, 2, 5), (10, 4, 1)])
def test_the_window_mistakes_differ_from_the_right_mask(L, recent, sinks):
    """A known mistake that equals the right mask would be a hint no one can get."""
    right = window_mask(L, recent, sinks)
    for wrong in (window_not_causal, window_both_ways, window_one_too_wide,
                  window_reversed, window_transposed):
        assert not torch.equal(wrong(L, recent, sinks), right), wrong.__name__


def test_the_induction_heads_checkers_pass_the_solutions_and_leave_the_random_state_alone(
        capsys):
    rng = torch.random.get_rng_state()
    check_prefix_matching_score(prefix_matching_score)
    check_mean_ablation(mean_ablate)
    check_copying_score(copying_score)
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert capsys.readouterr().out == ("✓ check_prefix_matching_score: all 9 checks passed.\n"
                                       "✓ check_mean_ablation: all 7 checks passed.\n"
                                       "✓ check_copying_score: all 8 checks passed.\n")


def test_the_prefix_checker_covers_the_shapes_lengths_dtypes_and_constructed_heads():
    """(L, L), (h, L, L) and (layers, B, h, L, L); L = 2T - 1 and L = 2T; float32 and
    float64; a perfect induction head (score 1) and a previous-token head (score 0)."""
    from attnbook.circuits import previous_token_score

    seen = []

    def spy(weights, period):
        seen.append((weights.clone(), period))
        return prefix_matching_score(weights, period)

    check_prefix_matching_score(spy)
    assert {w.dim() for w, _ in seen} >= {2, 3, 5}
    assert all(T < w.shape[-1] <= 2 * T and w.shape[-2] == w.shape[-1] for w, T in seen)
    assert {w.shape[-1] - 2 * T for w, T in seen} == {-1, 0}  # L = 2T - 1 and L = 2T
    assert {w.dtype for w, _ in seen} == {torch.float32, torch.float64}
    maps = [(w[None] if w.dim() == 2 else w.flatten(0, -3), T) for w, T in seen]
    prefix = torch.cat([prefix_matching_score(m.double(), T) for m, T in maps])
    previous = torch.cat([previous_token_score(m.double()) for m, _ in maps])
    assert bool(((prefix - 1).abs() < 1e-12).any()), "no perfect induction head"
    assert bool((((previous - 1).abs() < 1e-12) & (prefix.abs() < 1e-12)).any()), (
        "no previous-token head scoring 0")
    assert bool(((prefix > 0.01) & (prefix < 0.99)).any()), "no random weights"


def test_the_mean_ablation_checker_tells_the_batch_and_the_positions_apart():
    """Batches of several sequences (else a mean per sequence would pass), d_head !=
    num_heads (else a slice at head·num_heads would pass), the first and the last head."""
    seen = []

    def spy(merged, head, num_heads):
        seen.append((tuple(merged.shape), head, num_heads, merged.dtype))
        return mean_ablate(merged, head, num_heads)

    check_mean_ablation(spy)
    assert all(len(shape) == 3 and shape[-1] % h == 0 for shape, _, h, _ in seen)
    assert any(shape[0] > 1 and shape[1] > 1 for shape, *_ in seen)
    assert any(shape[-1] // h != h and head > 0 for shape, head, h, _ in seen)
    assert any(head == 0 for _, head, _, _ in seen)
    assert any(head == h - 1 for _, head, h, _ in seen)
    assert {dtype for *_, dtype in seen} == {torch.float32, torch.float64}


def test_the_copying_checker_has_a_copier_its_opposite_a_rotation_and_small_vocabularies():
    from attnbook.circuits import copying_score as package_copying_score

    seen = []

    def spy(w_v, w_o, embed, unembed):
        seen.append((w_v.clone(), w_o.clone(), embed.clone(), unembed.clone()))
        return copying_score(w_v, w_o, embed, unembed)

    check_copying_score(spy)
    scores = [package_copying_score(*inputs) for inputs in seen]
    assert any(abs(score - 1) < 1e-6 for score in scores)
    assert any(abs(score + 1) < 1e-6 for score in scores)
    assert any(abs(score) < 1e-12 for score in scores)  # the rotation
    assert any(0.05 < abs(score) < 0.95 for score in scores)  # random heads
    assert max(embed.shape[0] for _, _, embed, _ in seen) <= 200  # the (V, V) route is quick
    assert any(not torch.equal(embed, unembed) for _, _, embed, unembed in seen)
    assert {w_v.dtype for w_v, *_ in seen} == {torch.float32, torch.float64}


def test_the_induction_heads_mistakes_differ_from_the_right_answers():
    """A known mistake that equals the right answer would be a hint no one can get."""
    weights = torch.softmax(torch.randn(3, 11, 11, generator=torch.Generator().manual_seed(0))
                            .masked_fill(~torch.ones(11, 11).bool().tril(), float("-inf")), -1)
    right = prefix_matching_score(weights, 6)
    for wrong in (prefix_on_the_earlier_occurrence, prefix_over_all_queries,
                  prefix_from_query_T_minus_1, prefix_from_query_T_plus_1,
                  prefix_without_the_last_query, prefix_one_key_too_far, prefix_transposed,
                  prefix_summed):
        assert not torch.allclose(wrong(weights, 6), right, atol=1e-3), wrong.__name__
    merged = torch.randn(3, 4, 12, generator=torch.Generator().manual_seed(1))
    right = mean_ablate(merged, 1, 3)
    for wrong in (ablate_at_head_times_num_heads, ablate_over_the_features,
                  ablate_per_sequence, ablate_over_the_batch, ablate_with_zeros,
                  ablate_every_head):
        assert not torch.allclose(wrong(merged, 1, 3), right, atol=1e-3), wrong.__name__


def test_the_attention_layer_checkers_pass_the_solutions_and_leave_the_random_state_alone(
        capsys):
    rng = torch.random.get_rng_state()
    check_padded_causal_mask(padded_causal_mask)
    check_peeks_ahead(peeks_ahead)
    check_peeks_ahead(peeks_with_random_tokens)  # draws its tokens from the global state
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert capsys.readouterr().out == ("✓ check_padded_causal_mask: all 6 checks passed.\n"
                                       "✓ check_peeks_ahead: all 11 checks passed.\n"
                                       "✓ check_peeks_ahead: all 11 checks passed.\n")


def test_the_peeks_checker_hands_out_functions_and_modules_it_keeps_unchanged():
    """Layers of both kinds the chapter uses (a module, and a function such as `shifted`),
    fresh inputs of both float dtypes, a single token, and layers that still hold the same
    parameters afterwards."""
    seen = []

    def spy(layer, x):
        seen.append((layer, x, x.clone()))
        return peeks_ahead(layer, x)

    check_peeks_ahead(spy)
    assert any(isinstance(layer, nn.Module) for layer, _, _ in seen)
    assert any(not isinstance(layer, nn.Module) for layer, _, _ in seen)
    assert {x.dtype for _, x, _ in seen} == {torch.float32, torch.float64}
    assert any(x.shape[1] == 1 for _, x, _ in seen)
    assert len({id(x) for _, x, _ in seen}) == len(seen)
    assert all(torch.equal(x, before) for _, x, before in seen)
    layers = [layer for layer, _, _ in seen if isinstance(layer, nn.Module)]
    assert all(not layer.training and all(p.grad is None for p in layer.parameters())
               for layer in layers)


@pytest.mark.parametrize(("lengths", "L"), [([6, 3], 6), ([2, 5, 4], 5), ([3, 2], 7)])
def test_the_padded_mask_mistakes_differ_from_the_right_mask(lengths, L):
    """A known mistake that equals the right mask would be a hint no one can get."""
    lengths = torch.tensor(lengths)
    right = padded_causal_mask(lengths, L)
    for wrong in (padded_mask_of_the_pads, padded_mask_without_the_diagonal,
                  padded_mask_on_the_queries, padded_mask_keeping_one_pad,
                  padded_mask_without_padding):
        assert not torch.equal(wrong(lengths, L), right), wrong.__name__


def test_a_hint_table_with_a_bad_rule_is_refused_when_built() -> None:
    from attnbook.checks.harness import error_hints

    for rule in [(ValueError, "text"), (ValueError, None, "hint"), ("ValueError", "", "hint"),
                 ((ValueError, int), "", "hint")]:
        with pytest.raises(TypeError, match="rules must be"):
            error_hints(rule)
    hint = error_hints((KeyError, "", "first"), ((IndexError, ValueError), "dim", "second"))
    assert hint(KeyError("x")) == "first" and hint(ValueError("bad dim")) == "second"
    assert hint(ValueError("other")) is None


def test_running_no_cases_is_refused() -> None:
    from attnbook.checks.harness import Checks

    with pytest.raises(ValueError, match="cases must hold"):
        Checks("check_x").run_all(lambda: None, [])
