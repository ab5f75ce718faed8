"""What the mapping does inside the models: it is used in training mode (fairseq's fused
attention path does not take over), padding does not change it, and incremental decoding /
beam search compute the same as a full forward pass."""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from fairseq_helpers import MODEL_ARGS, build_model, translation_batch

from regattn_fairseq.fairseq_adapter import decoder_attention
from regattn_fairseq.modules import AttentionNormalizer


def _record_normalizer_outputs(model):
    calls = {}

    def hook(name):
        def record(module, inputs, output):
            calls.setdefault(name, []).append((output.detach(), inputs[1]))

        return record

    for name, module in model.named_modules():
        if isinstance(module, AttentionNormalizer):
            module.register_forward_hook(hook(name))
    return calls


def test_transformer_attention_is_sparse_in_training_mode(translation_data):
    torch.manual_seed(0)
    task, model = build_model(
        translation_data,
        MODEL_ARGS["regattn_transformer"],
        ["--attention", "sparsemax", "--encoder-layers", "2", "--decoder-layers", "2"],
    )
    calls = _record_normalizer_outputs(model)
    model.train()
    sample = translation_batch(task, split="train", size=8)
    logits, _ = model(**sample["net_input"])
    logits.sum().backward()

    expected = {f"encoder.layers.{i}.self_attn.normalizer" for i in range(2)}
    expected |= {
        f"decoder.layers.{i}.{block}.normalizer"
        for i in range(2)
        for block in ("self_attn", "encoder_attn")
    }
    assert set(calls) == expected
    for name, [(probs, mask)] in calls.items():
        torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs.sum(-1)))
        assert (probs[~mask] == 0).all(), name
        # sparsemax leaves some allowed positions at exactly zero; softmax never would
        assert (probs[mask] == 0).any(), name


def _single_vs_batch(task, batch_size=4):
    """Outputs for a left-padded batch and for each of its sentences alone."""
    task.load_dataset("test")
    dataset = task.dataset("test")
    batch = dataset.collater([dataset[i] for i in range(batch_size)])
    assert (batch["net_input"]["src_tokens"][:, 0] == task.source_dictionary.pad()).any()
    singles = [dataset.collater([dataset[i]]) for i in range(batch_size)]
    return batch, singles


@pytest.mark.parametrize("model_name", ["regattn_lstm", "regattn_transformer"])
@pytest.mark.parametrize("mapping", ["fusedmax", "oscarmax", "entmax"])
def test_left_padding_gives_the_attention_of_the_unpadded_sentence(
    model_name, mapping, translation_data
):
    torch.manual_seed(0)
    task, model = build_model(translation_data, MODEL_ARGS[model_name], ["--attention", mapping])
    model.eval()
    batch, singles = _single_vs_batch(task)
    with torch.no_grad():
        batch_logits, batch_extra = model(**batch["net_input"])
        for single in singles:
            sample_id = single["id"][0]
            b = (batch["id"] == sample_id).nonzero().item()
            src_len, tgt_len = single["net_input"]["src_tokens"].size(1), single["target"].size(1)
            logits, extra = model(**single["net_input"])
            attn, batch_attn = decoder_attention(extra), decoder_attention(batch_extra)
            padded = batch_attn[b, :tgt_len]
            # fairseq's LSTMEncoder moves the (left) padding to the right before encoding
            real = slice(None, src_len) if model_name == "regattn_lstm" else slice(-src_len, None)
            pads = slice(src_len, None) if model_name == "regattn_lstm" else slice(None, -src_len)
            torch.testing.assert_close(padded[:, real], attn[0], rtol=1e-4, atol=1e-5)
            assert (padded[:, pads] == 0).all()
            torch.testing.assert_close(batch_logits[b, :tgt_len], logits[0], rtol=1e-4, atol=1e-4)


def test_snli_padding_gives_the_attention_of_the_unpadded_pair(snli_data):
    torch.manual_seed(0)
    task, model = build_model(snli_data, MODEL_ARGS["regattn_snli"], ["--attention", "fusedmax"])
    model.eval()
    task.load_dataset("test")
    dataset = task.dataset("test")
    batch = dataset.collater([dataset[i] for i in range(6)])
    with torch.no_grad():
        batch_logits, batch_extra = model(**batch["net_input"])
        for b, sample_id in enumerate(batch["id"].tolist()):
            single = dataset.collater([dataset[sample_id]])
            logits, extra = model(**single["net_input"])
            length = single["net_input"]["premise_tokens"].size(1)
            torch.testing.assert_close(batch_extra["attn"][b, :length], extra["attn"][0])
            assert (batch_extra["attn"][b, length:] == 0).all()
            torch.testing.assert_close(batch_logits[b], logits[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "model_name,extra",
    [
        ("regattn_lstm", ["--attention", "fusedmax"]),
        ("regattn_transformer", ["--attention", "fusedmax"]),
        ("regattn_transformer", ["--attention", "entmax", "--attention-alpha", "learned"]),
    ],
)
def test_beam_search_scores_match_a_full_forward_pass(model_name, extra, translation_data):
    """Beam search decodes incrementally with beam-expanded states (and, in the Transformer,
    the shared-source cross-attention branch); rescoring its hypotheses with one teacher-forced
    forward pass must give the same token scores."""
    torch.manual_seed(0)
    task, model = build_model(translation_data, MODEL_ARGS[model_name], extra)
    model.eval()
    sample = translation_batch(task)
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=8)
    with torch.no_grad():
        hypos = generator.generate([model], sample)
        for i, sentence_hypos in enumerate(hypos):
            src = sample["net_input"]["src_tokens"][i : i + 1]
            src = src[src != task.source_dictionary.pad()].unsqueeze(0)
            for hypo in sentence_hypos:
                tokens = hypo["tokens"].unsqueeze(0)
                prev = torch.cat(
                    [tokens.new_full((1, 1), task.target_dictionary.eos()), tokens[:, :-1]], dim=1
                )
                logits, _ = model(src, torch.tensor([src.size(1)]), prev)
                lprobs = model.get_normalized_probs((logits, None), log_probs=True)
                scores = lprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)[0]
                torch.testing.assert_close(scores, hypo["positional_scores"], rtol=1e-4, atol=1e-4)


def test_learned_alpha_is_one_trained_parameter_per_head_and_layer(translation_data):
    torch.manual_seed(0)
    task, model = build_model(
        translation_data,
        MODEL_ARGS["regattn_transformer"],
        ["--attention", "entmax", "--attention-alpha", "learned"],
    )
    alphas = {n: p for n, p in model.named_parameters() if n.endswith("alpha_logit")}
    assert sorted(alphas) == sorted(
        [
            "encoder.layers.0.self_attn.normalizer.alpha_logit",
            "decoder.layers.0.self_attn.normalizer.alpha_logit",
            "decoder.layers.0.encoder_attn.normalizer.alpha_logit",
        ]
    )
    assert all(p.shape == (4,) for p in alphas.values())
    model.train()
    logits, _ = model(**translation_batch(task, split="train", size=8)["net_input"])
    logits.logsumexp(-1).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in alphas.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("model_name", ["regattn_lstm", "regattn_transformer", "regattn_snli"])
def test_cpu_offload_matches_on_gpu(model_name, translation_data, snli_data):
    data = snli_data if model_name == "regattn_snli" else translation_data
    outputs = []
    for device in ("same", "cpu"):
        torch.manual_seed(0)
        task, model = build_model(
            data, MODEL_ARGS[model_name], ["--attention", "fusedmax", "--attention-device", device]
        )
        model = model.cuda().train()
        task.load_dataset("test")
        dataset = task.dataset("test")
        sample = dataset.collater([dataset[i] for i in range(4)])
        net_input = {k: v.cuda() for k, v in sample["net_input"].items()}
        logits = model(**net_input)[0]
        logits.float().logsumexp(-1).sum().backward()
        grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
        outputs.append((logits.detach(), grads))
    torch.testing.assert_close(outputs[0][0], outputs[1][0], rtol=1e-4, atol=1e-5)
    for same, offloaded in zip(outputs[0][1], outputs[1][1], strict=True):
        torch.testing.assert_close(same, offloaded, rtol=1e-3, atol=1e-5)
