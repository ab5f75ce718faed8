"""What every benchmark records next to its numbers, and how runs are kept: each run is
appended to results/bench/<stem>.json (never overwritten) and results/bench/<stem>.md is
regenerated from the latest full (non --quick) run."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path

import torch

from regattn_checkout.errors import ReproError
from regattn_checkout.files import write_file
from regattn_checkout.paths import BENCH_RESULTS_DIR
from regattn_checkout.provenance import cpu_model, git_state

__all__ = [
    "add_round_robin_arguments",
    "append_run",
    "commit_label",
    "cpu_model",
    "environment",
    "settle_round_robin_arguments",
]


def add_round_robin_arguments(
    parser: argparse.ArgumentParser, steps: int, repeats: int, seed: int = 0
) -> None:
    """The options of every benchmark that times training steps in round-robin blocks:
    --steps per block, --repeats (blocks), --quick (1 step, 1 block: a smoke run, kept out of
    the .md), --threads, --seed and --out-dir, with this benchmark's defaults."""
    parser.add_argument("--steps", type=int, default=steps, help="training steps per timed block")
    parser.add_argument("--repeats", type=int, default=repeats, help="round-robin passes")
    parser.add_argument("--quick", action="store_true", help="1 step, 1 repeat (smoke test)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--out-dir", type=Path, default=BENCH_RESULTS_DIR)


def settle_round_robin_arguments(args: argparse.Namespace) -> None:
    """Apply --quick (1 step, 1 repeat) and --threads (`add_round_robin_arguments`)."""
    if args.quick:
        args.steps, args.repeats = 1, 1
    if args.threads:
        torch.set_num_threads(args.threads)


def commit_label(env: dict) -> str:
    """The commit of a run as tables show it: the hash, with ``+dirty`` for a dirty tree.

    Parameters
    ----------
    env : dict
        A run's ``env`` (from `environment`); records written before the shared provenance
        carried ``+dirty`` inside ``git_commit`` and no ``git_dirty``.

    Returns
    -------
    str
        e.g. ``"0123abcd...+dirty"``.
    """
    if env.get("git_declared"):
        return (
            env["git_commit"]
            + f" (declared by {DECLARED_COMMIT_ENV}: git could not read the checkout where it ran)"
        )
    return env["git_commit"] + ("+dirty" if env.get("git_dirty") else "")


def environment(before: dict | None = None) -> dict:
    """Code, packages and hardware of a run.

    Call once before measuring and once after with the first result as `before`, so the load
    average around the run is recorded. The code is described as in the result rows of the
    reproduction suite (`regattn_fairseq.experiments.core.provenance.git_state`).

    Parameters
    ----------
    before : dict, optional
        The record made before measuring; its date and first load average are kept.

    Returns
    -------
    dict
        date, git_commit, git_dirty, git_diff_sha256, torch, python, cpu_model, threads, cpus,
        device, device_kind and loadavg_1_5_15_before_after; on a CUDA machine also cuda (torch's
        CUDA version), gpu_driver and triton.

    Raises
    ------
    ReproError
        A git command failed and $REGATTN_DECLARED_COMMIT names no full commit hash: a run
        never records an unknown commit.
    """
    load = os.getloadavg()
    cuda = torch.cuda.is_available()
    env = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **_code_state(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "device": torch.cuda.get_device_name() if cuda else f"CPU ({cpu_model()})",
        "device_kind": "gpu" if cuda else "cpu",
        "loadavg_1_5_15_before_after": [list(load), None],
    }
    if cuda:
        env.update(cuda=torch.version.cuda, gpu_driver=_gpu_driver(), triton=_version("triton"))
    if before is not None:
        env["date"] = before["date"]
        env["loadavg_1_5_15_before_after"] = [before["loadavg_1_5_15_before_after"][0], list(load)]
    return env


# A copy of the work tree without its .git (the tree sent to a GPU machine) can name the commit
# it was copied from here; the record then says the commit was declared, not read.
DECLARED_COMMIT_ENV = "REGATTN_DECLARED_COMMIT"


def _code_state() -> dict:
    """git_state(); where git cannot read the checkout and $REGATTN_DECLARED_COMMIT names a
    full commit hash, that commit with ``git_declared: True`` and an unknown dirtiness."""
    try:
        return git_state()
    except ReproError as error:
        declared = os.environ.get(DECLARED_COMMIT_ENV, "")
        if len(declared) != 40 or not all(c in "0123456789abcdef" for c in declared):
            if declared:
                raise ReproError(
                    f"{DECLARED_COMMIT_ENV}={declared!r} is not a full 40-digit commit hash"
                ) from error
            raise
        return {
            "git_commit": declared,
            "git_dirty": None,
            "git_diff_sha256": None,
            "git_declared": True,
        }


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _gpu_driver() -> str | None:
    """The NVIDIA driver's version, from nvidia-smi (None where it does not run)."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else None


def append_run(out_dir: Path, stem: str, record: dict, markdown) -> Path:
    """Append `record` to out_dir/<stem>.json; rewrite out_dir/<stem>.md with
    markdown(latest full run). Returns the markdown path."""
    record = {"date": record["env"]["date"], "file_stem": stem, **record}
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{stem}.json"
    history = json.loads(json_path.read_text()) if json_path.exists() else {"runs": []}
    history["runs"].append(record)
    write_file(json_path, json.dumps(history, indent=1) + "\n")
    full_runs = [r for r in history["runs"] if not r["args"].get("quick")]
    md_path = out_dir / f"{stem}.md"
    write_file(md_path, markdown((full_runs or history["runs"])[-1]))
    return md_path
