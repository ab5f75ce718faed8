"""Provenance shared by the benchmark records and the result rows (`regattn_checkout.provenance`):
git failures are errors that name their cause, dirty is a non-empty porcelain status outside
results/ with a hash of the diff, and the suite's rows and the benchmarks record the same state."""

import pytest

from regattn_bench import run_record
from regattn_checkout import paths, provenance
from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core import provenance as row_provenance


def test_git_outside_a_checkout_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)  # a folder that is no git checkout
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    with pytest.raises(ReproError, match=r"`git rev-parse HEAD` failed .*not a git repository"):
        row_provenance.provenance()  # a result row never claims an unknown commit


def test_git_missing_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH
    with pytest.raises(ReproError, match=r"`git rev-parse HEAD` could not run"):
        provenance.git_state()


def test_benchmark_records_use_the_same_provenance(monkeypatch, tmp_path):
    env = run_record.environment()
    row = row_provenance.provenance()
    state = {k: row[k] for k in ("git_commit", "git_dirty", "git_diff_sha256")}
    assert {k: env[k] for k in state} == state
    assert run_record.commit_label(env) == state["git_commit"] + (
        "+dirty" if state["git_dirty"] else ""
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ReproError, match="git"):
        run_record.environment()


def test_dirty_is_a_nonempty_porcelain_status_with_a_diff_hash(monkeypatch):
    spec = ("--", *provenance._CODE_PATHSPEC)
    outputs = {
        ("rev-parse", "HEAD"): "abc",
        ("status", "--porcelain", *spec): "",
        ("diff", "HEAD", "--binary", *spec): "",
    }
    monkeypatch.setattr(provenance, "git", lambda *args: outputs[args])
    assert provenance.git_state() == {
        "git_commit": "abc",
        "git_dirty": False,
        "git_diff_sha256": None,
    }
    outputs[("status", "--porcelain", *spec)] = "?? new_file.py"  # untracked is dirty too
    first = provenance.git_state()
    assert first["git_dirty"] and len(first["git_diff_sha256"]) == 64
    outputs[("diff", "HEAD", "--binary", *spec)] = "diff --git a/x b/x"
    assert provenance.git_state()["git_diff_sha256"] != first["git_diff_sha256"]


def test_outputs_under_results_do_not_make_the_tree_dirty():
    # the suite appends rows and the benchmarks records to results/ while they run: the
    # second row of a table must record the same code state as the first
    before = provenance.git_state()
    output = paths.RESULTS_DIR / "zz_provenance_test_output.json"
    try:
        output.write_text("{}\n")
        assert provenance.git_state() == before
    finally:
        output.unlink()
    assert provenance._CODE_PATHSPEC == (".", ":(exclude)results")


def test_a_copy_without_git_records_only_a_declared_full_commit(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)  # the tree sent to a GPU machine: no .git
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.delenv(run_record.DECLARED_COMMIT_ENV, raising=False)
    with pytest.raises(ReproError, match="not a git repository"):
        run_record.environment()
    monkeypatch.setenv(run_record.DECLARED_COMMIT_ENV, "abc123")
    with pytest.raises(ReproError, match="not a full 40-digit commit hash"):
        run_record.environment()
    monkeypatch.setenv(run_record.DECLARED_COMMIT_ENV, "a" * 40)
    env = run_record.environment()
    assert env["git_commit"] == "a" * 40 and env["git_declared"] and env["git_dirty"] is None
    assert "declared by REGATTN_DECLARED_COMMIT" in run_record.commit_label(env)
