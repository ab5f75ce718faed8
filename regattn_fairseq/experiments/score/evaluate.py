"""Scoring one evaluation set of a trained model with the metric its experiment names."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from regattn.analysis import read_export
from regattn_fairseq.experiments.core.errors import ReproError
from regattn_fairseq.experiments.data.builders.inflection import decode_target
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.data.text_processing import moses_detokenize
from regattn_fairseq.experiments.decode import tagging
from regattn_fairseq.experiments.decode.decode import (
    decode,
    export_and_measure_attention,
    read_lines,
    validate_accuracy,
)
from regattn_fairseq.experiments.score import scorers as scoring
from regattn_fairseq.experiments.score.rouge import MEASURES, ROUGE_TYPES
from regattn_fairseq.experiments.score.rouge import item_scores as rouge_item_scores
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
        bleu, rouge_f1, rouge_recall, exact_match, accuracy or entity_f1 (tagging.py).
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
        unknown evaluation set or scorer, or a failed tool.
    """
    if scorer == "entity_f1":  # the NER tagger: Viterbi decoding, seqeval (tagging.py)
        return tagging.evaluate(model, prepared, name, out_dir)
    evaluation = prepared.evaluation(name)
    subset = evaluation["subset"]
    attention = export_and_measure_attention(
        model, prepared, subset, out_dir, decode_cfg, classifier=scorer == "accuracy"
    )
    if scorer == "accuracy":
        accuracy, elapsed = validate_accuracy(model, prepared, subset, out_dir)
        return {
            "metrics": {"accuracy": round(accuracy, 2)},
            "decode_wall_s": round(elapsed, 1),
            "attention": attention,
            "items": _classifier_items(Path(attention["export"])),
        }

    hypotheses, elapsed = decode(
        model, prepared, subset, out_dir, decode_cfg, remove_bpe=scorer == "bleu"
    )
    result = {
        "decode_wall_s": round(elapsed, 1),
        "hypotheses": str(out_dir / f"{name}.hyp"),
        "attention": attention,
    }
    if scorer == "bleu":
        hypotheses = [moses_detokenize(h, evaluation["detokenize"]) for h in hypotheses]
        references = read_lines(evaluation["refs"][0])
        result["metrics"], result["signature"] = scoring.bleu(hypotheses, references)
        result["items"] = {
            "kind": "bleu",
            "n": len(hypotheses),
            "hypotheses": hypotheses,
            "references": references,
        }
        print(
            f"[score] {name}: BLEU {result['metrics']['bleu']}  ({result['signature']})", flush=True
        )
    elif scorer in ("rouge_f1", "rouge_recall"):
        references = list(zip(*(read_lines(path) for path in evaluation["refs"]), strict=True))
        measure = "fmeasure" if scorer == "rouge_f1" else "recall"
        truncate = evaluation.get("truncate_bytes")
        result["metrics"] = scoring.rouge(
            hypotheses, [list(refs) for refs in references], measure=measure, truncate=truncate
        )
        result["signature"] = scoring.rouge_signature(measure, truncate, len(evaluation["refs"]))
        per_item = [
            rouge_item_scores(h, list(refs), truncate)
            for h, refs in zip(hypotheses, references, strict=True)
        ]
        column = MEASURES.index(measure)
        result["items"] = {
            "kind": "mean",
            "n": len(per_item),
            "scores": {
                t: [round(100 * item[t][column], 4) for item in per_item] for t in ROUGE_TYPES
            },
        }
    elif scorer == "exact_match":
        hypotheses = [decode_target(h) for h in hypotheses]
        gold, languages = read_lines(evaluation["refs"][0]), read_lines(evaluation["languages"])
        result["metrics"] = scoring.exact_match(hypotheses, gold, languages)
        result["items"] = {
            "kind": "macro",
            "n": len(gold),
            "correct": [int(h == g) for h, g in zip(hypotheses, gold, strict=True)],
            "groups": languages,
        }
    else:
        raise ReproError(f"unknown scorer {scorer!r}")
    Path(result["hypotheses"]).write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    return result


def _classifier_items(export: Path) -> dict:
    """Per-item correctness of the SNLI classifier, from its attention export (in id order)."""

    records = sorted(read_export(export), key=lambda r: int(r["id"]))
    return {
        "kind": "mean",
        "n": len(records),
        "scores": {"accuracy": [100 * int(r["prediction"] == r["label"]) for r in records]},
    }
