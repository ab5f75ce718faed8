"""The suite's evaluation sets by name, each with the metric it is scored with, read from the
offline data root with the references processed as the result tables score them.

A test set is the one place that names its metric: the experiments of the tables and sweeps
(configs/reproduce/*.yaml, configs/sweep/*.yaml) name their test sets (``test_sets:``), and
`experiment_test_sets` gives each its declaration here.

Names are ``<corpus>`` for a corpus scored on one set and ``<corpus>-<set>`` otherwise. The
files are those of configs/prepare/<dataset>.yaml, whole (the tables' paper scale): the
reference processing follows the dataset builders (translation: detokenised when distributed
tokenised, lowercased when the pipeline is; summarization: as distributed, since ROUGE
lowercases; inflection: every language with data for the setting, the gold test forms; NER:
the gold IOB2 tags of the language's test file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.data.builders.inflection import decode_target, encode_target
from regattn_fairseq.experiments.data.builders.ner import read_conll
from regattn_fairseq.experiments.data.sources import Inputs
from regattn_fairseq.experiments.data.text_processing import moses_detokenize


@dataclass(frozen=True)
class TestSet:
    """One evaluation set of the suite.

    Attributes
    ----------
    name : str
        the name `scripts/score.py` and the experiments' ``test_sets:`` take.
    dataset : str
        its spec, configs/prepare/<dataset>.yaml.
    evaluation : str
        its name in the prepared data and in the result rows (``evaluation``): an evaluation
        set of the spec, or the builder's name for it (inflection: ``test``; NER:
        ``<language>_test``).
    metric : str
        the metric it is scored with (a key of `score.metrics.METRICS`).
    description : str
        one line for ``--help``.
    setting : str or None
        the dataset's setting it belongs to (``dataset_options.setting``: the inflection
        training setting, the NER language); None for a dataset without settings.
    """

    __test__ = False  # a data class, not a pytest test class

    name: str
    dataset: str
    evaluation: str
    metric: str
    description: str
    setting: str | None = None


@dataclass
class Gold:
    """The references of a test set, in item order.

    Attributes
    ----------
    references : list of list of str
        every reference of each item (one for all but DUC 2004).
    files : list of str
        the data files read, relative to the data root.
    truncate_bytes : int or None
        ROUGE byte limit for hypotheses and references.
    detokenize : str or None
        the target language, for Moses-detokenising tokenised system output before BLEU.
    languages : list of str or None
        each item's language (inflection).
    """

    references: list[list[str]]
    files: list[str]
    truncate_bytes: int | None = None
    detokenize: str | None = None
    languages: list[str] | None = None


TEST_SETS = {
    t.name: t
    for t in (
        TestSet(
            "duc2004",
            "gigaword_duc",
            "duc2004",
            "rouge_recall",
            "DUC 2004 task 1: 500 items x 4 references, ROUGE recall at 75 bytes (Table 2)",
        ),
        TestSet(
            "gigaword",
            "gigaword_duc",
            "gigaword",
            "rouge_f1",
            "Gigaword test (Rush et al. 2015): 1,951 items, ROUGE F1 (Table 2)",
        ),
        TestSet(
            "snli",
            "snli",
            "test",
            "accuracy",
            "SNLI 1.0 test: 9,824 labels (entailment/neutral/contradiction), accuracy (Table 1)",
        ),
        TestSet(
            "multi30k-test2016",
            "multi30k",
            "test2016",
            "bleu",
            "Multi30k en-de test 2016 flickr: 1,000 German sentences, BLEU (NMT table)",
        ),
        TestSet(
            "iwslt14-test",
            "iwslt14",
            "test",
            "bleu",
            "IWSLT14 de-en test (fairseq split): 6,750 lowercased English sentences, BLEU",
        ),
        TestSet(
            "wmt16-newstest2016",
            "wmt16_roen",
            "newstest2016",
            "bleu",
            "WMT16 ro-en newstest2016: 1,999 English sentences, BLEU",
        ),
        TestSet(
            "inflection-medium",
            "sigmorphon",
            "test",
            "exact_match",
            "SIGMORPHON 2018 task 1 gold test, all languages with medium train data: exact match",
            setting="medium",
        ),
        TestSet(
            "inflection-high",
            "sigmorphon",
            "test",
            "exact_match",
            "SIGMORPHON 2018 task 1 gold test, all languages with high train data: exact match",
            setting="high",
        ),
        TestSet(
            "conll2002-spanish",
            "conll2002",
            "spanish_test",
            "entity_f1",
            "CoNLL-2002 Spanish test (testb): 1,517 sentences, entity-level F1 (NER table)",
            setting="spanish",
        ),
        TestSet(
            "conll2002-dutch",
            "conll2002",
            "dutch_test",
            "entity_f1",
            "CoNLL-2002 Dutch test (testb): 5,195 sentences, entity-level F1 (NER table)",
            setting="dutch",
        ),
    )
}


def find_test_set(name: str) -> TestSet:
    """The test set called `name`.

    Parameters
    ----------
    name : str
        one of `TEST_SETS`.

    Returns
    -------
    TestSet
        Its definition.

    Raises
    ------
    ReproError
        no such test set (the message lists them).
    """
    try:
        return TEST_SETS[name]
    except KeyError:
        raise ReproError(f"unknown test set {name!r}; known: {', '.join(TEST_SETS)}") from None


def experiment_test_sets(experiment: DictConfig) -> dict[str, TestSet]:
    """The test sets an experiment scores, by their names in its rows (`TestSet.evaluation`).

    Parameters
    ----------
    experiment : DictConfig
        an experiment of configs/reproduce/*.yaml or configs/sweep/*.yaml: its ``test_sets``
        lists `TEST_SETS` names.

    Returns
    -------
    dict
        evaluation-set name -> test set, in the experiment's order.

    Raises
    ------
    ReproError
        an unknown test set.
    """
    return {t.evaluation: t for t in map(find_test_set, experiment.test_sets)}


def load_gold(definition: TestSet, data_dir: Path) -> Gold:
    """Read a test set's references from the data root, processed as the tables score them.

    Parameters
    ----------
    definition : TestSet
        the test set.
    data_dir : Path
        the offline data root (`config.resolve_data_dir`).

    Returns
    -------
    Gold
        The references and how to score against them.

    Raises
    ------
    ReproError
        a data file is missing.
    """
    spec = load_config("prepare", definition.dataset)
    inputs = Inputs(data_dir, "offline", spec)
    loader = {
        "summarization": _summarization,
        "translation": _translation,
        "snli": _snli,
        "inflection": _inflection,
        "ner": _ner,
    }[spec.kind]
    gold = loader(inputs, spec, definition)
    gold.files = sorted(inputs.files)
    return gold


def _summarization(inputs: Inputs, spec: DictConfig, definition: TestSet) -> Gold:
    files = spec.evaluations[definition.evaluation]
    columns = [inputs.lines(path) for path in files.refs]
    return Gold(
        [list(refs) for refs in zip(*columns, strict=True)],
        [],
        truncate_bytes=files.get("truncate_bytes"),
    )


def _translation(inputs: Inputs, spec: DictConfig, definition: TestSet) -> Gold:
    files = spec.evaluations[definition.evaluation]
    references = inputs.lines(files.tgt)
    if files.get("tokenized"):
        references = [moses_detokenize(x, spec.tgt) for x in references]
    if spec.lowercase:
        references = [x.lower() for x in references]
    return Gold([[x] for x in references], [], detokenize=spec.tgt)


def _snli(inputs: Inputs, spec: DictConfig, definition: TestSet) -> Gold:
    labels = inputs.lines(spec.offline[definition.evaluation].label)
    return Gold([[x.strip()] for x in labels], [])


def _inflection(inputs: Inputs, spec: DictConfig, definition: TestSet) -> Gold:
    table = [line.split("\t") for line in inputs.lines(spec.offline.languages_table)]
    header, rows = table[0], table[1:]
    column = header.index(f"train-{definition.setting}")
    references, languages = [], []
    for row in rows:
        if row[column].strip() in ("", "0", "-"):
            continue
        for line in inputs.lines(f"{spec.offline.folder}/{row[0]}-test"):
            if line.strip():
                form = line.split("\t")[1]
                # The form as the tables' reference file holds it (through the model's encoding).
                references.append([decode_target(encode_target(form))])
                languages.append(row[0])
    return Gold(references, [], languages=languages)


def _ner(inputs: Inputs, spec: DictConfig, definition: TestSet) -> Gold:
    # the tags as the builder's reference file holds them (refs/test.iob2): a sentence a line
    sentences = read_conll(inputs.lines(spec.offline[definition.setting].test))
    return Gold([[" ".join(tags)] for _, tags in sentences], [])


def prepared_gold(evaluation: dict) -> Gold:
    """The references of a prepared evaluation set (an entry of the prepared data's manifest),
    read as `load_gold` reads a test set's.

    Parameters
    ----------
    evaluation : dict
        ``refs`` (one file per reference, a line per item), and where they apply
        ``detokenize`` (the target language), ``truncate_bytes`` and ``languages`` (a file
        naming each item's language).

    Returns
    -------
    Gold
        The references, item by item.
    """
    columns = [_lines(path) for path in evaluation["refs"]]
    languages = evaluation.get("languages")
    return Gold(
        [list(refs) for refs in zip(*columns, strict=True)],
        list(evaluation["refs"]),
        truncate_bytes=evaluation.get("truncate_bytes"),
        detokenize=evaluation.get("detokenize"),
        languages=_lines(languages) if languages else None,
    )


def _lines(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()
