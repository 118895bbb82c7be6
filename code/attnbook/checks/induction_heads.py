"""The checkers of the chapter ``induction-heads``: :func:`check_prefix_matching_score`,
:func:`check_mean_ablation` and :func:`check_copying_score`.

The references are the package's own :func:`~attnbook.circuits.prefix_matching_score`,
:func:`~attnbook.circuits.replace_heads` (``how="mean"``) and
:func:`~attnbook.circuits.copying_score`. The typical wrong answers are built beside them
(the earlier occurrence instead of the token after it, a slice at ``head · num_heads``,
a trace instead of eigenvalues), so that a hint can name the mistake.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..attention import masked_softmax
from ..circuits import copying_score, prefix_matching_score, replace_heads
from ..masks import causal_mask
from .compare import Mismatch, Mistake, as_scalar, expect_close, expect_number, randn
from .harness import Checks, call_reader, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_copying_score", "check_mean_ablation", "check_prefix_matching_score"]


# ----------------------------------------------------------------- prefix matching score

_PREFIX_HINT = (
    "query t = T .. L-1 of the second copy holds the token that was at t - T; an induction "
    "head attends to the token after that, key t - T + 1. Take those weights, "
    "`weights[..., t, t - T + 1]`, and average them over the L - T queries: one score per "
    "map, a tensor of shape weights.shape[:-2]. The block `weights[..., T:, 1:L - T + 1]` "
    "holds them on its diagonal, `.diagonal(dim1=-2, dim2=-1)`."
)
_PREFIX_IN_PLACE_HINT = (
    "work out of place: slices and `diagonal` are views of the weights, so writing into "
    "them (`+=`, `fill_`, `zero_`, an assignment) changes the caller's tensor. Read the "
    "weights and compute a new tensor."
)


def _prefix_variant(weights: Tensor, period: int, *, first: int, last: int,
                    shift: int) -> Tensor:
    """The mean over queries ``first .. last`` of the weight on key ``t - period + shift``:
    the right score (``first = period``, ``last = L - 1``, ``shift = 1``) or a mistake."""
    picked = [weights[..., t, t - period + shift] for t in range(first, last + 1)]
    return torch.stack(picked, dim=-1).mean(-1)  # (...)


def _prefix_mistakes(weights: Tensor, period: int) -> list[Mistake]:
    T, L = period, weights.shape[-1]
    rows = torch.arange(L)
    all_queries = (
        f"average over the L - T = {L - T} queries of the second copy only, t = T .. L-1 = "
        f"{T} .. {L - 1}, not over all L = {L}: a query of the first copy has no earlier "
        f"occurrence to look back to (below T - 1 its key t - T + 1 is negative, and a "
        f"negative index wraps around to a later key, 0 in a causal map).")
    return [
        (f"you took key t - T, the earlier occurrence of the query's own token: that is a "
         f"duplicate-token head's target. An induction head reads the token AFTER it, key "
         f"t - T + 1 (here keys 1 .. {L - T} for queries {T} .. {L - 1}).",
         lambda: _prefix_variant(weights, T, first=T, last=L - 1, shift=0)),
        (all_queries, lambda: weights[..., rows, rows - T + 1].mean(-1)),
        (all_queries, lambda: prefix_matching_score(weights, T) * (L - T) / L),
        (f"off by one in the queries: the second copy starts at query t = T = {T}, the first "
         f"repeated token; query T - 1 = {T - 1} is the last token of the first copy.",
         lambda: _prefix_variant(weights, T, first=T - 1, last=L - 1, shift=1)),
        (f"off by one in the queries: the second copy starts at query t = T = {T}, not "
         f"T + 1, and it runs to the last query, L - 1 = {L - 1}.",
         lambda: _prefix_variant(weights, T, first=T + 1, last=L - 1, shift=1)),
        (f"off by one in the queries: the last one is L - 1 = {L - 1}, included "
         f"(`range(T, L)`, or the slice `T:` to the end).",
         lambda: _prefix_variant(weights, T, first=T, last=L - 2, shift=1)),
        ("you took key t - T + 2, one too far: query t holds the token of key t - T, and "
         "the token after it is key t - T + 1.",
         lambda: _prefix_variant(weights, T, first=T, last=L - 1, shift=2)),
        ("rows are queries and columns keys: you read weights[..., t - T + 1, t], the "
         "transpose, where a causal map is 0.",
         lambda: prefix_matching_score(weights.transpose(-2, -1).contiguous(), T)),
        ("the mean, not the sum: divide by the number of queries, L - T.",
         lambda: prefix_matching_score(weights, T) * (L - T)),
        ("one score per map: average over the queries only (`.mean(-1)` after `diagonal`), "
         "so that the leading dimensions stay, shape weights.shape[:-2].",
         lambda: prefix_matching_score(weights, T).mean()),
        ("`diagonal()` takes dims 0 and 1 by default: with leading dimensions, use "
         "`.diagonal(dim1=-2, dim2=-1)`.",
         lambda: weights[..., T:, 1:L - T + 1].diagonal().mean(-1)),
    ]


def _induction_map(L: int, period: int) -> Tensor:
    """(L, L): queries of the second copy on key ``t - T + 1``, the others on themselves."""
    t = torch.arange(L)
    keys = torch.where(t >= period, t - period + 1, t)  # (L,)
    return torch.nn.functional.one_hot(keys, L).float()  # (L, L)


def _previous_token_map(L: int) -> Tensor:
    """(L, L): every query on the key before it (query 0 on itself)."""
    keys = (torch.arange(L) - 1).clamp(min=0)  # (L,)
    return torch.nn.functional.one_hot(keys, L).float()  # (L, L)


def _duplicate_token_map(L: int, period: int) -> Tensor:
    """(L, L): queries of the second copy on key ``t - T``, their token's earlier occurrence."""
    t = torch.arange(L)
    keys = torch.where(t >= period, t - period, t)  # (L,)
    return torch.nn.functional.one_hot(keys, L).float()  # (L, L)


def _random_maps(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Causal softmax weights ``(..., L, L)`` of seeded random scores."""
    L = shape[-1]
    scores = randn(*shape, seed=seed, dtype=dtype, scale=2.0)
    return masked_softmax(scores, causal_mask(L))


def check_prefix_matching_score(prefix_fn: Callable) -> None:
    """Check ``prefix_fn(weights, period) -> (...)``: the prefix-matching score of heads.

    The exercise ``induction-heads-ex1`` of the chapter ``induction-heads``: ``weights``
    ``(..., L, L)`` are self-attention weights on ``period = T`` random tokens followed by
    the same tokens again (``T < L <= 2T``); the score is the mean over the queries
    ``t = T .. L-1`` of the weight on key ``t - T + 1``, the token after the earlier
    occurrence of the query's own token, one per map, shape ``weights.shape[:-2]``. The
    reference is :func:`attnbook.circuits.prefix_matching_score`.

    Checks random causal maps first (on them every known mistake gives a value of its own,
    where on a one-hot map several give 0), then a perfect induction map (score 1), a
    previous-token and a duplicate-token map (score 0), and random causal maps
    ``(L, L)``, ``(h, L, L)`` and ``(layers, B, h, L, L)`` with ``L = 2T - 1`` and
    ``L = 2T``, in float32 and float64.
    Its hints name the earlier occurrence itself (key ``t - T``), the first copy's queries
    averaged in, a query range off by one, a key one too far, the transpose, a sum, one
    mean over everything, ``diagonal()`` on the leading dimensions, and weights changed in
    place.
    """
    prefix_fn = require_function("prefix_fn", prefix_fn)
    checks = Checks("check_prefix_matching_score")
    name = name_of(prefix_fn)

    def run(weights: Tensor, period: int) -> None:
        T, L = period, weights.shape[-1]
        call = f"{name}(weights, {T})"
        try:
            got = call_reader(call, prefix_fn, weights.clone(), T, names=("weights", "period"))
        except Mismatch as changed:  # call_reader's only Mismatch: an argument changed
            changed.hint = _PREFIX_IN_PLACE_HINT
            raise
        if isinstance(got, numbers.Number):
            raise Mismatch(
                f"{call} returned a {type(got).__name__}, expected a tensor of shape "
                f"{tuple(weights.shape[:-2])}, weights.shape[:-2]", [],
                "return a tensor, one score per map: with leading dimensions (heads, "
                "layers, a batch) there are many, and `float(...)` or `.item()` keeps one. "
                "End with `.mean(-1)` over the queries and return that.")
        expect_close(f"the score {call} for weights of shape {tuple(weights.shape)}", got,
                     prefix_matching_score(weights, T), hint=_PREFIX_HINT,
                     mistakes=_prefix_mistakes(weights, T),
                     note=f"period T = {T}, L = {L}: queries {T} .. {L - 1} should read keys "
                          f"1 .. {L - T} (key t - T + 1)")

    with checks.case("random causal weights (L, L) = (11, 11), T = 6 (L = 2T - 1)"):
        run(_random_maps(11, 11, seed=401), 6)
    with checks.case("a perfect induction head, T = 5, L = 9: weight 1 on key t - T + 1, "
                     "score 1"):
        run(_induction_map(9, 5), 5)
    with checks.case("a previous-token head, T = 5, L = 10: weight 1 on key t - 1, score 0"):
        run(_previous_token_map(10), 5)
    with checks.case("a duplicate-token head, T = 4, L = 8: weight 1 on the earlier "
                     "occurrence itself, key t - T, score 0"):
        run(_duplicate_token_map(8, 4), 4)
    with checks.case("random causal weights (L, L) = (12, 12), T = 6 (L = 2T)"):
        run(_random_maps(12, 12, seed=402), 6)
    with checks.case("one map per head: weights (4, 14, 14), T = 7, score (4,)"):
        run(_random_maps(4, 14, 14, seed=403), 7)
    with checks.case("every layer, sequence and head at once: weights (2, 3, 4, 15, 15), "
                     "T = 8, score (2, 3, 4)"):
        run(_random_maps(2, 3, 4, 15, 15, seed=404), 8)
    with checks.case("float64 weights (2, 3, 10, 10), T = 5: float64 in, float64 out"):
        run(_random_maps(2, 3, 10, 10, seed=405, dtype=torch.float64), 5)
    with checks.case("the three kinds side by side, weights (3, 12, 12), T = 6: induction, "
                     "previous-token and duplicate-token heads score 1, 0 and 0"):
        run(torch.stack([_induction_map(12, 6), _previous_token_map(12),
                         _duplicate_token_map(12, 6)]), 6)
    checks.passed()


# ------------------------------------------------------------------------ mean ablation

_ABLATE_HINT = (
    "head `head` owns the features head·d_head .. (head+1)·d_head - 1, with d_head = "
    "merged.shape[-1] // num_heads. Clone merged, then overwrite that slice with its mean "
    "over the batch and the positions, `part.mean(dim=(0, 1), keepdim=True)`; every other "
    "feature stays as it was, and the result has merged's shape."
)
_ABLATE_IN_PLACE_HINT = (
    "work out of place: `out = merged.clone()` first, then write into out. A slice of "
    "merged is a view, so `merged[..., part] = ...` changes the caller's tensor."
)


def _ablated(merged: Tensor, start: int, width: int, value: Callable[[Tensor], Tensor]
             ) -> Tensor:
    """``merged`` with features ``start .. start + width - 1`` replaced by ``value(part)``."""
    out = merged.clone()
    part = merged[..., start:start + width]  # (B, L, width)
    out[..., start:start + width] = value(part)
    return out


def _ablation_mistakes(merged: Tensor, head: int, num_heads: int) -> list[Mistake]:
    d = merged.shape[-1] // num_heads
    start = head * d
    mean = replace_heads(merged, [head], num_heads, how="mean")

    def over(*dims: int) -> Callable[[Tensor], Tensor]:
        return lambda part: part.mean(dim=dims, keepdim=True)

    wrong_slice = (f"head {head} starts at feature head·d_head = {head}·{d} = {start}, not "
                   f"head·num_heads = {head * num_heads}: d_head = merged.shape[-1] // "
                   f"num_heads = {d} is the width of one head.")
    return [
        (wrong_slice, lambda: _ablated(merged, head * num_heads, d, over(0, 1))),
        (wrong_slice, lambda: _ablated(merged, head * num_heads, num_heads, over(0, 1))),
        ("the mean is over the batch and the positions, dims 0 and 1, for each feature "
         "apart: yours averages over the features (the last dimension).",
         lambda: _ablated(merged, start, d, over(-1))),
        ("the mean is over the batch AND the positions, `mean(dim=(0, 1))`: yours is one "
         "mean per sequence (over the positions only), which still depends on the input.",
         lambda: _ablated(merged, start, d, over(1))),
        ("the mean is over the batch AND the positions, `mean(dim=(0, 1))`: yours averages "
         "over the batch only, so each position keeps its own value.",
         lambda: _ablated(merged, start, d, over(0))),
        ("that is zero ablation: mean ablation replaces the head's features by their mean, "
         "which keeps the average the later layers are used to.",
         lambda: replace_heads(merged, [head], num_heads, how="zero")),
        (f"only head {head}'s features change: the other heads pass through unchanged.",
         lambda: merged.mean(dim=(0, 1), keepdim=True).expand_as(merged)),
        (f"return the whole tensor, shape {tuple(merged.shape)}, not head {head}'s part "
         f"alone.", lambda: mean[..., start:start + d]),
        (f"return the whole tensor, shape {tuple(merged.shape)}, not the mean of head "
         f"{head}'s part alone.", lambda: mean[:1, :1, start:start + d]),
    ]


def _labelled_merged(B: int, L: int, features: int) -> Tensor:
    """``merged[b, t, f] = 100 b + 10 t + f``: each value says where it came from."""
    b = torch.arange(B)[:, None, None]
    t = torch.arange(L)[None, :, None]
    f = torch.arange(features)[None, None, :]
    return (100 * b + 10 * t + f).float()  # (B, L, features)


def check_mean_ablation(ablate_fn: Callable) -> None:
    """Check ``ablate_fn(merged, head, num_heads) -> merged's shape``: one head mean-ablated.

    The exercise ``induction-heads-ex2`` of the chapter ``induction-heads``: ``merged``
    ``(B, L, num_heads · d_head)`` is what enters a multi-head layer's output projection,
    head ``i`` in features ``i · d_head .. (i + 1) · d_head - 1``. The result is a new
    tensor in which head ``head``'s features are replaced by their mean over the batch and
    the positions, every other feature unchanged and ``merged`` itself untouched. The
    reference is :func:`attnbook.circuits.replace_heads` with ``how="mean"``.

    Checks a labelled input, the first, a middle and the last head, SmolLM2's 9 heads of
    64, float64 and a batch of one. Its hints name the slice at ``head · num_heads``, the
    mean over the features, over the positions only or the batch only, zeros instead of
    the mean, every head ablated, the head's part returned alone, and ``merged`` changed in
    place.
    """
    ablate_fn = require_function("ablate_fn", ablate_fn)
    checks = Checks("check_mean_ablation")
    name = name_of(ablate_fn)

    def run(merged: Tensor, head: int, num_heads: int, note: str | None = None) -> None:
        d = merged.shape[-1] // num_heads
        call = f"{name}(merged, {head}, {num_heads})"
        try:
            got = call_reader(call, ablate_fn, merged.clone(), head, num_heads,
                              names=("merged", "head", "num_heads"))
        except Mismatch as changed:  # call_reader's only Mismatch: an argument changed
            changed.hint = _ABLATE_IN_PLACE_HINT
            raise
        where = (f"merged {tuple(merged.shape)}, num_heads = {num_heads} (d_head = {d}): "
                 f"head {head} is features {head * d} .. {(head + 1) * d - 1}")
        expect_close(f"the result of {call}", got,
                     replace_heads(merged, [head], num_heads, how="mean"), hint=_ABLATE_HINT,
                     mistakes=_ablation_mistakes(merged, head, num_heads),
                     note="\n  ".join([where, *([note] if note else [])]))

    with checks.case("labelled merged (2, 3, 6), 3 heads of 2, head 1"):
        run(_labelled_merged(2, 3, 6), 1, 3,
            "input: merged[b, t, f] = 100·b + 10·t + f, so the mean over b and t of "
            "feature f is 55 + f")
    with checks.case("random merged (4, 7, 12), 4 heads of 3, head 2"):
        run(randn(4, 7, 12, seed=501), 2, 4)
    with checks.case("the first head: merged (3, 5, 10), 2 heads of 5, head 0"):
        run(randn(3, 5, 10, seed=502), 0, 2)
    with checks.case("the last head: merged (2, 5, 24), 4 heads of 6, head 3"):
        run(randn(2, 5, 24, seed=503), 3, 4)
    with checks.case("SmolLM2's heads: merged (2, 6, 576), 9 heads of 64, head 5"):
        run(randn(2, 6, 576, seed=504), 5, 9)
    with checks.case("float64 merged (3, 4, 8), 2 heads of 4, head 1: float64 in, float64 "
                     "out"):
        run(randn(3, 4, 8, seed=505, dtype=torch.float64), 1, 2)
    with checks.case("one sequence: merged (1, 10, 12), 3 heads of 4, head 1"):
        run(randn(1, 10, 12, seed=506), 1, 3)
    checks.passed()


# -------------------------------------------------------------------------- copying score

_COPY_HINT = (
    "M = unembed @ w_o @ w_v @ embed.T is (vocab, vocab); its non-zero eigenvalues are "
    "those of the small (d_head, d_head) matrix w_v @ embed.T @ unembed @ w_o. Take them "
    "with `torch.linalg.eigvals` (complex in general) and return "
    "`float(eigenvalues.real.sum() / eigenvalues.abs().sum())`."
)
_COPY_NAN_HINT = (
    "a rotation has eigenvalues ±i: real parts 0 and trace 0, but moduli |λ| = 1. Divide "
    "by the sum of the moduli, `eigenvalues.abs().sum()`, never by a trace, the diagonal or "
    "the real parts."
)
_FLOAT32_HINT = (
    "right to about float32 precision only: these inputs are float64; keep them so (or "
    "convert with `.double()`), and avoid `.float()` on the way."
)

#: (atol, rtol) of the score, by the dtype of the inputs. Even in float32 the eigenvalues
#: of the (vocab, vocab) route, with their vocab - d_head near-zero ones, stay within these.
_COPY_TOLERANCE = {torch.float32: (5e-5, 1e-4), torch.float64: (1e-10, 1e-8)}


def _ratio(eigenvalues: Tensor) -> float:
    return float(eigenvalues.real.sum() / eigenvalues.abs().sum())


def _copying_mistakes(w_v: Tensor, w_o: Tensor, embed: Tensor, unembed: Tensor
                      ) -> list[tuple[str, Callable[[], float]]]:
    w_v, w_o, embed, unembed = (t.double() for t in (w_v, w_o, embed, unembed))
    small = w_v @ embed.T @ unembed @ w_o  # (d_head, d_head)
    trace = torch.trace(small)
    return [
        ("the score is sum(Re λ) / sum(|λ|) over the eigenvalues; trace/|trace| (or "
         "sum(Re λ) / sum(|Re λ|) when the real parts share a sign) is only its sign, ±1. "
         "The numerator is the trace, but the denominator needs the moduli "
         "|λ| = `eigenvalues.abs()`, which count the imaginary parts too.",
         lambda: float(trace / trace.abs())),
        ("sum(|λ|) is the sum of the eigenvalues' moduli, not of the diagonal's absolute "
         "values: take the eigenvalues with torch.linalg.eigvals.",
         lambda: float(trace / torch.diagonal(small).abs().sum())),
        ("the singular values are not the moduli of the eigenvalues (they agree only for "
         "a normal matrix): use torch.linalg.eigvals, not svdvals.",
         lambda: float(trace / torch.linalg.svdvals(small).sum())),
        ("|λ| is the modulus of the complex eigenvalue, `eigenvalues.abs()`, not the "
         "absolute value of its real part.",
         lambda: float(trace / torch.linalg.eigvals(small).real.abs().sum())),
        ("weight each eigenvalue by its size: sum(Re λ) / sum(|λ|), not the plain mean of "
         "Re λ / |λ| over the eigenvalues.",
         lambda: float((torch.linalg.eigvals(small).real
                        / torch.linalg.eigvals(small).abs()).mean())),
        ("torch.linalg.eigvalsh assumes a symmetric matrix and reads one triangle only; "
         "this one is not symmetric: use torch.linalg.eigvals.",
         lambda: float(torch.linalg.eigvalsh(small).sum()
                       / torch.linalg.eigvalsh(small).abs().sum())),
        ("the embeddings are part of the path: a token's embedding goes through w_v and "
         "w_o, then the unembedding gives the logits. Yours uses w_v @ w_o (or w_o @ w_v) "
         "alone; use w_v @ embed.T @ unembed @ w_o.",
         lambda: _ratio(torch.linalg.eigvals(w_v @ w_o))),
        ("the embedding comes first (it turns a token into a vector) and the unembedding "
         "last: M = unembed @ w_o @ w_v @ embed.T, whose small twin is "
         "w_v @ embed.T @ unembed @ w_o; yours swaps embed and unembed.",
         lambda: _ratio(torch.linalg.eigvals(w_v @ unembed.T @ embed @ w_o))),
    ]


def _rotation_head(vocab: int, d_model: int) -> tuple[Tensor, Tensor, Tensor]:
    """A head that turns token 0 into token 1 and token 1 into minus token 0.

    Returns ``(w_v, w_o, embed)`` with one-hot embeddings: the small matrix is the
    rotation ``[[0, -1], [1, 0]]``, eigenvalues ``±i``, trace 0, score 0.
    """
    embed = torch.eye(vocab, d_model)  # (vocab, d_model): token j is basis vector j
    w_v = torch.eye(2, d_model)  # (2, d_model): reads features 0 and 1
    w_o = torch.zeros(d_model, 2)  # (d_model, 2)
    w_o[0, 1], w_o[1, 0] = -1.0, 1.0
    return w_v, w_o, embed


def check_copying_score(copying_fn: Callable) -> None:
    """Check ``copying_fn(w_v, w_o, embed, unembed) -> float``: a head's copying score.

    The exercise ``induction-heads-ex3`` of the chapter ``induction-heads``: for one head
    with value projection ``w_v`` ``(d_head, d_model)`` and output columns ``w_o``
    ``(d_model, d_head)``, embeddings ``embed`` and unembedding ``unembed``
    ``(vocab, d_model)``, the score is ``sum(Re λ) / sum(|λ|)`` over the eigenvalues of
    ``M = unembed @ w_o @ w_v @ embed.T``, computed from the small matrix
    ``w_v @ embed.T @ unembed @ w_o`` or from ``M`` itself (the vocabularies are small).
    The reference is :func:`attnbook.circuits.copying_score` without normalisations; any
    real number is accepted (a float, or a one-element tensor holding one).

    Checks a pure copier (``embed = unembed``, ``w_o = w_v.T``: +1), its opposite (-1), a
    random head, a rotation (eigenvalues ``±i``: 0), more random heads with tied and
    separate embeddings in float32, and float64 to float64 precision. Its hints name the
    trace over its absolute value, absolute values of the diagonal, singular values, the
    absolute real parts, an unweighted mean, ``eigvalsh``, the embeddings left out, embed
    and unembed swapped, a complex result, float32 arithmetic on float64 inputs, and
    inputs changed in place.
    """
    copying_fn = require_function("copying_fn", copying_fn)
    checks = Checks("check_copying_score")
    name = name_of(copying_fn)

    def run(w_v: Tensor, w_o: Tensor, embed: Tensor, unembed: Tensor) -> None:
        call = f"{name}(w_v, w_o, embed, unembed)"
        try:
            got = call_reader(call, copying_fn, w_v.clone(), w_o.clone(), embed.clone(),
                              unembed.clone(), names=("w_v", "w_o", "embed", "unembed"))
        except Mismatch as changed:  # call_reader's only Mismatch: an argument changed
            changed.hint = ("work out of place: the weights belong to the model; compute new "
                            "tensors from them.")
            raise
        note = (f"w_v {tuple(w_v.shape)}, w_o {tuple(w_o.shape)}, embed "
                f"{tuple(embed.shape)}, unembed {tuple(unembed.shape)}, {w_v.dtype}")
        if (isinstance(got, Tensor) and got.is_complex()) or (
                isinstance(got, numbers.Complex) and not isinstance(got, numbers.Real)):
            raise Mismatch(f"{call} returned a complex number, expected a real one", [note],
                           "eigenvalues are complex in general, but the score is real: take "
                           "the real parts, `eigenvalues.real.sum()`, over the moduli, "
                           "`eigenvalues.abs().sum()`, and return `float(...)`.")
        got = as_scalar(call, got, "return one number, the score, as a float: "
                                   "`float(eigenvalues.real.sum() / eigenvalues.abs().sum())`.")
        expected = copying_score(w_v, w_o, embed, unembed)
        atol, rtol = _COPY_TOLERANCE[w_v.dtype]
        close_in_float32 = abs(got - expected) <= 1e-4
        expect_number(call, got, expected, atol=atol, rtol=rtol,
                      hint=_FLOAT32_HINT if w_v.dtype == torch.float64 and close_in_float32
                      else _COPY_HINT, nan_hint=_COPY_NAN_HINT,
                      mistakes=_copying_mistakes(w_v, w_o, embed, unembed), note=note)

    embed, w_v = randn(12, 8, seed=601), randn(3, 8, seed=602)
    with checks.case("a pure copier: embed = unembed (12, 8), w_v (3, 8), w_o = w_v.T: "
                     "score +1"):
        run(w_v, w_v.T.contiguous(), embed, embed)
    with checks.case("its opposite: w_o = -w_v.T, score -1"):
        run(w_v, -w_v.T.contiguous(), embed, embed)
    with checks.case("a random head, separate embed and unembed (10, 8), w_v (2, 8)"):
        run(randn(2, 8, seed=695), randn(8, 2, seed=696), randn(10, 8, seed=697),
            randn(10, 8, seed=698))
    with checks.case("a rotation: token 0 -> token 1 -> minus token 0, one-hot embeddings "
                     "(6, 4), w_v (2, 4): eigenvalues ±i, score 0"):
        w_v_turn, w_o_turn, one_hot = _rotation_head(6, 4)
        run(w_v_turn, w_o_turn, one_hot, one_hot)
    with checks.case("a random head, separate embed and unembed (50, 16), w_v (4, 16)"):
        run(randn(4, 16, seed=621), randn(16, 4, seed=622), randn(50, 16, seed=623),
            randn(50, 16, seed=624))
    with checks.case("a random head with tied embeddings (40, 12), w_v (6, 12)"):
        tied = randn(40, 12, seed=633)
        run(randn(6, 12, seed=631), randn(12, 6, seed=632), tied, tied)
    with checks.case("d_head = d_model: w_v (8, 8), embed and unembed (30, 8)"):
        run(randn(8, 8, seed=641), randn(8, 8, seed=642), randn(30, 8, seed=643),
            randn(30, 8, seed=644))
    with checks.case("float64 inputs, embed and unembed (200, 32), w_v (8, 32): to float64 "
                     "precision"):
        run(*(randn(*shape, seed=650 + i, dtype=torch.float64) for i, shape in
              enumerate([(8, 32), (32, 8), (200, 32), (200, 32)])))
    checks.passed()
