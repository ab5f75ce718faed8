"""Whether a run counts as converged: the check every claim applies to a cell's runs before it
judges them (../shared/docs/claims.md, "Only converged runs count").

Stopping on validation by patience is necessary but not enough. A patience rule stops a run
whose validation curve is still falling slowly as soon as the noise gives it a few epochs
without a new best, and it stops a run that found a worse basin as readily as one that found
a good one. So a run counts as converged when all of these hold:

1. **It stopped by patience** (`learning_curves.stopped_early`): not at the epoch cap, not on a
   fixed epoch budget, not interrupted.
2. **Its tail no longer falls**: over its last ``TAIL_PATIENCES`` × patience validated epochs,
   the Theil–Sen slope of the validation loss has a 95% interval that is not wholly below
   zero. A robust slope, so that one noisy epoch neither makes nor hides a trend; over twice
   the patience, so that the window holds the epochs before the kept one as well as the
   patience after it.
3. **Its best validation loss is no outlier in its cell**: it lies less than ``OUTLIER_MADS``
   scaled median absolute deviations (1.4826 × MAD, the normal's σ) *above* its cell's median.
   The scale is the MAD of the best losses of every run of the experiment (all its cells, at
   least ``MIN_RUNS_FOR_OUTLIERS`` runs), as three seeds alone cannot estimate a spread: their
   median is one of them. One-sided, because what it guards against is a run that settled in
   a worse basin; a run that found a better one is not a failure to converge. The best
   validation loss is the kept epoch's (``best_valid_loss``): for a run kept on another metric
   (SNLI: validation accuracy) not its lowest.

A run that fails is kept out of the verdicts with its reason shown (`check_cell`); the way back
in is to train it again with a longer patience. Runs that trained past their own rule
(`learning_curves.past_rule`) are disclosed, not excluded: the checkpoint scored is the best
epoch, and the rule keeps that same epoch unless the last epochs improved on it.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import theilslopes

from regattn_fairseq.experiments.core.result_row import ResultRow
from regattn_fairseq.experiments.report.learning_curves import row_curve, stopped_early

TAIL_PATIENCES = 2
TAIL_CONFIDENCE = 0.95
MIN_TAIL_POINTS = 6
OUTLIER_MADS = 3.0
MIN_RUNS_FOR_OUTLIERS = 5
MAD_TO_SIGMA = 1.4826


def tail_slope(curve: dict) -> tuple[float, float, float] | None:
    """The Theil–Sen slope of the validation loss over the run's last TAIL_PATIENCES ×
    patience validated epochs, with its TAIL_CONFIDENCE interval.

    Parameters
    ----------
    curve : dict
        a row's learning curve (`train.learning_curve`).

    Returns
    -------
    tuple or None
        (slope per epoch, low, high); None without a patience or with fewer than
        MIN_TAIL_POINTS validated epochs in the window.
    """
    patience = curve.get("patience")
    if not patience:
        return None
    epochs = np.asarray(curve["epochs"], dtype=float)
    losses = np.asarray([np.nan if v is None else v for v in curve["valid_loss"]], dtype=float)
    window = (epochs > epochs[-1] - TAIL_PATIENCES * patience) & np.isfinite(losses)
    if window.sum() < MIN_TAIL_POINTS:
        return None
    slope, _, low, high = theilslopes(losses[window], epochs[window], alpha=TAIL_CONFIDENCE)
    return float(slope), float(low), float(high)


def tail_still_falls(curve: dict) -> str:
    """Words for a tail whose slope interval lies wholly below zero, else ""."""
    fit = tail_slope(curve)
    if fit is None or fit[2] >= 0:
        return ""
    slope, low, high = fit
    window = TAIL_PATIENCES * curve["patience"]
    return (
        f"its validation loss still falls over the last {window} epochs (Theil–Sen slope "
        f"{slope * 10:+.3f} per 10 epochs, 95% interval [{low * 10:+.3f}, {high * 10:+.3f}])"
    )


def outlier_losses(rows: list[ResultRow], pool: list[ResultRow]) -> dict[str, str]:
    """The runs of a cell whose best validation loss lies more than OUTLIER_MADS scaled MADs
    above the cell's median, the MAD taken over ``pool`` (every run of the experiment): run
    id -> words. Empty below MIN_RUNS_FOR_OUTLIERS runs in the pool, or when their losses do
    not spread (MAD 0)."""

    def best_losses(of):
        return {
            row["run_id"]: row_curve(row)["best_valid_loss"]
            for row in of
            if row_curve(row).get("best_valid_loss") is not None
        }

    losses, pooled = best_losses(rows), np.array(list(best_losses(pool).values()))
    if not losses or len(pooled) < MIN_RUNS_FOR_OUTLIERS:
        return {}
    scale = MAD_TO_SIGMA * float(np.median(np.abs(pooled - np.median(pooled))))
    if scale == 0:
        return {}
    median = float(np.median(list(losses.values())))
    return {
        run: (
            f"its best validation loss {loss:.3f} lies {(loss - median) / scale:.1f} scaled "
            f"MADs above its cell's median {median:.3f} (limit {OUTLIER_MADS:g}; MAD over the "
            f"experiment's {len(pooled)} runs)"
        )
        for run, loss in losses.items()
        if loss - median > OUTLIER_MADS * scale
    }


def check_cell(rows: list[ResultRow], pool: list[ResultRow] | None = None) -> dict[str, str]:
    """The runs of one cell (one row per seed) that do not count as converged, with why.

    Parameters
    ----------
    rows : list of dict
        a cell's rows (one evaluation set).
    pool : list of dict, optional
        every run of the experiment on that evaluation set (the outlier rule's scale); the
        cell's own rows when absent.

    Returns
    -------
    dict
        run id -> the reasons, joined; runs that pass are absent.
    """
    issues: dict[str, list[str]] = {}
    for row in rows:
        curve = row_curve(row)
        if not stopped_early(row):
            issues.setdefault(row["run_id"], []).append(
                "it did not stop on its validation value (a fixed epoch budget, the epoch cap "
                "or an interruption)"
            )
            continue
        falls = tail_still_falls(curve)
        if falls:
            issues.setdefault(row["run_id"], []).append(falls)
    stopped = [row for row in rows if stopped_early(row)]
    pool = [row for row in (rows if pool is None else pool) if stopped_early(row)]
    for run, words in outlier_losses(stopped, pool).items():
        issues.setdefault(run, []).append(words)
    return {run: "; ".join(reasons) for run, reasons in issues.items()}


def converged(
    rows: list[ResultRow], pool: list[ResultRow] | None = None
) -> tuple[list[dict], list[str]]:
    """A cell's rows split into those that count, and the words for each one that does not
    ("seed 2 (run d4079701063b): ..."); ``pool`` as `check_cell`.
    """
    issues = check_cell(rows, pool)
    kept = [row for row in rows if row["run_id"] not in issues]
    left_out = [
        f"seed {row['seed']} (run {row['run_id']}): {issues[row['run_id']]}"
        for row in sorted(rows, key=lambda row: row["seed"])
        if row["run_id"] in issues
    ]
    return kept, left_out


def converged_values(
    cell: list[ResultRow], kept: list[ResultRow], metric: str
) -> tuple[list[float], str]:
    """A cell's headline values on `metric` and the seeds they stand for, as every report
    shows them (a table's headline, the summary), given its `kept` runs (`converged`): their
    values with "n=3", or, where the convergence check left runs out, with "2 of 3 converged"
    (all runs' values with "0 of 3 converged" when none is kept)."""
    values = [row["metrics"][metric] for row in (kept or cell) if metric in row["metrics"]]
    if len(kept) == len(cell):
        return values, f"n={len(kept)}"
    return values, f"{len(kept)} of {len(cell)} converged"
