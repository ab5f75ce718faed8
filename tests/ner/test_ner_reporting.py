"""The NER table's reporting: per-sentence entity counts whose corpus F1 is seqeval's, the
paired bootstrap of kind "f1" against the entropy baseline (no training here)."""

import numpy as np
import pytest

from regattn_fairseq.experiments import significance
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
