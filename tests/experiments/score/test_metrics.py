"""The metric registry: every metric a test set names is declared there, with a bootstrap
statistic for its per-item values, and scores perfect outputs as 100; every experiment of the
tables and sweeps scores test sets, each resolving to a registered metric."""

import pytest
from omegaconf import OmegaConf

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.paths import CONFIG_DIR
from regattn_fairseq.experiments.data.gold import Gold
from regattn_fairseq.experiments.data.test_sets import TEST_SETS, experiment_test_sets
from regattn_fairseq.experiments.score import significance
from regattn_fairseq.experiments.score.metrics import METRICS, metric


def experiments() -> list:
    """Every experiment of the tables' and sweeps' configs, as (config file, experiment)."""
    found = []
    for path in sorted((CONFIG_DIR / "reproduce").glob("*.yaml")):
        found += [(f"reproduce/{path.stem}", e) for e in OmegaConf.load(path).experiments]
    for path in sorted((CONFIG_DIR / "sweep").glob("*.yaml")):
        found.append((f"sweep/{path.stem}", OmegaConf.load(path).experiment))
    return found


@pytest.mark.parametrize(
    "config, experiment", experiments(), ids=lambda x: x if isinstance(x, str) else x.name
)
def test_every_test_set_of_a_table_resolves_to_a_registered_metric(config, experiment):
    # the test set names the metric, the experiment only the test sets: no second declaration
    assert "evaluations" not in experiment, f"configs/{config}.yaml names metrics of its own"
    test_sets = experiment_test_sets(experiment)
    assert test_sets and len(test_sets) == len(experiment.test_sets)
    for test_set in test_sets.values():
        assert metric(test_set.metric).name == test_set.metric


def test_every_registered_metric_has_a_statistic():
    assert {t.metric for t in TEST_SETS.values()} <= set(METRICS)
    for declared in METRICS.values():
        assert declared.item_kind in significance.ITEM_KINDS
        assert declared.decode in ("generate", "classify", "tag")
        # every metric scores plain outputs, the tagger's too (its baseline's: rows.baselines)
        assert declared.score is not None


def test_an_unknown_metric_is_an_error_naming_the_known_ones():
    with pytest.raises(ReproError, match="unknown metric 'meteor'; known: bleu"):
        metric("meteor")


GOLDS = {
    "bleu": Gold([["a small dog runs ."], ["the cat sleeps ."]], [], detokenize="en"),
    "rouge_f1": Gold([["police kill the gunman"], ["rain falls in paris"]], []),
    "rouge_recall": Gold([["police kill the gunman", "police kill the gunman"]], []),
    "exact_match": Gold([["went"], ["geht"]], [], languages=["english", "german"]),
    "accuracy": Gold([["entailment"], ["neutral"]], []),
}


@pytest.mark.parametrize("name", sorted(GOLDS))
def test_perfect_outputs_score_100_and_give_resamplable_items(name):
    declared, gold = METRICS[name], GOLDS[name]
    outputs = [refs[0] for refs in gold.references]
    scored = declared.score(outputs, gold)
    first = next(iter(scored.metrics))
    assert scored.metrics[first] == 100.0 and scored.signature
    assert scored.items["kind"] == declared.item_kind and scored.items["n"] == len(outputs)
    assert significance.paired_bootstrap(scored.items, scored.items, first) == 1.0
