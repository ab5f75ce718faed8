"""Failures are errors that name their cause (a missing console script); paths come from one
module; shared conventions (fairseq JSON logs, inflection encoding) have one definition."""

import children
import pytest

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.core import paths
from regattn_fairseq.experiments.core.tools import tool_path
from regattn_fairseq.experiments.data.builders.inflection import (
    SPACE_SYMBOL,
    decode_target,
    encode_source,
    encode_target,
)
from regattn_fairseq.experiments.train.fairseq_logs import json_records, last_record_with


def test_missing_tool_is_named():
    with pytest.raises(
        ReproError,
        match=r"tool 'fairseq-no-such-tool' is not installed next to the running interpreter"
        r".*pip install fairseq-no-such-tool",
    ):
        tool_path("fairseq-no-such-tool")


def test_tool_is_never_taken_from_path(tmp_path, monkeypatch):
    fake = tmp_path / "fairseq-only-on-path"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ReproError, match="fairseq-only-on-path"):
        tool_path("fairseq-only-on-path")


def test_installed_tool_is_found_next_to_the_interpreter():
    found = tool_path("fairseq-preprocess")
    assert found.endswith("fairseq-preprocess")
    assert children.run([found, "--help"]).returncode == 0


def test_fairseq_json_log_records():
    log = "\n".join(
        [
            "2024-01-01 | INFO | fairseq_cli.train | {'not': 'json'}",
            '2024-01-01 | INFO | train | {"epoch": 1, "train_wps": "10.5", "train_wall": "3"}',
            '2024-01-01 | INFO | valid | {"epoch": 1, "valid_loss": "2"}',
            '2024-01-01 | INFO | train | {"epoch": 2, "train_wps": "12", "train_wall": "6"}',
        ]
    )
    assert len(json_records(log)) == 3
    assert last_record_with(log, "train_wps")["epoch"] == 2
    assert last_record_with(log, "test_accuracy") is None


def test_inflection_encoding_round_trips():
    assert (
        encode_source("toy", "sing song", "V;PST")
        == f"<toy> s i n g {SPACE_SYMBOL} s o n g <V> <PST>"
    )
    for form in ("walked", "sang song", "a  b"):
        assert decode_target(encode_target(form)) == form


def test_snli_labels_are_the_tasks():
    from regattn_fairseq.experiments.data.builders import snli
    from regattn_fairseq.tasks.regattn_snli import LABELS

    assert snli.LABELS is LABELS
    assert set(snli.CAT_SNLI_LABELS.values()) == set(LABELS) == set(snli.HUB_SNLI_LABELS.values())


def test_paths_come_from_one_module():
    assert paths.CONFIG_DIR == REPO_ROOT / "configs" and paths.CONFIG_DIR.is_dir()
    assert (paths.USER_DIR / "__init__.py").is_file()
    assert paths.DATA_DIR_ENV == "REGATTN_DATA_DIR"


def _grep(pattern: str, *folders: str) -> list[str]:
    found = children.run(
        ["git", "grep", "-n", "-E", pattern, "--", *folders],
        cwd=REPO_ROOT,
    )
    return found.stdout.splitlines()


def test_no_hard_coded_venv_in_the_suite_and_benchmarks():
    offenders = _grep(
        r"\.venv",
        "regattn_fairseq/experiments",
        "regattn_fairseq/benchmarks",
        "regattn_bench",
        "scripts",
    )
    assert offenders == []


def test_no_path_defined_outside_paths_module():
    offenders = [
        line
        for line in _grep(
            r"Path\(__file__\)", "regattn_fairseq/experiments", "regattn_fairseq/benchmarks"
        )
        if not line.startswith("regattn_fairseq/experiments/core/paths.py")
    ]
    assert offenders == []
