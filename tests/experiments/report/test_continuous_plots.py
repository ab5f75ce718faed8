"""The continuous-attention figure renders headless from the stated example and from an
export of a continuous model (a hand-made record in the export's format)."""

import json

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import Normalize

from regattn_fairseq.experiments.report import attention_plots, continuous_plots


def test_example_figure(tmp_path):
    paths = continuous_plots.example_figure(tmp_path)
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size for p in paths)


def _export(tmp_path, density):
    record = {
        "id": 7,
        "src_tokens": ["a", "man", "plays", "guitar", "."],
        "tgt_tokens": ["ein", "mann", "spielt", "gitarre", "."],
        "attention": [[0.0, 0.2, 0.5, 0.3, 0.0]] * 2,
        "mapping": {"name": "softmax", "params": {"gamma": 1.0}, "device": "same"},
        "continuous": {"density": density},
        "density": {"mu": [0.5, 0.6], "sigma_sq": [0.01, 0.002], "support": [None, None]},
        "discrete_attention": [[0.1, 0.2, 0.4, 0.2, 0.1]] * 2,
    }
    path = tmp_path / "attn.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path


@pytest.mark.parametrize("density", ["gaussian", "truncated_parabola"])
def test_export_figure(density, tmp_path):
    continuous_plots.main(
        [str(_export(tmp_path, density)), "--row", "1", "--out-dir", str(tmp_path)]
    )
    assert (tmp_path / f"continuous_attention_{density}_7_1.png").stat().st_size > 0


def test_an_export_without_a_density_is_an_error(tmp_path):
    path = tmp_path / "attn.jsonl"
    path.write_text(json.dumps({"id": 1, "attention": [[1.0]]}) + "\n")
    with pytest.raises(SystemExit, match="continuous"):
        continuous_plots.export_figure(path, "1", 0, tmp_path)


def test_attention_heatmap_names_the_density(tmp_path):
    # the per-table heatmaps (attention_plots) title a continuous model by its density, not
    # by the discrete mapping its mu and sigma^2 came from
    record = json.loads(_export(tmp_path, "truncated_parabola").read_text())
    record["continuous"] = {"density": "truncated_parabola", "num_basis": 64, "combine": "sum"}
    fig, ax = plt.subplots()
    attention_plots.draw_panel(ax, record, Normalize(0, 1), 0.0)
    assert ax.get_title().startswith("truncated parabola density (N=64) + discrete softmax")
    plt.close(fig)
