"""Re-run one committed result row from the commit that trained it, and report the difference.

    python scripts/rerun_row.py results/raw/nmt.jsonl 0794e89578b7 [--data-dir DIR] [--keep]

The plan (`plan_rerun`) reads the row: its training commit (``train.started.git_commit``; a row
without one cannot be re-run: "training commit unknown"), table, experiment, scale, data source,
mapping, seed and the Hydra overrides it was trained with beyond the standard ones (e.g. a γ).
`rerun` checks the commit out in a temporary `git worktree`, builds or copies the compiled
kernels, runs that commit's `scripts/reproduce.py` for that one job into a fresh work and
results folder, and reports, per evaluation and metric, the recorded value, the new value and
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

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import REPO_ROOT, RESULTS_DIR
from regattn_checkout.provenance import git
from regattn_fairseq.experiments.core.paths import DEFAULT_DATA_DIR
from regattn_fairseq.experiments.core.provenance import provenance
from regattn_fairseq.experiments.data.sources import SOURCES
from regattn_fairseq.experiments.report.reruns import draw_reruns
from regattn_fairseq.experiments.rows.keys import cell_key, row_config_sha256, row_label
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


def plan_rerun(rows: list[dict], work_dir: Path, data_dir: str | None = None) -> dict:
    """What re-running a recorded run takes: the commit and the command.

    Parameters
    ----------
    rows : list of dict
        the run's rows (`load_run`).
    work_dir : Path
        the fresh folder for the re-run's data, checkpoints and results.
    data_dir : str, optional
        the offline data root to pass.

    Returns
    -------
    dict
        ``{"commit", "table", "command" (argv, relative to the worktree), "results_file",
        "expected": {evaluation: metrics}}``.

    Raises
    ------
    ReproError
        the run has no training commit, was trained or scored from a dirty tree, is a
        sweep row or a dry run.
    """
    row = rows[0]
    started = row["train"].get("started") or {}
    if not started.get("git_commit"):
        raise ReproError(
            f"run {row['run_id']}: training commit unknown (the row has no train.started "
            f"record), so it cannot be re-run from its commit"
        )
    if started.get("git_dirty") or row.get("git_dirty"):
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
            f"{started['git_commit'][:10]} instead"
        )
    extra = [
        o
        for o in row["train"].get("overrides") or []
        if not any(o.split("=", 1)[0].startswith(k.rstrip("/")) for k in STANDARD_KEYS)
    ]
    command = [
        "scripts/reproduce.py",
        row["table"],
        "--scale",
        row["scale"],
        "--mappings",
        row["mapping"],
        "--seeds",
        str(row["seed"]),
        # a hub stand-in (no offline copies) is no source to ask for: it arises again by itself;
        # local data is found again through $REGATTN_LOCAL_DATA
        *(["--source", row["data_source"]] if row["data_source"] in SOURCES else []),
        "--work-dir",
        str(work_dir),
        "--results-dir",
        str(work_dir / "results"),
        *(["--data-dir", str(data_dir)] if data_dir else []),
        *(arg for o in extra for arg in ("--override", o)),
    ]
    return {
        "commit": started["git_commit"],
        "table": row["table"],
        "experiment": row["experiment"],
        "command": command,
        "results_file": work_dir / "results" / "raw" / f"{row['table']}.jsonl",
        "expected": {r["evaluation"]: r["metrics"] for r in rows},
    }


def cell_spread(all_rows: list[dict], run_rows: list[dict]) -> dict:
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


def compare(expected: dict, new_rows: list[dict], experiment: str, spread: dict) -> list[dict]:
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


def record_rerun(results_dir: Path, results_file: Path, rows: list[dict], report: list[dict]):
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
        "trained_at": row["train"]["started"]["git_commit"],
        "recorded_hardware": row.get("hardware"),
        "rerun_hardware": here["hardware"],
        "rerun_versions": here["versions"],
        "report": report,
    }
    append_records(Path(results_dir) / "reruns.jsonl", [record])
    return draw_reruns(Path(results_dir))


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
    git("worktree", "add", "--detach", str(tree), plan["commit"])
    try:
        kernels = list((REPO_ROOT / "regattn").glob("_C*.so"))
        same_sources = (
            subprocess.run(
                ["git", "diff", "--quiet", plan["commit"], "HEAD", "--", "regattn/csrc"],
                cwd=REPO_ROOT,
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
        print(f"[rerun] {run_id} at {plan['commit'][:10]} in {tree}", flush=True)
        done = subprocess.run([sys.executable, *plan["command"]], cwd=tree, env=env)
        if done.returncode != 0:
            raise ReproError(f"the re-run failed ({done.returncode}); worktree {tree}")
        new_rows = read_rows(plan["results_file"])
        report = compare(plan["expected"], new_rows, plan["experiment"], spread)
    finally:
        if not keep:
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
