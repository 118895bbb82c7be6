"""The problem set in ``exercises/``: untouched stubs fail readably, reference solutions pass.

The whole set is graded the way a teacher grades it, ``python -m attnbook.grade exercises/*``
(one pytest run in a subprocess), twice: once with every pristine stub, which must score 0
with its own message, and once with every reference solution
(``tests/exercise_solutions/<name>.py``), which must earn every point. The grader works on a
temporary copy of the folders, so nothing ever writes to a file in ``exercises/``.
(``exercises/README.md`` explains why the folders' ``solution.py`` files never mix when pytest
collects them together.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

from attnbook.decoder import DecoderConfig
from attnbook.efficient import KVCache
from attnbook.grade import FolderReport, grade
from attnbook.layers import MultiHeadAttention
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
    "scaling": ("scaling", "scaling-ex2", {
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
    "attention_layer": ("attention-layer", "attention-layer-ex1", {
        "padded_causal_mask": lambda m: m.padded_causal_mask(torch.tensor([3, 1]), 3),
        "peeks_ahead": lambda m: m.peeks_ahead(lambda x: (x, None), torch.randn(1, 3, 4)),
    }),
    "training_attention": ("training-attention", "training-attention-ex3", {
        "repeat_pattern": lambda m: m.repeat_pattern(9, 4),
    }),
    "efficient_attention": ("efficient-attention", "efficient-attention-ex3", {
        "online_normalizer": lambda m: m.online_normalizer(iter([0.5, 2.0, -1.0])),
    }),
    "positions": ("positions", "positions-ex1", {
        "my_sinusoidal": lambda m: m.my_sinusoidal(4, 6),
        "rope_interleaved": lambda m: m.rope_interleaved(torch.randn(2, 3, 4), torch.arange(3)),
        "my_alibi_slopes": lambda m: m.my_alibi_slopes(8),
    }),
    "language_model": ("language-model", "language-model-ex1", {
        "repeat_kv": lambda m: m.repeat_kv(torch.randn(1, 3, 4, 8), 9),
        "cache_bytes_per_token": lambda m: m.cache_bytes_per_token(
            DecoderConfig(vocab_size=100, d_model=32, num_layers=2, num_heads=4,
                          num_kv_heads=2, d_ff=64), 4),
        "cached_rope_step": lambda m: m.cached_rope_step(
            torch.randn(1, 4, 1, 8), torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8),
            KVCache(), 100000.0),
        "window_mask": lambda m: m.window_mask(8, 3, 2),
    }),
    "induction_heads": ("induction-heads", "induction-heads-ex1", {
        "prefix_matching_score": lambda m: m.prefix_matching_score(torch.rand(3, 8, 8), 4),
        "mean_ablate": lambda m: m.mean_ablate(torch.randn(2, 3, 8), 1, 4),
        "copying_score": lambda m: m.copying_score(torch.randn(2, 8), torch.randn(8, 2),
                                                   torch.randn(10, 8), torch.randn(10, 8)),
    }),
    "cache_budget": ("cache-budget", "cache-budget-ex1", {
        "quantize_keys": lambda m: m.quantize_keys(torch.randn(8, 2), 2, 4),
        "evict_one": lambda m: m.evict_one(torch.rand(4), torch.arange(4), 1, 1),
    }),
    "whisper": ("whisper", "whisper-ex1", {
        "my_dtw": lambda m: m.my_dtw(torch.rand(2, 3).numpy()),
        "my_cross_steps": lambda m: m.my_cross_steps(
            MultiHeadAttention(8, 2), torch.randn(1, 6, 8), torch.randn(1, 3, 8)),
        "my_word_rows": lambda m: m.my_word_rows(2, [[400], [500, 501]]),
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


def grade_all(solutions: dict[str, Path]) -> dict[str, FolderReport]:
    """Every folder graded by ``attnbook.grade`` with these ``solution.py`` files: one pytest
    run over temporary copies, as ``python -m attnbook.grade exercises/*`` runs it."""
    reports = grade([EXERCISES / name for name in FOLDERS], solutions=solutions, timeout=900)
    return {Path(report.folder).name: report for report in reports}


def failures(report: FolderReport) -> str:
    """Every failed test's message and traceback, one after the other."""
    return "\n".join(test.output for test in report.tests if test.status != "passed")


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[dict[str, Future[dict[str, FolderReport]]]]:
    """The whole set graded twice, concurrently: with the pristine stubs ("stub") and with the
    reference solutions ("solution") as solution.py. Nothing in exercises/ is written."""
    stubs = tmp_path_factory.mktemp("pristine-stubs")
    for name in FOLDERS:
        (stubs / f"{name}.py").write_text(pristine_stub(name))
    solutions = {"stub": {name: stubs / f"{name}.py" for name in FOLDERS},
                 "solution": {name: SOLUTIONS / f"{name}.py" for name in FOLDERS}}
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {kind: pool.submit(grade_all, files) for kind, files in solutions.items()}


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
    report = runs["stub"].result()[name]
    assert report.refused == [], report.refused
    assert report.tests and report.score == 0, (
        f"{report.score} points for the stub of exercises/{name}")
    assert all(test.status == "failed" for test in report.tests)
    log = failures(report)
    assert f"NotImplementedError: {stub_messages(name, tmp_path)[0]}" in log, log[-4000:]
    assert "NotWrittenYet" in log and "to do: replace the `raise NotImplementedError" in log
    assert file_hash(stub) == before


@pytest.mark.parametrize("name", FOLDERS)
def test_reference_solution_earns_every_point(name, runs):
    report = runs["solution"].result()[name]
    assert report.refused == [], f"the grader refuses the reference solution: {report.refused}"
    assert report.score == report.max_score > 0, (
        f"{report.score} of {report.max_score} points for the reference solution of {name}:\n"
        f"{failures(report)[-4000:]}")
