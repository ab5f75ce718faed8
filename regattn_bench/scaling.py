"""How the cost of each mapping grows: forward+backward time against the number of rows (at a
fixed length) and against the row length (at a fixed number of rows), with torch.softmax in
the same run. Issue #5 expects cost linear in rows and about d log d in the length; the table
gives the fitted log-log slope of each curve (1.0 = linear).

Every run is appended to results/bench/scaling_<device>.json; results/bench/scaling_<device>.md
and the figure results/figures/bench_scaling_<device>.png are regenerated from the latest full run.

    python -m regattn_bench scaling
    python -m regattn_bench scaling --quick
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import torch

from regattn_checkout.files import replacing
from regattn_checkout.paths import BENCH_RESULTS_DIR, FIGURES_DIR

from .mapping_speed import BASELINE, regattn_methods, timer
from .run_record import append_run, commit_label, environment

ROWS = (1024, 4096, 16384, 65536)
ROWS_LENGTH = 30
LENGTHS = (16, 64, 256, 1024, 4096)
LENGTH_ROWS = 256
QUICK = {"rows": (256, 1024), "lengths": (16, 64)}


def run(
    rows_axis, length_axis, repeats: int, min_run_time: float, seed: int, device: str
) -> list[dict]:
    methods = {BASELINE: lambda x: torch.softmax(x, -1), **regattn_methods()}
    shapes = [("rows", r, ROWS_LENGTH) for r in rows_axis] + [
        ("length", LENGTH_ROWS, d) for d in length_axis
    ]
    results = []
    for axis, rows, d in shapes:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(rows, d, generator=g).to(device)
        grad_out = torch.randn(rows, d, generator=g).to(device)
        timers = {name: timer(fn, x, grad_out, backward=True) for name, fn in methods.items()}
        blocks = {name: [] for name in methods}
        for _ in range(repeats):  # round-robin over the methods
            for name, t in timers.items():
                blocks[name].extend(t.blocked_autorange(min_run_time=min_run_time).times)
        for name in methods:
            results.append(
                {
                    "axis": axis,
                    "rows": rows,
                    "d": d,
                    "method": name,
                    "median_ms": 1e3 * statistics.median(blocks[name]),
                }
            )
        print(f"done {rows}x{d}", flush=True)
    return results


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log(time) against log(size)."""
    sizes, times = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(sizes, times, 1)[0])


def _curves(results: list[dict], axis: str) -> dict[str, list[tuple[float, float]]]:
    key = "rows" if axis == "rows" else "d"
    curves = {}
    for r in results:
        if r["axis"] == axis:
            curves.setdefault(r["method"], []).append((r[key], r["median_ms"]))
    return curves


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, axis, label in (
        (axes[0], "rows", f"rows (length {ROWS_LENGTH})"),
        (axes[1], "length", f"row length d ({LENGTH_ROWS} rows)"),
    ):
        for method, points in _curves(record["results"], axis).items():
            style = dict(color="black", linewidth=2.2) if method == BASELINE else {}
            ax.loglog(*zip(*points, strict=True), marker="o", markersize=3, label=method, **style)
        ax.set_xlabel(label)
        ax.set_ylabel("forward+backward, ms")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=7)
    env = record["env"]
    fig.suptitle(
        f"Cost of the attention mappings, {env['device']}, {env['threads']} threads "
        f"(commit {env['git_commit'][:10]})",
        fontsize=9,
    )
    fig.tight_layout()
    with replacing(path) as partial:
        fig.savefig(partial, dpi=130)
    plt.close(fig)


def markdown(record: dict) -> str:
    env = record["env"]
    by_axis = {axis: _curves(record["results"], axis) for axis in ("rows", "length")}
    rows_axis = [p[0] for p in next(iter(by_axis["rows"].values()))]
    lengths = [p[0] for p in next(iter(by_axis["length"].values()))]
    lines = [
        f"# Scaling of the attention mappings ({record['date']}, {env['device']})",
        "",
        f"float32 forward+backward, median ms; commit `{commit_label(env)}`, torch {env['torch']}, "
        f"{env['threads']} threads (load average {env['loadavg_1_5_15_before_after'][0][0]:.1f} "
        f"before the run). Slope: least-squares slope of log time against log size (1.0 = "
        f"linear; d log d over this range is about 1.1-1.2). Small sizes are dominated by the "
        f"fixed cost of a call, which flattens the slopes. Figure: "
        f"`results/figures/bench_{record['file_stem']}.png`.",
        "",
        f"## Against the number of rows (length {ROWS_LENGTH})",
        "",
        "| method | " + " | ".join(f"{r}" for r in rows_axis) + " | slope |",
        "|---|" + "---|" * (len(rows_axis) + 1),
    ]
    for method, points in by_axis["rows"].items():
        lines.append(
            f"| {method} | "
            + " | ".join(f"{t:.3g}" for _, t in points)
            + f" | {slope(points):.2f} |"
        )
    lines += [
        "",
        f"## Against the row length ({LENGTH_ROWS} rows)",
        "",
        "| method | " + " | ".join(f"{d}" for d in lengths) + " | slope |",
        "|---|" + "---|" * (len(lengths) + 1),
    ]
    for method, points in by_axis["length"].items():
        lines.append(
            f"| {method} | "
            + " | ".join(f"{t:.3g}" for _, t in points)
            + f" | {slope(points):.2f} |"
        )
    lines += ["", f"All runs: `results/bench/{record['file_stem']}.json`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repeats", type=int, default=2, help="round-robin passes over the methods"
    )
    parser.add_argument(
        "--min-run-time", type=float, default=0.2, help="seconds per blocked_autorange"
    )
    parser.add_argument(
        "--quick", action="store_true", help="two small sizes per axis (smoke test)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=BENCH_RESULTS_DIR)
    parser.add_argument("--figure-dir", type=Path, default=FIGURES_DIR)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.min_run_time = 1, 0.05
    if args.threads:
        torch.set_num_threads(args.threads)
    rows_axis, lengths = (QUICK["rows"], QUICK["lengths"]) if args.quick else (ROWS, LENGTHS)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    env = environment()
    results = run(rows_axis, lengths, args.repeats, args.min_run_time, args.seed, device)
    record = {
        "args": {
            "rows": rows_axis,
            "lengths": lengths,
            "repeats": args.repeats,
            "min_run_time": args.min_run_time,
            "quick": args.quick,
            "seed": args.seed,
        },
        "env": environment(before=env),
        "results": results,
    }
    stem = f"scaling_{record['env']['device_kind']}"
    md = append_run(args.out_dir, stem, record, markdown)
    if not args.quick:
        plot({**record, "file_stem": stem}, args.figure_dir / f"bench_{stem}.png")
    print(md.read_text())


if __name__ == "__main__":
    main()
