"""What each table cost: CPU-hours measured from its rows' wall times, so that the docs' time
figures are generated rather than guessed.

Per table, over the runs that stand in its current cells (each run once, whatever its number of
evaluation sets; baselines train nothing): training (``train.wall_s``), decoding (each row's
``decode.wall_s``), and the γ grids, whose runs leave no row: each γ tried for a tuned cell (its
choice's grid and values beyond it, for each selection seed) is counted at the epochs it was
trained for (``GAMMA_SELECT_EPOCHS``, or a fine-tuned table's short runs' ``max_epoch``, else
the cell's median epochs) times the cell's median seconds per epoch, and labelled an estimate.
Rows record the wall time of the process that trained them; on this 2-core machine two trainings
ran side by side, so a CPU-hour here is one process on one core.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass

from regattn_fairseq.experiments.core.result_row import (
    ResultRow,
    decode_record,
    gamma_selection,
    train_record,
)
from regattn_fairseq.experiments.rows.keys import cell_key, is_baseline, split_current

# the epochs a γ grid's runs trained, as the selection's criterion states them: the fairseq
# tables' (`gamma_select`) and the fine-tuned tables' short runs (`pretrained._criterion`)
_SELECT_EPOCHS = re.compile(r"within the first (\d+) epochs|max_epoch=(\d+)")


@dataclass(frozen=True)
class TableCost:
    """A table's measured CPU-hours at one scale."""

    table: str
    runs: int
    commits: str  # the commits that scored the runs counted
    training_h: float
    decoding_h: float
    grid_h: float  # estimated (module docstring)

    @property
    def total_h(self) -> float:
        return self.training_h + self.decoding_h + self.grid_h


def table_cost(table: str, rows: list[ResultRow], scale: str = "small") -> TableCost:
    """The CPU-hours of a table's current cells at `scale` (module docstring)."""
    current, _ = split_current(rows)
    runs: dict[str, list[dict]] = defaultdict(list)
    for row in current:
        if row["scale"] == scale and not is_baseline(row) and not row.get("dry_run"):
            runs[row["run_id"]].append(row)
    training = sum(float(train_record(r[0]).get("wall_s") or 0) for r in runs.values())
    decoding = sum(float(decode_record(row).get("wall_s") or 0) for r in runs.values() for row in r)
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for run_rows in runs.values():
        cells[cell_key(run_rows[0])].append(run_rows[0])
    grids = 0.0
    for cell in cells.values():
        selection = next((s for s in map(gamma_selection, cell) if s), None)
        timed = [t for t in map(train_record, cell) if t.get("wall_s") and t.get("epochs")]
        if selection is None or not timed:
            continue
        per_epoch = statistics.median(t["wall_s"] / t["epochs"] for t in timed)
        match = _SELECT_EPOCHS.search(selection.get("criterion", ""))
        epochs = (
            int(match.group(1) or match.group(2))
            if match
            else statistics.median(t["epochs"] for t in timed)
        )
        tried = len(selection["grid"]) + len(selection.get("extended") or [])
        grids += tried * len(selection.get("seeds") or [1]) * epochs * per_epoch
    commits = ", ".join(sorted({r[0]["git_commit"][:10] for r in runs.values()}))
    return TableCost(table, len(runs), commits, training / 3600, decoding / 3600, grids / 3600)


def cost_lines(costs: list[TableCost]) -> list[str]:
    """The generated markdown table of the tables' CPU-hours."""
    lines = [
        "| table | runs | training | decoding | γ grids (estimated) | total | rows' commits |",
        "|---|---|---|---|---|---|---|",
    ]
    for cost in costs:
        lines.append(
            f"| {cost.table} | {cost.runs} | {cost.training_h:.1f} h | {cost.decoding_h:.1f} h | "
            f"{cost.grid_h:.1f} h | {cost.total_h:.1f} h | {cost.commits} |"
        )
    return lines


def help_line(costs: list[TableCost]) -> str:
    """One line for `make help`: each table's total CPU-hours."""
    return "measured CPU-hours at SCALE=small (results/compute.md): " + ", ".join(
        f"{cost.table} {cost.total_h:.0f} h" for cost in costs
    )
