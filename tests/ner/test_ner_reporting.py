"""The NER table's reporting: per-sentence entity counts whose corpus F1 is seqeval's, the
paired bootstrap of kind "f1" against the entropy baseline, the table's tag-marginal columns
and "p vs entropy" (configs/reproduce/ner.yaml) (no training here)."""

import numpy as np
import pytest

from regattn_fairseq.experiments import significance
from regattn_fairseq.experiments.common import ReproError, load_config
from regattn_fairseq.experiments.results import render_table
from regattn_fairseq.experiments.tagging import entity_counts, entity_scores

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
        assert significance._statistic(items, "f1") == pytest.approx(
            entity_scores(gold, predicted)["f1"], abs=0.005
        )
    good_items, bad_items = entity_counts(gold, good), entity_counts(gold, bad)
    assert significance.paired_bootstrap(good_items, good_items, "f1") == 1.0
    assert significance.paired_bootstrap(good_items, bad_items, "f1") < 0.05
    with pytest.raises(ValueError, match="F1, not 'precision'"):
        significance._statistic(good_items, "precision")
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
    header = next(line for line in lines if line.startswith("| Ω (DP regulariser)"))
    for column in (
        "p vs entropy (f1)",
        "spanish_test % zeros (tag marginals)",
        "spanish_test tag sequences with mass (mean / median)",
    ):
        assert column in header
    assert "softmax" not in markdown and "oscarmax" not in markdown
    assert "runs/row" not in header and "support" not in header
    entropy = next(line for line in lines if line.startswith("| entropy |"))
    l2 = next(line for line in lines if line.startswith("| l2 |"))
    assert "| – | 0.0 | 0.0 | > 1e308 / 2.5e+31 | 35.40 | 0.0 |" in entropy
    p_value = float(l2.split(" | ")[3])
    assert p_value < 0.05
    assert "| 90.0 | 97.0 | 1.5 / 1 | 0.05 | 80.0 |" in l2
    assert "p vs entropy: paired bootstrap" in markdown
    assert "tag sequences with mass: the number of tag sequences" in markdown
    # a row older than the tag statistics shows dashes, not a crash
    rows[2]["attention"] = rows[3]["attention"] = {"mean_zero_fraction": 0.5}
    l2 = next(line for line in render_table(spec, rows).splitlines() if line.startswith("| l2 |"))
    assert "| n/a | – | – | – | – | – |" in l2


def test_unknown_statistics_is_refused(tmp_path):
    spec = load_config("reproduce", "ner")
    spec.statistics = "heads"
    gold = _gold_sentences(5)
    row = _ner_row(tmp_path, "l2", 1, gold, gold, TAG_STATISTICS["l2"])
    with pytest.raises(ReproError, match="statistics 'heads'"):
        render_table(spec, [row])
