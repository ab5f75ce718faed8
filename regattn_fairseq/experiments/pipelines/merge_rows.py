"""Merge the rows another results folder landed into this one, with their sidecars.

Long table runs train in git worktrees (so that edits to the checkout never reach a running
training) or on a lent GPU machine, and each writes rows into its own results folder. This
brings those rows into the committed one:

- a row is one run's result on one evaluation set, named by ``(run_id, evaluation)``; rows
  already here (the same name, the same content) are skipped, so merging again adds nothing;
- a row here with the same name but other content is a conflict: refused, nothing written;
- each new row's per-item sidecar (``items.file``) is copied after checking its SHA-256 against
  the one the row records, and the figure sidecar of its attention (``raw/attention/``), when
  the source has one; a sidecar here with other bytes is refused;
- the new rows are appended in the source's order under the table's lock, so that a row
  trained or scored again after an earlier one (same job key) still supersedes it; the command
  names the rows each new one supersedes, so that a second scoring of a run already here (a
  worktree whose results folder lost the first row) is seen before it is committed;
- the fine-tuned tables' γ-selection short runs the source kept (`short_runs`) and this folder
  lacks are copied, so that a grid is committed before the first row that records its choice.

The table views are not rewritten here: `make results-tables` does that from the rows.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from regattn_checkout.errors import ReproError
from regattn_checkout.files import write_file
from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.core.result_row import items_record, row_problem
from regattn_fairseq.experiments.pipelines import short_runs
from regattn_fairseq.experiments.report.figures import figure_sidecar_name
from regattn_fairseq.experiments.rows.keys import row_key
from regattn_fairseq.experiments.rows.store import (
    append_rows,
    check_row_kinds,
    raw_file,
    read_records,
    table_lock,
)


def _name(row: dict) -> tuple[str, str]:
    return row["run_id"], row["evaluation"]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sidecars(source: Path, row: dict) -> list[tuple[Path, str | None]]:
    """A row's sidecar files relative to the results folder, each with the SHA-256 the row
    records (None where it records none)."""
    files = []
    items = items_record(row)
    if items is not None:
        files.append((Path(items["file"]), items["sha256"]))
    figure = figure_sidecar_name(row["run_id"], row["evaluation"])
    if (source / figure).is_file():
        files.append((figure, None))
    return files


def merge_rows(source: Path, results_dir: Path, table: str) -> list[dict]:
    """Append the rows of ``source``'s table that ``results_dir`` lacks, with their sidecars.

    Parameters
    ----------
    source : Path
        the results folder the rows landed in (a worktree's ``results/``, a GPU run's).
    results_dir : Path
        the results folder to merge them into.
    table : str
        the table (``raw/<table>.jsonl``).

    Returns
    -------
    list of dict
        the rows appended, in the source's order (empty when there was nothing new).

    Raises
    ------
    ReproError
        the source has no rows for the table, a row or sidecar conflicts with one here, a
        sidecar is missing or its SHA-256 is not the row's, or real and dry-run rows would mix.
    """
    source, results_dir = Path(source), Path(results_dir)
    if source.resolve() == results_dir.resolve():
        raise ReproError(f"merging {source} into itself")
    source_raw = raw_file(source, table)
    if not source_raw.is_file():
        raise ReproError(f"{source_raw}: no rows for table {table!r} there")
    incoming = read_records(source_raw, row_problem)
    with table_lock(results_dir, table):
        target_raw = raw_file(results_dir, table)
        here = {
            _name(row): row
            for row in (read_records(target_raw, row_problem) if target_raw.is_file() else [])
        }
        new = []
        for row in incoming:
            known = here.get(_name(row))
            if known is None:
                new.append(row)
            elif known != row:
                raise ReproError(
                    f"run {row['run_id']} ({row['evaluation']}): the row in {source_raw} differs "
                    f"from the one in {target_raw}; nothing merged"
                )
        if not new:
            return []
        for kind in {bool(row.get("dry_run")) for row in new}:
            check_row_kinds(results_dir, table, kind)
        copies = []
        for row in new:
            for relative, recorded in _sidecars(source, row):
                origin, target = source / relative, results_dir / relative
                if not origin.is_file():
                    raise ReproError(f"run {row['run_id']}: its sidecar {origin} is missing")
                digest = _sha256(origin)
                if recorded is not None and digest != recorded:
                    raise ReproError(
                        f"run {row['run_id']}: {origin} has SHA-256 {digest[:12]}…, the row "
                        f"records {recorded[:12]}…"
                    )
                if target.is_file() and _sha256(target) != digest:
                    raise ReproError(f"{target} exists with other content than {origin}")
                copies.append((origin, target))
        for origin, target in copies:
            if not target.is_file():
                write_file(target, origin.read_bytes())
        append_rows(results_dir, table, new)
    return new


def merge_short_runs(source: Path, results_dir: Path, table: str) -> list[Path]:
    """Copy the γ-selection short runs ``source`` kept for ``table`` (`short_runs`) that
    ``results_dir`` lacks.

    Returns
    -------
    list of Path
        the folders copied (empty when there was nothing new).

    Raises
    ------
    ReproError
        a folder here holds a file with other bytes than the source's, or a source folder's
        ``settings.json`` names no commit that trained it (`short_runs.read_kept`, which
        `short_runs.recorded` requires too); nothing copied.
    """
    copies = []
    for settings in sorted((Path(source) / short_runs.FOLDER / table).glob("*/*.json")):
        if settings.name != short_runs.SETTINGS_FILE:
            continue
        folder = settings.parent
        try:
            short_runs.read_kept(settings)
        except ReproError as error:
            raise ReproError(f"{error}; nothing copied") from None
        target = Path(results_dir) / short_runs.FOLDER / table / folder.name
        for origin in sorted(folder.iterdir()):
            here = target / origin.name
            if here.is_file() and _sha256(here) != _sha256(origin):
                raise ReproError(f"{here} exists with other content than {origin}; nothing copied")
        if not (target / short_runs.SETTINGS_FILE).is_file():
            copies.append((folder, target))
    for folder, target in copies:
        # settings.json last, as `short_runs.keep` writes it: it marks a complete folder
        for origin in sorted(folder.iterdir(), key=lambda f: f.name == short_runs.SETTINGS_FILE):
            write_file(target / origin.name, origin.read_bytes())
    return [target for _, target in copies]


def superseded_runs(results_dir: Path, table: str, rows: list[dict]) -> dict[tuple, list[str]]:
    """The run ids of the rows here that each of ``rows`` supersedes: the earlier rows of the
    same job and evaluation (`row_key`) under another run id, which the tables move to their
    history.

    Parameters
    ----------
    results_dir : Path
        the results folder, ``rows`` already merged into it.
    table : str
        the table.
    rows : list of dict
        rows of that table.

    Returns
    -------
    dict
        ``(run_id, evaluation)`` -> the superseded run ids, in the file's order (empty list:
        none).
    """
    earlier: dict[tuple, list[str]] = {}
    superseded = {}
    names = {_name(row) for row in rows}
    for row in read_records(raw_file(results_dir, table), row_problem):
        key = row_key(row)
        if _name(row) in names:
            superseded[_name(row)] = [run for run in earlier.get(key, []) if run != row["run_id"]]
        earlier.setdefault(key, []).append(row["run_id"])
    return superseded


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="the results folder the rows landed in")
    parser.add_argument("tables", nargs="+", help="the tables to merge (nmt, table2, ...)")
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="where to merge them (default: results/)",
    )
    args = parser.parse_args(argv)
    try:
        for table in args.tables:
            new = merge_rows(args.source, args.results_dir, table)
            superseded = superseded_runs(args.results_dir, table, new) if new else {}
            for row in new:
                metrics = ", ".join(f"{k} {v}" for k, v in sorted(row.get("metrics", {}).items()))
                older = superseded.get(_name(row))
                note = (
                    f" (supersedes {', '.join(older)}: the same job and evaluation, run or scored "
                    "again; the tables count the newer row)"
                    if older
                    else ""
                )
                print(
                    f"{table}: {row['run_id']} {row['mapping']} seed {row['seed']} "
                    f"{row['evaluation']}: {metrics}{note}"
                )
            print(f"{table}: {len(new)} row(s) merged into {raw_file(args.results_dir, table)}")
            for folder in merge_short_runs(args.source, args.results_dir, table):
                print(f"{table}: γ-selection short run {folder.name} copied into {folder.parent}")
    except ReproError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
