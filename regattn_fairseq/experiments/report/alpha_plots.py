"""The α each head learned (α-entmax with a learned α per head, Correia et al. 2019): a figure
of layer × head heat maps, one per seed, and a summary line per run for the table, from the
rows' ``attention.alpha`` (`score.hf_classify`). Heads that specialise show as different α
within a layer and across seeds alike; α near 1 is softmax-like, α = 2 is sparsemax."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from regattn.analysis import describe_learned_alpha, learned_alpha_spread
from regattn_checkout.files import replacing
from regattn_fairseq.experiments.core.result_row import ResultRow, attention_stats, train_record
from regattn_fairseq.experiments.rows.keys import split_current

# the range of a learned α (regattn.mappings.learned_alpha: 1.01 + 0.99 sigmoid)
ALPHA_RANGE = (1.0, 2.0)


def learned_alpha_rows(rows: list[ResultRow]) -> list[dict]:
    """The rows that record a learned α per layer and head, sorted by seed."""
    found = [row for row in rows if attention_stats(row).get("alpha")]
    return sorted(found, key=lambda row: row["seed"])


def alpha_sd(row: ResultRow) -> float | None:
    """The standard deviation of a run's learned α over all its heads (every layer or attention
    module): how far the heads specialised from their common start (E2's "heads that
    specialise"). None for a run without a learned α."""
    alpha = attention_stats(row).get("alpha")
    return None if not alpha else learned_alpha_spread(alpha)


def alpha_summary(row: ResultRow) -> str:
    """One line on a run's learned α (`regattn.analysis.describe_learned_alpha`), and the
    heads' spread after each epoch where the run recorded it (``learning_curve.alpha_sd``):
    whether they were still specialising when the run stopped."""
    words = f"seed {row['seed']}: {describe_learned_alpha(attention_stats(row)['alpha'])}"
    by_epoch = (train_record(row).get("learning_curve") or {}).get("alpha_sd")
    if by_epoch:
        words += f"; sd over heads after each epoch: {', '.join(f'{v:.2f}' for v in by_epoch)}"
    return words


def alpha_figure_name(table: str, experiment: str, scale: str) -> str:
    """The file name (under figures/) of an experiment's learned-α figure at one scale."""
    return f"{table}_{experiment}_{scale}_learned_alpha.png"


def plot_learned_alpha(rows: list[ResultRow], path: Path, title: str) -> Path | None:
    """One layer × head heat map of the learned α per run (seed), on one colour scale.

    Returns
    -------
    Path or None
        The figure; None for rows without a learned α.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = learned_alpha_rows(rows)
    if not runs:
        return None
    # named attention modules (a fairseq Transformer's) need room for their labels
    labels = 1.6 if any(attention_stats(row).get("alpha_layers") for row in runs) else 0.0
    fig, axes = plt.subplots(
        1,
        len(runs),
        figsize=(3.6 * len(runs) + 1 + labels, 3.2),
        squeeze=False,
        constrained_layout=True,
    )
    image = None
    for ax, row in zip(axes[0], runs, strict=True):
        alpha = np.asarray(attention_stats(row)["alpha"], dtype=float)
        image = ax.imshow(alpha, vmin=ALPHA_RANGE[0], vmax=ALPHA_RANGE[1], cmap="viridis")
        ax.set_title(f"seed {row['seed']}", fontsize=9)
        ax.set_xlabel("head")
        ax.set_xticks(range(alpha.shape[1]))
        # a fairseq Transformer's rows name their attention modules (encoder self-attention,
        # decoder self- and cross-attention); a Hugging Face encoder's are its layers
        names = attention_stats(row).get("alpha_layers")
        ax.set_ylabel("attention" if names else "layer")
        ax.set_yticks(range(alpha.shape[0]), labels=names)
        ax.tick_params(labelsize=7)
    fig.colorbar(image, ax=axes[0].tolist(), label="learned α (1: softmax, 2: sparsemax)")
    fig.suptitle(title, fontsize=10, wrap=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as partial:
        fig.savefig(partial, dpi=120, format="png")
    plt.close(fig)
    return path


def draw_alpha_figures(results_dir: Path, spec, rows: list[ResultRow]) -> list[Path]:
    """One learned-α figure per experiment and scale whose current real rows record one."""
    current, _ = split_current(rows)
    groups = defaultdict(list)
    for row in learned_alpha_rows(current):
        if not row.get("dry_run"):
            groups[(row["experiment"], row["scale"], row["mapping"])].append(row)
    drawn = []
    for (experiment, scale, mapping), group in groups.items():
        path = results_dir / "figures" / alpha_figure_name(spec.table, experiment, scale)
        title = f"{spec.table} {experiment}, scale {scale}: {mapping}, α per layer and head"
        if plot_learned_alpha(group, path, title) is not None:
            drawn.append(path)
    return drawn
