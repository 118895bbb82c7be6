"""A chapter compares floating-point results exactly only where it says why that is safe.

Two results that are equal in exact arithmetic can differ in the last bits with the thread
count and the CPU's vector kernels, so ``torch.equal`` on them holds on one machine and fails
on a reader's. The book keeps exact comparisons where exactness is guaranteed by construction
(a masked weight is 0 because ``masked_fill`` wrote it; booleans; integer counts; copies) and
says so with an ``# exact: <why>`` comment on the line where the comparison starts. This test
flags, in every chapter's code cells:

1. any call of ``torch.equal``, ``*.array_equal`` or ``*.assert_array_equal``;
2. in an ``assert``, an ``==`` or ``!=`` with an operand that is a float by its look: a float
   literal, ``float(...)``, ``.item()``, a reduction such as ``.max()`` or ``.sum()``, or
   formatted text (``f"{x:.2f}"``, which turns a near-tie at a rounding boundary into a flip);
3. in an ``assert``, an element-wise ``==`` or ``!=`` that is then reduced (``(w == 0).all()``)
   unless both sides are visibly integers (``argmax``, ``arange``, ``int(...)``, ``len(...)``,
   shapes).

It is a lint, not a proof: it reads the syntax, not the types. The portability test
(``test_portability.py``) runs the chapters on other numeric set-ups and catches what it misses.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml
from chapter_runner import BOOK, notebook_chapters

EXACT_CALLS = {"equal", "array_equal", "assert_array_equal"}
FLOAT_METHODS = {"item", "max", "min", "sum", "mean", "norm", "prod", "std", "var", "dot",
                 "amax", "amin", "logsumexp", "exp", "log", "sqrt", "softmax"}
INTEGER_METHODS = {"argmax", "argmin", "argsort", "arange", "nonzero", "numel", "count_nonzero",
                   "bool", "long", "int"}
INTEGER_FUNCTIONS = {"int", "len", "bool", "str", "range", "list", "tuple", "sorted"}
REDUCTIONS = {"all", "any", "sum", "nonzero", "count_nonzero"}
EXACT_COMMENT = re.compile(r"#\s*exact:\s*\S")


class Cell(NamedTuple):
    start: int  # line in the chapter where the cell's code starts
    tags: frozenset[str]
    code: str


def parse_cells(text: str) -> list[Cell]:
    """Each ``{code-cell}`` of a MyST notebook's text, without its front matter or options.

    Tags come from a ``:tags: [...]`` option or from ``tags:`` in the cell's ``---`` front
    matter.
    """
    lines = text.splitlines()
    cells, start = [], None
    for number, line in enumerate(lines, start=1):
        if start is None and line.startswith("```{code-cell}"):
            start = number + 1
        elif start is not None and line.startswith("```"):
            body = lines[start - 1:number - 1]
            # Skip the cell's own ``---`` front matter or ``:tags:`` options.
            options, offset = {}, 0
            if body and body[0] == "---":
                offset = body.index("---", 1) + 1
                options = yaml.safe_load("\n".join(body[1:offset - 1])) or {}
            while offset < len(body) and body[offset].startswith(":"):
                key, _, value = body[offset][1:].partition(":")
                options[key] = yaml.safe_load(value)
                offset += 1
            tags = frozenset(options.get("tags") or [])
            cells.append(Cell(start + offset, tags, "\n".join(body[offset:])))
            start = None
    return cells


def code_cells(chapter: Path) -> list[tuple[int, str]]:
    """(line in the chapter where the cell's code starts, code) for each code cell."""
    return [(cell.start, cell.code) for cell in parse_cells(chapter.read_text())]


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            return func.attr
        if isinstance(func, ast.Name):
            return func.id
    return None


def _looks_float(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, float)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.UnaryOp):
        return _looks_float(node.operand)
    if isinstance(node, ast.List | ast.Tuple):
        return any(_looks_float(element) for element in node.elts)
    name = _call_name(node)
    if name == "round" and len(node.args) == 2:
        return True
    return name == "float" or name in FLOAT_METHODS


def _looks_integer(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | str | bool | type(None))
    if isinstance(node, ast.Attribute):
        return node.attr in {"shape", "ndim", "dtype"}
    if isinstance(node, ast.BinOp):
        return _looks_integer(node.left) and _looks_integer(node.right)
    if isinstance(node, ast.List | ast.Tuple):
        return all(_looks_integer(element) for element in node.elts)
    name = _call_name(node)
    return name in INTEGER_FUNCTIONS or name in INTEGER_METHODS


def _reduced_comparisons(tree: ast.AST) -> set[int]:
    """ids of comparisons whose element-wise result is reduced: ``(a == b).all()``."""
    reduced = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        candidates = list(node.args)
        if isinstance(node.func, ast.Attribute) and node.func.attr in REDUCTIONS:
            candidates.append(node.func.value)
        elif _call_name(node) not in REDUCTIONS:
            continue
        reduced.update(id(c) for c in candidates if isinstance(c, ast.Compare))
    return reduced


def exact_comparisons(code: str) -> list[tuple[int, str]]:
    """(line in the cell, why it is flagged) for each exact comparison that needs a reason."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in code.splitlines())
    tree = ast.parse(code)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in EXACT_CALLS:
            found.append((node.lineno, f"{_call_name(node)}(...)"))
    for statement in ast.walk(tree):
        if not isinstance(statement, ast.Assert):
            continue
        reduced = _reduced_comparisons(statement.test)
        for node in ast.walk(statement.test):
            if not isinstance(node, ast.Compare):
                continue
            if not any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
                continue
            operands = [node.left, *node.comparators]
            if any(_looks_float(operand) for operand in operands):
                found.append((node.lineno, "== on a float"))
            elif id(node) in reduced and not all(_looks_integer(o) for o in operands):
                found.append((node.lineno, "element-wise == reduced to one answer"))
    return sorted(set(found))


def comment_lines(code: str) -> set[int]:
    """Lines of the cell that carry an ``# exact: <why>`` comment."""
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT and EXACT_COMMENT.search(token.string):
            lines.add(token.start[0])
    return lines


def unexplained(chapter: Path) -> list[str]:
    problems = []
    for start, code in code_cells(chapter):
        if code.lstrip().startswith("%%"):
            continue
        explained = comment_lines(code)
        for line, why in exact_comparisons(code):
            if line not in explained:
                source = code.splitlines()[line - 1].strip()
                problems.append(f"{chapter.name}:{start + line - 1}: {why}: {source}")
    return problems


@pytest.mark.parametrize("chapter", notebook_chapters(), ids=lambda path: path.stem)
def test_exact_comparisons_say_why(chapter: Path) -> None:
    problems = unexplained(chapter)
    assert not problems, (
        "exact comparison without an '# exact: <why>' comment on its line (use a tolerance "
        "for floats that are only equal up to rounding):\n" + "\n".join(problems))


SAMPLE = '''
weights = attention(q, k, v, mask).weights
assert torch.equal(weights, other)
assert torch.equal(mask, causal_mask(4))  # exact: booleans
assert (weights[~mask] == 0).all()
assert (weights[~mask] == 0).all()  # exact: masked_fill writes 0
assert (weights.argmax(dim=-1) == torch.arange(4)).all()
assert float(weights.sum()) == 1.0
assert f"{a:.2f}" == f"{b:.2f}"
assert weights.shape == (4, 4) and len(tokens) == 4
assert int(weights.argmax()) == 2
x = (weights == 0)
'''


def test_the_lint_flags_what_it_should() -> None:
    flagged = {line for line, _ in exact_comparisons(SAMPLE)} - comment_lines(SAMPLE)
    assert flagged == {3, 5, 8, 9}, flagged
    with pytest.raises(SyntaxError):
        exact_comparisons("assert (")


#: Tags that take a cell's code off the page altogether. Folded code (``hide-input``,
#: ``hide-cell``) is not among them: a reader who opens the toggle reads it in the same code
#: box, so its lines must fit the column too.
REMOVED_TAGS = {"remove-input", "remove-cell"}
#: The longest code line a reader sees: at 1280 px a code box, in the main column as in an
#: exercise, holds 76 characters of the theme's 14 px monospace
#: (``test_browser.test_shown_code_fits_the_column`` measures the boxes); a longer line hides
#: its end behind a horizontal scroll bar.
CODE_COLUMN = 76


def long_shown_lines(text: str, limit: int = CODE_COLUMN) -> list[tuple[int, int]]:
    """(line in the text, length) of each line longer than ``limit`` in a code cell whose
    code is on the page, shown or folded behind a toggle (any cell not tagged
    ``remove-input`` or ``remove-cell``)."""
    return [(cell.start + index, len(line))
            for cell in parse_cells(text) if not cell.tags & REMOVED_TAGS
            for index, line in enumerate(cell.code.splitlines())
            if len(line) > limit]


def test_the_column_check_sees_a_long_line() -> None:
    long_line = "x = " + "1" * 96
    assert len(long_line) == 100
    shown = f"Text.\n\n```{{code-cell}} ipython3\nshort = 1\n{long_line}\n```\n"
    assert long_shown_lines(shown) == [(5, 100)]
    fits, one_more = "y = " + "2" * (CODE_COLUMN - 4), "z = " + "3" * (CODE_COLUMN - 3)
    edge = f"```{{code-cell}} ipython3\n{fits}\n{one_more}\n```\n"
    assert long_shown_lines(edge) == [(3, CODE_COLUMN + 1)]
    for tag in ("hide-input", "hide-cell"):  # folded, but read when opened
        for options in (f":tags: [{tag}]", f"---\ntags: [{tag}]\n---"):
            folded = f"```{{code-cell}} ipython3\n{options}\n{long_line}\n```\n"
            line = 3 + options.count("\n")
            assert long_shown_lines(folded) == [(line, 100)], (tag, options)
    for tag in ("remove-input", "remove-cell"):
        for options in (f":tags: [{tag}]", f"---\ntags: [{tag}]\n---"):
            removed = f"```{{code-cell}} ipython3\n{options}\n{long_line}\n```\n"
            assert long_shown_lines(removed) == [], (tag, options)


def long_front_matter_lines(text: str,
                            limit: int = CODE_COLUMN) -> list[tuple[int, int]]:
    """(line in the text, length) of each line longer than ``limit`` in the ``---`` YAML
    front matter of a code cell, whatever the cell's tags.

    The front matter is not on the page, but the book keeps it to the code column too, so
    that a cell's source reads in one width; the long lines are a figure's ``alt`` and
    ``caption`` texts, and a YAML plain scalar continues on lines indented deeper than its
    key without a change to the text.
    """
    lines = text.splitlines()
    found, number = [], 0
    while number < len(lines):
        opens_cell = lines[number].startswith("```{code-cell}")
        if opens_cell and lines[number + 1:number + 2] == ["---"]:
            end = lines.index("---", number + 2)
            found += [(index + 1, len(lines[index]))
                      for index in range(number + 2, end) if len(lines[index]) > limit]
            number = end
        number += 1
    return found


#: What each column check reads in a chapter's code cells, and how to fix a line it finds.
COLUMN_CHECKS = {
    "shown or foldable code": (
        long_shown_lines, "break inside brackets, put the comment on its own line, split a "
        "long string into adjacent literals, or name an intermediate value"),
    "YAML front matter": (
        long_front_matter_lines, "continue an alt or caption text on lines indented deeper "
        "than its key"),
}


@pytest.mark.parametrize("what", COLUMN_CHECKS)
def test_code_cells_fit_the_column(what: str) -> None:
    """Shown and folded code alike (only removed code may be wider), and every cell's
    front matter, in lines of at most the code column."""
    find, fix = COLUMN_CHECKS[what]
    offenders = [f"book/{chapter.name}:{line}: {length} characters"
                 for chapter in sorted(BOOK.glob("*.md"))
                 for line, length in find(chapter.read_text())]
    assert not offenders, (f"{what}: lines longer than {CODE_COLUMN} characters ({fix}):\n"
                           + "\n".join(offenders))


def test_the_front_matter_check_sees_a_long_line() -> None:
    words = " ".join(["word"] * 20)
    long_line = f"    alt: {words}"
    assert len(long_line) > CODE_COLUMN
    sample = ("Text.\n\n```{code-cell} ipython3\n---\nmystnb:\n  image:\n"
              f"{long_line}\n    name: fig-sample\n---\nx = 1\n```\n"
              f"\n```{{code-cell}} ipython3\nno_front_matter = 1  # {words}\n```\n")
    assert long_front_matter_lines(sample) == [(7, len(long_line))]
    wrapped = sample.replace(long_line, f"    alt: {words[:39]}\n      {words[40:]}")
    assert long_front_matter_lines(wrapped) == []
    assert (yaml.safe_load(wrapped.split("---\n")[1])
            == yaml.safe_load(sample.split("---\n")[1]))
