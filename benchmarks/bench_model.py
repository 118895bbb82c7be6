"""How long SmolLM2 takes to load (`make bench`): first conversion and warm loads.

A warm load is a fresh Python process that imports attnbook and calls
``load_model("smollm2")`` when the converted model is already in the cache folder: the
cost every chapter and test pays. Goal: at most 5 s (the median of three). With
``--cold``, the first load (dequantising the GGUF file into an empty cache) is timed too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

GOAL_SECONDS = 5.0
TIMED = (
    "import time; start = time.perf_counter()\n"
    "from attnbook.pretrained import load_model\n"
    "load_model('smollm2')\n"
    "print(time.perf_counter() - start)\n"
)


def load_seconds(cache: str | None = None) -> float:
    """One load of SmolLM2 in a fresh process, import of attnbook included."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if cache is not None:
        env["ATTNBOOK_CACHE"] = cache
    result = subprocess.run([sys.executable, "-c", TIMED], env=env, capture_output=True,
                            text=True)
    if result.returncode != 0:
        sys.exit(f"loading SmolLM2 failed:\n{result.stderr[-4000:]}")
    return float(result.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true",
                        help="also time the first load into an empty cache (about a minute)")
    args = parser.parse_args()
    if args.cold:
        with tempfile.TemporaryDirectory(prefix="attnbook-cache-") as folder:
            print(f"first load (dequantise and cache): {load_seconds(folder):6.1f} s")
    load_seconds()  # make sure the cache exists before timing warm loads
    warm = [load_seconds() for _ in range(3)]
    median = statistics.median(warm)
    verdict = "ok" if median <= GOAL_SECONDS else "MISSED"
    runs = ", ".join(f"{s:.1f}" for s in warm)
    print(f"warm load, fresh process:          {median:6.1f} s (median of {runs}; "
          f"goal <= {GOAL_SECONDS:.0f} s: {verdict})")
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
