"""docs/extending.md, recipe by recipe: each test does what its recipe says with a toy."""

import pytest

from regattn import mappings
from regattn_fairseq.experiments.core import config
from regattn_fairseq.experiments.core.paths import PREPARE_CONFIG_DIR
from regattn_fairseq.experiments.data import builders
from regattn_fairseq.experiments.data.builders import builder_for
from regattn_fairseq.experiments.data.test_sets import TEST_SETS, Gold
from regattn_fairseq.experiments.score import significance
from regattn_fairseq.experiments.score.metrics import METRICS, Metric, Scored, metric


def test_a_registered_mapping_is_built_and_offered_to_the_suite(monkeypatch, tmp_path):
    # step 2: register the module; the plugin builds it by name
    monkeypatch.setitem(mappings.MODULES, "mymax", mappings.Sparsemax)
    assert isinstance(mappings.build("mymax"), mappings.Sparsemax)
    # step 3: a configs/attention/<name>.yaml makes it a mapping of the suite
    (tmp_path / "attention").mkdir()
    (tmp_path / "attention" / "mymax.yaml").write_text(
        "# @package model\ndefaults:\n  - base\n  - _self_\nattention: mymax\n"
    )
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path)
    assert config.group_options("attention") == ("mymax",)
    # every registered mapping has its config (entmax's are entmax15 and entmax_learned)
    for name in set(mappings.NAMES) - {"entmax"}:
        assert name in config.MAPPINGS


def test_a_new_dataset_kind_is_found_by_its_builder(monkeypatch):
    class ToyBuilder:
        @staticmethod
        def build(inputs, opts, root):
            return {"test": {"subset": "test", "refs": []}}

    monkeypatch.setitem(builders.BUILDERS, "toy", ToyBuilder)
    assert builder_for("toy").build(None, None, None)["test"]["subset"] == "test"


def test_every_dataset_and_test_set_has_its_builder():
    specs = {
        p.stem: config.load_config("prepare", p.stem) for p in PREPARE_CONFIG_DIR.glob("*.yaml")
    }
    for spec in specs.values():
        assert builder_for(spec.kind)
    for test_set in TEST_SETS.values():
        assert test_set.dataset in specs and test_set.metric in METRICS


def test_a_registered_metric_scores_and_resamples(monkeypatch):
    def exact_length(outputs: list[str], gold: Gold) -> Scored:
        pairs = zip(outputs, gold.references, strict=True)
        hits = [100 * int(len(o) == len(refs[0])) for o, refs in pairs]
        items = {"kind": "mean", "n": len(hits), "scores": {"length": hits}}
        return Scored({"length": round(sum(hits) / len(hits), 2)}, "same length", items)

    monkeypatch.setitem(METRICS, "length", Metric("length", "generate", "mean", exact_length))
    gold = Gold([["abc"], ["de"], ["f"]], [])
    better = metric("length").score(["xyz", "uv", "w"], gold)
    worse = metric("length").score(["x", "uv", "wz"], gold)
    assert better.metrics == {"length": 100.0} and worse.metrics["length"] == pytest.approx(33.33)
    assert metric("length").item_kind in significance.ITEM_KINDS
    assert 0 < significance.paired_bootstrap(better.items, worse.items, "length") <= 1
