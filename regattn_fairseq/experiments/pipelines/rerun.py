"""Re-run one committed result row from the commit that trained it, and report the difference.

    python scripts/rerun_row.py results/raw/nmt.jsonl 0794e89578b7 [--data-dir DIR] [--keep]

The plan (`plan_rerun`) reads the row: its training commit (``train.started.git_commit``; a row
without one cannot be re-run: "training commit unknown") and the job that wrote it
(`recorded_job`: experiment, scale, data source, mapping, seed, the Hydra overrides it was
trained with beyond the standard ones, e.g. a γ, and the key of its rows). `rerun` runs that job
through the one job lifecycle (`jobs.run_job`), its training step being the commit's own run:
the commit checked out in a temporary `git worktree`, the compiled kernels built or copied, and
that commit's `scripts/reproduce.py` run for that one job into a fresh work and results folder
(`rerun_command`); it then reports, per evaluation and metric, the recorded value, the new value and
their difference, and whether the difference lies within the spread of the row's table cell
(`cell_spread`: the sample std of the metric over the cell's seeds, same config; a cell of
one seed has no std, so only an identical number passes). Each report is appended, with the
date, CPU and versions of the re-run, to ``results/reruns.jsonl`` (append-only), and
``results/reruns.md`` is drawn again from it (`record_rerun`): a reproduction check is a
committed result like any other. Sweep rows are not supported (re-run the sweep at the
commit instead); dirty rows are refused (their diff is not recoverable from the hash), and so
are dry runs (capped data, a few updates: nothing to reproduce)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import REPO_ROOT, RESULTS_DIR
from regattn_checkout.provenance import git
from regattn_fairseq.experiments.core.paths import DEFAULT_DATA_DIR
from regattn_fairseq.experiments.core.provenance import provenance
from regattn_fairseq.experiments.core.result_row import (
    ResultRow,
    from_dirty_tree,
    gamma_selection,
    train_record,
    train_settings,
    training_commit,
    training_start,
)
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.data.sources import SOURCES
from regattn_fairseq.experiments.pipelines.jobs import Outputs, run_job
from regattn_fairseq.experiments.report.reruns import draw_reruns
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.rows.keys import cell_key, job_key, row_config_sha256, row_label
from regattn_fairseq.experiments.rows.store import append_records, read_rows

# overrides every run has (paths and the job's identity), passed again by reproduce.py
STANDARD_KEYS = (
    "scale/",
    "task.data",
    "common.user_dir",
    "attention",
    "common.seed",
    "checkpoint.save_dir",
    "hydra.",
)


def load_run(results_file: Path, run_id: str) -> list[dict]:
    """The rows of one run (one per evaluation set).

    Parameters
    ----------
    results_file : Path
        a ``results/raw/<table>.jsonl``.
    run_id : str
        the run id.

    Returns
    -------
    list of dict
        The rows.

    Raises
    ------
    ReproError
        no row has that run id.
    """
    found = [r for r in read_rows(results_file) if r["run_id"] == run_id]
    if not found:
        raise ReproError(f"no row with run_id {run_id} in {results_file}")
    return found


def refuse_rerun(row: ResultRow) -> None:
    """Refuse a row that cannot be re-run from its commit.

    Raises
    ------
    ReproError
        the run has no training commit, was trained or scored from a dirty tree, is a
        sweep row or a dry run.
    """
    commit = training_commit(row)
    if not commit:
        raise ReproError(
            f"run {row['run_id']}: training commit unknown (the row has no train.started "
            f"record), so it cannot be re-run from its commit"
        )
    if from_dirty_tree(row):
        started = training_start(row) or {}
        raise ReproError(
            f"run {row['run_id']} was trained or scored from a dirty tree (diff "
            f"{str(started.get('git_diff_sha256') or row.get('git_diff_sha256'))[:12]}); "
            f"the diff cannot be recovered from its hash"
        )
    if row.get("dry_run"):
        raise ReproError(
            f"run {row['run_id']} is a dry run ({row['dry_run']}): its numbers mean nothing; "
            f"run the configuration without the caps instead"
        )
    if row.get("sweep_params"):
        raise ReproError(
            f"run {row['run_id']} is a sweep job: re-run `scripts/sweep.py` at commit "
            f"{commit[:10]} instead"
        )


def extra_overrides(row: ResultRow) -> list[str]:
    """The Hydra overrides a row's model was trained with beyond those every run has (paths
    and the job's identity, `STANDARD_KEYS`, which reproduce.py passes again), e.g. a γ."""
    return [
        o
        for o in train_record(row).get("overrides") or []
        if not any(o.split("=", 1)[0].startswith(k.rstrip("/")) for k in STANDARD_KEYS)
    ]


def recorded_job(rows: list[ResultRow], work_dir: Path) -> Job:
    """The job that wrote a recorded run, to run again in `work_dir`.

    The job is run by its commit's own `scripts/reproduce.py` (`rerun`), so it holds what the
    rows record of it: the experiment they name (its definition is the commit's), the data
    they record (``data_source`` and ``data``; the commit's run prepares it again under
    `work_dir`), the mapping, seed, γ selection and dry-run caps, the overrides beyond the
    standard ones (`extra_overrides`), and the key of their job (`keys.job_key` of the
    training settings they record, equal to `keys.row_job_key` of each of them).

    Parameters
    ----------
    rows : list of ResultRow
        the run's rows (`load_run`), one per evaluation set.
    work_dir : Path
        the re-run's work folder (its data, checkpoints and results): the job's folder.

    Returns
    -------
    Job
        The job; its ``gamma`` is the one its overrides set (None: its config's).
    """
    row = rows[0]
    overrides = extra_overrides(row)
    gammas = [o.split("=", 1)[1] for o in overrides if o.startswith("model.attention_gamma=")]
    return Job(
        experiment=OmegaConf.create({"name": row["experiment"]}),
        scale=row["scale"],
        data=PreparedData(work_dir, {"source": row["data_source"], **row["data"]}),
        mapping=row["mapping"],
        seed=row["seed"],
        run_dir=work_dir,
        key=job_key(
            row["experiment"],
            row["scale"],
            row["data_source"],
            row["mapping"],
            train_settings(row),
            row["seed"],
            row.get("dry_run"),
            row.get("sweep_params"),
        ),
        evaluations=tuple(r["evaluation"] for r in rows),
        label=f"{row['experiment']} {row['mapping']} seed {row['seed']} (run {row['run_id']})",
        gamma=float(gammas[-1]) if gammas else None,
        gamma_selection=gamma_selection(row),
        sweep_params=row.get("sweep_params") or {},
        overrides=tuple(overrides),
        dry_run=row.get("dry_run"),
    )


def rerun_command(job: Job, table: str, data_dir: str | None = None) -> list[str]:
    """The command that runs a recorded job (`recorded_job`) at its commit: that commit's
    `scripts/reproduce.py` for this one job, into the job's folder (argv, relative to the
    commit's worktree)."""
    source = job.data.manifest["source"]
    return [
        "scripts/reproduce.py",
        table,
        "--scale",
        job.scale,
        "--mappings",
        job.mapping,
        "--seeds",
        str(job.seed),
        # a hub stand-in (no offline copies) is no source to ask for: it arises again by itself;
        # local data is found again through $REGATTN_LOCAL_DATA
        *(["--source", source] if source in SOURCES else []),
        "--work-dir",
        str(job.run_dir),
        "--results-dir",
        str(job.run_dir / "results"),
        *(["--data-dir", str(data_dir)] if data_dir else []),
        *(arg for o in job.overrides for arg in ("--override", o)),
    ]


def plan_rerun(rows: list[ResultRow], work_dir: Path, data_dir: str | None = None) -> dict:
    """What re-running a recorded run takes: the commit, the job and the command.

    Parameters
    ----------
    rows : list of ResultRow
        the run's rows (`load_run`).
    work_dir : Path
        the fresh folder for the re-run's data, checkpoints and results.
    data_dir : str, optional
        the offline data root to pass.

    Returns
    -------
    dict
        ``{"commit", "table", "experiment", "job" (`recorded_job`), "command" (argv, relative
        to the worktree), "results_dir", "expected": {evaluation: metrics}}``.

    Raises
    ------
    ReproError
        see `refuse_rerun`.
    """
    row = rows[0]
    refuse_rerun(row)
    job = recorded_job(rows, work_dir)
    return {
        "commit": training_commit(row),
        "table": row["table"],
        "experiment": row["experiment"],
        "job": job,
        "command": rerun_command(job, row["table"], data_dir),
        "results_dir": job.run_dir / "results",
        "expected": {r["evaluation"]: r["metrics"] for r in rows},
    }


def cell_spread(all_rows: list[ResultRow], run_rows: list[ResultRow]) -> dict:
    """The spread of each metric over the seeds of the table cell a run belongs to.

    The cell's rows are those with the run's `cell_key`, evaluation and config hash (the rows
    one table cell shows); of several rows of one seed the newest counts, as in the tables.

    Parameters
    ----------
    all_rows : list of dict
        every row of the run's raw results file.
    run_rows : list of dict
        the run's rows (`load_run`).

    Returns
    -------
    dict
        evaluation -> metric -> ``{"std": sample std over the seeds (None for one seed),
        "n": number of seeds}``.
    """
    spread = {}
    for run_row in run_rows:
        same = (cell_key(run_row), run_row["evaluation"], row_config_sha256(run_row))
        per_seed = {
            r["seed"]: r["metrics"]
            for r in all_rows
            if (cell_key(r), r["evaluation"], row_config_sha256(r)) == same
        }
        spread[run_row["evaluation"]] = {
            metric: {
                "std": statistics.stdev(values) if len(values) > 1 else None,
                "n": len(values),
            }
            for metric in run_row["metrics"]
            for values in [[m[metric] for m in per_seed.values() if m.get(metric) is not None]]
        }
    return spread


def compare(expected: dict, new_rows: list[ResultRow], experiment: str, spread: dict) -> list[dict]:
    """The per-metric difference between the recorded and the re-run rows.

    Parameters
    ----------
    expected : dict
        evaluation -> recorded metrics.
    new_rows : list of dict
        the re-run's rows.
    experiment : str
        the recorded run's experiment (other experiments of the table are ignored).
    spread : dict
        `cell_spread` of the recorded run.

    Returns
    -------
    list of dict
        ``{"evaluation", "metric", "recorded", "rerun", "difference", "cell_std", "cell_n",
        "within_std"}`` per metric; ``within_std``: the absolute difference is at most the
        cell's std, or, for a cell of one seed, the difference is 0; False when the re-run
        lacks the metric.
    """
    latest = {r["evaluation"]: r for r in new_rows if r["experiment"] == experiment}
    report = []
    for evaluation, metrics in expected.items():
        new = latest.get(evaluation, {}).get("metrics", {})
        for metric, value in metrics.items():
            other = new.get(metric)
            difference = None if other is None else round(other - value, 4)
            cell = spread[evaluation][metric]
            if difference is None:
                within = False
            elif cell["std"] is None:
                within = difference == 0
            else:
                within = abs(difference) <= cell["std"]
            report.append(
                {
                    "evaluation": evaluation,
                    "metric": metric,
                    "recorded": value,
                    "rerun": other,
                    "difference": difference,
                    "cell_std": None if cell["std"] is None else round(cell["std"], 4),
                    "cell_n": cell["n"],
                    "within_std": within,
                }
            )
    return report


def record_rerun(results_dir: Path, results_file: Path, rows: list[ResultRow], report: list[dict]):
    """Append a re-run's report to ``reruns.jsonl`` and draw ``reruns.md`` again from it.

    Parameters
    ----------
    results_dir : Path
        where ``reruns.jsonl`` and ``reruns.md`` live (``results/``).
    results_file : Path
        the raw results file the run was read from.
    rows : list of dict
        the recorded run's rows.
    report : list of dict
        `compare`'s report.

    Returns
    -------
    Path
        the Markdown file.
    """

    here = provenance()
    row = rows[0]
    record = {
        "date": here["date"],
        "results_file": Path(results_file).name,
        "run_id": row["run_id"],
        "table": row["table"],
        "experiment": row["experiment"],
        "scale": row["scale"],
        "cell": row_label(row),
        "seed": row["seed"],
        "config_sha256": row_config_sha256(row),
        "recorded_date": row["date"],
        "trained_at": training_commit(row),
        "recorded_hardware": row.get("hardware"),
        "rerun_hardware": here["hardware"],
        "rerun_versions": here["versions"],
        "report": report,
    }
    append_records(Path(results_dir) / "reruns.jsonl", [record])
    return draw_reruns(Path(results_dir))


def run_at_commit(commit: str, command: list[str], tree: Path, label: str) -> None:
    """Run `command` (`rerun_command`) in a `git worktree` of `commit` at `tree`, with the
    compiled kernels copied from this checkout where the commit's kernel sources are the same,
    else built there.

    Raises
    ------
    ReproError
        the command failed.
    """
    git("worktree", "add", "--detach", str(tree), commit)
    kernels = list((REPO_ROOT / "regattn").glob("_C*.so"))
    same_sources = (
        subprocess.run(
            ["git", "diff", "--quiet", commit, "HEAD", "--", "regattn/csrc"], cwd=REPO_ROOT
        ).returncode
        == 0
    )
    if kernels and same_sources:
        for kernel in kernels:
            shutil.copy2(kernel, tree / "regattn" / kernel.name)
    else:
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True
        )
    env = {**os.environ, "PYTHONPATH": str(tree)}
    print(f"[rerun] {label} at {commit[:10]} in {tree}", flush=True)
    done = subprocess.run([sys.executable, *command], cwd=tree, env=env)
    if done.returncode != 0:
        raise ReproError(f"the re-run failed ({done.returncode}); worktree {tree}")


def rerun(
    results_file: Path,
    run_id: str,
    data_dir: str | None = None,
    keep: bool = False,
    record_dir: Path | None = RESULTS_DIR,
):
    """Re-run a recorded run at its training commit (see the module docstring).

    Parameters
    ----------
    results_file : Path
        the raw results file.
    run_id : str
        the run id.
    data_dir : str, optional
        the offline data root; by default this checkout's (``../shared/data``) where it
        exists, since the worktree's own default, beside a temporary folder, holds nothing.
    keep : bool
        keep the worktree and work folder (their path is printed).
    record_dir : Path, optional
        where `record_rerun` appends the report (None: not recorded).

    Returns
    -------
    list of dict
        `compare`'s report.

    Raises
    ------
    ReproError
        see `plan_rerun`; or the re-run failed.
    """

    rows = load_run(results_file, run_id)
    if data_dir is None and DEFAULT_DATA_DIR.is_dir():
        data_dir = str(DEFAULT_DATA_DIR)
    spread = cell_spread(read_rows(results_file), rows)
    scratch = Path(tempfile.mkdtemp(prefix=f"rerun-{run_id}-"))
    plan = plan_rerun(rows, scratch / "work", data_dir)
    tree = scratch / "tree"
    # the commit's run writes the job's rows itself, into the re-run's own results folder
    outputs = Outputs(OmegaConf.create({"table": plan["table"]}), plan["results_dir"], False)

    def train_at_commit(job: Job) -> bool:
        run_at_commit(plan["commit"], plan["command"], tree, job.label)
        return True

    def rows_of_commit(job: Job, _trained) -> list[ResultRow]:
        return [r for r in outputs.rows() if r["experiment"] == plan["experiment"]]

    try:
        new_rows = run_job(plan["job"], outputs, train_at_commit, rows_of_commit, writes_rows=False)
        report = compare(plan["expected"], new_rows, plan["experiment"], spread)
    finally:
        if not keep:
            if tree.exists():
                git("worktree", "remove", "--force", str(tree))
            shutil.rmtree(scratch, ignore_errors=True)
    if record_dir is not None:
        print(f"[rerun] recorded in {record_rerun(record_dir, results_file, rows, report)}")
    return report


def main(argv: list[str] | None = None) -> None:
    """Command line: print the per-metric report; exit 1 if a difference exceeds its cell's std."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_file", type=Path)
    parser.add_argument("run_id")
    parser.add_argument("--data-dir")
    parser.add_argument("--keep", action="store_true", help="keep the worktree and work folder")
    parser.add_argument(
        "--record-dir",
        type=Path,
        default=RESULTS_DIR,
        help="append the report to RECORD_DIR/reruns.jsonl and redraw reruns.md (default: "
        "results/)",
    )
    parser.add_argument("--no-record", action="store_true", help="print the report only")
    args = parser.parse_args(argv)
    try:
        report = rerun(
            args.results_file,
            args.run_id,
            args.data_dir,
            args.keep,
            None if args.no_record else args.record_dir,
        )
    except ReproError as error:
        sys.exit(f"error: {error}")
    print("| evaluation | metric | recorded | re-run | difference | cell std (n) | within std |")
    print("|---|---|---|---|---|---|---|")
    for line in report:
        print(
            f"| {line['evaluation']} | {line['metric']} | {line['recorded']} | {line['rerun']} "
            f"| {line['difference']} | {line['cell_std']} ({line['cell_n']}) "
            f"| {'yes' if line['within_std'] else 'no'} |"
        )
    sys.exit(0 if all(line["within_std"] for line in report) else 1)


if __name__ == "__main__":
    main()
