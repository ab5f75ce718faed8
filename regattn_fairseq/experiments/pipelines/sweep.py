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
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.cli import OneLineParser, run_main
from regattn_fairseq.experiments.core.config import check_mappings, check_scale, load_config
from regattn_fairseq.experiments.core.paths import CONFIG_DIR
from regattn_fairseq.experiments.core.provenance import allow_dirty_from_env, check_clean_tree
from regattn_fairseq.experiments.core.tools import run_logged
from regattn_fairseq.experiments.data.prepare import PreparedData, describe_sources, prepare
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.pipelines.arguments import (
    add_data_arguments,
    add_run_arguments,
)
from regattn_fairseq.experiments.pipelines.arguments import results_dir as run_results_dir
from regattn_fairseq.experiments.pipelines.jobs import Outputs, run_jobs_together, score_model
from regattn_fairseq.experiments.report.specs import table_spec
from regattn_fairseq.experiments.report.sweep_plot import plot_sweep
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.rows.keys import job_key
from regattn_fairseq.experiments.train.fairseq_logs import is_progress
from regattn_fairseq.experiments.train.launch import (
    Launch,
    add_launch_arguments,
    launch_from_args,
    use_threads,
)
from regattn_fairseq.experiments.train.train import (
    collect_trained,
    compose_config,
    config_settings,
    hydra_overrides,
    record_training_start,
    train_command,
)


def parse_args() -> argparse.Namespace:
    sweeps = sorted(p.stem for p in (CONFIG_DIR / "sweep").glob("*.yaml"))
    parser = OneLineParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sweep", choices=sweeps)
    add_data_arguments(parser)
    add_run_arguments(parser)
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


@dataclass(frozen=True)
class Multirun:
    """A sweep's Hydra multirun at one scale.

    Attributes
    ----------
    sweep : DictConfig
        the sweep (configs/sweep/<sweep>.yaml).
    scale : str
        the scale.
    prepared : PreparedData
        the experiment's data.
    folder : Path
        the sweep's folder, one subfolder per job (`job_name`).
    fixed : list of str
        the overrides every job shares, the checkpoint folder (anchored in Hydra's job folder)
        last.
    overrides : list of str
        the multirun's overrides: the fixed ones, the swept values, Hydra's sweep folders and
        the launcher.
    jobs : list of dict
        each job's swept values (parameter -> value), in the grid's order.
    """

    sweep: DictConfig
    scale: str
    prepared: PreparedData
    folder: Path
    fixed: list[str]
    overrides: list[str]
    jobs: list[dict]

    @property
    def params(self) -> DictConfig:
        """The swept parameters at this scale, each with its values."""
        return self.sweep.params[self.scale]

    @property
    def experiment(self) -> DictConfig:
        return self.sweep.experiment


def run() -> None:
    args = parse_args()
    use_threads(args.threads or 1)
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
    check_mappings(sweep.params[scale].attention)
    multirun = plan_multirun(sweep, scale, args)
    print(
        f"[sweep] {sweep.name} ({scale}): {dict(multirun.params)} -> {multirun.folder}", flush=True
    )
    spec = table_spec(sweep)
    results_dir = run_results_dir(args)
    outputs = Outputs(spec, results_dir, args.rescore, "--rescore / RESCORE=1 to score it again")

    def score_step(job: Job, _trained):
        return _score_job(multirun, job, spec, results_dir)

    # one writer per job folder, held to the rows (run_lock): an identical sweep started
    # meanwhile waits, then finds the jobs finished
    jobs = [_job(multirun, values) for values in multirun.jobs]
    todo = run_jobs_together(jobs, outputs, lambda todo: _train(multirun, args), score_step)
    if not todo:
        print(f"[sweep] every job of {spec.table} ({scale}) is finished", flush=True)
        return
    if not args.launch.scores:  # another machine than the first: the first scores
        return
    plot = plot_sweep(results_dir, spec, sweep, scale)
    print(f"[sweep] table {results_dir / (spec.table + '.md')}, plot {plot}", flush=True)


def plan_multirun(sweep: DictConfig, scale: str, args: argparse.Namespace) -> Multirun:
    """Prepare the sweep's data and lay out its multirun: the jobs of the grid (the cartesian
    product of the scale's `params`) and the overrides that train them, each in the folder
    its swept values name.

    Raises
    ------
    ReproError
        the data cannot be prepared.
    """
    params = sweep.params[scale]
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
    folder = (
        work_dir / "checkpoints" / f"sweep_{sweep.name}" / f"{scale}-{prepared.manifest['source']}"
    )
    fixed = [
        *hydra_overrides(experiment, scale, prepared),
        *args.launch.overrides(),
        # Anchored paths: Hydra moves each job into its own directory (fairseq-notes trap 5).
        "checkpoint.save_dir=${hydra:runtime.output_dir}/checkpoints",
    ]
    overrides = [
        *fixed,
        *(f"{key}={','.join(str(v) for v in values)}" for key, values in params.items()),
        f"hydra.sweep.dir={folder}",
        # each job's directory is named by its swept values (Hydra's override_dirname of the
        # overrides not excluded here, i.e. the swept ones): see job_name
        "hydra.sweep.subdir=${hydra.job.override_dirname}",
        f"hydra.job.config.override_dirname.exclude_keys=[{','.join(_key(o) for o in fixed)}]",
        *launcher_overrides(args.launcher, args.launch, args.launcher_override),
    ]
    jobs = [
        dict(zip(params, values, strict=True)) for values in itertools.product(*params.values())
    ]
    return Multirun(sweep, scale, prepared, folder, fixed, overrides, jobs)


def _job(multirun: Multirun, values: dict) -> Job:
    """One job of the grid (its swept `values`), with the key (`rows.keys.job_key`) of the rows
    it would write, before it trains: its config composed with the fixed overrides (but the
    checkpoint folder, which names Hydra's job folder) and its swept values."""
    experiment = multirun.experiment
    overrides = [*multirun.fixed[:-1], *(f"{key}={value}" for key, value in values.items())]
    cfg = compose_config(experiment.train_config, overrides)
    sweep_params = {key: str(value) for key, value in values.items()}
    seed = int(cfg.common.seed)
    key = job_key(
        experiment.name,
        multirun.scale,
        multirun.prepared.manifest["source"],
        values["attention"],
        config_settings(cfg),
        seed,
        sweep_params=sweep_params,
    )
    name = job_name(values)
    return Job(
        experiment=experiment,
        scale=multirun.scale,
        data=multirun.prepared,
        mapping=values["attention"],
        seed=seed,
        run_dir=multirun.folder / name,
        key=key,
        evaluations=tuple(experiment_test_sets(experiment)),
        label=f"sweep {name}",
        sweep_params=sweep_params,
        overrides=tuple(overrides),
    )


def _train(multirun: Multirun, args: argparse.Namespace) -> bool:
    """Train every job of the grid in one ``fairseq-hydra-train --multirun`` (a finished job
    stops at once, an interrupted one resumes).

    Returns
    -------
    bool
        This machine scores the jobs (the first one of a multi-machine launch).

    Raises
    ------
    ReproError
        the multirun failed (its log is named).
    """
    # the code that trains each job, recorded once (a resumed job keeps it)
    for job in multirun.jobs:
        record_training_start(multirun.folder / job_name(job))
    if args.launcher == "basic":  # a submitit launcher's jobs run on other machines
        args.launch.check_visible_gpus()
    run_logged(
        args.launch.command(train_command(multirun.experiment, multirun.overrides, multirun=True)),
        multirun.folder / "multirun.log",
        show=is_progress,
    )
    return args.launch.scores


def _score_job(multirun: Multirun, job: Job, spec: DictConfig, results_dir: Path) -> list:
    """Score a trained job (`jobs.score_model`): its mapping, seed and swept values as its
    Hydra job folder records them.

    Raises
    ------
    ReproError
        the multirun wrote no folder for the job, or a tool failed.
    """
    job_dir = job.run_dir
    if not (job_dir / ".hydra").is_dir():
        raise ReproError(
            f"the multirun wrote no job directory {job_dir} "
            f"(log: {multirun.folder / 'multirun.log'})"
        )
    job_overrides = OmegaConf.load(job_dir / ".hydra" / "overrides.yaml")
    swept = dict(
        item.split("=", 1) for item in job_overrides if item.split("=", 1)[0] in multirun.params
    )
    model = collect_trained(
        job_dir, job_dir, job_dir / "checkpoints", job_dir / "hydra_train.log", list(job_overrides)
    )
    ran = replace(
        job,
        mapping=swept["attention"],
        seed=int(OmegaConf.load(job_dir / ".hydra" / "config.yaml").common.seed),
        sweep_params=swept,
    )
    return score_model(ran, model, spec.table, multirun.sweep.decode, results_dir)


def main() -> None:
    """Runs the command line; errors and Ctrl-C end in one message (`core.cli.run_main`)."""
    run_main(run)


if __name__ == "__main__":
    main()
