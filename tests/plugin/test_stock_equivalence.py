"""The contract of regattn_fairseq/fairseq_adapter.py, which holds every use of fairseq
internals: with --attention softmax the regattn seq2seq models compute what fairseq's own `lstm`
and `transformer` compute (same parameter names: the weights are copied by load_state_dict),
and each adapter function is exercised here against stock fairseq."""

import argparse

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.sequence_generator import SequenceGenerator
from fairseq_cli import train as fairseq_train
from fairseq_helpers import (
    COMMON_ARGS,
    MODEL_ARGS,
    SEQ2SEQ_TRAIN_ARGS,
    build_model,
    train_in_process,
    translation_batch,
)
from omegaconf import OmegaConf

from regattn_fairseq import fairseq_adapter
from regattn_fairseq.hydra_callbacks import FreshCheckpointBest
from regattn_fairseq.modules import AttentionNormalizer, RegattnLSTMAttentionLayer

# the stock architectures matching the tiny regattn ones in MODEL_ARGS
STOCK_ARGS = {
    "regattn_lstm": [
        "--arch",
        "lstm",
        "--encoder-embed-dim",
        "32",
        "--encoder-hidden-size",
        "32",
        "--decoder-embed-dim",
        "32",
        "--decoder-hidden-size",
        "32",
        "--decoder-out-embed-dim",
        "32",
        "--dropout",
        "0.0",
    ],
    "regattn_transformer": [
        "--arch",
        "transformer",
        *MODEL_ARGS["regattn_transformer"][2:],
        "--encoder-attention-heads",
        "4",
        "--decoder-attention-heads",
        "4",
    ],
}


def _pair(model_name, data, extra=()):
    torch.manual_seed(0)
    task, ours = build_model(data, MODEL_ARGS[model_name], ["--attention", "softmax", *extra])
    _, stock = build_model(data, STOCK_ARGS[model_name], extra)
    stock.load_state_dict(ours.state_dict())  # strict: the parameter names must match
    return task, ours.eval(), stock.eval()


def _count_normalizer_calls(model):
    calls = []
    for module in model.modules():
        if isinstance(module, AttentionNormalizer):
            module.register_forward_hook(lambda *_: calls.append(1))
    return calls


def _check_equal_outputs(model_name, data):
    task, ours, stock = _pair(model_name, data)
    sample = translation_batch(task)
    normalizer_calls = _count_normalizer_calls(ours)
    with torch.no_grad():
        ours_logits, ours_extra = ours(**sample["net_input"])
        stock_logits, stock_extra = stock(**sample["net_input"])
        # the regattn attention did run (an unreplaced stock layer would match too)
        assert normalizer_calls
        torch.testing.assert_close(ours_logits, stock_logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(
            fairseq_adapter.decoder_attention(ours_extra),
            fairseq_adapter.decoder_attention(stock_extra),
            rtol=1e-5,
            atol=1e-6,
        )

        # beam search: incremental decoding, reordered states, beam-expanded cross-attention
        hypos = [
            SequenceGenerator([m], task.target_dictionary, beam_size=3, max_len_b=10).generate(
                [m], sample
            )
            for m in (ours, stock)
        ]
    for ours_hypo, stock_hypo in zip(*hypos, strict=True):
        assert ours_hypo[0]["tokens"].tolist() == stock_hypo[0]["tokens"].tolist()
        torch.testing.assert_close(
            ours_hypo[0]["positional_scores"],
            stock_hypo[0]["positional_scores"],
            rtol=1e-4,
            atol=1e-5,
        )


def test_lstm_softmax_matches_fairseq_lstm(translation_data):
    """replace_lstm_attention and decoder_attention (the LSTM's tensor form)."""
    _check_equal_outputs("regattn_lstm", translation_data)


def test_lstm_attention_is_replaced_in_place(translation_data):
    _, ours, stock = _pair("regattn_lstm", translation_data)
    assert isinstance(ours.decoder.attention, RegattnLSTMAttentionLayer)
    with pytest.raises(RuntimeError, match="parameters"):
        fairseq_adapter.replace_lstm_attention(  # a layer whose shapes differ from fairseq's
            stock.decoder,
            RegattnLSTMAttentionLayer(16, 32, 32, normalizer=ours.decoder.attention.normalizer),
        )


def test_transformer_softmax_matches_fairseq_transformer(translation_data):
    """masked_attention_scores (incl. the beam-expanded cross-attention), decoder_attention
    (the Transformer's dict form)."""
    _check_equal_outputs("regattn_transformer", translation_data)


@pytest.mark.parametrize("extra", [[], ["--checkpoint-activations"]])
def test_transformer_softmax_matches_fairseq_in_training_mode(extra, translation_data):
    """Training mode is where fairseq's self-attention takes PyTorch's fused path
    (use_python_attention_path keeps it off); with --checkpoint-activations the layers are
    wrapped as fairseq wraps its own (wrap_transformer_layer). Dropout is off."""
    task, ours, stock = _pair("regattn_transformer", translation_data, extra)
    ours.train(), stock.train()
    sample = translation_batch(task, split="train")
    normalizer_calls = _count_normalizer_calls(ours)
    ours_logits, _ = ours(**sample["net_input"])
    stock_logits, _ = stock(**sample["net_input"])
    assert normalizer_calls
    torch.testing.assert_close(ours_logits, stock_logits, rtol=1e-5, atol=1e-5)
    ours_logits.sum().backward(), stock_logits.sum().backward()
    for (name, p), q in zip(ours.named_parameters(), stock.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_masked_attention_scores_mask_is_the_masks_fairseq_was_given(translation_data):
    """The -inf sentinel: the recovered mask is exactly key padding and the decoder's future
    mask as fairseq's own TransformerDecoder builds it (MultiheadAttention's stock forward,
    which takes PyTorch's fused path unless use_python_attention_path was applied)."""
    _, ours, stock = _pair("regattn_transformer", translation_data)
    attention = ours.decoder.layers[0].self_attn
    tgt_len, bsz, dim = 5, 3, attention.embed_dim
    x = torch.randn(tgt_len, bsz, dim)
    padding = torch.zeros(bsz, tgt_len, dtype=torch.bool)
    padding[1, :2] = padding[2, 0] = True  # left padding, as fairseq collates sources
    future = stock.decoder.buffered_future_mask(x)
    with torch.no_grad():
        scores, mask, v = fairseq_adapter.masked_attention_scores(
            attention, x, x, x, padding, None, False, future
        )
    heads = attention.num_heads
    expected = (~padding[:, None, None, :]) & torch.ones(tgt_len, tgt_len).tril().bool()
    assert mask.shape == scores.shape == (bsz, heads, tgt_len, tgt_len)
    assert torch.equal(mask, expected.expand_as(mask))
    assert torch.isfinite(scores).all() and not scores[~mask].any()
    assert v.shape == (bsz, 1, heads, tgt_len, attention.head_dim)


def test_training_records_the_best_loss_and_checkpoints_load(translation_data, tmp_path):
    """reset_best_checkpoint_loss (through the Hydra callback) removes what fairseq's training
    sets; allow_namespace_in_checkpoints lets fairseq's loader read the checkpoint, which holds
    an argparse.Namespace."""
    records = train_in_process(
        [
            str(translation_data),
            *SEQ2SEQ_TRAIN_ARGS,
            *COMMON_ARGS,
            *MODEL_ARGS["regattn_transformer"],
            "--attention",
            "softmax",
            "--max-epoch",
            "1",
            "--patience",
            "3",
            "--save-dir",
            str(tmp_path),
        ]
    )
    valid_losses = [float(r["valid_loss"]) for r in records if "valid_loss" in r]
    assert checkpoint_utils.save_checkpoint.best == pytest.approx(min(valid_losses), abs=1e-3)
    # early stopping's own best and count: a multirun's next job must not inherit them
    assert fairseq_train.should_stop_early.best == pytest.approx(min(valid_losses), abs=1e-3)
    assert fairseq_train.should_stop_early.num_runs == 0
    FreshCheckpointBest().on_job_start(
        OmegaConf.create({"checkpoint": {"save_dir": str(tmp_path)}})
    )
    assert not hasattr(checkpoint_utils.save_checkpoint, "best")
    assert not hasattr(fairseq_train.should_stop_early, "best")
    assert not hasattr(fairseq_train.should_stop_early, "num_runs")

    checkpoint = str(tmp_path / "checkpoint_best.pt")
    # what torch.load(weights_only=True) rejects unless allowed (our own file: safe to unpickle)
    state = torch.load(checkpoint, weights_only=False)
    assert isinstance(state["cfg"]["model"], argparse.Namespace)
    # fairseq's loader: torch.load with the default weights_only=True
    [model], _ = checkpoint_utils.load_model_ensemble([checkpoint])
    assert model.attention_spec.name == "softmax"
