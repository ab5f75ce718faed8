"""The command-line options that several pipelines share, declared once: where the data comes
from (scale, data root, source, local copies), where outputs go (work and results folders) and
whether finished jobs run again; and a table run's (scripts/reproduce.py: mappings, seeds, γ,
what to run, a dry run's caps), with their checks and the table's recipe
(`settle_table_arguments`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.core.cli import gamma_grid, gamma_seeds, seed_list, whole_number
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.core.dry_run import DryRun
from regattn_fairseq.experiments.core.paths import DEFAULT_WORK_DIR, SMOKE_RESULTS_DIR
from regattn_fairseq.experiments.data.sources import SOURCES
from regattn_fairseq.experiments.pipelines.plan import apply_recipe
from regattn_fairseq.experiments.train.launch import add_launch_arguments, launch_from_args


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """--scale, --data-dir, --source, --local-data and --work-dir."""
    parser.add_argument(
        "--scale",
        default="small",
        help="paper | small | smoke (default small; README, 'Reproducing the papers' tables')",
    )
    parser.add_argument(
        "--data-dir", help="offline data root (default $REGATTN_DATA_DIR or ../shared/data)"
    )
    parser.add_argument(
        "--source",
        choices=list(SOURCES),
        help="data source (default: per dataset and scale, configs/prepare/; "
        "docs/reproduction.md 'Data sources')",
    )
    parser.add_argument(
        "--local-data",
        help="--source local: the folder holding the official distributions "
        "(default $REGATTN_LOCAL_DATA)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=DEFAULT_WORK_DIR,
        help="where data/ (prepared data) and checkpoints/ go",
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """--results-dir, --rescore and --allow-dirty: the options of a pipeline that writes rows."""
    parser.add_argument(
        "--results-dir",
        type=Path,
        help=f"where the tables go (default {RESULTS_DIR}; at --scale smoke, a pipeline check, "
        f"the scratch folder {SMOKE_RESULTS_DIR}, so that the committed tables stay as they are)",
    )
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="score again jobs whose rows exist (make RESCORE=1); the checkpoint is reused",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="start a small/paper run on a dirty work tree (ALLOW_DIRTY=1); rows are marked",
    )


def results_dir(args: argparse.Namespace) -> Path:
    """The results folder of a run: --results-dir, else results/ (the scratch folder for smoke).

    Parameters
    ----------
    args : argparse.Namespace
        parsed arguments of `add_data_arguments` and `add_run_arguments`.

    Returns
    -------
    Path
        The folder, resolved.
    """
    default = SMOKE_RESULTS_DIR if args.scale == "smoke" else RESULTS_DIR
    return (args.results_dir or default).resolve()


def add_table_arguments(parser: argparse.ArgumentParser) -> None:
    """A table run's options (scripts/reproduce.py), after its table: the mappings, experiments
    and seeds, γ (`add_gamma_arguments`), the data and run options, what to run, a dry run's
    caps (`add_dry_run_arguments`) and the launch (`launch.add_launch_arguments`); checked and
    completed by `settle_table_arguments`."""
    parser.add_argument("--mappings", nargs="+", help="subset of the table's attention mappings")
    parser.add_argument(
        "--experiments",
        nargs="+",
        metavar="EXPERIMENT",
        help="subset of the table's experiments (configs/reproduce/<table>.yaml `experiments:`, "
        "e.g. `snli` of the continuous table; default: all at the scale)",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=seed_list,
        help="seeds, e.g. `1 2 3` or `1,2,3` (default: the table's seeds for the scale)",
    )
    add_gamma_arguments(parser)
    add_data_arguments(parser)
    add_run_arguments(parser)
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Hydra override for every training run (repeatable)",
    )
    parser.add_argument(
        "--plan-only",
        action="store_true",
        help="print the plan (each job done or to do, and the CPU-hours left) and stop",
    )
    parser.add_argument(
        "--baselines-only",
        action="store_true",
        help="score the table's baselines (configs/reproduce/<table>.yaml `baselines:`) and "
        "train nothing",
    )
    parser.add_argument(
        "--retrain",
        action="store_true",
        help="train again (from scratch) and score jobs whose rows exist",
    )
    add_dry_run_arguments(parser)
    add_launch_arguments(parser)
    add_worker_arguments(parser)


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """--workers: processes that share a table's jobs on one machine (`workers`)."""
    group = parser.add_argument_group(
        "workers",
        "processes that share the table's jobs on this machine (pipelines/workers.py): each "
        "trains a job no other one holds, then waits for the others' to finish",
    )
    group.add_argument(
        "--workers",
        type=whole_number(1),
        default=1,
        help="processes sharing the jobs (WORKERS=N, default 1), each with --threads threads: "
        "WORKERS x THREADS at most the cores; the others' output goes to "
        "WORK_DIR/logs/reproduce-<table>-<scale>-worker<k>.log",
    )
    # set by the first worker on the others it starts (their number, 1..N-1)
    group.add_argument("--worker", type=whole_number(1), default=0, help=argparse.SUPPRESS)


def add_gamma_arguments(parser: argparse.ArgumentParser) -> None:
    """--gamma and the options of a γ chosen on validation (`gamma_select`)."""
    parser.add_argument(
        "--gamma",
        help="`auto`: choose each mapping's γ on validation from the table's gamma_grid "
        "(best validation loss, mean over seeds) and report test at that γ; a number: train "
        "every mapping at that γ",
    )
    parser.add_argument(
        "--gamma-grid",
        type=gamma_grid,
        help="with --gamma auto: the γ grid, e.g. `1,4` (default: the table's gamma_grid); "
        "the grid is recorded with the choice",
    )
    parser.add_argument(
        "--gamma-grid-extend",
        type=whole_number(0),
        help="with --gamma auto: when the best γ is the grid's largest (smallest), train the "
        "next γ beyond it, at the grid's own factor, and again while the new edge wins, at "
        "most this many times on each side (default: the table's gamma_grid_extend, else 0); "
        "the values added are recorded with the choice",
    )
    parser.add_argument(
        "--gamma-seeds",
        type=gamma_seeds,
        default=None,
        help="with --gamma auto: choose γ on the mean validation loss of every seed (`all`, "
        "grid x seeds trainings), on the first seed the table declares for the scale only "
        "(`first`: grid + seeds - 1 trainings; the other seeds, and seeds added later with "
        "--seeds, train at the chosen γ), or on the grid runs of the seeds given (e.g. `1`: "
        "with --seeds 2, seed 2 trains at the γ that seed 1's grid chose; "
        "default: the table's recipe, else `all`)",
    )
    parser.add_argument(
        "--gamma-select-epochs",
        type=whole_number(1),
        help="with --gamma auto: train the grid for this many epochs only (early stopping "
        "off) and choose on the lowest validation loss within them; the chosen γ is then "
        "trained to convergence for every seed (GAMMA_SELECT_EPOCHS=E; default: the grid "
        "runs are the scale's full trainings)",
    )
    parser.add_argument(
        "--gamma-select-only",
        action="store_true",
        help="with --gamma auto: train the γ grid's runs, print each mapping's choice and "
        "stop (no converged run, no baseline, no row); e.g. the grid on a GPU machine, its "
        "train.log files then copied into WORK_DIR here (scripts/gpu_machine/README.md)",
    )


def add_dry_run_arguments(parser: argparse.ArgumentParser) -> None:
    """--max-train, --max-eval and --max-update: a dry run's caps (`core.dry_run.DryRun`)."""
    dry = parser.add_argument_group(
        "dry run",
        "the scale's model, optimizer and schedule on capped data for a few updates, to check "
        "that its configs run end to end (regattn_fairseq/experiments/core/dry_run.py); the "
        "rows are marked and kept apart from real ones, in a --results-dir other than results/",
    )
    dry.add_argument(
        "--max-train", type=int, help="at most N training examples (per language: inflection)"
    )
    dry.add_argument(
        "--max-eval", type=int, help="at most N examples of each validation and evaluation set"
    )
    dry.add_argument("--max-update", type=int, help="stop training after N updates")


def settle_table_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check a table run's parsed options (`add_table_arguments`) and complete them in place:
    the launch and the dry run (each also overrides every training run), the table's recipe
    for the scale (`plan.apply_recipe`: what the command line left unset; ``args.recipe``,
    what it took), γ's options (`_check_gamma_arguments`), the seeds flattened."""
    try:
        args.launch = launch_from_args(args)
    except ReproError as error:
        parser.error(str(error))
    if args.launch.nodes > 1 and args.gamma == "auto":
        parser.error("--gamma auto reads validation losses on machine 0 only: use one machine")
    # the devices are part of every training run's composed config (and so of the job's key)
    args.override = [*args.launch.overrides(), *args.override]
    try:
        args.dry_run = DryRun(args.max_train, args.max_eval, args.max_update)
    except ReproError as error:
        parser.error(str(error))
    # every training run of the job (γ selection included) stops at the dry run's max_update
    args.override = [*args.dry_run.train_overrides(), *args.override]
    # the table's recipe for the scale fills what the command line left unset
    try:
        taken = apply_recipe(args, load_config("reproduce", args.table))
    except ReproError as error:
        parser.error(str(error))
    args.recipe = taken  # said after the data's source, which a run says first
    _check_gamma_arguments(parser, args)
    args.gamma_seeds = args.gamma_seeds or "all"
    args.threads = args.threads or 1
    if args.seeds:
        args.seeds = [seed for group in args.seeds for seed in group]
    if args.baselines_only and args.dry_run.active:
        parser.error("--baselines-only scores the full evaluation sets: no dry-run caps")
    _check_worker_arguments(parser, args)


def _check_worker_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--workers shares jobs that are to do once each: not with the options that ask finished
    jobs again, train no job, or launch a job over several processes or machines."""
    if args.worker >= args.workers:
        parser.error(f"--worker {args.worker} is not one of the {args.workers} workers")
    if args.workers == 1:
        return
    refused = {
        "--retrain": args.retrain,
        "--rescore": args.rescore,
        "--baselines-only": args.baselines_only,
        "--gamma-select-only": args.gamma_select_only,
        "--gpus": args.launch.gpus > 0,
        "--cpu-processes": args.launch.cpu_processes > 1,
        "--nodes": args.launch.nodes > 1,
    }
    named = [option for option, given in refused.items() if given]
    if named:
        parser.error(
            f"--workers {args.workers} cannot be combined with {', '.join(named)}: workers "
            "share the jobs still to do, each trained once on the CPU by one process; run it "
            "with --workers 1 (or MAPPINGS=... per process)"
        )


def _check_gamma_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """γ's options: those of a γ chosen on validation need --gamma auto; any other --gamma
    is a number > 0."""
    if (
        args.gamma_grid
        or args.gamma_grid_extend is not None
        or args.gamma_seeds not in (None, "all")
        or args.gamma_select_epochs
        or args.gamma_select_only
    ) and args.gamma != "auto":
        parser.error(
            "--gamma-grid, --gamma-grid-extend, --gamma-seeds, --gamma-select-epochs and "
            "--gamma-select-only need --gamma auto"
        )
    if args.gamma not in (None, "auto"):
        try:
            fixed = float(args.gamma)
        except ValueError:
            parser.error(f"--gamma must be `auto` or a number > 0, got {args.gamma!r}")
        if not fixed > 0:
            parser.error(f"--gamma must be > 0, got {args.gamma}")
