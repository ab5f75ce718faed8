"""Sweeps through Hydra's submitit launcher (LAUNCHER=submitit_local|submitit_slurm).

The Slurm launcher cannot run here (no Slurm): its config is composed with a sweep's overrides
and checked. `submitit_local` runs the same multirun with each job in its own process: the smoke
λ sweep end to end is slow (about 4 minutes on 2 shared cores: both jobs train at once)."""

import json
import sys

import children
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra

from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.core.paths import CONFIG_DIR
from regattn_fairseq.experiments.pipelines.sweep import launcher_overrides
from regattn_fairseq.experiments.train.launch import Launch


def _compose_hydra(config_name: str, overrides: list[str]):
    from fairseq.dataclass.initialize import hydra_init

    GlobalHydra.instance().clear()
    hydra_init(config_name)
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.1"):
            return compose(config_name, overrides=overrides, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
        # leave no schema stored under the config's own name (later compositions would warn)
        ConfigStore.instance().repo.pop(f"{config_name}.yaml", None)


def test_slurm_launcher_composes_with_a_sweep():
    overrides = launcher_overrides(
        "submitit_slurm", Launch(gpus=1), ["hydra.launcher.partition=gpu"]
    )
    cfg = _compose_hydra(
        "summarization",
        [
            "scale/lstm_seq2seq=smoke",
            "attention=fusedmax",
            "model.attention_lambda=0.1",
            "task.data=/nonexistent",
            *overrides,
        ],
    )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert launcher.partition == "gpu" and launcher.gpus_per_node == 1
    assert launcher.timeout_min == 2880 and launcher.tasks_per_node == 1
    # jobs keep their own directories under the sweep's (fairseq-notes trap 5)
    assert launcher.submitit_folder == f"{cfg.hydra.sweep.dir}/.submitit/%j"
    assert cfg.model.attention_lambda == 0.1 and cfg.common.cpu


def test_basic_launcher_adds_nothing():
    assert launcher_overrides("basic", Launch(), []) == []


@pytest.mark.slow
def test_lambda_sweep_through_submitit_local(shared_data, tmp_path):
    result = children.run(
        [
            sys.executable,
            "scripts/sweep.py",
            "lambda",
            "--scale",
            "smoke",
            "--data-dir",
            str(shared_data),
            "--work-dir",
            str(tmp_path),
            "--results-dir",
            str(tmp_path / "results"),
            "--launcher",
            "submitit_local",
        ],
        cwd=REPO_ROOT,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sweep_dir = tmp_path / "checkpoints" / "sweep_lambda" / "smoke-offline"
    # Hydra's launcher output goes to the multirun's log (the terminal shows progress only)
    assert "Submitit 'local' sweep output dir" in (sweep_dir / "multirun.log").read_text()
    # each job ran as its own submitit process, with its log and result
    assert len(list(sweep_dir.glob(".submitit/*/*_result.pkl"))) == 2
    rows = [
        json.loads(line)
        for line in (tmp_path / "results" / "raw" / "sweep_lambda.jsonl").read_text().splitlines()
    ]
    assert {row["sweep_params"]["model.attention_lambda"] for row in rows} == {"0.1", "1.0"}
    assert {row["train"]["config"]["model"]["attention_lambda"] for row in rows} == {0.1, 1.0}
    assert all(0.0 <= row["metrics"]["rougeL"] <= 100.0 for row in rows)
