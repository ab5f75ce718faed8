"""Every training config composes (Hydra compose API, against fairseq's schema as
fairseq-hydra-train does) at every scale with every attention mapping, and every orchestration
spec points at things that exist."""

import pytest
from omegaconf import OmegaConf

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.config import (
    MAPPINGS,
    SCALES,
    check_experiment_mappings,
    experiment_mappings,
    group_options,
)
from regattn_fairseq.experiments.core.paths import CONFIG_DIR
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.pipelines import pretrained
from regattn_fairseq.experiments.pipelines.trainers import trainer_of
from regattn_fairseq.experiments.report.tables import STATISTICS_VIEWS
from regattn_fairseq.experiments.train.train import compose_settings

TRAIN_CONFIGS = {
    "snli": "snli",
    "summarization": "lstm_seq2seq",
    "nmt_multi30k": "lstm_seq2seq",
    "nmt_iwslt14": "lstm_seq2seq",
    "nmt_wmt16": "lstm_seq2seq",
    "nmt_multi30k_transformer": "transformer",
    "inflection": "inflection",
    "inflection_entmax_output": "inflection",
    "ner": "ner",
}
ATTENTION_NAME = {"entmax15": "entmax", "entmax_learned": "entmax"}
# the tables' and sweeps' specs
ORCHESTRATION_SPECS = sorted((CONFIG_DIR / "reproduce").glob("*.yaml")) + sorted(
    (CONFIG_DIR / "sweep").glob("*.yaml")
)


def compose_all(
    config_name: str, override_lists: list[list[str]], return_hydra_config: bool = False
):
    """Compose config_name once per override list, as the suite's training entry point
    (`regattn_fairseq.hydra_train`) does: fairseq's schema under its own name, which each
    train config's defaults list merges first."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from regattn_fairseq.fairseq_adapter import register_fairseq_schema

    GlobalHydra.instance().clear()
    register_fairseq_schema()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.1"):
            return [
                compose(
                    config_name=config_name,
                    overrides=overrides,
                    return_hydra_config=return_hydra_config,
                )
                for overrides in override_lists
            ]
    finally:
        GlobalHydra.instance().clear()


def compose(config_name: str, overrides: list[str]):
    return compose_all(config_name, [overrides])[0]


def test_every_train_config_is_listed():
    primaries = {p.stem for p in CONFIG_DIR.glob("*.yaml")}
    assert primaries == set(TRAIN_CONFIGS)


@pytest.mark.parametrize("config_name", sorted(TRAIN_CONFIGS))
def test_compose_every_scale(config_name):
    group = TRAIN_CONFIGS[config_name]
    for cfg in compose_all(config_name, [[f"scale/{group}={scale}"] for scale in SCALES]):
        if config_name == "ner":  # no attention: the `dp` group's regulariser instead
            assert cfg.criterion.dp_reg == "entropy"
        else:
            assert cfg.model.attention == "softmax"
        assert cfg.model._name.startswith("regattn_")
        assert cfg.optimizer._name in ("adam", "sgd")
        assert cfg.optimization.max_epoch >= 1
        assert OmegaConf.is_missing(cfg.task, "data")  # the caller must give the data path


def test_compose_every_mapping():
    configs = compose_all(
        "nmt_multi30k_transformer",
        [
            ["scale/transformer=smoke", f"attention={mapping}", "model.attention_device=cpu"]
            for mapping in MAPPINGS
        ],
    )
    for mapping, cfg in zip(MAPPINGS, configs, strict=True):
        assert cfg.model.attention == ATTENTION_NAME.get(mapping, mapping)
        assert cfg.model.attention_device == "cpu"


def test_the_sparse_output_config_is_inflection_with_an_entmax_output_layer():
    base, sparse = (
        compose(name, ["scale/inflection=small", "attention=entmax15"])
        for name in ("inflection", "inflection_entmax_output")
    )
    assert (sparse.criterion._name, sparse.model.output_mapping) == ("regattn_fy", "entmax15")
    assert base.criterion._name == "cross_entropy" and "output_mapping" not in base.model
    # nothing else differs: the same model, optimiser, data settings and schedule
    base, sparse = (OmegaConf.to_container(cfg) for cfg in (base, sparse))
    for cfg in (base, sparse):
        del cfg["criterion"]
        cfg["model"].pop("output_mapping", None)
    assert base == sparse
    # a row records (and its key hashes) the criterion of a sparse output layer only: the other
    # configs' settings, and so the committed rows' keys, are as they were
    settings = [
        compose_settings(name, ["scale/inflection=small"])
        for name in ("inflection", "inflection_entmax_output")
    ]
    assert "criterion" not in settings[0]
    assert settings[1]["criterion"]["_name"] == "regattn_fy"


def test_an_experiment_trains_its_own_mappings_of_the_table():
    table = OmegaConf.create(
        {
            "table": "t",
            "mappings": ["softmax", "sparsemax", "entmax15", "uniform"],
            "experiments": [{"name": "a"}, {"name": "b", "mappings": ["uniform", "softmax"]}],
        }
    )
    whole, own = table.experiments
    assert experiment_mappings(whole, table.mappings) == list(table.mappings)
    # in the table's (or the run's --mappings) order; a subset run trains what is in both
    assert experiment_mappings(own, table.mappings) == ["softmax", "uniform"]
    assert experiment_mappings(own, ["sparsemax", "uniform"]) == ["uniform"]
    check_experiment_mappings(table)
    own.mappings.append("fusedmax")
    with pytest.raises(ReproError, match=r"experiment b's mappings \['fusedmax'\] are not"):
        check_experiment_mappings(table)


def test_sweep_values_reach_the_model():
    cfg = compose(
        "summarization",
        ["scale/lstm_seq2seq=smoke", "attention=fusedmax", "model.attention_lambda=0.5"],
    )
    assert (cfg.model.attention, cfg.model.attention_lambda) == ("fusedmax", 0.5)
    cfg = compose(
        "nmt_multi30k_transformer",
        ["scale/transformer=smoke", "attention=entmax15", "model.attention_alpha=learned"],
    )
    assert cfg.model.attention_alpha == "learned"
    cfg = compose(
        "nmt_multi30k",
        ["scale/lstm_seq2seq=smoke", "attention=sparsemax", "model.attention_gamma=4.0"],
    )
    assert (cfg.model.attention, cfg.model.attention_gamma) == ("sparsemax", 4.0)


def test_paper_scale_uses_the_paper_optimizer():
    cfg = compose("summarization", ["scale/lstm_seq2seq=paper"])
    assert (
        cfg.optimizer._name == "sgd"
        and cfg.optimization.lr == [1.0]
        and cfg.optimization.max_epoch == 13
    )


@pytest.mark.parametrize("spec_file", ORCHESTRATION_SPECS, ids=lambda p: p.stem)
def test_orchestration_specs_point_at_existing_configs(spec_file):
    spec = OmegaConf.load(spec_file)
    experiments = spec.experiments if "experiments" in spec else [spec.experiment]
    for experiment in experiments:
        assert (CONFIG_DIR / "prepare" / f"{experiment.dataset}.yaml").is_file()
        if trainer_of(experiment) is pretrained.TRAINER:
            # a fine-tuned pretrained model: its settings compose for every mapping and scale
            for scale in experiment.scales:
                for mapping in spec.mappings:
                    settings = pretrained.settings_for(experiment, scale, mapping, 1)
                    assert settings.record()["model"]["pretrained"]["weights_sha256"]
                    pretrained.check_mapping(experiment, scale, mapping, None)
                    if mapping in pretrained.GAMMA_MAPPINGS:
                        pretrained.settings_for(experiment, scale, mapping, 1, 4.0, select=True)
            continue
        assert experiment.train_config in TRAIN_CONFIGS
        assert TRAIN_CONFIGS[experiment.train_config] == experiment.scale_group
    mappings = (
        spec.mappings
        if "mappings" in spec
        else [m for p in spec.params.values() for m in p.attention]
    )
    for experiment in experiments:
        group = experiment.get("mapping_group", "attention")
        assert set(mappings) <= set(MAPPINGS if group == "attention" else group_options(group))
    if "mappings" in spec:  # a paper table: its p-values need rows of its baseline
        check_experiment_mappings(spec)  # an experiment's own mappings are the table's
        assert spec.get("baseline", "softmax") in spec.mappings
    assert spec.get("statistics", "attention") in STATISTICS_VIEWS
    for evaluation, by_mapping in (spec.get("paper") or {}).items():
        assert set(by_mapping) <= set(spec.mappings)
        for values in by_mapping.values():
            assert set(values) <= set(spec.metrics[evaluation])


@pytest.mark.parametrize("spec_file", ORCHESTRATION_SPECS, ids=lambda p: p.stem)
def test_every_experiment_names_test_sets_of_its_dataset(spec_file):
    # a test set of another dataset or setting would score the experiment with its metric
    spec = OmegaConf.load(spec_file)
    for experiment in spec.experiments if "experiments" in spec else [spec.experiment]:
        setting = (experiment.get("dataset_options") or {}).get("setting")
        for test_set in experiment_test_sets(experiment).values():
            assert (test_set.dataset, test_set.setting) == (experiment.dataset, setting)


@pytest.mark.parametrize("config_name", sorted(TRAIN_CONFIGS))
def test_multirun_jobs_start_without_an_earlier_jobs_best_loss(config_name):
    # Hydra runs a multirun's jobs in one process; fairseq keeps the best validation loss on
    # checkpoint_utils.save_checkpoint.best, so a later job that never beat an earlier one's
    # wrote no checkpoint_best.pt (found by the γ sweep). Every train config installs the reset.
    from fairseq import checkpoint_utils
    from hydra.utils import instantiate

    [cfg] = compose_all(config_name, [[]], return_hydra_config=True)
    callback = instantiate(cfg.hydra.callbacks.fresh_checkpoint_best)
    checkpoint_utils.save_checkpoint.best = 0.5
    callback.on_job_start(config=cfg)
    assert not hasattr(checkpoint_utils.save_checkpoint, "best")


@pytest.mark.parametrize("config_name", sorted(TRAIN_CONFIGS))
def test_every_training_run_logs_to_wandb(config_name, monkeypatch):
    # the callback starts the run with regattn's config; fairseq's hook (common.wandb_project)
    # logs the training curves into it (regattn_fairseq/experiments/train/tracking.py)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    [cfg] = compose_all(config_name, [[]], return_hydra_config=True)
    assert cfg.hydra.callbacks.wandb_run._target_ == "regattn_fairseq.hydra_callbacks.WandbRun"
    assert cfg.common.wandb_project == "regattn"
