"""The attention export (experiments/decode/attention_format.py): written and read back as it
was, checked on reading, and its statistics file beside it."""

import json

import pytest
from attention_fixtures import attention_records, write_export

from regattn import mappings
from regattn.analysis import attention_statistics
from regattn_fairseq.experiments.decode import attention_format


def test_cli_writes_statistics_beside_the_export(tmp_path):
    params = mappings.defaults_of("fusedmax")
    records = attention_records("fusedmax", params)
    export = write_export(tmp_path / "fusedmax.jsonl", records)
    attention_format.main([str(export)])
    written = json.loads((tmp_path / "fusedmax.stats.json").read_text())
    expected = attention_statistics(attention_format.rows_of_export(records))
    assert written == {
        "export": "fusedmax.jsonl",
        "sentences": len(records),
        "tolerance": 0.0,
        "mapping": {"name": "fusedmax", "params": params, "device": "cpu"},
        **expected,
    }
    assert written["rows"] == sum(len(record["attention"]) for record in records)


def test_exports_mixing_mappings_or_misshapen_are_rejected(tmp_path):
    mixed = attention_records("softmax", {"gamma": 1.0}) + attention_records(
        "sparsemax", {"gamma": 1.0}
    )
    with pytest.raises(ValueError, match="mixes 2 attention mappings"):
        attention_format.write_export_statistics(write_export(tmp_path / "mixed.jsonl", mixed))
    short_source = attention_records("softmax", {"gamma": 1.0})
    short_source[1]["src_tokens"].pop()
    with pytest.raises(ValueError, match=r"short\.jsonl:2: attention rows do not match"):
        attention_format.read_export(write_export(tmp_path / "short.jsonl", short_source))
    no_mapping = attention_records("softmax", {"gamma": 1.0})
    del no_mapping[0]["mapping"]
    with pytest.raises(ValueError, match=r"bare\.jsonl:1: export record lacks mapping"):
        attention_format.read_export(write_export(tmp_path / "bare.jsonl", no_mapping))


def test_exports_read_back_as_written(tmp_path):
    records = attention_records("oscarmax", mappings.defaults_of("oscarmax"))
    assert attention_format.read_export(write_export(tmp_path / "a.jsonl", records)) == records


def test_compressed_exports_read_back_and_repeat_their_bytes(tmp_path):
    records = attention_records("oscarmax", mappings.defaults_of("oscarmax"))
    # the figure sidecars are written under a per-process name, then renamed
    first, second = tmp_path / "a.jsonl.gz.1.partial", tmp_path / "a.jsonl.gz.2.partial"
    attention_format.write_compressed_export(first, records)
    attention_format.write_compressed_export(second, records)
    assert attention_format.read_export(first.rename(tmp_path / "a.jsonl.gz")) == records
    assert (tmp_path / "a.jsonl.gz").read_bytes() == second.read_bytes()
