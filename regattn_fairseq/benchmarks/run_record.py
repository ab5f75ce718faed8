"""What every benchmark records next to its numbers, and how runs are kept: each run is
appended to results/bench/<stem>.json (never overwritten) and results/bench/<stem>.md is
regenerated from the latest full (non --quick) run."""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]


def git_commit() -> str:
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain") else "")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def environment(before: dict | None = None) -> dict:
    """Code, packages and hardware of a run. Call once before measuring and once after with
    the first result as `before`, so the load average around the run is recorded."""
    load = os.getloadavg()
    cuda = torch.cuda.is_available()
    env = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(), "torch": torch.__version__, "python": platform.python_version(),
        "cpu_model": cpu_model(), "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
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
