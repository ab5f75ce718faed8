"""The benchmark scripts run (--quick) and write their tables; timings are never asserted."""

import json
import sys

import children
import pytest
import torch

from regattn_bench import mapping_speed as bench_mappings
from regattn_fairseq.benchmarks import model_throughput as bench_model


def run_bench(name, tmp_path, *args):
    """`python -m regattn_bench <name> --quick`, its records into `tmp_path`."""
    proc = children.run(
        [sys.executable, "-m", "regattn_bench", name, "--quick", "--out-dir", str(tmp_path), *args],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def test_mappings_bench(tmp_path):
    run_bench("mappings", tmp_path, "--shapes", "64x20")
    run = json.loads((tmp_path / "mappings_cpu.json").read_text())["runs"][-1]
    assert {r["method"] for r in run["results"]} >= {
        "torch.softmax",
        "sparsemax",
        "fusedmax (lam=0.1)",
    }
    table = (tmp_path / "mappings_cpu.md").read_text()
    assert "| sparsemax |" in table
    # each CPU target gets its verdict from this run's own ratio
    ratio = next(
        r["ratio_to_torch_softmax"]
        for r in run["results"]
        if r["method"] == "sparsemax" and r["mode"] == "fwd+bwd"
    )
    verdict = "met" if ratio <= bench_mappings.CPU_TARGETS["sparsemax"] else "missed"
    assert f"| sparsemax | ≤ 1.5x | {ratio:.2f}x {verdict} |" in table
    assert "targets met in this run" in table


def test_target_table_counts_met_missed_and_untimed():
    record = {
        "env": {"device_kind": "cpu"},
        "args": {"shapes": [[4, 5], [8, 5]]},
        "results": [
            {
                "method": "sparsemax",
                "mode": "fwd+bwd",
                "shape": [4, 5],
                "ratio_to_torch_softmax": 1.4,
            },
            {
                "method": "sparsemax",
                "mode": "fwd+bwd",
                "shape": [8, 5],
                "ratio_to_torch_softmax": 1.6,
            },
            {"method": "sparsemax", "mode": "fwd", "shape": [4, 5], "ratio_to_torch_softmax": 9.0},
        ],
    }
    lines = bench_mappings._target_table(record)
    assert "| sparsemax | ≤ 1.5x | 1.40x met | 1.60x missed |" in lines
    assert "| softmax | ≤ 1.1x | not timed | not timed |" in lines
    total = 2 * len(bench_mappings.CPU_TARGETS)
    assert lines[-1] == f"1 of {total} targets met in this run."
    assert bench_mappings._target_table({**record, "env": {"device_kind": "gpu"}}) == []


def test_timers_use_the_recorded_thread_count():
    # torch.utils.benchmark.Timer defaults to one thread, while the run records
    # torch.get_num_threads(): the tables once said 2 threads for 1-thread timings
    import torch

    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        x = torch.randn(4, 5)
        for backward in (False, True):
            assert bench_mappings.timer(torch.softmax, x, x, backward)._task_spec.num_threads == 2
    finally:
        torch.set_num_threads(previous)


def test_scaling_bench_appends(tmp_path):
    for _ in range(2):
        run_bench("scaling", tmp_path, "--figure-dir", str(tmp_path))
    runs = json.loads((tmp_path / "scaling_cpu.json").read_text())["runs"]
    assert len(runs) == 2  # a re-run appends
    assert "slope" in (tmp_path / "scaling_cpu.md").read_text()


@pytest.mark.slow
def test_model_bench(tmp_path):
    run_bench("model", tmp_path, "--models", "LSTM summarizer", "SNLI classifier")
    run = json.loads((tmp_path / "model_cpu.json").read_text())["runs"][-1]
    # every mapping of the plugin trained a step of each model, timed against softmax's
    for model, unit in (("LSTM summarizer", "target tokens"), ("SNLI classifier", "pairs")):
        results = [r for r in run["results"] if r["model"] == model]
        assert [r["attention"] for r in results] == list(bench_model.MAPPINGS)
        for r in results:
            assert r["unit"] == unit and r["per_s"] > 0 and r["throughput_ratio_to_softmax"] > 0
    assert [r["per_step"] for r in run["results"] if r["model"] == "SNLI classifier"][0] == 64
    table = (tmp_path / "model_cpu.md").read_text()
    assert "| 1.5-entmax |" in table and "| attention | ms / step | pairs/s |" in table


@pytest.mark.slow  # builds and trains 4 models twice: about 2 minutes on a busy 2-core machine
def test_continuous_bench(tmp_path):
    from regattn_fairseq.benchmarks import continuous_speed

    run_bench("continuous", tmp_path, "--basis", "8")
    run = json.loads((tmp_path / "continuous_cpu.json").read_text())["runs"][-1]
    labels = list(continuous_speed.variants([8]))
    # every variant was timed in the same run as discrete softmax, per layer step and training
    assert list(run["results"]["layer"]) == labels
    assert [r["attention"] for r in run["results"]["training"]] == labels
    assert all(t > 0 for t in run["results"]["layer"].values())
    assert "| continuous sparsemax (N=8) |" in (tmp_path / "continuous_cpu.md").read_text()


def test_hf_bench(tmp_path):
    # three mappings beside the baselines: every backend's forward (test_transformers_backend)
    # and fine-tuning (test_pretrained_minilm) are tested in tests/integrations; here the
    # script's timing, ratios and table
    chosen = ["regattn_sparsemax", "regattn_fusedmax", "regattn_entmax"]
    run_bench("hf", tmp_path, "--only", *chosen)
    run = json.loads((tmp_path / "hf_cpu.json").read_text())["runs"][-1]
    ratios = {r["attention"]: r["ratio_to_eager"] for r in run["results"]}
    assert ratios["eager (transformers softmax)"] == 1.0
    assert {"sparsemax", "fusedmax (λ=0.1)", "α-entmax (learned α)"} <= set(ratios)
    assert "| sparsemax |" in (tmp_path / "hf_cpu.md").read_text()


def test_hf_bench_says_whether_the_machine_was_quiet_from_the_load_before_the_run():
    """A record's words follow its 1-minute load average before the run (the load after it is
    the benchmark's own threads): 'quiet' under 0.5, 'shared with other jobs' above."""
    from regattn_bench import hf_speed

    def words(before):
        return hf_speed._machine_words({"loadavg_1_5_15_before_after": [before, [2.0, 1, 1]]})

    assert words([0.2, 1.9, 2.0]).startswith("The machine was quiet")
    assert words([2.8, 3.1, 2.1]) == "The machine was shared with other jobs"


def test_hf_bench_in_bf16_times_only_the_chosen_attentions_beside_the_baselines(tmp_path):
    run_bench("hf", tmp_path, "--bf16", "--only", "regattn_uniform", "regattn_sparsemax")
    run = json.loads((tmp_path / "hf_cpu_bf16.json").read_text())["runs"][-1]
    assert run["args"]["precision"] == "bf16 autocast"
    assert run["args"]["only"] == ["regattn_uniform", "regattn_sparsemax"]
    assert [r["attention"] for r in run["results"]] == [
        "eager (transformers softmax)",
        "sdpa (transformers softmax)",
        "sparsemax",
        "uniform (attention-free control)",
    ]
    assert run["results"][0]["ratio_to_eager"] == 1.0


# bf16 autocast is emulated where the CPU lacks AVX512-BF16 and AMX: a MiniLM step then takes
# about 30 s (results/bench/hf_minilm_cpu_bf16.md), so only the baselines and one mapping run
@pytest.mark.slow
def test_hf_bench_on_the_pinned_minilm_in_bf16(tmp_path):
    pytest.importorskip("all_minilm_l6_v2", reason="the pinned MiniLM wheel is not installed")
    run_bench("hf", tmp_path, "--model", "minilm", "--bf16", "--only", "regattn_uniform")
    run = json.loads((tmp_path / "hf_minilm_cpu_bf16.json").read_text())["runs"][-1]
    assert run["args"]["precision"] == "bf16 autocast"
    assert run["model"]["pretrained"]["name"] == "all-MiniLM-L6-v2"
    assert run["batch"] == {"sequences": 32, "min_length": 30, "max_length": 50}
    ratios = {r["attention"]: r["ratio_to_eager"] for r in run["results"]}
    assert ratios["eager (transformers softmax)"] == 1.0
    assert "uniform (attention-free control)" in ratios
    assert "The pretrained all-MiniLM-L6-v2" in (tmp_path / "hf_minilm_cpu_bf16.md").read_text()


def test_model_bench_times_the_cpu_offload_on_a_gpu_only():
    # the paper's setup (model on the GPU, fusedmax/oscarmax on the CPU) needs a GPU to mean
    # anything; on the CPU it would time the same thing twice
    cpu = bench_model.variants("regattn_lstm", torch.device("cpu"))
    cuda = bench_model.variants("regattn_lstm", torch.device("cuda"))
    assert list(cpu) == list(bench_model.MAPPINGS)
    assert list(cuda) == [*bench_model.MAPPINGS, *bench_model.CPU_OFFLOAD]
    for label in bench_model.CPU_OFFLOAD:
        assert cuda[label][-2:] == ["--attention-device", "cpu"]
    assert "α-entmax (learned α)" in bench_model.variants(
        "regattn_transformer_small", torch.device("cpu")
    )


def _model_record(date: str, device: str, ratio: float) -> dict:
    env = {"device": device, "torch": "2", "cpu_model": "x", "threads": 1, "git_commit": "c"}
    env["loadavg_1_5_15_before_after"] = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    result = {
        "model": "LSTM summarizer",
        "arch": "regattn_lstm",
        "model_options": [],
        "batch": {"batch": 1, "src": 1, "tgt": 1},
        "unit": "target tokens",
        "per_step": 1,
        "median_step_ms": 1.0,
        "per_s": 1.0,
    }
    return {
        "date": date,
        "args": {"repeats": 1, "steps": 1},
        "env": env,
        "file_stem": "model_gpu",
        "results": [
            {**result, "attention": "softmax", "throughput_ratio_to_softmax": 1.0},
            {**result, "attention": "sparsemax", "throughput_ratio_to_softmax": ratio},
        ],
    }


def test_model_bench_table_shows_earlier_runs_on_the_same_device():
    latest = _model_record("2026-11-26T12:04", "H100", 0.75)
    earlier = [_model_record("2026-11-26T11:55", "H100", 0.88)]
    earlier.append(_model_record("2026-11-20T10:00", "H200", 0.5))  # another device: not shown
    text = bench_model.markdown(latest, earlier)
    assert "| sparsemax | 1.0 | 1 | 0.75 | 0.88 |" in text
    assert "0.50" not in text and "2026-11-26T11:55" in text
    assert "earlier runs" not in bench_model.markdown(latest)


def test_model_bench_feeds_the_snli_classifier_pairs_as_its_task_collates_them():
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for i in range(50):
        dictionary.add_symbol(f"w{i}")

    class Task:  # what `synthetic_pairs` reads of the regattn_snli task
        source_dictionary = dictionary
        labels = ("entailment", "neutral", "contradiction")

    spec = bench_model.MODELS["SNLI classifier"]
    batch = bench_model.synthetic_pairs(Task, spec, torch.Generator().manual_seed(0))
    assert batch["items"] == spec["batch"] == len(batch["target"])
    assert set(batch["target"].tolist()) <= {0, 1, 2}
    for side, nominal in (("premise", spec["src"]), ("hypothesis", spec["tgt"])):
        tokens, lengths = (
            batch["net_input"][f"{side}_tokens"],
            batch["net_input"][f"{side}_lengths"],
        )
        assert tokens.size(1) == int(lengths.max())
        assert int(0.7 * nominal) <= int(lengths.min()) and int(lengths.max()) <= int(1.3 * nominal)
        for row, length in zip(tokens, lengths.tolist(), strict=True):
            # right-padded, each sentence ending in eos as fairseq-preprocess binarizes it
            assert row[length - 1] == dictionary.eos() and (row[length:] == dictionary.pad()).all()
            assert (row[: length - 1] >= dictionary.nspecial).all()
