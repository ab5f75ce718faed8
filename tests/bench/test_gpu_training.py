"""`python -m regattn_bench gpu-training` on the committed device run
(results/bench/training_gpu/): its logs parse, its configs hash like the CPU rows of the same
mapping and γ (so the comparison is of the same config), and the report is written from them."""

import datetime

import pytest

from regattn_checkout.paths import BENCH_RESULTS_DIR, RESULTS_DIR
from regattn_fairseq.benchmarks import gpu_training
from regattn_fairseq.experiments.rows.store import load_rows

RUN_DIR = BENCH_RESULTS_DIR / "training_gpu"


def test_a_gpu_training_has_the_config_hash_of_its_cpu_row():
    run = gpu_training.read_training(RUN_DIR / "softmax-gamma4.0-seed1")
    assert (run["mapping"], run["gamma"], run["seed"]) == ("softmax", 4.0, 1)
    assert run["started"]["hardware"]["gpu"].startswith("NVIDIA")
    assert [e["epoch"] for e in run["epochs"]] == list(range(1, len(run["epochs"]) + 1))
    rows = [dict(r) for r in load_rows(RESULTS_DIR, "nmt")]
    cpu = gpu_training.cpu_row(rows, run)
    assert cpu is not None and cpu["mapping"] == "softmax" and cpu["seed"] == 1
    assert not cpu["train"]["started"]["hardware"].get("gpu")
    assert gpu_training.cpu_curve(rows, run) == cpu["train"]["learning_curve"]


def test_epoch_seconds_is_the_median_gap_between_epoch_ends():
    t0 = datetime.datetime(2026, 11, 26)
    run = {"epochs": [{"end": t0 + datetime.timedelta(seconds=s)} for s in (10, 40, 60, 100)]}
    assert gpu_training.epoch_seconds(run) == 30.0


def test_report_from_the_committed_run(tmp_path, monkeypatch):
    out = tmp_path / "training_gpu.md"
    monkeypatch.setattr("sys.argv", ["gpu_training.py", str(RUN_DIR), "--out", str(out)])
    gpu_training.main()
    text = out.read_text()
    assert "no model had converged" in text and "Projection, not a measurement" in text
    assert text.count("\n| ") == 1 + 6  # header + one line per mapping
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_an_empty_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["gpu_training.py", str(tmp_path)])
    with pytest.raises(SystemExit):
        gpu_training.main()
