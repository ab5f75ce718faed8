"""Figure and statistics tests: headless matplotlib, export fixtures."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
from attention_fixtures import attention_records, write_export

from regattn import mappings


@pytest.fixture
def export_of(tmp_path):
    """export_of(name, **params) -> path of a JSON-lines export of mapping `name` with its
    default parameters updated by `params`."""

    def make(name: str, **params) -> Path:
        params = {**mappings.defaults_of(name), **params}
        return write_export(tmp_path / f"{name}.jsonl", attention_records(name, params))

    return make
