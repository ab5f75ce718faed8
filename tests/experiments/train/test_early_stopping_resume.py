"""A resumed training stops where an uninterrupted one does: fairseq's early-stopping state
(`fairseq_cli.train.should_stop_early`, in memory only) is replayed from the run's log
(`fairseq_logs.early_stopping_state`) and given back to the resumed process
(`fairseq_adapter.resume_early_stopping`, through the Hydra callback); a run that had stopped
is not trained again."""

import json
import logging
import sys

import pytest
import torch
from fairseq_cli import train as fairseq_train
from fairseq_helpers import COMMON_ARGS, MODEL_ARGS, SEQ2SEQ_TRAIN_ARGS, train_in_process
from omegaconf import OmegaConf

from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.train import train as runs
from regattn_fairseq.experiments.train.fairseq_logs import (
    BATCHES_OF_EPOCH_ONE,
    early_stopping_state,
    resumes,
)
from regattn_fairseq.fairseq_adapter import (
    EARLY_STOPPING_ENV,
    reset_best_checkpoint_loss,
    resume_early_stopping,
)
from regattn_fairseq.hydra_callbacks import FreshCheckpointBest

SAVE_DIR = "/runs/x/checkpoints"
# validation losses as fairseq rounds and logs them: ties (2.5, 2.45) do not reset the count
LOSSES = [3.0, 2.5, 2.6, 2.5, 2.4, 2.45, 2.45, 2.41, 2.5, 2.3]
ACCURACIES = [50.0, 61.0, 60.0, 61.0, 62.5, 62.5, 62.0, 61.0, 63.0]


def _log(values, metric="loss", saved=None, unsaved=0):
    """A log of validations 1..len(values), each followed by its checkpoint's line, the first
    `saved` only (the rest: validated, killed before the save), then `unsaved` repeated as a
    resumed attempt would."""
    saved = len(values) if saved is None else saved
    lines = []
    for epoch, value in enumerate(values, start=1):
        record = {
            "epoch": epoch,
            f"valid_{metric}": str(value),
            "valid_num_updates": str(10 * epoch),
        }
        lines.append(f"[2026-11-26 10:00:00,000][valid][INFO] - {json.dumps(record)}")
        if epoch <= saved:
            lines.append(
                "[2026-11-26 10:00:01,000][fairseq.checkpoint_utils][INFO] - Saved checkpoint "
                f"{SAVE_DIR}/checkpoint_last.pt (epoch {epoch} @ {10 * epoch} updates, score "
                f"{value}) (writing took 0.1 seconds)"
            )
    return "\n".join(lines) + "\n"


def _first_stop(cfg, values, start=0):
    """The index at which fairseq's own should_stop_early says stop, feeding values[start:]."""
    for index in range(start, len(values)):
        if fairseq_train.should_stop_early(cfg, values[index]):
            return index
    return None


def _resume_from_log(monkeypatch, text, patience, metric, maximize):
    """A fresh process's state, then what the Hydra callback gives back for this run."""
    reset_best_checkpoint_loss()
    state = early_stopping_state(text, patience, metric, maximize)
    environment = runs.early_stopping_environment(state, SAVE_DIR)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    FreshCheckpointBest().on_job_start(OmegaConf.create({"checkpoint": {"save_dir": SAVE_DIR}}))
    return state


@pytest.mark.parametrize(
    "values,metric,maximize", [(LOSSES, "loss", False), (ACCURACIES, "accuracy", True)]
)
def test_an_interrupted_run_stops_where_an_uninterrupted_one_does(
    values, metric, maximize, monkeypatch
):
    patience = 3
    cfg = OmegaConf.create(
        {"checkpoint": {"patience": patience, "maximize_best_checkpoint_metric": maximize}}
    )
    reset_best_checkpoint_loss()
    uninterrupted = _first_stop(cfg, values)
    assert uninterrupted is not None
    without_state = []
    for saved in range(1, len(values)):
        # validated `saved` + 1 epochs, killed before the last one's checkpoint was written
        text = _log(values[: saved + 1], metric, saved=saved)
        state = _resume_from_log(monkeypatch, text, patience, metric, maximize)
        assert state.updates == 10 * saved
        # killed as the checkpoint was written: its lines never reached the log, and the
        # checkpoint's own record (updates, value) stands in for them
        lost = _log(values[: saved - 1], metric) if saved > 1 else ""
        checkpoint = (10 * saved, values[saved - 1])
        assert early_stopping_state(lost, patience, metric, maximize, checkpoint) == state
        if saved > uninterrupted:  # it had stopped: the suite does not train it again
            assert state.stopped
            continue
        assert not state.stopped
        # fairseq repeats the unsaved epoch and goes on
        assert _first_stop(cfg, values, start=saved) == uninterrupted
        monkeypatch.delenv(EARLY_STOPPING_ENV)
        reset_best_checkpoint_loss()
        without_state.append(_first_stop(cfg, values, start=saved))
    # without the state, fairseq's count restarts and some resumed runs train longer
    assert any(stop is None or stop > uninterrupted for stop in without_state)


def test_state_of_a_run_with_several_attempts_and_none_saved():
    # the second attempt resumed from epoch 2 and repeated epoch 3 with another loss: the
    # last record of each update count is the one fairseq compared
    text = _log([3.0, 2.0, 2.5], saved=2) + _log([3.0, 2.0, 1.5, 1.6])
    state = early_stopping_state(text, patience=3)
    assert (state.updates, state.best, state.num_runs, state.stopped) == (40, 1.5, 1, False)
    assert early_stopping_state(_log([3.0], saved=0), patience=3) is None
    # patience <= 0: fairseq never stops early
    assert not early_stopping_state(_log([1.0, 2.0, 3.0, 4.0, 5.0]), patience=0).stopped


def test_callback_leaves_other_runs_alone(monkeypatch):
    """The state is applied only to the run whose save_dir it names; without fairseq's
    training loaded it is an error, never lost silently."""
    state = early_stopping_state(_log([3.0, 2.0, 2.5]), patience=3)
    monkeypatch.setenv(
        EARLY_STOPPING_ENV, runs.early_stopping_environment(state, SAVE_DIR)[EARLY_STOPPING_ENV]
    )
    reset_best_checkpoint_loss()
    FreshCheckpointBest().on_job_start(OmegaConf.create({"checkpoint": {"save_dir": "/other"}}))
    assert not hasattr(fairseq_train.should_stop_early, "best")
    FreshCheckpointBest().on_job_start(OmegaConf.create({"checkpoint": {"save_dir": SAVE_DIR}}))
    assert (fairseq_train.should_stop_early.best, fairseq_train.should_stop_early.num_runs) == (
        2.0,
        1,
    )
    reset_best_checkpoint_loss()
    monkeypatch.delitem(sys.modules, "fairseq_cli.train")
    with pytest.raises(RuntimeError, match="only be resumed inside fairseq's training"):
        resume_early_stopping(SAVE_DIR)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_state_replayed_from_a_real_fairseq_log_equals_fairseq_s(translation_data, tmp_path):
    """fairseq's own log lines (its JSON validation records, its "Saved checkpoint" lines)
    replay to the state its training holds in memory at the end."""
    handler = _Lines()
    loggers = [logging.getLogger(n) for n in ("fairseq.checkpoint_utils", "fairseq_cli.train")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        records = train_in_process(
            [
                str(translation_data),
                *SEQ2SEQ_TRAIN_ARGS,
                *COMMON_ARGS,
                *MODEL_ARGS["regattn_lstm"],
                "--attention",
                "sparsemax",
                "--max-epoch",
                "4",
                "--patience",
                "10",
                "--save-dir",
                str(tmp_path),
            ]
        )
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
    text = "\n".join([*handler.lines, *(json.dumps(r) for r in records if "valid_loss" in r)])
    state = early_stopping_state(text, patience=10)
    assert sum("Saved checkpoint" in line for line in handler.lines) == 4
    assert state.updates == max(int(r["valid_num_updates"]) for r in records if "valid_loss" in r)
    assert state.best == fairseq_train.should_stop_early.best
    assert state.num_runs == fairseq_train.should_stop_early.num_runs
    reset_best_checkpoint_loss()


def test_a_run_that_had_stopped_is_scored_not_trained_again(tmp_path, monkeypatch):
    """train(): a run whose log shows early stopping ended it goes straight to its
    checkpoint; one interrupted before that is resumed with its state in the environment."""
    spec = load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    data = type("Prepared", (), {"manifest": {"source": "offline"}, "bin_dir": tmp_path})()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    launched = []
    monkeypatch.setattr(runs.checksums, "verify", lambda prepared: None)
    monkeypatch.setattr(runs, "hydra_overrides", lambda *args: ["scale/inflection=small"])
    monkeypatch.setattr(
        runs, "run_logged", lambda cmd, log, env=None, show=None: launched.append(env)
    )
    monkeypatch.setattr(runs, "collect_trained", lambda *args: "model")
    patience = 10  # configs/scale/inflection/small.yaml
    losses = [3.0, 2.0] + [2.5] * patience
    (run_dir / "train.log").write_text(_log(losses))
    assert runs.train(experiment, "small", "softmax", 1, data, run_dir, []) == "model"
    assert launched == []
    (run_dir / "train.log").write_text(_log(losses[:-1]))
    runs.train(experiment, "small", "softmax", 1, data, run_dir, [])
    state = json.loads(launched[0][EARLY_STOPPING_ENV])
    assert state == {
        "save_dir": str(run_dir / "checkpoints"),
        "best": 2.0,
        "num_runs": patience - 1,
        "updates": 10 * (len(losses) - 1),
    }


def test_the_checkpoint_says_where_the_replay_ends(tmp_path):
    """checkpoint_last.pt's own updates and validation value, as fairseq saves them."""
    path = tmp_path / "checkpoint_last.pt"
    assert runs.last_checkpoint_validation(path) is None
    torch.save(
        {
            "optimizer_history": [{"num_updates": 10}, {"num_updates": 30}],
            "extra_state": {"val_loss": 2.5, "train_iterator": {"epoch": 4}},
        },
        path,
    )
    assert runs.last_checkpoint_validation(path) == (30, 2.5)
    # the log went on past the checkpoint (a later epoch validated, killed before its save):
    # the resumed run repeats it, so it is left out
    state = early_stopping_state(_log([3.0, 2.0, 2.5, 1.0]), 3, last_checkpoint=(30, 2.5))
    assert (state.updates, state.best, state.num_runs) == (30, 2.0, 1)


def test_each_resume_of_a_log_is_read_with_its_batches():
    """The lines of a real NMT log (entmax15 seed 5, resumed at epoch 17 after the plugin kept
    epoch 1's batches), one of a run resumed before (sparsemax seed 5's, at epoch 5: fairseq
    regrouped them), and a run trained at one go."""
    prefix = "[2026-11-30 23:56:01,868][fairseq.trainer][INFO] - "
    kept = (
        "[2026-11-30 23:56:01,905][regattn_fairseq.fairseq_adapter][INFO] - resumed at epoch "
        "17 on the training batches of epoch 1, as the uninterrupted run"
    )
    log = "\n".join(
        [
            prefix + "No existing checkpoint found /r/checkpoints/checkpoint_last.pt",
            '[x][train][INFO] - {"epoch": 4, "train_loss": "2.9"}',
            prefix + "Loaded checkpoint /r/checkpoints/checkpoint_last.pt (epoch 5 @ 1816 updates)",
            '[x][train][INFO] - {"epoch": 16, "train_loss": "2.6"}',
            prefix
            + "Loaded checkpoint /r/checkpoints/checkpoint_last.pt (epoch 17 @ 7264 updates)",
            kept,
        ]
    )
    assert resumes(log) == [
        {"epoch": 5, "updates": 1816, "batches": "regrouped at epoch 5"},
        {"epoch": 17, "updates": 7264, "batches": BATCHES_OF_EPOCH_ONE},
    ]
    assert resumes(log.splitlines()[0]) == []
