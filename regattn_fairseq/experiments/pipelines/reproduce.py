#!/usr/bin/env python
"""Reproduce one paper table end to end: prepare the data, train one model per attention
mapping (and seed), score it, and append the rows to results/raw/<table>.jsonl, regenerating
results/<table>.md next to the paper's numbers. How an experiment trains and scores is its
trainer's (`trainers`): fairseq-hydra-train, then fairseq-generate or fairseq-validate
(`fairseq_trainer`), or a pretrained Hugging Face encoder fine-tuned (`pretrained`).

    python scripts/reproduce.py table2 --scale small
    python scripts/reproduce.py nmt --scale smoke --mappings softmax sparsemax

Tables are the files in configs/reproduce/. A run directory
(WORK_DIR/checkpoints/<table>/<experiment>/<scale>-<source>/<mapping>/seed<N>) is stable, so an
interrupted run resumes from its last checkpoint; delete it to train from scratch. With
--workers N, N processes share the jobs (`workers`)."""

import argparse
import sys
from pathlib import Path

from omegaconf import DictConfig

from regattn_fairseq.experiments.core.cli import OneLineParser, run_main
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.core.paths import CONFIG_DIR
from regattn_fairseq.experiments.core.provenance import allow_dirty_from_env, check_clean_tree
from regattn_fairseq.experiments.data.prepare import PreparedData, describe_sources, prepare
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.pipelines.arguments import (
    add_table_arguments,
    settle_table_arguments,
)
from regattn_fairseq.experiments.pipelines.arguments import results_dir as run_results_dir
from regattn_fairseq.experiments.pipelines.plan import (
    ExperimentTrainer,
    Progress,
    TableRun,
    print_plan,
)
from regattn_fairseq.experiments.pipelines.table_jobs import run_baselines
from regattn_fairseq.experiments.pipelines.trainers import (
    check_table,
    table_experiments,
    trainer_of,
)
from regattn_fairseq.experiments.pipelines.workers import other_workers
from regattn_fairseq.experiments.report.figures import (
    FigureSetup,
    cells_without_attention,
    figure_panels,
    gamma_suffix,
    plot_attention_figure,
)
from regattn_fairseq.experiments.rows.store import check_row_kinds
from regattn_fairseq.experiments.train.launch import use_threads


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: a table and its options (`arguments.add_table_arguments`), checked
    and completed by the table's recipe (`arguments.settle_table_arguments`)."""
    tables = sorted(p.stem for p in (CONFIG_DIR / "reproduce").glob("*.yaml"))
    parser = OneLineParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("table", choices=tables)
    add_table_arguments(parser)
    args = parser.parse_args(argv)
    settle_table_arguments(parser, args)
    return args


def run(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    use_threads(args.threads)
    spec = load_config("reproduce", args.table)
    experiments = table_experiments(spec, args)
    table = plan_table_run(spec, experiments, args)
    trainers = {e.name: trainer_of(e) for e in experiments}  # known: checked by check_table
    # Prepare every dataset before training anything: missing data fails in seconds.
    prepared = {e.name: _prepare(table, e) for e in experiments}
    for experiment in experiments:
        _leave_out_missing_evaluations(experiment, prepared[experiment.name])
    # before any training: every job, done or to do, and the CPU-hours left
    jobs, grids = [], 0.0
    for experiment in experiments:
        planned, grid = trainers[experiment.name].plan_jobs(
            table, experiment, prepared[experiment.name]
        )
        jobs, grids = jobs + planned, grids + grid
    print_plan(args.table, table.scale, jobs, grids, args.workers)
    if args.plan_only:
        return
    # with --workers, the first worker (the process the user started) starts the others
    starts = args.workers if args.worker == 0 else 1
    argv = sys.argv[1:] if argv is None else argv
    progress = Progress(jobs, workers=args.workers)
    with other_workers(argv, starts, table.work_dir, args.table, table.scale):
        _run_jobs(args, table, experiments, trainers, prepared, progress)


def _run_jobs(args, table: TableRun, experiments, trainers, prepared, progress: Progress) -> None:
    """The baselines, then each experiment's jobs (or only its γ choices, or only the
    baselines), then its attention figure (the first worker's, once every job is done)."""
    # a dry run's capped data would make a meaningless baseline; a γ-grid-only run scores none;
    # of a multi-machine launch, machine 0 alone writes rows (the baselines' too)
    if args.launch.scores and not (args.dry_run.active or args.gamma_select_only):
        # --rescore with --mappings scores those mappings again, not the table's baselines,
        # which it would only duplicate (the same numbers)
        rescore_baselines = args.rescore and (args.baselines_only or not args.mappings)
        for experiment in experiments:
            run_baselines(
                table.spec,
                experiment,
                table.scale,
                prepared[experiment.name],
                table.work_dir,
                table.results_dir,
                rescore_baselines,
            )
    if args.baselines_only:
        return
    for experiment in experiments:
        trainer, data = trainers[experiment.name], prepared[experiment.name]
        if args.gamma_select_only:
            trainer.choose_gammas(table, experiment, data)
        else:
            exports = trainer.run(table, experiment, data, progress)
            if args.worker == 0:
                _draw_attention_figure(table, experiment, trainer, exports)


def plan_table_run(spec: DictConfig, experiments: list, args: argparse.Namespace) -> TableRun:
    """Check every argument before any data is read (issue #26), print where the data comes
    from, and settle the seeds, mappings and folders of the run.

    Raises
    ------
    ReproError
        a bad argument or mapping option, a dirty tree at a scale that needs a clean one, or
        a results folder whose rows are of the other kind (dry or real).
    """
    scale = args.scale
    # every argument, the mappings' parameters included, before any data is read (issue #26)
    check_table(spec, experiments, args)
    # the first line says where the data comes from (hub stand-in included) and its sizes
    datasets = [(e.dataset, e.get("dataset_options")) for e in experiments]
    print(
        describe_sources(
            args.table,
            datasets,
            scale,
            data_dir=args.data_dir,
            source=args.source,
            local_dir=args.local_data,
            caps=args.dry_run.data_caps(),
        ),
        flush=True,
    )
    if getattr(args, "recipe", None):
        print(
            f"[recipe] from configs/reproduce/{args.table}.yaml: "
            + ", ".join(f"{k}={v}" for k, v in args.recipe.items()),
            flush=True,
        )
    # a dry run checks that configs run, like the smoke scale: its rows are marked and kept apart
    check_clean_tree(scale, args.allow_dirty or allow_dirty_from_env() or args.dry_run.active)
    seeds = args.seeds or list(spec.seeds[scale])
    mappings = list(args.mappings or spec.mappings)  # checked by check_table
    work_dir = args.work_dir.resolve()
    results_dir = run_results_dir(args)
    check_row_kinds(results_dir, spec.table, args.dry_run.active)  # before any training
    return TableRun(spec, args, seeds, mappings, work_dir, results_dir)


def _prepare(table: TableRun, experiment) -> PreparedData:
    """The experiment's data at the run's scale (`data.prepare.prepare`)."""
    args = table.args
    return prepare(
        experiment.dataset,
        table.scale,
        data_dir=args.data_dir,
        source=args.source,
        work_dir=table.work_dir,
        overrides=experiment.get("dataset_options"),
        caps=args.dry_run.data_caps(),
        local_dir=args.local_data,
    )


def _leave_out_missing_evaluations(experiment, data: PreparedData) -> None:
    """Drop from the experiment the evaluation sets its data lacks, saying so: a hub
    stand-in lacks the evaluation sets the hub does not have (DUC 2004)."""
    available = data.manifest["evaluations"]
    test_sets = experiment_test_sets(experiment)
    left_out = [name for name in test_sets if name not in available]
    experiment.test_sets = [t.name for name, t in test_sets.items() if name not in left_out]
    if left_out:
        print(f"[data] {experiment.name}: scored without {left_out} (not in the data)")


def _draw_attention_figure(
    table: TableRun, experiment, trainer: ExperimentTrainer, exports: list[Path]
) -> None:
    """The experiment's attention figure: one panel per mapping (`figures.figure_panels`), drawn
    when there is at least one."""
    args = table.args
    setup = FigureSetup(
        experiment,
        table.scale,
        table.seeds[0],
        args.gamma,
        args.dry_run.record(),
        tuple(trainer.gamma_mappings),
    )
    rows = table.rows()
    panels = figure_panels(exports, rows, setup, table.results_dir)
    missing = cells_without_attention(rows, setup, table.results_dir)
    if missing:
        print(
            f"[figure] {experiment.name}: no panel for {', '.join(missing)}: no run of theirs "
            "has its attention on disk (an export, or a sidecar in results/raw/attention); "
            "--rescore on a machine that holds a checkpoint of theirs decodes it again",
            flush=True,
        )
    if panels:
        figure = plot_attention_figure(
            table.results_dir / "figures",
            f"{table.spec.table}_{experiment.name}_{table.scale}{args.dry_run.folder_suffix()}"
            f"{gamma_suffix(args.gamma)}_attention",
            [path for path, _ in panels],
            runs=[run for _, run in panels],
        )
        print(f"[figure] {figure[0]}", flush=True)


def main() -> None:
    """Runs the command line; errors and Ctrl-C end in one message (`cli.run_main`)."""
    run_main(run)


if __name__ == "__main__":
    main()
