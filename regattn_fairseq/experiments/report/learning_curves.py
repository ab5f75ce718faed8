"""Whether a table's models had converged: the validation curve each row records
(`train.learning_curve`, under ``train.learning_curve``), told in words under the table and drawn
as one learning-curve figure per experiment and scale (validation loss per epoch, a colour per
mapping, a line per seed, the kept epoch marked; all epochs with the training loss dashed beside
it, and the tail where runs stop)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

from regattn_fairseq.experiments.rows.keys import (
    cell_key,
    is_baseline,
    row_label,
    split_current,
)
from regattn_fairseq.experiments.train.fairseq_logs import replay_early_stopping

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from regattn_checkout.files import replacing
from regattn_fairseq.experiments.core.result_row import ResultRow, train_record

STOP_WORDS = {
    "patience": "early-stopped",
    "max_epoch": "hit the epoch cap (may not have converged)",
    None: "stopped without either (interrupted?)",
}


def row_curve(row: ResultRow) -> dict:
    """The validation curve a row records (`train.learning_curve`), {} for rows without one
    (a baseline, or a row trained before early stopping)."""
    return train_record(row).get("learning_curve") or {}


def stopped_early(row: ResultRow) -> bool:
    """Whether the row's training stopped on its validation loss (fairseq's patience), the
    only stop this suite calls converged: not the epoch cap, not a fixed epoch budget (rows
    trained before early stopping record no curve), not an interruption."""
    return row_curve(row).get("stop") == "patience"


def stopping_cell(rows: list[ResultRow]) -> str:
    """A table cell saying how many of a cell's training runs (one per seed) stopped early, and
    the epochs of those that did not: "3/3", "1/3 (others: 12, 50 epochs)", "0/1 (5 epochs)";
    "–" for a baseline's rows (nothing trained: they carry `baseline`)."""
    runs = {row["seed"]: row for row in rows if not is_baseline(row)}
    if not runs:
        return "–"
    early = [seed for seed, row in runs.items() if stopped_early(row)]
    text = f"{len(early)}/{len(runs)}"
    if len(early) < len(runs):
        epochs = ", ".join(
            str(train_record(row).get("epochs"))
            for seed, row in sorted(runs.items())
            if seed not in early
        )
        text += f" ({'others: ' if early else ''}{epochs} epochs)"
    return text


def _runs(rows: list[ResultRow]) -> dict:
    """cell key -> {seed: curve} over the rows that record a curve (one per training run)."""
    runs = defaultdict(dict)
    for row in rows:
        curve = row_curve(row)
        if curve:
            runs[cell_key(row)][row["seed"]] = (row_label(row), curve)
    return runs


def convergence_lines(rows: list[ResultRow]) -> list[str]:
    """Markdown bullets, one per cell, saying where each seed's training stopped and why.

    Parameters
    ----------
    rows : list of dict
        the current rows of one experiment and scale.

    Returns
    -------
    list of str
        Empty when no row records a learning curve (rows trained before early stopping: their
        epoch count is the table's ``epochs`` column, a fixed budget).
    """
    runs = _runs(rows)
    if not runs:
        return []
    lines = [
        "Convergence (validation loss per epoch, `train.learning_curve` of each row; the "
        "checkpoint scored is the best epoch's):",
        "",
    ]
    for seeds in runs.values():
        label = next(iter(seeds.values()))[0]
        parts = []
        for seed, (_, curve) in sorted(seeds.items()):
            parts.append(
                f"seed {seed}: best epoch {curve['best_epoch']} of {curve['stopped_epoch']} "
                f"({_kept_values(curve)}), {STOP_WORDS[curve.get('stop')]}{_remarks(curve)}"
            )
        lines.append(f"- {label}: " + "; ".join(parts))
    return lines + [""]


def _kept_values(curve: dict) -> str:
    """The validation values of the kept epoch: the loss, and the metric that chose it when
    that is another (SNLI: accuracy)."""
    loss = curve.get("best_valid_loss")
    text = "valid loss " + ("n/a" if loss is None else f"{loss:.3f}")
    metric = curve.get("metric", "loss")
    if metric != "loss":
        text = f"valid {metric} {curve[f'best_valid_{metric}']:g}, chosen on it; " + text
    return text


def _remarks(curve: dict) -> str:
    """What a reader of the curve must know about how it was recorded, in one parenthesis."""
    remarks = [text for text in (_tied(curve), past_rule(curve), _unlogged(curve)) if text]
    return f" ({'; '.join(remarks)})" if remarks else ""


def _tied(curve: dict) -> str:
    """Words for a kept epoch whose value equals an earlier one's (fairseq compares the values
    it logs, rounded to 3 decimals): it saves checkpoint_best.pt on the tie, but the patience
    counts from the first, so a run can stop one epoch after the epoch it keeps."""
    metric = curve.get("metric", "loss")
    values = curve["valid_loss"] if metric == "loss" else curve[f"valid_{metric}"]
    best = values[curve["epochs"].index(curve["best_epoch"])]
    first = next(
        epoch for epoch, value in zip(curve["epochs"], values, strict=True) if value == best
    )
    if first == curve["best_epoch"]:
        return ""
    return f"its valid {metric} equals epoch {first}'s, from which the patience counts"


def rule_stop_epoch(curve: dict) -> int | None:
    """Where early stopping's rule ends the run, replayed over the epochs its log holds
    (`fairseq_logs.replay_early_stopping` with the epoch numbers: an epoch lost from the log
    still counts), on the value that chose its checkpoints."""
    metric = curve.get("metric", "loss")
    values = curve["valid_loss"] if metric == "loss" else curve[f"valid_{metric}"]
    _, _, index = replay_early_stopping(
        values, curve.get("patience"), metric != "loss", curve["epochs"]
    )
    return None if index is None else curve["epochs"][index]


def past_rule(curve: dict) -> str:
    """Words for a run that trained past where its rule stops it, and which epoch the rule
    keeps against the one scored; "" for a run that stopped where its rule does."""
    stop = rule_stop_epoch(curve)
    if stop is None or curve["stopped_epoch"] <= stop:
        return ""
    metric = curve.get("metric", "loss")
    values = curve["valid_loss"] if metric == "loss" else curve[f"valid_{metric}"]
    within = [(e, v) for e, v in zip(curve["epochs"], values, strict=True) if e <= stop]
    pick = max if metric != "loss" else min
    best_value = pick(v for _, v in within)
    kept = max(e for e, v in within if v == best_value)
    same = kept == curve["best_epoch"]
    return f"trained to epoch {curve['stopped_epoch']}, past its rule's stop at epoch {stop}; " + (
        f"the rule keeps the same epoch ({kept}), the checkpoint scored"
        if same
        else f"the rule keeps epoch {kept}, the checkpoint scored is epoch {curve['best_epoch']}'s"
    )


def _unlogged(curve: dict) -> str:
    """Words for the epochs a run trained but its log does not hold: their records were lost
    when the run was cut off and resumed, while the log was block-buffered (before 15f77ad).
    The scored checkpoint is unaffected (fairseq keeps the best across a resume); the curve
    has a gap there."""
    logged = set(curve["epochs"])
    missing = [epoch for epoch in range(1, curve["stopped_epoch"] + 1) if epoch not in logged]
    if not missing:
        return ""
    listed = ", ".join(map(str, missing))
    return (
        f"epoch{'s' if len(missing) > 1 else ''} {listed} not in its log: lost when the run "
        "was cut off and resumed, before 15f77ad"
    )


def stopping_value(rows: list[ResultRow]) -> str:
    """What the runs of `rows` stopped early on, in words: "validation loss", or the validation
    metric that chose their checkpoints (SNLI: "validation accuracy")."""
    metrics = {row_curve(row).get("metric", "loss") for row in rows}
    return f"validation {' and '.join(sorted(metrics))}"


def overfitting(rows: list[ResultRow]) -> str:
    """What the learning curves say of a converged cell that scores low: whether every run's
    training loss still fell after its kept epoch while its validation value (the loss, or the
    metric it was chosen on) no longer improved, i.e. more epochs fit the training set and not
    held-out data: at this data size and model, the limit is not the training time. "" unless
    every run stopped on its validation value and records its training loss at the kept and
    the last epoch, lower at the last.

    Returns
    -------
    str
        e.g. "after the kept epoch the training loss still fell (seed 1: 5.56 at epoch 9 to
        4.92 at 12) and the validation loss no longer improved: more epochs fit the training
        set, not held-out data"
    """
    falls = []
    for row in sorted(rows, key=lambda row: row["seed"]):
        curve = row_curve(row)
        if curve.get("stop") != "patience" or not curve.get("train_loss"):
            return ""
        train = dict(zip(curve["epochs"], curve["train_loss"], strict=True))
        kept, last = curve["best_epoch"], curve["stopped_epoch"]
        if train.get(kept) is None or train.get(last) is None or train[last] >= train[kept]:
            return ""
        falls.append(
            f"seed {row['seed']}: {train[kept]:.2f} at epoch {kept} to {train[last]:.2f} at {last}"
        )
    if not falls:
        return ""
    return (
        f"after the kept epoch the training loss still fell ({'; '.join(falls)}) and the "
        f"{stopping_value(rows)} no longer improved: more epochs fit the training set, not "
        "held-out data"
    )


def zoom_window(curves: list[dict]) -> tuple[int, float, float]:
    """The tail of the curves where the runs converge, drawn apart: at full scale the first
    epochs' losses flatten the region where mappings differ and runs stop.

    Returns
    -------
    tuple
        (first epoch, lowest and highest validation loss from it on, padded by 5% of their
        span): the window starts at half the earliest stop, so it holds every run's last
        half at least.
    """
    first = max(1, min(curve["stopped_epoch"] for curve in curves) // 2)
    values = [
        loss
        for curve in curves
        for epoch, loss in zip(curve["epochs"], curve["valid_loss"], strict=True)
        if epoch >= first and loss is not None
    ]
    low, high = min(values), max(values)
    pad = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
    return first, low - pad, high + pad


def plot_learning_curves(rows: list[ResultRow], path: Path, title: str) -> Path | None:
    """Draw the validation loss per epoch of every run in `rows` to `path` (PNG): the whole
    curves on the left with each run's training loss dashed (their gap shows overfitting), the
    converged tail of the validation curves (`zoom_window`) on the right, each run's kept
    epoch marked.

    Parameters
    ----------
    rows : list of dict
        the current rows of one experiment and scale.
    path : Path
        the figure file.
    title : str
        the figure's title.

    Returns
    -------
    Path or None
        `path`, or None when no row records a curve (nothing is drawn).
    """
    runs = _runs(rows)
    if not runs:
        return None
    fig, (whole, tail) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, seeds in enumerate(runs.values()):
        colour = colours[index % len(colours)]
        for number, (_, (label, curve)) in enumerate(sorted(seeds.items())):
            for ax in (whole, tail):
                ax.plot(
                    curve["epochs"],
                    curve["valid_loss"],
                    color=colour,
                    linewidth=1.2,
                    alpha=0.85,
                    label=label if number == 0 and ax is whole else None,
                )
                if ax is whole and curve.get("train_loss"):
                    # beside the validation loss, the gap that says whether a run overfits
                    ax.plot(
                        curve["epochs"],
                        curve["train_loss"],
                        color=colour,
                        linewidth=0.9,
                        linestyle="--",
                        alpha=0.5,
                    )
                ax.plot(
                    [curve["best_epoch"]],
                    [curve["best_valid_loss"]],
                    "o",
                    color=colour,
                    markersize=4,
                )
    curves = [curve for seeds in runs.values() for _, curve in seeds.values()]
    first, low, high = zoom_window(curves)
    tail.set_xlim(first - 0.5, max(curve["stopped_epoch"] for curve in curves) + 0.5)
    tail.set_ylim(low, high)
    tail.set_title(f"from epoch {first}: where the runs stop (dot: epoch kept)", fontsize=9)
    whole.set_title("all epochs", fontsize=9)
    for ax in (whole, tail):
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    whole.set_ylabel("loss")
    tail.set_ylabel("validation loss")
    handles, _ = whole.get_legend_handles_labels()
    handles += [
        Line2D([], [], color="grey", linewidth=1.2, label="validation loss"),
        Line2D([], [], color="grey", linewidth=0.9, linestyle="--", label="training loss"),
    ]
    whole.legend(handles=handles, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with replacing(path) as partial:
        fig.savefig(partial, dpi=120)
    plt.close(fig)
    return path


def learning_curve_figure(table: str, experiment: str, scale: str) -> str:
    """The file name (under figures/) of an experiment's learning curves at one scale."""
    return f"{table}_{experiment}_{scale}_learning_curves.png"


def draw_learning_curves(results_dir: Path, spec, rows: list[ResultRow]) -> list[Path]:
    """One learning-curve figure per experiment and scale of the table's current real rows
    (dry runs left out), in results_dir/figures/.

    Returns
    -------
    list of Path
        The figures drawn (none for rows that record no curve).
    """
    current, _ = split_current(rows)
    groups = defaultdict(list)
    for row in current:
        if not row.get("dry_run"):
            groups[(row["experiment"], row["scale"])].append(row)
    drawn = []
    for (experiment, scale), group in groups.items():
        path = results_dir / "figures" / learning_curve_figure(spec.table, experiment, scale)
        title = f"{spec.table} {experiment}, scale {scale}: loss per epoch"
        if plot_learning_curves(group, path, title) is not None:
            drawn.append(path)
    return drawn
