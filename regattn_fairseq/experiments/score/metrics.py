"""The metric registry: every metric the suite scores with, declared once.

A metric is named by the test sets (`data.test_sets.TEST_SETS`), the one place that says
which metric scores an evaluation set: the experiments of configs/reproduce/*.yaml and
configs/sweep/*.yaml name their test sets, `scripts/score.py` takes one. Its declaration says
how the model's outputs are obtained (`Metric.decode`), how fairseq's output becomes the text
it scores (`Metric.from_decoder`), how it scores aligned outputs against a test set's
references (metrics, signature and the per-item values a paired bootstrap resamples:
`Metric.score`), and which bootstrap statistic those values have (`Metric.item_kind`, a key of
`significance.ITEM_KINDS`).

Adding a metric: a scorer in `scorers`, an entry here, and, if its per-item values resample
differently from the kinds there, an `ItemKind` in `significance` (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.data.builders.inflection import decode_target
from regattn_fairseq.experiments.data.gold import Gold
from regattn_fairseq.experiments.data.text_processing import moses_detokenize
from regattn_fairseq.experiments.decode import tagging
from regattn_fairseq.experiments.score import scorers
from regattn_fairseq.experiments.score.rouge import MEASURES, ROUGE_TYPES, item_scores


@dataclass(frozen=True)
class Scored:
    """A metric's scores of aligned outputs.

    Attributes
    ----------
    metrics : dict
        the metric's columns (percentages, 2 decimals), e.g. ``{"bleu": 27.3}``.
    signature : str
        the scorer's settings, shown under the table.
    items : dict
        the per-item values (`significance.write_items`; ``kind`` is the metric's item kind).
    """

    metrics: dict
    signature: str
    items: dict


@dataclass(frozen=True)
class Metric:
    """One metric.

    Attributes
    ----------
    name : str
        as test sets name it (`data.test_sets.TestSet.metric`).
    decode : str
        how the model's outputs are obtained: ``generate`` (beam search, fairseq-generate),
        ``classify`` (fairseq-validate; the SNLI classifier) or ``tag`` (the NER tagger's
        Viterbi decoding, which scores its own entities: `decode.tagging.evaluate`).
    item_kind : str
        the kind of its per-item values and bootstrap statistic (`significance.ITEM_KINDS`).
    score : callable or None
        ``score(outputs, gold) -> Scored`` on aligned outputs (for ``tag``, outputs that are
        not the tagger's own, e.g. a baseline's).
    from_decoder : callable
        ``from_decoder(hypotheses, gold) -> outputs``: fairseq-generate's hypotheses as the
        text the metric scores (detokenised for BLEU, the inflected form for exact match).
    remove_bpe : bool
        fairseq-generate removes the BPE segmentation (BLEU scores words).
    rouge_measure : str or None
        a ROUGE metric's measure (``fmeasure``, ``recall``), for the official script's
        cross-check (`pipelines.score_file`).
    """

    name: str
    decode: str
    item_kind: str
    score: Callable[[list[str], Gold], Scored] | None
    from_decoder: Callable[[list[str], Gold], list[str]] = lambda hypotheses, gold: hypotheses
    remove_bpe: bool = False
    rouge_measure: str | None = None


def _first_references(gold: Gold) -> list[str]:
    return [refs[0] for refs in gold.references]


def _bleu(outputs: list[str], gold: Gold) -> Scored:
    references = _first_references(gold)
    metrics, signature = scorers.bleu(outputs, references)
    items = {"kind": "bleu", "n": len(outputs), "hypotheses": outputs, "references": references}
    return Scored(metrics, signature, items)


def _rouge(outputs: list[str], gold: Gold, measure: str) -> Scored:
    truncate = gold.truncate_bytes
    metrics = scorers.rouge(outputs, gold.references, measure, truncate)
    signature = scorers.rouge_signature(measure, truncate, len(gold.references[0]))
    per_item = [
        item_scores(output, refs, truncate)
        for output, refs in zip(outputs, gold.references, strict=True)
    ]
    column = MEASURES.index(measure)
    scores = {t: [round(100 * item[t][column], 4) for item in per_item] for t in ROUGE_TYPES}
    return Scored(metrics, signature, {"kind": "mean", "n": len(per_item), "scores": scores})


def _exact_match(outputs: list[str], gold: Gold) -> Scored:
    forms = _first_references(gold)
    metrics = scorers.exact_match(outputs, forms, gold.languages)
    items = {
        "kind": "macro",
        "n": len(forms),
        "correct": [int(o == f) for o, f in zip(outputs, forms, strict=True)],
        "groups": gold.languages,
    }
    return Scored(
        metrics, "exact match of the inflected form, macro-averaged over languages", items
    )


def _accuracy(outputs: list[str], gold: Gold) -> Scored:
    labels = _first_references(gold)
    correct = [100 * int(o == g) for o, g in zip(outputs, labels, strict=True)]
    items = {"kind": "mean", "n": len(correct), "scores": {"accuracy": correct}}
    return Scored(scorers.accuracy(outputs, labels), "accuracy of the predicted label", items)


def _entity_f1(outputs: list[str], gold: Gold) -> Scored:
    """IOB2 tag sequences, one sentence per output (space-separated), against the gold tags
    (the references' first column likewise): seqeval's entity scores and per-sentence counts.
    The tagger scores its own Viterbi decoding (`decode.tagging.evaluate`); this scores plain
    outputs, e.g. a baseline's (`rows.baselines`)."""
    tags = [refs.split() for refs in _first_references(gold)]
    predicted = [output.split() for output in outputs]
    return Scored(
        tagging.entity_scores(tags, predicted),
        "seqeval default mode (conlleval)",
        tagging.entity_counts(tags, predicted),
    )


def _detokenized(hypotheses: list[str], gold: Gold) -> list[str]:
    return [moses_detokenize(h, gold.detokenize) for h in hypotheses]


def _inflected_forms(hypotheses: list[str], gold: Gold) -> list[str]:
    return [decode_target(h) for h in hypotheses]


METRICS = {
    metric.name: metric
    for metric in (
        Metric("bleu", "generate", "bleu", _bleu, _detokenized, remove_bpe=True),
        *(
            Metric(name, "generate", "mean", partial(_rouge, measure=m), rouge_measure=m)
            for name, m in (("rouge_f1", "fmeasure"), ("rouge_recall", "recall"))
        ),
        Metric("exact_match", "generate", "macro", _exact_match, _inflected_forms),
        Metric("accuracy", "classify", "mean", _accuracy),
        Metric("entity_f1", "tag", "f1", _entity_f1),
    )
}


def metric(name: str) -> Metric:
    """The metric of that name.

    Raises
    ------
    ReproError
        no such metric (the message lists them).
    """
    try:
        return METRICS[name]
    except KeyError:
        raise ReproError(f"unknown metric {name!r}; known: {', '.join(METRICS)}") from None
