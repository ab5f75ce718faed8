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
    learned_alphas,
)
from regattn_fairseq.tasks.regattn_snli import LABELS

# pairs whose attention the statistics read (every layer, head and query token of each), and
# pairs kept in the export the figures draw from
STATISTICS_PAIRS = 100
EXPORT_PAIRS = 50


def _real_rows(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One example's attention rows over its real tokens: (heads * n, n), float32."""
    return weights[:, mask][:, :, mask].float().reshape(-1, int(mask.sum()))


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
    correct, pooled, records = [], [], []
    by_layer: list[list[torch.Tensor]] = []
    seen = 0
    size = 2 * settings.batch_size
    with torch.no_grad(), autocast(settings):
        for batch in batches(pairs, tokenizer, size, settings.max_length):
            measure = max(0, min(STATISTICS_PAIRS - seen, len(batch["labels"])))
            out = model(**batch, output_attentions=measure > 0)
            predictions = out.logits.argmax(-1)
            correct += (predictions == batch["labels"]).tolist()
            masks = batch["attention_mask"].bool()
            for example in range(measure):
                mask = masks[example]
                for layer, weights in enumerate(out.attentions):
                    rows = _real_rows(weights[example], mask)
                    if layer == len(by_layer):
                        by_layer.append([])
                    by_layer[layer].append(rows)
                    pooled.append(rows)
                if seen + example < EXPORT_PAIRS:
                    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][example][mask])
                    last = _real_rows(out.attentions[-1][example], mask)
                    heads = out.attentions[-1].shape[1]
                    mean = last.reshape(heads, len(tokens), len(tokens)).mean(0)
                    records.append(
                        {
                            "id": str(seen + example),
                            "src_tokens": tokens,
                            "tgt_tokens": tokens,
                            "attention": [[round(float(w), 5) for w in row] for row in mean],
                            "mapping": {
                                **mapping,
                                "layer": len(out.attentions) - 1,
                                "heads": "mean",
                            },
                            "label": LABELS[int(batch["labels"][example])],
                            "prediction": LABELS[int(predictions[example])],
                        }
                    )
            seen += len(batch["labels"])
    elapsed = time.time() - started
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
