"""What every benchmark records next to its numbers, and how runs are kept: each run is
appended to results/bench/<stem>.json (never overwritten) and results/bench/<stem>.md is
regenerated from the latest full (non --quick) run."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from pathlib import Path

import torch

from regattn_fairseq.experiments.core.provenance import cpu_model, git_state

__all__ = ["append_run", "commit_label", "cpu_model", "environment"]


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
        device, device_kind and loadavg_1_5_15_before_after.

    Raises
    ------
    ReproError
        A git command failed: a run never records an unknown commit.
    """
    load = os.getloadavg()
    cuda = torch.cuda.is_available()
    env = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **git_state(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "device": torch.cuda.get_device_name() if cuda else f"CPU ({cpu_model()})",
        "device_kind": "gpu" if cuda else "cpu",
        "loadavg_1_5_15_before_after": [list(load), None],
    }
    if before is not None:
        env["date"] = before["date"]
        env["loadavg_1_5_15_before_after"] = [before["loadavg_1_5_15_before_after"][0], list(load)]
    return env


def append_run(out_dir: Path, stem: str, record: dict, markdown) -> Path:
    """Append `record` to out_dir/<stem>.json; rewrite out_dir/<stem>.md with
    markdown(latest full run). Returns the markdown path."""
    record = {"date": record["env"]["date"], "file_stem": stem, **record}
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{stem}.json"
    history = json.loads(json_path.read_text()) if json_path.exists() else {"runs": []}
    history["runs"].append(record)
    json_path.write_text(json.dumps(history, indent=1) + "\n")
    full_runs = [r for r in history["runs"] if not r["args"].get("quick")]
    md_path = out_dir / f"{stem}.md"
    md_path.write_text(markdown((full_runs or history["runs"])[-1]))
    return md_path
