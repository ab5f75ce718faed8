"""Scoring a fine-tuned Hugging Face entailment classifier (`train.hf_finetune`) on an
evaluation set: accuracy, its per-item record (for the paired tests), the attention statistics
of every layer and head, the learned alphas, and an attention export for the figures
(`decode.attention_format`)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from regattn.analysis import attention_statistics
from regattn_fairseq.experiments.decode.attention_format import write_compressed_export
from regattn_fairseq.experiments.train.hf_finetune import (
    FineTuneSettings,
    NliPairs,
    autocast,
    batches,
    encode,
    learned_alphas,
    length_sorted_batches,
    pair_lengths,
)
from regattn_fairseq.tasks.regattn_snli import LABELS

# pairs whose attention the statistics read (every layer, head and query token of each), and
# pairs kept in the export the figures draw from
STATISTICS_PAIRS = 100
EXPORT_PAIRS = 50


def real_rows(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One example's attention rows over its real tokens: (heads * n, n), float32."""
    return weights[:, mask][:, :, mask].float().reshape(-1, int(mask.sum()))


def _predictions(model, tokenizer, pairs: NliPairs, settings: FineTuneSettings) -> list[int]:
    """The predicted label of every pair, in the pairs' order, computed as the model was
    trained (bf16 autocast when its settings say so), in length-sorted batches."""
    predictions = [-1] * len(pairs)
    lengths = pair_lengths(pairs, tokenizer, settings.max_length)
    with torch.no_grad(), autocast(settings):
        for indices in length_sorted_batches(lengths, 2 * settings.batch_size):
            batch = encode(pairs, tokenizer, indices, settings.max_length)
            for index, label in zip(
                indices, model(**batch).logits.argmax(-1).tolist(), strict=True
            ):
                predictions[index] = label
    return predictions


def _attention_pass(model, tokenizer, pairs: NliPairs, settings, predictions, mapping):
    """The attention rows of the first STATISTICS_PAIRS pairs (pooled, and per layer) and the
    export records of the first EXPORT_PAIRS, from a float32 pass: the mapping's own weights,
    whose rows sum to 1 (bfloat16 rounds them by up to 2^-8, more than the statistics'
    row check allows)."""
    pooled: list[torch.Tensor] = []
    by_layer: list[list[torch.Tensor]] = []
    records = []
    measured = pairs.head(STATISTICS_PAIRS)
    seen = 0
    with torch.no_grad():
        for batch in batches(measured, tokenizer, 2 * settings.batch_size, settings.max_length):
            out = model(**batch, output_attentions=True)
            masks = batch["attention_mask"].bool()
            for example in range(len(batch["labels"])):
                mask = masks[example]
                for layer, weights in enumerate(out.attentions):
                    rows = real_rows(weights[example], mask)
                    if layer == len(by_layer):
                        by_layer.append([])
                    by_layer[layer].append(rows)
                    pooled.append(rows)
                index = seen + example
                if index < EXPORT_PAIRS:
                    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][example][mask])
                    records.append(
                        _export_record(out.attentions, example, mask, tokens, mapping, index)
                        | {
                            "label": LABELS[int(batch["labels"][example])],
                            "prediction": LABELS[int(predictions[index])],
                        }
                    )
            seen += len(batch["labels"])
    return pooled, by_layer, records


def _export_record(attentions, example: int, mask, tokens: list[str], mapping: dict, index):
    """One pair's export record: the last layer's attention, mean over heads."""
    last = real_rows(attentions[-1][example], mask)
    heads = attentions[-1].shape[1]
    mean = last.reshape(heads, len(tokens), len(tokens)).mean(0)
    return {
        "id": str(index),
        "src_tokens": tokens,
        "tgt_tokens": tokens,
        "attention": [[round(float(w), 5) for w in row] for row in mean],
        "mapping": {**mapping, "layer": len(attentions) - 1, "heads": "mean"},
    }


def classify(
    model,
    tokenizer,
    pairs: NliPairs,
    settings: FineTuneSettings,
    export: Path,
    mapping: dict,
) -> dict:
    """Classify `pairs` and measure the model's attention.

    Parameters
    ----------
    model, tokenizer
        the fine-tuned model (`train.hf_finetune.load_finetuned`).
    pairs : NliPairs
        the evaluation set.
    settings : FineTuneSettings
        the run's settings (batch size, max length, bf16).
    export : Path
        where the attention export goes (``.jsonl.gz``): the first EXPORT_PAIRS pairs, the
        last layer's attention averaged over heads, with gold label and prediction.
    mapping : dict
        the mapping's name and parameters, recorded in the export.

    Returns
    -------
    dict
        ``metrics`` ({"accuracy": percent}), ``items`` (kind "mean": 100 per correct pair),
        ``decode_wall_s``, and ``attention``: the statistics of `regattn.analysis` over every
        layer, head and real query token of the first STATISTICS_PAIRS pairs, with
        ``by_layer`` (the same per layer), ``alpha`` (learned alphas per layer and head, when
        learned) and ``export``.
    """
    model.eval()
    started = time.time()
    predictions = _predictions(model, tokenizer, pairs, settings)
    elapsed = time.time() - started
    correct = [int(p) == label for p, label in zip(predictions, pairs.labels, strict=True)]
    pooled, by_layer, records = _attention_pass(
        model, tokenizer, pairs, settings, predictions, mapping
    )
    export.parent.mkdir(parents=True, exist_ok=True)
    write_compressed_export(export, records)
    statistics = attention_statistics(row for rows in pooled for row in rows)
    statistics["by_layer"] = [
        attention_statistics(row for rows in layer for row in rows) for layer in by_layer
    ]
    statistics["sentences"] = min(STATISTICS_PAIRS, len(pairs))
    alphas = learned_alphas(model)
    if alphas is not None:
        statistics["alpha"] = alphas
    statistics["export"] = str(export)
    scores = [100 * int(c) for c in correct]
    return {
        "metrics": {"accuracy": round(sum(scores) / len(scores), 2)},
        "items": {"kind": "mean", "n": len(scores), "scores": {"accuracy": scores}},
        "decode_wall_s": round(elapsed, 1),
        "attention": statistics,
    }
