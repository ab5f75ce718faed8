"""Translation corpora (Multi30k, IWSLT14, WMT16): Moses normalisation and tokenisation, joint
BPE, one joined dictionary; references kept untokenized for sacrebleu."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.data.gold import Gold
from regattn_fairseq.experiments.data.sources import Inputs, check_parallel, read_text_lines
from regattn_fairseq.experiments.data.text_processing import (
    bpe_segment,
    fairseq_preprocess,
    head,
    moses_detokenize,
    moses_tokenize,
    remove_bpe,
    write_lines,
)

TOOLS = ("sacremoses", "subword-nmt", "fairseq-fixed")


def _read_pair(inputs: Inputs, split: str) -> tuple[tuple[list[str], list[str]], bool]:
    """The two sides of a split or evaluation set, and whether they are distributed
    tokenized (then Moses is not run on them again)."""
    spec = inputs.spec
    source = inputs.split_source(split)
    if source == "local":
        local = inputs.local
        files = local.evaluations[split] if split in spec.evaluations else local[split]
        paths = (inputs.local_path(files.src), inputs.local_path(files.tgt))
        pair = (read_text_lines(paths[0]), read_text_lines(paths[1]))
        check_parallel(paths, pair)
        if local.get("bpe_marker"):
            # distributed BPE-segmented (fairseq's prepare-iwslt14.sh): back to tokens, the
            # suite learns its own BPE
            pair = tuple([remove_bpe(x, local.bpe_marker) for x in side] for side in pair)
        return pair, bool(local.get("tokenized"))
    if source == "online":
        columns = inputs.hub_columns(split)
        return (columns["src"], columns["tgt"]), False
    files = spec.evaluations[split] if split in spec.evaluations else spec.offline[split]
    return (inputs.lines(files.src), inputs.lines(files.tgt)), bool(files.get("tokenized"))


def bleu_references(lines: list[str], tokenized: bool, spec: DictConfig) -> list[str]:
    """An evaluation set's target side as BLEU's references: sacrebleu scores detokenized
    text, so references are kept (or made, `tokenized`) untokenized, and lowercased when the
    whole pipeline is (``spec.lowercase``)."""
    if tokenized:
        lines = [moses_detokenize(x, spec.tgt) for x in lines]
    return [x.lower() for x in lines] if spec.lowercase else lines


def _read_pairs(
    inputs: Inputs, opts: DictConfig, splits: tuple[str, ...]
) -> tuple[dict[str, tuple[list[str], list[str]]], set[str]]:
    """The two sides of each split, capped (max_train, max_eval), and the splits distributed
    tokenized.

    Raises
    ------
    ReproError
        a split's two sides differ in length.
    """
    spec = inputs.spec
    pairs: dict[str, tuple[list[str], list[str]]] = {}
    tokenized_splits = set()
    for split in splits:
        pair, tokenized = _read_pair(inputs, split)
        if tokenized:
            tokenized_splits.add(split)
        limit = opts.max_train if split == "train" else opts.max_eval
        pairs[split] = (head(pair[0], limit), head(pair[1], limit))
        if len(pairs[split][0]) != len(pairs[split][1]):
            raise ReproError(
                f"{spec.name} {split}: {len(pair[0])} {spec.src} lines but {len(pair[1])} "
                f"{spec.tgt} lines"
            )
    return pairs, tokenized_splits


def build(inputs: Inputs, opts: DictConfig, root: Path) -> dict:
    """Build a translation dataset in `root` (see the package docstring).

    Parameters
    ----------
    inputs : Inputs
        reads the spec's files (offline), the hub's splits (online) or the official layout
        (local).
    opts : DictConfig
        the scale's options (max_train, max_eval, bpe_merges).
    root : Path
        the build folder.

    Returns
    -------
    dict
        The evaluation sets: name -> {"subset", "refs", "detokenize"}.

    Raises
    ------
    ReproError
        a split's two sides differ in length, or an input is missing.
    """
    spec = inputs.spec
    src, tgt = spec.src, spec.tgt
    evaluation_names = inputs.evaluation_names()
    pairs, tokenized_splits = _read_pairs(inputs, opts, ("train", "valid", *evaluation_names))
    print(f"[prepare] {spec.name}: Moses tokenization", flush=True)
    tokenized = {}
    for split, (src_lines, tgt_lines) in pairs.items():
        if split in tokenized_splits:
            # Text distributed tokenized (IWSLT14's fairseq split) is used as it is.
            tokenized[f"{split}.{src}"], tokenized[f"{split}.{tgt}"] = src_lines, tgt_lines
        else:
            for lang, lines in ((src, src_lines), (tgt, tgt_lines)):
                tokenized[f"{split}.{lang}"] = [
                    moses_tokenize(x, lang, normalize=True, lowercase=spec.lowercase) for x in lines
                ]
    print(f"[prepare] {spec.name}: BPE with {opts.bpe_merges} merges", flush=True)
    segmented = bpe_segment(
        root, opts.bpe_merges, tokenized[f"train.{src}"] + tokenized[f"train.{tgt}"], tokenized
    )
    for name, lines in segmented.items():
        write_lines(root / "raw" / name, lines)

    evaluations = {}
    test_prefixes = []
    for index, name in enumerate(evaluation_names):
        subset = "test" if index == 0 else f"test{index}"
        test_prefixes.append(str(root / "raw" / name))
        refs = root / "refs" / f"{name}.{tgt}"
        write_lines(refs, bleu_references(pairs[name][1], name in tokenized_splits, spec))
        evaluations[name] = {"subset": subset, "refs": [str(refs)], "detokenize": tgt}
    fairseq_preprocess(
        [
            "--source-lang",
            src,
            "--target-lang",
            tgt,
            "--joined-dictionary",
            "--trainpref",
            str(root / "raw" / "train"),
            "--validpref",
            str(root / "raw" / "valid"),
            "--testpref",
            ",".join(test_prefixes),
            "--destdir",
            str(root / "bin"),
        ],
        root,
    )
    return evaluations


def load_gold(inputs: Inputs, spec: DictConfig, definition) -> Gold:
    """A test set's references as the prepared data's: detokenised when distributed tokenised,
    lowercased when the pipeline is; system output is detokenised in the target language.

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
    files = spec.evaluations[definition.evaluation]
    references = bleu_references(inputs.lines(files.tgt), bool(files.get("tokenized")), spec)
    return Gold([[x] for x in references], [], detokenize=spec.tgt)
