"""Figure and statistics tests: headless matplotlib, scripts/ importable, export fixtures."""

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "scripts"))

from attention_fixtures import attention_records, write_jsonl  # noqa: E402

from regattn_fairseq import mappings  # noqa: E402


@pytest.fixture
def export_of(tmp_path):
    """export_of(name, **params) -> path of a JSON-lines export of mapping `name` with its
    default parameters updated by `params`."""
    def make(name: str, **params) -> Path:
        params = {**mappings.defaults_of(name), **params}
        return write_jsonl(tmp_path / f"{name}.jsonl", attention_records(name, params))
    return make
