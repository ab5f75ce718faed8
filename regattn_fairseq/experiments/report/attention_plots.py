#!/usr/bin/env python
"""Heatmaps of one sentence's attention, one panel per trained model, side by side, in the
conventions of Niculae & Blondel (2017), Figures 1, 3 and 4:

- source tokens along the x-axis, one row per output step (top to bottom), its token on the
  y-axis (SNLI: a single row, the hypothesis' attention over the premise);
- exact zeros in grey (never reached by softmax);
- adjacent positions of a row with exactly equal weight are not separated by a border, so
  fusedmax's equal-weight segments show as one block;
- oscarmax's clusters (>= 2 positions of one row with equal nonzero weight, anywhere in the
  row; see regattn.analysis) are marked "•" as in the paper; when a row has several
  clusters, the next ones are marked "▴", "▪", "◆" (then again "•", ...) to tell them apart.

NER exports (`tagging.decode_subset`, mapping "dp_<Omega>") hold expected tag marginals
instead: one row per word over the IOBES tags; their figure says so, draws a border between
every two tags (equal neighbours mean nothing in an arbitrary tag order) and keeps only the
grey-zero legend.

Input: JSON-lines exports of scripts/export_attention.py, one per model (each names its
mapping). Output: <out-dir>/attention_<id>.{png,pdf}.

    MPLBACKEND=Agg python scripts/plot_attention.py softmax.jsonl fusedmax.jsonl oscarmax.jsonl \
        --id 12 --out-dir results/figures
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures go to files; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402

from regattn import analysis, mappings  # noqa: E402
from regattn_checkout.files import replacing
from regattn_checkout.paths import FIGURES_DIR
from regattn_fairseq.experiments.core.labels import mapping_label
from regattn_fairseq.experiments.decode.attention_format import read_export

FORMATS = ("png", "pdf")
ZERO_COLOUR = "0.72"
BORDER_COLOUR = "0.25"
CELL_INCHES = 0.26
# Mappings whose panels mark clusters, those declared to tie weights anywhere in a row: the
# paper marks oscarmax's (Figure 4); fusedmax's ties are runs of adjacent positions, already
# visible as borderless blocks.
CLUSTER_MAPPINGS = tuple(d.name for d in mappings.DECLARATIONS.values() if d.ties == "clusters")
CLUSTER_SYMBOLS = ("•", "▴", "▪", "◆")
# zeros are masked out of the colour scale and drawn in the "bad" colour
WEIGHT_COLOURS = plt.get_cmap("Blues").with_extremes(bad=ZERO_COLOUR)
# what a figure says: its title (after "sentence <id>: "), colour bar label and legend
ATTENTION_WORDING = {
    "title": "attention at each output step (rows) over the source tokens (columns)",
    "colourbar": "attention weight",
    "legend": "grey: weight exactly 0  ·  no border: adjacent positions with equal weight  ·  "
    "• ▴ ▪ ◆: oscarmax clusters (positions of one row sharing a nonzero weight; "
    "one symbol per cluster)",
}
# a pretrained encoder's export (score.hf_classify): one layer's self-attention, mean over heads
SELF_ATTENTION_WORDING = {
    "title": "self-attention of layer {layer}, mean over its heads: each token (rows) over the "
    "pair's tokens (columns)",
    "colourbar": "attention weight (mean over heads)",
    "legend": "grey: weight exactly 0 in every head  ·  no border: adjacent positions with equal "
    "weight  ·  • ▴ ▪ ◆: oscarmax clusters (positions of one row sharing a nonzero weight; "
    "one symbol per cluster)",
}
TAG_MARGINAL_WORDING = {
    "title": "expected tag marginals of each word (rows) over the IOBES tags (columns)",
    "colourbar": "marginal probability",
    "legend": "grey: marginal exactly 0",
}


def is_tag_marginals(record: dict) -> bool:
    """Whether an export record holds NER tag marginals (`tagging.decode_subset` names their
    mapping "dp_<Omega>") rather than attention."""
    return record["mapping"]["name"].startswith("dp_")


def select_sentence(exports: list[list[dict]], sentence_id: str | None) -> str:
    """The id to plot: `sentence_id` if every export has it, else (None) the first id of the
    first export that every export has."""
    ids_per_export = [[str(record["id"]) for record in records] for records in exports]
    shared = set.intersection(*(set(ids) for ids in ids_per_export))
    if sentence_id is not None:
        if sentence_id not in shared:
            raise SystemExit(
                f"sentence id {sentence_id} is not in every export "
                f"({len(shared)} ids are shared, e.g. {sorted(shared)[:5]})"
            )
        return sentence_id
    for candidate in ids_per_export[0]:
        if candidate in shared:
            return candidate
    raise SystemExit("the exports share no sentence id")


def cell_borders(weights: np.ndarray, tol: float, merge_equal: bool = True) -> list:
    """Line segments (in cell coordinates: column c spans [c, c+1], row r spans [r, r+1])
    between adjacent positions of a row whose weights differ (every two adjacent positions
    when not `merge_equal`), and between rows."""
    rows, columns = weights.shape
    segments = [[(0, r), (columns, r)] for r in range(1, rows)]
    differ = np.abs(np.diff(weights, axis=1)) > tol
    if not merge_equal:
        differ[:] = True
    for r, c in zip(*np.nonzero(differ), strict=True):
        segments.append([(c + 1, r), (c + 1, r + 1)])
    return segments


def row_labels(record: dict) -> list[str]:
    """One label per attention row: the output token of each step, or, for a single row over
    several target tokens (SNLI), the whole hypothesis."""
    target = record.get("tgt_tokens", [])
    rows = len(record["attention"])
    return target if len(target) == rows else [" ".join(target)] * rows


def draw_panel(ax, record: dict, norm: Normalize, tol: float, note: str = "") -> None:
    """One sentence's attention matrix on `ax`; `note` is added to the panel's title (e.g. the
    seed of a panel whose run is not the figure's first seed)."""
    weights = np.array([analysis.as_row(row, tol) for row in record["attention"]])
    rows, columns = weights.shape
    ax.imshow(
        np.ma.masked_less_equal(weights, tol),
        cmap=WEIGHT_COLOURS,
        norm=norm,
        extent=(0, columns, rows, 0),
        aspect="equal",
        interpolation="nearest",
    )
    borders = cell_borders(weights, tol, merge_equal=not is_tag_marginals(record))
    ax.add_collection(LineCollection(borders, colors=BORDER_COLOUR, linewidths=0.6))

    mapping = record["mapping"]
    if mapping["name"] in CLUSTER_MAPPINGS:
        for r, row in enumerate(weights):
            clusters = analysis.equal_weight_clusters(row, tol)
            for cluster, symbol in zip(clusters, CLUSTER_SYMBOLS * len(clusters), strict=False):
                # white on dark cells, black on light ones
                colour = "white" if norm(row[cluster[0]]) > 0.55 else "black"
                for c in cluster:
                    ax.text(
                        c + 0.5, r + 0.5, symbol, ha="center", va="center", fontsize=7, color=colour
                    )

    ax.set_xticks(np.arange(columns) + 0.5, record["src_tokens"], rotation=90, fontsize=8)
    ax.set_yticks(np.arange(rows) + 0.5, row_labels(record), fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_color(BORDER_COLOUR)
    title = panel_label(record)
    if note:
        title += f" ({note})"
    if "label" in record:  # SNLI
        title += f"\ngold: {record['label']}, predicted: {record.get('prediction', '?')}"
    ax.set_title(title, fontsize=9)


def panel_label(record: dict) -> str:
    """What a panel shows, from its export record: the mapping with its parameters, or for
    continuous attention (whose cells are the density's mass per token, and whose record's
    mapping is the discrete one its density is fitted to) the density, with the discrete
    mapping where the two contexts are summed."""
    mapping = record["mapping"]
    label = mapping_label(mapping["name"], mapping.get("params", {}))
    if "continuous" not in record:
        return label
    options = record["continuous"]
    density = f"{options['density'].replace('_', ' ')} density (N={options['num_basis']})"
    return f"{density} + discrete {label}" if options["combine"] == "sum" else density


def _attention_wording(records: list[dict]) -> dict:
    """The figure's words: a pretrained encoder's layer self-attention averaged over heads
    (its exports' mappings name the layer, counted from 0), else attention of output steps
    over source tokens."""
    layers = {record["mapping"].get("layer") for record in records}
    heads = {record["mapping"].get("heads") for record in records}
    if heads == {"mean"} and len(layers) == 1 and None not in layers:
        (layer,) = layers
        return {
            **SELF_ATTENTION_WORDING,
            "title": SELF_ATTENTION_WORDING["title"].format(layer=layer + 1),
        }
    return ATTENTION_WORDING


def sentence_figure(
    exports: list[list[dict]], sentence_id: str, tol: float = 0.0, notes: list[str] | None = None
):
    """The figure of sentence `sentence_id` of every export side by side (a matplotlib
    Figure; `plot_sentence` writes it); `notes`, one per export, go into the panels' titles.

    Raises
    ------
    ValueError
        the exports mix NER tag marginals and attention (`is_tag_marginals`): their panels
        would not share axes, colours or legend.
    """
    records = [next(r for r in records if str(r["id"]) == sentence_id) for records in exports]
    kinds = {is_tag_marginals(record) for record in records}
    if len(kinds) > 1:
        raise ValueError("cannot draw NER tag marginals and attention in one figure")
    wording = TAG_MARGINAL_WORDING if kinds == {True} else _attention_wording(records)
    vmax = max(max(max(row) for row in record["attention"]) for record in records)
    norm = Normalize(vmin=0.0, vmax=vmax)

    widths = [len(record["src_tokens"]) for record in records]
    rows = max(len(record["attention"]) for record in records)
    # room for the tick labels, about 0.075 inch per character at 8 pt
    row_label_inches = 0.075 * max(len(label) for record in records for label in row_labels(record))
    column_label_inches = 0.075 * max(
        len(token) for record in records for token in record["src_tokens"]
    )
    fig_width = sum(CELL_INCHES * width + row_label_inches + 0.2 for width in widths) + 1.0
    fig_height = CELL_INCHES * rows + column_label_inches + 1.3
    fig, axes = plt.subplots(
        1,
        len(records),
        figsize=(fig_width, fig_height),
        layout="constrained",
        gridspec_kw={"width_ratios": widths},
        squeeze=False,
    )
    for ax, record, note in zip(axes[0], records, notes or [""] * len(records), strict=True):
        draw_panel(ax, record, norm, tol, note)

    colourbar = fig.colorbar(
        plt.cm.ScalarMappable(norm=norm, cmap=WEIGHT_COLOURS),
        ax=axes[0],
        fraction=0.03,
        pad=0.01,
        shrink=0.9,
    )
    colourbar.set_label(wording["colourbar"], fontsize=8)
    colourbar.ax.tick_params(labelsize=7)
    fig.supxlabel(wording["legend"], fontsize=8, color="0.3")
    fig.suptitle(f"sentence {sentence_id}: {wording['title']}", fontsize=10)
    return fig


def plot_sentence(
    exports: list[list[dict]],
    sentence_id: str,
    out_dir: Path,
    tol: float = 0.0,
    name: str = "attention",
    notes: list[str] | None = None,
) -> list[Path]:
    """Draw sentence `sentence_id` of every export side by side (`sentence_figure`, `notes` in
    the panels' titles); write <out_dir>/<name>_<id>.{png,pdf}."""
    fig = sentence_figure(exports, sentence_id, tol, notes)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}_{sentence_id}.{fmt}" for fmt in FORMATS]
    for path in paths:
        with replacing(path) as partial:
            fig.savefig(partial, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return paths


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "exports",
        nargs="+",
        type=Path,
        metavar="EXPORT.jsonl",
        help="attention exports (scripts/export_attention.py), one per panel",
    )
    parser.add_argument(
        "--id",
        dest="sentence_id",
        help="sentence id to draw (default: the first one that every export has)",
    )
    parser.add_argument("--out-dir", type=Path, default=FIGURES_DIR)
    parser.add_argument(
        "--tol",
        type=float,
        default=0.0,
        help="weights <= tol are drawn as zeros and weights within tol as equal "
        "(default 0: exact, the paper's convention)",
    )
    args = parser.parse_args(argv)
    exports = [read_export(path) for path in args.exports]
    for path, records in zip(args.exports, exports, strict=True):
        if not records:
            parser.error(f"{path} holds no sentences")
    sentence_id = select_sentence(exports, args.sentence_id)
    for path in plot_sentence(exports, sentence_id, args.out_dir, args.tol):
        print(path)


if __name__ == "__main__":
    main()
