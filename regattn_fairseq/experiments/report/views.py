"""The views of the result rows: CSV and markdown regenerated from a table's raw rows."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from regattn_checkout.files import replacing, write_file
from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.core.cli import OneLineParser, run_main
from regattn_fairseq.experiments.report.alpha_plots import draw_alpha_figures
from regattn_fairseq.experiments.report.learning_curves import draw_learning_curves
from regattn_fairseq.experiments.report.reruns import draw_reruns
from regattn_fairseq.experiments.report.specs import table_specs
from regattn_fairseq.experiments.report.tables import render_table
from regattn_fairseq.experiments.rows.store import (
    append_rows,
    check_row_kinds,
    load_rows,
    refuse_finished,
    table_lock,
)


def _flatten(row: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if isinstance(value, list) else value
    return flat


def write_csv(results_dir: Path, table: str, rows: list[dict]) -> Path:
    path = results_dir / "raw" / f"{table}.csv"
    flat = [_flatten(row) for row in rows]
    columns = sorted({key for row in flat for key in row})
    with replacing(path) as partial, open(partial, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)
    return path


def write_outputs(results_dir: Path, spec, new_rows: list[dict], again: bool = False) -> Path:
    """Append the new rows, then regenerate the CSV and markdown views of the whole record.

    Parameters
    ----------
    again : bool
        RESCORE / --retrain asked for new rows of finished jobs; otherwise a row whose key
        has one already is refused (`rows.store.refuse_finished`).

    Raises
    ------
    ReproError
        the new rows would mix dry-run and real rows (`check_row_kinds`), or duplicate
        finished ones.
    """
    with table_lock(results_dir, spec.table):
        for dry_run in {bool(row.get("dry_run")) for row in new_rows}:
            check_row_kinds(results_dir, spec.table, dry_run)
        if not again:  # one row per job (issue #26)
            refuse_finished(load_rows(results_dir, spec.table), new_rows)
        append_rows(results_dir, spec.table, new_rows)
        rows = load_rows(results_dir, spec.table)
        write_csv(results_dir, spec.table, rows)
        markdown = results_dir / f"{spec.table}.md"
        write_file(markdown, render_table(spec, rows, results_dir))
        draw_learning_curves(results_dir, spec, rows)
        draw_alpha_figures(results_dir, spec, rows)
    return markdown


def regenerate(results_dir: Path, tables: list[str] | None = None) -> list[Path]:
    """Rewrite the markdown and CSV views of raw tables from their rows (rows untouched), and,
    for every table, the re-runs' view (`rerun.draw_reruns`).

    Parameters
    ----------
    results_dir : Path
        the results folder.
    tables : list of str, optional
        the tables (default: every table with a raw file).

    Returns
    -------
    list of Path
        The markdown files written.
    """
    written = []
    for table, spec in table_specs().items():
        if tables and table not in tables:
            continue
        if not (results_dir / "raw" / f"{table}.jsonl").is_file():
            continue
        with table_lock(results_dir, table):
            rows = load_rows(results_dir, table)
            if not rows:
                continue
            write_csv(results_dir, table, rows)
            markdown = results_dir / f"{table}.md"
            write_file(markdown, render_table(spec, rows, results_dir))
            draw_learning_curves(results_dir, spec, rows)
            draw_alpha_figures(results_dir, spec, rows)
        written.append(markdown)
    if not tables and (results_dir / "reruns.jsonl").is_file():
        written.append(draw_reruns(results_dir))
    return written


def main(argv: list[str] | None = None) -> None:
    """``python -m regattn_fairseq.experiments.report.views [TABLE ...]``: regenerate the views.

    A raw file with a bad line ends in one message naming it (`rows.store.read_records`),
    never a traceback (`cli.run_main`)."""
    parser = OneLineParser(description=main.__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="*")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)

    def run() -> None:
        for path in regenerate(args.results_dir.resolve(), args.tables):
            print(f"[results] {path}")

    run_main(run)


if __name__ == "__main__":
    main()
