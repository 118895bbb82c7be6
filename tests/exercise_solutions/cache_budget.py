"""Solutions of the chapter `cache-budget`, written from scratch in plain torch.

exercises/cache_budget holds the chapter's two checked exercises: quantize_keys
(cache-budget-ex1) and evict_one (cache-budget-ex3).
"""

from __future__ import annotations

import torch


def quantize_keys(keys: torch.Tensor, bits: int, group: int) -> tuple[torch.Tensor, int]:
    """Keys (t, C) rounded per channel in blocks of `group` tokens, and the bytes stored."""
    t, channels = keys.shape
    blocks = keys.T.unflatten(-1, (t // group, group))  # (C, blocks, group)
    low = blocks.amin(-1, keepdim=True)
    step = (blocks.amax(-1, keepdim=True) - low) / (2**bits - 1)
    safe = torch.where(step > 0, step, torch.ones_like(step))
    codes = torch.where(step > 0, ((blocks - low) / safe).round(), torch.zeros_like(blocks))
    rounded = (codes * step + low).flatten(-2).T  # back to (t, C)
    code_bytes = -(-t * channels * bits // 8)  # packed, rounded up to whole bytes
    scale_bytes = 2 * 2 * channels * (t // group)  # a 16-bit minimum and step per block
    return rounded, code_bytes + scale_bytes


def evict_one(received: torch.Tensor, positions: torch.Tensor, recent: int,
              sinks: int) -> int:
    """The position a heavy-hitter cache one over its budget evicts."""
    newest = int(positions[-1])
    candidates = [i for i, p in enumerate(positions.tolist())
                  if p >= sinks and newest - p >= recent]
    least = min(candidates, key=lambda i: float(received[i]))
    return int(positions[least])
