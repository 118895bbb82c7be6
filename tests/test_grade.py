"""The grader, ``python -m attnbook.grade``: its screen of a solution's source, its reading of
``grading.toml``, and its command line.

Grading the whole problem set with the reference solutions and with the stubs is in
tests/test_exercises.py, which runs the set through :func:`attnbook.grade.grade` once each.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from attnbook.grade import DIFFICULTIES, grade, main, read_grading, screen

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


def test_a_test_without_points_stops_the_grader(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "solution.py").write_text("def f():\n    return 1\n")
    (folder / "test_tiny.py").write_text(
        "from .solution import f\n\n\ndef test_one():\n    assert f() == 1\n\n\n"
        "def test_two():\n    assert f() + 1 == 2\n")
    (folder / "grading.toml").write_text(
        '[[exercise]]\nlabel = "tiny-ex1"\ndifficulty = "easy"\nminutes = 5\n'
        "points = {test_one = 2}\n")
    with pytest.raises(ValueError, match=r"tests without points \['test_two'\]"):
        grade([folder])
    assert main([str(folder)]) == 2


def test_the_command_line_grades_refuses_and_writes_json(tmp_path, capsys):
    """One run of the real command on a tiny folder: a right answer, a wrong one, a wrapper."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "solution.py").write_text("def double(x):\n    raise NotImplementedError\n")
    (folder / "test_tiny.py").write_text(
        "from .solution import double\n\n\ndef test_two():\n    assert double(2) == 4\n\n\n"
        "def test_many():\n    assert [double(x) for x in range(3)] == [0, 2, 4]\n")
    (folder / "grading.toml").write_text(
        '[[exercise]]\nlabel = "tiny-ex1"\ndifficulty = "easy"\nminutes = 5\n'
        'points = {test_two = 1, test_many = 3}\n[rules]\nforbidden = ["operator.mul"]\n')
    answers = {"right": "def double(x):\n    return 2 * x\n",
               "wrong": "def double(x):\n    return x + 2\n",
               "wrapper": "import operator\n\n\ndef double(x):\n    return operator.mul(2, x)\n"}
    scores = {}
    for name, text in answers.items():
        (tmp_path / f"{name}.py").write_text(text)
        report = tmp_path / f"{name}.json"
        result = subprocess.run(
            [sys.executable, "-m", "attnbook.grade", str(folder), "--solution",
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
    assert "0 / 4 points" in scores["wrapper"][4]
    # the folder's own solution.py is never overwritten
    assert "NotImplementedError" in (folder / "solution.py").read_text()


# --- The book, the folders and grading.toml agree ---------------------------------------

EFFORT = re.compile(r"^\*(Easy|Medium|Hard) · about (\d+) min · (\d+) points?\*$")


def chapter_numbers() -> dict[str, int]:
    """slug -> the chapter's number in the book (the numbered parts of _toc.yml, in order)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    slugs = [chapter["file"].removeprefix("book/") for part in toc["parts"]
             if part.get("numbered") for chapter in part["chapters"]]
    return {slug: number for number, slug in enumerate(slugs, start=1)}


def book_exercises() -> dict[str, tuple[str, int, tuple[str, int, int] | None]]:
    """label -> (chapter slug, its place among the chapter's exercises, (difficulty, minutes,
    points) from the first line of its text, or None)."""
    found = {}
    for path in sorted((ROOT / "book").glob("*.md")):
        lines = path.read_text().splitlines()
        place = 0
        for i, line in enumerate(lines):
            if line.strip() != "```{exercise-start}":
                continue
            place += 1
            label = lines[i + 1].removeprefix(":label:").strip()
            close = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            text = next((line for line in lines[close + 1:] if line.strip()), "")
            match = EFFORT.match(text.strip())
            effort = ((match[1].lower(), int(match[2]), int(match[3])) if match else None)
            found[label] = (path.stem, place, effort)
    return found


BOOK = book_exercises()


def test_every_exercise_opens_with_its_difficulty_time_and_points():
    missing = [label for label, (_, _, effort) in BOOK.items() if effort is None]
    assert missing == [], (
        f"exercises whose text does not open with a line like '*Medium · about 20 min · "
        f"6 points*': {missing}")
    assert len(BOOK) >= 50


def test_every_label_is_the_number_the_book_shows():
    """``<slug>-exN`` is Exercise <chapter>.N: the N-th exercise of its chapter."""
    wrong = {label: place for label, (slug, place, _) in BOOK.items()
             if label != f"{slug}-ex{place}"}
    assert wrong == {}, f"labels out of order (label: its place in the chapter): {wrong}"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda path: path.name)
def test_folder_book_and_grading_toml_agree(folder):
    """The effort in grading.toml is the book's, the folder's README shows it with the book's
    number, and the chapter links the folder."""
    numbers = chapter_numbers()
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
        row = next(line for line in index if line.startswith(f"| [`{folder.name}/`]"))
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
        folder = tmp_path / name
        folder.mkdir()
        (folder / "__init__.py").write_text("")
        (folder / "solution.py").write_text(body)
        (folder / f"test_{name}.py").write_text(
            "from .solution import double\n\n\ndef test_two():\n    assert double(2) == 4\n")
        (folder / "grading.toml").write_text(
            f'[[exercise]]\nlabel = "{name}-ex1"\ndifficulty = "easy"\nminutes = 5\n'
            "points = {test_two = 2}\n")
    broken, fine = grade([tmp_path / "broken", tmp_path / "fine"])
    assert (broken.score, broken.max_score, fine.score, fine.max_score) == (0, 2, 2, 2)
    assert "cannot import name 'double'" in broken.tests[0].output
