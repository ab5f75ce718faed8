"""--attention-grad-surrogate of the LSTM seq2seq (issue #17 item 7): the forward pass keeps
the mapping's weights, the backward pass is softmax's at the same temperature."""

import pytest
import torch
from fairseq_helpers import MODEL_ARGS, build_model

from regattn import mappings
from regattn_fairseq.modules import AttentionNormalizer, RegattnLSTMAttentionLayer
from regattn_fairseq.modules.attention_options import AttentionSpec


def _layer(gamma, surrogate):
    torch.manual_seed(0)
    spec = AttentionSpec("sparsemax", {"gamma": gamma}, False, "same")
    layer = RegattnLSTMAttentionLayer(6, 5, 6, normalizer=AttentionNormalizer(spec))
    layer.grad_surrogate = surrogate
    with torch.no_grad():
        layer.input_proj.weight.mul_(30.0)  # large scores: sparsemax supports of one position
    return layer


def _inputs():
    torch.manual_seed(1)
    source_hids = torch.randn(7, 3, 5)  # srclen x bsz x dim
    padding = torch.zeros(7, 3, dtype=torch.bool)
    padding[5:, 1] = True
    return torch.randn(3, 6), source_hids, padding


def _run(layer):
    query, source_hids, padding = _inputs()
    out, probs = layer(query, source_hids, padding)
    weights = torch.linspace(-1.0, 1.0, out.numel()).view_as(out)
    (out * weights).sum().backward()
    return out.detach(), probs.detach(), layer.input_proj.weight.grad


@pytest.mark.parametrize("gamma", [1.0, 2.0])
def test_surrogate_keeps_the_weights_and_passes_softmax_gradient(gamma):
    plain_out, plain_probs, plain_grad = _run(_layer(gamma, None))
    out, probs, grad = _run(_layer(gamma, "softmax"))
    # the same forward pass, exact zeros included
    assert torch.equal(probs, plain_probs) and torch.equal(out, plain_out)
    assert (probs == 0).any()
    # every row has a single supported position: sparsemax passes nothing to the scores
    assert ((probs > 0).sum(dim=0) == 1).all() and (plain_grad == 0).all()
    assert grad.abs().max() > 0

    # the same straight-through estimator written with torch.softmax
    layer = _layer(gamma, None)
    query, source_hids, padding = _inputs()
    scores = torch.einsum("sbd,bd->bs", source_hids, layer.input_proj(query))
    sparse = mappings.sparsemax(scores.detach(), dim=-1, mask=~padding.t(), gamma=gamma)
    dense = torch.softmax((scores / gamma).masked_fill(padding.t(), float("-inf")), dim=-1)
    weights_ = sparse + dense - dense.detach()
    context = torch.einsum("bs,sbd->bd", weights_, source_hids)
    expected_out = torch.tanh(layer.output_proj(torch.cat((context, query), dim=1)))
    weights = torch.linspace(-1.0, 1.0, expected_out.numel()).view_as(expected_out)
    (expected_out * weights).sum().backward()
    torch.testing.assert_close(grad, layer.input_proj.weight.grad)


def test_the_option_reaches_the_layer(translation_data):
    _, plain = build_model(
        translation_data, MODEL_ARGS["regattn_lstm"], ["--attention", "sparsemax"]
    )
    assert plain.decoder.attention.grad_surrogate is None
    _, model = build_model(
        translation_data,
        MODEL_ARGS["regattn_lstm"],
        ["--attention", "sparsemax", "--attention-grad-surrogate", "softmax"],
    )
    assert model.decoder.attention.grad_surrogate == "softmax"


def test_unknown_surrogate_is_an_error(translation_data):
    with pytest.raises(ValueError, match="attention-grad-surrogate must be softmax"):
        build_model(
            translation_data,
            MODEL_ARGS["regattn_lstm"],
            ["--attention", "sparsemax", "--attention-grad-surrogate", "entmax"],
        )
