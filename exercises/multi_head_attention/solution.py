"""Exercise multi-head-attention-ex3: split the features into heads and merge them back.

Replace the `raise NotImplementedError(...)` lines below with your code, then run
`.venv/bin/python -m pytest exercises/multi_head_attention` from the repository root.
"""

from __future__ import annotations

import torch


def my_split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(B, L, d_model)`` -> ``(B, h, L, d_head)``; head ``i`` gets features
    ``i·d_head .. (i+1)·d_head - 1`` of every token."""
    raise NotImplementedError(
        "implement my_split_heads(x, num_heads): (B, L, d_model) -> (B, h, L, d_head), head "
        "i holding features i*d_head .. (i+1)*d_head - 1 of every token "
        "(see exercises/multi_head_attention/README.md)"
    )


def my_merge_heads(heads: torch.Tensor) -> torch.Tensor:
    """``(B, h, L, d_head)`` -> ``(B, L, h·d_head)``, the inverse of :func:`my_split_heads`."""
    raise NotImplementedError(
        "implement my_merge_heads(heads): (B, h, L, d_head) -> (B, L, h*d_head), the inverse "
        "of my_split_heads"
    )
