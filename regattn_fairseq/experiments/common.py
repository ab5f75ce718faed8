"""Paths, configuration loading, subprocess execution and run provenance shared by the
reproduction scripts (data preparation, training/decoding, scoring, result tables)."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "configs"
USER_DIR = REPO_ROOT / "regattn_fairseq"
# The shared offline data sits next to the repository checkout (…/work/main -> …/work/shared).
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DATA_DIR_ENV = "REGATTN_DATA_DIR"

# The attention mappings are the options of the `attention` config group.
MAPPINGS = tuple(sorted(p.stem for p in (CONFIG_DIR / "attention").glob("*.yaml") if p.stem != "base"))
SCALES = ("paper", "small", "smoke")


class ReproError(RuntimeError):
    """A user-facing failure (bad input, missing data, failed tool); printed without a traceback."""


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
    """The offline data root: explicit argument, else $REGATTN_DATA_DIR, else ../shared/data."""
    chosen = data_dir or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    path = Path(chosen).expanduser().resolve()
    if not path.is_dir():
        raise ReproError(
            f"DATA_DIR {path} does not exist; point DATA_DIR (make) / --data-dir / "
            f"${DATA_DIR_ENV} at the offline data folder (default {DEFAULT_DATA_DIR})"
        )
    return path


def require_file(path: Path) -> Path:
    if not path.is_file():
        raise ReproError(f"missing data file: {path}")
    return path


def check_scale(scale: str) -> str:
    if scale not in SCALES:
        raise ReproError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    return scale


def check_mappings(mappings) -> list[str]:
    unknown = [m for m in mappings if m not in MAPPINGS]
    if unknown:
        raise ReproError(f"unknown attention mapping(s) {unknown}; known: {', '.join(MAPPINGS)}")
    return list(mappings)


def load_config(*parts: str) -> DictConfig:
    """Load configs/<parts...>.yaml (orchestration specs, not fairseq training configs)."""
    path = CONFIG_DIR.joinpath(*parts).with_suffix(".yaml")
    if not path.is_file():
        available = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ReproError(f"no config {path.relative_to(REPO_ROOT)}; available: {available}")
    return OmegaConf.load(path)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def venv_tool(name: str) -> str:
    """A console script installed next to the running interpreter (fairseq-*, in .venv/bin)."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def run_logged(cmd: list[str], log_path: Path, cwd: Path | None = None, echo: bool = True) -> str:
    """Run a command, streaming its output to the terminal (progress) and to log_path.

    Returns the captured output; raises ReproError naming the log on failure."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # wandb (if installed and asked for through fairseq's common.wandb_project) stays offline
    # unless the user configured it.
    env.setdefault("WANDB_MODE", "offline")
    lines = []
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for line in proc.stdout:
            log.write(line)
            lines.append(line)
            if echo:
                sys.stderr.write(line)
        proc.wait()
    if proc.returncode != 0:
        tail = "".join(lines[-15:])
        raise ReproError(f"command failed ({proc.returncode}), log {log_path}:\n{' '.join(cmd)}\n{tail}")
    return "".join(lines)


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def provenance() -> dict:
    """What produced a result row: code version, package versions, hardware, date."""
    import torch

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": _git("status", "--porcelain") not in ("", "unknown"),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            **{p: _version(p) for p in ("fairseq-fixed", "regattn_fairseq", "sacrebleu", "rouge-score", "hydra-core")},
        },
        "hardware": {
            "platform": platform.platform(),
            "cpu": _cpu_model(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.is_available(),
        },
    }


def write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
