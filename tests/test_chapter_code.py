"""The code a reader sees runs as it stands: no shown cell leans on a removed one.

A chapter shows its teaching cells (and its plotting cells behind a "Show code" toggle) and
removes its glue and guard cells. A reader who copies the shown cells into a notebook, or
works from the downloaded source with the removed cells deleted, must not meet a NameError:
every name a shown cell uses comes from Python, from the cell itself, or from an earlier shown
cell, never only from a removed one.

Like the exactness lint, this reads the syntax: a name bound anywhere in a cell counts as
bound for the whole cell.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import jupytext
import pytest
from chapter_runner import notebook_chapters
from IPython.core.inputtransformer2 import TransformerManager

#: Tags that take a cell's code off the page.
REMOVED = {"remove-input", "remove-cell"}
#: Names an IPython kernel provides besides Python's builtins.
KERNEL_NAMES = {"get_ipython", "display", "In", "Out", "exit", "quit"}


def bound_and_used(source: str) -> tuple[set[str], set[str]]:
    """The names ``source`` binds anywhere, and the names it reads."""
    tree = ast.parse(TransformerManager().transform_cell(source))
    bound, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, used


def borrowed_names(chapter: Path) -> list[str]:
    """For each shown cell that reads a name no shown cell has bound: where, and the names."""
    notebook = jupytext.read(chapter)
    known = set(dir(builtins)) | KERNEL_NAMES
    problems = []
    for index, cell in enumerate(c for c in notebook.cells if c.cell_type == "code"):
        bound, used = bound_and_used(cell.source)
        if REMOVED & set(cell.metadata.get("tags", [])):
            continue
        missing = sorted(used - bound - known)
        if missing:
            first = cell.source.strip().splitlines()[0][:60]
            problems.append(f"code cell {index} ({first!r}) uses {missing}")
        known |= bound
    return problems


@pytest.mark.parametrize("chapter", notebook_chapters(), ids=lambda path: path.stem)
def test_shown_code_needs_no_removed_cell(chapter: Path) -> None:
    problems = borrowed_names(chapter)
    assert not problems, (f"book/{chapter.name}: shown cells use names that only a removed "
                          "cell (remove-input or remove-cell) defines; show the definition "
                          "or import, or move the use into the removed cell:\n"
                          + "\n".join(problems))


def test_the_check_sees_a_borrowed_name(tmp_path: Path) -> None:
    chapter = tmp_path / "sample.md"
    chapter.write_text(
        "---\njupytext:\n  text_representation: {extension: .md, format_name: myst}\n"
        "kernelspec: {display_name: Python 3, language: python, name: python3}\n---\n\n"
        "```{code-cell} ipython3\n:tags: [remove-cell]\n\nMARGIN = 0.1\n```\n\n"
        "```{code-cell} ipython3\nimport math\n\n%config InlineBackend.figure_format = 'png'\n"
        "x = [math.pi * MARGIN for _ in range(3)]\nprint(x, len(x))\n```\n")
    assert borrowed_names(chapter) == ["code cell 1 ('import math') uses ['MARGIN']"]
