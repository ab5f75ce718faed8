#!/usr/bin/env python
"""Hyperparameter sweep as one Hydra multirun: `fairseq-hydra-train --multirun` trains every
combination in configs/sweep/<sweep>.yaml; each job is then decoded and scored, the rows are
appended to results/raw/sweep_<sweep>.jsonl and results/sweep_<sweep>.{md,png} regenerated.

    python scripts/sweep.py lambda --scale small
    python scripts/sweep.py alpha --scale smoke

Jobs live in WORK_DIR/checkpoints/sweep_<sweep>/<scale>-<source>/<swept values>/, e.g.
`attention=sparsemax,model.attention_gamma=4.0/`: an interrupted sweep resumes each job from
its last checkpoint, and a grid that changes between runs never hands a job another job's
checkpoint (directories named by job number would)."""

import argparse
import itertools
import os
import uuid
from contextlib import ExitStack
from pathlib import Path

from omegaconf import OmegaConf

from regattn_fairseq.experiments import runs
from regattn_fairseq.experiments.arguments import OneLineParser
from regattn_fairseq.experiments.cli import run_main
from regattn_fairseq.experiments.common import (
    ReproError,
    check_mappings,
    check_scale,
    load_config,
    run_logged,
)
from regattn_fairseq.experiments.data_sources import SOURCES
from regattn_fairseq.experiments.launch import (
    Launch,
    add_launch_arguments,
    launch_from_args,
    use_threads,
)
from regattn_fairseq.experiments.paths import CONFIG_DIR, DEFAULT_WORK_DIR, RESULTS_DIR
from regattn_fairseq.experiments.prepare import describe_sources, prepare
from regattn_fairseq.experiments.results import load_rows, write_outputs
from regattn_fairseq.experiments.rowkeys import (
    allow_dirty_from_env,
    check_clean_tree,
    finished_rows,
    job_key,
)
from regattn_fairseq.experiments.run_lock import run_lock


def parse_args() -> argparse.Namespace:
    sweeps = sorted(p.stem for p in (CONFIG_DIR / "sweep").glob("*.yaml"))
    parser = OneLineParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sweep", choices=sweeps)
    parser.add_argument("--scale", default="small", help="paper | small | smoke (default small)")
    parser.add_argument(
        "--data-dir", help="offline data root (default $REGATTN_DATA_DIR or ../shared/data)"
    )
    parser.add_argument(
        "--source", choices=list(SOURCES), help="default: per dataset and scale (README)"
    )
    parser.add_argument(
        "--local-data",
        help="--source local: the folder holding the official distributions "
        "(default $REGATTN_LOCAL_DATA)",
    )
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--rescore", action="store_true", help="score again jobs whose rows exist (RESCORE=1)"
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="start a small/paper sweep on a dirty work tree (ALLOW_DIRTY=1); rows are marked",
    )
    parser.add_argument(
        "--launcher",
        choices=sorted(LAUNCHERS),
        default="basic",
        help="Hydra launcher of the multirun (LAUNCHER=...): basic (the jobs one after another "
        "in this process), submitit_local (each job a local process, all at once) or "
        "submitit_slurm (each job a Slurm job; configs/hydra/launcher/regattn_slurm.yaml)",
    )
    parser.add_argument(
        "--launcher-override",
        action="append",
        default=[],
        metavar="hydra.launcher.KEY=VALUE",
        help="a launcher setting, e.g. hydra.launcher.partition=gpu (repeatable; LAUNCHER_ARGS)",
    )
    add_launch_arguments(parser)
    args = parser.parse_args()
    try:
        check_scale(args.scale)  # before any work (issue #26)
        args.launch = launch_from_args(args)
    except ReproError as error:
        parser.error(str(error))
    if args.launcher != "basic" and args.launch.world_size > 1:
        parser.error(
            f"--launcher {args.launcher} runs each job as its own (Slurm) job on one process: "
            "use --gpus 0 or 1 (the jobs themselves run in parallel)"
        )
    if any(not o.startswith("hydra.launcher.") for o in args.launcher_override):
        parser.error(f"--launcher-override takes hydra.launcher.* only: {args.launcher_override}")
    return args


# --launcher -> the hydra/launcher config (None: Hydra's basic launcher)
LAUNCHERS = {
    "basic": None,
    "submitit_local": "submitit_local",
    "submitit_slurm": "regattn_slurm",
}


def launcher_overrides(launcher: str, launch: Launch, settings: list[str]) -> list[str]:
    """The Hydra overrides that run a sweep's jobs through `launcher`.

    Parameters
    ----------
    launcher : str
        a key of LAUNCHERS.
    launch : Launch
        the devices of each job (one process; a submitit job gets `launch.gpus` GPUs).
    settings : list[str]
        ``hydra.launcher.*`` overrides (partition, account, ...).

    Returns
    -------
    list[str]
        Nothing for the basic launcher, else the launcher choice and its settings.
    """
    config = LAUNCHERS[launcher]
    if config is None:
        return []
    return [f"hydra/launcher={config}", f"hydra.launcher.gpus_per_node={launch.gpus}", *settings]


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def job_name(job: dict) -> str:
    """A job's directory: Hydra's override_dirname of its swept overrides (sorted, joined by
    commas), e.g. `attention=sparsemax,model.attention_gamma=4.0`."""
    return ",".join(sorted(f"{key}={value}" for key, value in job.items()))


def table_spec(sweep) -> OmegaConf:
    """The sweep seen as a result table (rows keyed by mapping and swept value)."""
    evaluations = list(sweep.experiment.evaluations)
    return OmegaConf.create(
        {
            "table": f"sweep_{sweep.name}",
            "title": sweep.title,
            "paper_source": sweep.note,
            "generated_by": f"scripts/sweep.py {sweep.name}",
            "metrics": {e: [sweep.metric] for e in evaluations},
        }
    )


def run() -> None:
    args = parse_args()
    use_threads(args.threads)
    sweep = load_config("sweep", args.sweep)
    scale = check_scale(args.scale)
    # the first line says where the data comes from (hub stand-in included) and its sizes
    print(
        describe_sources(
            f"sweep {sweep.name}",
            [(sweep.experiment.dataset, None)],
            scale,
            data_dir=args.data_dir,
            source=args.source,
            local_dir=args.local_data,
        ),
        flush=True,
    )
    check_clean_tree(scale, args.allow_dirty or allow_dirty_from_env())
    rescore = args.rescore or os.environ.get("RESCORE", "") in ("1", "true", "yes")
    params = sweep.params[scale]
    check_mappings(params.attention)
    work_dir = args.work_dir.resolve()
    experiment = sweep.experiment
    prepared = prepare(
        experiment.dataset,
        scale,
        data_dir=args.data_dir,
        source=args.source,
        work_dir=work_dir,
        local_dir=args.local_data,
    )
    sweep_dir = (
        work_dir / "checkpoints" / f"sweep_{sweep.name}" / f"{scale}-{prepared.manifest['source']}"
    )

    fixed = [
        *runs.hydra_overrides(experiment, scale, prepared),
        *args.launch.overrides(),
        # Anchored paths: Hydra moves each job into its own directory (fairseq-notes trap 5).
        "checkpoint.save_dir=${hydra:runtime.output_dir}/checkpoints",
    ]
    overrides = [
        *fixed,
        *(f"{key}={','.join(str(v) for v in values)}" for key, values in params.items()),
        f"hydra.sweep.dir={sweep_dir}",
        # each job's directory is named by its swept values (Hydra's override_dirname of the
        # overrides not excluded here, i.e. the swept ones): see job_name
        "hydra.sweep.subdir=${hydra.job.override_dirname}",
        f"hydra.job.config.override_dirname.exclude_keys=[{','.join(_key(o) for o in fixed)}]",
        *launcher_overrides(args.launcher, args.launch, args.launcher_override),
    ]
    jobs = [
        dict(zip(params, values, strict=True)) for values in itertools.product(*params.values())
    ]
    print(f"[sweep] {sweep.name} ({scale}): {dict(params)} -> {sweep_dir}", flush=True)
    spec = table_spec(sweep)
    results_dir = args.results_dir.resolve()
    existing = load_rows(results_dir, spec.table)
    todo, keys = [], {}
    for job in jobs:  # a job whose rows exist (same key, same config) is not run again
        cfg = runs.compose_config(
            experiment.train_config,
            [*fixed[:-1], *(f"{key}={value}" for key, value in job.items())],
        )
        settings = runs.config_settings(cfg)
        key = job_key(
            experiment.name,
            scale,
            prepared.manifest["source"],
            f"{job['attention']} {sweep.axis.split('.')[-1]}={job[sweep.axis]}",
            settings,
            int(cfg.common.seed),
        )
        keys[job_name(job)] = key
        done = finished_rows(existing, key, list(experiment.evaluations))
        if done and not rescore:
            print(
                f"[skip] {job_name(job)}: finished (config {key[-1]}, run {done[0]['run_id']}); "
                f"--rescore / RESCORE=1 to score it again",
                flush=True,
            )
        else:
            todo.append(job)
    if not todo:
        print(f"[sweep] every job of {spec.table} ({scale}) is finished", flush=True)
        return
    # one writer per job folder, held to the rows (run_lock): an identical sweep started
    # meanwhile waits, then finds the jobs finished
    with ExitStack() as held:
        for job in todo:
            held.enter_context(run_lock(sweep_dir / job_name(job), f"sweep {job_name(job)}"))
        existing = load_rows(results_dir, spec.table)
        evaluations = list(experiment.evaluations)
        # a job the sweep waited for may have been finished by it
        todo = [
            job
            for job in todo
            if rescore or not finished_rows(existing, keys[job_name(job)], evaluations)
        ]
        if not todo:
            print(f"[sweep] every job of {spec.table} ({scale}) is finished", flush=True)
            return
        for job in jobs:  # the code that trains each job, recorded once (a resumed job keeps it)
            runs.record_training_start(sweep_dir / job_name(job))
        if args.launcher == "basic":  # a submitit launcher's jobs run on other machines
            args.launch.check_visible_gpus()
        run_logged(
            args.launch.command(runs.train_command(experiment, overrides, multirun=True)),
            sweep_dir / "multirun.log",
        )
        if not args.launch.scores:  # another machine than the first: it scores
            return

        for job in todo:
            job_dir = sweep_dir / job_name(job)
            if not (job_dir / ".hydra").is_dir():
                raise ReproError(
                    f"the multirun wrote no job directory {job_dir} "
                    f"(log: {sweep_dir / 'multirun.log'})"
                )
            job_overrides = OmegaConf.load(job_dir / ".hydra" / "overrides.yaml")
            swept = dict(
                item.split("=", 1) for item in job_overrides if item.split("=", 1)[0] in params
            )
            model = runs.collect_trained(
                job_dir,
                job_dir,
                job_dir / "checkpoints",
                job_dir / "hydra_train.log",
                list(job_overrides),
            )
            mapping = f"{swept['attention']} {sweep.axis.split('.')[-1]}={swept[sweep.axis]}"
            rows = runs.result_rows(
                spec.table,
                experiment,
                scale,
                mapping,
                int(OmegaConf.load(job_dir / ".hydra" / "config.yaml").common.seed),
                prepared,
                model,
                sweep.decode,
                job_dir / "decode",
                uuid.uuid4().hex[:12],
                sweep_params=swept,
                results_dir=results_dir,
            )
            write_outputs(results_dir, spec, rows, again=rescore)
            print(f"[results] {mapping}: {rows[0]['metrics']}", flush=True)
    plot = plot_sweep(results_dir, spec, sweep, scale)
    print(f"[sweep] table {results_dir / (spec.table + '.md')}, plot {plot}", flush=True)


def plot_sweep(results_dir: Path, spec, sweep, scale: str) -> Path:
    """Metric against the swept value, one line per mapping; non-numeric values (learned α)
    are drawn as horizontal reference lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from regattn_fairseq.experiments.results import latest_per_run, load_rows

    rows = [
        r
        for r in latest_per_run(
            load_rows(results_dir, spec.table), ("mapping", "scale", "seed", "data_source")
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
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def main() -> None:
    """Runs the command line; errors and Ctrl-C end in one message (`cli.run_main`)."""
    run_main(run)


if __name__ == "__main__":
    main()
