"""Console scripts of the running environment, package versions and logged subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.run_lock import inherited_fds

# Console scripts the suite runs, and the distribution that installs each.
TOOL_PACKAGES = {
    "fairseq-preprocess": "fairseq-fixed",
    "fairseq-hydra-train": "fairseq-fixed",
    "fairseq-generate": "fairseq-fixed",
    "fairseq-validate": "fairseq-fixed",
    "torchrun": "torch",  # several training processes (experiments/launch.py)
}


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


def run_logged(
    cmd: list[str],
    log_path: Path,
    cwd: Path | None = None,
    echo: bool = True,
    env: dict[str, str] | None = None,
    show: Callable[[str], bool] | None = None,
) -> str:
    """Run a command, streaming its output to log_path and, with `echo`, the lines `show`
    accepts (default: every line) to the terminal; `env`: variables set for it on top of this
    process's environment.

    Returns the captured output; raises ReproError naming the log on failure."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **(env or {}), PYTHONUNBUFFERED="1")
    lines = []
    # line-buffered: a run killed with its orchestrator (or its machine) keeps every line the
    # tool wrote; resuming replays early stopping and the learning curve from this log
    with open(log_path, "a", buffering=1) as log:
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
            if echo and (show is None or show(line)):
                sys.stderr.write(line)
        proc.wait()
    if proc.returncode != 0:
        tail = "".join(lines[-15:])
        raise ReproError(
            f"command failed ({proc.returncode}), log {log_path}:\n{' '.join(cmd)}\n{tail}"
        )
    return "".join(lines)
