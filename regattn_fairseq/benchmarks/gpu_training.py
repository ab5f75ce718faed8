"""Training on one GPU, read off the logs of a device run (issue #30): the NMT table's mappings
trained side by side on one GPU, one `reproduce.py nmt --gpus 1` process each, against the CPU
runs of the same config and seed.

The run's folder holds, per training (``<mapping>-gamma<γ>-seed<N>/``), what the training
wrote: `started.json` (commit, package versions, hardware with the GPU's name), the composed
config (`config.yaml`) and fairseq's log (`train.log.gz`). From them this writes

- per mapping: the epochs completed, the median wall time of an epoch (log timestamps, from one
  epoch's end to the next, validation included) and fairseq's training tokens/s per process;
- the validation loss per epoch beside the CPU row of the same config hash and seed
  (results/raw/nmt.jsonl, its `train.learning_curve`), and the first epoch's training loss;
- the time the NMT table at small scale would take on that GPU at the measured rate: a
  projection, stated as one, from the epochs its CPU runs needed;
- a figure of the validation curves, GPU against CPU.

    python -m regattn_bench gpu-training results/bench/training_gpu  # -> training_gpu.md
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import statistics
from pathlib import Path

import matplotlib
from omegaconf import OmegaConf

from regattn_checkout.paths import BENCH_RESULTS_DIR, RESULTS_DIR
from regattn_fairseq.experiments.report.learning_curves import row_curve
from regattn_fairseq.experiments.report.specs import table_specs
from regattn_fairseq.experiments.rows.keys import config_sha256, row_config_sha256
from regattn_fairseq.experiments.rows.store import load_rows
from regattn_fairseq.experiments.train.fairseq_logs import json_records
from regattn_fairseq.experiments.train.train import config_settings

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from regattn_checkout.files import replacing, write_file

TABLE = "nmt"
# the CPU table's γ selection (GAMMA_SELECT_EPOCHS=3) and seeds (SEEDS=1,2,3), as it is run
GRID_EPOCHS, SEEDS = 3, 3


def _stamp(line: str) -> datetime.datetime:
    """The time of a fairseq log line, ``[2026-11-26 11:49:21,682][train][INFO] - ...``."""
    return datetime.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f")


def read_training(folder: Path) -> dict:
    """One GPU training of the device run: its provenance, config hash and per-epoch log.

    Parameters
    ----------
    folder : Path
        ``<mapping>-gamma<γ>-seed<N>/`` with started.json, config.yaml and train.log.gz.

    Returns
    -------
    dict
        mapping, gamma, seed, config_sha256, started (started.json), epochs (list of
        ``{"epoch", "end", "train_loss", "train_wps", "valid_loss"}``; ``end`` the epoch's
        end as a datetime) and first_update (the log's first time stamp).
    """
    cfg = OmegaConf.load(folder / "config.yaml")
    text = gzip.decompress((folder / "train.log.gz").read_bytes()).decode("utf-8")
    lines = text.splitlines()
    epochs: dict[int, dict] = {}
    for line in lines:
        if "][train][" in line or "][valid][" in line:
            [record] = json_records(line)
            entry = epochs.setdefault(int(record["epoch"]), {"epoch": int(record["epoch"])})
            if "train_loss" in record:
                entry.update(
                    end=_stamp(line),
                    train_loss=float(record["train_loss"]),
                    train_wps=float(record["train_wps"]),
                )
            else:
                entry["valid_loss"] = float(record["valid_loss"])
    complete = [e for _, e in sorted(epochs.items()) if {"end", "valid_loss"} <= e.keys()]
    return {
        # the run folder's name: the table's mapping name (entmax15, not fairseq's entmax)
        "mapping": folder.name.split("-gamma")[0],
        "gamma": cfg.model.attention_gamma,
        "seed": cfg.common.seed,
        "config_sha256": config_sha256(config_settings(cfg)),
        "started": json.loads((folder / "started.json").read_text()),
        "epochs": complete,
        "first_update": _stamp(next(ln for ln in lines if ln.startswith("[20"))),
    }


def cpu_row(rows: list[dict], run: dict) -> dict | None:
    """The CPU row of the same config hash and seed with a learning curve, if there is one."""
    for row in rows:
        if (
            row["seed"] == run["seed"]
            and row_config_sha256(row) == run["config_sha256"]
            and row_curve(row)
            and not (row.get("train", {}).get("started", {}).get("hardware") or {}).get("gpu")
        ):
            return row
    return None


def cpu_curve(rows: list[dict], run: dict) -> dict:
    """The learning curve of that CPU row, {} if there is none."""
    row = cpu_row(rows, run)
    return row_curve(row) if row else {}


def epoch_seconds(run: dict) -> float:
    """The median wall time between the ends of consecutive epochs."""
    ends = [e["end"] for e in run["epochs"]]
    return statistics.median((b - a).total_seconds() for a, b in zip(ends, ends[1:], strict=False))


def markdown(runs: list[dict], rows: list[dict], figure: Path | None) -> str:
    first = runs[0]["started"]
    hw, versions = first["hardware"], first["versions"]
    wall = max(r["epochs"][-1]["end"] for r in runs) - min(r["first_update"] for r in runs)
    lines = [
        f"# Training on one GPU: the NMT table's mappings side by side ({first['date'][:10]}, "
        f"{hw['gpu']})",
        "",
        f"{len(runs)} trainings at once on one {hw['gpu']}, one `reproduce.py nmt --scale small "
        f"--gpus 1 --threads {hw['torch_threads']}` process each ({hw['cpu_count']} CPU cores), "
        f"Multi30k en→de, seed {runs[0]['seed']}, γ as chosen on the CPU where it was "
        f"(γ = 4 otherwise). Commit `{first['git_commit'][:12]}`"
        f"{' (dirty)' if first['git_dirty'] else ''}, torch {versions['torch']}, Python "
        f"{versions['python']}, fairseq-fixed {versions['fairseq-fixed']}. The device "
        f"session's time allowed {wall.total_seconds():.0f} s of training: **no model had "
        "converged** (the CPU runs of these configs early-stopped after the epochs in the "
        "last column), so no row was scored and none is in results/raw/.",
        "",
        "| mapping | γ | epochs | s / epoch | tokens/s per process | validation loss, GPU | "
        "same epoch, CPU run (same config and seed) | first epoch's training loss, GPU / CPU "
        "| CPU run stopped at |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    projected = 0.0
    stops = []
    for run in runs:
        curve = cpu_curve(rows, run)
        last = run["epochs"][-1]
        cpu_valid, cpu_first, stop = "–", "–", "–"
        if curve:
            by_epoch = dict(zip(curve["epochs"], curve["valid_loss"], strict=True))
            cpu_valid = f"{by_epoch[last['epoch']]:.3f}" if last["epoch"] in by_epoch else "–"
            cpu_first = f"{curve['train_loss'][0]:.3f}"
            stop = str(curve["stopped_epoch"])
            stops.append(curve["stopped_epoch"])
        seconds = epoch_seconds(run)
        run["seconds"] = seconds
        lines.append(
            f"| {run['mapping']} | {run['gamma']:g} | {last['epoch']} | {seconds:.1f} | "
            f"{statistics.median(e['train_wps'] for e in run['epochs']):,.0f} | "
            f"{last['valid_loss']:.3f} | {cpu_valid} | "
            f"{run['epochs'][0]['train_loss']:.3f} / {cpu_first} | {stop} |"
        )
    total_wps = sum(statistics.median(e["train_wps"] for e in r["epochs"]) for r in runs)
    cpu_wps = [
        r["train"]["tokens_per_s"] for r in rows if row_curve(r) and r["train"].get("tokens_per_s")
    ]
    mean_stop = statistics.mean(stops) if stops else None
    gaps = []  # GPU minus CPU validation loss, same config, seed and epoch, from epoch 5 on
    for run in runs:
        curve = cpu_curve(rows, run)
        if curve:
            cpu = dict(zip(curve["epochs"], curve["valid_loss"], strict=True))
            gaps += [
                e["valid_loss"] - cpu[e["epoch"]] for e in run["epochs"][4:] if e["epoch"] in cpu
            ]
    lines += [
        "",
        f"Together the {len(runs)} processes trained {total_wps:,.0f} target tokens/s; a "
        f"converged CPU row of this table recorded a median of {statistics.median(cpu_wps):,.0f} "
        "tokens/s (one thread, one process per core, on a shared 2-core machine).",
    ]
    if gaps:
        lines += [
            "",
            f"From epoch 5 on, the GPU's validation loss differs from the CPU run's of the same "
            f"config and seed by {min(gaps):+.3f} to {max(gaps):+.3f} "
            f"(mean {statistics.mean(gaps):+.3f}, "
            f"{len(gaps)} epochs of {sum(1 for r in runs if cpu_curve(rows, r))} mappings). Equal "
            "curves are not expected: the dropout masks come from the CUDA generator and the "
            "kernels round differently.",
        ]
    if mean_stop:
        grid_runs = len(table_specs()[TABLE].gamma_grid)  # configs/reproduce/nmt.yaml
        # every mapping: the γ grid's short runs, then each seed to convergence, all mappings
        # side by side as here, so the table lasts as long as the slowest mapping's queue
        for run in runs:
            epochs = grid_runs * GRID_EPOCHS + SEEDS * mean_stop
            projected = max(projected, epochs * run["seconds"])
        lines += [
            "",
            f"**Projection, not a measurement:** the NMT table at small scale (each mapping: "
            f"{grid_runs} γ × {GRID_EPOCHS} epochs, then {SEEDS} seeds × {mean_stop:.0f} epochs, "
            f"the mean stopping epoch of the CPU runs above) would take about "
            f"{projected / 3600:.1f} h on this GPU with the mappings side by side at these "
            "rates, plus decoding.",
        ]
    if figure:
        lines += ["", f"![validation curves]({figure.name})"]
    lines += ["", "Logs and provenance: the folders beside this file."]
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], rows: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, run in enumerate(runs):
        color = f"C{i}"
        ax.plot(
            [e["epoch"] for e in run["epochs"]],
            [e["valid_loss"] for e in run["epochs"]],
            color=color,
            label=f"{run['mapping']} (GPU)",
        )
        curve = cpu_curve(rows, run)
        if curve:
            ax.plot(curve["epochs"], curve["valid_loss"], color=color, ls="--", lw=1)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation loss")
    ax.set_ylim(top=6)
    ax.set_title("NMT (Multi30k), GPU (solid) against CPU (dashed), same config and seed")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with replacing(path) as partial:
        fig.savefig(partial, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the device run's folder (see above)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--out", type=Path, default=BENCH_RESULTS_DIR / "training_gpu.md")
    args = parser.parse_args(argv)
    folders = sorted(p for p in args.run_dir.iterdir() if (p / "train.log.gz").is_file())
    if not folders:
        parser.error(f"{args.run_dir}: no training folder (one with train.log.gz)")
    runs = [read_training(folder) for folder in folders]
    rows = [dict(r) for r in load_rows(args.results_dir, TABLE)]
    figure = plot(runs, rows, args.out.with_suffix(".png"))
    write_file(args.out, markdown(runs, rows, figure))
    print(args.out)


if __name__ == "__main__":
    main()
