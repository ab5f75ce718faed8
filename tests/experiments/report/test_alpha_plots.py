"""The learned-α view (report/alpha_plots.py): the summary line's numbers, and one heat map
per seed drawn for the rows that record α per layer and head, none for the others."""

from regattn_fairseq.experiments.report import alpha_plots


def _row(seed, alpha):
    return {"seed": seed, "mapping": "entmax_learned", "attention": {"alpha": alpha}}


def test_the_summary_counts_heads_and_spread():
    row = _row(2, [[1.2, 1.8], [1.5, 1.5]])
    assert alpha_plots.alpha_summary(row) == (
        "seed 2: α mean 1.50, range 1.20–1.80, sd over heads 0.21; 1 of 4 heads above 1.5"
    )


def test_the_summary_adds_the_spread_after_each_epoch_where_recorded():
    row = _row(2, [[1.2, 1.8], [1.5, 1.5]])
    row["train"] = {"learning_curve": {"alpha_sd": [0.014, 0.02, 0.2121]}}
    assert alpha_plots.alpha_summary(row).endswith(
        "1 of 4 heads above 1.5; sd over heads after each epoch: 0.01, 0.02, 0.21"
    )


def test_rows_without_a_learned_alpha_draw_nothing(tmp_path):
    rows = [{"seed": 1, "attention": {"mean_zero_fraction": 0.3}}, {"seed": 2}]
    assert alpha_plots.learned_alpha_rows(rows) == []
    assert alpha_plots.plot_learned_alpha(rows, tmp_path / "a.png", "t") is None
    assert not (tmp_path / "a.png").exists()


def test_one_panel_per_seed_in_seed_order(tmp_path):
    rows = [_row(3, [[1.1] * 12] * 6), _row(1, [[1.9] * 12] * 6)]
    assert [r["seed"] for r in alpha_plots.learned_alpha_rows(rows)] == [1, 3]
    path = alpha_plots.plot_learned_alpha(rows, tmp_path / "alpha.png", "title")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
