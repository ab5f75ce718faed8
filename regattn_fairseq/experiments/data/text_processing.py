"""Text processing shared by the dataset builders and the scoring: Moses normalisation,
tokenisation and detokenisation (sacremoses), joint BPE (subword-nmt), fairseq-preprocess,
and writing text files. Every Moses object of the suite is made here."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from regattn_fairseq.experiments.core.tools import run_logged, tool_path


@cache
def _moses(kind: str, lang: str):
    from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer

    return {
        "normalizer": MosesPunctNormalizer,
        "tokenizer": MosesTokenizer,
        "detokenizer": MosesDetokenizer,
    }[kind](lang=lang)


def moses_tokenize(
    line: str, lang: str, *, normalize: bool = False, lowercase: bool = False
) -> str:
    """Moses tokenisation (no XML escaping), as WMT-style setups do.

    Parameters
    ----------
    line : str
        one sentence of raw text.
    lang : str
        its language code (Moses' language-specific rules).
    normalize : bool
        apply Moses punctuation normalisation first.
    lowercase : bool
        lowercase the tokenised text.

    Returns
    -------
    str
        The tokens joined by single spaces.
    """
    if normalize:
        line = _moses("normalizer", lang).normalize(line)
    text = _moses("tokenizer", lang).tokenize(line, escape=False, return_str=True)
    return text.lower() if lowercase else text


def moses_detokenize(line: str, lang: str) -> str:
    """Moses detokenisation of a space-tokenised sentence (for sacrebleu, which tokenises itself).

    Parameters
    ----------
    line : str
        tokens separated by spaces.
    lang : str
        the language code.

    Returns
    -------
    str
        The detokenised sentence.
    """
    return _moses("detokenizer", lang).detokenize(line.split())


def remove_bpe(line: str, marker: str) -> str:
    """Undo subword-nmt BPE: join each token that ends in `marker` (e.g. ``"@@"``) to the next.

    Parameters
    ----------
    line : str
        BPE-segmented tokens separated by spaces.
    marker : str
        the continuation marker.

    Returns
    -------
    str
        The tokens as they were before segmentation.
    """
    return (line + " ").replace(f"{marker} ", "").rstrip(" ")


def head(items: list, limit) -> list:
    """The first `limit` items (all of them when `limit` is None)."""
    return items if limit is None else items[: int(limit)]


def write_lines(path: Path, lines) -> None:
    """Write one line per item (UTF-8), creating the parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")


def bpe_segment(
    root: Path, merges: int, train_lines: list[str], splits: dict[str, list[str]]
) -> dict[str, list[str]]:
    """Learn joint subword-nmt BPE on the training text and apply it to every split.

    Parameters
    ----------
    root : Path
        the dataset's build folder; the codes go to root/raw/bpe.codes.
    merges : int
        the number of merge operations.
    train_lines : list[str]
        the (tokenised) text to learn the merges on.
    splits : dict[str, list[str]]
        name -> tokenised lines to segment.

    Returns
    -------
    dict[str, list[str]]
        name -> segmented lines.
    """
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    codes_path = root / "raw" / "bpe.codes"
    codes_path.parent.mkdir(parents=True, exist_ok=True)
    with open(codes_path, "w", encoding="utf-8") as codes:
        learn_bpe(train_lines, codes, merges)
    with open(codes_path, encoding="utf-8") as codes:
        bpe = BPE(codes)
    return {name: [bpe.process_line(line) for line in lines] for name, lines in splits.items()}


def fairseq_preprocess(args: list[str], root: Path) -> None:
    """Run fairseq-preprocess (one worker) with `args`, logging to root/preprocess.log.

    Parameters
    ----------
    args : list[str]
        its options (languages, prefixes, --destdir, ...).
    root : Path
        the dataset's build folder.

    Raises
    ------
    ReproError
        the tool is missing or failed (the message names the log).
    """
    run_logged(
        [tool_path("fairseq-preprocess"), "--workers", "1", *args],
        root / "preprocess.log",
        echo=False,
    )
