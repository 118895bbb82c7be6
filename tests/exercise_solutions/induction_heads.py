"""Solutions of the chapter `induction-heads`, written from scratch in plain torch.

exercises/induction_heads holds all three checked exercises of the chapter:
prefix_matching_score (induction-heads-ex1), mean_ablate (induction-heads-ex2) and
copying_score (induction-heads-ex3).
"""

from __future__ import annotations

import torch


def prefix_matching_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """(..., L, L) -> (...): the mean over queries t = T .. L-1 of the weight on key
    t - T + 1, the token after the earlier occurrence of the query's own token."""
    L = weights.shape[-1]
    queries = torch.arange(period, L)  # (L - T,): the second copy
    keys = queries - period + 1  # (L - T,): the token after the earlier occurrence
    return weights[..., queries, keys].mean(dim=-1)  # (...)


def mean_ablate(merged: torch.Tensor, head: int, num_heads: int) -> torch.Tensor:
    """(B, L, h * d_head) -> the same, head `head`'s features replaced by their mean over
    the batch and the positions; merged itself is not changed."""
    d_head = merged.shape[-1] // num_heads
    first, last = head * d_head, (head + 1) * d_head
    mean = merged[:, :, first:last].mean(dim=(0, 1), keepdim=True)  # (1, 1, d_head)
    out = merged.clone()
    out[:, :, first:last] = mean  # broadcast to every sequence and position
    return out  # (B, L, h * d_head)


def copying_score(w_v: torch.Tensor, w_o: torch.Tensor, embed: torch.Tensor,
                  unembed: torch.Tensor) -> float:
    """sum(Re λ) / sum(|λ|) over the eigenvalues of M = U W_O W_V E^T, from the
    (d_head, d_head) matrix W_V E^T U W_O, which has the same non-zero ones."""
    w_v, w_o, embed, unembed = (t.to(torch.float64) for t in (w_v, w_o, embed, unembed))
    small = w_v @ embed.T @ unembed @ w_o  # (d_head, d_head)
    eigenvalues = torch.linalg.eigvals(small)  # (d_head,), complex
    return (eigenvalues.real.sum() / eigenvalues.abs().sum()).item()
