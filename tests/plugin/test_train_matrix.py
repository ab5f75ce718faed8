"""Every model x every mapping trains through fairseq-train's code path (argument parsing with
--user-dir, config conversion, trainer) and the loss goes down; the seq2seq checkpoints then
decode through fairseq-generate's code path with beam 2."""

import pytest
from fairseq import checkpoint_utils
from fairseq_helpers import (
    BATCH_ARGS,
    COMMON_ARGS,
    MODEL_ARGS,
    SEQ2SEQ_TRAIN_ARGS,
    SNLI_TRAIN_ARGS,
    USER_DIR,
    epoch_losses,
    generate_in_process,
    train_in_process,
)

from regattn import mappings


def _train(data, model, mapping, save_dir, extra=()):
    task_args = SNLI_TRAIN_ARGS if model == "regattn_snli" else SEQ2SEQ_TRAIN_ARGS
    argv = [
        str(data),
        *task_args,
        *MODEL_ARGS[model],
        *COMMON_ARGS,
        "--attention",
        mapping,
        *extra,
        "--save-dir",
        str(save_dir),
    ]
    return train_in_process(argv)


def _assert_checkpoint_uses(path, mapping):
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert state["cfg"]["model"].attention == mapping


SEQ2SEQ_CASES = [
    (model, mapping, ())
    for model in ("regattn_lstm", "regattn_transformer")
    for mapping in mappings.NAMES + mappings.CONTROL_NAMES
]
# the adaptively sparse Transformer
SEQ2SEQ_CASES.append(("regattn_transformer", "entmax", ("--attention-alpha", "learned")))


@pytest.mark.parametrize("model,mapping,extra", SEQ2SEQ_CASES)
def test_seq2seq_trains_and_generates(model, mapping, extra, translation_data, tmp_path):
    losses = epoch_losses(_train(translation_data, model, mapping, tmp_path, extra))
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    _assert_checkpoint_uses(tmp_path / "checkpoint_best.pt", mapping)

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
    hypotheses = [line for line in lines if line.startswith("H-")]
    assert len(hypotheses) == 6


@pytest.mark.parametrize("mapping", mappings.NAMES + mappings.CONTROL_NAMES)
def test_snli_trains(mapping, snli_data, tmp_path):
    records = _train(snli_data, "regattn_snli", mapping, tmp_path)
    losses = epoch_losses(records)
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    assert any("valid_accuracy" in r for r in records)
    _assert_checkpoint_uses(tmp_path / "checkpoint_best.pt", mapping)
