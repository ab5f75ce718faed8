"""The result rows on disk: one JSON-lines file per table, appended under a lock and crash-safe
(`append_records`), and one reader that names a bad line (`read_records`)."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from regattn_checkout.errors import ReproError
from regattn_checkout.files import fsync_folder, write_file
from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.core.result_row import ResultRow, row_problem, upgrade
from regattn_fairseq.experiments.rows.keys import row_key


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
    """Append rows to a table's raw file (`append_records`); call it under `table_lock`.

    Returns
    -------
    Path
        The raw file.
    """
    return append_records(raw_file(results_dir, table), rows)


def append_records(path: Path, records: list[dict]) -> Path:
    """Append records to a JSON-lines file (one sorted-key JSON object per line), so that a
    crash or a full disk never costs a record already there (issue #46).

    - A torn tail (text after the last line end: a write cut off by a killed process or a full
      disk) is moved to a file beside it, ``<name>.torn-<UTC time>``, with a warning naming
      both; a tail that is a whole JSON object (a row whose line end was edited away) gets its
      line end instead. Without this the new records would be glued onto the torn text: one
      unreadable line, the good record lost.
    - The records are written in one write and flushed to the disk (`os.fsync`; the folder
      too when the file is new).
    - A write that fails (a full disk, ``ulimit -f``) is cut back off: the file keeps exactly
      the records it had, and the error says so.

    Parameters
    ----------
    path : Path
        the file (created with its folder when missing).
    records : list of dict
        the records, in order.

    Returns
    -------
    Path
        `path`.

    Raises
    ------
    ReproError
        the write failed (the message names the file and the cause).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(record, sort_keys=True) + "\n" for record in records).encode()
    created = not path.exists()
    handle = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        kept = _end_with_a_line_end(path, handle)
        try:
            unwritten = memoryview(data)
            while unwritten:  # one write; more only when the disk filled up part way
                unwritten = unwritten[os.write(handle, unwritten) :]
            os.fsync(handle)
        except OSError:
            os.ftruncate(handle, kept)
            raise
    except OSError as error:
        raise ReproError(
            f"{path}: could not append {len(records)} record(s): {error.strerror or error} "
            "(a full disk or a file-size limit?); the file keeps the records it had, none of "
            "the new ones: free space and run the same command again"
        ) from None
    finally:
        os.close(handle)
    if created:
        fsync_folder(path.parent)
    return path


def _end_with_a_line_end(path: Path, handle: int) -> int:
    """Make the file `handle` end with a line end before an append (`append_records`): a torn
    tail is quarantined, a whole record gets its line end. Returns the file's size then."""
    size = os.fstat(handle).st_size
    if size == 0 or os.pread(handle, 1, size - 1) == b"\n":
        return size
    start = size
    while start > 0:  # back to the last line end (rows are kilobytes: a few blocks)
        block = os.pread(handle, min(start, 1 << 16), max(0, start - (1 << 16)))
        cut = block.rfind(b"\n")
        if cut >= 0:
            start = start - len(block) + cut + 1
            break
        start -= len(block)
    tail = os.pread(handle, size - start, start)
    if isinstance(_parsed(tail), dict):
        os.write(handle, b"\n")
        return size + 1
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    quarantine = path.with_name(f"{path.name}.torn-{stamp}")
    for number in itertools.count(2):
        if not quarantine.exists():
            break
        quarantine = path.with_name(f"{path.name}.torn-{stamp}-{number}")
    write_file(quarantine, tail)
    os.ftruncate(handle, start)
    os.fsync(handle)
    _warn(
        f"{path} ended in a torn line ({len(tail)} bytes without a line end: a write was cut "
        f"off); moved to {quarantine}, and the file cut back to its last whole line"
    )
    return start


def _parsed(data: bytes):
    """`data` as JSON, or None when it is not (valid UTF-8 and) valid JSON."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def _warn(message: str) -> None:
    print(f"[results] warning: {message}", file=sys.stderr, flush=True)


def raw_file(results_dir: Path, table: str) -> Path:
    """A table's raw rows: ``<results_dir>/raw/<table>.jsonl``."""
    return Path(results_dir) / "raw" / f"{table}.jsonl"


class BadRecord(ReproError):
    """A line of a JSON-lines record that is not valid JSON, or not a valid record; the message
    names the file, the line, its first characters and the way out."""


def _bad_record(path: Path, number: int, line: str, problem: str) -> BadRecord:
    """The error for line `number` of `path`: the problem, the line's start, and the two ways
    out (the exact commands: restore the file from git, or move the line aside)."""
    shown = line if len(line) <= 80 else line[:80] + "…"
    aside = f"{path}.bad-line-{number}"
    return BadRecord(
        f"{path}, line {number}: {problem}: {shown!r}. A write was cut off or the line was "
        f"edited. Either restore the file from git if it is committed (git -C "
        f"{shlex.quote(str(path.parent))} checkout HEAD -- {shlex.quote(path.name)}; rows "
        f"appended since are lost), or move the line aside and keep the others (sed -n "
        f"'{number}p' {shlex.quote(str(path))} > {shlex.quote(aside)} && sed -i '{number}d' "
        f"{shlex.quote(str(path))})"
    )


def read_records(path: Path, check: Callable[[dict], str | None] | None = None) -> list[dict]:
    """Every record of a JSON-lines file (blank lines, e.g. a final newline, are skipped): the
    one reader of the suite's records (issue #46).

    A torn tail (a last line without a line end that is not valid JSON: a write cut off) is
    left out with a warning: it was never a whole record, and the next append moves it aside
    (`append_records`). Any other line that is not a record is an error.

    Parameters
    ----------
    path : Path
        a raw results file, or ``reruns.jsonl``.
    check : callable, optional
        a record's problem (a phrase) or None when it is valid, e.g. `schema.row_problem`.

    Returns
    -------
    list of dict
        The records in file order.

    Raises
    ------
    BadRecord
        a line is not UTF-8, not JSON, not a JSON object or fails `check`: the message names
        the file, the line number, its first characters and the way out.
    """
    path = Path(path)
    *lines, tail = path.read_bytes().split(b"\n")
    records = []
    for number, raw in enumerate([*lines, tail], 1):
        if not raw.strip():
            continue
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        record = _parsed(raw)
        if record is None and raw is tail:
            _warn(
                f"{path}, line {number}: a torn last line ({len(raw)} bytes without a line end: "
                f"a write was cut off) left out: {line[:80]!r}; the next append to the file "
                f"moves it to {path.name}.torn-<time>"
            )
            continue
        if record is None:
            try:
                json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                problem = "not UTF-8 text"
            except json.JSONDecodeError as error:
                problem = f"not valid JSON ({error.msg}, column {error.colno})"
            raise _bad_record(path, number, line, problem)
        problem = "not a JSON object" if not isinstance(record, dict) else None
        if problem is None and check is not None:
            problem = check(record)
        if problem is not None:
            raise _bad_record(path, number, line, problem)
        records.append(record)
    return records


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

    Raises
    ------
    BadRecord
        a line is not a row (`read_records`, `schema.row_problem`).
    """
    return [upgrade(record) for record in read_records(path, row_problem)]


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
