"""The `continuous` config group (configs/continuous/) composes with the NMT and SNLI training
configs; its `softmax` option sets nothing, so that the discrete runs' composed model config
(hence their rows' key) is what it was before the group existed."""

import pytest
from omegaconf import OmegaConf
from test_configs import compose_all

from regattn_fairseq.experiments.core.config import group_options

CONFIGS = {"nmt_multi30k": "scale/lstm_seq2seq=smoke", "snli": "scale/snli=smoke"}


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_every_option_composes(config_name):
    options = group_options("continuous")
    assert set(options) == {
        "softmax",
        "continuous_softmax",
        "continuous_sparsemax",
        "continuous_softmax_sum",
        "continuous_sparsemax_sum",
        "uniform",
    }
    configs = compose_all(
        config_name, [[CONFIGS[config_name], f"continuous={option}"] for option in options]
    )
    for option, cfg in zip(options, configs, strict=True):
        model = cfg.model
        if option == "uniform":  # the attention-free control: discrete, 1/n over the source
            assert model.attention == "uniform" and "attention_domain" not in model
            continue
        assert model.attention == "softmax"
        if option == "softmax":
            assert "attention_domain" not in model and "continuous_density" not in model
            continue
        assert model.attention_domain == "continuous" and model.continuous_basis == 64
        assert model.continuous_density == (
            "gaussian" if "softmax" in option else "truncated_parabola"
        )
        assert model.continuous_combine == ("sum" if option.endswith("_sum") else "none")


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_discrete_default_leaves_the_model_config_unchanged(config_name):
    # the composed model config of the default (continuous=softmax) equals a composition that
    # drops the group from the defaults list
    (default,) = compose_all(config_name, [[CONFIGS[config_name]]])
    (without,) = compose_all(config_name, [[CONFIGS[config_name], "~continuous"]])
    assert OmegaConf.to_container(default.model) == OmegaConf.to_container(without.model)
