"""SNLI (Table 1): premise and hypothesis Moses-tokenized, one dictionary for both, labels as
the `regattn_snli` task reads them (its `LABELS`; only the sources' own label codes live here)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from omegaconf import DictConfig

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.data.gold import Gold
from regattn_fairseq.experiments.data.sources import Inputs, line_error, read_text_lines
from regattn_fairseq.experiments.data.text_processing import (
    fairseq_preprocess,
    head,
    moses_tokenize,
    write_lines,
)
from regattn_fairseq.tasks.regattn_snli import LABELS

TOOLS = ("sacremoses", "fairseq-fixed")
# The sources' label codes, mapped to the task's label names (the data-source conventions).
# SNLI train subset from the `cat` repository: label ids by inspection (see its SOURCE.txt).
CAT_SNLI_LABELS = {"1": "neutral", "2": "contradiction", "3": "entailment"}
# The hub dataset stanfordnlp/snli: 0/1/2 (its pairs without a gold label, -1, are dropped by
# the spec's online.drop).
HUB_SNLI_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}
# SNLI 1.0's jsonl files: the fields read, and the gold label of pairs without a majority
# label (left out, as the SNLI paper does for classification).
JSONL_FIELDS = ("sentence1", "sentence2", "gold_label")
NO_GOLD_LABEL = "-"


def _offline_train(inputs: Inputs, files, limit) -> tuple[list, list, list]:
    # The train subset is raw text while dev/test are PTB-tokenized: Moses tokenization
    # (no escaping) splits punctuation the same way for the common cases.
    premises, hypotheses, labels = [], [], []
    for relative in files:
        with open(inputs.path(relative), encoding="utf-8", newline="") as handle:
            for row in csv.reader(handle, delimiter="\t"):
                if limit is not None and len(labels) >= int(limit):
                    break
                premises.append(row[2])
                hypotheses.append(row[3])
                labels.append(CAT_SNLI_LABELS[row[0]])
    return premises, hypotheses, labels


def read_snli_jsonl(path: Path) -> tuple[list, list, list]:
    """Premises, hypotheses and gold labels of an SNLI 1.0 jsonl file (snli_1.0_*.jsonl),
    raw text; pairs whose gold_label is "-" (no majority label) are left out.

    Parameters
    ----------
    path : Path
        the file.

    Returns
    -------
    tuple[list, list, list]
        premises, hypotheses, labels (the task's LABELS).

    Raises
    ------
    ReproError
        a line that is not a JSON object with string fields sentence1, sentence2 and
        gold_label, or a gold_label outside LABELS and "-" (the message names file and line).
    """
    premises, hypotheses, labels = [], [], []
    for number, line in enumerate(read_text_lines(path), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise line_error(path, number, f"not a JSON object ({error.msg})") from None
        if not isinstance(record, dict):
            raise line_error(path, number, "not a JSON object")
        missing = [field for field in JSONL_FIELDS if not isinstance(record.get(field), str)]
        if missing:
            raise line_error(path, number, f"no string field {missing}")
        gold = record["gold_label"]
        if gold == NO_GOLD_LABEL:
            continue
        if gold not in LABELS:
            raise line_error(path, number, f"gold_label {gold!r} is none of {LABELS} or '-'")
        premises.append(record["sentence1"])
        hypotheses.append(record["sentence2"])
        labels.append(gold)
    return premises, hypotheses, labels


def _split(inputs: Inputs, split: str, opts: DictConfig) -> tuple[list, list, list]:
    """Premises, hypotheses and labels of one split, capped (max_train, max_eval) and
    Moses-tokenized unless distributed tokenized.

    Raises
    ------
    ReproError
        a label outside the task's LABELS or the hub's codes, or a malformed line.
    """
    spec = inputs.spec
    limit = opts.max_train if split == "train" else opts.max_eval
    source = inputs.split_source(split)
    # raw text (hub, local jsonl, offline train subset) is Moses-tokenized after the
    # limit; the offline dev/test sets are distributed tokenized
    raw = True
    if source == "online":
        columns = inputs.hub_columns(split)
        unknown = sorted(set(columns["label"]) - set(HUB_SNLI_LABELS), key=str)
        if unknown:
            raise ReproError(f"snli {split}: hub labels {unknown} are none of {HUB_SNLI_LABELS}")
        data = (
            columns["premise"],
            columns["hypothesis"],
            [HUB_SNLI_LABELS[label] for label in columns["label"]],
        )
    elif source == "local":
        data = read_snli_jsonl(inputs.local_path(inputs.local[split]))
    elif split == "train":
        data = _offline_train(inputs, spec.offline.train, opts.max_train)
    else:
        files = spec.offline[split]
        data = (
            inputs.lines(files.premise),
            inputs.lines(files.hypothesis),
            inputs.lines(files.label),
        )
        raw = False
    premises, hypotheses, labels = (head([x.strip() for x in column], limit) for column in data)
    if raw:
        premises = [moses_tokenize(x, "en") for x in premises]
        hypotheses = [moses_tokenize(x, "en") for x in hypotheses]
    bad = sorted(set(labels) - set(LABELS))
    if bad:
        raise ReproError(f"snli {split}: unexpected labels {bad}")
    return premises, hypotheses, labels


def _binarize(root: Path, vocab_size: int) -> None:
    """bin/input0 and bin/input1 from raw/<split>.premise and .hypothesis, with one dictionary
    for both built from both training sides (raw/train.both)."""
    fairseq_preprocess(
        [
            "--only-source",
            "--dict-only",
            "--trainpref",
            str(root / "raw" / "train.both"),
            "--destdir",
            str(root / "raw" / "dict"),
            "--nwordssrc",
            str(vocab_size),
        ],
        root,
    )
    for column, side in (("input0", "premise"), ("input1", "hypothesis")):
        fairseq_preprocess(
            [
                "--only-source",
                "--srcdict",
                str(root / "raw" / "dict" / "dict.txt"),
                *[
                    arg
                    for split in ("train", "valid", "test")
                    for arg in (
                        f"--{'trainpref' if split == 'train' else split + 'pref'}",
                        str(root / "raw" / f"{split}.{side}"),
                    )
                ],
                "--destdir",
                str(root / "bin" / column),
            ],
            root,
        )


def build(inputs: Inputs, opts: DictConfig, root: Path) -> dict:
    """Build SNLI in `root`: bin/input0 (premises), bin/input1 (hypotheses, same dictionary),
    bin/label/<split>.label (one of the task's LABELS per line).

    Parameters
    ----------
    inputs : Inputs
        reads the spec's files (offline), its hub splits (online) or SNLI 1.0's jsonl files
        (local).
    opts : DictConfig
        the scale's options (max_train, max_eval, vocab_size).
    root : Path
        the build folder.

    Returns
    -------
    dict
        The evaluation sets: {"test": {"subset", "refs"}}.

    Raises
    ------
    ReproError
        a label outside the task's LABELS, a malformed line, or an input is missing.
    """
    splits = {}
    for split in ("train", "valid", "test"):
        premises, hypotheses, labels = splits[split] = _split(inputs, split, opts)
        write_lines(root / "raw" / f"{split}.premise", premises)
        write_lines(root / "raw" / f"{split}.hypothesis", hypotheses)
        write_lines(root / "bin" / "label" / f"{split}.label", labels)
    # One dictionary for premise and hypothesis, built from both training sides.
    write_lines(root / "raw" / "train.both", splits["train"][0] + splits["train"][1])
    _binarize(root, opts.vocab_size)
    return {"test": {"subset": "test", "refs": [str(root / "bin" / "label" / "test.label")]}}


def load_gold(inputs: Inputs, spec: DictConfig, definition) -> Gold:
    """A test set's gold labels, one per pair.

    Parameters
    ----------
    inputs : Inputs
        the offline data root, through the spec.
    spec : DictConfig
        configs/prepare/<dataset>.yaml.
    definition : TestSet
        the test set (`data.test_sets.TestSet`): its ``evaluation`` and ``setting``.

    Returns
    -------
    Gold
        The references, item by item (`data.test_sets.load_gold` adds the files read).
    """
    labels = inputs.lines(spec.offline[definition.evaluation].label)
    return Gold([[x.strip()] for x in labels], [])
