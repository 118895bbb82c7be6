"""Exercises induction-heads-ex1, -ex2 and -ex3: score, ablate and read the weights of heads.

Replace the `raise NotImplementedError(...)` lines below with your code, then run
`.venv/bin/python -m pytest exercises/induction_heads` from the repository root.
"""

from __future__ import annotations

import torch


def prefix_matching_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """The mean weight on the token after the earlier occurrence of the query's own token.

    Args:
        weights: ``(..., L, L)`` self-attention weights on ``period = T`` random tokens
            followed by the same tokens again, ``T < L <= 2T``.
        period: the length ``T`` of one copy.

    Returns:
        ``(...)``: for each map, the mean over the queries ``t = T .. L-1`` of the weight
        on key ``t - T + 1``. ``weights`` is not changed.
    """
    raise NotImplementedError(
        "implement prefix_matching_score(weights, period): (..., L, L) -> (...), the mean "
        "over the queries t = T .. L-1 of weights[..., t, t - T + 1] "
        "(see exercises/induction_heads/README.md)"
    )


def mean_ablate(merged: torch.Tensor, head: int, num_heads: int) -> torch.Tensor:
    """One head's output replaced by its mean over the batch and the positions.

    Args:
        merged: ``(B, L, num_heads * d_head)``, the heads' outputs side by side as they
            enter a layer's output projection; head ``i`` holds features
            ``i * d_head .. (i + 1) * d_head - 1``.
        head: the head to ablate, ``0 .. num_heads - 1``.
        num_heads: the number of heads side by side.

    Returns:
        A new tensor of ``merged``'s shape: head ``head``'s features replaced by their mean
        over ``B`` and ``L``, every other feature unchanged. ``merged`` is not changed.
    """
    raise NotImplementedError(
        "implement mean_ablate(merged, head, num_heads): a copy of merged (B, L, h*d_head) "
        "whose features head*d_head .. (head+1)*d_head - 1 are replaced by their mean over "
        "the batch and the positions"
    )


def copying_score(w_v: torch.Tensor, w_o: torch.Tensor, embed: torch.Tensor,
                  unembed: torch.Tensor) -> float:
    """The eigenvalue copying score of one head along the direct path to the logits.

    Args:
        w_v: ``(d_head, d_model)``, the head's value projection.
        w_o: ``(d_model, d_head)``, the head's columns of the output projection.
        embed: ``(vocab, d_model)``, the token embeddings ``E``.
        unembed: ``(vocab, d_model)``, the unembedding ``U``.

    Returns:
        ``sum(Re λ) / sum(|λ|)`` over the eigenvalues ``λ`` of
        ``M = unembed @ w_o @ w_v @ embed.T``, as a float: +1 for a pure copier, -1 for
        its opposite.
    """
    raise NotImplementedError(
        "implement copying_score(w_v, w_o, embed, unembed): sum(Re λ) / sum(|λ|) over the "
        "eigenvalues of unembed @ w_o @ w_v @ embed.T, from the small (d_head, d_head) "
        "matrix w_v @ embed.T @ unembed @ w_o, as a float"
    )
