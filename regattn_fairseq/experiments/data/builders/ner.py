"""CoNLL-2002 named-entity recognition (Spanish, Dutch) for the `regattn_ner` tagger.

The source files are one ``word [POS] tag`` line per token, IOB2 tags, sentences separated
by blank lines; the Dutch files also mark article boundaries with ``-DOCSTART-`` lines
(dropped here). With no offline copies the hub's sentences stand in (configs/prepare/
conll2002.yaml, ``online:``): words and IOB2 tag names per sentence. Tags are converted to
IOBES (Lample et al. 2016); decoded IOBES sequences are converted back to IOB2
(`iobes_to_iob2`) and scored against the original IOB2 tags.

Layout produced (text, read in memory by the task; the corpus is small):
  bin/{train,valid,test}.word   one sentence per line, space-separated words (as in the data)
  bin/{train,valid,test}.tag    its IOBES tags, space-separated
  bin/dict.word.txt             fairseq dictionary of the training words
  bin/dict.char.txt             fairseq dictionary of the training words' characters
  bin/dict.tag.txt              O and B/I/E/S of every entity type in the data, ``tag count``
  refs/test.iob2                the test set's original IOB2 tags (the scorer's reference)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from omegaconf import DictConfig

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.data.gold import Gold
from regattn_fairseq.experiments.data.sources import Inputs
from regattn_fairseq.experiments.data.text_processing import head, write_lines

TOOLS: tuple[str, ...] = ()
SPLITS = ("train", "valid", "test")


def read_conll(lines: list[str]) -> list[tuple[list[str], list[str]]]:
    """Sentences (words, IOB2 tags) of a CoNLL-2002 file: the first column is the word, the
    last the tag; blank lines end sentences, ``-DOCSTART-`` lines are dropped."""
    sentences, words, tags = [], [], []
    for number, line in enumerate([*lines, ""], 1):
        fields = line.split()
        if fields and fields[0] == "-DOCSTART-":
            continue
        if not fields:
            if words:
                sentences.append((words, tags))
            words, tags = [], []
            continue
        if len(fields) < 2:
            raise ReproError(f"CoNLL line {number}: expected `word ... tag`, got {line!r}")
        words.append(fields[0])
        tags.append(fields[-1])
    return sentences


def hub_sentences(inputs: Inputs, split: str) -> list[tuple[list[str], list[str]]]:
    """Sentences (words, IOB2 tags) of a hub split (`Inputs.hub_columns`), empty ones dropped:
    the hub's conversion of the loading script may keep the script's trailing empty sentence,
    which the CoNLL files do not have."""
    columns = inputs.hub_columns(split)
    return [
        (list(words), list(tags))
        for words, tags in zip(columns["words"], columns["tags"], strict=True)
        if words
    ]


def iob2_to_iobes(tags: list[str]) -> list[str]:
    """IOB2 (or IOB1) tags to IOBES: a one-token entity is S-, the last token of a longer
    one E-. An I- that starts an entity (IOB1 style, or a broken IOB2) starts it like a B-.

    >>> iob2_to_iobes(["B-PER", "I-PER", "O", "B-LOC", "I-MISC"])
    ['B-PER', 'E-PER', 'O', 'S-LOC', 'S-MISC']
    """
    out = []
    for k, tag in enumerate(tags):
        if tag == "O":
            out.append("O")
            continue
        prefix, _, label = tag.partition("-")
        if prefix not in ("B", "I") or not label:
            raise ReproError(f"not an IOB tag: {tag!r}")
        previous = tags[k - 1] if k > 0 else "O"
        begins = prefix == "B" or previous == "O" or previous.partition("-")[2] != label
        following = tags[k + 1] if k + 1 < len(tags) else "O"
        continues = following == f"I-{label}"
        if begins:
            out.append(f"{'B' if continues else 'S'}-{label}")
        else:
            out.append(f"{'I' if continues else 'E'}-{label}")
    return out


def iobes_to_iob2(tags: list[str]) -> list[str]:
    """IOBES tags to IOB2: S- -> B-, E- -> I-. A decoded sequence that breaks IOBES's rules
    (e.g. an I- after O) is kept as IOB2 reads it: I- after another label starts an entity
    under conlleval's rules, so it is left as I- for the scorer to judge."""
    out = []
    for tag in tags:
        prefix, _, label = tag.partition("-")
        out.append({"S": f"B-{label}", "E": f"I-{label}"}.get(prefix, tag))
    return out


def _dictionary(path: Path, counts: Counter) -> None:
    """A fairseq dictionary file (``symbol count`` lines, most frequent first)."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    write_lines(path, [f"{symbol} {count}" for symbol, count in items])


def build(inputs: Inputs, opts: DictConfig, root: Path) -> dict:
    """Build one CoNLL-2002 language in `root` (layout in the module docstring).

    Parameters
    ----------
    inputs : Inputs
        reads the spec's files.
    opts : DictConfig
        the scale's options: ``setting`` (the language: a key of the spec's ``offline``),
        ``max_train``, ``max_eval`` (sentences; null for all).
    root : Path
        the build folder.

    Returns
    -------
    dict
        The evaluation sets: {"<language>_test": {"subset": "test", "refs": [refs/test.iob2]}}.

    Raises
    ------
    ReproError
        an unknown language, a missing file or a malformed line.
    """
    files = inputs.spec.offline.get(opts.setting)
    if files is None:
        raise ReproError(
            f"conll2002: no language {opts.setting!r}; known: {sorted(inputs.spec.offline)}"
        )
    sentences = {}
    for split in SPLITS:
        limit = opts.max_train if split == "train" else opts.max_eval
        # a stand-in plan has every split of each language on the hub (online.stand_in)
        if inputs.stand_in:
            read = hub_sentences(inputs, f"{opts.setting}_{split}")
        else:
            read = read_conll(inputs.lines(files[split]))
        sentences[split] = head(read, limit)
        words = [" ".join(w) for w, _ in sentences[split]]
        write_lines(root / "bin" / f"{split}.word", words)
        write_lines(
            root / "bin" / f"{split}.tag", [" ".join(iob2_to_iobes(t)) for _, t in sentences[split]]
        )
    write_lines(root / "refs" / "test.iob2", [" ".join(t) for _, t in sentences["test"]])
    train = sentences["train"]
    _dictionary(root / "bin" / "dict.word.txt", Counter(w for ws, _ in train for w in ws))
    _dictionary(
        root / "bin" / "dict.char.txt", Counter(c for ws, _ in train for w in ws for c in w)
    )
    # every IOBES tag of every entity type in the data, so that a small train subset still
    # knows the tags of the evaluation sets (the counts are the training counts)
    types = sorted(
        {t[2:] for split in SPLITS for _, ts in sentences[split] for t in ts if t != "O"}
    )
    tags = Counter({"O": 0, **{f"{p}-{label}": 0 for label in types for p in "BIES"}})
    tags.update(t for _, ts in train for t in iob2_to_iobes(ts))
    _dictionary(root / "bin" / "dict.tag.txt", tags)
    # named by language, so that the table puts each language's paper numbers beside it
    return {f"{opts.setting}_test": {"subset": "test", "refs": [str(root / "refs" / "test.iob2")]}}


def load_gold(inputs: Inputs, spec: DictConfig, definition) -> Gold:
    """The gold IOB2 tags of the setting's (the language's) test file, a sentence a line, as
    the prepared reference file (refs/test.iob2) holds them.

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
    # the tags as the builder's reference file holds them (refs/test.iob2): a sentence a line
    sentences = read_conll(inputs.lines(spec.offline[definition.setting].test))
    return Gold([[" ".join(tags)] for _, tags in sentences], [])
