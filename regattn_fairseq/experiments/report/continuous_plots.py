#!/usr/bin/env python
"""Figure of continuous attention on one sentence: the density p(t) over the source, drawn
over the discrete attention whose mean and variance placed it.

Each panel shows, for one output step, the source tokens at their positions
t_l = (l - 1/2) / L on [0, 1], the discrete attention as bars, and the density scaled by 1/L,
so that its area over a token's cell [(l - 1) / L, l / L] is comparable with the token's bar
(the truncated parabola's support is shaded). Two sources:

- `--example`: the mechanism itself on a stated input (EXAMPLE below): discrete softmax over
  hand-set scores for one sentence, and the Gaussian and truncated parabola with that softmax's
  mean and variance (regattn.continuous.density_from_attention): no trained model involved;
- an export of scripts/export_attention.py of a model trained with --attention-domain
  continuous (`--id`, `--row`): the density the model produced and its discrete attention.

    MPLBACKEND=Agg python -m regattn_fairseq.experiments.report.continuous_plots --example
    MPLBACKEND=Agg python -m regattn_fairseq.experiments.report.continuous_plots attn.jsonl \\
        --id 3 --row 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures go to files; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from regattn.continuous import (  # noqa: E402
    DENSITIES,
    DENSITY_DECLARATIONS,
    density_from_attention,
    density_pdf,
    density_support,
    positions,
)
from regattn_checkout.files import replacing
from regattn_checkout.paths import FIGURES_DIR

FORMATS = ("png", "pdf")
# The stated input of --example: a Multi30k-style source sentence and attention scores set by
# hand for an output step translating "guitar" (most weight there, some on the words around).
EXAMPLE = {
    "tokens": "a man in a blue shirt is playing the guitar on a stage .".split(),
    "scores": [0.0, 0.2, 0.0, 0.0, 0.3, 0.5, 0.2, 3.0, 2.5, 5.0, 2.5, 0.4, 0.8, 0.0],
}


def plot_panel(
    ax, tokens, discrete, mu, sigma_sq, density, title, discrete_label="discrete softmax"
):
    """One output step: bars of `discrete` at the tokens' positions and the density p(t) / L."""
    length = len(tokens)
    mask = torch.ones(length, dtype=torch.bool)
    t = positions(mask, torch.float64)
    ax.bar(t, discrete, width=0.8 / length, color="0.75", label=discrete_label)
    grid = torch.linspace(-0.1, 1.1, 1201, dtype=torch.float64)
    mu_, sigma_sq_ = (
        torch.tensor(mu, dtype=torch.float64),
        torch.tensor(sigma_sq, dtype=torch.float64),
    )
    curve = density_pdf(grid, mu_, sigma_sq_, density) / length
    ax.plot(grid, curve, color="C0", lw=2, label=f"density p(t) / L ({density})")
    if DENSITY_DECLARATIONS[density].compact_support:
        low, high = density_support(mu_, sigma_sq_, density)
        ax.axvspan(float(low), float(high), color="C0", alpha=0.08, label="support μ ± (3σ²/2)^⅓")
    ax.axvline(mu, color="C0", ls=":", lw=1)
    ax.set_xticks(t.tolist(), tokens, rotation=60, ha="right")
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{title}\nμ = {mu:.3f}, σ² = {sigma_sq:.4f}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")


def example_figure(out_dir: Path) -> list[Path]:
    """The README figure: both densities from the softmax of EXAMPLE's scores."""
    scores = torch.tensor(EXAMPLE["scores"], dtype=torch.float64)
    mask = torch.ones_like(scores, dtype=torch.bool)
    discrete = torch.softmax(scores, -1)
    mu, sigma_sq = density_from_attention(discrete, mask)
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    for ax, density in zip(axes, DENSITIES, strict=True):
        plot_panel(
            ax,
            EXAMPLE["tokens"],
            discrete.tolist(),
            float(mu),
            float(sigma_sq),
            density,
            DENSITY_DECLARATIONS[density].title,
        )
    fig.suptitle(
        "Continuous attention from the mean and variance of a discrete softmax "
        "(hand-set scores, no trained model)",
        fontsize=10,
    )
    return _save(fig, out_dir / "continuous_attention_example")


def export_figure(export: Path, sentence_id: str, row: int, out_dir: Path) -> list[Path]:
    """The density of row `row` of sentence `sentence_id` in an export of a continuous model."""
    records = [json.loads(line) for line in export.read_text(encoding="utf-8").splitlines()]
    matches = [r for r in records if str(r["id"]) == sentence_id]
    if not matches:
        raise SystemExit(f"{export}: no sentence with id {sentence_id}")
    record = matches[0]
    if "density" not in record:
        raise SystemExit(f"{export}: not an export of a model with continuous attention")
    if not 0 <= row < len(record["attention"]):
        raise SystemExit(f"{export}: sentence {sentence_id} has {len(record['attention'])} rows")
    density = record["continuous"]["density"]
    discrete = record.get("discrete_attention", record["attention"])[row]
    tgt = record["tgt_tokens"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    plot_panel(
        ax,
        record["src_tokens"],
        discrete,
        record["density"]["mu"][row],
        record["density"]["sigma_sq"][row],
        density,
        f"{DENSITY_DECLARATIONS[density].title}, output step {row}"
        + (f" ({tgt[row]})" if row < len(tgt) else ""),
        discrete_label=f"discrete {record['mapping']['name']}"
        if "discrete_attention" in record
        else "density's mass per token",
    )
    # named by the density too: the figures of two models on one sentence sit side by side
    return _save(fig, out_dir / f"continuous_attention_{density}_{sentence_id}_{row}")


def _save(fig, stem: Path) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    paths = [stem.with_suffix(f".{fmt}") for fmt in FORMATS]
    for path in paths:
        with replacing(path) as partial:
            fig.savefig(partial, dpi=150)
    plt.close(fig)
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", nargs="?", type=Path, help="JSON-lines attention export")
    parser.add_argument("--example", action="store_true", help="the stated example input")
    parser.add_argument("--id", help="sentence id in the export (default: the first)")
    parser.add_argument("--row", type=int, default=0, help="output step (default 0)")
    parser.add_argument("--out-dir", type=Path, default=FIGURES_DIR)
    args = parser.parse_args(argv)
    if args.example == (args.export is not None):
        parser.error("give either an export or --example")
    if args.example:
        paths = example_figure(args.out_dir)
    else:
        first = json.loads(args.export.read_text(encoding="utf-8").splitlines()[0])
        paths = export_figure(args.export, args.id or str(first["id"]), args.row, args.out_dir)
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
