"""The result rows on disk: one JSON-lines file per table, appended under a lock, and one reader."""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from regattn_fairseq.experiments.core.errors import ReproError
from regattn_fairseq.experiments.core.paths import RESULTS_DIR
from regattn_fairseq.experiments.rows.keys import row_key
from regattn_fairseq.experiments.rows.schema import ResultRow, upgrade


@contextmanager
def table_lock(results_dir: Path, table: str) -> Iterator[None]:
    """An exclusive lock on one table's record, held while its rows are appended and its views
    rewritten.

    Several processes may write one table at once (e.g. one `scripts/reproduce.py --mappings M`
    per mapping on a machine's cores). Unlocked, a row longer than one buffered write could be
    interleaved with another process's row, and two processes could rewrite the markdown at
    once. The lock is a file beside the raw rows (`raw/.<table>.lock`, git-ignored).
    """
    raw_dir = results_dir / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    with open(raw_dir / f".{table}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def append_rows(results_dir: Path, table: str, rows: list[ResultRow]) -> Path:
    """Append rows to a table's raw file (one sorted-key JSON object per line); call it under
    `table_lock`.

    Returns
    -------
    Path
        The raw file.
    """
    raw = raw_file(results_dir, table)
    raw.parent.mkdir(parents=True, exist_ok=True)
    with open(raw, "a", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    return raw


def raw_file(results_dir: Path, table: str) -> Path:
    """A table's raw rows: ``<results_dir>/raw/<table>.jsonl``."""
    return Path(results_dir) / "raw" / f"{table}.jsonl"


def read_records(path: Path) -> list[dict]:
    """Every record of a JSON-lines file (blank lines, e.g. a final newline, are skipped).

    Parameters
    ----------
    path : Path
        a raw results file, or ``reruns.jsonl``.

    Returns
    -------
    list of dict
        The records in file order.
    """
    text = Path(path).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def read_rows(path: Path) -> list[ResultRow]:
    """The result rows of a raw results file, each as a row of the current version.

    Parameters
    ----------
    path : Path
        a raw results file (``raw/<table>.jsonl``).

    Returns
    -------
    list of ResultRow
        The rows in file order (`schema.upgrade` of each).
    """
    return [upgrade(record) for record in read_records(path)]


def load_rows(results_dir: Path, table: str) -> list[ResultRow]:
    """A table's rows (`read_rows`); none when the table has no raw file yet."""
    raw = raw_file(results_dir, table)
    return read_rows(raw) if raw.is_file() else []


def check_row_kinds(results_dir: Path, table: str, dry_run: bool) -> None:
    """Refuse to put a dry run's rows where real rows are, or real rows where dry ones are.

    A dry run (`dry_run.DryRun`) writes to a results folder of its own: never to the
    committed results/ (`paths.RESULTS_DIR`), never to a raw file that holds real rows; and
    real rows never go to a raw file of dry-run rows.

    Parameters
    ----------
    results_dir : Path
        the results folder.
    table : str
        the table (its raw file is results_dir/raw/<table>.jsonl).
    dry_run : bool
        whether the rows to be written are a dry run's.

    Raises
    ------
    ReproError
        the rows would be mixed (the message names the folder or file).
    """
    if dry_run and Path(results_dir).resolve() == RESULTS_DIR.resolve():
        raise ReproError(
            f"a dry run's rows never go to {RESULTS_DIR} (the committed results): give them a "
            f"folder of their own, RESULTS_DIR=... (make) / --results-dir"
        )
    kinds = {bool(row.get("dry_run")) for row in load_rows(results_dir, table)}
    if kinds - {dry_run}:
        raw = raw_file(results_dir, table)
        held, new = ("real", "dry-run") if dry_run else ("dry-run", "real")
        raise ReproError(
            f"{raw} holds {held} rows: {new} rows are never mixed with them; use another "
            f"RESULTS_DIR (make) / --results-dir"
        )


class DuplicateRow(ReproError):
    """A row for a job whose rows are already in the table, without RESCORE / --retrain."""


def refuse_finished(existing: list[dict], new_rows: list[dict]) -> None:
    """Refuse rows whose key (`keys.row_key`) already has a row in the table.

    A second row for the same job, evaluation, seed and config only comes from two processes
    running one job at once (`run_lock` prevents it) or from RESCORE / --retrain, whose
    callers do not call this.

    Parameters
    ----------
    existing : list of dict
        the table's rows.
    new_rows : list of dict
        the rows about to be appended.

    Raises
    ------
    DuplicateRow
        a new row's key has a row already (the message names the job and its run).
    """
    finished = {row_key(row): row["run_id"] for row in existing}
    for row in new_rows:
        run_id = finished.get(row_key(row))
        if run_id is not None:
            raise DuplicateRow(
                f"{row['table']}: {row['experiment']} {row['mapping']} seed {row['seed']} "
                f"({row['evaluation']}) already has a row (run {run_id}); not writing a "
                f"second one (run {row['run_id']}). RESCORE=1 / --rescore or RETRAIN=1 / "
                "--retrain to add a new one"
            )
