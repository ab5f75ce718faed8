"""Trivial baselines, scored like the systems and shown beside them in every table: the line a
reader checks first. A model that does not beat its table's baseline has not learned the task,
and differences between mappings below it say nothing about the mappings.

Each baseline reads the prepared data the models train and are scored on (`PreparedData`),
makes one output per evaluation item, and is scored by the systems' own scorer
(`score.metrics.metric(scorer).score`). Its rows go into the table's raw record like a
model's, with the baseline's name in the mapping column, ``seed`` 0 (deterministic) and its
settings as the config (so a finished baseline is skipped like a finished job, and a changed
one is a new cell). Declared per experiment in configs/reproduce/<table>.yaml
(``baselines: [lead]``).

- ``lead`` (summarization, Table 2): the start of the input article. With a byte limit (DUC
  2004: 75 bytes, `-b 75`) the scorer cuts it, so the baseline is the first 75 bytes, as in
  DUC's own lead baseline; without one (Gigaword, full-length F1) the first N words, N chosen
  on the validation pairs (best ROUGE-L F1 over N = 1..30).
- ``lead_digits_kept`` (summarization, the evaluation sets the models read digit-masked: DUC
  2004): the same lead, cut from the articles as distributed, digits kept, as DUC's own lead
  and its references have them (the models' input replaces digits by ``#``, as Rush et al.'s
  training data does, so ``lead`` loses every reference digit). Both rows are shown, each
  labelled.
- ``copy_source`` (NMT): the source sentence itself, BPE removed and detokenized like a
  system's output (names, numbers and shared words score some BLEU).
- ``copy_lemma`` (inflection): the lemma unchanged, the form that is right whenever the
  inflection is the identity.
- ``majority_class`` (SNLI): the most frequent training label for every pair.
- ``hypothesis_only`` (SNLI): a classifier that never reads the premise (Poliak et al. 2018,
  Gururangan et al. 2018: SNLI's hypotheses alone give away much of the label): logistic
  regression on the hypothesis's word unigrams and bigrams (scikit-learn), its inverse
  regularisation C chosen on the validation pairs.
- ``frequent_tag`` (NER): each word's most frequent tag in the training sentences (IOB2),
  ``O`` for a word never seen in training.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.core.result_row import ResultRow
from regattn_fairseq.experiments.data.builders.inflection import decode_target
from regattn_fairseq.experiments.data.builders.ner import iobes_to_iob2
from regattn_fairseq.experiments.data.fingerprint import data_fingerprint
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.data.sources import read_text_lines
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets, prepared_gold
from regattn_fairseq.experiments.data.text_processing import moses_detokenize
from regattn_fairseq.experiments.rows.build import Scored, job_rows
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.score import scorers
from regattn_fairseq.experiments.score.metrics import metric
from regattn_fairseq.experiments.score.significance import write_items

LEAD_WORDS_GRID = range(1, 31)


@dataclass(frozen=True)
class Baseline:
    """A baseline: its label in the tables, what it does, and how it makes its outputs.

    ``outputs(prepared, evaluation_name, evaluation)`` returns the outputs of one evaluation
    set (one string per item, in the form the scorer reads) and the settings it chose (e.g. a
    length chosen on validation), recorded in the row."""

    name: str
    label: str
    description: str
    outputs: Callable[[PreparedData, str, dict], tuple[list[str], dict]]
    # whether it scores an evaluation set (its manifest entry): all, unless it says otherwise
    applies: Callable[[dict], bool] = lambda evaluation: True


def _raw(prepared: PreparedData, split: str, side: str) -> list[str]:
    path = prepared.root / "raw" / f"{split}.{side}"
    if not path.is_file():
        raise ReproError(f"baseline: {path} is missing (prepare the data again)")
    return read_text_lines(path)


def _source_language(prepared: PreparedData) -> str:
    """The source language of a translation dataset (its prepare spec's ``src``), the suffix
    of its raw files."""
    return load_config("prepare", prepared.manifest["dataset"]).src


def _first_words(text: str, count: int) -> str:
    return " ".join(text.split()[:count])


def lead_outputs(prepared: PreparedData, name: str, evaluation: dict) -> tuple[list[str], dict]:
    """The lead of each article (see the module docstring)."""
    # the summarization builder's raw files: <split>.article and <split>.title
    articles = _raw(prepared, name, "article")
    if evaluation.get("truncate_bytes"):
        return articles, {"lead": f"first {evaluation['truncate_bytes']} bytes (the scorer's -b)"}
    valid_articles = _raw(prepared, "valid", "article")
    valid_titles = _raw(prepared, "valid", "title")
    validation = {}
    for count in LEAD_WORDS_GRID:
        leads = [_first_words(a, count) for a in valid_articles]
        rouge = scorers.rouge(leads, [[t] for t in valid_titles], measure="fmeasure")
        validation[count] = rouge["rougeL"]
    chosen = max(LEAD_WORDS_GRID, key=lambda count: (validation[count], -count))
    return [_first_words(a, chosen) for a in articles], {
        "lead": f"first {chosen} words",
        "words_chosen_on_validation": chosen,
        "validation_rougeL_f1": validation,
    }


def _has_digits_kept_articles(evaluation: dict) -> bool:
    return bool(evaluation.get("digits_kept_articles"))


def lead_digits_kept_outputs(
    prepared: PreparedData, name: str, evaluation: dict
) -> tuple[list[str], dict]:
    """The lead of each article as distributed, digits kept (see the module docstring)."""
    path = prepared.root / "raw" / evaluation["digits_kept_articles"]
    if not path.is_file():
        raise ReproError(f"baseline: {path} is missing (prepare the data again)")
    articles = read_text_lines(path)
    if not evaluation.get("truncate_bytes"):
        raise ReproError(
            f"baseline lead_digits_kept: evaluation set {name} has no byte limit; it is DUC's "
            "lead (the first bytes), for sets scored with one"
        )
    return articles, {
        "lead": f"first {evaluation['truncate_bytes']} bytes (the scorer's -b), digits kept"
    }


def copy_source_outputs(
    prepared: PreparedData, name: str, evaluation: dict
) -> tuple[list[str], dict]:
    """Each source sentence as the translation, BPE removed and detokenized."""
    src = _source_language(prepared)
    sources = _raw(prepared, name, src)
    joined = [line.replace("@@ ", "").removesuffix("@@") for line in sources]
    return [moses_detokenize(line, src) for line in joined], {}


def copy_lemma_outputs(
    prepared: PreparedData, name: str, evaluation: dict
) -> tuple[list[str], dict]:
    """Each lemma as its inflected form: the characters between the language tag and the
    first feature tag of the encoded source (`builders.inflection.encode_source`)."""
    lemmas = []
    for source in _raw(prepared, name, "src"):
        characters = []
        for token in source.split()[1:]:
            if token.startswith("<") and token.endswith(">") and len(token) > 2:
                break
            characters.append(token)
        lemmas.append(decode_target(" ".join(characters)))
    return lemmas, {}


def _labels(prepared: PreparedData, split: str) -> list[str]:
    path = prepared.bin_dir / "label" / f"{split}.label"
    if not path.is_file():
        raise ReproError(f"baseline: {path} is missing (prepare the data again)")
    return read_text_lines(path)


def majority_class_outputs(
    prepared: PreparedData, name: str, evaluation: dict
) -> tuple[list[str], dict]:
    """The most frequent training label (the first of ties, in label order) for every pair."""
    train = _labels(prepared, "train")
    majority = max(sorted(set(train)), key=train.count)
    return [majority] * len(_raw(prepared, name, "hypothesis")), {"label": majority}


HYPOTHESIS_ONLY_C = (0.1, 0.3, 1.0, 3.0, 10.0)


def hypothesis_only_outputs(
    prepared: PreparedData, name: str, evaluation: dict
) -> tuple[list[str], dict]:
    """Labels predicted from the hypothesis alone (see the module docstring)."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = CountVectorizer(token_pattern=r"\S+", ngram_range=(1, 2), lowercase=True)
    train_x = vectorizer.fit_transform(_raw(prepared, "train", "hypothesis"))
    train_y = _labels(prepared, "train")
    valid_x = vectorizer.transform(_raw(prepared, "valid", "hypothesis"))
    valid_y = _labels(prepared, "valid")
    validation, models = {}, {}
    for c in HYPOTHESIS_ONLY_C:
        model = LogisticRegression(C=c, max_iter=2000).fit(train_x, train_y)
        validation[c] = scorers.accuracy(list(model.predict(valid_x)), valid_y)["accuracy"]
        models[c] = model
    chosen = max(HYPOTHESIS_ONLY_C, key=lambda c: (validation[c], -c))
    test_x = vectorizer.transform(_raw(prepared, name, "hypothesis"))
    return [str(label) for label in models[chosen].predict(test_x)], {
        "features": "hypothesis word unigrams + bigrams, lowercased",
        "C_chosen_on_validation": chosen,
        "validation_accuracy": validation,
    }


def frequent_tag_outputs(
    prepared: PreparedData, name: str, evaluation: dict
) -> tuple[list[str], dict]:
    """Each word's most frequent training tag (the first of ties in tag order), IOB2."""
    counts: dict = {}
    words = read_text_lines(prepared.bin_dir / "train.word")
    tags = read_text_lines(prepared.bin_dir / "train.tag")
    for sentence, sentence_tags in zip(words, tags, strict=True):
        iob2 = iobes_to_iob2(sentence_tags.split())
        for word, tag in zip(sentence.split(), iob2, strict=True):
            counts.setdefault(word, Counter())[tag] += 1
    best = {word: max(sorted(c), key=c.__getitem__) for word, c in counts.items()}
    outputs = [
        " ".join(best.get(word, "O") for word in sentence.split())
        for sentence in read_text_lines(prepared.bin_dir / f"{evaluation['subset']}.word")
    ]
    return outputs, {"training_words": len(best)}


BASELINES = {
    baseline.name: baseline
    for baseline in (
        Baseline(
            "lead",
            "baseline: lead",
            "the start of the article (first 75 bytes with a byte limit, else the first N "
            "words, N chosen on validation ROUGE-L F1)",
            lead_outputs,
        ),
        Baseline(
            "lead_digits_kept",
            "baseline: lead, digits kept",
            "the first 75 bytes of the article as distributed, digits kept (the models read "
            "it with digits as '#')",
            lead_digits_kept_outputs,
            _has_digits_kept_articles,
        ),
        Baseline(
            "copy_source",
            "baseline: copy source",
            "the source sentence as the translation",
            copy_source_outputs,
        ),
        Baseline("copy_lemma", "baseline: copy lemma", "the lemma as the form", copy_lemma_outputs),
        Baseline(
            "majority_class",
            "baseline: majority class",
            "the most frequent training label",
            majority_class_outputs,
        ),
        Baseline(
            "hypothesis_only",
            "baseline: hypothesis only",
            "logistic regression on the hypothesis's word unigrams and bigrams, C chosen on "
            "validation; the premise is never read",
            hypothesis_only_outputs,
        ),
        Baseline(
            "frequent_tag",
            "baseline: most frequent tag",
            "each word's most frequent training tag, O for unseen words",
            frequent_tag_outputs,
        ),
    )
}


def baseline(name: str) -> Baseline:
    """The baseline called `name`.

    Raises
    ------
    ReproError
        no such baseline (the message lists them).
    """
    try:
        return BASELINES[name]
    except KeyError:
        raise ReproError(
            f"unknown baseline {name!r}; known: {', '.join(sorted(BASELINES))}"
        ) from None


def baseline_evaluations(name: str, experiment, prepared: PreparedData) -> list[str]:
    """The experiment's evaluation sets that baseline `name` scores (`Baseline.applies`): a
    finished baseline has a row for each of them."""
    applies = baseline(name).applies
    return [
        evaluation_name
        for evaluation_name in experiment_test_sets(experiment)
        if applies(prepared.evaluation(evaluation_name))
    ]


def baseline_config(name: str) -> dict:
    """A baseline's settings as a row's ``train.config``: its name and what it does (its
    choices on validation are recorded apart, in ``baseline.settings``)."""
    return {"baseline": name, "description": baseline(name).description}


def baseline_rows(
    job: Job, table: str, name: str, run_id: str, context: dict, results_dir: Path | None = None
) -> list[ResultRow]:
    """Score baseline `name` on the evaluation sets of its job (`Job.evaluations`): one row
    each, assembled like a model's rows (`rows.build.job_rows`).

    Parameters
    ----------
    job : Job
        the baseline's job (`pipelines.table_jobs.baseline_job`): its experiment, scale and
        data, its label for a mapping, seed 0.
    table : str
        the table.
    name : str
        the baseline (a key of `BASELINES`).
    run_id : str
        the rows' run id.
    context : dict
        the provenance (`provenance.provenance()`) recorded in each row.
    results_dir : Path, optional
        where the per-item sidecars go (p-values need them).

    Returns
    -------
    list of ResultRow
        One row per evaluation set.
    """
    chosen = baseline(name)
    prepared = job.data
    scored = []
    for evaluation_name, test_set in experiment_test_sets(job.experiment).items():
        if evaluation_name not in job.evaluations:
            continue
        evaluation = prepared.evaluation(evaluation_name)
        started = time.perf_counter()
        outputs, settings = chosen.outputs(prepared, evaluation_name, evaluation)
        result = metric(test_set.metric).score(outputs, prepared_gold(evaluation))
        items = None
        if results_dir is not None and result.items:
            items = write_items(results_dir, run_id, evaluation_name, result.items)
        scored.append(
            Scored(
                evaluation_name,
                result.metrics,
                result.signature,
                items,
                decode={"wall_s": round(time.perf_counter() - started, 1)},
                attention={},
                baseline={"name": name, "settings": settings},
            )
        )
    train = {
        "wall_s": None,
        "tokens_per_s": None,
        "epochs": None,
        "checkpoint": None,
        "started": {},
        "overrides": [],
        "config": baseline_config(name),
    }
    fingerprint = data_fingerprint(prepared.bin_dir)
    return job_rows(job, table, run_id, train, scored, fingerprint, context)
