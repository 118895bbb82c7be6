"""The book as a course: each chapter's number, prerequisites, exercises and reading load.

Everything here is read from the book's own sources, so the teacher's page that shows it
cannot drift from the chapters:

- the chapters and their numbers from ``_toc.yml`` (the numbered parts, in order);
- a chapter's prerequisites from its recap, the list under "What it needs from earlier
  chapters", whose items name the chapters they recap (``{ref}`ch. 3 <scaling>```);
- its exercises from the ``exercise-start`` directives, each with the line that opens its
  text: ``*Medium · about 20 min · 5 points*``;
- the words of its main path: the prose a student reads in one sitting, outside code cells,
  mathematics blocks, tables, folded boxes, exercises and the sections that may wait (Going
  deeper, Exercises, Summary, References). The book's tests check this count against the
  built pages.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DIFFICULTIES",
    "READING_PACE",
    "Chapter",
    "chapter_exercises",
    "ExerciseEffort",
    "main_path_words",
    "read_course",
    "section_titles",
    "reading_minutes",
]

#: The difficulty labels, easiest first.
DIFFICULTIES = ("easy", "medium", "hard")
#: Main-path words a student reads in a minute, code, figures and thinking included: the
#: pace behind the book's budget of one sitting, about an hour for at most 2,200 words.
READING_PACE = 40

#: The line that opens every exercise's text.
EFFORT = re.compile(r"^\*(Easy|Medium|Hard) · about (\d+) min · (\d+) points?\*$")
#: The h2 sections that are not on the main path.
_OFF_PATH_SECTION = re.compile(r"going deeper|exercises|summary|references", re.IGNORECASE)
#: A word of prose (numbers are not words here).
_PROSE_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
#: Directives whose body is not read on the main path: folded, or not prose.
_OFF_PATH_DIRECTIVES = ("code-cell", "code-block", "code", "dropdown", "exercise", "solution",
                        "math", "toggle", "footbibliography", "bibliography", "raw",
                        "list-table", "table", "csv-table")
_PROOF_KINDS = {"thm": "Theorem", "def": "Definition", "prop": "Proposition", "lem": "Lemma"}
_RECAP = re.compile(r"needs from earlier chapters|need before you start")
#: A cross-reference's target: ``{ref}`slug```, ``{ref}`text <slug>```, ``{eq}`slug-eq-x```,
#: ``{prf:ref}`def-slug-x``` (a label of a chapter starts with its slug).
_REFERENCE = re.compile(r"\{(?:ref|eq|numref|prf:ref)\}`(?:[^`<]*<)?([\w-]+)>?`")


@dataclass(frozen=True)
class ExerciseEffort:
    """One exercise: its label, the number the book shows, and the effort it states."""

    label: str
    number: str
    difficulty: str
    minutes: int
    points: int


@dataclass(frozen=True)
class Chapter:
    slug: str
    number: int
    title: str
    part: str
    #: The chapters its recap names, in the order it names them.
    prerequisites: tuple[str, ...]
    exercises: tuple[ExerciseEffort, ...]
    #: Prose words on the main path (see the module's docstring).
    words: int

    @property
    def reading_minutes(self) -> int:
        return reading_minutes(self.words)

    @property
    def exercise_minutes(self) -> int:
        return sum(exercise.minutes for exercise in self.exercises)


def reading_minutes(words: int, pace: int = READING_PACE) -> int:
    """Minutes to read ``words`` of main path at ``pace`` words a minute, rounded up to 5."""
    if not isinstance(words, int) or isinstance(words, bool) or words < 0:
        raise ValueError(f"words must be a non-negative integer, got {words!r}")
    if not isinstance(pace, int) or isinstance(pace, bool) or pace <= 0:
        raise ValueError(f"pace must be a positive integer (words a minute), got {pace!r}")
    return 5 * math.ceil(words / pace / 5)


def _fence(line: str) -> tuple[str, str] | None:
    """(the fence, the directive's name) of a line that opens a directive, with the name ""
    for a plain code block (a backtick fence with or without a language), or None."""
    match = re.match(r"^(`{3,}|:{3,})(?:\{([\w:-]+)\})?", line)
    if match is None:
        return None
    return match[1], match[2] or ""


def _prose(line: str, titles: Mapping[str, str]) -> str:
    """A line of Markdown as a reader sees its words: a role becomes what it shows (a
    reference without text shows its target's title), a computed number no word."""
    line = re.sub(r"\{glue:[a-z]*\}`[^`]*`", " ", line)
    line = re.sub(r"\{(?:ref|doc|numref|eq|prf:ref)\}`([^`<]*)<[^`]*>`", r"\1", line)
    line = re.sub(r"\{(?:ref|doc)\}`([^`]*)`", lambda m: titles.get(m[1], m[1]), line)
    line = re.sub(r"\{numref\}`[^`]*`", "Fig", line)
    line = re.sub(r"\{prf:ref\}`(thm|def|prop|lem)[^`]*`",
                  lambda m: _PROOF_KINDS.get(m[1], "Definition"), line)
    line = re.sub(r"\{eq\}`[^`]*`", " ", line)
    line = re.sub(r"\{cite:[a-z]*\}`[^`]*`", "Author et al", line)
    line = re.sub(r"\{[a-z:]+\}`([^`]*)`", r"\1", line)
    line = line.replace("`", " ")
    line = re.sub(r"\]\([^)]*\)", "]", line)  # a link's address
    return line


def main_path_words(source: str, titles: Mapping[str, str] | None = None) -> int:
    """The prose words of a chapter's MyST source on its main path (see the module).

    Args:
        source: the chapter's MyST Markdown.
        titles: label -> the title a reference to it shows (:func:`section_titles`).
    """
    titles = titles or {}
    if not isinstance(source, str):
        raise TypeError(f"source must be the text of a chapter (str), got "
                        f"{type(source).__name__}")
    lines = source.splitlines()
    if lines and lines[0] == "---":  # the front matter
        if "---" not in lines[1:]:
            raise ValueError("source: its front matter opens with --- and never closes")
        lines = lines[lines.index("---", 1) + 1:]
    words = 0
    #: the open directives and code blocks: (closing fence, off the main path), innermost last
    open_blocks: list[tuple[str, bool]] = []
    in_math = off_section = gated = False
    for line in lines:
        stripped = line.strip()
        if open_blocks and stripped == open_blocks[-1][0]:
            open_blocks.pop()
            continue
        fence = _fence(stripped)
        if fence is not None and fence[1].endswith(("-start", "-end")):
            # a gated exercise or solution: its text runs from the -start directive to the
            # -end one, outside both
            gated = fence[1].endswith("-start")
        if fence is not None and (fence[1] or fence[0].startswith("`")):
            # a plain code block, or a directive whose body is not read on the main path
            off = not fence[1] or any(fence[1].startswith(name)
                                      for name in _OFF_PATH_DIRECTIVES)
            if not off and not any(hidden for _, hidden in open_blocks):  # a box's title
                title = stripped[len(fence[0]) + len(fence[1]) + 2:]
                words += len(_PROSE_WORD.findall(_prose(title, titles)))
            open_blocks.append((fence[0], off))
            continue
        if gated or any(off for _, off in open_blocks):
            continue
        if stripped.startswith("$$"):
            if not in_math and "$$" not in stripped[2:]:  # "$$ a = b $$" is one line
                in_math = True
            elif in_math:
                in_math = False
            continue
        if in_math:
            continue
        if line.startswith("## "):
            off_section = bool(_OFF_PATH_SECTION.search(line))
            continue
        if (off_section or line.startswith(("#", "|", ":", "(", "%", "+++")) or not stripped
                or re.match(r"^\(.*\)=$", stripped)):
            continue
        words += len(_PROSE_WORD.findall(_prose(line, titles)))
    return words


def section_titles(sources: Iterable[str]) -> dict[str, str]:
    """label -> heading text, for every ``(label)=`` written just above a heading."""
    titles = {}
    for source in sources:
        lines = source.splitlines()
        for line, after in zip(lines, lines[1:], strict=False):
            label = re.match(r"^\(([\w-]+)\)=$", line.strip())
            if label and after.startswith("#"):
                titles[label[1]] = after.lstrip("#").strip()
    return titles


def _recap_prerequisites(source: str, chapters: Sequence[str]) -> tuple[str, ...]:
    """The chapters named by the recap: the list after the "needs from earlier chapters"
    sentence, up to the first section."""
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if _RECAP.search(line)), None)
    if start is None:
        return ()
    found: list[str] = []
    for line in lines[start + 1:]:
        if line.startswith(("## ", "```")):
            break
        for target in _REFERENCE.findall(line):
            target = re.sub(r"^(?:thm|def|prop|lem|cor|alg|fig|tbl|eq)-", "", target)
            named = [slug for slug in chapters if target == slug or target.startswith(slug + "-")]
            for slug in sorted(named, key=len)[-1:]:
                if slug not in found:
                    found.append(slug)
    return tuple(found)


def chapter_exercises(source: str, number: int) -> tuple[ExerciseEffort, ...]:
    """The exercises of a chapter's source, numbered ``number.k`` in order, each with the
    effort its opening line states.

    Raises:
        ValueError: an exercise whose text does not open with its effort line.
    """
    lines = source.splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.strip() != "```{exercise-start}":
            continue
        label = lines[i + 1].removeprefix(":label:").strip() if i + 1 < len(lines) else ""
        close = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if not label or close is None:
            raise ValueError(f"source: the exercise-start on line {i + 1} needs a :label: "
                             f"line and a closing fence")
        text = next((line.strip() for line in lines[close + 1:] if line.strip()), "")
        match = EFFORT.match(text)
        if match is None:
            raise ValueError(f"exercise {label}: its text must open with a line like "
                             f"'*Medium · about 20 min · 5 points*', got {text!r}")
        found.append(ExerciseEffort(label, f"{number}.{len(found) + 1}", match[1].lower(),
                                    int(match[2]), int(match[3])))
    return tuple(found)


def read_course(root: str | os.PathLike) -> tuple[Chapter, ...]:
    """The numbered chapters of the book at ``root`` (the folder with ``_toc.yml``), in order.

    Raises:
        FileNotFoundError: ``root`` has no ``_toc.yml``.
        ValueError: an exercise without its effort line.
    """
    import yaml  # the book's toolchain has it; the package's exercises do not need it

    root = Path(root)
    toc_path = root / "_toc.yml"
    if not toc_path.is_file():
        raise FileNotFoundError(f"root: {root} has no _toc.yml; expected the book's folder")
    toc = yaml.safe_load(toc_path.read_text())
    entries = [(part["caption"], chapter["file"]) for part in toc.get("parts", [])
               if part.get("numbered") for chapter in part["chapters"]]
    slugs = [Path(file).name for _, file in entries]
    titles = section_titles(path.read_text() for path in sorted((root / "book").glob("*.md")))
    chapters = []
    for number, (part, file) in enumerate(entries, start=1):
        source = (root / f"{file}.md").read_text()
        title = next((line[2:].strip() for line in source.splitlines()
                      if line.startswith("# ")), None)
        if title is None:
            raise ValueError(f"{file}.md has no title (a line starting with '# ')")
        chapters.append(Chapter(
            slug=Path(file).name, number=number, title=title, part=part,
            prerequisites=_recap_prerequisites(source, slugs[:number - 1]),
            exercises=chapter_exercises(source, number), words=main_path_words(source, titles)))
    return tuple(chapters)
