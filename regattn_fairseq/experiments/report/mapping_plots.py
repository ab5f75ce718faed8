#!/usr/bin/env python
"""Pictures of the mappings themselves (no trained model needed).

mappings_fig2.{png,pdf}     the paper's Figure 2: max_Ω([t, 0]) (shifted by a constant) and
                            Π_Ω([t, 0])₁ for t in [-3, 3], every mapping plus the hard max;
mappings_simplex.{png,pdf}  where each mapping sends a grid of score vectors in R³: Π_Ω(x) on
                            the 2-simplex in barycentric coordinates, one panel per mapping,
                            coloured by the face it lands on and by ties between its weights;
mappings_one_vector.png     (--figure one_vector, the README's figure) one score vector and
                            each mapping's weights on it: zeros, runs and clusters of ties.

Every mapping is drawn with its default parameters (the paper's: γ=1, p=1.5, λ=0.1 for
fusedmax, λ=0.01 for oscarmax, α=1.5) except a λ below FIGURE_MIN_LAMBDA on the simplex and
the one vector (oscarmax's, drawn at λ=0.1); the legends and titles name the parameters used.

    MPLBACKEND=Agg python scripts/plot_mappings.py --out-dir results/figures
    MPLBACKEND=Agg python scripts/plot_mappings.py --figure one_vector --format png \
        --out-dir docs/figures
"""

from __future__ import annotations

import argparse
import itertools
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures go to files; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from regattn import mappings  # noqa: E402
from regattn.mappings import smoothed_max  # noqa: E402
from regattn_checkout.files import replacing
from regattn_checkout.paths import FIGURES_DIR
from regattn_fairseq.experiments.core.labels import mapping_label

FORMATS = ("png", "pdf")
T_RANGE = (-3.0, 3.0)
# One style per mapping, in the order of the declarations (softmax, sparsemax, sq-pnorm-max,
# fusedmax, oscarmax, entmax), the same in both figures; dashes keep near-identical curves
# (oscarmax with its small λ lies on sparsemax) distinguishable.
LINE_STYLES = (
    dict(color="tab:blue", linestyle="-"),
    dict(color="tab:orange", linestyle="-"),
    dict(color="tab:green", linestyle="-"),
    dict(color="tab:red", linestyle="-"),
    dict(color="tab:purple", linestyle="--"),
    dict(color="tab:brown", linestyle="-."),
)
STYLES = dict(zip(mappings.NAMES, itertools.cycle(LINE_STYLES)))


def save(fig, out_dir: Path, stem: str, formats=FORMATS) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.{fmt}" for fmt in formats]
    for path in paths:
        with replacing(path) as partial:
            fig.savefig(partial, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return paths


def figure2_curves(name: str, t: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """max_Ω([t, 0]) + γΩ(e₁) and Π_Ω([t, 0])₁ for mapping `name` with its defaults.

    The shift γΩ(e₁) (the same at both vertices, by symmetry) makes every curve equal to
    max(t, 0) wherever the mapping puts all its weight on one coordinate, so the curves
    differ only where the mapping smooths the max."""
    scores = torch.stack([t, torch.zeros_like(t)], dim=-1)
    vertex = torch.tensor([1.0, 0.0], dtype=t.dtype)
    shift = smoothed_max.regularizer(name, vertex)
    smoothed = smoothed_max.max_omega(name, scores) + shift
    first_weight = getattr(mappings, name)(scores)[:, 0]
    return smoothed.numpy(), first_weight.numpy()


def plot_figure2(out_dir: Path, formats=FORMATS) -> list[Path]:
    t = torch.linspace(*T_RANGE, 1201, dtype=torch.float64)
    fig, (ax_max, ax_map) = plt.subplots(1, 2, figsize=(10, 3.8))
    hard = dict(color="black", linewidth=1.0, linestyle=":")
    ax_max.plot(t, t.clamp_min(0), label="max (hard)", **hard)
    # the subgradient of the hard max: 1 for t > 0, 0 for t < 0 (a set at t = 0)
    ax_map.plot(t, (t > 0).double(), label="argmax (hard)", **hard)

    zoom = ax_map.inset_axes([0.58, 0.08, 0.38, 0.4])
    for name in mappings.NAMES:
        smoothed, first_weight = figure2_curves(name, t)
        ax_max.plot(
            t,
            smoothed,
            label=mapping_label(name, mappings.defaults_of(name)),
            linewidth=1.6,
            **STYLES[name],
        )
        ax_map.plot(t, first_weight, linewidth=1.6, **STYLES[name])
        zoom.plot(t, first_weight, linewidth=1.4, **STYLES[name])

    ax_max.set(
        xlabel="t",
        ylabel="max$_\\Omega$([t, 0]) + γΩ(e$_1$)",
        xlim=T_RANGE,
        title="smoothed max (shifted by a constant)",
    )
    ax_map.set(
        xlabel="t",
        ylabel="Π$_\\Omega$([t, 0])$_1$",
        xlim=T_RANGE,
        ylim=(-0.03, 1.03),
        title="first attention weight",
    )
    # where the sparse mappings reach the vertex [1, 0]: sq-pnorm-max's smoother transition
    zoom.set(xlim=(0.6, 1.15), ylim=(0.86, 1.01))
    zoom.tick_params(labelsize=7)
    ax_map.indicate_inset_zoom(zoom, edgecolor="0.4")
    for ax in (ax_max, ax_map):
        ax.grid(alpha=0.3)
    handles, labels = ax_max.get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=4,
        frameon=False,
        fontsize=9,
        bbox_to_anchor=(0.5, -0.13),
    )
    fig.suptitle("Figure 2 of Niculae & Blondel (2017): x = [t, 0] for every mapping", y=1.0)
    return save(fig, out_dir, "mappings_fig2", formats)


# Corners of the 2-simplex in the plane: e₁ bottom left, e₂ bottom right, e₃ top.
CORNERS = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, math.sqrt(3) / 2]])
# Where a point of the simplex can land, by its number of nonzero weights and its ties among
# them; drawn in this order (rarest on top), with these colours and marker sizes.
FACES = (
    ("interior, all weights distinct", "#9ecae1", 3),
    ("interior, two weights equal", "#08519c", 5),
    ("centre, all three equal", "#000000", 24),
    ("edge, two distinct weights", "#fdae6b", 3),
    ("edge midpoint, two equal weights", "#d94801", 24),
    ("vertex, one weight", "#31a354", 24),
)
# λ ties weights whose scores are closer than about λ: the paper's oscarmax λ=0.01 is far
# finer than the grid below (step 0.06), so a smaller λ is drawn at this one, which shows where
# the ties go. Every other parameter keeps its default.
FIGURE_MIN_LAMBDA = 0.1


def figure_params(name: str) -> dict:
    """The parameters mapping `name` is drawn with on the simplex and the one vector: its
    defaults, with λ at least FIGURE_MIN_LAMBDA."""
    params = mappings.defaults_of(name)
    if "lam" in params:
        params["lam"] = max(params["lam"], FIGURE_MIN_LAMBDA)
    return params


def score_grid(radius: float = 3.0, step: float = 0.06) -> torch.Tensor:
    """Score vectors x ∈ R³ on a square grid of the plane orthogonal to (1, 1, 1), kept inside
    a disc of `radius`. Every mapping is invariant to adding a constant to all scores, so this
    plane holds every case. The grid is offset by half a step and the ties x_i = x_j are lines
    at irrational slopes to it, so no input has two equal scores: ties in the outputs are the
    mappings' doing."""
    a = np.arange(-radius, radius, step) + step / 2
    aa, bb = np.meshgrid(a, a)
    inside = aa**2 + bb**2 <= radius**2
    u = np.array([1.0, -1.0, 0.0]) / math.sqrt(2)
    v = np.array([1.0, 1.0, -2.0]) / math.sqrt(6)
    return torch.from_numpy(aa[inside, None] * u + bb[inside, None] * v)


def faces_of(weights: np.ndarray) -> np.ndarray:
    """For each probability vector (row) of `weights` (n x 3), its index into FACES."""
    support = np.count_nonzero(weights > 0, axis=1)
    nonzero = weights > 0
    equal_nonzero_pairs = sum(
        (weights[:, i] == weights[:, j]) & nonzero[:, i] & nonzero[:, j]
        for i, j in ((0, 1), (0, 2), (1, 2))
    )
    interior = np.select([equal_nonzero_pairs == 3, equal_nonzero_pairs == 1], [2, 1], 0)
    edge = np.where(equal_nonzero_pairs == 1, 4, 3)
    return np.select([support == 1, support == 2], [5, edge], interior)


def share_text(share: float) -> str:
    return "<1%" if 0 < share < 0.005 else f"{share:.0%}"


def plot_simplex(out_dir: Path, formats=FORMATS) -> list[Path]:
    scores = score_grid()
    fig, axes = plt.subplots(2, 3, figsize=(12, 8.6))
    for ax, name in zip(axes.flat, mappings.NAMES, strict=True):
        params = figure_params(name)
        weights = mappings.build(name, **params)(scores).numpy()
        faces = faces_of(weights)
        points = weights @ CORNERS
        ax.fill(*CORNERS.T, facecolor="0.96", edgecolor="0.3", linewidth=1.0)
        shares = []
        for index, (face, colour, size) in enumerate(FACES):
            on_face = faces == index
            ax.scatter(
                *points[on_face].T, s=size, color=colour, linewidths=0, label=face, zorder=2 + index
            )
            if on_face.any():
                shares.append(
                    f"{face.split(',')[0]}{' (tie)' if 'equal' in face else ''}: "
                    f"{share_text(on_face.mean())}"
                )
        for corner, text, offset in zip(
            CORNERS,
            ("e$_1$", "e$_2$", "e$_3$"),
            ((-0.05, -0.05), (0.05, -0.05), (0.0, 0.05)),
            strict=True,
        ):
            ax.annotate(text, corner, xytext=corner + offset, ha="center", va="center")
        ax.text(
            0.99,
            0.99,
            "\n".join(shares),
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=7.5,
            color="0.25",
        )
        ax.set_title(mapping_label(name, params), fontsize=10)
        ax.set_aspect("equal")
        ax.set_xlim(-0.12, 1.12)
        ax.set_ylim(-0.1, 0.98)
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=3,
        frameon=False,
        markerscale=3,
        title="where Π_Ω(x) lands (top right of each panel: share of the inputs landing there)",
    )
    fig.suptitle(
        f"Π_Ω(x) on the simplex for {len(scores)} score vectors x ∈ R³ with ‖x − mean(x)‖ ≤ 3",
        y=0.97,
    )
    fig.subplots_adjust(bottom=0.12, top=0.92, wspace=0.02, hspace=0.12)
    return save(fig, out_dir, "mappings_simplex", formats)


# The README's figure: one score vector whose near-equal scores show each mapping's ties
# (1.0, 1.05 and 0.95 adjacent and apart, 1.5 alone at the top).
ONE_VECTOR_SCORES = (0.1, 1.0, 1.05, 0.3, 1.5, 0.95, -0.4, 0.6)


def one_vector_weights(scores=ONE_VECTOR_SCORES) -> dict[str, tuple[dict, np.ndarray]]:
    """Every mapping's weights on one score vector.

    Parameters
    ----------
    scores : sequence of float
        the score vector x.

    Returns
    -------
    dict
        mapping name -> (its parameters, `figure_params`; Π_Ω(x) in float64).
    """
    x = torch.tensor(scores, dtype=torch.float64)
    weights = {}
    for name in mappings.NAMES:
        params = figure_params(name)
        weights[name] = (params, mappings.build(name, **params)(x).numpy())
    return weights


def plot_one_vector(out_dir: Path, formats=FORMATS) -> list[Path]:
    """The scores of ONE_VECTOR_SCORES as bars, and below them each mapping's weights as a row
    of cells: exact zeros grey, each weight written in its cell (ties read as equal numbers:
    fusedmax's over adjacent positions, oscarmax's anywhere in the row)."""
    weights = one_vector_weights()
    positions = np.arange(len(ONE_VECTOR_SCORES))
    fig, (ax_x, ax_w) = plt.subplots(
        2, 1, figsize=(7.5, 4.6), sharex=True, gridspec_kw=dict(height_ratios=[1.2, len(weights)])
    )
    ax_x.bar(positions, ONE_VECTOR_SCORES, color="0.55", width=0.7)
    ax_x.axhline(0, color="0.3", linewidth=0.6)
    ax_x.set_xlim(-0.5, len(positions) - 0.5)
    ax_x.set_ylabel("score x", fontsize=9)
    ax_x.set_title("one score vector x, and Π_Ω(x) for every mapping (grey: exactly 0)")
    matrix = np.array([row for _, row in weights.values()])
    colours = plt.get_cmap("Blues").with_extremes(bad="0.85")
    ax_w.imshow(np.ma.masked_equal(matrix, 0.0), cmap=colours, vmin=0, vmax=1, aspect="auto")
    for (r, c), weight in np.ndenumerate(matrix):
        # a weight that rounds to 0.00 is not one: only exact zeros read "0"
        text = "0" if weight == 0 else "<.01" if weight < 0.005 else f"{weight:.2f}"
        colour = "white" if weight > 0.55 else "black"
        ax_w.text(c, r, text, ha="center", va="center", fontsize=8, color=colour)
    ax_w.set_yticks(range(len(weights)))
    ax_w.set_yticklabels([mapping_label(n, params) for n, (params, _) in weights.items()])
    ax_w.set_xticks(positions, [f"{s:g}" for s in ONE_VECTOR_SCORES])
    ax_w.set_xlabel("position (its score)", fontsize=9)
    ax_w.tick_params(length=0)
    fig.tight_layout()
    return save(fig, out_dir, "mappings_one_vector", formats)


# --figure: what each draws
FIGURES = {"fig2": plot_figure2, "simplex": plot_simplex, "one_vector": plot_one_vector}
DEFAULT_FIGURES = ("fig2", "simplex")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=FIGURES_DIR)
    parser.add_argument(
        "--figure",
        action="append",
        choices=FIGURES,
        help=f"a figure to draw (repeatable; default: {' and '.join(DEFAULT_FIGURES)})",
    )
    parser.add_argument(
        "--format",
        action="append",
        choices=FORMATS,
        help=f"a file format (repeatable; default: {' and '.join(FORMATS)})",
    )
    args = parser.parse_args(argv)
    formats = tuple(args.format or FORMATS)
    for figure in args.figure or DEFAULT_FIGURES:
        for path in FIGURES[figure](args.out_dir, formats):
            print(path)


if __name__ == "__main__":
    main()
