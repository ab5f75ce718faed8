"""Fixtures of the reproduction-suite tests (tests/experiments/, one folder per stage): the
offline data. Helpers shared by several test modules are plain modules beside this file
(`make_runs`, `local_layouts`, `wandb_offline`), imported by name."""

from pathlib import Path

import pytest

from regattn_fairseq.experiments.core.paths import DEFAULT_DATA_DIR


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real offline data (smoke scale reads only the first lines of each file)."""
    if not (DEFAULT_DATA_DIR / "README.md").is_file():
        pytest.skip(f"offline data not found at {DEFAULT_DATA_DIR}")
    return DEFAULT_DATA_DIR
