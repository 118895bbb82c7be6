"""Tests of exercise static-embeddings-ex3. Run from the repository root:
`.venv/bin/python -m pytest exercises/static_embeddings`."""

import torch

from attnbook.checks import check_nearest_by_cosine

from .solution import nearest_by_cosine


def test_a_tiny_table_by_hand():
    table = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0], [-1.0, 0.0]])
    query = torch.tensor([2.0, 0.0])  # points along the first axis
    ids, cosines = nearest_by_cosine(table, query, 2)
    assert ids.tolist() == [0, 2], (
        f"row 0 points exactly along the query (cosine 1) and row 2 at 45 degrees "
        f"(cosine 0.707), so the answer is [0, 2]; got ids {ids.tolist()}"
    )
    assert torch.allclose(cosines, torch.tensor([1.0, 2**-0.5])), (
        f"expected cosines [1.0, 0.7071], got {cosines.tolist()}"
    )


def test_exclude_leaves_the_row_out():
    table = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    ids, _ = nearest_by_cosine(table, table[0], 1, exclude=0)
    assert ids.tolist() == [1], (
        f"with exclude=0 the nearest row to row 0 is row 1; got ids {ids.tolist()}"
    )


def test_against_the_package_on_random_and_real_tables():
    check_nearest_by_cosine(nearest_by_cosine, pretrained=True)
