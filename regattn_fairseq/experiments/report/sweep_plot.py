"""A sweep's figure: the metric against the swept value, one line per mapping."""

from __future__ import annotations

import json
from pathlib import Path

from regattn_checkout.files import replacing
from regattn_fairseq.experiments.core.result_row import ResultRow
from regattn_fairseq.experiments.rows.store import load_rows


def latest_per_run(rows: list[ResultRow], key_fields: tuple[str, ...]) -> list[dict]:
    """Re-running a configuration appends a new row; tables show the most recent one."""
    latest = {}
    for row in rows:
        latest[tuple(json.dumps(row.get(k), sort_keys=True) for k in key_fields)] = row
    return list(latest.values())


def plot_sweep(results_dir: Path, spec, sweep, scale: str) -> Path:
    """Metric against the swept value, one line per mapping; non-numeric values (learned α)
    are drawn as horizontal reference lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        r
        for r in latest_per_run(
            load_rows(results_dir, spec.table),
            ("mapping", "sweep_params", "scale", "seed", "data_source"),
        )
        if r["scale"] == scale
    ]
    figure, axes = plt.subplots(figsize=(5, 3.5))
    for mapping in sorted({r["sweep_params"]["attention"] for r in rows}):
        points, references = [], []
        for row in rows:
            if row["sweep_params"]["attention"] != mapping:
                continue
            value, score = row["sweep_params"][sweep.axis], row["metrics"][sweep.metric]
            try:
                points.append((float(value), score))
            except ValueError:
                references.append((value, score))
        points.sort()
        line = axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=mapping)[
            0
        ]
        for value, score in references:
            axes.axhline(
                score, linestyle="--", color=line.get_color(), label=f"{mapping} ({value})"
            )
    if sweep.log_axis:
        axes.set_xscale("log")
    axes.set_xlabel(sweep.axis.split(".")[-1])
    axes.set_ylabel(sweep.metric)
    axes.set_title(f"{spec.table} ({scale})")
    axes.legend(fontsize="small")
    figure.tight_layout()
    path = results_dir / f"{spec.table}_{scale}.png"
    with replacing(path) as partial:
        figure.savefig(partial, dpi=120)
    plt.close(figure)
    return path
