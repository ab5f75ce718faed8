"""Scoring one evaluation set of a trained model with the metric its experiment names."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.data.test_sets import prepared_gold
from regattn_fairseq.experiments.decode import tagging
from regattn_fairseq.experiments.decode.attention_format import read_export
from regattn_fairseq.experiments.decode.decode import (
    decode,
    export_and_measure_attention,
    validate_accuracy,
)
from regattn_fairseq.experiments.score.metrics import metric as find_metric
from regattn_fairseq.experiments.train.train import TrainedModel


def evaluate(
    model: TrainedModel,
    prepared: PreparedData,
    name: str,
    scorer: str,
    decode_cfg: DictConfig,
    out_dir: Path,
) -> dict:
    """Decode (or classify) one evaluation set and score it.

    Parameters
    ----------
    model : TrainedModel
        the trained model.
    prepared : PreparedData
        its data.
    name : str
        the evaluation set (a key of the manifest's evaluations).
    scorer : str
        the metric (`metrics.METRICS`).
    decode_cfg : DictConfig
        beam and batch_size.
    out_dir : Path
        where hypotheses, logs and the attention export go.

    Returns
    -------
    dict
        ``{"metrics", "decode_wall_s", "attention", ...}`` (plus "hypotheses" and
        "signature" for the generation scorers).

    Raises
    ------
    ReproError
        unknown evaluation set or metric, or a failed tool.
    """
    metric = find_metric(scorer)
    if metric.decode == "tag":  # the NER tagger: Viterbi decoding, seqeval (tagging.py)
        return tagging.evaluate(model, prepared, name, out_dir)
    evaluation = prepared.evaluation(name)
    subset = evaluation["subset"]
    classify = metric.decode == "classify"
    attention = export_and_measure_attention(
        model, prepared, subset, out_dir, decode_cfg, classifier=classify
    )
    if classify:  # fairseq-validate's accuracy; the items from the export's predictions
        accuracy, elapsed = validate_accuracy(model, prepared, subset, out_dir)
        return {
            "metrics": {"accuracy": round(accuracy, 2)},
            "decode_wall_s": round(elapsed, 1),
            "attention": attention,
            "items": _classifier_items(Path(attention["export"])),
        }
    hypotheses, elapsed = decode(
        model, prepared, subset, out_dir, decode_cfg, remove_bpe=metric.remove_bpe
    )
    gold = prepared_gold(evaluation)
    outputs = metric.from_decoder(hypotheses, gold)
    scored = metric.score(outputs, gold)
    hypotheses_file = out_dir / f"{name}.hyp"
    hypotheses_file.write_text("\n".join(outputs) + "\n", encoding="utf-8")
    print(f"[score] {name}: {scored.metrics}  ({scored.signature})", flush=True)
    return {
        "metrics": scored.metrics,
        "signature": scored.signature,
        "items": scored.items,
        "decode_wall_s": round(elapsed, 1),
        "hypotheses": str(hypotheses_file),
        "attention": attention,
    }


def _classifier_items(export: Path) -> dict:
    """Per-item correctness of the SNLI classifier, from its attention export (in id order)."""

    records = sorted(read_export(export), key=lambda r: int(r["id"]))
    return {
        "kind": "mean",
        "n": len(records),
        "scores": {"accuracy": [100 * int(r["prediction"] == r["label"]) for r in records]},
    }
