"""Training to convergence: the validation curve a row records, why training stopped, the
config key's patience, the table's convergence lines and the learning-curve figure."""

import json

import pytest
from omegaconf import OmegaConf

from regattn_fairseq.experiments.report import learning_curves
from regattn_fairseq.experiments.report import tables as results
from regattn_fairseq.experiments.rows import keys as rowkeys
from regattn_fairseq.experiments.train import train as runs


def _log(valid: dict, train: dict | None = None) -> str:
    """A fairseq-hydra-train log with one valid (and train) record per epoch."""
    lines = ["[2026-11-25 10:00:00][fairseq_cli.train][INFO] - begin training"]
    for epoch, loss in valid.items():
        lines.append(
            "[2026-11-25 10:00:01][valid][INFO] - "
            + json.dumps({"epoch": epoch, "valid_loss": str(loss), "valid_num_updates": "10"})
        )
        if train and epoch in train:
            lines.append(
                "[2026-11-25 10:00:02][train][INFO] - "
                + json.dumps({"epoch": epoch, "train_loss": str(train[epoch]), "train_wps": "1"})
            )
    return "\n".join(lines) + "\n"


def test_early_stopped_run_records_its_best_epoch_and_why_it_stopped():
    text = _log({1: 5.0, 2: 4.0, 3: 3.5, 4: 3.6, 5: 3.5, 6: 3.7}, {1: 6.0, 2: 4.5})
    curve = runs.learning_curve(text, patience=3, max_epoch=50)
    assert curve["epochs"] == [1, 2, 3, 4, 5, 6]
    assert curve["valid_loss"] == [5.0, 4.0, 3.5, 3.6, 3.5, 3.7]
    assert curve["train_loss"][:2] == [6.0, 4.5] and curve["train_loss"][2] is None
    # a tie does not reset early stopping's count, but fairseq saves checkpoint_best.pt on it:
    # the kept epoch is the last of the lowest loss
    assert curve["best_epoch"] == 5 and curve["best_valid_loss"] == 3.5
    assert curve["stopped_epoch"] == 6 and curve["stop"] == "patience"
    assert curve["rule_stop_epoch"] == 6 and curve["metric"] == "loss"


def _accuracy_log(accuracy: dict, loss: dict) -> str:
    lines = []
    for epoch, value in accuracy.items():
        record = {"epoch": epoch, "valid_loss": str(loss[epoch]), "valid_accuracy": str(value)}
        lines.append("[2026-11-25 10:00:01][valid][INFO] - " + json.dumps(record))
    return "\n".join(lines) + "\n"


def test_a_run_chosen_on_accuracy_keeps_and_stops_on_accuracy_not_loss():
    """SNLI keeps the checkpoint of the best validation accuracy and stops on it: the curve's
    best epoch and stop follow the accuracy, while the loss (drawn) is lowest elsewhere."""
    loss = {1: 1.0, 2: 0.8, 3: 0.85, 4: 0.9, 5: 0.95, 6: 1.0}
    accuracy = {1: 50.0, 2: 55.0, 3: 58.0, 4: 57.0, 5: 58.0, 6: 56.0}
    text = _accuracy_log(accuracy, loss)
    curve = runs.learning_curve(text, patience=3, max_epoch=50, metric="accuracy", maximize=True)
    assert curve["best_epoch"] == 5 and curve["best_valid_accuracy"] == 58.0
    assert curve["best_valid_loss"] == 0.95 and curve["valid_accuracy"][2] == 58.0
    assert curve["stop"] == "patience" and curve["rule_stop_epoch"] == 6
    line = learning_curves.convergence_lines([_curve_row(curve)])[2]
    assert "best epoch 5 of 6 (valid accuracy 58, chosen on it; valid loss 0.950)" in line
    # on the loss it would have kept epoch 2 and stopped at 5
    by_loss = runs.learning_curve(text, patience=3, max_epoch=50)
    assert by_loss["best_epoch"] == 2 and by_loss["rule_stop_epoch"] == 5


def test_a_run_trained_past_its_stop_says_where_the_rule_stopped_it():
    """A run resumed before early stopping's count was kept could train past the rule's stop;
    its convergence line says so."""
    losses = {1: 5.0, 2: 4.0, 3: 4.1, 4: 4.2, 5: 4.3, 6: 3.9, 7: 4.0}
    curve = runs.learning_curve(_log(losses), patience=3, max_epoch=50)
    assert curve["rule_stop_epoch"] == 5 and curve["stopped_epoch"] == 7
    assert curve["best_epoch"] == 6 and curve["stop"] == "patience"
    line = learning_curves.convergence_lines([_curve_row(curve)])[2]
    assert (
        "trained to epoch 7, past its rule's stop at epoch 5; the rule keeps epoch 2, the "
        "checkpoint scored is epoch 6's" in line
    )


def test_a_row_scored_before_the_rule_stop_was_recorded_is_replayed():
    """Rows scored before the curve recorded `rule_stop_epoch` (NMT sparsemax seed 2 among
    them) still say they trained past the rule's stop: it is replayed over their losses."""
    losses = {1: 5.0, 2: 4.0, 3: 4.1, 4: 4.2, 5: 4.3, 6: 3.9, 7: 4.0}
    curve = runs.learning_curve(_log(losses), patience=3, max_epoch=50)
    old = {key: value for key, value in curve.items() if key not in ("rule_stop_epoch", "metric")}
    line = learning_curves.convergence_lines([_curve_row(old)])[2]
    assert "past its rule's stop at epoch 5" in line
    stopped = runs.learning_curve(_log({1: 5.0, 2: 4.0, 3: 4.1}), patience=3, max_epoch=50)
    old = {key: value for key, value in stopped.items() if key != "rule_stop_epoch"}
    assert "past its rule" not in learning_curves.convergence_lines([_curve_row(old)])[2]


def test_a_kept_epoch_tying_an_earlier_one_says_where_the_patience_counts_from():
    """Inflection sparsemax seed 2 kept epoch 80 and stopped at 81 with patience 10: epoch 80
    tied epoch 71 (0.245), which saves the checkpoint but does not reset the count."""
    losses = {1: 5.0, 2: 4.0, 3: 4.1, 4: 4.0, 5: 4.2}
    curve = runs.learning_curve(_log(losses), patience=3, max_epoch=50)
    assert curve["best_epoch"] == 4 and curve["stopped_epoch"] == 5 and curve["stop"] == "patience"
    line = learning_curves.convergence_lines([_curve_row(curve)])[2]
    assert "best epoch 4 of 5" in line
    assert "(its valid loss equals epoch 2's, from which the patience counts)" in line
    untied = runs.learning_curve(_log({1: 5.0, 2: 4.0, 3: 4.1}), patience=3, max_epoch=50)
    assert "equals epoch" not in learning_curves.convergence_lines([_curve_row(untied)])[2]


def test_epochs_missing_from_the_log_are_named():
    """A run cut off and resumed before the log was line-buffered lost its last epochs'
    records; its convergence line names them, and a complete curve says nothing."""
    losses = {1: 5.0, 2: 4.0, 5: 3.5, 6: 3.6, 7: 3.7, 8: 3.8}
    curve = runs.learning_curve(_log(losses), patience=3, max_epoch=50)
    line = learning_curves.convergence_lines([_curve_row(curve)])[2]
    assert "best epoch 5 of 8" in line
    assert "early-stopped (epochs 3, 4 not in its log: lost when the run was cut off and" in line
    complete = runs.learning_curve(_log({1: 5.0, 2: 4.0}), patience=3, max_epoch=50)
    assert "not in its log" not in learning_curves.convergence_lines([_curve_row(complete)])[2]


def _curve_row(curve):
    return {
        "experiment": "x",
        "evaluation": "test",
        "scale": "small",
        "mapping": "softmax",
        "seed": 1,
        "train": {"config": {"model": {}}, "learning_curve": curve},
    }


def test_a_run_that_hits_the_cap_is_not_called_converged():
    curve = runs.learning_curve(_log({1: 5.0, 2: 4.0, 3: 3.0}), patience=3, max_epoch=3)
    assert curve["stop"] == "max_epoch" and curve["best_epoch"] == 3
    # without early stopping the cap is the only reason
    assert runs.learning_curve(_log({1: 5.0, 2: 6.0}), None, 2)["stop"] == "max_epoch"
    # an interrupted run: neither
    assert runs.learning_curve(_log({1: 5.0, 2: 4.0}), 3, 50)["stop"] is None


def test_a_resumed_run_counts_each_epoch_once_with_its_last_record():
    text = _log({1: 5.0, 2: 4.0}) + _log({2: 3.9, 3: 3.8})
    curve = runs.learning_curve(text, patience=3, max_epoch=50)
    assert curve["epochs"] == [1, 2, 3] and curve["valid_loss"] == [5.0, 3.9, 3.8]


def test_no_validation_no_curve():
    assert runs.learning_curve("no json here\n", 3, 10) == {}


def _cfg(patience):
    return OmegaConf.create(
        {
            "distributed_training": {"distributed_world_size": 1},
            "model": {"_name": "regattn_lstm"},
            "optimizer": {"_name": "adam"},
            "optimization": {"lr": [0.002], "max_epoch": 50},
            "dataset": {"batch_size": 64, "max_tokens": None},
            "checkpoint": {"patience": patience},
        }
    )


def test_patience_enters_the_config_key_only_when_set():
    without = runs.config_settings(_cfg(-1))
    assert "patience" not in without  # configs without early stopping keep their hashes
    with_patience = runs.config_settings(_cfg(3))
    assert with_patience["patience"] == 3
    assert rowkeys.config_sha256(with_patience) != rowkeys.config_sha256(without)


def _row(mapping, seed, curve, scale="small"):
    return {
        "table": "nmt",
        "experiment": "multi30k_en_de",
        "evaluation": "test2016",
        "scale": scale,
        "data_source": "offline",
        "mapping": mapping,
        "seed": seed,
        "run_id": f"{mapping}{seed}",
        "config_sha256": "abc",
        "dry_run": None,
        "train": {"config": {"model": {}}, "learning_curve": curve},
    }


def test_convergence_lines_and_figure(tmp_path):
    stopped = runs.learning_curve(_log({1: 5.0, 2: 4.0, 3: 4.1, 4: 4.2, 5: 4.3}), 3, 50)
    capped = runs.learning_curve(_log({1: 5.0, 2: 4.5}), 3, 2)
    rows = [_row("softmax", 1, stopped), _row("softmax", 2, stopped), _row("sparsemax", 1, capped)]
    lines = learning_curves.convergence_lines(rows)
    text = "\n".join(lines)
    assert "softmax: seed 1: best epoch 2 of 5" in text and "early-stopped" in text
    assert "sparsemax: seed 1: best epoch 2 of 2" in text and "epoch cap" in text
    path = learning_curves.plot_learning_curves(rows, tmp_path / "curves.png", "t")
    assert path.is_file() and path.stat().st_size > 1000
    # rows from before early stopping record no curve: nothing said, nothing drawn
    old = [_row("softmax", 1, None)]
    assert learning_curves.convergence_lines(old) == []
    assert learning_curves.plot_learning_curves(old, tmp_path / "none.png", "t") is None
    assert not (tmp_path / "none.png").exists()


def test_the_zoom_holds_every_run_s_converged_tail_and_not_the_first_epochs():
    short = runs.learning_curve(_log({1: 9.0, 2: 5.0, 3: 3.2, 4: 3.0, 5: 3.1, 6: 3.3}), 3, 50)
    long = runs.learning_curve(
        _log({1: 8.0, 2: 6.0, 3: 3.4, 4: 3.1, 5: 2.9, 6: 3.0, 7: 3.05, 8: 3.2}), 3, 50
    )
    first, low, high = learning_curves.zoom_window([short, long])
    assert first == 3  # half the earliest stop (6): both runs' last half
    # the window spans 2.9 .. 3.4 (padded by 5% of 0.5), not the first epochs' 9.0
    assert low == pytest.approx(2.875) and high == pytest.approx(3.425)


@pytest.mark.parametrize("scale", ["small"])
def test_table_links_the_learning_curve_figure_it_draws(tmp_path, scale):
    curve = runs.learning_curve(_log({1: 5.0, 2: 4.0, 3: 4.1, 4: 4.2, 5: 4.3}), 3, 50)
    rows = [_row("softmax", 1, curve, scale)]
    spec = OmegaConf.create({"table": "nmt"})
    drawn = learning_curves.draw_learning_curves(tmp_path, spec, rows)
    name = results.learning_curve_figure("nmt", "multi30k_en_de", scale)
    assert drawn == [tmp_path / "figures" / name]


def test_stopping_cell_counts_the_seeds_that_stopped_on_validation():
    stopped = runs.learning_curve(_log({1: 5.0, 2: 4.0, 3: 4.1, 4: 4.2, 5: 4.3}), 3, 50)
    capped = runs.learning_curve(_log({1: 5.0, 2: 4.5}), 3, 2)
    assert learning_curves.stopped_early(_row("softmax", 1, stopped))
    assert not learning_curves.stopped_early(_row("softmax", 1, capped))
    assert not learning_curves.stopped_early(_row("softmax", 1, None))  # before early stopping
    cell = [_row("softmax", 1, stopped), _row("softmax", 2, stopped)]
    # two evaluation sets of one run are one run
    assert learning_curves.stopping_cell(cell + [dict(cell[0], evaluation="valid")]) == "2/2"
    mixed = cell + [dict(_row("softmax", 3, capped), train={"epochs": 2, "learning_curve": capped})]
    assert learning_curves.stopping_cell(mixed) == "2/3 (others: 2 epochs)"
    old = [dict(_row("softmax", 1, None), train={"epochs": 5})]
    assert learning_curves.stopping_cell(old) == "0/1 (5 epochs)"
    baseline = [dict(_row("baseline: lead", 0, None), baseline={"name": "lead"})]
    assert learning_curves.stopping_cell(baseline) == "–"


def test_overfitting_says_the_training_loss_still_fell_after_the_kept_epoch_in_every_run():
    valid = {1: 5.0, 2: 4.0, 3: 4.1, 4: 4.2, 5: 4.3}
    falling = runs.learning_curve(_log(valid, {1: 6.0, 2: 4.5, 3: 4.0, 4: 3.5, 5: 3.0}), 3, 50)
    flat = runs.learning_curve(_log(valid, {1: 6.0, 2: 4.5, 3: 4.6, 4: 4.7, 5: 4.8}), 3, 50)
    text = learning_curves.overfitting([_row("softmax", 2, falling), _row("softmax", 1, falling)])
    assert text.startswith("after the kept epoch the training loss still fell (seed 1: 4.50 at")
    assert "seed 1: 4.50 at epoch 2 to 3.00 at 5; seed 2: 4.50 at epoch 2 to 3.00 at 5" in text
    assert text.endswith("no longer improved: more epochs fit the training set, not held-out data")
    # said only when every run shows it, and only of runs that stopped on their validation loss
    assert (
        learning_curves.overfitting([_row("softmax", 1, falling), _row("softmax", 2, flat)]) == ""
    )
    capped = runs.learning_curve(_log({1: 5.0, 2: 4.5}, {1: 6.0, 2: 5.0}), 3, 2)
    assert learning_curves.overfitting([_row("softmax", 1, capped)]) == ""
    # rows without a training loss (or a curve) say nothing
    no_train = runs.learning_curve(_log(valid), 3, 50)
    assert learning_curves.overfitting([_row("softmax", 1, no_train)]) == ""
    assert learning_curves.overfitting([_row("softmax", 1, None)]) == ""


def test_overfitting_names_the_validation_metric_the_runs_were_chosen_on():
    curve = dict(
        runs.learning_curve(_log({1: 5.0, 2: 4.0, 3: 4.1}, {1: 6.0, 2: 4.5, 3: 4.0}), 1, 50),
        metric="accuracy",
    )
    text = learning_curves.overfitting([_row("softmax", 1, curve)])
    assert "and the validation accuracy no longer improved" in text
