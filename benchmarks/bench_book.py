"""The book's build figures (`make bench`): cold build, no-change rebuild, per-chapter time.

Builds the whole book strictly twice into a fresh temporary folder: the first build executes
every chapter (cold cache), the second changes nothing and should execute nothing. Prints
both wall times, their ratio (goal: the no-change rebuild takes at most 0.15 of the cold
build) and each chapter's execution time as myst-nb reports it, slowest first.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_RATIO = 0.15
EXECUTED = re.compile(r"book/([\w-]+)\.md: Executed notebook in ([\d.]+) seconds")


def build(output: Path) -> tuple[float, str]:
    """One strict build into ``output``; its wall time and log."""
    command = [str(Path(sys.executable).with_name("jupyter-book")), "build", ".", "-W", "-n",
               "--keep-going", "--path-output", str(output)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log = result.stdout + result.stderr
    if result.returncode != 0:
        sys.exit(f"the build failed:\n{log[-4000:]}")
    return seconds, log


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="attnbook-bench-") as folder:
        cold, cold_log = build(Path(folder))
        again, again_log = build(Path(folder))
    chapters = sorted(((name, float(s)) for name, s in EXECUTED.findall(cold_log)),
                      key=lambda item: -item[1])
    ratio = again / cold
    print(f"cold build (every chapter executed): {cold:7.1f} s")
    print(f"no-change rebuild:                   {again:7.1f} s")
    verdict = "ok" if ratio <= GOAL_RATIO else "MISSED"
    print(f"ratio:                               {ratio:7.3f}   goal <= {GOAL_RATIO} {verdict}")
    re_executed = EXECUTED.findall(again_log)
    print(f"chapters re-executed by the rebuild: {len(re_executed)}")
    print("chapter execution times, slowest first:")
    for name, seconds in chapters:
        print(f"  {name:28} {seconds:6.1f} s")
    print(f"  {'total':28} {sum(s for _, s in chapters):6.1f} s")
    return 0 if ratio <= GOAL_RATIO and not re_executed else 1


if __name__ == "__main__":
    raise SystemExit(main())
