"""Importing the package is cheap: heavy libraries load only with the module that needs them."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys, time
start = time.perf_counter()
import attnbook
seconds = time.perf_counter() - start
heavy = sorted(m for m in ("torch", "matplotlib", "transformers") if m in sys.modules)
print(json.dumps({"seconds": seconds, "heavy": heavy}))
"""


def test_import_attnbook_is_fast_and_light() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["heavy"] == [], f"import attnbook loaded {measured['heavy']}"
    assert measured["seconds"] < 1.0, f"import attnbook took {measured['seconds']:.2f} s"


def test_submodules_load_on_first_use() -> None:
    probe = ("import sys, attnbook; attnbook.masks.causal_mask(3); "
             "print('torch' in sys.modules, 'transformers' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]
