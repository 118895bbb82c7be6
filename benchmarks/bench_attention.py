"""attnbook against PyTorch, measured side by side in one process (`make bench`).

Setting: batch 8, 8 heads, length 256, width 256 (head width 32), causal mask, float32 on the
CPU. Each case is timed forward + backward; ours and PyTorch's run alternately, and the
reported time is the median over rounds, so drift in the machine's speed hits both alike.

Goals: our MultiHeadAttention within 1.15x of nn.MultiheadAttention, `attention` within 1.10x
of F.scaled_dot_product_attention on the fused path and within 1.5x when it also returns the
weights (which SDPA cannot). The last row compares the weights path with PyTorch's own unfused
math backend, which also materialises the (L, S) weights: what is achievable without fusing.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnbook.attention import attention
from attnbook.layers import MultiHeadAttention
from attnbook.masks import causal_mask
from attnbook.timing import time_in_turns

B, H, L, D = 8, 8, 256, 256


def median_seconds(step: Callable[[], None], other: Callable[[], None], rounds: int,
                   inner: int) -> tuple[float, float]:
    """Median time per call of ``step`` and ``other``, run in turns."""
    times = time_in_turns({"ours": step, "theirs": other}, rounds=rounds, inner=inner,
                          warmup=3)
    return times["ours"], times["theirs"]


def forward_backward(fn: Callable[[], torch.Tensor], *tensors: torch.Tensor
                     ) -> Callable[[], None]:
    def step() -> None:
        for t in tensors:
            t.grad = None
        fn().sum().backward()
    return step


def cases() -> list[tuple[str, Callable[[], None], Callable[[], None], float]]:
    torch.manual_seed(0)
    mask = causal_mask(L)
    x = torch.randn(B, L, D, requires_grad=True)
    reference = nn.MultiheadAttention(D, H, batch_first=True)
    ours = MultiHeadAttention.from_torch(reference)
    polarity = ~mask  # nn.MultiheadAttention: True = may NOT attend

    q, k, v = (torch.randn(B, H, L, D // H, requires_grad=True) for _ in range(3))
    return [
        (
            "MultiHeadAttention, weights returned",
            forward_backward(lambda: ours(x, mask=mask).output, x),
            forward_backward(lambda: reference(x, x, x, attn_mask=polarity, need_weights=True,
                                               average_attn_weights=False)[0], x),
            1.15,
        ),
        (
            "MultiHeadAttention, no weights",
            forward_backward(lambda: ours(x, mask=mask, return_weights=False).output, x),
            forward_backward(lambda: reference(x, x, x, attn_mask=polarity,
                                               need_weights=False)[0], x),
            1.15,
        ),
        (
            "attention, fused path (return_weights=False)",
            forward_backward(lambda: attention(q, k, v, mask, return_weights=False).output,
                             q, k, v),
            forward_backward(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                             q, k, v),
            1.10,
        ),
        (
            "attention, with weights",
            forward_backward(lambda: attention(q, k, v, mask).output, q, k, v),
            forward_backward(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                             q, k, v),
            1.50,
        ),
        (
            # What materialising the (L, S) weights costs in PyTorch itself: its own
            # unfused reference backend, which the weights path is measured against here.
            "attention, with weights, vs SDPA math backend",
            forward_backward(lambda: attention(q, k, v, mask).output, q, k, v),
            forward_backward(lambda: math_sdpa(q, k, v, mask), q, k, v),
            1.10,
        ),
    ]


def math_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
              ) -> torch.Tensor:
    """PyTorch's SDPA forced onto its unfused math backend."""
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--inner", type=int, default=3)
    args = parser.parse_args()

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"B={B}, h={H}, L={L}, d_model={D}, causal mask, float32, forward + backward")
    print(f"{'case':48} {'attnbook':>10} {'torch':>10} {'ratio':>7} {'goal':>6}")
    missed = 0
    for name, ours, theirs, goal in cases():
        ours_s, theirs_s = median_seconds(ours, theirs, args.rounds, args.inner)
        ratio = ours_s / theirs_s
        verdict = "ok" if ratio <= goal else "MISSED"
        missed += ratio > goal
        print(f"{name:48} {ours_s * 1e3:8.2f}ms {theirs_s * 1e3:8.2f}ms {ratio:6.2f}x "
              f"<={goal:.2f}x {verdict}")
    return 0 if not missed else 1


if __name__ == "__main__":
    raise SystemExit(main())
