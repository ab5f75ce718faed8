"""The row types (`core.result_row`) describe the committed rows exactly: every field of every
row and of its parts (train, data, decode, attention, γ selection, provenance) is declared,
with the type it has, and every field a type requires is there. A field that rows carry but
no type declares, or a required one that an older row lacks, fails here."""

import json
from pathlib import Path

import pytest
from row_types import problems

from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.core import result_row

RAW_FILES = sorted((RESULTS_DIR / "raw").glob("*.jsonl"))


@pytest.mark.parametrize("raw", RAW_FILES, ids=lambda path: path.name)
def test_the_row_types_describe_every_committed_row(raw: Path):
    for number, line in enumerate(raw.read_text(encoding="utf-8").splitlines(), 1):
        assert problems(json.loads(line), result_row.ResultRow, f"{raw.name}:{number}") == []


def test_problems_finds_an_undeclared_a_missing_and_a_mistyped_field():
    row = json.loads(RAW_FILES[0].read_text(encoding="utf-8").splitlines()[0])
    assert problems(row, result_row.ResultRow, "row") == []
    row["train"]["new_field"] = 1
    del row["decode"]["wall_s"]
    row["seed"] = "1"
    assert sorted(problems(row, result_row.ResultRow, "row")) == [
        "row.decode.wall_s is missing",
        "row.seed is str, not int",
        "row.train.new_field is not declared in TrainRecord",
    ]
