"""Dry runs of the paper-scale experiments (issue #16 item 3): the paper's model, optimizer and
schedule on capped data for a few updates, end to end (prepare -> train -> decode -> score ->
row), with rows that are marked and never mixed with real ones.

The default suite runs one (Table 1, one mapping, one seed, scripts/reproduce.py in process); every
table through `make ... SCALE=paper MAX_TRAIN=... MAX_UPDATE=...` is `slow`, with one mapping
(a different one per table): what they test is each experiment's paper config, which the
mapping does not change (every mapping trains end to end in test_end_to_end's smoke tables)."""

import json
from pathlib import Path

import children
import pytest
from make_runs import run_make

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import REPO_ROOT, RESULTS_DIR
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.core.dry_run import DryRun
from regattn_fairseq.experiments.core.paths import LOCAL_DATA_ENV
from regattn_fairseq.experiments.data import fingerprint
from regattn_fairseq.experiments.pipelines import reproduce, rerun
from regattn_fairseq.experiments.report import tables as results
from regattn_fairseq.experiments.report import views
from regattn_fairseq.experiments.rows import keys as rowkeys
from regattn_fairseq.experiments.rows import store
from regattn_fairseq.experiments.train import train as runs

CAPS = {"max_train": 200, "max_eval": 12, "max_update": 3}
# the tables through make: 2 examples per evaluation set (per language for inflection), since an
# untrained seq2seq model beam-searches every output to its maximum length
MAKE_CAPS = {"max_train": 200, "max_eval": 2, "max_update": 3}


def test_dry_run_caps():
    dry = DryRun(max_train=200, max_update=3)
    assert dry.active and dry.record() == {"max_train": 200, "max_update": 3}
    assert dry.data_caps() == {"max_train": 200}
    assert dry.train_overrides() == ["optimization.max_update=3"]
    assert dry.folder_suffix() == "-dry-run-train200-update3"
    real = DryRun()
    assert not real.active and real.record() is None and real.folder_suffix() == ""
    assert real.train_overrides() == [] and real.data_caps() == {}
    for bad in (0, -3):
        with pytest.raises(ReproError, match="max_update must be a positive integer"):
            DryRun(max_update=bad)


def row(dry_run=None, mapping="sparsemax", **changes) -> dict:
    base = {
        "run_id": "r1",
        "table": "table1",
        "experiment": "snli",
        "evaluation": "test",
        "scale": "paper",
        "data_source": "offline",
        "mapping": mapping,
        "sweep_params": {},
        "seed": 1,
        "metrics": {"accuracy": 50.0},
        "dry_run": dry_run,
        "date": "2026-11-23T08:00:00+00:00",
        "git_commit": "a" * 40,
        "git_dirty": False,
        "data": {"description": "snli"},
        "attention": {},
        "train": {
            "config": {"model": {"_name": "regattn_snli"}, "max_epoch": 10},
            "started": {"git_commit": "a" * 40},
            "epochs": 1,
            "wall_s": 1.0,
            "tokens_per_s": 1.0,
            "overrides": ["scale/snli=paper", "optimization.max_update=3"],
        },
    }
    return {**base, **changes}


def test_dry_rows_have_their_own_key_and_table_section():
    real, dry = row(), row(dry_run=CAPS, run_id="r2", metrics={"accuracy": 33.0})
    assert rowkeys.config_sha256(real["train"]["config"]) == rowkeys.config_sha256(
        dry["train"]["config"]
    )
    assert rowkeys.cell_key(real) != rowkeys.cell_key(dry)
    # a real row does not make the dry job finished, nor the other way round
    settings = real["train"]["config"]
    job = ("snli", "paper", "offline", "sparsemax", settings, 1)
    assert rowkeys.finished_rows([real], rowkeys.job_key(*job, CAPS), ["test"]) == []
    assert rowkeys.finished_rows([dry], rowkeys.job_key(*job), ["test"]) == []
    assert rowkeys.finished_rows([dry], rowkeys.job_key(*job, CAPS), ["test"]) == [dry]
    # both current (neither supersedes the other), each in its own section
    shown, superseded = rowkeys.split_current([real, dry])
    assert len(shown) == 2 and superseded == []
    markdown = results.render_table(load_config("reproduce", "table1"), [real, dry])
    sections = markdown.split("\n## ")
    [real_section] = [s for s in sections if s.startswith("Scale `paper`\n")]
    [dry_section] = [
        s
        for s in sections
        if s.startswith("Scale `paper`, dry run (max_train 200, max_eval 12, max_update 3)")
    ]
    assert "| 50.00 |" in real_section and "33.00" not in real_section
    assert "| 33.00 |" in dry_section and "the numbers mean nothing" in dry_section
    assert "| paper (dry run) | snli |" in markdown


def test_dry_rows_never_mix_with_real_rows(tmp_path):
    spec = load_config("reproduce", "table1")
    with pytest.raises(ReproError, match="never go to .*committed results"):
        store.check_row_kinds(RESULTS_DIR, "table1", dry_run=True)
    views.write_outputs(tmp_path, spec, [row()])
    with pytest.raises(ReproError, match=r"table1.jsonl holds real rows: dry-run rows"):
        views.write_outputs(tmp_path, spec, [row(dry_run=CAPS)])
    dry_dir = tmp_path / "dry"
    views.write_outputs(dry_dir, spec, [row(dry_run=CAPS)])
    with pytest.raises(ReproError, match=r"holds dry-run rows: real rows"):
        store.check_row_kinds(dry_dir, "table1", dry_run=False)
    assert len(store.load_rows(tmp_path, "table1")) == 1  # nothing was appended


def test_dry_rows_are_not_rerun(tmp_path):
    with pytest.raises(ReproError, match="is a dry run"):
        rerun.plan_rerun([row(dry_run=CAPS)], tmp_path)


def test_data_fingerprint_covers_subfolders(tmp_path):
    # SNLI keeps its binarized data in bin/input0, bin/input1 and bin/label: the fingerprint
    # found no file directly in bin/ and every Table 1 run failed after training
    for name in ("input0/train.bin", "input0/dict.txt", "input1/train.idx", "label/test.label"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    before = fingerprint.data_fingerprint(tmp_path)
    (tmp_path / "label" / "test.label").write_text("other labels")
    assert fingerprint.data_fingerprint(tmp_path) != before


def test_make_passes_the_dry_run_variables():
    result = children.run(
        ["make", "-n", "reproduce-table1", "SCALE=paper", "MAX_TRAIN=200", "MAX_EVAL=12"]
        + ["MAX_UPDATE=3", "RESULTS_DIR=/tmp/dry"],
        cwd=REPO_ROOT,
    )
    assert "--max-train 200 --max-eval 12 --max-update 3" in result.stdout


def paper_settings(table: str, experiment_name: str, mapping: str) -> dict:
    """The settings of the real paper run's composed config (no dry-run override; the
    settings hold no paths)."""
    [experiment] = [
        e for e in load_config("reproduce", table).experiments if e.name == experiment_name
    ]
    prepared = type("Prepared", (), {"bin_dir": Path("/data")})()
    return runs.compose_settings(
        experiment.train_config,
        [
            *runs.hydra_overrides(experiment, "paper", prepared),
            runs.mapping_override(experiment, mapping),
        ],
    )


def check_dry_rows(results_dir: Path, table: str, mappings: set[str], caps: dict) -> list[dict]:
    """The rows of a paper dry run: marked, capped, trained with the paper's config for
    max_update updates, scored, and shown in a dry-run section of the table."""
    rows = [json.loads(line) for line in (results_dir / "raw" / f"{table}.jsonl").open()]
    assert {r["mapping"] for r in rows} == mappings
    train, evaluation, updates = caps["max_train"], caps["max_eval"], caps["max_update"]
    for r in rows:
        assert r["scale"] == "paper" and r["dry_run"] == caps
        assert f"optimization.max_update={updates}" in r["train"]["overrides"]
        assert f"capped: max_train {train}, max_eval {evaluation}" in r["data"]["description"]
        [data] = [o for o in r["train"]["overrides"] if o.startswith("task.data=")]
        assert data.endswith(f"-capped-train{train}-eval{evaluation}/bin")
        assert f"dry-run-train{train}-eval{evaluation}-update{updates}" in r["train"]["checkpoint"]
        # the paper's config, not a smaller one: same composed settings as the real run
        paper = paper_settings(table, r["experiment"], r["mapping"])
        assert r["config_sha256"] == rowkeys.config_sha256(paper)
        log = (Path(r["train"]["checkpoint"]).parents[1] / "train.log").read_text()
        assert f'"train_num_updates": "{updates}"' in log, "training did not stop at max_update"
        for metric in r["metrics"].values():
            assert 0.0 <= metric <= 100.0
        assert r["attention"]["sentences"] >= 1
    markdown = (results_dir / f"{table}.md").read_text()
    assert f"## Scale `paper`, dry run (max_train {train}, max_eval {evaluation}, " in markdown
    assert "## Scale `paper`\n" not in markdown
    return rows


@pytest.mark.slow  # a paper dry run: 6 fairseq processes, twice the table's command; 1-2 min here
def test_table1_paper_dry_run(shared_data, tmp_path, capsys):
    """The cheapest paper dry run: Table 1's SNLI classifier (300-d embeddings, 100-d LSTMs,
    Adam 3e-4) on the offline SNLI subset capped at 200 pairs, 3 updates, one mapping."""
    work, results_dir = tmp_path / "work", tmp_path / "results"
    argv = [
        "table1", "--scale", "paper", "--source", "offline", "--mappings", "sparsemax",
        "--seeds", "1", "--max-train", "200", "--max-eval", "12", "--max-update", "3",
        "--data-dir", str(shared_data), "--work-dir", str(work), "--results-dir", str(results_dir),
    ]  # fmt: skip
    reproduce.run(argv)
    [r] = check_dry_rows(results_dir, "table1", {"sparsemax"}, CAPS)
    log = (Path(r["train"]["checkpoint"]).parents[1] / "train.log").read_text()
    assert "'embed_dim': 300, 'hidden_size': 100" in log  # the paper's sizes (Rocktäschel)
    assert r["train"]["config"]["optimizer"]["_name"] == "adam"
    # the capped data and the dry run's checkpoints are in folders of their own (beside the
    # data folder: its build lock, a file)
    assert [p.name for p in (work / "data" / "snli").iterdir() if p.is_dir()] == [
        "paper-offline-capped-train200-eval12"
    ]
    assert [p.name for p in (work / "checkpoints" / "table1" / "snli").iterdir()] == [
        "paper-offline-dry-run-train200-eval12-update3"
    ]
    # the same command again finds the job finished (its key has the caps)
    capsys.readouterr()
    reproduce.run(argv)
    assert "[skip] snli sparsemax seed 1: finished" in capsys.readouterr().out
    # a dry run never writes to the committed results folder
    with pytest.raises(ReproError, match="committed results"):
        reproduce.run([*argv[:-1], str(RESULTS_DIR)])


def make_dry_run(
    target: str, tmp_path: Path, data_dir: Path, mapping: str, source: str = "offline"
) -> Path:
    """`make <target> SCALE=paper` with MAKE_CAPS, one seed and one mapping; returns
    RESULTS_DIR."""
    caps = {name.upper(): str(value) for name, value in MAKE_CAPS.items()}
    variables = {"SCALE": "paper", "DATA_SOURCE": source, "SEEDS": "1", "MAPPINGS": mapping}
    result = run_make(target, tmp_path, data_dir, variables={**variables, **caps})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return tmp_path / "results"


@pytest.mark.slow
def test_make_table1_paper_dry_run(shared_data, tmp_path):
    results_dir = make_dry_run("reproduce-table1", tmp_path, shared_data, "fusedmax")
    check_dry_rows(results_dir, "table1", {"fusedmax"}, MAKE_CAPS)


@pytest.mark.slow
def test_make_table2_paper_dry_run(shared_data, tmp_path):
    """Table 2's paper model: 2 x 500 LSTM, OpenNMT-py SGD (lr 1, halved from epoch 9),
    beam 5, on Gigaword pairs; scored on capped DUC 2004 and Gigaword test."""
    results_dir = make_dry_run("reproduce-table2", tmp_path, shared_data, "oscarmax")
    rows = check_dry_rows(results_dir, "table2", {"oscarmax"}, MAKE_CAPS)
    assert {r["evaluation"] for r in rows} == {"duc2004", "gigaword"}
    for r in rows:
        assert r["train"]["config"]["optimizer"]["_name"] == "sgd"
        assert r["decode"]["beam"] == 5


@pytest.mark.slow
def test_make_inflection_paper_dry_run(shared_data, tmp_path):
    """Inflection's paper setting: every language of the medium and high settings, 200 words
    each (2 of dev and test), the 2 x 300 bidirectional LSTM, Adam, beam 5; and the medium
    setting with Peters et al.'s sparse output layer (the Fenchel-Young loss, #50)."""
    results_dir = make_dry_run("reproduce-inflection", tmp_path, shared_data, "entmax15")
    rows = check_dry_rows(results_dir, "inflection", {"entmax15"}, MAKE_CAPS)
    assert {r["experiment"] for r in rows} == {"medium", "high", "medium_entmax_output"}
    [sparse_output] = [r for r in rows if r["experiment"] == "medium_entmax_output"]
    assert sparse_output["train"]["config"]["criterion"]["_name"] == "regattn_fy"


@pytest.mark.slow
def test_make_nmt_paper_dry_run(shared_data, tmp_path, monkeypatch):
    """NMT at paper scale, all three pairs: Multi30k from its (complete) offline copy, IWSLT14
    and WMT16 from their official layouts (DATA_SOURCE=local; the small synthetic copies of
    tests/experiments/local_layouts.py), the 2 x 500 LSTM with OpenNMT-py SGD, beam 5, BLEU."""
    from local_layouts import write_all

    monkeypatch.setenv(LOCAL_DATA_ENV, str(write_all(tmp_path / "local")))
    results_dir = make_dry_run("reproduce-nmt", tmp_path, shared_data, "sparsemax", "local")
    rows = check_dry_rows(results_dir, "nmt", {"sparsemax"}, MAKE_CAPS)
    assert {(r["experiment"], r["data_source"]) for r in rows} == {
        ("multi30k_en_de", "offline"),
        ("iwslt14_de_en", "local"),
        ("wmt16_ro_en", "local"),
    }
    for r in rows:
        assert r["train"]["config"]["optimizer"]["_name"] == "sgd"
        assert r["signature"].startswith("nrefs:1")
