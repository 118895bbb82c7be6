"""What `make test` costs (`make bench`): its slowest tests and each chapter's runs.

`make test` records what it measured in ``_build/suite-cost.json``: every test's seconds, and
for each chapter its execution in the strict build and its runs in the portability
environments (``tests/conftest.py``). This prints that record: the slowest tests, then a table
of the chapters, slowest first, with the share of the chapter runs each one takes.

A chapter that is new, or whose source changed since the record, has no true figure in it:
when there is a record, this runs such a chapter now, in each portability environment, one
after the other, and prints its times beside the others, so a chapter's cost is visible
before it lands (``--no-run`` skips that).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from chapter_runner import notebook_chapters, outcome  # noqa: E402
from conftest import PORTABLE, SUITE_COST  # noqa: E402

SLOWEST = 15


def digest(chapter: Path) -> str:
    return hashlib.sha256(chapter.read_bytes()).hexdigest()


def stale_chapters(record: dict) -> list[Path]:
    """The chapters the record has no runs of, or whose source changed since it was made."""
    return [chapter for chapter in notebook_chapters()
            if record.get("digests", {}).get(chapter.stem) != digest(chapter)]


def run_now(chapters: list[Path]) -> dict[str, dict[str, float]]:
    """Each chapter's seconds in each portability environment, measured here and now."""
    runs: dict[str, dict[str, float]] = {}
    for chapter in chapters:
        runs[chapter.stem] = {}
        for environment in PORTABLE:
            seconds, problem = outcome(chapter, environment)
            runs[chapter.stem][environment] = round(seconds, 1)
            verdict = "ok" if problem is None else "FAILED"
            print(f"  ran {chapter.stem} in {environment}: {seconds:.1f} s, {verdict}",
                  flush=True)
    return runs


def chapter_table(record: dict, fresh: dict[str, dict[str, float]]) -> list[str]:
    runs = {**record.get("chapter_runs", {}), **fresh}
    build = record.get("build_execution", {})
    short = [f"run {index + 1}" for index in range(len(PORTABLE))]
    lines = [f"{'chapter':28} {'build':>7} " + " ".join(f"{name:>7}" for name in short)
             + f" {'runs':>7} {'share':>6}"]
    totals = {name: sum(by_env.values()) for name, by_env in runs.items()}
    everything = sum(totals.values()) or 1.0
    for name in sorted(runs, key=lambda n: -totals[n]):
        built = f"{build[name]:7.1f}" if name in build else f"{'cached':>7}"
        cells = " ".join(f"{runs[name].get(env, float('nan')):7.1f}" for env in PORTABLE)
        mark = "  (measured now)" if name in fresh else ""
        lines.append(f"{name:28} {built} {cells} {totals[name]:7.1f} "
                     f"{totals[name] / everything:6.1%}{mark}")
    lines.append(f"{'total':28} {sum(build.values()):7.1f} "
                 + " ".join(f"{sum(r.get(env, 0.0) for r in runs.values()):7.1f}"
                            for env in PORTABLE)
                 + f" {everything:7.1f}")
    lines.append("runs: " + "; ".join(f"{label} = {env}"
                                      for label, env in zip(short, PORTABLE, strict=True)))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-run", action="store_true",
                        help="print the record only; do not run new or changed chapters")
    args = parser.parse_args(argv)
    if not SUITE_COST.is_file():
        print(f"No record of a full test run yet ({SUITE_COST}): `make test` writes it.")
        record: dict = {}
    else:
        record = json.loads(SUITE_COST.read_text())
        minutes = record["session_seconds"] / 60
        print(f"The last `make test` finished {record['finished']}: {minutes:.1f} min of "
              f"pytest, {len(record['tests'])} tests, on {record['cores']} cores.")
        print(f"Its {SLOWEST} slowest tests (seconds, set-up and tear-down included):")
        for node, seconds in record["tests"][:SLOWEST]:
            print(f"  {seconds:7.1f}  {node}")
        timeline = record.get("timeline", {})
        if {"build", "runs"} <= set(timeline):
            print(f"The strict build ended {timeline['build']:.0f} s into the session, the "
                  f"last chapter run {timeline['runs']:.0f} s in, the session "
                  f"{record['session_seconds']:.0f} s in.")
    # With no record at all, every chapter is "new": running them all here would take as long
    # as the test suite's chapter runs, so that is left to `make test`.
    stale = stale_chapters(record) if record else []
    fresh: dict[str, dict[str, float]] = {}
    if stale:
        names = ", ".join(chapter.stem for chapter in stale)
        if args.no_run:
            print(f"New or changed since the record, not run (--no-run): {names}")
        else:
            print(f"New or changed since the record, running them now: {names}", flush=True)
            fresh = run_now(stale)
    print("Chapter runs (seconds): the strict build, then each portability environment "
          "(run in the background, one at a time during the build, two after it)")
    for line in chapter_table(record, fresh):
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
