"""Scorers for every table, on plain lists of strings.

- BLEU: sacrebleu on detokenized text (its signature is returned and printed with results).
- ROUGE-1/2/L: what ROUGE-1.5.5 computes (`rouge` module: its tokens, `-m` stemming with the
  WordNet exceptions and its Porter stemmer, matches pooled over the references as `-f A`
  does). Gigaword: full-length F1 against the single reference (`-m -n 2 -w 1.2 -a`).
  DUC 2004: recall with the summary and every reference cut to their first 75 bytes
  (`-b 75`), 4 references.
- accuracy (SNLI) and exact-match accuracy (inflection, per language and macro-averaged).
All scores are percentages."""

from __future__ import annotations

from collections import defaultdict

from regattn_fairseq.experiments.score import rouge as rouge_module
from regattn_fairseq.experiments.score.rouge import ROUGE_TYPES, truncate_bytes
from regattn_fairseq.experiments.score.rouge import signature as rouge_signature

__all__ = [
    "ROUGE_TYPES",
    "accuracy",
    "bleu",
    "exact_match",
    "rouge",
    "rouge_signature",
    "truncate_bytes",
]


def bleu(hypotheses: list[str], references: list[str]) -> tuple[dict, str]:
    """Corpus BLEU and sacrebleu's signature."""
    from sacrebleu.metrics import BLEU

    _check_aligned(hypotheses, references)
    metric = BLEU()
    score = metric.corpus_score(hypotheses, [references])
    return {"bleu": round(score.score, 2)}, str(metric.get_signature())


def rouge(
    hypotheses: list[str], references: list[list[str]], measure: str, truncate: int | None = None
) -> dict:
    """Mean ROUGE-1/2/L `measure` over the corpus, as ROUGE-1.5.5 computes it.

    Parameters
    ----------
    hypotheses : list of str
        one system summary per item.
    references : list of list of str
        ``references[i]``: every reference of item i (their matches are pooled).
    measure : str
        ``fmeasure``, ``recall`` or ``precision``.
    truncate : int, optional
        byte limit (ROUGE-1.5.5's ``-b``) for the hypotheses and the references.

    Returns
    -------
    dict
        ``rouge1``, ``rouge2``, ``rougeL``: percentages, 2 decimals.

    Raises
    ------
    ValueError
        unknown `measure`, or the two lists differ in length.
    """
    if measure not in rouge_module.MEASURES:
        raise ValueError(
            f"unknown ROUGE measure {measure!r}; choose one of {', '.join(rouge_module.MEASURES)}"
        )
    _check_aligned(hypotheses, references)
    scores = rouge_module.corpus_scores(hypotheses, references, truncate)
    return {rouge_type: round(values[measure], 2) for rouge_type, values in scores.items()}


def accuracy(predictions: list[str], gold: list[str]) -> dict:
    """Percentage of predictions equal to the gold item (SNLI labels, inflected forms)."""
    _check_aligned(predictions, gold)
    correct = sum(p == g for p, g in zip(predictions, gold, strict=True))
    return {"accuracy": round(100 * correct / max(len(gold), 1), 2)}


def exact_match(predictions: list[str], gold: list[str], languages: list[str]) -> dict:
    """Exact-match accuracy per language (`acc_<lang>`) and their macro average (`accuracy`),
    the shared task's headline number."""
    _check_aligned(predictions, gold)
    _check_aligned(predictions, languages)
    by_language = defaultdict(lambda: ([], []))
    for prediction, form, lang in zip(predictions, gold, languages, strict=True):
        by_language[lang][0].append(prediction)
        by_language[lang][1].append(form)
    per_language = {
        f"acc_{lang}": accuracy(*by_language[lang])["accuracy"] for lang in sorted(by_language)
    }
    macro = sum(per_language.values()) / max(len(per_language), 1)
    return {"accuracy": round(macro, 2), **per_language}


def _check_aligned(first: list, second: list) -> None:
    if len(first) != len(second):
        raise ValueError(f"{len(first)} outputs but {len(second)} references")
