"""The jobs of a fairseq table run (`reproduce`): one seed of a mapping, trained at its γ, or
one of the table's baselines, each a `rows.job.Job` run by the one lifecycle
(`jobs.run_job`).

A training job's key is known before it trains (`fairseq_job`, from the overrides that
`train.train` will pass), so that a finished job is found from the rows alone. It is trained
from scratch with --retrain (`train_fresh`), then scored on every evaluation set
(`jobs.score_model`). A baseline is scored the same way (`run_baselines`).
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from regattn_fairseq.experiments.core.provenance import provenance
from regattn_fairseq.experiments.core.result_row import attention_stats
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.pipelines import plan
from regattn_fairseq.experiments.pipelines.jobs import HELD_ELSEWHERE, Outputs, run_job, score_model
from regattn_fairseq.experiments.pipelines.plan import TableRun
from regattn_fairseq.experiments.rows import baselines
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.rows.keys import job_key
from regattn_fairseq.experiments.train.train import (
    compose_settings,
    hydra_overrides,
    mapping_override,
    train,
)


def train_overrides(experiment, scale, data, mapping, seed, run_dir, extra) -> list[str]:
    """The overrides `train.train` passes (for the job's key before it trains)."""
    return [
        *hydra_overrides(experiment, scale, data),
        mapping_override(experiment, mapping),
        f"common.seed={seed}",
        f"checkpoint.save_dir={run_dir / 'checkpoints'}",
        *extra,
    ]


def gamma_overrides(extra: list[str], gamma: float | None) -> list[str]:
    """A training's extra overrides (--override's), then its γ's when it has one."""
    return [*extra] + ([f"model.attention_gamma={gamma}"] if gamma is not None else [])


def fairseq_job(
    experiment,
    scale: str,
    data: PreparedData,
    mapping: str,
    seed: int,
    run_dir: Path,
    overrides: list[str],
    dry_run,
    gamma: float | None = None,
    selection: dict | None = None,
    writes_rows: bool = True,
) -> Job:
    """A fairseq training job, with the key (`keys.job_key`) of the rows it would write,
    composed before it trains from the overrides `train.train` will pass.

    Parameters
    ----------
    overrides : list of str
        the training's extra overrides (`gamma_overrides`).
    dry_run : DryRun
        the run's caps (`dry_run.DryRun`), recorded in the rows and their key.
    gamma, selection
        γ (None: the mapping's config's) and GAMMA=auto's record of its choice.
    writes_rows : bool
        False for a run that writes no rows (a γ grid's): no key is composed.
    """
    record = dry_run.record()
    key = None
    if writes_rows:
        settings = compose_settings(
            experiment.train_config,
            train_overrides(experiment, scale, data, mapping, seed, run_dir, overrides),
        )
        source = data.manifest["source"]
        key = job_key(experiment.name, scale, source, mapping, settings, seed, record)
    return Job(
        experiment=experiment,
        scale=scale,
        data=data,
        mapping=mapping,
        seed=seed,
        run_dir=run_dir,
        key=key,
        evaluations=tuple(experiment_test_sets(experiment)),
        label=f"{experiment.name} {mapping} seed {seed}",
        gamma=gamma,
        gamma_selection=selection,
        overrides=tuple(overrides),
        dry_run=record,
    )


def train_fresh(job: Job, retrain: bool, launch):
    """`train.train` of the job, after removing its run folder with --retrain (`retrain`)."""
    if retrain and job.run_dir.exists():
        print(f"[train] --retrain: removing {job.run_dir}", flush=True)
        shutil.rmtree(job.run_dir)
    return train(
        job.experiment,
        job.scale,
        job.mapping,
        job.seed,
        job.data,
        job.run_dir,
        list(job.overrides),
        launch,
    )


@dataclass(frozen=True)
class MappingSetup:
    """How one mapping of the table is trained.

    Attributes
    ----------
    mapping : str
        the mapping.
    gamma : float or None
        its temperature γ (None: its config's).
    selection : dict or None
        GAMMA=auto's record of the γ choice (`gamma_select.choose_gamma`).
    """

    mapping: str
    gamma: float | None
    selection: dict | None


def table_job(table: TableRun, experiment, data: PreparedData, setup: MappingSetup, seed: int):
    """One seed of a mapping of the table run (`fairseq_job`), in its folder (`TableRun.run_dir`)
    with the run's overrides and its γ."""
    return fairseq_job(
        experiment,
        table.scale,
        data,
        setup.mapping,
        seed,
        table.run_dir(experiment, data, setup.mapping, seed, setup.gamma),
        gamma_overrides(table.args.override, setup.gamma),
        table.args.dry_run,
        setup.gamma,
        setup.selection,
    )


def table_outputs(table: TableRun) -> Outputs:
    """Where a table run's rows go; --rescore and --retrain ask finished jobs again."""
    return Outputs(table.spec, table.results_dir, table.args.rescore or table.args.retrain)


def run_table_job(
    table: TableRun,
    experiment,
    data: PreparedData,
    setup: MappingSetup,
    seed: int,
    share: bool = False,
    started=None,
) -> Path | None:
    """Train and score one seed of a mapping (`jobs.run_job`, with its `share` and `started`),
    unless its rows exist (--rescore, --retrain: run it again).

    Returns
    -------
    Path or None
        The attention export of its first evaluation set when `seed` is the first seed (a
        panel of the figure) and it has one; None too for a job left to another process.
    """
    args = table.args
    # a seed that chose γ was trained (or retrained) by choose_gamma: collect it, never train
    # twice
    chose_gamma = setup.selection is not None and seed in setup.selection["seeds"]

    def train_step(job: Job):
        return train_fresh(job, args.retrain and not chose_gamma, args.launch)

    def score_step(job: Job, model):
        return score_model(job, model, table.spec.table, table.spec.decode, table.results_dir)

    job = table_job(table, experiment, data, setup, seed)
    rows = run_job(job, table_outputs(table), train_step, score_step, share=share, started=started)
    if rows is HELD_ELSEWHERE or seed != table.seeds[0] or not rows:
        return None
    export = attention_stats(rows[0]).get("export")
    return Path(export) if export else None


def baseline_job(spec, experiment, scale: str, data: PreparedData, work_dir: Path, name: str):
    """A baseline of the experiment as a job: seed 0, its own folder under the work dir, its
    settings for a config, the evaluation sets it applies to."""
    config = baselines.baseline_config(name)
    label = baselines.baseline(name).label
    return Job(
        experiment=experiment,
        scale=scale,
        data=data,
        mapping=label,
        seed=0,
        run_dir=plan.run_dir(work_dir, spec, experiment, scale, data, f"baseline-{name}", 0),
        key=job_key(experiment.name, scale, data.manifest["source"], label, config, 0),
        evaluations=tuple(baselines.baseline_evaluations(name, experiment, data)),
        label=f"{experiment.name} {label}",
    )


def run_baselines(
    spec, experiment, scale: str, data, work_dir: Path, results_dir: Path, rescore: bool
) -> None:
    """Score the experiment's baselines (``baselines:`` in its table config) unless their rows
    exist (``--rescore`` scores them again): the table shows them beside the mappings. Each
    baseline is a job like a training run (`jobs.run_job`), with nothing to train."""
    outputs = Outputs(spec, results_dir, rescore, "--rescore / RESCORE=1 to score it again")
    for name in experiment.get("baselines") or []:

        def score_step(job: Job, _nothing, name=name):
            run_id = uuid.uuid4().hex[:12]
            return baselines.baseline_rows(job, spec.table, name, run_id, provenance(), results_dir)

        job = baseline_job(spec, experiment, scale, data, work_dir, name)
        run_job(job, outputs, _nothing_to_train, score_step)


def _nothing_to_train(job: Job) -> bool:
    """A baseline's training step: none (True: this machine scores it)."""
    return True
