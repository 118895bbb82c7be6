"""Blockwise attention against full attention and PyTorch's fused kernel: memory and time.

Setting: batch 1, 8 heads, head width 64, float32 on the CPU, no mask, forward pass only
(inference), for L = S in 512, 1024, 2048, 4096, 8192. Three ways to get the same output:

- full: ``attention(q, k, v, return_weights=True)``, which holds the (8, L, L) scores and
  weights (2 GiB each at L = 8192);
- blockwise: ``blockwise_attention(q, k, v)``, the online softmax over tiles;
- fused: ``F.scaled_dot_product_attention(q, k, v)``, PyTorch's C++ kernel.

Peak memory is ``attnbook.efficient.peak_memory_bytes``: the most that torch's allocator
holds at once during the call, beyond the inputs, from the profiler's record of every
allocation (deterministic, so measured once). Time is the median over rounds in which the
three run in turn, so a change in the machine's speed hits all alike; fewer rounds at large
L keep the run to a few minutes.

The OpenMP runtime is told to let idle threads sleep (``OMP_WAIT_POLICY=PASSIVE``, unless
set already): on a machine shared with other jobs, threads that spin-wait at each of the
thousands of small kernels of a Python loop fight the neighbours for the cores, and the
measurement would show the machine's load rather than the algorithm.

Then causal decoding, token by token, of a sequence of 512 positions with the same heads: with
a key/value cache (``KVCache`` and ``decode_step``, one query row per step) against recomputing
full causal attention over the prefix at every step. Both call the fused kernel for the
attention itself, so the comparison is between the algorithms.

Goals, at the largest L: blockwise peak memory at most 0.1x full attention's, and blockwise
time within 3x of the fused kernel's; decoding with the cache at least 3x faster than
recomputing. The exit code is 1 if a goal is missed. (The book's chapter measures the same
things on the machine that builds it and reports them, but asserts no timing: a timing is a
fact about one machine.)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch loads OpenMP

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attnbook.attention import attention  # noqa: E402
from attnbook.efficient import (  # noqa: E402
    DEFAULT_BLOCK_SIZE,
    KVCache,
    blockwise_attention,
    decode_step,
    peak_memory_bytes,
)
from attnbook.masks import causal_mask  # noqa: E402
from attnbook.timing import time_in_turns  # noqa: E402

B, H, E = 1, 8, 64
LENGTHS = (512, 1024, 2048, 4096, 8192)
MEMORY_GOAL = 0.1  # blockwise peak memory / full attention's
TIME_GOAL = 3.0  # blockwise time / fused kernel's
DECODE_L = 512
DECODE_GOAL = 3.0  # recomputing time / cached decoding time, at DECODE_L
MiB = 2**20


def rounds_for(L: int) -> int:
    """Timed rounds at length ``L``: fewer where one call takes seconds."""
    return 7 if L <= 1024 else 5 if L <= 2048 else 3 if L <= 4096 else 2


def methods(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int
            ) -> dict[str, Callable[[], torch.Tensor]]:
    return {
        "full": lambda: attention(q, k, v, return_weights=True).output,
        "blockwise": lambda: blockwise_attention(q, k, v, block_size=block_size).output,
        "fused": lambda: F.scaled_dot_product_attention(q, k, v),
    }


def measure(L: int, block_size: int) -> tuple[dict[str, int], dict[str, float]]:
    """Peak memory (bytes) and median time (seconds) of each method at length ``L``."""
    gen = torch.Generator().manual_seed(L)
    q, k, v = (torch.randn(B, H, L, E, generator=gen) for _ in range(3))  # (B, h, L, E)
    fns = methods(q, k, v, block_size)

    peaks, outputs = {}, {}
    for name, fn in fns.items():  # also the warm-up; one method's memory alive at a time
        peaks[name] = peak_memory_bytes(lambda fn=fn, name=name: outputs.update({name: fn()}))
    for name in ("full", "blockwise"):
        error = (outputs[name] - outputs["fused"]).abs().max().item()
        if error > 1e-4:
            raise AssertionError(f"{name} differs from the fused kernel by {error} at L={L}")
    outputs.clear()

    return peaks, time_in_turns(fns, rounds=rounds_for(L), warmup=0)  # warmed up above


def decode_seconds(L: int, rounds: int = 3) -> dict[str, float]:
    """Median time to decode ``L`` positions with a KV cache and by recomputing."""
    gen = torch.Generator().manual_seed(L + 1)
    q, k, v = (torch.randn(B, H, L, E, generator=gen) for _ in range(3))  # (B, h, L, E)

    def cached() -> None:
        cache = KVCache(max_len=L)
        for t in range(L):
            decode_step(q[..., t:t + 1, :], k[..., t:t + 1, :], v[..., t:t + 1, :], cache)

    def recompute() -> None:
        for t in range(1, L + 1):
            attention(q[..., :t, :], k[..., :t, :], v[..., :t, :], causal_mask(t),
                      return_weights=False)

    with torch.no_grad():
        return time_in_turns({"cache": cached, "recompute": recompute}, rounds=rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}; B={B}, h={H}, E=Ev={E}, "
          f"no mask, float32, forward only; block_size={args.block_size}")
    print(f"{'L':>6} | {'peak memory (MiB)':^31} | {'median time (ms)':^31} | "
          f"{'blockwise / full':>16} {'blockwise / fused':>17}")
    print(f"{'':>6} | {'full':>9} {'blockwise':>10} {'fused':>10} | "
          f"{'full':>9} {'blockwise':>10} {'fused':>10} | {'memory':>16} {'time':>17}")
    for L in args.lengths:
        peaks, times = measure(L, args.block_size)
        memory_ratio = peaks["blockwise"] / peaks["full"]
        time_ratio = times["blockwise"] / times["fused"]
        print(f"{L:>6} | {peaks['full'] / MiB:>9.1f} {peaks['blockwise'] / MiB:>10.1f} "
              f"{peaks['fused'] / MiB:>10.1f} | {times['full'] * 1e3:>9.1f} "
              f"{times['blockwise'] * 1e3:>10.1f} {times['fused'] * 1e3:>10.1f} | "
              f"{memory_ratio:>15.3f}x {time_ratio:>16.2f}x", flush=True)

    L = args.lengths[-1]
    memory_ok = memory_ratio <= MEMORY_GOAL
    time_ok = time_ratio <= TIME_GOAL
    print(f"goal at L={L}: blockwise memory <= {MEMORY_GOAL}x full attention's: "
          f"{memory_ratio:.3f}x {'ok' if memory_ok else 'MISSED'}")
    print(f"goal at L={L}: blockwise time <= {TIME_GOAL}x the fused kernel's: "
          f"{time_ratio:.2f}x {'ok' if time_ok else 'MISSED'}")

    decode = decode_seconds(DECODE_L)
    speedup = decode["recompute"] / decode["cache"]
    decode_ok = speedup >= DECODE_GOAL
    print(f"decoding {DECODE_L} positions: {decode['cache'] * 1e3:.0f} ms with a KV cache, "
          f"{decode['recompute'] * 1e3:.0f} ms recomputing")
    print(f"goal: the cache >= {DECODE_GOAL}x faster than recomputing: "
          f"{speedup:.1f}x {'ok' if decode_ok else 'MISSED'}")
    return 0 if memory_ok and time_ok and decode_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
