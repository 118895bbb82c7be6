"""The student kit and the light install: what a course hands out does every exercise.

``make student-kit`` puts the package, ``requirements-student.txt`` and the exercise folders
in a folder of their own, without the chapters (their worked solutions) or the tests (the
reference solutions). A fresh virtual environment there gets only
``pip install -r requirements-student.txt``. Every folder of the kit is then graded in it with
the reference solutions (``tests/exercise_solutions/``), as a student's
``python -m attnbook.grade`` would run, and must earn every point; and none of the book's
build or test tools is there. The install needs the package registries (pip's cache serves
what ``make book`` already downloaded).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
SOLUTIONS = ROOT / "tests" / "exercise_solutions"
#: The book's tools, which the light install must leave out.
BOOK_ONLY = ("sphinx", "jupyter_book", "myst_nb", "playwright", "ipykernel", "ruff")

GRADE_ALL = """
import json, sys
from pathlib import Path
from attnbook.grade import grade
exercises, solutions = Path(sys.argv[1]), Path(sys.argv[2])
names = sorted(p.name for p in exercises.iterdir() if (p / "grading.toml").is_file())
reports = grade([exercises / n for n in names], timeout=900,
                solutions={n: solutions / f"{n}.py" for n in names})
print(json.dumps({r.folder.rsplit("/", 1)[-1]: [r.score, r.max_score, r.refused]
                  for r in reports}))
"""


@pytest.fixture(scope="module")
def student_kit(student_venv: tuple[Path, Path, float]) -> Path:
    """``make student-kit``, built into a temporary folder (conftest's ``student_venv``
    makes it, with the install, in the background from the session's start)."""
    return student_venv[0]


@pytest.mark.install
def test_the_kit_holds_the_folders_and_no_solution(student_kit: Path) -> None:
    assert sorted(p.name for p in student_kit.iterdir()) == [
        "README.md", "code", "exercises", "pyproject.toml", "requirements-student.txt"]
    folders = sorted(p.name for p in (student_kit / "exercises").iterdir() if p.is_dir())
    assert folders == sorted(p.name for p in EXERCISES.iterdir()
                             if (p / "grading.toml").is_file())
    for name in folders:  # each stub is the committed one, still to be written
        stub = (student_kit / "exercises" / name / "solution.py").read_text()
        assert "raise NotImplementedError" in stub, name
    texts = [p.read_text(errors="replace") for p in student_kit.rglob("*") if p.is_file()
             and p.suffix in {".py", ".md", ".toml", ".txt"}]
    assert not any("{solution-start}" in text for text in texts)


@pytest.mark.install
def test_the_light_install_leaves_out_the_books_tools(student_venv):
    _, venv, seconds = student_venv
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.util, json, sys; "
         "print(json.dumps([n for n in sys.argv[1:] if importlib.util.find_spec(n)]))",
         *BOOK_ONLY, "torch", "attnbook", "transformers", "pytest"],
        capture_output=True, text=True, check=True)
    found = json.loads(probe.stdout)
    assert found == ["torch", "attnbook", "transformers", "pytest"], found
    print(f"the kit made and requirements-student.txt installed in {seconds:.0f} s")


@pytest.mark.install
def test_the_light_install_does_every_exercise(student_kit, student_venv, tmp_path):
    _, venv, _ = student_venv
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "ATTNBOOK_CACHE": str(tmp_path / "cache"),
           "MPLCONFIGDIR": str(tmp_path / "matplotlib")}
    env.pop("PYTHONPATH", None)
    run = subprocess.run([str(venv / "bin" / "python"), "-c", GRADE_ALL,
                          str(student_kit / "exercises"), str(SOLUTIONS)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    scores = json.loads(run.stdout.strip().splitlines()[-1])
    folders = sorted(p.name for p in EXERCISES.iterdir() if (p / "grading.toml").is_file())
    assert sorted(scores) == folders
    short = {name: s for name, s in scores.items() if s[0] != s[1] or s[2]}
    assert not short, f"folders short of full points in the light install: {short}"
