"""GAMMA=auto (`scripts/reproduce.py --gamma auto`): every γ of the grid is trained, the best
validation loss picks one, test is reported at it and the choice is recorded in the row."""

import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from regattn import mappings
from regattn_fairseq.experiments import reproduce, runs
from regattn_fairseq.experiments.paths import REPO_ROOT


def test_gamma_grid_arguments():
    args = reproduce.parse_args(["inflection", "--gamma", "auto", "--gamma-grid", "1,4"])
    assert args.gamma_grid == [1.0, 4.0]
    for bad in (["--gamma-grid", "1,4"], ["--gamma", "warm"], ["--gamma", "-1"]):
        with pytest.raises(SystemExit):
            reproduce.parse_args(["inflection", *bad])


@pytest.mark.parametrize("table", ["table1", "table2", "nmt", "inflection"])
def test_every_discrete_mapping_of_a_table_has_its_gamma_tuned(table):
    """GAMMA=auto tunes the temperature of every discrete mapping of the paper tables (1.5-entmax
    included: entmax(s / γ)); a mapping left at γ = 1 would not be compared fairly."""
    spec = reproduce.load_config("reproduce", table)
    for mapping in spec.mappings:
        attention = OmegaConf.load(REPO_ROOT / "configs" / "attention" / f"{mapping}.yaml")
        assert "gamma" in mappings.parameters_of(attention.attention), mapping
        assert mapping in reproduce.GAMMA_MAPPINGS, mapping


def test_interrupted_grid_run_is_resumed_not_taken_as_finished(tmp_path, monkeypatch):
    """A grid run with a checkpoint_best.pt but no finished training goes back through fairseq
    (which resumes from checkpoint_last.pt); its best validation loss is read afterwards."""
    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    data = type("Prepared", (), {"manifest": {"source": "offline"}})()
    args = reproduce.parse_args(["inflection", "--gamma", "auto", "--gamma-grid", "1,4"])
    trained = []

    def fake_train(experiment, scale, mapping, seed, data, run_dir, extra, launch=None):
        gamma = float(extra[-1].split("=")[1])
        trained.append(gamma)
        # the "resumed" run ends with a better loss for γ = 4
        (run_dir / "train.log").write_text(
            json.dumps({"epoch": 30, "valid_loss": 2.0 if gamma == 1.0 else 1.5}) + "\n"
        )

    for gamma in (1.0, 4.0):
        run_dir = reproduce._run_dir(
            tmp_path, spec, experiment, "smoke", data, "sparsemax", 1, gamma
        )
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "checkpoint_best.pt").write_bytes(b"interrupted")
    monkeypatch.setattr(runs, "train", fake_train)
    selection = reproduce.choose_gamma(
        spec, experiment, "smoke", "sparsemax", [1], data, tmp_path, args
    )
    assert trained == [1.0, 4.0]
    assert selection["chosen"] == 4.0 and selection["grid"] == [1.0, 4.0]
    assert selection["validation"] == {"1.0": 2.0, "4.0": 1.5}


@pytest.mark.slow
def test_gamma_auto_end_to_end_smoke(shared_data, tmp_path):
    """Smoke scale, sparsemax, grid {1, 4}: two grid runs, one test row at the chosen γ, and a
    second invocation that trains nothing."""
    command = [
        sys.executable,
        "scripts/reproduce.py",
        "inflection",
        "--scale",
        "smoke",
        "--mappings",
        "sparsemax",
        "--gamma",
        "auto",
        "--gamma-grid",
        "1,4",
        "--data-dir",
        str(shared_data),
        "--work-dir",
        str(tmp_path / "work"),
        "--results-dir",
        str(tmp_path / "results"),
    ]
    first = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    rows = [
        json.loads(line)
        for line in (tmp_path / "results" / "raw" / "inflection.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 1
    selection = rows[0]["gamma_selection"]
    assert selection["grid"] == [1.0, 4.0] and set(selection["validation"]) == {"1.0", "4.0"}
    chosen = min(selection["grid"], key=lambda g: selection["validation"][str(g)])
    assert selection["chosen"] == chosen
    assert rows[0]["train"]["config"]["model"]["attention_gamma"] == chosen
    grid_runs = list((tmp_path / "work" / "checkpoints").rglob("gamma*/seed1/checkpoints"))
    assert len(grid_runs) == 2
    second = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "[skip]" in second.stdout and "[train]" in second.stdout  # grid runs stop at once
    assert len((tmp_path / "results" / "raw" / "inflection.jsonl").read_text().splitlines()) == 1


def test_gamma_chosen_on_the_first_seed_trains_the_grid_once(tmp_path, monkeypatch):
    """--gamma-seeds first: the grid is trained for the first seed only, and the choice records
    which seeds decided it."""
    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    data = type("Prepared", (), {"manifest": {"source": "offline"}})()
    args = reproduce.parse_args(
        ["inflection", "--gamma", "auto", "--gamma-grid", "1,4", "--gamma-seeds", "first"]
    )
    trained = []

    def fake_train(experiment, scale, mapping, seed, data, run_dir, extra, launch=None):
        trained.append((seed, extra[-1]))
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "train.log").write_text(json.dumps({"valid_loss": 1.0}) + "\n")

    monkeypatch.setattr(runs, "train", fake_train)
    selection = reproduce.choose_gamma(
        spec, experiment, "smoke", "sparsemax", [1, 2, 3], data, tmp_path, args
    )
    assert trained == [(1, "model.attention_gamma=1.0"), (1, "model.attention_gamma=4.0")]
    assert selection["seeds"] == [1]
    with pytest.raises(SystemExit):
        reproduce.parse_args(["inflection", "--gamma-seeds", "first"])
