"""With --attention softmax the regattn seq2seq models compute what fairseq's own `lstm` and
`transformer` compute (same parameter names: the weights are copied by load_state_dict)."""
import torch
from fairseq.sequence_generator import SequenceGenerator

from conftest import MODEL_ARGS, build_model, translation_batch

# the stock architectures matching the tiny regattn ones in MODEL_ARGS
STOCK_ARGS = {
    "regattn_lstm": ["--arch", "lstm", "--encoder-embed-dim", "32", "--encoder-hidden-size", "32",
                     "--decoder-embed-dim", "32", "--decoder-hidden-size", "32",
                     "--decoder-out-embed-dim", "32", "--dropout", "0.0"],
    "regattn_transformer": ["--arch", "transformer", *MODEL_ARGS["regattn_transformer"][2:],
                            "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"],
}


def _pair(model_name, data):
    torch.manual_seed(0)
    task, ours = build_model(data, MODEL_ARGS[model_name], ["--attention", "softmax"])
    _, stock = build_model(data, STOCK_ARGS[model_name])
    stock.load_state_dict(ours.state_dict())  # strict: the parameter names must match
    return task, ours.eval(), stock.eval()


def _check_equal_outputs(model_name, data):
    task, ours, stock = _pair(model_name, data)
    sample = translation_batch(task)
    with torch.no_grad():
        ours_logits, ours_extra = ours(**sample["net_input"])
        stock_logits, stock_extra = stock(**sample["net_input"])
        torch.testing.assert_close(ours_logits, stock_logits, rtol=1e-5, atol=1e-5)
        ours_attn = ours_extra["attn"][0] if isinstance(ours_extra, dict) else ours_extra
        stock_attn = stock_extra["attn"][0] if isinstance(stock_extra, dict) else stock_extra
        torch.testing.assert_close(ours_attn, stock_attn, rtol=1e-5, atol=1e-6)

        # beam search: incremental decoding, reordered states, beam-expanded cross-attention
        hypos = [SequenceGenerator([m], task.target_dictionary, beam_size=3, max_len_b=10)
                 .generate([m], sample) for m in (ours, stock)]
    for ours_hypo, stock_hypo in zip(*hypos):
        assert ours_hypo[0]["tokens"].tolist() == stock_hypo[0]["tokens"].tolist()
        torch.testing.assert_close(ours_hypo[0]["positional_scores"],
                                   stock_hypo[0]["positional_scores"], rtol=1e-4, atol=1e-5)


def test_lstm_softmax_matches_fairseq_lstm(translation_data):
    _check_equal_outputs("regattn_lstm", translation_data)


def test_transformer_softmax_matches_fairseq_transformer(translation_data):
    _check_equal_outputs("regattn_transformer", translation_data)


def test_transformer_softmax_matches_fairseq_in_training_mode(translation_data):
    """Training mode is where fairseq's self-attention takes PyTorch's fused path: the
    regattn model must compute the same function there too (dropout off)."""
    task, ours, stock = _pair("regattn_transformer", translation_data)
    ours.train(), stock.train()
    sample = translation_batch(task, split="train")
    ours_logits, _ = ours(**sample["net_input"])
    stock_logits, _ = stock(**sample["net_input"])
    torch.testing.assert_close(ours_logits, stock_logits, rtol=1e-5, atol=1e-5)
    ours_logits.sum().backward(), stock_logits.sum().backward()
    for (name, p), q in zip(ours.named_parameters(), stock.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
