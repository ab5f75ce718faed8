"""Tiny random `transformers` models and batches for the backend tests, built from configs
(nothing is downloaded): an encoder (BERT), a causal decoder with grouped-query attention
(Llama: 4 query heads, 2 key/value heads), an encoder-decoder (BART), T5 (relative position
bias) and Gemma 2 (score soft-capping, sliding-window layers)."""

import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertForSequenceClassification,
    Gemma2Config,
    Gemma2ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

from regattn.integrations import transformers as rt

VOCAB, HIDDEN, HEADS = 40, 32, 4
PAD, BOS, EOS = 0, 1, 2
KINDS = ("encoder", "decoder", "encoder_decoder")
LENGTHS = (9, 6, 4)  # the batch's unpadded lengths (the first row has no padding)


# kind -> (config class, model class, the config's name for the attention dropout (None: the
# model has none to set), its other settings); every model takes VOCAB and PAD as well
ARCHITECTURES = {
    "encoder": (
        BertConfig,
        BertForSequenceClassification,
        "attention_probs_dropout_prob",
        dict(
            hidden_size=HIDDEN,
            num_hidden_layers=2,
            num_attention_heads=HEADS,
            intermediate_size=64,
            max_position_embeddings=32,
            num_labels=3,
            hidden_dropout_prob=0.0,
        ),
    ),
    "decoder": (
        LlamaConfig,
        LlamaForCausalLM,
        "attention_dropout",
        dict(
            hidden_size=HIDDEN,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            max_position_embeddings=32,
            bos_token_id=BOS,
            eos_token_id=EOS,
        ),
    ),
    "t5": (
        T5Config,
        T5ForConditionalGeneration,
        "dropout_rate",
        dict(
            d_model=HIDDEN,
            d_kv=HIDDEN // HEADS,
            d_ff=64,
            num_layers=2,
            num_heads=HEADS,
            eos_token_id=EOS,
            decoder_start_token_id=PAD,
        ),
    ),
    "gemma2": (
        Gemma2Config,
        Gemma2ForCausalLM,
        None,
        dict(
            hidden_size=HIDDEN,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            head_dim=HIDDEN // HEADS,
            sliding_window=6,  # smaller than the batch (9), larger than its padding (5)
            query_pre_attn_scalar=1,  # scaling 1: scores large enough for the soft cap to bend
            attn_logit_softcapping=0.5,
            max_position_embeddings=32,
        ),
    ),
    "encoder_decoder": (
        BartConfig,
        BartForConditionalGeneration,
        "attention_dropout",
        dict(
            d_model=HIDDEN,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=HEADS,
            decoder_attention_heads=HEADS,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=32,
            dropout=0.0,
            activation_dropout=0.0,
            bos_token_id=BOS,
            eos_token_id=EOS,
            decoder_start_token_id=EOS,
            forced_eos_token_id=None,
        ),
    ),
}


def tiny_model(kind: str, attn: str, dtype=torch.float32, dropout: float = 0.0):
    """A tiny random model of `kind` (`ARCHITECTURES`) on attn_implementation `attn` (seeded:
    same weights)."""
    config_class, model_class, dropout_name, settings = ARCHITECTURES[kind]
    if dropout and dropout_name is None:
        raise ValueError(f"the tiny {kind} model has no attention dropout to set")
    torch.manual_seed(0)
    dropout_setting = {dropout_name: dropout} if dropout_name else {}
    config = config_class(vocab_size=VOCAB, pad_token_id=PAD, **settings, **dropout_setting)
    model = model_class(config)
    model.set_attn_implementation(attn)
    return model.to(dtype)


def tiny_batch(kind: str, left_padding: bool = False) -> dict:
    """A seeded batch of LENGTHS tokens (padded right, or left), with the model's labels."""
    generator = torch.Generator().manual_seed(1)
    width = max(LENGTHS)
    input_ids = torch.full((len(LENGTHS), width), PAD)
    attention_mask = torch.zeros_like(input_ids)
    for row, length in enumerate(LENGTHS):
        span = slice(width - length, width) if left_padding else slice(0, length)
        input_ids[row, span] = torch.randint(3, VOCAB, (length,), generator=generator)
        attention_mask[row, span] = 1
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if kind == "encoder":
        batch["labels"] = torch.tensor([0, 1, 2])
    elif kind in ("decoder", "gemma2"):
        batch["labels"] = input_ids.masked_fill(attention_mask == 0, -100)
    else:
        batch["labels"] = torch.randint(3, VOCAB, (len(LENGTHS), 5), generator=generator)
    return batch


# the fused path's cases (regattn.attention computes these mappings): backend -> configure's
# parameters; sparsemax and 1.5-entmax (their own kernels), a fixed alpha with a temperature
# (folded into the kernel's scale), and a learned alpha per head
FUSED = {
    "sparsemax": {},
    "entmax15": {},
    "entmax": {"alpha": 1.3, "gamma": 2.0},
    "entmax_learned": {"alpha": "learned", "gamma": 0.5},
}


def run_with_impl(kind: str, case: str, impl: str, device: str = "cpu"):
    """(logits, {parameter: gradient}) of a tiny model of `kind` on the FUSED `case` with
    attention_impl `impl`, a training step's backward; learned alphas set apart per layer and
    head, so that a mixed-up one shows."""
    backend = "entmax" if case == "entmax_learned" else case
    model = tiny_model(kind, rt.PREFIX + backend)
    rt.configure(model, attention_impl=impl, **FUSED[case])
    model.to(device)
    with torch.no_grad():
        for layer, module in enumerate(rt.attention_modules(model)):
            mapping = getattr(module, rt.MAPPING_ATTRIBUTE)
            if mapping.alpha_logit is not None:
                mapping.alpha_logit.copy_(torch.linspace(-1.5, 1.5, HEADS) + 0.3 * layer)
    out = model(**{key: value.to(device) for key, value in tiny_batch(kind).items()})
    out.loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), grads
