"""The fine-tuning batching benchmark (`regattn_fairseq.benchmarks.finetune_batching`): its exact
padding count, its epochs drawn as the table draws them, and a quick run on the real data and
the pinned encoder. Timings are never asserted."""

import json
import random
import sys
from pathlib import Path

import children
import pytest

from regattn_fairseq.benchmarks import finetune_batching as bench
from regattn_fairseq.experiments.core.paths import DEFAULT_DATA_DIR
from regattn_fairseq.experiments.train.hf_finetune import length_grouped_batches


def test_padding_counts_each_batch_padded_to_its_longest_pair():
    lengths = [3, 5, 2, 8, 4]
    # (5 + 5) + (8 + 8) + 4 padded tokens over 3 + 5 + 2 + 8 + 4 real ones
    assert bench.padding_ratio(lengths, [[0, 1], [2, 3], [4]]) == pytest.approx(30 / 22)
    assert bench.padding_ratio(lengths, [[2, 0], [4, 1], [3]]) == pytest.approx(24 / 22)


def test_an_epoch_is_drawn_as_the_tables_fine_tuning_draws_it():
    lengths = list(range(40, 0, -1))
    expected = length_grouped_batches(lengths, 4, 3, random.Random("1-1"))
    assert bench.epoch_plan(lengths, 4, 3) == expected
    assert bench.epoch_plan(lengths, 4, 3, epoch=2) != expected


@pytest.mark.slow  # prepares SNLI at small and trains the pinned MiniLM 4 steps: ~2 minutes
def test_quick_run_on_the_tables_data_and_encoder(tmp_path):
    pytest.importorskip("all_minilm_l6_v2", reason="the pinned MiniLM wheel is not installed")
    if not (DEFAULT_DATA_DIR / "README.md").is_file():
        pytest.skip(f"offline data not found at {DEFAULT_DATA_DIR}")
    command = [sys.executable, "-m", "regattn_bench", "finetune-batching", "--quick"]
    command += ["--work-dir", str(tmp_path / "work"), "--out-dir", str(tmp_path)]
    proc = children.run(command, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    run = json.loads((tmp_path / "finetune_batching_cpu.json").read_text())["runs"][-1]
    assert run["pairs"] == 20000 and run["settings"]["finetune"]["batch_size"] == 32
    # grouping by length cuts the padding; plain random batches pad most
    assert 1.0 <= run["padding"]["16"] < run["padding"]["1"]
    assert [r["pool"] for r in run["results"]] == [1, 16]
    assert all(r["real_tokens_per_s"] > 0 for r in run["results"])
    table = Path(tmp_path / "finetune_batching_cpu.md").read_text()
    assert "| plain random (pool 1) |" in table and "| pools of 16 batches |" in table
    assert "one epoch (seed 1)" in table and "Speed: 1 round-robin blocks of 1 training" in table


def test_pools_without_plain_random_batches_are_refused(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--pools", "4", "16"])
    assert "--pools must hold 1" in capsys.readouterr().err
