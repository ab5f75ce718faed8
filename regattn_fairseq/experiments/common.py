"""Configuration loading, console-script lookup, subprocess execution and small file helpers
shared by the reproduction suite (data preparation, training/decoding, scoring, result
tables). Paths live in `paths`, run provenance in `provenance`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .paths import CONFIG_DIR, DATA_DIR_ENV, DEFAULT_DATA_DIR, REPO_ROOT

# The attention mappings are the options of the `attention` config group.
MAPPINGS = tuple(
    sorted(p.stem for p in (CONFIG_DIR / "attention").glob("*.yaml") if p.stem != "base")
)
SCALES = ("paper", "small", "smoke")
# Console scripts the suite runs, and the distribution that installs each.
TOOL_PACKAGES = {
    "fairseq-preprocess": "fairseq-fixed",
    "fairseq-hydra-train": "fairseq-fixed",
    "fairseq-generate": "fairseq-fixed",
    "fairseq-validate": "fairseq-fixed",
    "torchrun": "torch",  # several training processes (experiments/launch.py)
}


class ReproError(RuntimeError):
    """A user-facing failure (bad input, missing data, failed tool); printed without a traceback."""


def data_root(data_dir: str | os.PathLike | None) -> Path:
    """The offline data root, which may not exist (a fresh machine): explicit argument, else
    $REGATTN_DATA_DIR, else ../shared/data."""
    chosen = data_dir or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    return Path(chosen).expanduser().resolve()


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
    """The offline data root (`data_root`), which must exist."""
    path = data_root(data_dir)
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


def group_options(group: str) -> tuple[str, ...]:
    """The options of a config group (configs/<group>/*.yaml, `base` excluded)."""
    return tuple(sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml") if p.stem != "base"))


def check_mappings(mappings, group: str = "attention") -> list[str]:
    """The table's "mappings": options of the `attention` group, or of the experiment's
    `mapping_group` (the NER table's `dp` regularisers)."""
    known = MAPPINGS if group == "attention" else group_options(group)
    unknown = [m for m in mappings if m not in known]
    if unknown:
        what = "attention mapping(s)" if group == "attention" else f"{group} option(s)"
        raise ReproError(f"unknown {what} {unknown}; known: {', '.join(known)}")
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


def tool_path(name: str) -> str:
    """The console script `name` of the running interpreter's environment.

    Rule: a tool is taken only from the scripts folder of the environment that runs this
    code: the folder of `sys.executable` (a virtual environment's bin/, whatever it is
    called) or, where it differs, `sysconfig.get_path("scripts")`. PATH is never searched: a
    fairseq-* found there may belong to another environment, with another fairseq than the
    one whose version the provenance records and whose plugin registry `--user-dir` extends.

    Parameters
    ----------
    name : str
        the console script, e.g. ``"fairseq-preprocess"``.

    Returns
    -------
    str
        The absolute path of the script, as a string (ready for a command line).

    Raises
    ------
    ReproError
        the script is not installed in this environment; the message names it,
        the folders searched and how to install it.
    """
    folders = list(
        dict.fromkeys([Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))])
    )
    for folder in folders:
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    package = TOOL_PACKAGES.get(name, name)
    raise ReproError(
        f"tool {name!r} is not installed next to the running interpreter "
        f"(searched {', '.join(str(f) for f in folders)}); install {package!r} into this "
        f"environment (`{sys.executable} -m pip install {package}`, or `make setup`)"
    )


def package_version(package: str) -> str:
    """The installed version of a distribution.

    Parameters
    ----------
    package : str
        the distribution name, e.g. ``"sacremoses"``.

    Returns
    -------
    str
        Its version string, or ``"not installed"``.
    """
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def run_logged(cmd: list[str], log_path: Path, cwd: Path | None = None, echo: bool = True) -> str:
    """Run a command, streaming its output to the terminal (progress) and to log_path.

    Returns the captured output; raises ReproError naming the log on failure."""
    from .run_lock import inherited_fds

    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    lines = []
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # the run folder's lock outlives this process while the tool runs (run_lock)
            pass_fds=inherited_fds(),
        )
        for line in proc.stdout:
            log.write(line)
            lines.append(line)
            if echo:
                sys.stderr.write(line)
        proc.wait()
    if proc.returncode != 0:
        tail = "".join(lines[-15:])
        raise ReproError(
            f"command failed ({proc.returncode}), log {log_path}:\n{' '.join(cmd)}\n{tail}"
        )
    return "".join(lines)


def write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
