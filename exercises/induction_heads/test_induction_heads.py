"""Tests of exercises induction-heads-ex1, -ex2 and -ex3. Run from the repository root:
`.venv/bin/python -m pytest exercises/induction_heads`."""

import torch

from attnbook.checks import check_copying_score, check_mean_ablation, check_prefix_matching_score

from .solution import copying_score, mean_ablate, prefix_matching_score


def one_hot_map(keys):
    """(L, L): query t puts all its weight on key keys[t]."""
    return torch.nn.functional.one_hot(torch.tensor(keys), len(keys)).float()


def test_an_induction_head_scores_one_and_a_duplicate_token_head_zero():
    T, L = 4, 8  # tokens a b c d a b c d
    # Second copy: the induction head looks at key t - T + 1, the token after the earlier
    # occurrence; the duplicate-token head at key t - T, the occurrence itself. In the first
    # copy both look at the query itself.
    induction = one_hot_map([0, 1, 2, 3, 1, 2, 3, 4])
    duplicate = one_hot_map([0, 1, 2, 3, 0, 1, 2, 3])
    scores = prefix_matching_score(torch.stack([induction, duplicate]), T)  # (2,)
    assert scores.shape == (2,), (
        f"one score per map: weights (2, {L}, {L}) give a score of shape (2,), got "
        f"{tuple(scores.shape)}"
    )
    assert torch.allclose(scores, torch.tensor([1.0, 0.0])), (
        f"the induction head puts weight 1 on key t - T + 1 for every query t = {T} .. "
        f"{L - 1}, so it scores 1; the duplicate-token head puts it on key t - T, the "
        f"earlier occurrence itself, and scores 0. Got {scores.tolist()}"
    )


def test_mean_ablation_makes_one_head_the_same_everywhere():
    merged = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(0))  # 4 heads of 2
    before = merged.clone()
    out = mean_ablate(merged, 1, 4)
    assert out.shape == merged.shape, (
        f"the result has merged's shape {tuple(merged.shape)}, got {tuple(out.shape)}"
    )
    assert torch.equal(merged, before), "mean_ablate must not change merged: clone it first"
    mean = merged[..., 2:4].mean(dim=(0, 1))  # (2,): head 1 is features 2 and 3
    assert torch.allclose(out[..., 2:4], mean.expand(3, 5, 2), atol=1e-6), (
        f"head 1's features 2 and 3 become their mean over the batch and the positions, "
        f"{mean.tolist()}, in every sequence and at every position"
    )
    others = [0, 1, 4, 5, 6, 7]
    assert torch.equal(out[..., others], merged[..., others]), (
        "the other heads' features pass through unchanged"
    )


def test_a_copier_scores_plus_one_and_its_opposite_minus_one():
    gen = torch.Generator().manual_seed(1)
    embed = torch.randn(10, 6, generator=gen)  # (vocab, d_model), tied: unembed = embed
    w_v = torch.randn(2, 6, generator=gen)  # (d_head, d_model)
    copier = float(copying_score(w_v, w_v.T, embed, embed))
    opposite = float(copying_score(w_v, -w_v.T, embed, embed))
    # M = E W_v^T W_v E^T is positive semi-definite: every eigenvalue is >= 0.
    assert abs(copier - 1.0) < 1e-5, (
        f"with w_o = w_v.T and unembed = embed, M = E w_v.T w_v E^T has no negative "
        f"eigenvalue, so the score is +1; got {copier}"
    )
    assert abs(opposite + 1.0) < 1e-5, (
        f"with w_o = -w_v.T every eigenvalue of M changes sign: the score is -1; got "
        f"{opposite}"
    )


def test_prefix_matching_against_the_package():
    check_prefix_matching_score(prefix_matching_score)


def test_mean_ablation_against_the_package():
    check_mean_ablation(mean_ablate)


def test_copying_score_against_the_package():
    check_copying_score(copying_score)
