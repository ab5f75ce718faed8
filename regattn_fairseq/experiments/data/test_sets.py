"""The suite's evaluation sets by name, each with the metric it is scored with, read from the
offline data root with the references processed as the result tables score them.

A test set is the one place that names its metric: the experiments of the tables and sweeps
(configs/reproduce/*.yaml, configs/sweep/*.yaml) name their test sets (``test_sets:``), and
`experiment_test_sets` gives each its declaration here.

Names are ``<corpus>`` for a corpus scored on one set and ``<corpus>-<set>`` otherwise. The
files are those of configs/prepare/<dataset>.yaml, whole (the tables' paper scale), and the
dataset kind's builder reads its references (its ``load_gold``) as it writes them for the
prepared data (translation: detokenised when distributed tokenised, lowercased when the
pipeline is; summarization: as distributed, since ROUGE lowercases; inflection: every
language with data for the setting, the gold test forms; NER: the gold IOB2 tags of the
language's test file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.data.builders import builder_for
from regattn_fairseq.experiments.data.gold import Gold
from regattn_fairseq.experiments.data.sources import Inputs


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
    """Read a test set's references from the data root, processed as the tables score them: by
    its dataset kind's builder (``load_gold``).

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
    gold = builder_for(spec.kind).load_gold(inputs, spec, definition)
    gold.files = sorted(inputs.files)
    return gold


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
