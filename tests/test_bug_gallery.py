"""The bug gallery (book/bug-gallery.md) keeps its promise: every section shows the bug, its
symptom, the fix, and names tests of the package's suite that exist and would catch it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GALLERY = ROOT / "book" / "bug-gallery.md"
PARTS = ("**The bug.**", "**The symptom.**", "**The fix.**", "**The test.**")
TEST_ID = re.compile(r"`(tests/test_\w+\.py)::(test_\w+)`")


#: The summary at the top: one table row per bug, linking to its section.
SUMMARY = "At a glance"
LABEL = re.compile(r"^\(([\w-]+)\)=\n## (.+)$", flags=re.M)


def sections(text: str) -> dict[str, str]:
    """Each bug's ``## `` section: its title and its text up to the next one (the summary
    table's section left out)."""
    pieces = re.split(r"^## (.+)$", text, flags=re.M)
    found = dict(zip(pieces[1::2], pieces[2::2], strict=True))
    found.pop(SUMMARY, None)
    return found


def summary_links(text: str) -> list[str]:
    """The section labels that the summary table's rows link to, in order."""
    table = re.split(r"^## (.+)$", text, flags=re.M)
    body = table[table.index(SUMMARY) + 1]
    return [re.search(r"<([\w-]+)>`", row).group(1) for row in body.splitlines()
            if row.startswith("| {ref}")]


def defined_tests(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_the_gallery_has_nine_sections_in_four_parts():
    found = sections(GALLERY.read_text())
    assert len(found) >= 9, f"{len(found)} sections: {list(found)}"
    for title, body in found.items():
        positions = [body.find(part) for part in PARTS]
        assert -1 not in positions, f"section {title!r} lacks one of {PARTS}"
        assert positions == sorted(positions), f"section {title!r}: parts out of order"


def test_every_section_names_tests_that_exist():
    for title, body in sections(GALLERY.read_text()).items():
        named = TEST_ID.findall(body.split("**The test.**", 1)[1])
        assert named, f"section {title!r} names no test as tests/test_x.py::test_name"
        for file, name in named:
            assert name in defined_tests(ROOT / file), f"{title!r}: {file}::{name} is missing"


def test_the_checks_see_a_missing_part_and_a_missing_test():
    broken = "## A\n**The bug.** x\n**The symptom.** y\n**The fix.** z\n"
    assert "**The test.**" not in sections(broken)["A"]
    assert not TEST_ID.findall("**The test.** `tests/test_masks.py:test_x`")
    assert "test_causal_mask_is_its_definition" in defined_tests(ROOT / "tests/test_masks.py")
    assert "test_no_such_test" not in defined_tests(ROOT / "tests/test_masks.py")


def test_the_summary_table_links_every_section_once_in_page_order():
    text = GALLERY.read_text()
    labelled = {title: label for label, title in LABEL.findall(text)}
    assert set(sections(text)) <= set(labelled), "every bug section needs a (label)="
    in_order = [labelled[title] for title in sections(text)]
    assert summary_links(text) == in_order
    rows = [row for row in text.split(f"## {SUMMARY}", 1)[1].split("\n## ", 1)[0].splitlines()
            if row.startswith("| {ref}")]
    assert all(row.count(" | ") == 2 and row.endswith(" |") for row in rows), rows


def test_the_summary_check_sees_a_missing_row():
    text = GALLERY.read_text()
    first_row = next(row for row in text.splitlines() if row.startswith("| {ref}"))
    shortened = text.replace(first_row + "\n", "")
    labelled = {title: label for label, title in LABEL.findall(shortened)}
    assert summary_links(shortened) != [labelled[title] for title in sections(shortened)]
