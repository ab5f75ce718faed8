"""Continuous attention (--attention-domain continuous) in the LSTM seq2seq and SNLI models:
every model x density trains through fairseq-train's code path and the seq2seq models decode
with beam 2; the options resolve to their defaults and a bad or inapplicable one fails at
startup naming it; padding does not change the result; the export carries the density."""

import json

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq_helpers import (
    BATCH_ARGS,
    COMMON_ARGS,
    MODEL_ARGS,
    SEQ2SEQ_TRAIN_ARGS,
    SNLI_TRAIN_ARGS,
    USER_DIR,
    build_model,
    epoch_losses,
    generate_in_process,
    train_in_process,
    translation_batch,
)

from regattn.continuous import DENSITIES
from regattn_fairseq.models.regattn_lstm import RegattnLSTMConfig
from regattn_fairseq.modules import continuous_spec_from_cfg

CONTINUOUS = ["--attention-domain", "continuous", "--continuous-basis", "8"]
VARIANTS = {
    **{density: ["--continuous-density", density] for density in DENSITIES},
    "truncated_parabola+sum": [
        "--continuous-density",
        "truncated_parabola",
        "--continuous-combine",
        "sum",
    ],
    "gaussian+learned_head": ["--continuous-params", "learned_head"],
}


def _train(data, model, extra, save_dir):
    task_args = SNLI_TRAIN_ARGS if model == "regattn_snli" else SEQ2SEQ_TRAIN_ARGS
    argv = [str(data), *task_args, *MODEL_ARGS[model], *COMMON_ARGS, *CONTINUOUS, *extra]
    return train_in_process([*argv, "--save-dir", str(save_dir)])


def _saved_density(path):
    model_cfg = checkpoint_utils.load_checkpoint_to_cpu(str(path))["cfg"]["model"]
    return model_cfg.attention_domain, model_cfg.continuous_density


@pytest.mark.parametrize("variant", VARIANTS)
def test_lstm_trains_and_generates(variant, translation_data, tmp_path):
    losses = epoch_losses(_train(translation_data, "regattn_lstm", VARIANTS[variant], tmp_path))
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    domain, density = _saved_density(tmp_path / "checkpoint_best.pt")
    assert domain == "continuous" and (density or "gaussian") == variant.split("+")[0]
    lines = generate_in_process(
        [
            str(translation_data),
            "--user-dir",
            USER_DIR,
            "--path",
            str(tmp_path / "checkpoint_best.pt"),
            "--task",
            "translation",
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--cpu",
            "--gen-subset",
            "test",
            "--beam",
            "2",
            "--batch-size",
            "4",
            *BATCH_ARGS,
            "--results-path",
            str(tmp_path),
        ]
    )
    assert len([line for line in lines if line.startswith("H-")]) == 6


@pytest.mark.parametrize("variant", VARIANTS)
def test_snli_trains(variant, snli_data, tmp_path):
    records = _train(snli_data, "regattn_snli", VARIANTS[variant], tmp_path)
    losses = epoch_losses(records)
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    assert any("valid_accuracy" in r for r in records)
    assert _saved_density(tmp_path / "checkpoint_best.pt")[0] == "continuous"


def test_defaults():
    assert continuous_spec_from_cfg(RegattnLSTMConfig()) is None
    spec = continuous_spec_from_cfg(RegattnLSTMConfig(attention_domain="continuous"))
    assert spec.describe() == {
        "density": "gaussian",
        "num_basis": 64,
        "ridge": 0.01,
        "combine": "none",
        "params": "attention_moments",
    }


@pytest.mark.parametrize(
    "model_name,extra,named",
    [
        ("regattn_lstm", ["--continuous-density", "gaussian"], "--continuous-density"),
        ("regattn_snli", ["--continuous-basis", "16"], "--continuous-basis"),
        ("regattn_lstm", ["--continuous-combine", "sum"], "--continuous-combine"),
        ("regattn_lstm", [*CONTINUOUS[:2], "--continuous-basis", "0"], "--continuous-basis"),
        ("regattn_snli", [*CONTINUOUS, "--continuous-ridge", "-0.5"], "--continuous-ridge"),
        (
            "regattn_lstm",
            [*CONTINUOUS, "--continuous-params", "learned_head", "--continuous-combine", "sum"],
            "--continuous-combine",
        ),
        (
            "regattn_snli",
            [*CONTINUOUS, "--continuous-params", "learned_head", "--attention", "sparsemax"],
            "--attention ",
        ),
        (
            "regattn_lstm",
            [*CONTINUOUS, "--continuous-params", "learned_head", "--attention-gamma", "2"],
            "--attention-gamma",
        ),
    ],
)
def test_bad_option_is_an_error_naming_it(model_name, extra, named, translation_data, snli_data):
    data = snli_data if model_name == "regattn_snli" else translation_data
    with pytest.raises(ValueError, match=named):
        build_model(data, MODEL_ARGS[model_name], extra)


@pytest.mark.parametrize(
    "option,value", [("continuous_density", "laplace"), ("attention_domain", "2d")]
)
def test_a_choice_the_parser_did_not_check_is_an_error_naming_it(option, value):
    cfg = {**vars(RegattnLSTMConfig()), "attention_domain": "continuous", option: value}
    with pytest.raises(ValueError, match=f"--{option.replace('_', '-')} .*{value}"):
        continuous_spec_from_cfg(cfg)


def test_transformer_has_no_continuous_attention(translation_data, capsys):
    with pytest.raises(SystemExit):
        build_model(translation_data, MODEL_ARGS["regattn_transformer"], CONTINUOUS)
    assert "--attention-domain" in capsys.readouterr().err


@pytest.mark.parametrize("density", DENSITIES)
def test_left_padded_batch_equals_unpadded_sentences(density, translation_data):
    task, model = build_model(
        translation_data,
        MODEL_ARGS["regattn_lstm"],
        [*CONTINUOUS, "--continuous-density", density, "--continuous-combine", "sum"],
    )
    model.eval()
    batch = translation_batch(task, size=4)
    net_input = batch["net_input"]
    assert (net_input["src_tokens"][:, 0] == task.source_dictionary.pad()).any()
    with torch.no_grad():
        logits, attn = model(**net_input)
        pad = task.source_dictionary.pad()
        for i in range(net_input["src_tokens"].size(0)):
            tokens = net_input["src_tokens"][i]
            src = tokens[tokens.ne(pad)].unsqueeze(0)
            alone, alone_attn = model(
                src, torch.tensor([src.size(1)]), net_input["prev_output_tokens"][i : i + 1]
            )
            torch.testing.assert_close(logits[i : i + 1], alone, rtol=1e-5, atol=1e-5)
            # fairseq's LSTMEncoder moves the (left) padding to the right before encoding
            src_len = src.size(1)
            torch.testing.assert_close(attn[i, :, :src_len], alone_attn[0], rtol=1e-5, atol=1e-6)
            assert attn[i, :, src_len:].eq(0).all()
    # the reported attention is the density's mass per token: rows sum to 1
    torch.testing.assert_close(attn.sum(-1), torch.ones(attn.shape[:2]))


def test_export_carries_the_density(translation_data, tmp_path):
    from regattn_fairseq.experiments.decode import export_attention

    _train(
        translation_data,
        "regattn_lstm",
        ["--continuous-density", "truncated_parabola", "--max-epoch", "1"],
        tmp_path,
    )
    out = tmp_path / "attn.jsonl"
    export_attention.main(
        [
            str(translation_data),
            "--user-dir",
            USER_DIR,
            "--path",
            str(tmp_path / "checkpoint_best.pt"),
            "--task",
            "translation",
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--cpu",
            "--gen-subset",
            "test",
            "--beam",
            "2",
            "--batch-size",
            "4",
            "--attention-output",
            str(out),
        ]
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 6
    for record in records:
        rows = len(record["attention"])
        density = record["density"]
        assert record["continuous"]["density"] == "truncated_parabola"
        assert len(density["mu"]) == len(density["sigma_sq"]) == len(density["support"]) == rows
        assert len(record["discrete_attention"]) == rows
        for mu, sigma_sq, (lo, hi) in zip(
            density["mu"], density["sigma_sq"], density["support"], strict=True
        ):
            a = (1.5 * sigma_sq) ** (1 / 3)
            assert 0 <= mu <= 1 and lo == pytest.approx(mu - a, abs=1e-6)
            assert hi == pytest.approx(mu + a, abs=1e-6)  # float32 in the export
