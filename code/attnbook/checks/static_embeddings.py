"""The checker of the chapter ``static-embeddings``: :func:`check_nearest_by_cosine`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .._validate import require_function
from ..pretrained import load_model, nearest_rows
from .compare import Mismatch, expect_close, expect_pair, randn, values
from .harness import Checks, call_reader, name_of

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_nearest_by_cosine"]


def check_nearest_by_cosine(nearest_fn: Callable, *, pretrained: bool = False) -> None:
    """Check ``nearest_fn(table, query, k, exclude=None) -> (ids, cosines)``.

    The exercise of the chapter ``static-embeddings``: ``table`` is ``(V, E)``, ``query``
    is ``(E,)``; the answer is the ids ``(k,)`` of the ``k`` rows with the largest cosine to
    ``query``, most similar first, leaving out row ``exclude`` when it is given, and their
    cosines ``(k,)``. The reference is :func:`attnbook.pretrained.nearest_rows`, the
    arithmetic of :func:`attnbook.pretrained.nearest_tokens`.

    Checks seeded random tables (rows of very different lengths, a long query, an excluded
    row, ``k = 1`` and ``k = V - 1``); with ``pretrained=True`` also the real embedding
    table of :func:`attnbook.pretrained.load_model`, with tokens in the messages.
    """
    nearest_fn = require_function("nearest_fn", nearest_fn)
    checks = Checks("check_nearest_by_cosine")
    name = name_of(nearest_fn)

    def run(table: Tensor, query: Tensor, k: int, exclude: int | None,
            tokens: Callable[[list[int]], list[str]] | None = None) -> None:
        args = (table.clone(), query.clone(), k) + ((exclude,) if exclude is not None else ())
        call = f"{name}(table, query, k={k}" + (f", exclude={exclude})" if exclude is not None
                                                else ")")
        result = call_reader(call, nearest_fn, *args,
                             names=("table", "query", "k", "exclude"))
        got_ids, got_cosines = expect_pair(call, result, "ids", "cosines")
        ids, cosines = nearest_rows(table, query, k, exclude)
        try:
            got_ids = torch.as_tensor(got_ids).detach().cpu()
        except (TypeError, ValueError, RuntimeError):
            raise Mismatch(f"ids is a {type(got_ids).__name__}, expected a tensor of {k} "
                           f"ints", [], "return the ids that `topk` gives you.") from None
        if got_ids.shape != ids.shape or got_ids.is_floating_point():
            raise Mismatch(f"ids has shape {tuple(got_ids.shape)} and dtype {got_ids.dtype}, "
                           f"expected shape {tuple(ids.shape)} of integers",
                           [f"got ids = {values(got_ids.flatten(), 10)}"],
                           "`values, ids = cosines.topk(k)` gives k integer ids; return "
                           "`ids, values`.")
        got_list, expected_list = got_ids.tolist(), ids.tolist()
        if got_list != expected_list:
            rank = next(i for i, (a, b) in enumerate(zip(got_list, expected_list, strict=True))
                        if a != b)
            if tokens is None:
                shown_expected, shown_got = values(expected_list, 10), values(got_list, 10)
            else:
                shown_expected, shown_got = tokens(expected_list), tokens(got_list)
            by_dot = (table @ query).topk(k).indices.tolist() if exclude is None else None
            if exclude is not None and exclude in got_list:
                hint = (f"leave out row exclude={exclude}: set its cosine to -inf before "
                        f"`topk`.")
            elif sorted(got_list) == sorted(expected_list):
                hint = "most similar first: sort by decreasing cosine (`topk` does)."
            elif got_list == by_dot:
                hint = ("you ranked by the raw dot product, which favours long rows; cosine "
                        "divides by the length of each row and of the query.")
            else:
                hint = ("the cosine of row i is table[i] · query / (|table[i]| |query|); "
                        "normalise the rows along dim=1 (`keepdim=True`).")
            raise Mismatch(
                f"wrong ids from rank {rank} on",
                [f"expected ids: {shown_expected}", f"got ids:      {shown_got}",
                 f"expected cosines: {values(cosines, 10)}"], hint)
        unit_rows = table / table.norm(dim=1, keepdim=True)  # (V, E)
        expect_close("cosines", got_cosines, cosines,
                     hint="cosine = dot product of the two vectors divided by both lengths.",
                     mistakes=[("divide by the length of the query too: a cosine lies "
                                "between -1 and 1.", lambda: (unit_rows @ query)[ids])])

    tables = {seed: randn(50, 8, seed=seed) for seed in (1, 2)}
    with checks.case("a random table (50, 8), query (8,), k=5"):
        run(tables[1], randn(8, seed=11), 5, None)
    with checks.case("rows of very different lengths, k=5"):
        lengths = 10.0 ** torch.linspace(-2, 2, 50)[torch.randperm(
            50, generator=torch.Generator().manual_seed(3))]
        run(tables[2] * lengths[:, None], randn(8, seed=12), 5, None)
    with checks.case("a query of length 100, k=5"):
        query = randn(8, seed=13)
        run(tables[1], 100 * query / query.norm(), 5, None)
    with checks.case("query = row 7 of the table, exclude=7, k=5"):
        run(tables[2], tables[2][7], 5, 7)
    with checks.case("k=1"):
        run(tables[1], randn(8, seed=14), 1, None)
    with checks.case("k=49 (every row but the excluded one), exclude=0"):
        run(tables[2], tables[2][0], 49, 0)
    if pretrained:
        model = load_model()
        table = model.embedding_table.float()  # (V, E)
        for word in ("bank", "river"):
            with checks.case(f"the real {model.name} table {tuple(table.shape)}, "
                             f"query {word!r}, k=10"):
                token_id = model.tokenizer.convert_tokens_to_ids(word)
                run(table, table[token_id], 10, token_id,
                    tokens=model.tokenizer.convert_ids_to_tokens)
    checks.passed()
