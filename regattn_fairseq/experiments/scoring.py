"""Scorers for every table, on plain lists of strings.

- BLEU: sacrebleu on detokenized text (its signature is returned and printed with results).
- ROUGE-1/2/L: Google's `rouge-score` with the Porter stemmer (ROUGE-1.5.5's `-m`).
  Gigaword: full-length F1 against the single reference.
  DUC 2004: recall with each summary cut to its first 75 bytes (ROUGE-1.5.5 `-b 75`), scored
  against each of the 4 references and AVERAGED over them, as ROUGE-1.5.5 does by default
  (`-f A`, model average); rouge-score's own `score_multi` would take the max instead.
- accuracy (SNLI) and exact-match accuracy (inflection, per language and macro-averaged).
All scores are percentages."""

from __future__ import annotations

from collections import defaultdict

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def bleu(hypotheses: list[str], references: list[str]) -> tuple[dict, str]:
    """Corpus BLEU and sacrebleu's signature."""
    from sacrebleu.metrics import BLEU

    _check_aligned(hypotheses, references)
    metric = BLEU()
    score = metric.corpus_score(hypotheses, [references])
    return {"bleu": round(score.score, 2)}, str(metric.get_signature())


def truncate_bytes(text: str, limit: int) -> str:
    """The first `limit` bytes of the UTF-8 text, never splitting a character."""
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


def rouge(hypotheses: list[str], references: list[list[str]], measure: str,
          truncate: int | None = None) -> dict:
    """Mean ROUGE-1/2/L `measure` ('fmeasure' or 'recall') over the corpus.

    references[i] holds every reference of item i; per-item scores are averaged over them."""
    from rouge_score import rouge_scorer

    _check_aligned(hypotheses, references)
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for hypothesis, item_refs in zip(hypotheses, references):
        if truncate is not None:
            hypothesis = truncate_bytes(hypothesis, truncate)
        per_ref = [scorer.score(ref, hypothesis) for ref in item_refs]
        for rouge_type in ROUGE_TYPES:
            totals[rouge_type] += sum(getattr(s[rouge_type], measure) for s in per_ref) / len(per_ref)
    return {k: round(100 * v / max(len(hypotheses), 1), 2) for k, v in totals.items()}


def accuracy(predictions: list[str], gold: list[str]) -> dict:
    """Percentage of predictions equal to the gold item (SNLI labels, inflected forms)."""
    _check_aligned(predictions, gold)
    correct = sum(p == g for p, g in zip(predictions, gold))
    return {"accuracy": round(100 * correct / max(len(gold), 1), 2)}


def exact_match(predictions: list[str], gold: list[str], languages: list[str]) -> dict:
    """Exact-match accuracy per language (`acc_<lang>`) and their macro average (`accuracy`),
    the shared task's headline number."""
    _check_aligned(predictions, gold)
    _check_aligned(predictions, languages)
    by_language = defaultdict(lambda: ([], []))
    for prediction, form, lang in zip(predictions, gold, languages):
        by_language[lang][0].append(prediction)
        by_language[lang][1].append(form)
    per_language = {f"acc_{lang}": accuracy(*by_language[lang])["accuracy"] for lang in sorted(by_language)}
    macro = sum(per_language.values()) / max(len(per_language), 1)
    return {"accuracy": round(macro, 2), **per_language}


def _check_aligned(first: list, second: list) -> None:
    if len(first) != len(second):
        raise ValueError(f"{len(first)} outputs but {len(second)} references")
