"""The real console scripts in fresh processes: fairseq-train / fairseq-generate with
--user-dir, fairseq-hydra-train with the configs/model groups, startup errors, and the
attention export script."""

import importlib.util
import json

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq_helpers import (
    BATCH_ARGS,
    BIN,
    COMMON_ARGS,
    MODEL_ARGS,
    REPO,
    SEQ2SEQ_TRAIN_ARGS,
    SNLI_TRAIN_ARGS,
    USER_DIR,
    run_cli,
    train_in_process,
)

GENERATE_ARGS = [
    "--user-dir",
    USER_DIR,
    "--task",
    "translation",
    "--source-lang",
    "src",
    "--target-lang",
    "tgt",
    "--cpu",
    "--gen-subset",
    "test",
    "--batch-size",
    "4",
    *BATCH_ARGS,
]


def _train_losses(stdout_and_stderr):
    records = []
    for line in stdout_and_stderr.splitlines():
        start = line.find("{")
        if start >= 0:
            try:
                records.append(json.loads(line[start:]))
            except ValueError:
                pass
    return [r["train_loss"] for r in records if "train_loss" in r]


def _export(data, checkpoint, out, task_args):
    """scripts/export_attention.py, in this process (its main takes the command line)."""
    spec = importlib.util.spec_from_file_location(
        "export_attention", REPO / "scripts" / "export_attention.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main([str(data), "--path", str(checkpoint), *task_args, "--attention-output", str(out)])
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_lstm_fusedmax_train_generate_export(translation_data, tmp_path):
    proc = run_cli(
        [
            BIN / "fairseq-train",
            str(translation_data),
            *SEQ2SEQ_TRAIN_ARGS,
            *MODEL_ARGS["regattn_lstm"],
            *COMMON_ARGS,
            "--attention",
            "fusedmax",
            "--attention-lambda",
            "0.2",
            "--save-dir",
            str(tmp_path),
        ]
    )
    losses = _train_losses(proc.stdout + proc.stderr)
    assert len(losses) == 3 and losses[-1] < losses[0]

    checkpoint = tmp_path / "checkpoint_best.pt"
    gen = run_cli(
        [
            BIN / "fairseq-generate",
            str(translation_data),
            "--path",
            str(checkpoint),
            "--beam",
            "3",
            *GENERATE_ARGS,
        ]
    )
    assert sum(line.startswith("H-") for line in gen.stdout.splitlines()) == 6

    records = _export(
        translation_data, checkpoint, tmp_path / "attn.jsonl", [*GENERATE_ARGS, "--beam", "3"]
    )
    assert sorted(r["id"] for r in records) == list(range(6))
    for r in records:
        assert r["mapping"] == {
            "name": "fusedmax",
            "params": {"gamma": 1.0, "lam": 0.2},
            "device": "same",
        }
        attention = torch.tensor(r["attention"])
        assert attention.shape == (len(r["tgt_tokens"]), len(r["src_tokens"]))
        assert r["src_tokens"][-1] == "</s>" and r["tgt_tokens"][-1] == "</s>"
        torch.testing.assert_close(attention.sum(-1), torch.ones(len(r["tgt_tokens"])))


@pytest.mark.slow  # the in-process matrix covers this model and mapping
def test_adaptively_sparse_transformer_train_and_generate(translation_data, tmp_path):
    run_cli(
        [
            BIN / "fairseq-train",
            str(translation_data),
            *SEQ2SEQ_TRAIN_ARGS,
            *MODEL_ARGS["regattn_transformer"],
            *COMMON_ARGS,
            "--max-epoch",
            "1",
            "--attention",
            "entmax",
            "--attention-alpha",
            "learned",
            "--save-dir",
            str(tmp_path),
        ]
    )
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_best.pt"))
    assert sum(k.endswith("alpha_logit") for k in state["model"]) == 3
    gen = run_cli(
        [
            BIN / "fairseq-generate",
            str(translation_data),
            "--beam",
            "2",
            "--path",
            str(tmp_path / "checkpoint_best.pt"),
            *GENERATE_ARGS,
        ]
    )
    assert sum(line.startswith("H-") for line in gen.stdout.splitlines()) == 6


def test_snli_export(snli_data, tmp_path):
    train_in_process(
        [
            str(snli_data),
            *SNLI_TRAIN_ARGS,
            *MODEL_ARGS["regattn_snli"],
            *COMMON_ARGS,
            "--max-epoch",
            "1",
            "--attention",
            "oscarmax",
            "--save-dir",
            str(tmp_path),
        ]
    )
    records = _export(
        snli_data,
        tmp_path / "checkpoint_best.pt",
        tmp_path / "attn.jsonl",
        [
            "--user-dir",
            USER_DIR,
            "--task",
            "regattn_snli",
            "--cpu",
            "--gen-subset",
            "valid",
            "--batch-size",
            "4",
        ],
    )
    assert len(records) == 8
    for r in records:
        assert r["mapping"]["name"] == "oscarmax" and r["label"] in (
            "entailment",
            "neutral",
            "contradiction",
        )
        assert len(r["attention"]) == 1 and len(r["attention"][0]) == len(r["src_tokens"])
        assert abs(sum(r["attention"][0]) - 1) < 1e-5


def test_bad_option_fails_at_startup_naming_it(translation_data, tmp_path):
    proc = run_cli(
        [
            BIN / "fairseq-train",
            str(translation_data),
            *SEQ2SEQ_TRAIN_ARGS,
            *MODEL_ARGS["regattn_lstm"],
            *COMMON_ARGS,
            "--attention",
            "sparsemax",
            "--attention-lambda",
            "0.5",
            "--save-dir",
            str(tmp_path),
        ],
        check=False,
    )
    assert proc.returncode != 0
    assert "--attention-lambda" in proc.stderr and "sparsemax" in proc.stderr
    assert not list(tmp_path.glob("*.pt"))


def _hydra_train(tmp_path, model_group, data, overrides, task):
    config = {
        "defaults": [{"model": model_group}, "_self_"],
        "hydra": {"searchpath": [f"file://{REPO / 'configs'}"], "run": {"dir": str(tmp_path)}},
        "common": {
            "user_dir": USER_DIR,
            "seed": 1,
            "cpu": True,
            "log_format": "json",
            "log_interval": 1,
            "no_progress_bar": True,
        },
        "task": task,
        "criterion": {
            "_name": "regattn_snli_cross_entropy"
            if task["_name"] == "regattn_snli"
            else "cross_entropy"
        },
        "optimizer": {"_name": "adam"},
        "lr_scheduler": {"_name": "fixed"},
        "optimization": {"lr": [0.01], "max_epoch": 1},
        "dataset": {"batch_size": 16, "required_batch_size_multiple": 1, "num_workers": 0},
        "checkpoint": {"save_dir": str(tmp_path / "ckpt"), "no_epoch_checkpoints": True},
    }
    (tmp_path / "train.yaml").write_text(json.dumps(config))  # JSON is YAML
    run_cli(
        [
            BIN / "fairseq-hydra-train",
            "--config-dir",
            str(tmp_path),
            "--config-name",
            "train",
            *overrides,
        ],
        cwd=tmp_path,
    )
    return checkpoint_utils.load_model_ensemble([str(tmp_path / "ckpt" / "checkpoint_best.pt")])


TRANSLATION_TASK = {"_name": "translation", "source_lang": "src", "target_lang": "tgt"}


def test_hydra_lstm_keeps_the_attention_options(translation_data, tmp_path):
    [model], cfg = _hydra_train(
        tmp_path,
        "regattn_lstm_small",
        translation_data,
        [
            "model.attention=fusedmax",
            "model.attention_lambda=0.3",
            "model.encoder_embed_dim=32",
            "model.decoder_embed_dim=32",
        ],
        {**TRANSLATION_TASK, "data": str(translation_data)},
    )
    assert model.attention_spec.describe()["params"] == {"gamma": 1.0, "lam": 0.3}
    assert model.attention_spec.name == "fusedmax"


def test_hydra_transformer_keeps_the_attention_options(translation_data, tmp_path):
    # the argparse-style Transformer is where fairseq drops unknown Hydra model keys
    [model], cfg = _hydra_train(
        tmp_path,
        "regattn_transformer_small",
        translation_data,
        [
            "model.attention=entmax",
            "model.attention_alpha=learned",
            "+model.encoder_layers=1",
            "+model.decoder_layers=1",
        ],
        {**TRANSLATION_TASK, "data": str(translation_data)},
    )
    assert model.attention_spec.name == "entmax" and model.attention_spec.learned_alpha
    assert sum(n.endswith("alpha_logit") for n, _ in model.named_parameters()) == 3


@pytest.mark.slow  # same Hydra path as the LSTM (dataclass model config)
def test_hydra_snli_keeps_the_attention_options(snli_data, tmp_path):
    [model], cfg = _hydra_train(
        tmp_path,
        "regattn_snli_small",
        snli_data,
        ["model.attention=sq_pnorm_max", "model.attention_p=1.25"],
        {"_name": "regattn_snli", "data": str(snli_data)},
    )
    assert model.attention_spec.describe()["params"] == {"gamma": 1.0, "p": 1.25}
