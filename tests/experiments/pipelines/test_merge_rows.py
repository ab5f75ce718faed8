"""Rows landed in another results folder merge into this one with their sidecars
(pipelines.merge_rows)."""

import hashlib
import json

import pytest

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.pipelines.merge_rows import main, merge_rows
from regattn_fairseq.experiments.rows.store import read_records


def _row(run_id, evaluation="test", seed=1, items=None, **extra):
    row = {"run_id": run_id, "evaluation": evaluation, "mapping": "softmax", "seed": seed}
    row |= {"table": "nmt", "experiment": "multi30k_en_de", "scale": "small"}
    row["metrics"] = {"bleu": 30.0 + seed}
    if items is not None:
        row["items"] = items
    row.update(extra)
    return row


def _items(results, run_id, evaluation="test", content=b"per-item data"):
    relative = f"raw/items/{run_id}-{evaluation}.json.gz"
    path = results / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return {"file": relative, "sha256": hashlib.sha256(content).hexdigest()}


def _write(results, table, rows):
    raw = results / "raw" / f"{table}.jsonl"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return raw


@pytest.fixture
def folders(tmp_path):
    source, target = tmp_path / "worktree-results", tmp_path / "results"
    old = _row("aaaaaaaaaaaa", items=_items(target, "aaaaaaaaaaaa"))
    _write(target, "nmt", [old])
    new = [
        old,
        _row("bbbbbbbbbbbb", seed=2, items=_items(source, "bbbbbbbbbbbb")),
        _row("cccccccccccc", seed=3, items=_items(source, "cccccccccccc")),
    ]
    (source / "raw/attention").mkdir(parents=True)
    (source / "raw/attention/cccccccccccc-test.jsonl.gz").write_bytes(b"figure sentences")
    _write(source, "nmt", new)
    return source, target


def test_new_rows_and_sidecars_are_merged_once(folders):
    source, target = folders
    merged = merge_rows(source, target, "nmt")
    assert [r["run_id"] for r in merged] == ["bbbbbbbbbbbb", "cccccccccccc"]
    rows = read_records(target / "raw/nmt.jsonl")
    assert [r["run_id"] for r in rows] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
    assert (target / "raw/items/bbbbbbbbbbbb-test.json.gz").read_bytes() == b"per-item data"
    assert (target / "raw/attention/cccccccccccc-test.jsonl.gz").read_bytes() == b"figure sentences"
    assert merge_rows(source, target, "nmt") == []
    assert len(read_records(target / "raw/nmt.jsonl")) == 3


def test_a_changed_row_under_a_known_name_is_refused(folders):
    source, target = folders
    rows = read_records(source / "raw/nmt.jsonl")
    rows[0]["metrics"] = {"bleu": 99.0}
    _write(source, "nmt", rows)
    before = (target / "raw/nmt.jsonl").read_text()
    with pytest.raises(ReproError, match="aaaaaaaaaaaa.*differs"):
        merge_rows(source, target, "nmt")
    assert (target / "raw/nmt.jsonl").read_text() == before
    assert not (target / "raw/items/bbbbbbbbbbbb-test.json.gz").exists()


def test_a_sidecar_that_is_not_the_rows_is_refused(folders):
    source, target = folders
    (source / "raw/items/cccccccccccc-test.json.gz").write_bytes(b"changed after scoring")
    before = (target / "raw/nmt.jsonl").read_text()
    with pytest.raises(ReproError, match="cccccccccccc.*SHA-256"):
        merge_rows(source, target, "nmt")
    assert (target / "raw/nmt.jsonl").read_text() == before
    assert not (target / "raw/items/bbbbbbbbbbbb-test.json.gz").exists()


def test_a_missing_sidecar_is_refused(folders):
    source, target = folders
    (source / "raw/items/bbbbbbbbbbbb-test.json.gz").unlink()
    with pytest.raises(ReproError, match="bbbbbbbbbbbb.*missing"):
        merge_rows(source, target, "nmt")


def test_dry_run_rows_never_join_real_ones(folders):
    source, target = folders
    _write(source, "nmt", [_row("dddddddddddd", dry_run={"fraction": 0.01})])
    with pytest.raises(ReproError, match="real rows"):
        merge_rows(source, target, "nmt")


def test_cli_reports_and_fails_clearly(folders, capsys):
    source, target = folders
    assert main([str(source), "nmt", "--results-dir", str(target)]) == 0
    assert "2 row(s) merged" in capsys.readouterr().out
    assert main([str(source), "table2", "--results-dir", str(target)]) == 1
    assert "no rows for table 'table2'" in capsys.readouterr().err


def test_the_cli_names_the_rows_a_new_one_supersedes(folders, capsys):
    """A worktree that lost a run's row scores the run again under another run id: the merge
    says which row the new one supersedes (the same job and evaluation)."""
    source, target = folders
    rescored = _row("dddddddddddd", items=_items(source, "dddddddddddd"))  # seed 1, as aaaa…
    _write(source, "nmt", [*read_records(source / "raw/nmt.jsonl"), rescored])
    assert main([str(source), "nmt", "--results-dir", str(target)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith(
        "nmt: dddddddddddd softmax seed 1 test: bleu 31.0 (supersedes aaaaaaaaaaaa:"
    )
    # the other new rows are of other seeds: they supersede nothing
    assert not any("supersedes" in line for line in lines[:-2])
