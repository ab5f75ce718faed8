"""ROUGE-1, ROUGE-2 and ROUGE-L as ROUGE-1.5.5 computes them for single-sentence summaries.

The settings of the summarization literature are ROUGE-1.5.5's ``-m -n 2 -w 1.2 -a`` (Gigaword,
F-measure) and the same with ``-b 75`` (DUC 2004, recall, 4 references). This module
reproduces what that script computes, so that no Perl is needed:

- text: each line is one summary (the script's SPL format). With a byte limit, the first
  `truncate` bytes of the raw line are kept, for the system summary and for every reference.
  The text is lowercased (ASCII only) and every character outside ``[A-Za-z0-9]`` separates
  tokens (hyphens split words and are dropped).
- stemming (``-m``): a token longer than 3 characters is replaced by its WordNet 2.0 base form
  when it is an irregular form (sent -> send, been -> be), else stemmed by the script's Porter
  stemmer (`porter_stem`, which differs from NLTK's in step 4).
- several references (``-f A``): the matches are pooled, not averaged: recall is the sum of
  the clipped n-gram (or LCS) hits over the references divided by the sum of the reference
  n-gram counts; precision divides the same hits by the hypothesis n-gram count times the
  number of references; F = P R / ((1 - a) P + a R) with a = 0.5.
- corpus score: the mean of the per-item scores (each rounded to 5 decimals first, as the
  script does). The script prints the mean over 1000 bootstrap resamples instead, which
  differs from the plain mean by about 0.01 points.

The WordNet exception lists ship in ``rouge_data/wordnet-2.0-exceptions`` with their licence.
"""

from __future__ import annotations

import re
from functools import lru_cache

from regattn_fairseq.experiments.core.paths import ROUGE_EXCEPTIONS_DIR

# Bumped whenever a change can move a score; printed in every signature.
SCORER_VERSION = 2
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
MEASURES = ("recall", "precision", "fmeasure")

# ROUGE-1.5.5's default F-measure weight (-p 0.5).
ALPHA = 0.5

_TOKEN = re.compile(r"[A-Za-z0-9]+")

# The Porter stemmer's letter classes as the script writes them: y is a consonant for `_C`
# (a leading y is uppercased before stemming so that it never counts as a vowel).
_C = "[^aeiou]"
_V = "[aeiouy]"
_CS = f"{_C}[^aeiouy]*"
_VS = f"{_V}[aeiou]*"
_M_GT0 = re.compile(f"^({_CS})?{_VS}{_CS}")
_M_EQ1 = re.compile(f"^({_CS})?{_VS}{_CS}({_VS})?$")
_M_GT1 = re.compile(f"^({_CS})?{_VS}{_CS}{_VS}{_CS}")
_HAS_VOWEL = re.compile(f"^({_CS})?{_V}")
_CVC = re.compile(f"^{_CS}{_V}[^aeiouwxy]$")
_STEP2 = {
    "ational": "ate",
    "tional": "tion",
    "enci": "ence",
    "anci": "ance",
    "izer": "ize",
    "bli": "ble",
    "alli": "al",
    "entli": "ent",
    "eli": "e",
    "ousli": "ous",
    "ization": "ize",
    "ation": "ate",
    "ator": "ate",
    "alism": "al",
    "iveness": "ive",
    "fulness": "ful",
    "ousness": "ous",
    "aliti": "al",
    "iviti": "ive",
    "biliti": "ble",
    "logi": "log",
}
_STEP3 = {
    "icate": "ic",
    "ative": "",
    "alize": "al",
    "iciti": "ic",
    "ical": "ic",
    "ful": "",
    "ness": "",
}
_STEP2_SUFFIX = re.compile(f"({'|'.join(_STEP2)})$")
_STEP3_SUFFIX = re.compile(f"({'|'.join(_STEP3)})$")
# Step 4 as modified in ROUGE-1.5.5 (2004): "ement" is tried with the other suffixes, then
# "ment", then "ent" or "(s|t)ion", each on the result of the previous test, so that up to
# three suffixes can go (agreement -> agreem, experimental -> experi).
_STEP4_SUFFIX = re.compile("(al|ance|ence|er|ic|able|ible|ant|ement|ou|ism|ate|iti|ous|ive|ize)$")


def porter_stem(word: str) -> str:
    """Stem a lowercase word with the Porter stemmer exactly as ROUGE-1.5.5 does.

    That is Martin Porter's reference rules (step 2 with bli -> ble and logi -> log), with
    ROUGE-1.5.5's change to step 4 (see `_STEP4_SUFFIX`); NLTK's modes differ from it.

    Parameters
    ----------
    word : str
        a lowercase token of ASCII letters and digits.

    Returns
    -------
    str
        The stem (the word itself when it has fewer than 3 characters).
    """
    if len(word) < 3:
        return word
    leading_y = word[0] == "y"
    if leading_y:
        word = "Y" + word[1:]
    # Step 1a
    if match := re.search("(ss|i)es$", word):
        word = word[: match.start()] + match.group(1)
    elif match := re.search("([^s])s$", word):
        word = word[: match.start()] + match.group(1)
    # Step 1b
    if word.endswith("eed"):
        if _M_GT0.search(word[:-3]):
            word = word[:-1]
    elif match := re.search("(ed|ing)$", word):
        stem = word[: match.start()]
        if _HAS_VOWEL.search(stem):
            word = stem
            if re.search("(at|bl|iz)$", word):
                word += "e"
            elif re.search(r"([^aeiouylsz])\1$", word):
                word = word[:-1]
            elif _CVC.search(word):
                word += "e"
    # Step 1c
    if word.endswith("y") and _HAS_VOWEL.search(word[:-1]):
        word = word[:-1] + "i"
    # Steps 2 and 3
    for pattern, replacements in ((_STEP2_SUFFIX, _STEP2), (_STEP3_SUFFIX, _STEP3)):
        if match := pattern.search(word):
            stem = word[: match.start()]
            if _M_GT0.search(stem):
                word = stem + replacements[match.group(1)]
    # Step 4
    if (match := _STEP4_SUFFIX.search(word)) and _M_GT1.search(word[: match.start()]):
        word = word[: match.start()]
    if word.endswith("ment") and _M_GT1.search(word[:-4]):
        word = word[:-4]
    if word.endswith("ent"):
        if _M_GT1.search(word[:-3]):
            word = word[:-3]
    elif match := re.search("(s|t)ion$", word):
        stem = word[: match.start() + 1]
        if _M_GT1.search(stem):
            word = stem
    # Step 5
    if word.endswith("e"):
        stem = word[:-1]
        if _M_GT1.search(stem) or (_M_EQ1.search(stem) and not _CVC.search(stem)):
            word = stem
    if word.endswith("ll") and _M_GT1.search(word):
        word = word[:-1]
    if leading_y:
        word = "y" + word[1:]
    return word


@lru_cache(maxsize=1)
def wordnet_exceptions() -> dict[str, str]:
    """The WordNet 2.0 irregular forms, as ROUGE-1.5.5's exception database maps them.

    Returns
    -------
    dict
        inflected form -> base form (the first base form of its line). The four lists are
        merged in alphabetical order, a later entry replacing an earlier one: this is the
        content of the official ``WordNet-2.0.exc.db`` (best -> well, not good).

    Raises
    ------
    FileNotFoundError
        the lists are missing from the installed package.
    """
    table = {}
    for path in sorted(ROUGE_EXCEPTIONS_DIR.glob("*.exc")):
        for line in path.read_text(encoding="ascii").splitlines():
            fields = line.split()
            if len(fields) >= 2:
                table[fields[0]] = fields[1]
    if not table:
        raise FileNotFoundError(f"no WordNet exception lists (*.exc) in {ROUGE_EXCEPTIONS_DIR}")
    return table


@lru_cache(maxsize=1 << 16)
def stem_token(token: str) -> str:
    """ROUGE-1.5.5's ``-m`` stemming of one token.

    Parameters
    ----------
    token : str
        a lowercase token of ASCII letters and digits.

    Returns
    -------
    str
        The token itself when it has at most 3 characters, else its WordNet base form when it
        is an irregular form, else its Porter stem.
    """
    if len(token) <= 3:
        return token
    return wordnet_exceptions().get(token) or porter_stem(token)


def tokenize(text: str, stem: bool = True) -> list[str]:
    """ROUGE-1.5.5's tokens of one summary.

    Parameters
    ----------
    text : str
        the summary (already cut to the byte limit, if any).
    stem : bool
        apply the ``-m`` stemming (`stem_token`).

    Returns
    -------
    list of str
        Lowercase tokens of ASCII letters and digits; every other character separates them.
    """
    # Lowercasing after the ASCII filter keeps it ASCII-only like the script's tr/A-Z/a-z/
    # (str.lower would turn some non-ASCII letters into ASCII ones, e.g. the Kelvin sign).
    tokens = [t.lower() for t in _TOKEN.findall(text)]
    return [stem_token(t) for t in tokens] if stem else tokens


def truncate_bytes(text: str, limit: int) -> str:
    """The first `limit` bytes of the UTF-8 text, never splitting a character.

    A character cut in two by the limit is dropped; ROUGE-1.5.5 keeps its first bytes, which
    its tokenizer turns into a separator, so the tokens are the same.

    Parameters
    ----------
    text : str
        the raw summary line.
    limit : int
        the number of bytes to keep.

    Returns
    -------
    str
        The truncated text.
    """
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


def _ngrams(tokens: list[str], n: int) -> dict[tuple, int]:
    counts: dict[tuple, int] = {}
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i : i + n])
        counts[gram] = counts.get(gram, 0) + 1
    return counts


def _lcs_length(first: list[str], second: list[str]) -> int:
    if not first or not second:
        return 0
    previous = [0] * (len(second) + 1)
    for a in first:
        current = [0]
        for j, b in enumerate(second):
            current.append(previous[j] + 1 if a == b else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def _scores(hits: int, reference_count: int, hypothesis_count: int) -> tuple[float, float, float]:
    # The script formats R and P with "%7.5f" and computes F from those rounded values.
    recall = round(hits / reference_count, 5) if reference_count else 0.0
    precision = round(hits / hypothesis_count, 5) if hypothesis_count else 0.0
    denominator = (1 - ALPHA) * precision + ALPHA * recall
    fmeasure = round(precision * recall / denominator, 5) if denominator > 0 else 0.0
    return recall, precision, fmeasure


def item_scores(
    hypothesis: str, references: list[str], truncate: int | None = None, stem: bool = True
) -> dict[str, tuple[float, float, float]]:
    """ROUGE-1/2/L of one summary against all its references, pooled (``-f A``).

    Parameters
    ----------
    hypothesis : str
        the system summary (one line).
    references : list of str
        the reference summaries of the same item.
    truncate : int, optional
        byte limit (``-b``), applied to the hypothesis and to every reference.
    stem : bool
        ROUGE-1.5.5's ``-m`` stemming.

    Returns
    -------
    dict
        ``rouge1``, ``rouge2``, ``rougeL`` -> (recall, precision, F-measure), fractions in [0, 1].
    """
    if truncate is not None:
        hypothesis = truncate_bytes(hypothesis, truncate)
        references = [truncate_bytes(r, truncate) for r in references]
    hyp_tokens = tokenize(hypothesis, stem)
    ref_tokens = [tokenize(r, stem) for r in references]
    result = {}
    for n, rouge_type in ((1, "rouge1"), (2, "rouge2")):
        hyp_grams = _ngrams(hyp_tokens, n)
        hyp_count = max(len(hyp_tokens) - n + 1, 0)
        hits = reference_count = 0
        for tokens in ref_tokens:
            ref_grams = _ngrams(tokens, n)
            hits += sum(min(count, hyp_grams.get(gram, 0)) for gram, count in ref_grams.items())
            reference_count += max(len(tokens) - n + 1, 0)
        result[rouge_type] = _scores(hits, reference_count, hyp_count * len(ref_tokens))
    # For one-sentence summaries the script's union-LCS with unigram clipping is the plain LCS.
    hits = sum(_lcs_length(tokens, hyp_tokens) for tokens in ref_tokens)
    reference_count = sum(len(tokens) for tokens in ref_tokens)
    result["rougeL"] = _scores(hits, reference_count, len(hyp_tokens) * len(ref_tokens))
    return result


def corpus_scores(
    hypotheses: list[str],
    references: list[list[str]],
    truncate: int | None = None,
    stem: bool = True,
) -> dict[str, dict[str, float]]:
    """Mean ROUGE-1/2/L over a corpus, ROUGE-1.5.5 style.

    Parameters
    ----------
    hypotheses : list of str
        one system summary per item.
    references : list of list of str
        ``references[i]``: every reference of item i.
    truncate : int, optional
        byte limit (``-b``) for hypotheses and references.
    stem : bool
        ROUGE-1.5.5's ``-m`` stemming.

    Returns
    -------
    dict
        ``rouge1``, ``rouge2``, ``rougeL`` -> {"recall", "precision", "fmeasure"}: means over
        the items, in percent (unrounded).

    Raises
    ------
    ValueError
        the two lists differ in length.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} outputs but {len(references)} references")
    totals = {rouge_type: [0.0, 0.0, 0.0] for rouge_type in ROUGE_TYPES}
    for hypothesis, item_refs in zip(hypotheses, references, strict=True):
        for rouge_type, values in item_scores(hypothesis, item_refs, truncate, stem).items():
            for index, value in enumerate(values):
                totals[rouge_type][index] += value
    count = max(len(hypotheses), 1)
    return {
        rouge_type: {
            measure: 100 * total / count for measure, total in zip(MEASURES, values, strict=True)
        }
        for rouge_type, values in totals.items()
    }


def signature(measure: str, truncate: int | None, n_references: int) -> str:
    """The settings string printed beside ROUGE scores.

    Parameters
    ----------
    measure : str
        ``recall``, ``precision`` or ``fmeasure`` (the one reported).
    truncate : int, optional
        the byte limit, if any.
    n_references : int
        references per item.

    Returns
    -------
    str
        e.g. ``"ROUGE-1.5.5-compatible -m -n 2 -w 1.2 -b 75 -a, recall, 4 refs,
        regattn scorer v2"`` (one line).
    """
    limit = f" -b {truncate}" if truncate else ""
    name = {"fmeasure": "F1"}.get(measure, measure)
    refs = f"{n_references} ref{'s' if n_references != 1 else ''}"
    options = f"-m -n 2 -w 1.2{limit} -a"
    return f"ROUGE-1.5.5-compatible {options}, {name}, {refs}, regattn scorer v{SCORER_VERSION}"
