"""Solutions of the chapter `whisper`, written from scratch in plain NumPy and torch.

exercises/whisper holds the chapter's checked exercises: my_dtw (whisper-ex1),
my_cross_steps (whisper-ex4) and my_word_rows (whisper-ex5).
"""

from __future__ import annotations

import numpy as np
import torch


def my_dtw(cost) -> list[tuple[int, int]]:
    """The cheapest monotone path through cost (n, m), from (0, 0) to (n - 1, m - 1)."""
    cost = np.asarray(cost, dtype=float)
    n, m = cost.shape
    total = np.full((n, m), np.inf)
    for i in range(n):
        for j in range(m):
            before = [total[i - a, j - b] for a, b in ((1, 1), (1, 0), (0, 1))
                      if i - a >= 0 and j - b >= 0]
            total[i, j] = cost[i, j] + (min(before) if before else 0.0)
    path = [(n - 1, m - 1)]
    while path[-1] != (0, 0):
        i, j = path[-1]
        options = [(i - a, j - b) for a, b in ((1, 1), (1, 0), (0, 1))
                   if i - a >= 0 and j - b >= 0]
        path.append(min(options, key=lambda cell: total[cell]))
    return path[::-1]


def my_cross_steps(cross, sound: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
    """Cross-attention one text position a step, the sound's keys and values made once."""
    B, h, d_head = sound.shape[0], cross.num_heads, cross.d_head

    def heads(x: torch.Tensor) -> torch.Tensor:  # (B, n, h * d_head) -> (B, h, n, d_head)
        return x.reshape(B, x.shape[1], h, d_head).permute(0, 2, 1, 3)

    keys, values = heads(cross.k_proj(sound)), heads(cross.v_proj(sound))
    outputs = []
    for t in range(text.shape[1]):
        q = heads(cross.q_proj(text[:, t:t + 1]))  # (B, h, 1, d_head)
        weights = torch.softmax(q @ keys.transpose(-2, -1) / d_head**0.5, dim=-1)
        merged = (weights @ values).permute(0, 2, 1, 3).reshape(B, 1, h * d_head)
        outputs.append(cross.out_proj(merged))
    return torch.cat(outputs, dim=1)


def my_word_rows(prompt_length: int, pieces: list[list[int]]) -> list[list[int]]:
    """The rows that predict each word's tokens: one before each token's position."""
    rows, position = [], prompt_length
    for piece in pieces:
        rows.append([position + i - 1 for i in range(len(piece))])
        position += len(piece)
    return rows
