"""Blockwise attention against full attention and PyTorch's fused kernel: memory and time.

Setting: batch 1, 8 heads, head width 64, float32 on the CPU, no mask. Three ways to get the
same output:

- full: ``attention(q, k, v, return_weights=True)``, which holds the (8, L, L) scores and
  weights (2 GiB each at L = 8192), and autograd keeps the weights for the backward pass;
- blockwise: ``blockwise_attention(q, k, v)``, the online softmax over tiles, whose backward
  pass recomputes each tile from the saved output and log-sum-exp;
- fused: ``F.scaled_dot_product_attention(q, k, v)``, PyTorch's C++ kernel.

Two parts, each measured side by side in one process:

- inference: the forward pass alone, for L = S in 512, 1024, 2048, 4096, 8192;
- training: forward and backward, ``torch.autograd.grad`` of the output (with a fixed random
  upstream gradient) with respect to q, k and v, for L = S in 1024, 2048, 4096, 8192.

Peak memory is ``attnbook.efficient.peak_memory_bytes``: the most that torch's allocator
holds at once during the call, beyond the inputs, from the profiler's record of every
allocation (deterministic, so measured once; that call is also the warm-up). Time is the median
over rounds in which the three run in turn (``attnbook.timing.time_in_turns``), so a change in
the machine's speed hits all alike; fewer rounds at large L keep the run to about six minutes
on two CPU cores (``--parts`` runs a subset). Full attention's training step at L = 8192 needs
about 6 GiB.

The OpenMP runtime is told to let idle threads sleep (``OMP_WAIT_POLICY=PASSIVE``, unless
set already): on a machine shared with other jobs, threads that spin-wait at each of the
thousands of small kernels of a Python loop fight the neighbours for the cores, and the
measurement would show the machine's load rather than the algorithm.

Then causal decoding, token by token, of a sequence of 512 positions with the same heads: with
a key/value cache (``KVCache`` and ``decode_step``, one query row per step) against recomputing
full causal attention over the prefix at every step. Both call the fused kernel for the
attention itself, so the comparison is between the algorithms.

Goals, at the largest L of each part: blockwise peak memory at most 0.1x full attention's, and
blockwise time within 3x of the fused kernel's; decoding with the cache at least 3x faster than
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
LENGTHS = {"inference": (512, 1024, 2048, 4096, 8192), "training": (1024, 2048, 4096, 8192)}
#: Largest difference from the fused kernel's result that counts as agreement (float32).
AGREEMENT = {"inference": 1e-4, "training": 1e-3}
MEMORY_GOAL = 0.1  # blockwise peak memory / full attention's
TIME_GOAL = 3.0  # blockwise time / fused kernel's
DECODE_L = 512
DECODE_GOAL = 3.0  # recomputing time / cached decoding time, at DECODE_L
MiB = 2**20

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def rounds_for(L: int) -> int:
    """Timed rounds at length ``L``: fewer where one call takes seconds."""
    return 7 if L <= 1024 else 5 if L <= 2048 else 3 if L <= 4096 else 2


def attends(block_size: int) -> dict[str, Attend]:
    """The three ways to compute the same attention output."""
    return {
        "full": lambda q, k, v: attention(q, k, v, return_weights=True).output,
        "blockwise": lambda q, k, v: blockwise_attention(q, k, v, block_size=block_size).output,
        "fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    }


def calls(part: str, L: int, block_size: int
          ) -> dict[str, Callable[[], tuple[torch.Tensor, ...]]]:
    """Zero-argument callables for ``part`` at length ``L``: the output, or the gradients."""
    gen = torch.Generator().manual_seed(L)
    q, k, v = (torch.randn(B, H, L, E, generator=gen) for _ in range(3))  # (B, h, L, E)
    if part == "inference":
        return {name: (lambda attend=attend: (attend(q, k, v),))
                for name, attend in attends(block_size).items()}
    upstream = torch.randn(B, H, L, E, generator=gen)  # dLoss/dOutput, (B, h, L, Ev)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    return {name: (lambda attend=attend: torch.autograd.grad(attend(q, k, v), (q, k, v),
                                                             upstream))
            for name, attend in attends(block_size).items()}


def measure(part: str, L: int, block_size: int
            ) -> tuple[dict[str, int], dict[str, float]]:
    """Peak memory (bytes) and median time (seconds) of each method at length ``L``."""
    fns = calls(part, L, block_size)
    peaks, results = {}, {}
    for name, fn in fns.items():  # also the warm-up; one method's memory alive at a time
        peaks[name] = peak_memory_bytes(lambda fn=fn, name=name: results.update({name: fn()}))
    for name in ("full", "blockwise"):
        error = max((ours - theirs).abs().max().item()
                    for ours, theirs in zip(results[name], results["fused"], strict=True))
        if error > AGREEMENT[part]:
            raise AssertionError(f"{part}: {name} differs from the fused kernel by {error} "
                                 f"at L={L}")
    results.clear()
    return peaks, time_in_turns(fns, rounds=rounds_for(L), warmup=0)  # warmed up above


def run_part(part: str, lengths: list[int], block_size: int) -> bool:
    """Print the table of one part; True if its goals are met at the largest length."""
    what = "forward only" if part == "inference" else "forward + backward (dq, dk, dv)"
    print(f"\n{part}: {what}")
    print(f"{'L':>6} | {'peak memory (MiB)':^31} | {'median time (ms)':^31} | "
          f"{'blockwise / full':>16} {'blockwise / fused':>17}")
    print(f"{'':>6} | {'full':>9} {'blockwise':>10} {'fused':>10} | "
          f"{'full':>9} {'blockwise':>10} {'fused':>10} | {'memory':>16} {'time':>17}")
    for L in lengths:
        peaks, times = measure(part, L, block_size)
        memory_ratio = peaks["blockwise"] / peaks["full"]
        time_ratio = times["blockwise"] / times["fused"]
        print(f"{L:>6} | {peaks['full'] / MiB:>9.1f} {peaks['blockwise'] / MiB:>10.1f} "
              f"{peaks['fused'] / MiB:>10.1f} | {times['full'] * 1e3:>9.1f} "
              f"{times['blockwise'] * 1e3:>10.1f} {times['fused'] * 1e3:>10.1f} | "
              f"{memory_ratio:>15.3f}x {time_ratio:>16.2f}x", flush=True)

    memory_ok = memory_ratio <= MEMORY_GOAL
    time_ok = time_ratio <= TIME_GOAL
    print(f"{part} goal at L={L}: blockwise memory <= {MEMORY_GOAL}x full attention's: "
          f"{memory_ratio:.3f}x ({peaks['blockwise'] / MiB:.1f} MiB against "
          f"{peaks['full'] / MiB:.1f} MiB) {'ok' if memory_ok else 'MISSED'}")
    print(f"{part} goal at L={L}: blockwise time <= {TIME_GOAL}x the fused kernel's: "
          f"{time_ratio:.2f}x ({times['blockwise']:.2f} s against {times['fused']:.2f} s) "
          f"{'ok' if time_ok else 'MISSED'}", flush=True)
    return memory_ok and time_ok


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


def run_decode() -> bool:
    decode = decode_seconds(DECODE_L)
    speedup = decode["recompute"] / decode["cache"]
    decode_ok = speedup >= DECODE_GOAL
    print(f"\ndecoding {DECODE_L} positions: {decode['cache'] * 1e3:.0f} ms with a KV cache, "
          f"{decode['recompute'] * 1e3:.0f} ms recomputing")
    print(f"goal: the cache >= {DECODE_GOAL}x faster than recomputing: "
          f"{speedup:.1f}x {'ok' if decode_ok else 'MISSED'}")
    return decode_ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["inference", "training", "decode"],
                        choices=["inference", "training", "decode"])
    parser.add_argument("--lengths", type=int, nargs="+",
                        help="override the lengths of the inference and training parts")
    parser.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}; B={B}, h={H}, E=Ev={E}, "
          f"no mask, float32; block_size={args.block_size}")
    ok = True
    for part in ("inference", "training"):
        if part in args.parts:
            ok &= run_part(part, args.lengths or list(LENGTHS[part]), args.block_size)
    if "decode" in args.parts:
        ok &= run_decode()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
