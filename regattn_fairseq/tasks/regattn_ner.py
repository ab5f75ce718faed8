"""Named-entity recognition as sequence tagging (CoNLL-2002), for the `regattn_ner` tagger.

Data layout (regattn_fairseq/experiments/data/builders/ner.py), plain text read in memory:
  DATA/{split}.word     one sentence per line, space-separated words
  DATA/{split}.tag      its IOBES tags, space-separated (same number as words)
  DATA/dict.word.txt    fairseq dictionary of the words
  DATA/dict.char.txt    fairseq dictionary of the characters (for the character BiLSTM)
  DATA/dict.tag.txt     the tags, ``tag count`` per line; a tag's index is its line number
"""

import os
from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq.data import Dictionary, FairseqDataset, data_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING


@dataclass
class RegattnNERConfig(FairseqDataclass):
    data: str = field(
        default=MISSING,
        metadata={"help": "folder with {split}.word, {split}.tag and dict.{word,char,tag}.txt"},
    )
    max_positions: int = field(
        default=1024, metadata={"help": "drop sentences with more words than this"}
    )
    seed: int = II("common.seed")


def read_tags(path):
    """The tag names of a dict.tag.txt, in index order."""
    with open(path, encoding="utf-8") as handle:
        return [line.split()[0] for line in handle if line.strip()]


class NERDataset(FairseqDataset):
    """Sentences as word ids, per-word character ids and tag ids; batches padded to
    ``words`` (B, T), ``chars`` (B, T, C) and ``target`` (B, T) (tag pad: -1)."""

    def __init__(self, sentences, tags, word_dict, char_dict, seed):
        self.word_dict, self.char_dict = word_dict, char_dict
        self.words = [
            torch.tensor([word_dict.index(w) for w in s], dtype=torch.long) for s in sentences
        ]
        self.chars = [
            [torch.tensor([char_dict.index(c) for c in w], dtype=torch.long) for w in s]
            for s in sentences
        ]
        self.tags = [torch.tensor(t, dtype=torch.long) for t in tags]
        self.sizes = np.array([len(s) for s in sentences], dtype=np.int64)
        self.seed = seed
        self.epoch = 1

    def __getitem__(self, index):
        return {
            "id": index,
            "words": self.words[index],
            "chars": self.chars[index],
            "tags": self.tags[index],
        }

    def __len__(self):
        return len(self.words)

    def collater(self, samples):
        if not samples:
            return {}
        batch, steps = len(samples), max(len(s["words"]) for s in samples)
        longest = max(len(c) for s in samples for c in s["chars"])
        words = torch.full((batch, steps), self.word_dict.pad(), dtype=torch.long)
        chars = torch.full((batch, steps, longest), self.char_dict.pad(), dtype=torch.long)
        target = torch.full((batch, steps), -1, dtype=torch.long)
        for b, sample in enumerate(samples):
            n = len(sample["words"])
            words[b, :n] = sample["words"]
            target[b, :n] = sample["tags"]
            for t, word_chars in enumerate(sample["chars"]):
                chars[b, t, : len(word_chars)] = word_chars
        lengths = torch.tensor([len(s["words"]) for s in samples], dtype=torch.long)
        return {
            "id": torch.tensor([s["id"] for s in samples], dtype=torch.long),
            "nsentences": batch,
            "ntokens": int(lengths.sum()),
            "net_input": {"words": words, "chars": chars, "lengths": lengths},
            "target": target,
        }

    def num_tokens(self, index):
        return int(self.sizes[index])

    def size(self, index):
        return int(self.sizes[index])

    def ordered_indices(self):
        with data_utils.numpy_seed(self.seed, self.epoch):
            shuffle = np.random.permutation(len(self))
        return shuffle[np.argsort(self.sizes[shuffle], kind="mergesort")]

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False

    def set_epoch(self, epoch):
        self.epoch = epoch


@register_task("regattn_ner", dataclass=RegattnNERConfig)
class RegattnNERTask(FairseqTask):
    def __init__(self, cfg: RegattnNERConfig, word_dict, char_dict, tags):
        super().__init__(cfg)
        self.word_dict, self.char_dict, self.tags = word_dict, char_dict, tags

    @classmethod
    def setup_task(cls, cfg: RegattnNERConfig, **kwargs):
        return cls(
            cfg,
            Dictionary.load(os.path.join(cfg.data, "dict.word.txt")),
            Dictionary.load(os.path.join(cfg.data, "dict.char.txt")),
            read_tags(os.path.join(cfg.data, "dict.tag.txt")),
        )

    def read_split(self, split):
        """The (words, tag ids) of a split's sentences."""
        prefix = os.path.join(self.cfg.data, split)
        if not os.path.isfile(prefix + ".word"):
            raise FileNotFoundError(f"NER split {split!r} not found: {prefix}.word")
        with open(prefix + ".word", encoding="utf-8") as handle:
            sentences = [line.split() for line in handle]
        with open(prefix + ".tag", encoding="utf-8") as handle:
            tag_lines = [line.split() for line in handle]
        index = {tag: i for i, tag in enumerate(self.tags)}
        tags = []
        for number, (words, line) in enumerate(zip(sentences, tag_lines, strict=True), 1):
            unknown = sorted(set(line) - set(index))
            if len(line) != len(words) or unknown:
                raise ValueError(
                    f"{prefix}.tag:{number}: {len(line)} tags for {len(words)} words"
                    + (f", unknown tags {unknown}" if unknown else "")
                )
            tags.append([index[t] for t in line])
        return sentences, tags

    def load_dataset(self, split, combine=False, **kwargs):
        sentences, tags = self.read_split(split)
        self.datasets[split] = NERDataset(
            sentences, tags, self.word_dict, self.char_dict, self.cfg.seed
        )
        return self.datasets[split]

    def max_positions(self):
        return self.cfg.max_positions

    @property
    def source_dictionary(self):
        return self.word_dict

    @property
    def target_dictionary(self):
        return None
