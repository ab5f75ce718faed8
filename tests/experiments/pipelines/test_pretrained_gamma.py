"""The pretrained-encoder table's γ choice (pipelines/pretrained.py): a choice recorded in the
rows is reused only for the same grid, selection seeds and short runs."""

from types import SimpleNamespace

from omegaconf import OmegaConf

from regattn_fairseq.experiments.pipelines import pretrained

SHORT_RUNS = {"valid_pairs": 2000, "max_epoch": 1, "patience": 0}


def _experiment(short_runs):
    return OmegaConf.create({"name": "snli_minilm", "gamma_select": {"small": short_runs}})


def _table(rows):
    return SimpleNamespace(
        args=SimpleNamespace(gamma_grid=None),
        spec=OmegaConf.create({"gamma_grid": [0.25, 1.0, 4.0, 16.0], "gamma_grid_extend": 2}),
        selection_seeds=[1],
        scale="small",
        rows=lambda: rows,
    )


def _row(criterion):
    selection = {
        "grid": [0.25, 1.0, 4.0, 16.0],
        "extend": 2,
        "extended": [],
        "criterion": criterion,
        "seeds": [1],
        "validation": {"4.0": 0.61, "16.0": 0.64},
        "chosen": 4.0,
    }
    return {
        "experiment": "snli_minilm",
        "mapping": "sparsemax",
        "scale": "small",
        "gamma_selection": selection,
    }


def test_the_criterion_names_what_the_short_runs_change():
    assert pretrained._criterion(_experiment(SHORT_RUNS), "small") == (
        "validation loss of short runs (valid_pairs=2000, max_epoch=1, patience=0)"
    )


def test_a_choice_is_reused_only_from_the_same_short_runs():
    experiment = _experiment(SHORT_RUNS)
    same = _row(pretrained._criterion(experiment, "small"))
    table = _table([same])
    assert pretrained._recorded_choice(table, experiment, "sparsemax")["chosen"] == 4.0
    # a choice made on the first 4,000 training pairs is not one made on all of them
    fewer = _experiment({"train_pairs": 4000, **SHORT_RUNS})
    assert pretrained._recorded_choice(table, fewer, "sparsemax") is None
    assert pretrained._recorded_choice(table, experiment, "oscarmax") is None
