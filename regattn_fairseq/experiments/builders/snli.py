"""SNLI (Table 1): premise and hypothesis Moses-tokenized, one dictionary for both, labels as
the `regattn_snli` task reads them (its `LABELS`; only the sources' own label codes live here)."""

from __future__ import annotations

import csv
from pathlib import Path

from omegaconf import DictConfig

from regattn_fairseq.tasks.regattn_snli import LABELS

from ..common import ReproError
from ..data_sources import Inputs
from ..text_processing import fairseq_preprocess, head, moses_tokenize, write_lines

TOOLS = ("sacremoses", "fairseq-fixed")
# The sources' label codes, mapped to the task's label names (the data-source conventions).
# SNLI train subset from the `cat` repository: label ids by inspection (see its SOURCE.txt).
CAT_SNLI_LABELS = {"1": "neutral", "2": "contradiction", "3": "entailment"}
# The hub dataset stanfordnlp/snli: 0/1/2, and -1 for pairs without a gold label (dropped).
HUB_SNLI_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}


def _offline_train(inputs: Inputs, files, limit) -> tuple[list, list, list]:
    # The train subset is raw text while dev/test are PTB-tokenized: Moses tokenization
    # (no escaping) splits punctuation the same way for the common cases.
    premises, hypotheses, labels = [], [], []
    for relative in files:
        with open(inputs.path(relative), encoding="utf-8", newline="") as handle:
            for row in csv.reader(handle, delimiter="\t"):
                if limit is not None and len(labels) >= int(limit):
                    break
                premises.append(moses_tokenize(row[2], "en"))
                hypotheses.append(moses_tokenize(row[3], "en"))
                labels.append(CAT_SNLI_LABELS[row[0]])
    return premises, hypotheses, labels


def build(inputs: Inputs, opts: DictConfig, root: Path) -> dict:
    """Build SNLI in `root`: bin/input0 (premises), bin/input1 (hypotheses, same dictionary),
    bin/label/<split>.label (one of the task's LABELS per line).

    Parameters
    ----------
    inputs : Inputs
        reads the spec's files (offline) or splits (online).
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
        a label outside the task's LABELS, or an input is missing.
    """
    spec = inputs.spec
    splits = {}
    for split in ("train", "valid", "test"):
        if inputs.split_source(split) == "online":
            rows = [r for r in inputs.online_rows(split) if r["label"] in HUB_SNLI_LABELS]
            data = (
                [moses_tokenize(r["premise"], "en") for r in rows],
                [moses_tokenize(r["hypothesis"], "en") for r in rows],
                [HUB_SNLI_LABELS[r["label"]] for r in rows],
            )
        elif split == "train":
            data = _offline_train(inputs, spec.offline.train, opts.max_train)
        else:
            files = spec.offline[split]
            data = (
                inputs.lines(files.premise),
                inputs.lines(files.hypothesis),
                inputs.lines(files.label),
            )
        limit = opts.max_train if split == "train" else opts.max_eval
        premises, hypotheses, labels = (head([x.strip() for x in column], limit) for column in data)
        bad = sorted(set(labels) - set(LABELS))
        if bad:
            raise ReproError(f"snli {split}: unexpected labels {bad}")
        splits[split] = (premises, hypotheses, labels)
        write_lines(root / "raw" / f"{split}.premise", premises)
        write_lines(root / "raw" / f"{split}.hypothesis", hypotheses)
        write_lines(root / "bin" / "label" / f"{split}.label", labels)
    # One dictionary for premise and hypothesis, built from both training sides.
    write_lines(root / "raw" / "train.both", splits["train"][0] + splits["train"][1])
    fairseq_preprocess(
        [
            "--only-source",
            "--dict-only",
            "--trainpref",
            str(root / "raw" / "train.both"),
            "--destdir",
            str(root / "raw" / "dict"),
            "--nwordssrc",
            str(opts.vocab_size),
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
    return {"test": {"subset": "test", "refs": [str(root / "bin" / "label" / "test.label")]}}
