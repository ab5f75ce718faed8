"""The per-layer attention table (`tables._layer_statistics_table`): where in a Transformer the
attention is sparse, from the rows' ``attention.by_layer``."""

from regattn_fairseq.experiments.report import tables


def _row(mapping, seed, by_layer=None):
    attention = {"mean_zero_fraction": 0.5, "mean_support_size": 3.0}
    if by_layer is not None:
        attention["by_layer"] = [
            {"mean_zero_fraction": zeros, "mean_support_size": support}
            for zeros, support in by_layer
        ]
    return {
        "mapping": mapping,
        "seed": seed,
        "evaluation": "test",
        "train": {"config": {"model": {}}},
        "attention": attention,
    }


def test_each_layer_is_averaged_over_seeds():
    cells = {
        "sparsemax": [
            _row("sparsemax", 1, [(0.50, 4.0), (0.80, 2.0)]),
            _row("sparsemax", 2, [(0.70, 2.0), (0.90, 1.0)]),
        ],
        "softmax": [_row("softmax", 1, [(0.0, 10.0), (0.0, 10.0)])],
    }
    lines = tables._layer_statistics_table(["test"], cells)
    assert lines[0].startswith("Attention per layer")
    assert "| attention | evaluation | layer 1 | layer 2 |" in lines
    assert "| sparsemax | test | 60.0 / 3.00 | 85.0 / 1.50 |" in lines
    assert "| softmax | test | 0.0 / 10.00 | 0.0 / 10.00 |" in lines


def test_rows_without_layers_show_no_table():
    # the fairseq tables' rows pool their one attention layer: no per-layer table
    cells = {"softmax": [_row("softmax", 1)], "uniform": [_row("uniform", 1)]}
    assert tables._layer_statistics_table(["test"], cells) == []
