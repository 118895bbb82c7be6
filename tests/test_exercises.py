"""The problem set in ``exercises/``: untouched stubs fail readably, reference solutions pass.

The whole set is run the way a reader runs all of it, ``python -m pytest exercises``, in a
subprocess, twice: once with every pristine stub and once with every reference solution
(``tests/exercise_solutions/<name>.py``). Each run works on a temporary copy of the folders
whose ``solution.py`` files are replaced, so nothing ever writes to a file in ``exercises/``;
its JUnit report tells each folder's outcome apart. (``exercises/README.md`` explains why the
folders' ``solution.py`` files never mix when pytest collects them together.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from xml.etree import ElementTree

import pytest
import torch
from torch import nn

from attnbook.efficient import KVCache
from attnbook.masks import causal_mask

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
SOLUTIONS = Path(__file__).resolve().parent / "exercise_solutions"

#: folder -> (chapter slug, exercise label, calls that must reach a NotImplementedError)
FOLDERS: dict[str, tuple[str, str, dict[str, Callable[[ModuleType], object]]]] = {
    "static_embeddings": ("static-embeddings", "static-embeddings-ex3", {
        "nearest_by_cosine": lambda m: m.nearest_by_cosine(torch.randn(5, 3), torch.randn(3), 2),
    }),
    "dot_product_similarity": ("dot-product-similarity", "dot-product-similarity-ex3", {
        "batched_raw_attention": lambda m: m.batched_raw_attention(torch.randn(2, 3, 4)),
    }),
    "scaling": ("scaling", "scaling-ex3", {
        "my_softmax": lambda m: m.my_softmax(torch.randn(2, 3)),
    }),
    "attention_maps": ("attention-maps", "attention-maps-ex3", {
        "row_entropy": lambda m: m.row_entropy(torch.full((1, 1, 2, 2), 0.5)),
    }),
    "pytorch_implementation": ("pytorch-implementation", "pytorch-implementation-ex1", {
        "MySimpleAttention": lambda m: m.MySimpleAttention(4),
        "MySimpleAttention.forward": lambda m: m.MySimpleAttention.forward(
            nn.Module(), torch.randn(2, 3, 4)),
    }),
    "causal_masks": ("causal-masks", "causal-masks-ex3", {
        "my_masked_softmax": lambda m: m.my_masked_softmax(torch.randn(3, 3), causal_mask(3)),
        "my_causal_mask": lambda m: m.my_causal_mask(3, 5),
    }),
    "multi_head_attention": ("multi-head-attention", "multi-head-attention-ex3", {
        "my_split_heads": lambda m: m.my_split_heads(torch.randn(2, 3, 4), 2),
        "my_merge_heads": lambda m: m.my_merge_heads(torch.randn(2, 2, 3, 2)),
        "my_multi_head_attention": lambda m: m.my_multi_head_attention(
            torch.randn(1, 3, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 4), 2),
    }),
    "training_attention": ("training-attention", "training-attention-ex3", {
        "repeat_pattern": lambda m: m.repeat_pattern(9, 4),
    }),
    "efficient_attention": ("efficient-attention", "efficient-attention-ex3", {
        "online_normalizer": lambda m: m.online_normalizer(iter([0.5, 2.0, -1.0])),
    }),
    "positions": ("positions", "positions-ex2", {
        "rope_interleaved": lambda m: m.rope_interleaved(torch.randn(2, 3, 4), torch.arange(3)),
    }),
    "language_model": ("language-model", "language-model-ex3", {
        "cached_rope_step": lambda m: m.cached_rope_step(
            torch.randn(1, 4, 1, 8), torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8),
            KVCache(), 100000.0),
    }),
    "induction_heads": ("induction-heads", "induction-heads-ex1", {
        "prefix_matching_score": lambda m: m.prefix_matching_score(torch.rand(3, 8, 8), 4),
        "mean_ablate": lambda m: m.mean_ablate(torch.randn(2, 3, 8), 1, 4),
        "copying_score": lambda m: m.copying_score(torch.randn(2, 8), torch.randn(8, 2),
                                                   torch.randn(10, 8), torch.randn(10, 8)),
    }),
}


def pristine_stub(name: str) -> str:
    """The stub as committed, so a reader's work in ``exercises/`` never fails ``make test``.

    Outside a git checkout (a downloaded archive) the file in the working tree is the stub.
    """
    relative = f"exercises/{name}/solution.py"
    result = subprocess.run(["git", "-C", str(ROOT), "show", f"HEAD:{relative}"],
                            capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else (ROOT / relative).read_text()


def load_stub(name: str, tmp_path: Path) -> ModuleType:
    """The pristine ``exercises/<name>/solution.py`` imported under a private name."""
    path = tmp_path / f"stub_{name}.py"
    path.write_text(pristine_stub(name))
    spec = importlib.util.spec_from_file_location(f"_exercise_stub_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stub_messages(name: str, tmp_path: Path) -> list[str]:
    """The NotImplementedError message of every call listed for the folder, in order."""
    stub = load_stub(name, tmp_path)
    messages = []
    for call in FOLDERS[name][2].values():
        with pytest.raises(NotImplementedError) as raised:
            call(stub)
        messages.append(str(raised.value))
    return messages


@dataclass
class FolderRun:
    """One folder's part of a run of the whole set: its tests' outcomes and messages."""

    passed: int
    failed: int
    #: Every failure's message and traceback, one after the other.
    failures: str


def run_pytest(copies: Path) -> tuple[int, dict[str, FolderRun]]:
    """``python -m pytest <copies>`` as a reader runs the set, writing nothing to the folders:
    the return code and, per folder, what its tests did."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    report = copies.with_suffix(".xml")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--junitxml={report}", copies.name],
        cwd=copies.parent, env=env, capture_output=True, text=True, timeout=900)
    assert report.is_file(), f"pytest wrote no report:\n{(result.stdout + result.stderr)[-4000:]}"
    folders: dict[str, FolderRun] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        # classname is "<copies>.<folder>.test_<folder>" (pytest's rootdir-relative module)
        folder = case.get("classname", "").removeprefix(f"{copies.name}.").split(".")[0]
        run = folders.setdefault(folder, FolderRun(0, 0, ""))
        problems = [child for child in case if child.tag in ("failure", "error")]
        if problems:
            run.failed += 1
            run.failures += "".join(f"{p.get('message', '')}\n{p.text or ''}\n"
                                    for p in problems)
        elif not any(child.tag == "skipped" for child in case):
            run.passed += 1
    return result.returncode, folders


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[dict[str, Future[tuple[int, dict[str, FolderRun]]]]]:
    """The whole set run twice, concurrently, each time on a temporary copy: with the pristine
    stubs ("stub") and with the reference solutions ("solution") as solution.py."""
    base = tmp_path_factory.mktemp("exercise-runs")
    copies = {"stub": base / "stubs", "solution": base / "solutions"}
    for name in FOLDERS:
        for folder in copies.values():
            shutil.copytree(EXERCISES / name, folder / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        (copies["stub"] / name / "solution.py").write_text(pristine_stub(name))
        shutil.copyfile(SOLUTIONS / f"{name}.py", copies["solution"] / name / "solution.py")
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {kind: pool.submit(run_pytest, folder) for kind, folder in copies.items()}


def test_one_folder_per_implement_exercise():
    folders = sorted(p.name for p in EXERCISES.iterdir()
                     if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(FOLDERS)
    assert sorted(p.stem for p in SOLUTIONS.glob("*.py")) == sorted(FOLDERS)
    assert (EXERCISES / "README.md").is_file()
    assert not (EXERCISES / "__init__.py").exists(), (
        "exercises/ must not be a package: pytest would then put the repository root, with "
        "its folder code/, on sys.path"
    )


@pytest.mark.parametrize("name", FOLDERS)
def test_folder_has_readme_stub_and_tests(name):
    slug, label, _ = FOLDERS[name]
    folder = EXERCISES / name
    assert (folder / "__init__.py").is_file()
    assert (folder / "solution.py").is_file()
    assert [p.name for p in folder.glob("test_*.py")] == [f"test_{name}.py"]
    readme = (folder / "README.md").read_text()
    assert f"`{slug}`" in readme and label in readme
    assert f".venv/bin/python -m pytest exercises/{name}" in readme
    tests = (folder / f"test_{name}.py").read_text()
    assert "from .solution import" in tests and "from attnbook.checks import" in tests
    assert f":label: {label}" in (ROOT / "book" / f"{slug}.md").read_text(), (
        f"the chapter book/{slug}.md has no exercise {label} any more: update the folder's "
        f"README and FOLDERS here"
    )


@pytest.mark.parametrize("name", FOLDERS)
def test_stub_raises_not_implemented(name, tmp_path):
    stub = load_stub(name, tmp_path)
    public = sorted(key for key, value in vars(stub).items()
                    if not key.startswith("_") and getattr(value, "__module__", None)
                    == stub.__name__)
    assert public == sorted({call.split(".")[0] for call in FOLDERS[name][2]})
    for message in stub_messages(name, tmp_path):
        assert message.startswith("implement "), message


@pytest.mark.parametrize("name", FOLDERS)
def test_untouched_stub_fails_with_its_message(name, runs, tmp_path):
    stub = EXERCISES / name / "solution.py"
    before = file_hash(stub)
    returncode, folders = runs["stub"].result()
    assert returncode == 1, f"pytest exercises/ on the stubs returned {returncode}"
    run = folders.get(name)
    assert run is not None and run.failed > 0, f"no test of exercises/{name} ran on its stub"
    assert run.passed == 0, f"{run.passed} tests of exercises/{name} passed on the stub"
    log = run.failures
    assert f"NotImplementedError: {stub_messages(name, tmp_path)[0]}" in log, log[-4000:]
    assert "ExerciseCheckError" in log and "hint: replace the `raise NotImplementedError" in log
    assert file_hash(stub) == before


@pytest.mark.parametrize("name", FOLDERS)
def test_reference_solution_passes(name, runs):
    returncode, folders = runs["solution"].result()
    run = folders.get(name)
    assert run is not None and run.passed > 0, f"no test of exercises/{name} ran"
    assert run.failed == 0, f"pytest on the reference solution of {name}:\n{run.failures[-4000:]}"
    # a failure elsewhere is that folder's test; without one, pytest itself must succeed
    assert returncode == 0 or any(other.failed for other in folders.values()), (
        f"pytest exercises/ on the reference solutions returned {returncode}")
