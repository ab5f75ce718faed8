"""The row types (`core.result_row`) describe the committed rows exactly: every field of every
row and of its parts (train, data, decode, attention, γ selection, provenance) is declared,
with the type it has, and every field a type requires is there. A field that rows carry but
no type declares, or a required one that an older row lacks, fails here."""

import json
import types
import typing
from pathlib import Path

import pytest

from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.core import result_row

RAW_FILES = sorted((RESULTS_DIR / "raw").glob("*.jsonl"))
# a float field holds a JSON number: an integral one may be written without a fraction
NUMBER = {float: (int, float)}


def problems(value, kind, where: str) -> list[str]:
    """Where `value` (parsed JSON) does not fit the annotation `kind`."""
    if kind is typing.Any:
        return []
    if typing.is_typeddict(kind):
        if not isinstance(value, dict):
            return [f"{where} is {type(value).__name__}, not a {kind.__name__}"]
        hints = typing.get_type_hints(kind)
        found = [f"{where}.{k} is not declared in {kind.__name__}" for k in value if k not in hints]
        found += [f"{where}.{k} is missing" for k in kind.__required_keys__ if k not in value]
        for key in value.keys() & hints.keys():
            found += problems(value[key], hints[key], f"{where}.{key}")
        return found
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        arms = [problems(value, arm, where) for arm in typing.get_args(kind)]
        return [] if any(not arm for arm in arms) else arms[0]
    if kind is type(None):
        return [] if value is None else [f"{where} is {value!r}, not None"]
    expected = origin or kind
    if isinstance(value, bool) and expected is not bool:
        return [f"{where} is a bool, not {expected.__name__}"]
    if not isinstance(value, NUMBER.get(expected, expected)):
        return [f"{where} is {type(value).__name__}, not {expected.__name__}"]
    return []


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
