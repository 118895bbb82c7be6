"""``attnbook.course``: the chapters, prerequisites, exercises and reading load, read from the
book's sources. (The count of main-path words is checked against the built pages in
tests/test_book.py.)"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from attnbook.course import (
    READING_PACE,
    chapter_exercises,
    main_path_words,
    read_course,
    reading_minutes,
    section_titles,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_book_reads_as_numbered_chapters_that_need_only_earlier_ones():
    chapters = read_course(ROOT)
    assert [chapter.number for chapter in chapters] == list(range(1, len(chapters) + 1))
    assert len(chapters) >= 13
    seen: set[str] = set()
    for chapter in chapters:
        assert set(chapter.prerequisites) <= seen, chapter.slug
        seen.add(chapter.slug)
        assert chapter.exercises and chapter.words > 1000
        assert [e.number for e in chapter.exercises] == [
            f"{chapter.number}.{k}" for k in range(1, len(chapter.exercises) + 1)]
        assert all(e.label == f"{chapter.slug}-ex{e.number.split('.')[1]}"
                   for e in chapter.exercises)
    # the first chapter builds on none; every later one names at least one
    assert chapters[0].prerequisites == () and all(c.prerequisites for c in chapters[1:])


SOURCE = textwrap.dedent("""\
    ---
    kernelspec:
      name: python3
    ---

    (demo)=
    # A demo chapter

    :::{admonition} Learning goals
    :class: tip
    - read two words
    :::

    What it needs from earlier chapters, one sentence each:

    - **Scores** ({ref}`ch. 1 <first>`): one two.
    - **Masks** ({eq}`second-eq-mask`) and {prf:ref}`def-second-x`; later {ref}`fourth`.

    (demo-words)=
    ## Counted words

    Three more words, {glue:text}`demo-number:.2f` and `inline code` and {ref}`demo-words`.

    ```{code-cell} ipython3
    not prose at all
    ```

    $$
    a + b = c
    $$

    :::{dropdown} Folded away
    hidden hidden hidden
    :::

    | a | table |
    |---|---|

    ## Going deeper

    Not on the main path.
    """)


def test_main_path_words_count_what_a_reader_reads_first():
    titles = section_titles([SOURCE])
    assert titles == {"demo": "A demo chapter", "demo-words": "Counted words"}
    # Learning goals (2) + "read two words" (3) + the recap line (9) + "Scores ch one two"
    # (4) + "Masks and Definition later fourth" (5) + "Three more words and inline code
    # and Counted words" (9): headings, code, maths, folded boxes, tables and Going deeper
    # are left out.
    assert main_path_words(SOURCE, titles) == 2 + 3 + 9 + 4 + 5 + 9


def test_the_recap_names_the_prerequisites(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    (tmp_path / "_toc.yml").write_text(textwrap.dedent("""\
        format: jb-book
        root: book/intro
        parts:
          - caption: Part I
            numbered: true
            chapters:
              - file: book/first
              - file: book/second
              - file: book/demo
              - file: book/fourth
    """))
    effort = "```{exercise-start}\n:label: X-ex1\n```\n\n*Easy · about 5 min · 2 points*\n"
    for slug in ("first", "second", "fourth"):
        (book / f"{slug}.md").write_text(f"# {slug.title()}\n\n" + effort.replace("X", slug))
    (book / "demo.md").write_text(SOURCE + effort.replace("X", "demo"))
    chapters = read_course(tmp_path)
    # "fourth" is a later chapter: a forward reference is not a prerequisite
    assert chapters[2].prerequisites == ("first", "second")
    assert chapters[2].exercises[0].number == "3.1" and chapters[2].title == "A demo chapter"
    (book / "fourth.md").write_text(
        "# Fourth\n\n" + effort.replace("X", "fourth").replace("*Easy", "Easy"))
    with pytest.raises(ValueError, match="exercise fourth-ex1: its text must open with"):
        read_course(tmp_path)
    with pytest.raises(FileNotFoundError, match="has no _toc.yml"):
        read_course(book)


def test_exercises_are_numbered_in_the_chapter_and_carry_their_effort():
    text = ("```{exercise-start}\n:label: a-ex1\n```\n\n*Hard · about 45 min · 8 points*\n\n"
            "```{exercise-start}\n:label: a-ex2\n```\n\n*Easy · about 5 min · 1 point*\n")
    first, second = chapter_exercises(text, 4)
    assert (first.number, first.difficulty, first.minutes, first.points) == ("4.1", "hard",
                                                                            45, 8)
    assert (second.label, second.number, second.points) == ("a-ex2", "4.2", 1)


@pytest.mark.parametrize(("words", "minutes"), [(0, 0), (1, 5), (200, 5), (201, 10),
                                                (2200, 55)])
def test_reading_minutes_round_up_to_five(words, minutes):
    assert READING_PACE == 40
    assert reading_minutes(words) == minutes


@pytest.mark.parametrize(("call", "error", "fragment"), [
    (lambda: reading_minutes(-1), ValueError, "words must be a non-negative integer"),
    (lambda: reading_minutes(10, pace=0), ValueError, "pace must be a positive integer"),
    (lambda: main_path_words(b"text"), TypeError, "source must be the text of a chapter"),
])
def test_bad_arguments_are_named(call, error, fragment):
    with pytest.raises(error, match=fragment):
        call()


@pytest.mark.parametrize(("text", "words"), [
    ("```python\nq = q.view(B, h, L, d_head)  # the right shape\n```\nTwo words.\n", 2),
    ("````{exercise-start}\n:label: a-ex1\n````\nhidden text\n````{exercise-end}\n````\n"
     "Seen.\n", 1),
    ("::::{dropdown} Folded\n:::{note}\ninside a fold\n:::\n::::\nOne two three.\n", 3),
    ("```{list-table}\n* - cell words\n```\nAfter.\n", 1),
    ("$$ a = b $$\nStill prose here.\n", 3),
    ("$$\na = b\n$$\nProse.\n", 1),
])
def test_main_path_words_skip_every_kind_of_block(text, words):
    assert main_path_words(text) == words


@pytest.mark.parametrize(("text", "fragment"), [
    ("---\nkernelspec: x\n", "front matter opens with --- and never closes"),
])
def test_a_broken_source_is_named(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        main_path_words(text)
    with pytest.raises(ValueError, match="needs a :label: line and a closing fence"):
        chapter_exercises("```{exercise-start}\n:label: a-ex1\n", 1)
