"""studies/premise_ablation: the permuted copy of a prepared SNLI folder holds the same premises
in another order, leaves every other file as it was, and counts the pairs that kept their
premise's words; the report shows each model's drop."""

import numpy as np
import torch
from fairseq.data import indexed_dataset

from regattn_fairseq.experiments.studies import premise_ablation


def _write(prefix, items):
    prefix.parent.mkdir(parents=True, exist_ok=True)
    builder = indexed_dataset.MMapIndexedDatasetBuilder(
        indexed_dataset.data_file_path(str(prefix)), dtype=np.int32
    )
    for item in items:
        builder.add_item(torch.tensor(item, dtype=torch.int32))
    builder.finalize(indexed_dataset.index_file_path(str(prefix)))


def _read(prefix):
    data = indexed_dataset.MMapIndexedDataset(str(prefix))
    return [data[i].tolist() for i in range(len(data))]


def test_premises_are_permuted_and_nothing_else_moves(tmp_path):
    bin_dir = tmp_path / "bin"
    # 3 hypotheses per premise, as in SNLI: a pair can draw its own premise's words again
    premises = [[p, p + 1, 2] for p in range(10, 50) for _ in range(3)]
    hypotheses = [[i, 3] for i in range(len(premises))]
    _write(bin_dir / "input0" / "test", premises)
    _write(bin_dir / "input1" / "test", hypotheses)
    (bin_dir / "input0" / "dict.txt").write_text("a 1\n")
    same = premise_ablation.permute_premises(bin_dir, tmp_path / "copy" / "bin", seed=0)
    permuted = _read(tmp_path / "copy" / "bin" / "input0" / "test")
    assert sorted(permuted) == sorted(premises) and permuted != premises
    assert same == sum(a == b for a, b in zip(permuted, premises, strict=True)) / len(premises)
    assert 0 < same < 0.2  # some pairs of a premise group draw each other
    assert _read(tmp_path / "copy" / "bin" / "input1" / "test") == hypotheses
    assert (tmp_path / "copy" / "bin" / "input0" / "dict.txt").read_text() == "a 1\n"
    again = premise_ablation.permute_premises(bin_dir, tmp_path / "again" / "bin", seed=0)
    assert _read(tmp_path / "again" / "bin" / "input0" / "test") == permuted and again == same


def test_report_shows_the_drop_and_a_row_that_does_not_reproduce():
    record = {
        "provenance": {"git_commit": "0123456789abcdef", "git_dirty": False, "date": "2026-11-26"},
        "permutation_seeds": [0, 1],
        "baselines": {"hypothesis only": 60.08},
        "measurements": [
            {
                "mapping": "softmax",
                "seed": 1,
                "row_accuracy": 59.69,
                "accuracy": 59.69,
                "permuted": [56.0, 56.2],
                "same_premise": [0.0, 0.001],
            },
            {
                "mapping": "sparsemax",
                "seed": 1,
                "row_accuracy": 59.0,
                "accuracy": 59.7,
                "permuted": [55.7, 55.7],
                "same_premise": [0.0, 0.001],
            },
        ],
    }
    text = premise_ablation.markdown(record)
    assert "| softmax | 1 | 59.69 | 56.00, 56.20 | 3.59 |" in text
    assert "hypothesis only 60.08" in text
    assert "do not reproduce their rows' accuracy:** sparsemax seed 1 (59.0" in text
