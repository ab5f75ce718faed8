"""regattn.analysis: zeros, support, runs and clusters on hand-made attention rows
whose answers are counted by hand, and on rows of the real mappings."""

import numpy as np
import pytest
import torch

from regattn import analysis, mappings

# Four rows of length 5, with what each holds:
HAND_MADE = [
    [0.0, 0.25, 0.25, 0.0, 0.5],  # 2 zeros; run {1,2}; cluster {1,2}
    [0.2, 0.3, 0.2, 0.3, 0.0],  # 1 zero; no run (neighbours differ); clusters {0,2}, {1,3}
    [0.1, 0.1, 0.1, 0.35, 0.35],  # no zero; runs {0,1,2}, {3,4}; the same two clusters
    [1.0, 0.0, 0.0, 0.0, 0.0],  # 4 zeros, which are equal but form no group
]


def test_statistics_of_hand_made_rows():
    stats = analysis.attention_statistics(HAND_MADE)
    assert stats == pytest.approx(
        {
            "rows": 4,
            "mean_row_length": 5.0,
            "mean_zero_fraction": (2 / 5 + 1 / 5 + 0 + 4 / 5) / 4,
            "mean_support_size": (3 + 4 + 5 + 1) / 4,
            "mean_runs_per_row": (1 + 0 + 2 + 0) / 4,
            "mean_run_size": (2 + 3 + 2) / 3,  # pooled over the three runs
            "mean_clusters_per_row": (1 + 2 + 2 + 0) / 4,
            "mean_cluster_size": (2 + 2 + 2 + 3 + 2) / 5,
        }
    )


@pytest.mark.parametrize(
    "row, runs, clusters",
    [
        (HAND_MADE[0], [[1, 2]], [[1, 2]]),
        (HAND_MADE[1], [], [[0, 2], [1, 3]]),
        (HAND_MADE[2], [[0, 1, 2], [3, 4]], [[0, 1, 2], [3, 4]]),
        (HAND_MADE[3], [], []),
        # equal weights split by a zero: two runs, one cluster
        ([0.2, 0.2, 0.0, 0.2, 0.2, 0.2], [[0, 1], [3, 4, 5]], [[0, 1, 3, 4, 5]]),
        ([1.0], [], []),
    ],
)
def test_runs_and_clusters_are_the_hand_counted_positions(row, runs, clusters):
    assert [list(group) for group in analysis.equal_weight_runs(row)] == runs
    assert [list(group) for group in analysis.equal_weight_clusters(row)] == clusters


def test_softmax_rows_have_no_zeros_and_no_groups():
    rows = torch.softmax(torch.randn(20, 7, generator=torch.Generator().manual_seed(1)), -1)
    stats = analysis.attention_statistics(rows)
    assert stats["mean_zero_fraction"] == 0 and stats["mean_support_size"] == 7
    assert stats["mean_runs_per_row"] == 0 and stats["mean_run_size"] is None
    assert stats["mean_clusters_per_row"] == 0 and stats["mean_cluster_size"] is None


@pytest.mark.parametrize("name, params", [("fusedmax", {"lam": 0.3}), ("oscarmax", {"lam": 0.1})])
def test_every_run_of_a_real_mapping_lies_in_one_cluster(name, params):
    # random-walk scores: neighbours close, so that fusedmax and oscarmax form groups
    steps = 0.4 * torch.randn(30, 12, generator=torch.Generator().manual_seed(0))
    rows = mappings.build(name, **{**mappings.defaults_of(name), **params})(steps.cumsum(-1))
    found_groups = False
    for row in rows:
        clusters = [set(c) for c in analysis.equal_weight_clusters(row)]
        for run in analysis.equal_weight_runs(row):
            assert sum(set(run) <= cluster for cluster in clusters) == 1
            found_groups = True
    assert found_groups, f"{name} formed no group: the check above tested nothing"
    stats = analysis.attention_statistics(rows)
    assert stats["mean_clusters_per_row"] > 0 and stats["mean_zero_fraction"] > 0


def test_tolerance_makes_near_equal_weights_a_group():
    row = [0.3, 0.3 + 1e-9, 0.4 - 1e-9]
    assert analysis.equal_weight_runs(row) == []
    assert [list(r) for r in analysis.equal_weight_runs(row, tol=1e-6)] == [[0, 1]]
    stats = analysis.attention_statistics([[1e-9, 1 - 1e-9]], tol=1e-6)
    assert stats["mean_zero_fraction"] == 0.5


def test_rows_may_be_lists_arrays_or_tensors():
    as_list = analysis.attention_statistics(HAND_MADE)
    assert analysis.attention_statistics(np.array(HAND_MADE)) == as_list
    assert analysis.attention_statistics(
        torch.tensor(HAND_MADE, dtype=torch.float32)
    ) == pytest.approx(as_list)


@pytest.mark.parametrize(
    "rows, message",
    [
        ([[0.5, 0.6]], "sums to"),
        ([[1.2, -0.2]], "negative"),
        ([[float("nan"), 1.0]], "NaN"),
        ([[]], "non-empty"),
        ([[[0.5, 0.5]]], "vector"),
        ([], "no attention rows"),
    ],
)
def test_rows_that_are_not_distributions_are_errors(rows, message):
    with pytest.raises(ValueError, match=message):
        analysis.attention_statistics(rows)


def test_describe_mapping_uses_the_papers_names_and_symbols():
    assert (
        analysis.describe_mapping("sq_pnorm_max", {"gamma": 1.0, "p": 1.5})
        == "sq-pnorm-max (γ=1, p=1.5)"
    )
    assert analysis.describe_mapping("entmax", {"alpha": "learned"}) == "entmax (α=learned)"
    assert analysis.describe_mapping("softmax", {}) == "softmax"


def test_describe_learned_alpha_counts_heads_and_spread():
    """Mean, range, standard deviation over every head (population sd) and the heads sparser
    than 1.5-entmax, for any shape of α."""
    words = analysis.describe_learned_alpha([[1.2, 1.8], [1.5, 1.5]])
    assert words == "α mean 1.50, range 1.20–1.80, sd over heads 0.21; 1 of 4 heads above 1.5"
    assert analysis.describe_learned_alpha([1.1, 1.3]).endswith(
        "sd over heads 0.10; 0 of 2 heads above 1.5"
    )
