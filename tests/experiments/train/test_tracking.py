"""Experiment tracking (train/tracking.py): one training through the suite is exactly one
offline wandb run in its run folder, holding the run's config and fairseq's training curves
(slow), and fairseq's progress bars add no run of their own
(`fairseq_adapter.log_progress_into_active_wandb_run`), whether a run is active or fairseq
starts one."""

import sys
import textwrap

import children
import pytest
from omegaconf import OmegaConf
from wandb_offline import offline_runs

from regattn_fairseq.experiments.data.prepare import prepare
from regattn_fairseq.experiments.train import train as runs

EXPERIMENT = OmegaConf.create(
    {
        "name": "multi30k_en_de",
        "train_config": "nmt_multi30k",
        "scale_group": "lstm_seq2seq",
        "dataset": "multi30k",
    }
)


# about 40 s on 2 cores; in the default suite, test_distributed's training reads its wandb
# run back with the same check (`offline_runs` fails on a run folder without a run)
@pytest.mark.slow
def test_a_training_is_one_wandb_run(shared_data, tmp_path):
    prepared = prepare("multi30k", "smoke", data_dir=shared_data, work_dir=tmp_path / "work")
    run_dir = tmp_path / "run"
    # two epochs, each with a training and a validation progress bar
    runs.train(EXPERIMENT, "smoke", "sparsemax", 1, prepared, run_dir, ["optimization.max_epoch=2"])
    [run] = offline_runs(run_dir)
    assert run["config"]["mapping"] == "sparsemax" and run["config"]["scale"] == "smoke"
    assert {"train/loss", "valid/loss"} <= run["history_keys"]


# fairseq's progress bars with common.wandb_project, in a fresh process, offline under RUN_DIR
PROGRESS_BARS = """
import os, sys
os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=sys.argv[1])
import wandb
from fairseq.logging import progress_bar
from regattn_fairseq.fairseq_adapter import log_progress_into_active_wandb_run

log_progress_into_active_wandb_run()
if sys.argv[2] == "active":
    wandb.init(project="p", id="started", dir=sys.argv[1])
for epoch, tag in ((1, "train"), (1, "valid"), (2, "train"), (2, "valid")):
    bar = progress_bar.progress_bar([], log_format="json", epoch=epoch, wandb_project="p")
    bar.print({"loss": 1.0 / epoch, "num_updates": epoch}, tag=tag)
wandb.finish()
"""


@pytest.mark.parametrize("started", ["active", "none"])
def test_fairseq_progress_bars_start_no_second_run(started, tmp_path):
    children.run(
        [sys.executable, "-c", textwrap.dedent(PROGRESS_BARS), str(tmp_path), started],
        check=True,
        timeout=300,
    )
    [run] = offline_runs(tmp_path)
    assert {"train/loss", "valid/loss"} <= run["history_keys"]
    if started == "active":
        assert run["id"] == "started"


# WANDB_MODE=disabled in a fresh process where `import wandb` fails (as on a machine without
# it): the three tracking steps run and import nothing, even with a run record on disk
DISABLED = """
import json, os, sys
from pathlib import Path
sys.modules["wandb"] = None  # any `import wandb` now raises ImportError
os.environ["WANDB_MODE"] = "disabled"
from regattn_fairseq.experiments.train import tracking

run_dir = Path(sys.argv[1])
(run_dir / tracking.RUN_RECORD).write_text(json.dumps({"id": "x", "dir": str(run_dir)}))
tracking.start_training_run(None)
tracking.finish_training_run()
tracking.log_results(run_dir / "checkpoints", [{"evaluation": "test", "metrics": {"bleu": 1.0}}])
print("ok", sorted(p.name for p in run_dir.iterdir()))
"""


def test_disabled_tracking_never_imports_wandb(tmp_path):
    done = children.run(
        [sys.executable, "-c", textwrap.dedent(DISABLED), str(tmp_path)],
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["ok", "['wandb_run.json']"]
