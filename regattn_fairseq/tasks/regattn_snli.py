"""SNLI premise/hypothesis classification, for the attention-based NLI model.

Data layout (produced by the project's SNLI prep script):
  DATA/input0/{split}.{bin,idx}, DATA/input0/dict.txt   premises (fairseq-preprocess --only-source)
  DATA/input1/{split}.{bin,idx}                         hypotheses, same dictionary
  DATA/label/{split}.label                              one of LABELS per line
"""

import os
from dataclasses import dataclass, field

import numpy as np
from fairseq.data import (
    Dictionary,
    IdDataset,
    NestedDictionaryDataset,
    NumelDataset,
    NumSamplesDataset,
    RawLabelDataset,
    RightPadDataset,
    SortDataset,
    data_utils,
)
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING

LABELS = ("entailment", "neutral", "contradiction")


@dataclass
class RegattnSNLIConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "folder with input0/, input1/, label/"})
    max_positions: int = field(
        default=512, metadata={"help": "drop pairs with a premise or hypothesis longer than this"}
    )
    seed: int = II("common.seed")


def read_labels(path):
    index = {label: i for i, label in enumerate(LABELS)}
    labels = []
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            label = line.strip()
            if label not in index:
                raise ValueError(f"{path}:{line_number}: label {label!r} is not one of {LABELS}")
            labels.append(index[label])
    return labels


@register_task("regattn_snli", dataclass=RegattnSNLIConfig)
class RegattnSNLITask(FairseqTask):
    labels = LABELS

    def __init__(self, cfg: RegattnSNLIConfig, dictionary: Dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary

    @classmethod
    def setup_task(cls, cfg: RegattnSNLIConfig, **kwargs):
        return cls(cfg, Dictionary.load(os.path.join(cfg.data, "input0", "dict.txt")))

    def load_dataset(self, split, combine=False, **kwargs):
        def sentences(folder):
            path = os.path.join(self.cfg.data, folder, split)
            dataset = data_utils.load_indexed_dataset(path, self.dictionary, combine=combine)
            if dataset is None:
                raise FileNotFoundError(f"SNLI split {split!r} not found: {path}.{{bin,idx}}")
            return dataset

        premises, hypotheses = sentences("input0"), sentences("input1")
        labels = read_labels(os.path.join(self.cfg.data, "label", f"{split}.label"))
        if not len(premises) == len(hypotheses) == len(labels):
            raise ValueError(
                f"SNLI split {split!r}: {len(premises)} premises, "
                f"{len(hypotheses)} hypotheses and {len(labels)} labels"
            )
        pad = self.dictionary.pad()
        dataset = NestedDictionaryDataset(
            {
                "id": IdDataset(),
                "net_input": {
                    "premise_tokens": RightPadDataset(premises, pad_idx=pad),
                    "premise_lengths": NumelDataset(premises, reduce=False),
                    "hypothesis_tokens": RightPadDataset(hypotheses, pad_idx=pad),
                    "hypothesis_lengths": NumelDataset(hypotheses, reduce=False),
                },
                "target": RawLabelDataset(labels),
                "nsentences": NumSamplesDataset(),
            },
            sizes=[np.maximum(premises.sizes, hypotheses.sizes)],
        )
        with data_utils.numpy_seed(self.cfg.seed):
            shuffle = np.random.permutation(len(dataset))
        self.datasets[split] = SortDataset(dataset, sort_order=[shuffle])
        return self.datasets[split]

    def max_positions(self):
        return self.cfg.max_positions

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return None
