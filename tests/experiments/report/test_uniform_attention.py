"""A mapping whose every run attends uniformly is flagged under its table's headline: at its
settings it computes the attention-free control (Table 1's oscarmax at γ = 16 does)."""

import copy

from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.report.tables import attends_uniformly, render_table
from regattn_fairseq.experiments.rows.store import read_rows


def test_table1_flags_oscarmax_alone():
    rows = read_rows(RESULTS_DIR / "raw" / "table1.jsonl")
    markdown = render_table(load_config("reproduce", "table1"), rows, RESULTS_DIR)
    flagged = [line for line in markdown.splitlines() if "attends uniformly**" in line]
    assert len(flagged) == 1 and flagged[0].startswith("**oscarmax (γ=16) attends uniformly**")
    headline = markdown.split("#### Headline")[1].split("#### Claims")[0]
    assert flagged[0] in headline  # read before the claims it qualifies


def test_a_sparse_or_unmeasured_row_does_not_attend_uniformly():
    [uniform] = [
        row
        for row in read_rows(RESULTS_DIR / "raw" / "table1.jsonl")
        if row["mapping"] == "uniform" and row["seed"] == 1
    ]
    assert attends_uniformly(uniform)
    sparse = copy.deepcopy(uniform)
    sparse["attention"]["mean_zero_fraction"] = 0.2
    two_clusters = copy.deepcopy(uniform)
    two_clusters["attention"].update(mean_clusters_per_row=2.0, mean_cluster_size=8.077)
    unmeasured = {**uniform, "attention": None}
    assert not any(attends_uniformly(row) for row in (sparse, two_clusters, unmeasured))
