"""`make` at smoke scale for the reproduction-suite tests, with work and results in a test's
folder."""

import subprocess
from pathlib import Path

import children

from regattn_checkout.paths import REPO_ROOT


def run_make(
    target: str,
    tmp_path: Path,
    data_dir: Path,
    timeout: int = 900,
    variables: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`make <target> SCALE=smoke` (or the given variables) with work and results under
    tmp_path."""
    variables = {"SCALE": "smoke", **(variables or {})}
    return children.run(
        [
            "make",
            "--no-print-directory",
            target,
            *(f"{name}={value}" for name, value in variables.items()),
            f"DATA_DIR={data_dir}",
            f"WORK_DIR={tmp_path}",
            f"RESULTS_DIR={tmp_path / 'results'}",
        ],
        cwd=REPO_ROOT,
        timeout=timeout,
    )
