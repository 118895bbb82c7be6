"""The grader, ``python -m attnbook.grade``: its screen of a solution's source, its reading of
``grading.toml``, and its command line.

Grading the whole problem set with the reference solutions and with the stubs is in
tests/test_exercises.py, which runs the set through :func:`attnbook.grade.grade` once each.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attnbook.course import DIFFICULTIES, chapter_exercises, read_course
from attnbook.grade import grade, main, read_grading, screen

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
FOLDERS = sorted(path for path in EXERCISES.iterdir() if (path / "solution.py").is_file())

#: The two wrappers of the package that passed the folders' tests before the grader existed.
SUBCLASS_WRAPPER = textwrap.dedent("""\
    import attnbook.layers


    class MySimpleAttention(attnbook.layers.SimpleAttention):
        pass
""")
SOFTMAX_WRAPPER = textwrap.dedent("""\
    import torch

    my_softmax = torch.softmax
""")
SCALING_RULES = {"forbidden": (".softmax", ".log_softmax", ".Softmax", ".LogSoftmax")}


@pytest.mark.parametrize("source, rules, fragment", [
    (SUBCLASS_WRAPPER, {}, "line 1: imports attnbook.layers; a solution may not import"),
    (SOFTMAX_WRAPPER, SCALING_RULES, "line 3: uses torch.softmax, which this exercise asks"),
    ("import torch.nn.functional as F\ndef f(s):\n    return F.softmax(s, -1)\n",
     SCALING_RULES, "line 3: uses torch.nn.functional.softmax"),
    ("from torch import softmax as s\nf = s\n", SCALING_RULES,
     "line 2: uses torch.softmax"),
    ("def f(s):\n    return (s * 2).softmax(-1)\n", SCALING_RULES, "line 2: uses .softmax"),
    ("def f(s):\n    return s.softmax(-1)\n", SCALING_RULES, "line 2: uses s.softmax"),
    ("from attnbook.attention import masked_softmax as my_masked_softmax\n", {},
     "line 1: imports attnbook.attention.masked_softmax"),
    ("from attnbook import efficient\n", {"allowed_imports": ("attnbook.efficient.KVCache",)},
     "line 1: imports attnbook.efficient; from attnbook a solution may import only "
     "attnbook.efficient.KVCache"),
    ("m = __import__('attnbook')\n", {}, "line 1: __import__ imports or runs code by name"),
    ("import importlib\nm = importlib.import_module('attnbook.layers')\n", {},
     "line 2: importlib.import_module imports or runs code by name"),
    ("exec('import attnbook')\n", {}, "line 1: exec imports or runs code by name"),
    ("def f(:\n", {}, "solution.py does not parse"),
    # imports by name through builtins, a star import, getattr with a string
    ("import builtins\nm = builtins.__import__('attnbook.layers')\n", {},
     "line 2: builtins.__import__ imports or runs code by name"),
    ("m = __builtins__.__import__('attnbook')\n", {}, "__builtins__.__import__ imports"),
    ("from builtins import exec as run\nrun('import attnbook')\n", {},
     "line 2: builtins.exec imports or runs code by name"),
    ("from torch.nn.functional import *\nf = softmax\n", SCALING_RULES,
     "line 1: from torch.nn.functional import * hides which names"),
    ("import torch\nf = getattr(torch, 'soft' + 'max')\n", SCALING_RULES,
     "line 2: getattr imports or runs code by name"),
])
def test_the_screen_refuses_wrappers_and_forbidden_calls(source, rules, fragment):
    reasons = screen(source, **rules)
    assert any(fragment in reason for reason in reasons), reasons


@pytest.mark.parametrize("source, rules", [
    # what the exercises' own solutions do
    ("import torch\ndef f(s):\n    m = s.amax(-1, keepdim=True)\n    e = (s - m).exp()\n"
     "    return e / e.sum(-1, keepdim=True)\n", SCALING_RULES),
    ("from attnbook.efficient import KVCache\nfrom attnbook.positions import rope\n",
     {"allowed_imports": ("attnbook.efficient.KVCache", "attnbook.positions.rope")}),
    # the words in a docstring or a comment are not code
    ('"""Like torch.softmax and attnbook.layers, written by hand."""\n# import attnbook\n',
     SCALING_RULES),
    # softmax is allowed where the rules do not forbid it
    ("import torch\nf = torch.softmax\n", {}),
])
def test_the_screen_accepts_what_the_rules_allow(source, rules):
    assert screen(source, **rules) == []


def test_the_screen_names_a_wrong_argument():
    with pytest.raises(TypeError, match="source must be the text of a solution"):
        screen(Path("solution.py"))


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda path: path.name)
def test_every_folder_grades_every_test_with_an_effort(folder):
    grading = read_grading(folder)
    defined = []
    for path in folder.glob("test_*.py"):
        defined += [line.split("(")[0].removeprefix("def ")
                    for line in path.read_text().splitlines() if line.startswith("def test")]
    assert sorted(grading.points()) == sorted(defined)
    labels = [exercise.label for exercise in grading.exercises]
    assert len(set(labels)) == len(labels)
    for exercise in grading.exercises:
        assert exercise.difficulty in DIFFICULTIES and exercise.minutes > 0
        assert exercise.max_score > 0 and exercise.label.rsplit("-ex", 1)[1].isdigit()


@pytest.mark.parametrize("text, fragment", [
    ("", "expected one or more [[exercise]] tables"),
    ('[[exercise]]\nlabel = "a-ex1"\ndifficulty = "tricky"\nminutes = 5\n'
     "points = {test_a = 1}\n", "difficulty must be one of"),
    ('[[exercise]]\nlabel = "a-ex1"\ndifficulty = "easy"\nminutes = 0\n'
     "points = {test_a = 1}\n", "minutes must be a positive integer"),
    ('[[exercise]]\nlabel = "a-ex1"\ndifficulty = "easy"\nminutes = 5\n'
     "points = {test_a = -1}\n", "points must map each test function"),
    ('[[exercise]]\nlabel = "a-ex1"\ndifficulty = "easy"\nminutes = 5\n'
     'points = {test_a = 1}\n[rules]\nforbidden = "torch.softmax"\n',
     "forbidden must be a list of strings"),
])
def test_a_wrong_grading_toml_is_named(tmp_path, text, fragment):
    (tmp_path / "grading.toml").write_text(text)
    with pytest.raises(ValueError, match=fragment.replace("[", r"\[")):
        read_grading(tmp_path)


def test_a_folder_without_grading_toml_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no grading.toml"):
        read_grading(tmp_path)
    with pytest.raises(TypeError, match="folders must be a list"):
        grade(EXERCISES / "scaling")


def tiny_folder(parent: Path, name: str, solution: str, tests: str, points: str,
                rules: str = "") -> Path:
    """An exercise folder ``parent/name`` with one exercise, ``name``-ex1: its solution.py,
    test_<name>.py, and a grading.toml giving ``points`` (a TOML inline table) and ``rules``."""
    folder = parent / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "solution.py").write_text(solution)
    (folder / f"test_{name}.py").write_text(tests)
    (folder / "grading.toml").write_text(
        f'[[exercise]]\nlabel = "{name}-ex1"\ndifficulty = "easy"\nminutes = 5\n'
        f"points = {points}\n{rules}")
    return folder


def test_a_test_without_points_stops_the_grader(tmp_path):
    folder = tiny_folder(
        tmp_path, "tiny", "def f():\n    return 1\n",
        "from .solution import f\n\n\ndef test_one():\n    assert f() == 1\n\n\n"
        "def test_two():\n    assert f() + 1 == 2\n", "{test_one = 2}")
    with pytest.raises(ValueError, match=r"tests without points \['test_two'\]"):
        grade([folder])
    assert main([str(folder)]) == 2


def test_the_command_line_grades_refuses_and_writes_json(tmp_path):
    """One run of the real command on a tiny folder: a right answer, a wrong one, a wrapper."""
    folder = tiny_folder(
        tmp_path, "tiny", "def double(x):\n    raise NotImplementedError\n",
        "from .solution import double\n\n\ndef test_two():\n    assert double(2) == 4\n\n\n"
        "def test_many():\n    assert [double(x) for x in range(3)] == [0, 2, 4], (\n"
        "        'three doubles\\nhint: double means times two')\n",
        "{test_two = 1, test_many = 3}", '[rules]\nforbidden = ["operator.mul"]\n')
    readme = tmp_path / "README.md"  # ``exercises/*`` names files too: they are skipped
    readme.write_text("the task")
    answers = {"right": "def double(x):\n    return 2 * x\n",
               "wrong": "def double(x):\n    return x + 2\n",
               "wrapper": "import operator\n\n\ndef double(x):\n    return operator.mul(2, x)\n"}
    scores = {}
    for name, text in answers.items():
        (tmp_path / f"{name}.py").write_text(text)
        report = tmp_path / f"{name}.json"
        result = subprocess.run(
            [sys.executable, "-m", "attnbook.grade", str(folder), str(readme), "--solution",
             str(tmp_path / f"{name}.py"), "--json", str(report)],
            capture_output=True, text=True, timeout=300)
        summary = json.loads(report.read_text())
        scores[name] = (result.returncode, summary["score"], summary["max_score"],
                        [test["status"] for test in summary["tests"]], result.stdout)
    assert scores["right"][:4] == (0, 4, 4, ["passed", "passed"])
    # 2 + 2 == 4 by luck: the wrong answer earns the first test's point only
    assert scores["wrong"][:4] == (0, 1, 4, ["passed", "failed"])
    assert scores["wrapper"][:4] == (1, 0, 4, ["failed", "failed"])
    assert "refused, line 5: uses operator.mul" in scores["wrapper"][4]
    # on screen, a failure shows its error line and its hint
    assert "hint: double means times two" in scores["wrong"][4]
    assert "AssertionError: three doubles" in scores["wrong"][4]
    assert "0 / 4 points" in scores["wrapper"][4]
    with pytest.raises(ValueError, match="solutions: no such file"):
        grade([folder], solutions={"tiny": tmp_path / "missing.py"})
    # the folder's own solution.py is never overwritten
    assert "NotImplementedError" in (folder / "solution.py").read_text()


# --- The book, the folders and grading.toml agree ---------------------------------------

def book_exercises() -> dict[str, tuple[str, int, tuple[str, int, int]]]:
    """label -> (chapter slug, its place among the chapter's exercises, (difficulty, minutes,
    points)), for every page of the book (the notation page's exercise too)."""
    found = {}
    for path in sorted((ROOT / "book").glob("*.md")):
        for exercise in chapter_exercises(path.read_text(), 0):
            place = int(exercise.number.split(".")[1])
            found[exercise.label] = (path.stem, place, (exercise.difficulty, exercise.minutes,
                                                        exercise.points))
    return found


BOOK = book_exercises()
NUMBERS = {chapter.slug: chapter.number for chapter in read_course(ROOT)}


def test_every_exercise_opens_with_its_difficulty_time_and_points():
    """chapter_exercises raises for an exercise without the line; here: they are all read."""
    pages = sum(path.read_text().count("```{exercise-start}")
                for path in (ROOT / "book").glob("*.md"))
    assert len(BOOK) == pages >= 50


def test_every_label_is_the_number_the_book_shows():
    """``<slug>-exN`` is Exercise <chapter>.N: the N-th exercise of its chapter."""
    wrong = {label: place for label, (slug, place, _) in BOOK.items()
             if label != f"{slug}-ex{place}"}
    assert wrong == {}, f"labels out of order (label: its place in the chapter): {wrong}"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda path: path.name)
def test_folder_book_and_grading_toml_agree(folder):
    """The effort in grading.toml is the book's, the folder's README shows it with the book's
    number, and the chapter links the folder."""
    numbers = NUMBERS
    readme = (folder / "README.md").read_text()
    index = (EXERCISES / "README.md").read_text().splitlines()
    grading = read_grading(folder)
    row = next(line for line in index if line.startswith(f"| [`{folder.name}/`]"))
    total = sum(exercise.max_score for exercise in grading.exercises)
    assert row.rstrip(" |").endswith(f"| {total}"), (
        f"exercises/README.md's row of {folder.name} must end with its {total} points: {row}")
    for exercise in grading.exercises:
        assert exercise.label in BOOK, f"{exercise.label} is not an exercise of the book"
        slug, place, effort = BOOK[exercise.label]
        assert effort == (exercise.difficulty, exercise.minutes, exercise.max_score), (
            f"{exercise.label}: the book says {effort}, grading.toml "
            f"{(exercise.difficulty, exercise.minutes, exercise.max_score)}")
        line = (f"Exercise {numbers[slug]}.{place} · {exercise.difficulty} · about "
                f"{exercise.minutes} min · {exercise.max_score} points")
        assert line in readme, f"{folder.name}/README.md lacks the line {line!r}"
        assert f"{numbers[slug]}.{place}" in row.split("|")[2], (
            f"exercises/README.md's row of {folder.name} lacks exercise {numbers[slug]}.{place}")
        chapter = (ROOT / "book" / f"{slug}.md").read_text()
        assert f"exercises/{folder.name}/" in chapter, (
            f"book/{slug}.md never names its problem set exercises/{folder.name}/")


def test_the_readme_shows_what_the_grader_prints_for_a_wrapper(tmp_path, capsys):
    """exercises/README.md quotes the grader on ``my_softmax = torch.softmax``: the quote is
    what the grader prints (a refused solution runs no test, so this is quick)."""
    wrapper = tmp_path / "solution.py"
    wrapper.write_text(SOFTMAX_WRAPPER)
    assert main(["exercises/scaling", "--solution", str(wrapper)]) == 1
    printed = capsys.readouterr().out.splitlines()
    readme = (EXERCISES / "README.md").read_text()
    points = read_grading(EXERCISES / "scaling").exercises[0].max_score
    assert printed[0] == f"exercises/scaling: 0 / {points} points"
    assert "\n".join(printed[:2]) in readme, printed[:2]


def test_a_folder_that_does_not_import_leaves_the_others_graded(tmp_path):
    """A solution missing its function breaks its folder's tests at import: that folder
    scores 0 and says why, and the other folders in the same run are still graded."""
    for name, body in {"broken": "def triple(x):\n    return 3 * x\n",
                       "fine": "def double(x):\n    return 2 * x\n"}.items():
        tiny_folder(
            tmp_path, name, body,
            "import pytest\n\nfrom .solution import double\n\n\ndef test_two():\n"
            "    assert double(2) == 4\n\n\n@pytest.mark.parametrize('x', range(40))\n"
            "def test_odd(x):\n    assert double(x) % 2 == (x % 2 == 0)\n",
            "{test_two = 2, test_odd = 1}")
    broken, fine = grade([tmp_path / "broken", tmp_path / "fine"])
    # the 40 failing cases of test_odd in "fine" fill pytest's log; "broken" still gets
    # its own import error
    assert (broken.score, broken.max_score, fine.score, fine.max_score) == (0, 3, 2, 3)
    for test in broken.tests:
        assert "cannot import name 'double'" in test.output, test.output[-500:]
