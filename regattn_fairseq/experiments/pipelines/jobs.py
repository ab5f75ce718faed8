"""The lifecycle of a job (`rows.job.Job`), one for every kind: a table's mapping and seed
(`table_jobs`), a fine-tuned pretrained encoder (`pretrained`), a baseline, a sweep's job
(`sweep`).

`run_job`: one writer at a time on the job's folder (`run_lock`, held to the rows: a second
process waits, then finds the job finished); skipped when its rows exist (unless asked
again: --rescore, --retrain); else trained, scored (decoded and measured on every evaluation
set: `score_model` for a fairseq model) and its rows written (the table regenerated). Shared
between processes (``--workers``), a job whose folder another process holds is left to it
(`HELD_ELSEWHERE`): the caller comes back to it, waiting, once the free jobs are done. A sweep
trains its jobs together, in one Hydra multirun (`run_jobs_together`): the same steps, each
job's lock held over the training of all.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from regattn_fairseq.experiments.core import cli
from regattn_fairseq.experiments.core.provenance import provenance
from regattn_fairseq.experiments.core.result_row import ResultRow
from regattn_fairseq.experiments.core.run_lock import run_lock
from regattn_fairseq.experiments.data import checksums
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.report.views import write_outputs
from regattn_fairseq.experiments.rows.build import Scored, job_rows, model_train_record
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.rows.store import load_rows
from regattn_fairseq.experiments.score.evaluate import evaluate
from regattn_fairseq.experiments.score.significance import write_items
from regattn_fairseq.experiments.train import tracking
from regattn_fairseq.experiments.train.train import TrainedModel, composed_config

# train(job) -> what was trained, or None on a machine that does not score (a multi-machine
# launch's others); score(job, trained) -> the job's rows; started(job): called as a job to do
# starts (its lock held, its rows missing), before it trains
Train = Callable[[Job], Any]
Score = Callable[[Job, Any], list[ResultRow]]
Started = Callable[[Job], None]


class HeldElsewhere:
    """What `run_job` returns, sharing, for a job whose folder another process holds."""

    def __repr__(self) -> str:
        return "HELD_ELSEWHERE"


HELD_ELSEWHERE = HeldElsewhere()


@dataclass(frozen=True)
class Outputs:
    """Where a run's rows go.

    Attributes
    ----------
    spec : DictConfig
        the table (its ``table`` names ``results/raw/<table>.jsonl``).
    results_dir : Path
        the results folder.
    again : bool
        new rows of finished jobs are asked for (--rescore, --retrain).
    rerun_hint : str
        how to ask for them, in the line that skips a finished job.
    """

    spec: DictConfig
    results_dir: Path
    again: bool
    rerun_hint: str = "--rescore / RESCORE=1 or --retrain to run it again"

    def rows(self) -> list[dict]:
        """The table's raw rows as they are now."""
        return load_rows(self.results_dir, self.spec.table)


def finished(job: Job, outputs: Outputs) -> list[dict]:
    """The job's rows when it is finished and not asked again (saying it is skipped), else []."""
    done = job.finished(outputs.rows())
    if done and not outputs.again:
        print(
            f"[skip] {job.label}: finished (config {job.key[-1]}, run {done[0]['run_id']}); "
            f"{outputs.rerun_hint}",
            flush=True,
        )
        return done
    return []


def run_job(
    job: Job,
    outputs: Outputs,
    train: Train,
    score: Score,
    writes_rows: bool = True,
    share: bool = False,
    started: Started | None = None,
) -> list[dict] | HeldElsewhere | None:
    """Train and score one job unless its rows exist (see the module docstring).

    Parameters
    ----------
    writes_rows : bool
        False when the training step's own process writes the job's rows to `outputs` (a
        re-run at its commit, `rerun`): `score` then collects them, and they are not
        appended again.
    share : bool
        the table's jobs are shared with other processes (``--workers``): a job whose folder
        another process holds is not waited for but left to it (`HELD_ELSEWHERE`).
    started : callable, optional
        called with the job when it is to be trained (its lock held, its rows missing): a
        progress line.

    Returns
    -------
    list of dict, HELD_ELSEWHERE or None
        Its rows (those found, or the new ones); HELD_ELSEWHERE when sharing and another
        process holds it; None on a machine that does not score.
    """
    # one writer per run folder, held to the rows (run_lock): a second process waits here,
    # then finds the job finished; sharing, it leaves the job to the first
    with run_lock(job.run_dir, job.label, wait=not share) as waited:
        if waited is None:
            return HELD_ELSEWHERE
        done = finished(job, outputs)
        if done:
            return done
        if started is not None:
            started(job)
        trained = train(job)
        if trained is None:  # another machine than the first: it scores
            return None
        rows = score(job, trained)
        return write_rows(job, outputs, rows) if writes_rows else rows


def run_jobs_together(
    jobs: list[Job], outputs: Outputs, train_all: Callable[[list[Job]], bool], score: Score
) -> list[Job]:
    """Run jobs whose training is one (a sweep's multirun): each lock taken, the finished
    ones skipped, the others trained by `train_all` (False: this machine does not score),
    then each scored and its rows written.

    Returns
    -------
    list of Job
        The jobs that were not finished.
    """
    with ExitStack() as held:
        for job in jobs:
            held.enter_context(run_lock(job.run_dir, job.label))
        todo = [job for job in jobs if not finished(job, outputs)]
        if todo and train_all(todo):
            for job in todo:
                write_rows(job, outputs, score(job, None))
    return todo


def write_rows(job: Job, outputs: Outputs, rows: list[ResultRow]) -> list[ResultRow]:
    """Append a job's new rows and regenerate its table (`views.write_outputs`)."""
    table_file = write_outputs(outputs.results_dir, outputs.spec, rows, again=outputs.again)
    scores = "; ".join(f"{row['evaluation']} {row['metrics']}" for row in rows)
    print(f"[results] {job.label}: {scores} -> {table_file}", flush=True)
    return rows


def score_model(
    job: Job, model: TrainedModel, table: str, decode_cfg: DictConfig, results_dir: Path | None
) -> list[ResultRow]:
    """Decode (or classify) every evaluation set of a trained fairseq model, score it
    (`score.evaluate`), and assemble the job's rows (`rows.build.job_rows`).

    Parameters
    ----------
    job : Job
        the job.
    model : TrainedModel
        its trained model.
    table : str
        the result table.
    decode_cfg : DictConfig
        beam and batch size.
    results_dir : Path or None
        where the per-item sidecars go (``raw/items/``); none are written without it.

    Returns
    -------
    list of ResultRow
        One row per evaluation set.

    Raises
    ------
    ReproError
        a tool failed, or the data changed (`checksums.verify`).
    """
    run_id = uuid.uuid4().hex[:12]
    config = composed_config(model)
    context = provenance()
    # checked before decoding and again before the rows leave (issue #26): the fingerprint is
    # that of the recorded checksums, which the files were just found to match
    fingerprint = checksums.verify(job.data)
    out_dir = job.run_dir / "decode"
    cli.at(f"scoring {job.experiment.name} {job.mapping} seed {job.seed} ({out_dir})")
    scored = []
    for name, test_set in experiment_test_sets(job.experiment).items():
        result = evaluate(model, job.data, name, test_set.metric, decode_cfg, out_dir)
        items = None
        if results_dir is not None and result.get("items"):
            items = write_items(results_dir, run_id, name, result["items"])
        decode = {
            "wall_s": result["decode_wall_s"],
            "hypotheses": result.get("hypotheses"),
            **OmegaConf.to_container(decode_cfg),
        }
        scored.append(
            Scored(
                name,
                result["metrics"],
                result.get("signature"),
                items,
                decode,
                result["attention"],
            )
        )
    train = model_train_record(model, config)
    rows = job_rows(job, table, run_id, train, scored, fingerprint, context)
    checksums.verify(job.data)
    # the final metrics and attention statistics into the training run's wandb run
    tracking.log_results(model.checkpoint.parent, rows)
    return rows
