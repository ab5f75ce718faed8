"""scripts/plot_mappings.py and scripts/plot_attention.py: they run headless and write
non-empty images for every mapping, and draw the paper's conventions (grey zeros, no border
between equal neighbours, marked oscarmax clusters)."""

import sys

import children
import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from attention_fixtures import attention_records
from matplotlib.colors import Normalize

from regattn import mappings
from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.report import attention_plots as plot_attention
from regattn_fairseq.experiments.report import mapping_plots as plot_mappings


def assert_drawn(path):
    """`path` is a non-empty image: a PNG with more than one colour, or a PDF."""
    assert path.is_file() and path.stat().st_size > 1000, path
    if path.suffix == ".png":
        pixels = matplotlib.image.imread(path)
        assert pixels.std() > 0.01, f"{path} is blank"
    else:
        assert path.read_bytes().startswith(b"%PDF"), path


def test_plot_mappings_writes_both_figures(tmp_path):
    plot_mappings.main(["--out-dir", str(tmp_path)])
    for stem in ("mappings_fig2", "mappings_simplex"):
        for fmt in ("png", "pdf"):
            assert_drawn(tmp_path / f"{stem}.{fmt}")


def _equal_nonzero_pairs(weights: np.ndarray) -> list[tuple[int, int]]:
    nonzero = np.flatnonzero(weights)
    return [
        (i, j) for i in nonzero for j in nonzero if i < j and abs(weights[i] - weights[j]) < 1e-9
    ]


def test_one_vector_shows_zeros_runs_and_clusters():
    weights = plot_mappings.one_vector_weights()
    assert list(weights) == list(mappings.NAMES)
    for name, (params, row) in weights.items():
        assert row.sum() == pytest.approx(1.0) and (row >= 0).all(), name
        assert params == plot_mappings.figure_params(name)
        # softmax is dense; every other mapping puts exact zeros on the low scores
        assert ((row == 0).any()) == (name != mappings.NAMES[0]), name
    ties = {d.ties: d.name for d in mappings.DECLARATIONS.values() if d.ties}
    # fusedmax ties a run of adjacent positions, oscarmax a cluster of positions apart
    assert any(j == i + 1 for i, j in _equal_nonzero_pairs(weights[ties["runs"]][1]))
    assert any(j > i + 1 for i, j in _equal_nonzero_pairs(weights[ties["clusters"]][1]))


def test_the_readme_figure_is_the_one_its_command_draws(tmp_path):
    """README.md shows docs/figures/mappings_one_vector.png near its top, with the command that
    drew it; that command, run again, draws the same pixels."""
    readme = (REPO_ROOT / "README.md").read_text()
    figure = "docs/figures/mappings_one_vector.png"
    assert f"]({figure})" in readme.split("## ")[0]  # before the first section
    command = readme.split("python scripts/plot_mappings.py ", 1)[1].split("`", 1)[0].split()
    assert command[-2:] == ["--out-dir", "docs/figures"]
    plot_mappings.main([*command[:-1], str(tmp_path)])
    drawn = matplotlib.image.imread(tmp_path / "mappings_one_vector.png")
    assert np.array_equal(drawn, matplotlib.image.imread(REPO_ROOT / figure))


@pytest.mark.parametrize("name", mappings.NAMES)
def test_figure2_curves_meet_the_hard_max_where_the_mapping_is_sparse(name):
    t = torch.tensor([-3.0, 0.0, 3.0], dtype=torch.float64)
    shifted_max, first_weight = plot_mappings.figure2_curves(name, t)
    assert first_weight[1] == pytest.approx(0.5)  # [0, 0]: equal scores, equal weights
    if name != "softmax":  # every other mapping is sparse at |t| = 3 with the defaults
        assert shifted_max == pytest.approx([0.0, shifted_max[1], 3.0])
        assert first_weight[[0, 2]] == pytest.approx([0.0, 1.0])
    assert 0 < shifted_max[1] < 1  # the smoothing lifts the max at the kink


def test_simplex_faces_of_hand_made_points():
    points = np.array(
        [
            [1.0, 0.0, 0.0],  # vertex
            [0.7, 0.3, 0.0],  # edge
            [0.5, 0.0, 0.5],  # edge midpoint
            [0.5, 0.3, 0.2],  # interior, distinct
            [0.4, 0.3, 0.3],  # interior, tie
            [1 / 3, 1 / 3, 1 / 3],  # centre
        ]
    )
    faces = [plot_mappings.FACES[i][0].split(",")[0] for i in plot_mappings.faces_of(points)]
    assert faces == ["vertex", "edge", "edge midpoint", "interior", "interior", "centre"]
    assert plot_mappings.faces_of(points)[[3, 4]].tolist() == [0, 1]


def test_score_grid_has_no_tied_scores():
    scores = plot_mappings.score_grid()
    assert torch.allclose(scores.sum(-1), torch.zeros(len(scores), dtype=scores.dtype), atol=1e-12)
    sorted_scores = scores.sort(-1).values
    assert (sorted_scores.diff(dim=-1) > 1e-9).all()


@pytest.mark.parametrize("name", mappings.NAMES)
def test_plot_attention_draws_each_mapping(name, export_of, tmp_path):
    plot_attention.main([str(export_of(name)), "--id", "101", "--out-dir", str(tmp_path / "figs")])
    for fmt in ("png", "pdf"):
        assert_drawn(tmp_path / "figs" / f"attention_101.{fmt}")


def test_make_plot_attention_puts_every_mapping_side_by_side(export_of, tmp_path):
    """The Makefile target, headless, in a fresh process (as a user runs it); the first id
    shared by all exports is drawn when none is given."""
    exports = " ".join(str(export_of(name)) for name in mappings.NAMES)
    done = children.run(
        [
            "make",
            "--no-print-directory",
            "-o",
            "setup",
            "plot-attention",
            f"EXPORTS={exports}",
            f"FIGURES_DIR={tmp_path / 'figs'}",
            f"PY={sys.executable}",
        ],
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert_drawn(tmp_path / "figs" / "attention_100.png")
    image = matplotlib.image.imread(tmp_path / "figs" / "attention_100.png")
    assert image.shape[1] > 3 * image.shape[0]  # six panels in a row


def test_zeros_are_grey_equal_neighbours_unbordered_and_oscarmax_clusters_marked():
    weights = [[0.0, 0.0, 0.3, 0.3, 0.4], [0.25, 0.5, 0.25, 0.0, 0.0]]
    borders = {tuple(map(tuple, s)) for s in plot_attention.cell_borders(np.array(weights), 0.0)}
    between_rows = ((0, 1), (5, 1))
    # borders only where neighbours differ: 0|0.3 (x=2), 0.3|0.4 (x=4); 0.25|0.5, 0.5|0.25, 0.25|0
    assert borders == {
        between_rows,
        ((2, 0), (2, 1)),
        ((4, 0), (4, 1)),
        ((1, 1), (1, 2)),
        ((2, 1), (2, 2)),
        ((3, 1), (3, 2)),
    }

    record = {
        "id": 0,
        "src_tokens": list("abcde"),
        "tgt_tokens": ["x", "y"],
        "attention": weights,
        "mapping": {"name": "oscarmax", "params": {"lam": 0.01}, "device": "cpu"},
    }
    fig, ax = plt.subplots()
    plot_attention.draw_panel(ax, record, Normalize(0, 0.5), tol=0.0)
    image = ax.get_images()[0].get_array()
    assert image.mask.tolist() == [
        [True, True, False, False, False],
        [False, False, False, True, True],
    ]
    marks = sorted((t.get_text(), t.get_position()) for t in ax.texts)
    assert marks == [("•", (0.5, 1.5)), ("•", (2.5, 0.5)), ("•", (2.5, 1.5)), ("•", (3.5, 0.5))]
    plt.close(fig)

    fig, ax = plt.subplots()  # the same weights from fusedmax: groups shown by borders only
    plot_attention.draw_panel(
        ax, {**record, "mapping": {"name": "fusedmax", "params": {}}}, Normalize(0, 0.5), tol=0.0
    )
    assert len(ax.texts) == 0
    plt.close(fig)


def test_several_clusters_in_a_row_get_different_symbols():
    record = {
        "id": 0,
        "src_tokens": list("abcd"),
        "tgt_tokens": ["x"],
        "attention": [[0.2, 0.3, 0.2, 0.3]],
        "mapping": {"name": "oscarmax", "params": {}, "device": "cpu"},
    }
    fig, ax = plt.subplots()
    plot_attention.draw_panel(ax, record, Normalize(0, 0.3), tol=0.0)
    symbol_at = {t.get_position()[0]: t.get_text() for t in ax.texts}
    plt.close(fig)
    assert symbol_at[0.5] == symbol_at[2.5] != symbol_at[1.5] == symbol_at[3.5]


def test_snli_single_row_is_labelled_with_the_hypothesis():
    record = attention_records("sparsemax", {"gamma": 1.0}, sentences=1)[0]
    record.update(attention=record["attention"][:1], label="contradiction", prediction="neutral")
    assert plot_attention.row_labels(record) == [" ".join(record["tgt_tokens"])]
    fig, ax = plt.subplots()
    plot_attention.draw_panel(ax, record, Normalize(0, 1), tol=0.0)
    assert "gold: contradiction, predicted: neutral" in ax.get_title()
    plt.close(fig)


def test_unknown_sentence_id_is_an_error(export_of, tmp_path):
    with pytest.raises(SystemExit, match="not in every export"):
        plot_attention.main([str(export_of("softmax")), "--id", "7", "--out-dir", str(tmp_path)])
