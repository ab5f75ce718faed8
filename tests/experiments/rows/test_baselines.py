"""The trivial baselines beside every table: their outputs, their choice on validation, and
their rows, scored by the systems' own scorer and skipped once finished."""

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.data.builders.inflection import encode_source
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.data.test_sets import prepared_gold
from regattn_fairseq.experiments.pipelines import reproduce, table_jobs
from regattn_fairseq.experiments.rows import baselines
from regattn_fairseq.experiments.rows.store import load_rows
from regattn_fairseq.experiments.score.metrics import metric


def _score(evaluation: dict, scorer: str, outputs: list[str]) -> dict:
    """The registry's scores of plain outputs, as the baselines' rows get them."""
    scored = metric(scorer).score(outputs, prepared_gold(evaluation))
    return {"metrics": scored.metrics, "signature": scored.signature, "items": scored.items}


def _write(path: Path, lines: list[str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _summaries(tmp_path: Path) -> PreparedData:
    raw, refs = tmp_path / "raw", tmp_path / "refs"
    articles = [f"w{i} a b c d e f g h i j k" for i in range(6)]
    _write(raw / "test.article", articles)
    # validation titles are the first 3 words of their articles: N = 3 must win
    _write(raw / "valid.article", articles)
    _write(raw / "valid.title", [" ".join(a.split()[:3]) for a in articles])
    ref = _write(refs / "test.ref0", [f"w{i} a b" for i in range(6)])
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "dict.article.txt").write_text("a 1\n")
    evaluations = {
        "gigaword": {"subset": "test", "refs": [ref], "truncate_bytes": None},
        "duc2004": {"subset": "test", "refs": [ref], "truncate_bytes": 9},
    }
    _write(raw / "duc2004.article", articles)
    # the DUC articles as distributed (the models read them digit-masked)
    _write(raw / "duc2004.article.digits_kept", [a.replace("w", "1") for a in articles])
    evaluations["duc2004"]["digits_kept_articles"] = "duc2004.article.digits_kept"
    _write(raw / "gigaword.article", articles)
    manifest = {
        "dataset": "gigaword_duc",
        "source": "offline",
        "variant": "small",
        "description": "toy",
        "inputs": {},
        "evaluations": evaluations,
    }
    return PreparedData(tmp_path, manifest)


def test_lead_takes_n_words_chosen_on_validation_or_the_whole_article_for_a_byte_limit(tmp_path):
    data = _summaries(tmp_path)
    outputs, settings = baselines.lead_outputs(data, "gigaword", data.evaluation("gigaword"))
    assert settings["words_chosen_on_validation"] == 3
    assert outputs[0] == "w0 a b"
    # with -b the scorer cuts the whole article at the byte limit: the first bytes are the lead
    outputs, settings = baselines.lead_outputs(data, "duc2004", data.evaluation("duc2004"))
    assert outputs[1] == "w1 a b c d e f g h i j k" and "9 bytes" in settings["lead"]


def test_duc_lead_with_digits_kept_reads_the_articles_as_distributed(tmp_path):
    data = _summaries(tmp_path)
    experiment = OmegaConf.create({"name": "summarization", "test_sets": ["gigaword", "duc2004"]})
    # a set the models read as distributed (Gigaword) has the lead alone
    assert baselines.baseline_evaluations("lead_digits_kept", experiment, data) == ["duc2004"]
    assert baselines.baseline_evaluations("lead", experiment, data) == ["gigaword", "duc2004"]
    outputs, settings = baselines.lead_digits_kept_outputs(
        data, "duc2004", data.evaluation("duc2004")
    )
    assert outputs[1] == "11 a b c d e f g h i j k" and "digits kept" in settings["lead"]
    no_limit = {**data.evaluation("duc2004"), "truncate_bytes": None}
    with pytest.raises(ReproError, match="has no byte limit"):
        baselines.lead_digits_kept_outputs(data, "duc2004", no_limit)
    (tmp_path / "raw" / "duc2004.article.digits_kept").unlink()
    with pytest.raises(ReproError, match="digits_kept is missing"):
        baselines.lead_digits_kept_outputs(data, "duc2004", data.evaluation("duc2004"))


def test_copy_source_removes_bpe_and_detokenizes(tmp_path):
    _write(tmp_path / "raw" / "test2016.en", ["A man in an orange hat starr@@ ing at something ."])
    data = PreparedData(tmp_path, {"dataset": "multi30k", "evaluations": {}})
    outputs, _ = baselines.copy_source_outputs(data, "test2016", {})
    assert outputs == ["A man in an orange hat starring at something."]


def test_copy_lemma_reads_the_encoded_source(tmp_path):
    sources = [encode_source("eng", "walk", "V;PST"), encode_source("deu", "New York", "N;NOM")]
    _write(tmp_path / "raw" / "test.src", sources)
    data = PreparedData(tmp_path, {"dataset": "sigmorphon", "evaluations": {}})
    outputs, _ = baselines.copy_lemma_outputs(data, "test", {})
    assert outputs == ["walk", "New York"]


def test_unknown_baseline_is_named():
    with pytest.raises(ReproError, match="unknown baseline 'nope'.*copy_lemma"):
        baselines.baseline("nope")


def test_baseline_rows_are_scored_like_systems_and_skipped_once_finished(tmp_path, capsys):
    data = _summaries(tmp_path / "data")
    results_dir, work = tmp_path / "results", tmp_path / "work"
    spec = OmegaConf.create(
        {
            "table": "table2",
            "title": "t",
            "paper_source": "p",
            "metrics": {"gigaword": ["rouge1", "rougeL"], "duc2004": ["rouge1"]},
            "mappings": ["softmax"],
        }
    )
    experiment = OmegaConf.create(
        {
            "name": "summarization",
            "test_sets": ["gigaword", "duc2004"],
            "baselines": ["lead"],
        }
    )
    table_jobs.run_baselines(spec, experiment, "small", data, work, results_dir, rescore=False)
    rows = load_rows(results_dir, "table2")
    assert [r["evaluation"] for r in rows] == ["gigaword", "duc2004"]
    giga = rows[0]
    # the lead of 3 words equals each reference: ROUGE F1 100
    assert giga["metrics"]["rouge1"] == 100.0 and giga["mapping"] == "baseline: lead"
    assert giga["baseline"]["settings"]["words_chosen_on_validation"] == 3
    assert giga["signature"] and giga["items"] and giga["seed"] == 0
    assert "baseline: lead" in (results_dir / "table2.md").read_text()
    table_jobs.run_baselines(spec, experiment, "small", data, work, results_dir, rescore=False)
    assert len(load_rows(results_dir, "table2")) == 2
    assert "[skip] summarization baseline: lead" in capsys.readouterr().out
    table_jobs.run_baselines(spec, experiment, "small", data, work, results_dir, rescore=True)
    assert len(load_rows(results_dir, "table2")) == 4
    # DUC's lead with its digits: a row of its own, on the set the models read digit-masked
    # only, and finished once it has that row
    experiment.baselines.append("lead_digits_kept")
    table_jobs.run_baselines(spec, experiment, "small", data, work, results_dir, rescore=False)
    rows = load_rows(results_dir, "table2")
    [kept] = [r for r in rows if r["mapping"] == "baseline: lead, digits kept"]
    assert kept["evaluation"] == "duc2004" and kept["metrics"]["rouge1"] < 100.0
    table_jobs.run_baselines(spec, experiment, "small", data, work, results_dir, rescore=False)
    assert len(load_rows(results_dir, "table2")) == 5
    assert "[skip] summarization baseline: lead, digits kept" in capsys.readouterr().out


def _snli(tmp_path: Path) -> PreparedData:
    # the hypothesis's first word gives the label away; the premise is noise
    words = {"entailment": "someone", "neutral": "maybe", "contradiction": "nobody"}
    for split, n in (("train", 60), ("valid", 30), ("test", 30)):
        labels = [list(words)[i % 3] for i in range(n)]
        if split == "train":
            labels[-2:] = ["neutral", "neutral"]  # neutral is the majority
        _write(tmp_path / "raw" / f"{split}.hypothesis", [f"{words[x]} sleeps" for x in labels])
        _write(tmp_path / "raw" / f"{split}.premise", ["a cat sits"] * n)
        _write(tmp_path / "bin" / "label" / f"{split}.label", labels)
    refs = str(tmp_path / "bin" / "label" / "test.label")
    return PreparedData(tmp_path, {"dataset": "snli", "evaluations": {"test": {"refs": [refs]}}})


def test_snli_majority_class_and_hypothesis_only(tmp_path):
    data = _snli(tmp_path)
    evaluation = data.evaluation("test")
    outputs, settings = baselines.majority_class_outputs(data, "test", evaluation)
    assert settings == {"label": "neutral"} and set(outputs) == {"neutral"}
    result = _score(evaluation, "accuracy", outputs)
    assert result["metrics"]["accuracy"] == pytest.approx(100 / 3, abs=0.01)
    assert result["items"]["scores"]["accuracy"][:3] == [0, 100, 0]
    outputs, settings = baselines.hypothesis_only_outputs(data, "test", evaluation)
    assert _score(evaluation, "accuracy", outputs)["metrics"] == {"accuracy": 100.0}
    assert settings["C_chosen_on_validation"] in baselines.HYPOTHESIS_ONLY_C


def test_ner_most_frequent_tag(tmp_path):
    bin_dir = tmp_path / "bin"
    _write(bin_dir / "train.word", ["Madrid es grande", "Madrid Madrid"])
    # IOBES: Madrid is a location twice, an organisation once
    _write(bin_dir / "train.tag", ["S-LOC O O", "S-LOC S-ORG"])
    _write(bin_dir / "test.word", ["Madrid es nuevo"])
    refs = _write(tmp_path / "refs" / "test.iob2", ["B-LOC O O"])
    evaluation = {"subset": "test", "refs": [refs]}
    data = PreparedData(tmp_path, {"dataset": "conll2002", "evaluations": {"t": evaluation}})
    outputs, _ = baselines.frequent_tag_outputs(data, "t", evaluation)
    assert outputs == ["B-LOC O O"]  # an unseen word is O
    result = _score(evaluation, "entity_f1", outputs)
    assert result["metrics"]["f1"] == 100.0 and result["items"]["tp"] == [1]


@pytest.mark.parametrize(
    "extra, rescored",
    [
        ([], True),  # the whole table: its baselines too
        (["--mappings", "sparsemax"], False),  # a subset: its mappings only
        (["--mappings", "sparsemax", "--baselines-only"], True),
    ],
)
def test_rescore_of_a_mapping_subset_leaves_the_baselines(tmp_path, monkeypatch, extra, rescored):
    """`--rescore --mappings m` scores m again, not the table's baselines (which it would only
    duplicate); the whole table, or --baselines-only, scores them again."""
    calls = []
    manifest = {"source": "offline", "evaluations": {}}
    data = type("Prepared", (), {"manifest": manifest, "bin_dir": tmp_path})()
    monkeypatch.setattr(reproduce, "_prepare", lambda table, experiment: data)
    monkeypatch.setattr(reproduce, "_leave_out_missing_evaluations", lambda *a: None)
    monkeypatch.setattr(reproduce, "run_baselines", lambda *a: calls.append(a[-1]))
    trainer_of = reproduce.trainer_of  # the experiments train nothing: their runs are stubbed
    monkeypatch.setattr(
        reproduce, "trainer_of", lambda e: dataclasses.replace(trainer_of(e), run=lambda *a: [])
    )
    monkeypatch.setattr(reproduce, "_draw_attention_figure", lambda *a: None)
    argv = ["inflection", "--scale", "smoke", "--rescore", *extra]
    argv += ["--work-dir", str(tmp_path), "--results-dir", str(tmp_path / "results")]
    reproduce.run(argv)
    assert calls and all(call == rescored for call in calls)  # once per experiment
