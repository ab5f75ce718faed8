"""The NER table's reporting: per-sentence entity counts whose corpus F1 is seqeval's, the
paired bootstrap of kind "f1" against the entropy baseline, the table's tag-marginal columns
and "p vs entropy" (configs/reproduce/ner.yaml), and the marginals figure's wording and
sentence (no training here)."""

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.decode.tagging import entity_counts, entity_scores
from regattn_fairseq.experiments.report.attention_plots import cell_borders, sentence_figure
from regattn_fairseq.experiments.report.figures import plot_attention_figure
from regattn_fairseq.experiments.report.tables import render_table
from regattn_fairseq.experiments.score import significance

TYPES = ("PER", "LOC", "ORG", "MISC")


def _gold_sentences(n: int, seed: int = 0) -> list[list[str]]:
    """Random IOB2 sentences of 3-14 words with entities of 1-3 words."""
    rng = np.random.default_rng(seed)
    sentences = []
    for _ in range(n):
        tags = ["O"] * int(rng.integers(3, 15))
        for start in range(0, len(tags), 4):
            if rng.random() < 0.6:
                kind = TYPES[rng.integers(len(TYPES))]
                size = min(int(rng.integers(1, 4)), len(tags) - start)
                tags[start : start + size] = [f"B-{kind}"] + [f"I-{kind}"] * (size - 1)
        sentences.append(tags)
    return sentences


def _corrupt(gold: list[list[str]], rate: float, seed: int) -> list[list[str]]:
    """Predictions that change each tag with probability `rate`: a wrong type, a missed
    or spurious word, and I- after O (which conlleval reads as the start of an entity)."""
    rng = np.random.default_rng(seed)
    choices = ["O", *(f"{p}-{t}" for p in "BI" for t in TYPES)]
    return [
        [choices[rng.integers(len(choices))] if rng.random() < rate else tag for tag in tags]
        for tags in gold
    ]


def test_entity_counts_give_seqeval_f1_and_the_bootstrap_tells_systems_apart():
    gold = _gold_sentences(300)
    good, bad = _corrupt(gold, 0.03, seed=1), _corrupt(gold, 0.3, seed=2)
    for predicted in (good, bad, gold, [["O"] * len(tags) for tags in gold]):
        items = entity_counts(gold, predicted)
        assert items["n"] == 300
        assert significance.ITEM_KINDS["f1"].statistic(items, "f1") == pytest.approx(
            entity_scores(gold, predicted)["f1"], abs=0.005
        )
    good_items, bad_items = entity_counts(gold, good), entity_counts(gold, bad)
    assert significance.paired_bootstrap(good_items, good_items, "f1") == 1.0
    assert significance.paired_bootstrap(good_items, bad_items, "f1") < 0.05
    with pytest.raises(ValueError, match="F1, not 'precision'"):
        significance.ITEM_KINDS["f1"].statistic(good_items, "precision")
    with pytest.raises(ValueError, match="sentence 0"):
        entity_counts([["O", "B-PER"]], [["O"]])


def _ner_row(tmp_path, mapping: str, seed: int, predicted, gold, attention: dict) -> dict:
    run_id = f"{mapping}{seed}"
    return {
        "run_id": run_id,
        "table": "ner",
        "experiment": "spanish",
        "evaluation": "spanish_test",
        "scale": "small",
        "data_source": "offline",
        "mapping": mapping,
        "sweep_params": {},
        "seed": seed,
        "metrics": entity_scores(gold, predicted),
        "signature": "seqeval default mode (conlleval), IOBES decoded -> IOB2",
        "items": significance.write_items(
            tmp_path, run_id, "spanish_test", entity_counts(gold, predicted)
        ),
        "attention": attention,
        "date": "2026-11-22T04:00:00+00:00",
        "git_commit": "a" * 40,
        "git_dirty": False,
        "data": {"description": "conll2002 spanish"},
        "train": {
            "config": {"criterion": {"dp_reg": mapping}},
            "started": {"git_commit": "a" * 40, "git_dirty": False},
            "epochs": 10,
            "wall_s": 1.0,
            "tokens_per_s": 1.0,
        },
    }


TAG_STATISTICS = {
    "entropy": {
        "mean_zero_fraction": 0.0,
        "transition_zero_fraction": 0.0,
        "mean_tag_sequences": None,  # beyond float64
        "median_tag_sequences": 2.5e31,
        "mean_log10_tag_sequences": 35.4,
        "single_sequence_fraction": 0.0,
    },
    "l2": {
        "mean_zero_fraction": 0.9,
        "transition_zero_fraction": 0.97,
        "mean_tag_sequences": 1.5,
        "median_tag_sequences": 1.0,
        "mean_log10_tag_sequences": 0.05,
        "single_sequence_fraction": 0.8,
    },
}


def test_ner_table_tests_against_entropy_and_shows_tag_marginals(tmp_path):
    spec = load_config("reproduce", "ner")
    gold = _gold_sentences(200)
    rows = [
        _ner_row(tmp_path, mapping, seed, _corrupt(gold, rate, seed), gold, stats)
        for mapping, rate in (("entropy", 0.03), ("l2", 0.3))
        for seed, stats in ((1, TAG_STATISTICS[mapping]), (2, TAG_STATISTICS[mapping]))
    ]
    markdown = render_table(spec, rows, tmp_path)
    lines = markdown.splitlines()
    # the headline opens the section: the cells that stand for each regulariser, with how many
    # of their runs count as converged (none: fixed 10-epoch runs), and no gate (no attention)
    headline = lines[lines.index("#### Headline") :]
    assert [line for line in headline if line.startswith("| entropy |")][0].startswith(
        "| entropy | 89.82 ± 1.69 (0 of 2 converged) | 86.68 | – |"
    )
    assert "no gate: this table compares no attention mappings" in markdown
    lines = lines[lines.index("#### Details") :]
    headers = [line for line in lines if line.startswith("| Ω (DP regulariser)")]
    metrics_header, statistics_header = headers[0], headers[1]
    assert "p vs entropy (f1)" in metrics_header
    for column in ("% zeros (tag marginals)", "tag sequences with mass (mean / median)"):
        assert column in statistics_header and column not in metrics_header
    assert "softmax" not in markdown and "oscarmax" not in markdown
    assert "runs/row" not in statistics_header and "support" not in statistics_header
    entropy, l2 = (
        [line for line in lines if line.startswith(f"| {mapping} |")]
        for mapping in ("entropy", "l2")
    )
    # the metrics table, the statistics table, the provenance table
    # p vs itself: –; then the runs that stopped on validation (none: fixed 10-epoch runs)
    assert entropy[0].endswith("| – | 0/2 (10, 10 epochs) |")
    assert "| spanish_test | 0.0 | 0.0 | > 1e308 / 2.5e+31 | 35.40 | 0.0 |" in entropy[1]
    p_value = float(l2[0].split(" | ")[3].rstrip(" |"))
    assert p_value < 0.05
    assert "| spanish_test | 90.0 | 97.0 | 1.5 / 1 | 0.05 | 80.0 |" in l2[1]
    assert "(../docs/reproduction.md#how-to-read-these-tables)" in markdown
    assert "tag sequences with mass: the number of tag sequences" in markdown
    # a row older than the tag statistics shows dashes, not a crash
    rows[2]["attention"] = rows[3]["attention"] = {"mean_zero_fraction": 0.5}
    details = render_table(spec, rows).split("#### Details")[1].splitlines()
    older = [line for line in details if line.startswith("| l2 |")]
    assert older[0].endswith("| n/a | 0/2 (10, 10 epochs) |")
    assert "| spanish_test | – | – | – | – | – |" in older[1]


def test_unknown_statistics_is_refused(tmp_path):
    spec = load_config("reproduce", "ner")
    spec.statistics = "heads"
    gold = _gold_sentences(5)
    row = _ner_row(tmp_path, "l2", 1, gold, gold, TAG_STATISTICS["l2"])
    with pytest.raises(ReproError, match="statistics 'heads'"):
        render_table(spec, [row])


TAGS = ["O", "B-PER", "E-PER", "S-PER", "S-LOC"]


def _tag_export(path, reg: str) -> str:
    """A tiny export of tag marginals (`tagging.decode_subset`'s format): sentence 0 has 10
    words and no entity, sentence 1 an entity but 2 words, sentence 2 both (9 words)."""
    sentences = [
        (["w"] * 10, ["O"] * 10),
        (["Jan", "woont"], ["S-PER", "O"]),
        (["w"] * 4 + ["Jan", "Peeters"] + ["w"] * 3, ["O"] * 4 + ["B-PER", "E-PER"] + ["O"] * 3),
    ]
    rng = np.random.default_rng(0)
    with open(path, "w", encoding="utf-8") as out:
        for index, (words, gold) in enumerate(sentences):
            rows = rng.random((len(words), len(TAGS)))
            if reg == "l2":
                rows[:, 2:] = 0.0
            record = {
                "id": index,
                "src_tokens": TAGS,
                "tgt_tokens": words,
                "gold_tags": gold,
                "attention": (rows / rows.sum(1, keepdims=True)).tolist(),
                "mapping": {"name": f"dp_{reg}", "params": {"gamma": 1.0}},
            }
            out.write(json.dumps(record) + "\n")
    return path


def test_marginals_figure_says_tag_marginals_and_picks_a_sentence_with_an_entity(tmp_path):
    from regattn_fairseq.experiments.decode.attention_format import read_export

    exports = [_tag_export(tmp_path / f"{reg}.jsonl", reg) for reg in ("entropy", "l2")]
    paths = plot_attention_figure(tmp_path / "figures", "ner_spanish_smoke_attention", exports)
    assert [p.name for p in paths] == [
        "ner_spanish_smoke_attention_2.png",
        "ner_spanish_smoke_attention_2.pdf",
    ]
    records = [read_export(path) for path in exports]
    fig = sentence_figure(records, "2")
    try:
        assert fig.get_suptitle() == (
            "sentence 2: expected tag marginals of each word (rows) over the IOBES tags (columns)"
        )
        assert fig.get_supxlabel() == "grey: marginal exactly 0"
        colourbar = fig.axes[-1]
        assert colourbar.get_ylabel() == "marginal probability"
        panels = fig.axes[:2]
        assert [ax.get_title() for ax in panels] == ["dp-entropy (γ=1)", "dp-l2 (γ=1)"]
        assert [t.get_text() for t in panels[1].get_xticklabels()] == TAGS
        # a border between every two tags, although the l2 panel's zeros are equal neighbours
        (borders,) = panels[1].collections
        assert len(borders.get_segments()) == (9 - 1) + 9 * (len(TAGS) - 1)
        assert len(cell_borders(np.zeros((9, len(TAGS))), 0.0)) == 9 - 1
    finally:
        plt.close(fig)
    attention = dict(records[0][2], mapping={"name": "softmax", "params": {}})
    fig = sentence_figure([[attention]], "2")
    try:
        assert "attention at each output step" in fig.get_suptitle()
        assert fig.axes[-1].get_ylabel() == "attention weight"
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="tag marginals and attention"):
        sentence_figure([records[0], [attention]], "2")
