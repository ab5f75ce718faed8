"""One job of a table run (`reproduce`): one seed of a mapping, trained at its γ, or one of the
table's baselines.

A training job's key is known before it trains (`training_job_key`, from the overrides that
`train.train` will pass), so that a finished job is found from the rows alone. Its lifecycle
(`run_job`): one writer at a time on its run folder (`run_lock`), skipped when its rows exist,
else trained (`train_fresh`: from scratch with --retrain), scored on every evaluation set and
its rows written (the table regenerated). A baseline is scored the same way (`run_baselines`).
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from regattn_fairseq.experiments.core.provenance import provenance
from regattn_fairseq.experiments.core.run_lock import run_lock
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.pipelines import plan
from regattn_fairseq.experiments.pipelines.plan import TableRun
from regattn_fairseq.experiments.report.views import write_outputs
from regattn_fairseq.experiments.rows import baselines
from regattn_fairseq.experiments.rows.build import result_rows
from regattn_fairseq.experiments.rows.keys import finished_rows, job_key
from regattn_fairseq.experiments.rows.store import load_rows
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


def training_job_key(experiment, scale, data, mapping, seed, run_dir, extra, args) -> tuple:
    """The key (`keys.job_key`) of the rows the job would write, before it trains."""
    settings = compose_settings(
        experiment.train_config,
        train_overrides(experiment, scale, data, mapping, seed, run_dir, extra),
    )
    return job_key(
        experiment.name,
        scale,
        data.manifest["source"],
        mapping,
        settings,
        seed,
        args.dry_run.record(),
    )


def train_fresh(experiment, scale, mapping, seed, data, run_dir, extra, retrain, launch):
    """`train.train`, after removing the run folder with --retrain (`retrain`)."""
    if retrain and run_dir.exists():
        print(f"[train] --retrain: removing {run_dir}", flush=True)
        shutil.rmtree(run_dir)
    return train(experiment, scale, mapping, seed, data, run_dir, extra, launch)


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
    overrides : list of str
        every training run's extra overrides (--override's, then γ's).
    """

    mapping: str
    gamma: float | None
    selection: dict | None
    overrides: list[str]


def run_job(
    table: TableRun, experiment, data: PreparedData, setup: MappingSetup, seed: int
) -> Path | None:
    """Train and score one seed of a mapping, unless its rows exist (--rescore, --retrain: run
    it again).

    Returns
    -------
    Path or None
        The attention export of its first evaluation set when `seed` is the first seed (a
        panel of the figure) and it has one.
    """
    args, mapping = table.args, setup.mapping
    run_dir = plan.run_dir(
        table.work_dir,
        table.spec,
        experiment,
        table.scale,
        data,
        mapping,
        seed,
        setup.gamma,
        args.dry_run,
    )
    key = training_job_key(
        experiment, table.scale, data, mapping, seed, run_dir, setup.overrides, args
    )
    first_seed = seed == table.seeds[0]
    # one writer per run folder, held to the rows (run_lock): a second process waits here,
    # then finds the job finished
    with run_lock(run_dir, f"{experiment.name} {mapping} seed {seed}"):
        done = finished_rows(table.rows(), key, list(experiment_test_sets(experiment)))
        if done and not (args.rescore or args.retrain):
            print(
                f"[skip] {experiment.name} {mapping} seed {seed}: finished (config "
                f"{key[-1]}, run {done[0]['run_id']}); --rescore / RESCORE=1 or "
                f"--retrain to run it again",
                flush=True,
            )
            if first_seed and done[0].get("attention", {}).get("export"):
                return Path(done[0]["attention"]["export"])
            return None
        model = _train_job(table, experiment, data, setup, seed, run_dir)
        if model is None:  # another machine than the first: it scores
            return None
        rows = _score_job(table, experiment, data, setup, seed, model, run_dir)
        return Path(rows[0]["attention"]["export"]) if first_seed else None


def _train_job(
    table: TableRun, experiment, data: PreparedData, setup: MappingSetup, seed: int, run_dir
):
    """Train one seed of a mapping (`train.train`), from scratch with --retrain.

    Returns
    -------
    TrainedModel or None
        The model; None on a machine other than the first of a multi-machine launch.
    """
    # a seed that chose γ was trained (or retrained) by choose_gamma: collect it, never train
    # twice
    chose_gamma = setup.selection is not None and seed in setup.selection["seeds"]
    return train_fresh(
        experiment,
        table.scale,
        setup.mapping,
        seed,
        data,
        run_dir,
        setup.overrides,
        table.args.retrain and not chose_gamma,
        table.args.launch,
    )


def _score_job(
    table: TableRun, experiment, data: PreparedData, setup: MappingSetup, seed: int, model, run_dir
) -> list:
    """Score a trained model on every evaluation set and write its rows (the table
    regenerated).

    Returns
    -------
    list of ResultRow
        Its rows, one per evaluation set.
    """
    args = table.args
    rows = result_rows(
        table.spec.table,
        experiment,
        table.scale,
        setup.mapping,
        seed,
        data,
        model,
        table.spec.decode,
        run_dir / "decode",
        uuid.uuid4().hex[:12],
        results_dir=table.results_dir,
        gamma_selection=setup.selection,
        dry_run=args.dry_run.record(),
    )
    table_file = write_outputs(
        table.results_dir, table.spec, rows, again=args.rescore or args.retrain
    )
    scores = "; ".join(f"{row['evaluation']} {row['metrics']}" for row in rows)
    print(f"[results] {setup.mapping} seed {seed}: {scores} -> {table_file}", flush=True)
    return rows


def run_baselines(
    spec, experiment, scale: str, data, work_dir: Path, results_dir: Path, rescore: bool
) -> None:
    """Score the experiment's baselines (``baselines:`` in its table config) unless their rows
    exist (``--rescore`` scores them again): the table shows them beside the mappings. Each
    baseline is a job like a training run: one writer at a time (`run_lock` on its own folder
    under the work dir), and a second process finds it finished."""
    for name in experiment.get("baselines") or []:
        config = baselines.baseline_config(name)
        label = baselines.baseline(name).label
        key = job_key(experiment.name, scale, data.manifest["source"], label, config, 0)
        folder = plan.run_dir(work_dir, spec, experiment, scale, data, f"baseline-{name}", 0)
        with run_lock(folder, f"{experiment.name} {label}"):
            rows = load_rows(results_dir, spec.table)
            done = finished_rows(rows, key, baselines.baseline_evaluations(name, experiment, data))
            if done and not rescore:
                print(
                    f"[skip] {experiment.name} {label}: scored (run {done[0]['run_id']})",
                    flush=True,
                )
                continue
            rows = baselines.baseline_rows(
                spec.table,
                experiment,
                scale,
                name,
                data,
                uuid.uuid4().hex[:12],
                provenance(),
                results_dir=results_dir,
            )
            write_outputs(results_dir, spec, rows, again=rescore)
        scores = "; ".join(f"{row['evaluation']} {row['metrics']}" for row in rows)
        print(f"[results] {experiment.name} {label}: {scores}", flush=True)
