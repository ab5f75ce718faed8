"""Reproduction rigor: row keys and superseding, dirty-tree refusal, skipping finished jobs,
paired bootstrap p-values, seeds, per-item sidecars and the re-run plan (no training here;
the end-to-end re-run is `slow`)."""

import copy
import fcntl
import json
import os
import sys
import threading
from pathlib import Path

import children
import pytest
from omegaconf import OmegaConf

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.core import provenance
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.pipelines import rerun
from regattn_fairseq.experiments.pipelines.reproduce import parse_args
from regattn_fairseq.experiments.report.tables import (
    _gamma_edge_note,
    _short_runs_note,
    render_table,
)
from regattn_fairseq.experiments.report.views import write_outputs
from regattn_fairseq.experiments.rows import keys as rowkeys
from regattn_fairseq.experiments.rows.store import load_rows, read_rows
from regattn_fairseq.experiments.score import significance

SETTINGS = {"model": {"_name": "regattn_lstm", "attention": "sparsemax"}, "max_epoch": 3}


def make_row(**changes) -> dict:
    row = {
        "run_id": "r1",
        "table": "nmt",
        "experiment": "multi30k_en_de",
        "evaluation": "test2016",
        "scale": "small",
        "data_source": "offline",
        "mapping": "sparsemax",
        "sweep_params": {},
        "seed": 1,
        "metrics": {"bleu": 30.0},
        "date": "2026-11-22T04:00:00+00:00",
        "git_commit": "a" * 40,
        "git_dirty": False,
        "data": {"description": "multi30k"},
        "train": {
            "config": copy.deepcopy(SETTINGS),
            "started": {"git_commit": "a" * 40, "git_dirty": False},
            "epochs": 3,
            "wall_s": 1.0,
            "tokens_per_s": 1.0,
            "overrides": [
                "scale/lstm_seq2seq=small",
                "task.data=/x",
                "common.user_dir=/y",
                "attention=sparsemax",
                "common.seed=1",
                "checkpoint.save_dir=/z",
                "hydra.run.dir=/w",
            ],
        },
    }
    for key, value in changes.items():
        row[key] = value
    return row


SPEC = OmegaConf.create(
    {"table": "nmt", "title": "NMT", "paper_source": "none", "metrics": {"test2016": ["bleu"]}}
)


def test_key_has_params_seed_and_config_hash():
    row = make_row()
    other_config = make_row()
    other_config["train"]["config"]["max_epoch"] = 8
    gamma = make_row()
    gamma["train"]["config"]["model"]["attention_gamma"] = 4.0
    keys = {rowkeys.row_key(r) for r in (row, other_config, gamma, make_row(seed=2))}
    assert len(keys) == 4
    assert rowkeys.cell_key(row) == rowkeys.cell_key(other_config) != rowkeys.cell_key(gamma)
    assert rowkeys.row_label(gamma) == "sparsemax (γ=4)"
    # the hash ignores the config file's path, and a recorded hash wins
    moved = make_row()
    moved["train"]["config"]["file"] = "/elsewhere/config.yaml"
    assert rowkeys.row_config_sha256(moved) == rowkeys.row_config_sha256(row)


def test_a_surrogate_gradient_run_is_a_cell_of_its_own():
    plain = make_row()
    plain["train"]["config"]["model"]["attention_gamma"] = 1.0
    surrogate = copy.deepcopy(plain)
    surrogate["train"]["config"]["model"]["attention_grad_surrogate"] = "softmax"
    assert rowkeys.cell_key(plain) != rowkeys.cell_key(surrogate)
    assert rowkeys.row_label(surrogate) == "sparsemax (γ=1, backward=softmax)"
    # unset (every ordinary row), it leaves the key as it was
    unset = copy.deepcopy(plain)
    unset["train"]["config"]["model"]["attention_grad_surrogate"] = None
    assert rowkeys.cell_key(unset) == rowkeys.cell_key(plain)
    assert rowkeys.row_key(unset)[:5] == rowkeys.row_key(plain)[:5]


def _details(markdown: str) -> list[str]:
    """The lines of a table's details (after its headline and claims)."""
    return (
        markdown.split("#### Details", 1)[1]
        .split("## Notes")[0]
        .split("## History")[0]
        .splitlines()
    )


def test_newer_config_supersedes_and_is_listed(tmp_path):
    old = make_row(run_id="old", metrics={"bleu": 20.0})
    new = make_row(run_id="new", date="2026-11-23T04:00:00+00:00")
    new["train"]["config"]["max_epoch"] = 8
    new_seed2 = make_row(run_id="new2", seed=2, metrics={"bleu": 32.0})
    new_seed2["train"]["config"]["max_epoch"] = 8
    shown, superseded = rowkeys.split_current([old, new, new_seed2])
    assert [r["run_id"] for r in shown] == ["new", "new2"]
    assert [r["run_id"] for r in superseded] == ["old"]
    markdown = render_table(SPEC, [old, new, new_seed2], tmp_path)
    metrics, _statistics, provenance = (
        line for line in _details(markdown) if line.startswith("| sparsemax")
    )
    assert "31.00 ± 1.41" in metrics and "| 2 | 1,2 |" in provenance
    assert "20.00" not in metrics
    assert "superseded: multi30k_en_de sparsemax seed 1, config" in markdown
    assert "(3 epochs), 2026-11-22, run old" in markdown


def test_table_marks_unknown_training_commit_dirty_rows_and_missing_p(tmp_path):
    softmax = make_row(mapping="softmax", run_id="s")
    softmax["train"]["config"]["model"]["attention"] = "softmax"
    unknown = make_row(git_dirty=True, git_diff_sha256="f" * 64)
    unknown["train"]["started"] = {}
    markdown = render_table(SPEC, [softmax, unknown], tmp_path)
    metrics, _statistics, provenance = (
        line for line in _details(markdown) if line.startswith("| sparsemax")
    )
    assert "30.00†" in metrics and "| n/a |" in metrics
    assert "training commit unknown" in provenance
    # what † and the p column mean is written once, in the guide every table links to
    assert "(../docs/reproduction.md#how-to-read-these-tables)" in markdown


def test_tuned_cells_are_tested_against_the_baseline_tuned_the_same_way(tmp_path):
    """GAMMA=auto: sparsemax at its chosen γ = 16 is paired with softmax at its chosen γ = 4
    (same grid), not with an untuned softmax γ = 1 row; untuned cells keep their pairing."""
    selection = {"grid": [1.0, 4.0, 16.0], "criterion": "c", "seeds": [1], "validation": {}}
    rows = []
    for mapping, gamma, tuned, offset in (
        ("softmax", 1.0, False, 0.0),
        ("softmax", 4.0, True, 0.0),
        ("sparsemax", 16.0, True, 2.0),
        ("sparsemax", 1.0, False, 2.0),
    ):
        row = make_row(mapping=mapping, run_id=f"{mapping}{gamma}", metrics={"rougeL": 30.0})
        row["train"]["config"]["model"].update(attention=mapping, attention_gamma=gamma)
        if tuned:
            row["gamma_selection"] = {**selection, "chosen": gamma}
        if mapping == "softmax" and not tuned:
            row["run_id"] = "no-items"  # an old row without per-item data
        else:
            items = _mean_items([float(i % 5) + offset for i in range(100)])
            row["items"] = significance.write_items(tmp_path, row["run_id"], "test2016", items)
        rows.append(row)
    spec = OmegaConf.merge(SPEC, {"metrics": {"test2016": ["rougeL"]}})
    markdown = render_table(spec, rows, tmp_path)
    tuned_line = next(line for line in _details(markdown) if "sparsemax (γ=16)" in line)
    # tuned: a p-value against softmax γ = 4, the cell that stands for softmax
    assert "| 0.000 |" in tuned_line or "| 0.001 |" in tuned_line
    # the untuned cells do not stand for their mappings: listed in the history, not above
    assert not any("(γ=1)" in line for line in _details(markdown))
    history = markdown.split("## History", 1)[1]
    assert "- multi30k_en_de test2016: sparsemax (γ=1), seeds 1" in history
    # a choice at the grid's edge is flagged; one inside it is not
    choices = [line for line in markdown.splitlines() if line.startswith("- ") and "γ = " in line]
    flagged = "- sparsemax: γ = 16.0 (at the edge of the γ tried"
    assert any(line.startswith(flagged) for line in choices)
    assert any(line.startswith("- softmax: γ = 4.0 (c:") for line in choices)


def test_a_cell_with_its_own_parameters_is_tested_against_softmax_at_its_gamma(tmp_path):
    """1.5-entmax γ = 1 (α is entmax's own) and a surrogate-backward run are paired with
    softmax γ = 1."""
    rows = []
    for mapping, extra, offset in (
        ("softmax", {}, 0.0),
        ("entmax15", {"attention_alpha": 1.5}, 2.0),
        ("sparsemax", {"attention_grad_surrogate": "softmax"}, 2.0),
    ):
        row = make_row(mapping=mapping, run_id=mapping, metrics={"rougeL": 30.0})
        row["train"]["config"]["model"].update(attention=mapping, attention_gamma=1.0, **extra)
        items = _mean_items([float(i % 5) + offset for i in range(100)])
        row["items"] = significance.write_items(tmp_path, row["run_id"], "test2016", items)
        rows.append(row)
    spec = OmegaConf.merge(SPEC, {"metrics": {"test2016": ["rougeL"]}})
    markdown = render_table(spec, rows, tmp_path)
    for label in ("entmax15 (γ=1, α=1.5)", "sparsemax (γ=1, backward=softmax)"):
        line = next(line for line in _details(markdown) if line.startswith(f"| {label} "))
        assert float(line.split("|")[4]) < 0.01, line  # the p column (paper's is n/a)


def test_rows_are_written_under_the_tables_lock(tmp_path):
    """Two processes writing one table (one per mapping) take turns: while another holds the
    table's lock, a writer appends nothing, and once it is released every row lands whole."""
    spec = load_config("reproduce", "nmt")
    (tmp_path / "raw").mkdir()
    long_row = make_row(run_id="long", notes="x" * 20000)  # longer than one buffered write
    with open(tmp_path / "raw" / ".nmt.lock", "w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        writer = threading.Thread(target=write_outputs, args=(tmp_path, spec, [long_row]))
        writer.start()
        writer.join(timeout=1.0)
        assert writer.is_alive(), "wrote while another process held the table's lock"
        assert not (tmp_path / "raw" / "nmt.jsonl").exists()
        fcntl.flock(holder, fcntl.LOCK_UN)
    writer.join(timeout=30)
    assert not writer.is_alive()
    write_outputs(tmp_path, spec, [make_row(run_id="short", seed=2)])
    assert [row["run_id"] for row in load_rows(tmp_path, "nmt")] == ["long", "short"]
    assert (tmp_path / "nmt.md").read_text().count("| multi30k_en_de |") >= 2


def test_small_and_paper_refuse_a_dirty_tree():
    dirty = {"git_commit": "b" * 40, "git_dirty": True, "git_diff_sha256": "c" * 64}
    for scale in ("small", "paper"):
        with pytest.raises(ReproError, match="ALLOW_DIRTY=1"):
            provenance.check_clean_tree(scale, allow_dirty=False, state=dirty)
        assert provenance.check_clean_tree(scale, allow_dirty=True, state=dirty) is dirty
    assert provenance.check_clean_tree("smoke", allow_dirty=False, state=dirty) is dirty


def test_finished_job_is_found_by_its_key():
    rows = [make_row(), make_row(evaluation="other")]
    key = rowkeys.job_key("multi30k_en_de", "small", "offline", "sparsemax", SETTINGS, 1)
    assert rowkeys.finished_rows(rows, key, ["test2016"]) == [rows[0]]
    assert rowkeys.finished_rows(rows, key, ["test2016", "missing"]) == []
    changed = {**SETTINGS, "max_epoch": 8}
    key = rowkeys.job_key("multi30k_en_de", "small", "offline", "sparsemax", changed, 1)
    assert rowkeys.finished_rows(rows, key, ["test2016"]) == []
    key = rowkeys.job_key("multi30k_en_de", "small", "offline", "sparsemax", SETTINGS, 2)
    assert rowkeys.finished_rows(rows, key, ["test2016"]) == []


def _mean_items(values):
    return {"kind": "mean", "n": len(values), "scores": {"rougeL": list(values)}}


def test_bootstrap_identical_systems_give_p_one_and_a_better_system_p_small():
    base = _mean_items([float(i % 7) for i in range(200)])
    assert significance.paired_bootstrap(base, base, "rougeL") == 1.0
    better = _mean_items([v + 1.0 + (i % 3) for i, v in enumerate(base["scores"]["rougeL"])])
    assert significance.paired_bootstrap(better, base, "rougeL") < 0.01
    # same scores in another order: a small observed difference, a large p
    noisy = _mean_items([float((i + 3) % 7) for i in range(200)])
    assert significance.paired_bootstrap(noisy, base, "rougeL") > 0.05


def test_bootstrap_macro_accuracy_and_bleu():
    groups = ["fi", "es"] * 100
    base = {"kind": "macro", "n": 200, "correct": [i % 2 for i in range(200)], "groups": groups}
    good = {"kind": "macro", "n": 200, "correct": [1] * 200, "groups": groups}
    assert significance.paired_bootstrap(base, base, "accuracy") == 1.0
    assert significance.paired_bootstrap(good, base, "accuracy") < 0.01
    refs = [f"the cat number {i} sat on the mat today" for i in range(60)]
    bad = [f"a dog {i} stood" for i in range(60)]
    items = lambda hyps: {"kind": "bleu", "n": 60, "hypotheses": hyps, "references": refs}  # noqa: E731
    assert significance.paired_bootstrap(items(bad), items(bad), "bleu") == 1.0
    assert significance.paired_bootstrap(items(refs), items(bad), "bleu") < 0.01


def _reference_p(system, baseline, metric, n_resamples=200):
    """The paired bootstrap written plainly, on the items' lists as read from a sidecar."""
    import numpy as np

    statistic = significance.ITEM_KINDS[system["kind"]].statistic
    observed = abs(statistic(system, metric) - statistic(baseline, metric))
    rng = np.random.default_rng(significance.SEED)
    indices = rng.choice(system["n"], size=(n_resamples, system["n"]), replace=True)
    diffs = np.abs([statistic(system, metric, i) - statistic(baseline, metric, i) for i in indices])
    return float((1 + np.sum(diffs - diffs.mean() > observed)) / (n_resamples + 1))


@pytest.mark.parametrize("kind", ["mean", "macro", "f1"])
def test_bootstrap_on_arrays_gives_the_p_of_the_items_lists(kind):
    """The bootstrap converts the items to arrays once (language names to codes): the same
    p to the last bit as the statistics computed on the sidecar's lists, on items whose
    languages are neither sorted nor all present in every resample."""
    import random

    rnd = random.Random(7)
    n = 150

    def items(skill):
        if kind == "mean":
            return {
                "kind": kind,
                "n": n,
                "scores": {"rougeL": [rnd.random() + skill for _ in range(n)]},
            }
        if kind == "macro":
            langs = [rnd.choice(["zu", "fi", "es", "ar"]) for _ in range(n - 1)] + ["ab"]
            correct = [int(rnd.random() < 0.5 + skill) for _ in range(n)]
            return {"kind": kind, "n": n, "correct": correct, "groups": langs}
        gold = [rnd.randint(0, 3) for _ in range(n)]
        tp = [min(g, rnd.randint(0, 3)) if rnd.random() < 0.6 + skill else 0 for g in gold]
        predicted = [t + rnd.randint(0, 1) for t in tp]
        return {"kind": kind, "n": n, "tp": tp, "predicted": predicted, "gold": gold}

    metric = {"mean": "rougeL", "macro": "accuracy", "f1": "f1"}[kind]
    system, baseline = items(0.05), items(0.0)
    expected = _reference_p(system, baseline, metric)
    assert significance.paired_bootstrap(system, baseline, metric, n_resamples=200) == expected
    assert 0 < expected < 1


def test_sidecar_round_trip_pairs_seeds_and_checks_its_hash(tmp_path):
    rows = []
    for mapping, offset in (("softmax", 0.0), ("sparsemax", 2.0)):
        for seed in (1, 2):
            row = make_row(mapping=mapping, seed=seed, run_id=f"{mapping}{seed}")
            items = _mean_items([float(i % 5) + offset for i in range(100)])
            row["items"] = significance.write_items(tmp_path, row["run_id"], "test2016", items)
            rows.append(row)
    assert (tmp_path / "raw" / "items" / "sparsemax1-test2016.json.gz").is_file()
    p_value = significance.p_against(tmp_path, rows[2:], rows[:2], "rougeL")
    assert p_value is not None and p_value < 0.01
    assert significance.p_against(tmp_path, rows[2:], [], "rougeL") is None
    (tmp_path / rows[0]["items"]["file"]).write_bytes(b"changed")
    with pytest.raises(ValueError, match="SHA-256"):
        significance.read_items(tmp_path, rows[0])


def test_a_comparison_asked_again_is_not_bootstrapped_again_unless_its_items_differ(
    tmp_path, monkeypatch
):
    """A table asks for the same p-value in its p column and in its claims: the second time
    is read back by the sidecars' hashes; other items (another hash) are bootstrapped."""
    bootstraps = []
    paired_bootstrap = significance.paired_bootstrap

    def counted(*args, **kwargs):
        bootstraps.append(args[2])
        return paired_bootstrap(*args, **kwargs)

    monkeypatch.setattr(significance, "paired_bootstrap", counted)

    def cell(mapping, offset, folder):
        rows = []
        for seed in (1, 2):
            row = make_row(mapping=mapping, seed=seed, run_id=f"{mapping}{seed}")
            # the two mappings' items in different orders: paired differences that vary
            order = range(60) if mapping == "softmax" else reversed(range(60))
            items = _mean_items([float((i * seed) % 7) + offset for i in order])
            row["items"] = significance.write_items(folder, row["run_id"], "test2016", items)
            rows.append(row)
        return rows

    baseline, system = cell("softmax", 0.0, tmp_path), cell("sparsemax", 0.05, tmp_path)
    first = significance.p_against(tmp_path, system, baseline, "rougeL")
    assert significance.p_against(tmp_path, system, baseline, "rougeL") == first
    assert len(bootstraps) == 1
    # the reverse comparison, and the same rows with other items, are new comparisons
    significance.p_against(tmp_path, baseline, system, "rougeL")
    other = tmp_path / "other"
    shifted = cell("sparsemax", 3.0, other)
    p_shifted = significance.p_against(other, shifted, cell("softmax", 0.0, other), "rougeL")
    assert len(bootstraps) == 3 and p_shifted < first


def test_seeds_and_gamma_arguments():
    args = parse_args(["nmt", "--seeds", "1,2,3", "--gamma", "auto", "--rescore"])
    assert args.seeds == [1, 2, 3] and args.gamma == "auto" and args.rescore
    assert parse_args(["nmt", "--seeds", "4", "5"]).seeds == [4, 5]


def test_make_passes_seeds_gamma_and_flags():
    result = children.run(
        [
            "make",
            "-n",
            "reproduce-nmt",
            "SEEDS=1,2,3",
            "GAMMA=auto",
            "RESCORE=1",
            "ALLOW_DIRTY=1",
            "MAPPINGS=softmax sparsemax",
        ],
        cwd=rowkeys.__file__.rsplit("/regattn_fairseq/", 1)[0],
    )
    assert "--seeds 1,2,3" in result.stdout and "--gamma auto" in result.stdout
    assert "--mappings softmax sparsemax" in result.stdout
    assert "--rescore" in result.stdout and "--allow-dirty" in result.stdout


def test_rerun_plan(tmp_path):
    row = make_row()
    row["train"]["overrides"].append("model.attention_gamma=4.0")
    plan = rerun.plan_rerun([row], tmp_path, data_dir="/data")
    assert plan["commit"] == "a" * 40
    command = plan["command"]
    assert command[:2] == ["scripts/reproduce.py", "nmt"]
    assert command[command.index("--seeds") + 1] == "1"
    assert command[command.index("--override") + 1] == "model.attention_gamma=4.0"
    assert command.count("--override") == 1  # paths and identity are passed again, not copied
    assert plan["expected"] == {"test2016": {"bleu": 30.0}}
    one_seed = rerun.cell_spread([row], [row])
    assert one_seed == {"test2016": {"bleu": {"std": None, "n": 1}}}
    report = rerun.compare(
        plan["expected"], [make_row(metrics={"bleu": 30.5})], row["experiment"], one_seed
    )
    assert report == [
        {
            "evaluation": "test2016",
            "metric": "bleu",
            "recorded": 30.0,
            "rerun": 30.5,
            "difference": 0.5,
            "cell_std": None,
            "cell_n": 1,
            "within_std": False,  # one seed: no std, only an identical number passes
        }
    ]
    unknown = make_row()
    unknown["train"]["started"] = {}
    with pytest.raises(ReproError, match="training commit unknown"):
        rerun.plan_rerun([unknown], tmp_path)
    with pytest.raises(ReproError, match="dirty"):
        rerun.plan_rerun([make_row(git_dirty=True)], tmp_path)


def test_rerun_is_judged_against_its_cells_std_and_recorded(tmp_path):
    seeds = [make_row(run_id=f"r{s}", seed=s, metrics={"bleu": b}) for s, b in ((1, 30), (2, 32))]
    seeds.append(make_row(run_id="r3", seed=3, metrics={"bleu": 34.0}))
    superseded = make_row(run_id="r2old", seed=2, metrics={"bleu": 90.0})
    other_config = make_row(run_id="x", seed=4, metrics={"bleu": 0.0})
    other_config["train"]["config"]["max_epoch"] = 8  # another cell config: not in the spread
    other_gamma = make_row(run_id="y", seed=5, metrics={"bleu": 0.0})
    other_gamma["train"]["config"]["model"]["attention_gamma"] = 4.0  # another cell
    rows = [superseded, *seeds, other_config, other_gamma]  # the newest row of a seed counts
    spread = rerun.cell_spread(rows, [seeds[0]])
    assert spread == {"test2016": {"bleu": {"std": 2.0, "n": 3}}}  # stdev of 30, 32, 34
    expected = {"test2016": {"bleu": 30.0}}
    within = rerun.compare(expected, [make_row(metrics={"bleu": 31.9})], "multi30k_en_de", spread)
    beyond = rerun.compare(expected, [make_row(metrics={"bleu": 27.5})], "multi30k_en_de", spread)
    missing = rerun.compare(expected, [make_row(metrics={})], "multi30k_en_de", spread)
    assert [r[0]["within_std"] for r in (within, beyond, missing)] == [True, False, False]
    assert within[0]["cell_std"] == 2.0 and within[0]["cell_n"] == 3

    results_file = tmp_path / "nmt.jsonl"
    for report in (within, beyond):  # appended, never replaced
        markdown = rerun.record_rerun(tmp_path, results_file, [seeds[0]], report)
    records = [json.loads(line) for line in (tmp_path / "reruns.jsonl").open()]
    assert [rec["report"][0]["rerun"] for rec in records] == [31.9, 27.5]
    assert records[0]["run_id"] == "r1" and records[0]["trained_at"] == "a" * 40
    assert records[0]["rerun_versions"]["torch"] and records[0]["rerun_hardware"]["cpu"]
    text = markdown.read_text()
    assert "| 30.00 | 31.90 | +1.90 | 2.00 (3) | yes (0.9 std) |" in text
    assert "| 30.00 | 27.50 | -2.50 | 2.00 (3) | no (1.2 std) |" in text
    assert f"Trained at {'a' * 10} on unknown; re-run on " in text  # the row names no hardware


def committed_runs() -> list[list[dict]]:
    """Every committed run's rows (one per evaluation set), from results/raw."""
    runs: dict[tuple, list[dict]] = {}
    for raw in sorted((RESULTS_DIR / "raw").glob("*.jsonl")):
        for row in read_rows(raw):
            runs.setdefault((raw.name, row["run_id"]), []).append(row)
    return list(runs.values())


def test_the_job_of_every_committed_run_has_its_rows_key(tmp_path):
    """The job a re-run builds from a committed run (`rerun.recorded_job`) has the key of its
    rows (`keys.row_job_key`), so the lifecycle (`jobs.run_job`) finds their job as the
    table run that wrote them did."""
    runs = committed_runs()
    assert len(runs) > 100
    for rows in runs:
        job = rerun.recorded_job(rows, tmp_path / "work")
        assert {rowkeys.row_job_key(row) for row in rows} == {job.key}, rows[0]["run_id"]
        assert job.evaluations == tuple(row["evaluation"] for row in rows)
        assert (job.experiment.name, job.mapping, job.seed) == (
            rows[0]["experiment"],
            rows[0]["mapping"],
            rows[0]["seed"],
        )
        assert job.finished(rows) == rows


def test_rerun_runs_the_recorded_job_through_the_job_lifecycle(tmp_path, monkeypatch):
    """`rerun` runs the recorded job (`jobs.run_job`): its training step is the commit's own
    run (here a stand-in that writes the re-run's rows where the command says), whose rows are
    collected, not appended a second time, and compared with the recorded ones."""
    recorded = make_row(run_id="old")
    recorded["train"]["overrides"].append("model.attention_gamma=4.0")
    results_file = tmp_path / "nmt.jsonl"
    results_file.write_text(json.dumps(recorded) + "\n")
    commands = []

    def commit_run(commit, command, tree, label):
        commands.append((commit, command, label))
        results = command[command.index("--results-dir") + 1]
        write_outputs(Path(results), SPEC, [make_row(run_id="new", metrics={"bleu": 30.0})])

    monkeypatch.setattr(rerun, "run_at_commit", commit_run)
    report = rerun.rerun(results_file, "old", data_dir="/data", record_dir=None)
    [(commit, command, label)] = commands
    assert commit == "a" * 40 and label == "multi30k_en_de sparsemax seed 1 (run old)"
    assert command[command.index("--override") + 1] == "model.attention_gamma=4.0"
    assert report[0]["rerun"] == 30.0 and report[0]["within_std"]  # identical: passes


@pytest.mark.slow
def test_rerun_a_smoke_row_from_its_commit(shared_data, tmp_path):
    """Run a smoke table in a clone at HEAD, then re-run its row from that commit: zero
    difference (deterministic CPU run)."""
    from regattn_fairseq.experiments.core.paths import REPO_ROOT

    clone = tmp_path / "clone"
    children.run(["git", "clone", "-q", "--shared", str(REPO_ROOT), str(clone)], check=True)
    for kernel in (REPO_ROOT / "regattn").glob("_C*.so"):
        (clone / "regattn" / kernel.name).write_bytes(kernel.read_bytes())
    env = {"PYTHONPATH": str(clone), "PATH": os.environ["PATH"]}
    python = sys.executable
    results = tmp_path / "results"
    children.run(
        [python, "scripts/reproduce.py", "inflection", "--scale", "smoke", "--mappings",
         "softmax", "--data-dir", str(shared_data), "--work-dir", str(tmp_path / "work"),
         "--results-dir", str(results)],
        cwd=clone, env=env, check=True,
    )  # fmt: skip
    rows = [json.loads(line) for line in (results / "raw" / "inflection.jsonl").open()]
    # the medium setting's model row; the table's baseline was scored beside it
    # (rows.baselines), and the sparse-output experiment (#50) trained its own softmax model
    models = [row for row in rows if not rowkeys.is_baseline(row)]
    assert {row["experiment"] for row in models} == {"medium", "medium_entmax_output"}
    [row] = [row for row in models if row["experiment"] == "medium"]
    done = children.run(
        [python, "scripts/rerun_row.py", str(results / "raw" / "inflection.jsonl"),
         row["run_id"], "--data-dir", str(shared_data), "--record-dir", str(results)],
        cwd=clone, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "| test | accuracy |" in done.stdout and "| 0.0 | None (1) | yes |" in done.stdout
    [record] = [json.loads(line) for line in (results / "reruns.jsonl").open()]
    assert record["run_id"] == row["run_id"] and record["report"][0]["difference"] == 0


def test_gamma_choice_line_names_the_values_tried_beyond_the_grid():
    """A choice the edge rule extended names the values it added; it is flagged only while it
    is still at the edge of everything tried."""
    grid = {"grid": [1.0, 4.0], "validation": {}}
    assert _gamma_edge_note({**grid, "chosen": 1.0, "extended": []}).startswith(" (at the edge")
    inside = _gamma_edge_note({**grid, "chosen": 16.0, "extended": [16.0, 64.0]})
    assert inside == " (the grid's edge won, so γ = 16.0, 64.0 were tried beyond it)"
    one = _gamma_edge_note({**grid, "chosen": 4.0, "extended": [16.0]})
    assert one == " (the grid's edge won, so γ = 16.0 was tried beyond it)"
    still = _gamma_edge_note({**grid, "chosen": 64.0, "extended": [16.0, 64.0]})
    assert still.endswith("(at the edge of the γ tried: the best γ may lie beyond it)")
    assert _gamma_edge_note({"grid": [1.0, 4.0, 16.0], "chosen": 4.0}) == ""


def test_gamma_choice_line_names_where_its_short_runs_are_kept():
    """A fine-tuned table's choice cites its short runs (pipelines/short_runs.py): the line says
    how many, where, and the commits that trained them; a choice without citations says
    nothing of them."""
    run = {"folder": "f", "best_valid_loss": 0.5, "date": "d", "cpu": "c", "git_dirty": False}
    selection = {
        "short_runs": {
            "1.0": [{**run, "git_commit": "a" * 40}],
            "4.0": [{**run, "git_commit": "b" * 40}, {**run, "git_commit": "a" * 40}],
        }
    }
    assert _short_runs_note(selection) == (
        "; its 3 short runs are kept under `results/gamma_grids/finetune/`, trained at commits "
        "aaaaaaaaaa, bbbbbbbbbb"
    )
    assert _short_runs_note({"grid": [1.0], "chosen": 1.0}) == ""
