"""docs/extending.md, recipe by recipe: each test does what its recipe says with a toy."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from regattn import mappings
from regattn_fairseq.experiments.core import config
from regattn_fairseq.experiments.core.paths import CONFIG_DIR, PREPARE_CONFIG_DIR
from regattn_fairseq.experiments.data import builders, test_sets
from regattn_fairseq.experiments.data.builders import builder_for
from regattn_fairseq.experiments.data.gold import Gold
from regattn_fairseq.experiments.data.test_sets import TEST_SETS, TestSet
from regattn_fairseq.experiments.score import significance
from regattn_fairseq.experiments.score.metrics import METRICS, Metric, Scored, metric

# The toy of "Add a mapping": sparsemax under a new name, with a config that fixes γ. The
# declaration is made before the modules that derive from the declarations are imported (as a
# declaration in regattn/mappings/__init__.py is), so this runs in a fresh interpreter.
TOY_MAPPING = """
import json
from regattn import mappings

class Mymax(mappings.Sparsemax):
    pass

mappings.declare(
    mappings.Declaration(
        "mymax",
        Mymax,
        omega="squared_l2",
        configs={"mymax": {}, "mymax_hot": {"gamma": 2.0}},
        entmax_alpha=2.0,
        outputs=("mymax_hot",),
    )
)

import argparse

import torch
from fairseq.dataclass.utils import gen_parser_from_dataclass

from regattn import attention
from regattn.integrations import transformers as rt
from regattn.mappings.smoothed_max import max_omega
from regattn_fairseq.experiments.core.labels import mapping_label
from regattn_fairseq.experiments.pipelines import gamma_select, pretrained
from regattn_fairseq.experiments.train.hf_finetune import backend_and_params
from regattn_fairseq.modules.attention_options import AttentionConfig, attention_spec_from_cfg
from regattn_fairseq.modules.output_options import OutputConfig, output_mapping_of

parser = argparse.ArgumentParser()
gen_parser_from_dataclass(parser, AttentionConfig())
cfg = parser.parse_args(["--attention", "mymax", "--attention-gamma", "2"])
output_parser = argparse.ArgumentParser()
gen_parser_from_dataclass(output_parser, OutputConfig())
output_cfg = output_parser.parse_args(["--output-mapping", "mymax_hot"])
x = torch.tensor([[0.5, -1.0, 2.0, 1.9]], dtype=torch.float64, requires_grad=True)
(grad,) = torch.autograd.grad(max_omega("mymax", x, gamma=2.0).sum(), x)
print(json.dumps({
    "names": list(mappings.NAMES),
    "fairseq_spec": attention_spec_from_cfg(cfg, "toy").describe(),
    "reproduce_gamma": list(gamma_select.GAMMA_MAPPINGS),
    "pretrained_gamma": list(pretrained.GAMMA_MAPPINGS),
    "hf_backends": {k: list(v) for k, v in rt.BACKENDS.items()},
    "hf_implementations": list(rt.IMPLEMENTATIONS),
    "hf_params": list(backend_and_params({"attention": "mymax", "attention_gamma": 3.0})),
    "hf_params_of_a_config": list(
        backend_and_params({"attention": "mymax", "attention_gamma": 2.0})
    ),
    "label": mapping_label("mymax", {"attention_gamma": 2.0}),
    "output_mapping": output_mapping_of(output_cfg),
    "fused_alpha": attention.fused_alpha("mymax", {"gamma": 2.0}),
    "smoothed_max_grad_is_sparsemax": torch.allclose(
        grad, mappings.sparsemax(x.detach(), gamma=2.0), atol=1e-8
    ),
}))
"""


def _config_disagreements(config_dir: Path) -> list[str]:
    """How configs/attention/*.yaml disagree with the declarations: a declared config with no
    file, a file no declaration names, or a file whose mapping or fixed parameters differ
    (base.yaml must list exactly the declared options)."""
    problems = []
    base = OmegaConf.load(config_dir / "base.yaml")
    expected_base = {"attention", "attention_device", *mappings.OPTION_TO_PARAM}
    if set(base) != expected_base:
        problems.append(f"base.yaml has {sorted(base)}, the declarations {sorted(expected_base)}")
    files = {p.stem: p for p in config_dir.glob("*.yaml") if p.stem != "base"}
    declared = mappings.attention_configs()
    for name in sorted(set(declared) - set(files)):
        problems.append(f"{name}: declared, but there is no {name}.yaml")
    for name in sorted(set(files) - set(declared)):
        problems.append(f"{name}.yaml: no declaration names this config")
    for name in sorted(set(files) & set(declared)):
        text = OmegaConf.load(files[name])
        fixed = {
            mappings.OPTION_TO_PARAM[option]: value
            for option, value in text.items()
            if option in mappings.OPTION_TO_PARAM and value is not None
        }
        fixed = {k: v if v == mappings.LEARNED else float(v) for k, v in fixed.items()}
        mapping, declared_fixed = declared[name]
        if text.get("attention") != mapping or fixed != declared_fixed:
            problems.append(
                f"{name}.yaml sets {text.get('attention')} {fixed}, declared {mapping} "
                f"{declared_fixed}"
            )
        if list(text.get("defaults", [])) != ["base", "_self_"]:
            problems.append(f"{name}.yaml: defaults are not [base, _self_]")
    return problems


def test_the_attention_configs_agree_with_the_declarations():
    assert _config_disagreements(CONFIG_DIR / "attention") == []


def test_a_declared_mapping_appears_in_every_derived_place(monkeypatch, tmp_path):
    # steps 1-2: the module and its declaration; everything derived knows it
    done = subprocess.run(
        [sys.executable, "-c", TOY_MAPPING], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["names"][-1] == "mymax" and "uniform" not in seen["names"]
    assert seen["fairseq_spec"] == {"name": "mymax", "params": {"gamma": 2.0}, "device": "same"}
    assert {"mymax", "mymax_hot"} <= set(seen["reproduce_gamma"])
    assert {"mymax", "mymax_hot"} <= set(seen["pretrained_gamma"])
    assert seen["hf_backends"]["mymax"] == ["mymax", {}]
    assert seen["hf_backends"]["mymax_hot"] == ["mymax", {"gamma": 2.0}]
    assert "regattn_mymax" in seen["hf_implementations"]
    assert seen["hf_params"] == ["mymax", {"gamma": 3.0}]
    # the parameters its config fixes are that config's backend (as 1.5-entmax is entmax15's)
    assert seen["hf_params_of_a_config"] == ["mymax_hot", {}]
    assert seen["label"] == "mymax (γ=2)"
    assert seen["output_mapping"] == "mymax_hot"
    assert seen["fused_alpha"] == 2.0
    assert seen["smoothed_max_grad_is_sparsemax"] is True
    # step 3: the configs/attention files; the suite offers them, and the check above sees
    # one that is missing
    toy = mappings.Declaration(
        "mymax",
        mappings.Sparsemax,
        omega="squared_l2",
        configs={"mymax": {}, "mymax_hot": {"gamma": 2.0}},
    )
    monkeypatch.setitem(mappings.DECLARATIONS, "mymax", toy)
    attention = tmp_path / "attention"
    shutil.copytree(CONFIG_DIR / "attention", attention)
    (attention / "mymax.yaml").write_text(
        "# @package model\ndefaults:\n  - base\n  - _self_\nattention: mymax\n"
    )
    assert _config_disagreements(attention) == [
        "mymax_hot: declared, but there is no mymax_hot.yaml"
    ]
    (attention / "mymax_hot.yaml").write_text(
        "# @package model\ndefaults:\n  - base\n  - _self_\nattention: mymax\n"
        "attention_gamma: 2.0\n"
    )
    assert _config_disagreements(attention) == []
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path)
    assert {"mymax", "mymax_hot"} <= set(config.group_options("attention"))
    # the plugin builds it by name
    assert isinstance(mappings.build("mymax", gamma=2.0), mappings.Sparsemax)


def test_a_declaration_with_an_undeclared_parameter_is_refused():
    class Toymax(mappings.Sparsemax):
        def __init__(self, gamma: float = 1.0, beta: float = 0.5, empty: str = "error"):
            super().__init__(gamma=gamma, empty=empty)

    with pytest.raises(ValueError, match="beta.*PARAMETERS"):
        mappings.declare(mappings.Declaration("toymax", Toymax, omega="squared_l2"))
    assert "toymax" not in mappings.DECLARATIONS


def test_a_declaration_with_unknown_ties_is_refused():
    toy = mappings.Declaration("toymax", mappings.Sparsemax, omega="squared_l2", ties="blocks")
    with pytest.raises(ValueError, match="ties='blocks'"):
        mappings.declare(toy)
    assert "toymax" not in mappings.DECLARATIONS


def test_a_declaration_whose_alpha_or_outputs_contradict_it_is_refused():
    with pytest.raises(ValueError, match="takes alpha"):
        mappings.declare(
            mappings.Declaration("toymax", mappings.Entmax, omega="tsallis", entmax_alpha=1.5)
        )
    with pytest.raises(ValueError, match="outputs.*configs"):
        mappings.declare(
            mappings.Declaration(
                "toymax", mappings.Sparsemax, omega="squared_l2", outputs=("toymax_hot",)
            )
        )
    assert "toymax" not in mappings.DECLARATIONS


def test_a_new_dataset_kind_is_found_by_its_builder(monkeypatch, tmp_path):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "test.answers").write_text("yes\nno\n")

    class ToyBuilder:
        TOOLS = ()

        @staticmethod
        def build(inputs, opts, root):
            return {"test": {"subset": "test", "refs": []}}

        @staticmethod
        def load_gold(inputs, spec, definition):
            return Gold([[line] for line in inputs.lines(spec.offline[definition.evaluation])], [])

    monkeypatch.setitem(builders.BUILDERS, "toy", ToyBuilder)
    assert builder_for("toy").build(None, None, None)["test"]["subset"] == "test"
    # a test set of the kind is read by the kind's own load_gold, with the files it read
    spec = OmegaConf.create({"name": "toy", "kind": "toy", "offline": {"test": "toy/test.answers"}})
    monkeypatch.setattr(test_sets, "load_config", lambda group, name: spec)
    toy_set = TestSet("toy", "toy", "test", "exact_match", "a toy test set")
    gold = test_sets.load_gold(toy_set, tmp_path)
    assert gold.references == [["yes"], ["no"]] and gold.files == ["toy/test.answers"]


def test_every_dataset_and_test_set_has_its_builder():
    specs = {
        p.stem: config.load_config("prepare", p.stem) for p in PREPARE_CONFIG_DIR.glob("*.yaml")
    }
    for spec in specs.values():
        builder = builder_for(spec.kind)
        assert callable(builder.build) and callable(builder.load_gold), spec.kind
        assert isinstance(builder.TOOLS, tuple), spec.kind
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


def test_a_registered_trainer_checks_plans_and_runs_its_experiments(monkeypatch, tmp_path):
    """ "Add a kind of experiment": one `ExperimentTrainer` and its entry in `trainers.TRAINERS`;
    a table whose experiments name it (``trainer: toy``) is checked, planned and run by it, and
    `reproduce` has nothing else to learn."""
    from regattn_fairseq.experiments.pipelines import plan, reproduce, trainers

    calls = []

    def plan_jobs(table, experiment, data):
        calls.append(("plan", experiment.name))
        return [plan.PlannedJob(experiment.name, m, 1, False, 60.0) for m in table.mappings], 0.0

    toy = plan.ExperimentTrainer(
        name="toy",
        gamma_mappings=("sparsemax",),
        check_mapping=lambda e, args, m, gamma: calls.append(("check", m, gamma)),
        plan_jobs=plan_jobs,
        choose_gammas=lambda table, e, data: calls.append(("gamma", e.name)),
        run=lambda table, e, data, progress: calls.append(("run", e.name)) or [],
    )
    monkeypatch.setitem(trainers.TRAINERS, "toy", toy)
    spec = config.load_config("reproduce", "inflection")
    spec.experiments = [spec.experiments[0]]
    spec.experiments[0].trainer = "toy"
    name = spec.experiments[0].name
    monkeypatch.setattr(reproduce, "load_config", lambda group, table: spec)
    data = type("Prepared", (), {"manifest": {"source": "offline"}, "bin_dir": tmp_path})()
    monkeypatch.setattr(reproduce, "_prepare", lambda table, experiment: data)
    monkeypatch.setattr(reproduce, "_leave_out_missing_evaluations", lambda *a: None)
    monkeypatch.setattr(reproduce, "run_baselines", lambda *a: None)
    argv = ["inflection", "--scale", "smoke", "--mappings", "softmax", "sparsemax"]
    argv += ["--gamma", "4", "--work-dir", str(tmp_path), "--results-dir", str(tmp_path / "r")]
    reproduce.run(argv)
    # γ only for the trainer's own γ mappings
    assert calls == [("check", "softmax", None), ("check", "sparsemax", "4")] + [
        ("plan", name),
        ("run", name),
    ]
    calls.clear()
    argv[argv.index("4")] = "auto"
    reproduce.run([*argv, "--gamma-grid", "1,4", "--gamma-select-only"])
    # the grid's first γ stands for the grid in the check; the trainer chooses γ, runs nothing
    assert calls == [("check", "softmax", None), ("check", "sparsemax", 1.0)] + [
        ("plan", name),
        ("gamma", name),
    ]
