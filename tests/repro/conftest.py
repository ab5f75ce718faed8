"""Shared fixtures for the reproduction-suite tests: the offline data, `make` at smoke scale."""

import subprocess
from pathlib import Path

import pytest

from regattn_fairseq.experiments.core.paths import DEFAULT_DATA_DIR, REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real offline data (smoke scale reads only the first lines of each file)."""
    if not (DEFAULT_DATA_DIR / "README.md").is_file():
        pytest.skip(f"offline data not found at {DEFAULT_DATA_DIR}")
    return DEFAULT_DATA_DIR


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
    return subprocess.run(
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
        capture_output=True,
        text=True,
        timeout=timeout,
    )
