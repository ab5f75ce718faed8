"""The train configs compose without Hydra's deprecation warnings, into the same config as
before (issue #46): fairseq's schema is registered under a name of its own and listed in the
configs' defaults (`fairseq_adapter.register_fairseq_schema`) instead of being matched by the
config's name, and Hydra is given its version_base. The composed config, hence every config
hash and job key, is the one fairseq-hydra-train's own registration composes."""

import re
import warnings

import pytest
from fairseq.dataclass.initialize import hydra_init
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from regattn_fairseq.experiments.core.paths import CONFIG_DIR
from regattn_fairseq.experiments.train.train import compose_config, config_settings
from regattn_fairseq.fairseq_adapter import FAIRSEQ_SCHEMA_GROUP, register_fairseq_schema

TRAIN_CONFIGS = sorted(path.stem for path in CONFIG_DIR.glob("*.yaml"))
# Hydra's warnings of a deprecated or defaulted behaviour
HYDRA_WARNING = re.compile(r"ConfigStore schema|version_base|deprecated|working directory")
OVERRIDES = ["task.data=/data", "common.user_dir=/plugin", "checkpoint.save_dir=/ckpt"]
# configs made after #46 that inherit another train config: they compose through the suite's
# entry point only (fairseq-hydra-train's own registration matches its schema by the config's
# name and merges it over the inherited values); no row was ever composed the stock way
SUITE_ONLY = {"inflection_entmax_output"}


def _stock_composition(name: str):
    """The config as fairseq-hydra-train composes it: the schema stored under the config's
    own name (`hydra_init(cfg_name)`, matched by Hydra), no schema option."""
    repo = ConfigStore.instance().repo
    ours = repo.pop(FAIRSEQ_SCHEMA_GROUP, None)
    GlobalHydra.instance().clear()
    hydra_init(name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the deprecation this replaces
            with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.1"):
                return compose(config_name=name, overrides=OVERRIDES)
    finally:
        GlobalHydra.instance().clear()
        repo.pop(f"{name}.yaml")
        if ours is not None:
            repo[FAIRSEQ_SCHEMA_GROUP] = ours


def test_there_are_train_configs():
    assert {"snli", "nmt_multi30k", "summarization", "inflection", "ner"} <= set(TRAIN_CONFIGS)


@pytest.mark.parametrize("name", TRAIN_CONFIGS)
def test_a_train_config_composes_quietly_into_the_same_config(name):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = compose_config(name, OVERRIDES)
    hydra = [str(w.message) for w in caught if HYDRA_WARNING.search(str(w.message))]
    assert not hydra, hydra
    if name in SUITE_ONLY:
        return
    stock = _stock_composition(name)
    assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(stock)
    assert OmegaConf.get_type(ours) is OmegaConf.get_type(stock)
    assert config_settings(ours) == config_settings(stock)


def test_the_schema_is_stored_again_only_when_a_node_of_it_is_missing(monkeypatch):
    """`register_fairseq_schema` runs before every composition: once its nodes are in the
    ConfigStore it stores nothing, and a node taken out is stored again."""
    register_fairseq_schema()
    names = []
    store = ConfigStore.store

    def counted(self, *args, **kwargs):
        names.append(kwargs.get("name"))
        return store(self, *args, **kwargs)

    monkeypatch.setattr(ConfigStore, "store", counted)
    register_fairseq_schema()
    assert names == []
    repo = ConfigStore.instance().repo
    common = repo.pop("common.yaml")
    try:
        register_fairseq_schema()
    finally:
        repo.setdefault("common.yaml", common)
    assert "common" in names and "fairseq" in names and "common.yaml" in repo
