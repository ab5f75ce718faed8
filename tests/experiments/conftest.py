"""Fixtures of the reproduction-suite tests (tests/experiments/, one folder per stage): the
offline data, attention exports. Helpers shared by several test modules are plain modules
beside this file (`make_runs`, `local_layouts`, `wandb_offline`, `attention_fixtures`),
imported by name. Figures render headless."""

import os
from pathlib import Path

import pytest

# before any test module imports matplotlib
os.environ.setdefault("MPLBACKEND", "Agg")

from attention_fixtures import attention_records, write_export  # noqa: E402

from regattn import mappings  # noqa: E402
from regattn_fairseq.experiments.core.paths import DEFAULT_DATA_DIR  # noqa: E402


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real offline data (smoke scale reads only the first lines of each file)."""
    if not (DEFAULT_DATA_DIR / "README.md").is_file():
        pytest.skip(f"offline data not found at {DEFAULT_DATA_DIR}")
    return DEFAULT_DATA_DIR


@pytest.fixture
def export_of(tmp_path):
    """export_of(name, **params) -> path of an attention export of mapping `name` with its
    default parameters updated by `params`."""

    def make(name: str, **params) -> Path:
        params = {**mappings.defaults_of(name), **params}
        return write_export(tmp_path / f"{name}.jsonl", attention_records(name, params))

    return make
