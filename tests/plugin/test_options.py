"""The attention options: paper defaults, and a bad or inapplicable value fails at model
construction with a message that names the option."""

import pytest
from fairseq_helpers import MODEL_ARGS, build_model
from omegaconf import OmegaConf

from regattn_fairseq.models.regattn_lstm import RegattnLSTMConfig
from regattn_fairseq.modules import attention_spec_from_cfg


@pytest.mark.parametrize(
    "mapping,params",
    [
        ("softmax", {"gamma": 1.0}),
        ("sparsemax", {"gamma": 1.0}),
        ("sq_pnorm_max", {"gamma": 1.0, "p": 1.5}),
        ("fusedmax", {"gamma": 1.0, "lam": 0.1}),
        ("oscarmax", {"gamma": 1.0, "lam": 0.01}),
        ("entmax", {"alpha": 1.5, "gamma": 1.0}),
    ],
)
def test_unset_options_take_the_paper_defaults(mapping, params):
    spec = attention_spec_from_cfg(RegattnLSTMConfig(attention=mapping), "regattn_lstm")
    assert spec.name == mapping and spec.params == params and not spec.learned_alpha


def test_given_options_reach_the_model(translation_data):
    _, model = build_model(
        translation_data,
        MODEL_ARGS["regattn_transformer"],
        ["--attention", "oscarmax", "--attention-lambda", "0.05", "--attention-gamma", "0.5"],
    )
    assert model.attention_spec.describe() == {
        "name": "oscarmax",
        "params": {"gamma": 0.5, "lam": 0.05},
        "device": "same",
    }
    mappings_used = {
        m.normalizer.mapping.extra_repr() for m in model.modules() if hasattr(m, "normalizer")
    }
    assert mappings_used == {"gamma=0.5, lam=0.05"}


@pytest.mark.parametrize(
    "model_name,extra,named",
    [
        (
            "regattn_lstm",
            ["--attention", "sparsemax", "--attention-lambda", "0.5"],
            "--attention-lambda",
        ),
        (
            "regattn_transformer",
            ["--attention", "entmax", "--attention-lambda", "2"],
            "--attention-lambda",
        ),
        ("regattn_snli", ["--attention", "fusedmax", "--attention-p", "1.5"], "--attention-p"),
        (
            "regattn_lstm",
            ["--attention", "entmax", "--attention-alpha", "learned"],
            "--attention-alpha",
        ),
        (
            "regattn_snli",
            ["--attention", "entmax", "--attention-alpha", "learned"],
            "--attention-alpha",
        ),
        (
            "regattn_transformer",
            ["--attention", "fusedmax", "--attention-alpha", "learned"],
            "--attention-alpha",
        ),
        (
            "regattn_transformer",
            ["--attention", "entmax", "--attention-alpha", "sparse"],
            "--attention-alpha",
        ),
        ("regattn_lstm", ["--attention", "sq_pnorm_max", "--attention-p", "3"], "--attention-p"),
        (
            "regattn_transformer",
            ["--attention", "fusedmax", "--attention-lambda", "-1"],
            "--attention-lambda",
        ),
    ],
)
def test_bad_option_is_an_error_naming_it(model_name, extra, named, translation_data, snli_data):
    data = snli_data if model_name == "regattn_snli" else translation_data
    with pytest.raises(ValueError, match=named):
        build_model(data, MODEL_ARGS[model_name], extra)


def test_unknown_mapping_is_rejected_by_the_parser(translation_data, capsys):
    with pytest.raises(SystemExit):
        build_model(translation_data, MODEL_ARGS["regattn_lstm"], ["--attention", "sparsermax"])
    assert "--attention" in capsys.readouterr().err


@pytest.mark.parametrize("option,value", [("attention", "sparsermax"), ("attention_device", "gpu")])
def test_a_choice_the_parser_did_not_check_is_an_error_naming_it(option, value):
    # e.g. a Namespace or dict built in code: nothing checked its choices before
    cfg = {**vars(RegattnLSTMConfig()), option: value}
    with pytest.raises(ValueError, match=f"--{option.replace('_', '-')} .*{value}"):
        attention_spec_from_cfg(cfg, "regattn_lstm")


def test_config_without_the_attention_fields_is_an_error():
    # e.g. a Hydra config that lost them: never fall back to softmax silently
    with pytest.raises(ValueError, match="--attention "):
        attention_spec_from_cfg(OmegaConf.create({"dropout": 0.1}), "regattn_lstm")


def test_misspelt_attention_option_in_a_hydra_transformer_config_is_an_error(translation_data):
    from fairseq.models.transformer import base_architecture

    from regattn_fairseq.models.regattn_transformer import RegattnTransformerModel

    cfg = OmegaConf.create(
        {"_name": "regattn_transformer", "attention": "fusedmax", "attention_lamda": 0.5}
    )
    base_architecture(cfg)
    with pytest.raises(ValueError, match="attention_lamda"):
        RegattnTransformerModel.build_model(cfg, task=None)
