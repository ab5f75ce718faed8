#!/usr/bin/env python
"""Reproduce one paper table end to end: prepare the data, train one model per attention
mapping (and seed) with fairseq-hydra-train, decode with fairseq-generate (or classify with
fairseq-validate), score, and append the rows to results/raw/<table>.jsonl, regenerating
results/<table>.md next to the paper's numbers.

    python scripts/reproduce.py table2 --scale small
    python scripts/reproduce.py nmt --scale smoke --mappings softmax sparsemax

Tables are the files in configs/reproduce/. A run directory
(WORK_DIR/checkpoints/<table>/<experiment>/<scale>-<source>/<mapping>/seed<N>) is stable, so an
interrupted run resumes from its last checkpoint; delete it to train from scratch."""

import argparse
import sys
import uuid
from pathlib import Path

from regattn_fairseq.experiments import runs
from regattn_fairseq.experiments.common import ReproError, check_mappings, check_scale, load_config
from regattn_fairseq.experiments.paths import CONFIG_DIR, DEFAULT_WORK_DIR, RESULTS_DIR
from regattn_fairseq.experiments.prepare import prepare
from regattn_fairseq.experiments.results import plot_attention_figure, write_outputs


def parse_args() -> argparse.Namespace:
    tables = sorted(p.stem for p in (CONFIG_DIR / "reproduce").glob("*.yaml"))
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("table", choices=tables)
    parser.add_argument("--scale", default="small", help="paper | small | smoke (default small)")
    parser.add_argument("--mappings", nargs="+", help="subset of the table's attention mappings")
    parser.add_argument(
        "--seeds", nargs="+", type=int, help="default: the table's seeds for the scale"
    )
    parser.add_argument(
        "--data-dir", help="offline data root (default $REGATTN_DATA_DIR or ../shared/data)"
    )
    parser.add_argument(
        "--source",
        choices=["offline", "online"],
        help="data source (default: per dataset and scale)",
    )
    parser.add_argument(
        "--work-dir", type=Path, default=DEFAULT_WORK_DIR, help="where data/ and checkpoints/ go"
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Hydra override for every training run (repeatable)",
    )
    return parser.parse_args()


def run() -> None:
    args = parse_args()
    spec = load_config("reproduce", args.table)
    scale = check_scale(args.scale)
    mappings = check_mappings(args.mappings or spec.mappings)
    seeds = args.seeds or list(spec.seeds[scale])
    experiments = [e for e in spec.experiments if scale in e.scales]
    work_dir = args.work_dir.resolve()

    # Prepare every dataset before training anything: missing data fails in seconds.
    prepared = {
        e.name: prepare(
            e.dataset,
            scale,
            data_dir=args.data_dir,
            source=args.source,
            work_dir=work_dir,
            overrides=e.get("dataset_options"),
        )
        for e in experiments
    }
    for experiment in experiments:
        data = prepared[experiment.name]
        exports = []  # first evaluation set, first seed: one panel per mapping in the figure
        for mapping in mappings:
            for seed in seeds:
                run_dir = (
                    work_dir
                    / "checkpoints"
                    / spec.table
                    / experiment.name
                    / f"{scale}-{data.manifest['source']}"
                    / mapping
                    / f"seed{seed}"
                )
                model = runs.train(experiment, scale, mapping, seed, data, run_dir, args.override)
                rows = runs.result_rows(
                    spec.table,
                    experiment,
                    scale,
                    mapping,
                    seed,
                    data,
                    model,
                    spec.decode,
                    run_dir / "decode",
                    uuid.uuid4().hex[:12],
                )
                table_file = write_outputs(args.results_dir.resolve(), spec, rows)
                scores = "; ".join(f"{row['evaluation']} {row['metrics']}" for row in rows)
                print(f"[results] {mapping} seed {seed}: {scores} -> {table_file}", flush=True)
                if seed == seeds[0]:
                    exports.append(Path(rows[0]["attention"]["export"]))
        figure = plot_attention_figure(
            args.results_dir.resolve() / "figures",
            f"{spec.table}_{experiment.name}_{scale}_attention",
            exports,
        )
        print(f"[figure] {figure[0]}", flush=True)


def main() -> None:
    """Runs the command line; a ReproError is printed without a traceback."""
    try:
        run()
    except ReproError as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
