"""The attention export: the file in which the suite keeps each sentence's attention, written by
the decode stage (`export_attention`, `tagging.decode_subset`) and read back by the statistics,
the scorers and the figures.

An export is JSON lines, one sentence record per line, in the order the sentences were decoded
(gzip-compressed when the file name ends in ``.gz``, as the figure sidecars are):

  {"id", "src_tokens", "tgt_tokens", "attention": [one row per target token, one column per
   source token], "mapping": {"name", "params", ...}}

and what the task adds: SNLI's "label" and "prediction"; continuous attention's "continuous",
"density" and "discrete_attention" (see `export_attention`); NER's "gold_tags" (its rows are
tag marginals, see `tagging.decode_subset`). Each row is an attention row of
`regattn.analysis`, whose statistics of every row of an export go to ``<export>.stats.json``
beside it:

    python -m regattn_fairseq.experiments.decode.attention_format results/attn/fusedmax.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from regattn.analysis import attention_statistics
from regattn_checkout.files import replacing, write_file

# what every sentence record holds, whatever the task
REQUIRED_FIELDS = ("id", "src_tokens", "attention", "mapping")


@contextlib.contextmanager
def export_writer(path) -> Iterator[Callable[[dict], None]]:
    """An export being written: yields `write(record)`, which appends one sentence record.

    Parameters
    ----------
    path
        the .jsonl file (replaced).
    """
    with replacing(path) as partial, open(partial, "w", encoding="utf-8") as handle:
        yield lambda record: handle.write(json.dumps(record) + "\n")


def write_compressed_export(path, records: Iterable[dict]) -> None:
    """Writes sentence records as a gzip-compressed export whose bytes depend on the records
    only (keys sorted; neither a timestamp nor a file name in the gzip header, since the
    figure sidecars are written under a per-process name), so that writing the same sentences
    again leaves a committed file unchanged in git.

    Parameters
    ----------
    path
        the file to write (replaced).
    records : Iterable[dict]
        sentence records, as `read_export` returns them.
    """
    with open(path, "wb") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as handle:
        for record in records:
            handle.write((json.dumps(record, sort_keys=True) + "\n").encode("utf-8"))


def read_export(path) -> list[dict]:
    """Reads an export.

    Parameters
    ----------
    path
        the .jsonl file (or a gzip-compressed one, ``.jsonl.gz``).

    Returns
    -------
    list[dict]
        Its sentence records, in order.

    Raises
    ------
    ValueError
        if a record lacks a field of `REQUIRED_FIELDS` or its rows do not match its source
        tokens.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    for number, record in enumerate(records, 1):
        missing = set(REQUIRED_FIELDS) - set(record)
        if missing:
            raise ValueError(f"{path}:{number}: export record lacks {', '.join(sorted(missing))}")
        if any(len(row) != len(record["src_tokens"]) for row in record["attention"]):
            raise ValueError(
                f"{path}:{number}: attention rows do not match the "
                f"{len(record['src_tokens'])} source tokens"
            )
    return records


def rows_of_export(records: Iterable[dict]) -> Iterator[list]:
    """Every attention row of every sentence record, in order."""
    for record in records:
        yield from record["attention"]


def mapping_of_export(records: list[dict]) -> dict:
    """The one "mapping" description shared by all records of an export.

    Raises
    ------
    ValueError
        if the records disagree on it.
    """
    descriptions = {json.dumps(record["mapping"], sort_keys=True) for record in records}
    if len(descriptions) != 1:
        raise ValueError(f"export mixes {len(descriptions)} attention mappings")
    return json.loads(descriptions.pop())


def statistics_path(export_path) -> Path:
    """Where the statistics of an export go: beside it, e.g. results/attn/fusedmax.jsonl ->
    results/attn/fusedmax.stats.json."""
    export_path = Path(export_path)
    return export_path.with_name(export_path.name.removesuffix(".jsonl") + ".stats.json")


def write_export_statistics(export_path, tol: float = 0.0) -> Path:
    """Computes the statistics of one export (`regattn.analysis.attention_statistics` of all
    its rows) and writes them beside it (`statistics_path`), with the mapping, the number of
    sentences and the tolerance used.

    Parameters
    ----------
    export_path
        an export (see `read_export`).
    tol : float
        as in `attention_statistics`.

    Returns
    -------
    Path
        The path written.

    Raises
    ------
    ValueError
        if the export is malformed, empty or mixes mappings.
    """
    records = read_export(export_path)
    if not records:
        raise ValueError(f"{export_path} holds no sentences")
    stats = {
        "export": Path(export_path).name,
        "mapping": mapping_of_export(records),
        "sentences": len(records),
        "tolerance": tol,
        **attention_statistics(rows_of_export(records), tol),
    }
    out = statistics_path(export_path)
    write_file(out, json.dumps(stats, indent=2) + "\n")
    return out


def main(argv=None) -> None:
    """The command line: writes <export>.stats.json beside each export named in argv."""
    parser = argparse.ArgumentParser(
        prog="python -m regattn_fairseq.experiments.decode.attention_format",
        description="Write sparsity/structure statistics of attention exports (JSON lines from "
        "scripts/export_attention.py) to <export>.stats.json beside each export.",
    )
    parser.add_argument("exports", nargs="+", metavar="EXPORT.jsonl")
    parser.add_argument(
        "--tol",
        type=float,
        default=0.0,
        help="weights <= tol are zeros and weights within tol are equal "
        "(default 0: exact, the paper's convention)",
    )
    args = parser.parse_args(argv)
    if not (args.tol >= 0 and math.isfinite(args.tol)):
        parser.error("--tol must be a finite number >= 0")
    for export in args.exports:
        print(write_export_statistics(export, args.tol))


if __name__ == "__main__":
    main()
