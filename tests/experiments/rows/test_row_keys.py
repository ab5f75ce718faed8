"""The keys of the committed rows never change: their config hashes, cells, row keys and job
keys, recomputed through the one row reader, equal those the code before the staged layout
computed (`committed_row_keys.json`, written by that code from results/raw/*.jsonl). A key that
changed would make a table show a committed row in another cell, or train a finished job
again."""

import json
from pathlib import Path

import pytest

from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.rows.keys import (
    cell_key,
    config_sha256,
    job_key,
    row_config_sha256,
    row_key,
)
from regattn_fairseq.experiments.rows.store import read_rows

EXPECTED = json.loads((Path(__file__).parent / "committed_row_keys.json").read_text())


@pytest.mark.parametrize("raw", sorted(EXPECTED))
def test_committed_rows_keep_their_keys(raw):
    rows = read_rows(RESULTS_DIR / raw)
    expected = EXPECTED[raw]
    assert [r["run_id"] for r in rows[: len(expected)]] == [e["run_id"] for e in expected]
    for row, old in zip(rows, expected, strict=False):
        settings = {k: v for k, v in row["train"]["config"].items() if k != "file"}
        recomputed = {
            "run_id": row["run_id"],
            "evaluation": row["evaluation"],
            "config_sha256": row_config_sha256(row),
            "computed_config_sha256": config_sha256(row["train"]["config"]),
            "cell_key": list(cell_key(row)),
            "row_key": list(row_key(row)),
            "job_key": list(
                job_key(
                    row["experiment"],
                    row["scale"],
                    row.get("data_source"),
                    row["mapping"],
                    settings,
                    row["seed"],
                    row.get("dry_run"),
                    sweep_params=row.get("sweep_params"),
                )
            ),
        }
        assert recomputed == old


def test_sweep_rows_name_their_mapping_alone():
    """Version-1 sweep rows held the swept value in the mapping's name; read, they carry it
    as a field only, and keep their key."""
    rows = read_rows(RESULTS_DIR / "raw" / "sweep_gamma.jsonl")
    assert {r["mapping"] for r in rows} == {"softmax", "sparsemax", "fusedmax"}
    assert all(r["sweep_params"]["model.attention_gamma"] for r in rows)
    assert (
        cell_key(rows[0])[3]
        == f"{rows[0]['mapping']} attention_gamma="
        + rows[0]["sweep_params"]["model.attention_gamma"]
    )


def _keys(settings) -> set[str]:
    """Every key of a nested config."""
    if not isinstance(settings, dict):
        return set()
    return set(settings) | set().union(*(_keys(v) for v in settings.values()))


@pytest.mark.parametrize("raw", sorted(p.name for p in (RESULTS_DIR / "raw").glob("*.jsonl")))
def test_no_row_config_holds_its_seed(raw):
    """The seed is a row's own field, never part of its config: a seed inside the config gives
    each seed its own config hash, and the table shows only the newest seed of the cell (the
    pretrained table's first two softmax seeds did, until the config dropped it)."""
    rows = read_rows(RESULTS_DIR / "raw" / raw)
    assert [row["run_id"] for row in rows if "seed" in _keys(row["train"].get("config"))] == []
