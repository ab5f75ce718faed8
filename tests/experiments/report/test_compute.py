"""A table's CPU-hours from its rows (`report.compute`): training and decoding as measured, each
run once over its evaluation sets, baselines left out, and the γ grids estimated at the epochs
their short runs trained, whichever way the table's selection states them."""

import pytest

from regattn_fairseq.experiments.report.compute import table_cost

HOUR = 3600.0


def _row(mapping, seed, evaluation="test", wall_s=7200.0, epochs=8, selection=None, **extra):
    """One evaluation's row of a run: `wall_s` of training over `epochs`, 60 s of decoding."""
    return {
        "run_id": f"{mapping}-{seed}",
        "experiment": "snli",
        "scale": "small",
        "data_source": "offline",
        "evaluation": evaluation,
        "mapping": mapping,
        "seed": seed,
        "date": f"2026-11-29T00:00:0{seed}",
        "config_sha256": f"config-{mapping}",
        "git_commit": "0123456789abcdef",
        "train": {"wall_s": wall_s, "epochs": epochs, "config": {"model": {}}},
        "decode": {"wall_s": 60.0},
        "gamma_selection": selection,
        "baseline": None,
        **extra,
    }


def _selection(criterion, grid=(1.0, 4.0, 16.0), extended=(64.0,), seeds=(1,)):
    return {
        "chosen": 16.0,
        "criterion": criterion,
        "grid": list(grid),
        "extended": list(extended),
        "seeds": list(seeds),
    }


def test_training_and_decoding_count_each_run_once_and_no_baseline():
    rows = [
        _row("softmax", 1, "dev2"),
        _row("softmax", 1, "test"),  # the same run's second evaluation set
        _row("softmax", 2),
        {**_row("baseline: majority class", 0), "baseline": {"name": "majority_class"}},
    ]
    cost = table_cost("t", rows)
    assert cost.runs == 2
    assert cost.training_h == pytest.approx(2 * 7200 / HOUR)
    assert cost.decoding_h == pytest.approx(3 * 60 / HOUR)  # decoding is per evaluation set
    assert cost.grid_h == 0.0 and cost.commits == "0123456789"


@pytest.mark.parametrize(
    ("criterion", "epochs"),
    [
        # the fairseq tables: best validation loss within the first GAMMA_SELECT_EPOCHS
        ("best validation loss within the first 3 epochs (early stopping off)", 3),
        # a fine-tuned table: one short run per γ (pretrained._criterion)
        ("validation loss of short runs (valid_pairs=2000, max_epoch=1, patience=0)", 1),
        # a criterion that states no epochs: the cell's median epochs
        ("lowest validation loss", 8),
    ],
)
def test_a_gamma_grid_is_counted_at_the_epochs_its_runs_trained(criterion, epochs):
    """4 γ tried (3 in the grid, 1 beyond its edge) × 2 selection seeds × `epochs` epochs × the
    cell's 900 s per epoch."""
    selection = _selection(criterion, seeds=(1, 2))
    rows = [_row("sparsemax", seed, selection=selection) for seed in (1, 2, 3)]
    cost = table_cost("t", rows)
    assert cost.grid_h == pytest.approx(4 * 2 * epochs * 900 / HOUR)
    assert cost.total_h == pytest.approx(cost.training_h + cost.decoding_h + cost.grid_h)
