"""Exercises whisper-ex1, whisper-ex4 and whisper-ex5: dynamic time warping, the cheapest
monotone path through a cost matrix, as Whisper uses it to time words; cross-attention run
as a decoder runs it, the sound's keys and values computed once; and the rows of a
cross-attention map that predict each word.

Replace each `raise NotImplementedError(...)` below with your code, then run
`.venv/bin/python -m pytest exercises/whisper` from the repository root.
"""

from __future__ import annotations

import numpy as np
import torch


def my_dtw(cost: np.ndarray) -> list[tuple[int, int]]:
    """The cheapest monotone path through a cost matrix.

    Args:
        cost: ``(n, m)`` floats: row ``i`` a text token, column ``j`` an audio position.

    Returns:
        The path as ``(row, column)`` pairs from ``(0, 0)`` to ``(n - 1, m - 1)``, each
        step one row down, one column right, or both, whose cells cost as little in total
        as any such path.
    """
    raise NotImplementedError(
        "implement my_dtw(cost): fill total[i, j], the cheapest cost of a path ending at "
        "(i, j), then walk back from the last cell (see exercises/whisper/README.md)"
    )


def my_cross_steps(cross, sound: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
    """Cross-attention as a decoder runs it: one text position a step.

    Args:
        cross: an attnbook ``MultiHeadAttention`` (a decoder block's cross-attention):
            ``cross.q_proj``, ``cross.k_proj``, ``cross.v_proj`` and ``cross.out_proj``
            are its projections, ``cross.num_heads`` and ``cross.d_head`` its heads.
        sound: ``(B, S, d_model)``: the encoder's output, one vector per audio position.
        text: ``(B, T, d_model)``: the decoder's vectors where cross-attention reads them,
            one text position per step.

    Returns:
        ``(B, T, d_model)``: the output of each step, in order. The sound's keys and values
        are computed once, before the first step; step ``t`` projects ``text[:, t:t + 1]``
        into queries and attends to every audio position.
    """
    raise NotImplementedError(
        "implement my_cross_steps(cross, sound, text): project the sound into keys and "
        "values once, then at each step project one text position into queries and attend "
        "to every audio position (see exercises/whisper/README.md)"
    )


def my_word_rows(prompt_length: int, pieces: list[list[int]]) -> list[list[int]]:
    """The rows of a cross-attention map that predict each word's tokens.

    Args:
        prompt_length: the number of prompt tokens, the map's first rows.
        pieces: each word's token ids, one list a word, in order after the prompt.

    Returns:
        One list of row indices a word: the rows whose queries predict its tokens.
    """
    raise NotImplementedError(
        "implement my_word_rows(prompt_length, pieces): row r predicts the token at "
        "position r + 1 (see exercises/whisper/README.md)"
    )
