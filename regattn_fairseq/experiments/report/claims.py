"""The sources' claims as data, and a verdict on each from a table's rows.

A table's config lists the claims it tests (``claims:`` in configs/reproduce/<table>.yaml, ids
from ../shared/docs/claims.md), each with a test:

- ``better``: mapping ``a`` scores higher than ``b`` (e.g. P1, fusedmax above softmax).
- ``not_worse``: ``a`` is at most ``margin`` below ``b`` ("as accurate or better", E1).
- ``close_to``: ``a`` is within ``margin`` of ``b`` either way (T1, ℓ2 close to entropy).
- ``within_of_best``: every listed mapping is within ``margin`` of the best one (P5).

A verdict is *reproduced*, *not reproduced* or *inconclusive*, with its reason. It uses the
measured difference (mean of the per-seed metrics of ``a`` minus those of ``b``, over the seeds
both cells have, which the reason names when a cell has more; it lists each seed's difference
when there are several) and a 95% two-level paired bootstrap interval of the difference: each
resample draws as many seeds as the cells share, with replacement, then each drawn seed's test
items, with replacement (the same indices for both cells), and recomputes the statistic on the
drawn items of the drawn seeds (the mean, the macro average, corpus F1 or corpus BLEU).

Why the seeds are drawn too: a training seed can move a model's test score by more than the test
items' sampling does (one inflection softmax seed ended 12 points under the other two), and an
interval over the items alone (the seeds concatenated, as `significance`'s p-values) is blind to
that spread: it called 1.5-entmax "not worse than softmax" on NMT and inflection while one seed of
three had it more than the margin below. With three seeds a resample of the same seed three times
has probability 1/27 > 2.5%, so the interval reaches at least to about the least favourable seed's
own difference: a verdict other than *inconclusive* holds on every seed.

The interval decides: ``better`` is reproduced when it lies above 0 and not reproduced when it
lies at or below 0; ``not_worse`` is reproduced when it lies above -margin and not reproduced
when it lies below; ``close_to`` is reproduced when it lies inside [-margin, margin] and not
reproduced when it lies outside; otherwise inconclusive.

Before any of that, the numbers must be able to carry a verdict, else it is *inconclusive*:
every cell involved exists at the scale; every run involved stopped early on validation (its
loss, or the metric that chose its checkpoints; `train.learning_curve`: ``stop == "patience"``),
not on a fixed epoch budget; and the table's reference mapping (softmax, or the table's
``baseline:``) beats the trivial baseline row (`baselines`) where the table has one: models no
better than a rule that ignores what the mappings attend over (the premise, the input beyond its
lead) cannot show a difference in it.

Which cell stands for a mapping: among the mapping's current cells of the experiment and scale,
the γ-tuned one (GAMMA=auto) if there is one, then the one with the most runs that stopped early
(a converged cell still gathering seeds stands before an older one trained to a fixed epoch
budget), then the most seeds, then the newest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from regattn_fairseq.experiments.report.learning_curves import (
    overfitting,
    stopped_early,
    stopping_value,
)
from regattn_fairseq.experiments.rows.keys import cell_key, is_baseline, row_label, split_current
from regattn_fairseq.experiments.score.significance import (
    SEED,
    concatenate,
    item_statistic,
    read_items,
)

N_RESAMPLES = 1000
VERDICTS = ("reproduced", "not reproduced", "inconclusive")
KINDS = ("better", "not_worse", "close_to", "within_of_best")


@dataclass
class Verdict:
    """One claim's verdict at one scale of one experiment."""

    claim: str
    text: str
    verdict: str
    reason: str
    difference: float | None = None  # a - b (within_of_best: the largest gap to the best)
    interval: tuple[float, float] | None = None


def _bleu_statistic(items: dict):
    """Per-item BLEU sufficient statistics, and corpus BLEU of any subset of them."""
    from sacrebleu.metrics import BLEU

    metric = BLEU()
    stats = np.asarray(
        metric._extract_corpus_statistics(items["hypotheses"], [items["references"]]),
        dtype=np.int64,
    )
    return lambda index: metric._compute_score_from_stats(stats[index].sum(0).tolist()).score


def _resampled(items: dict, metric: str):
    if items["kind"] == "bleu":
        return _bleu_statistic(items)
    return lambda index: item_statistic(items, metric, index)


def shared_seeds(rows_a: list[dict], rows_b: list[dict]) -> list[tuple[dict, dict]]:
    """The (a, b) row pairs of the seeds both cells have, by seed: what a paired comparison
    of two cells compares."""
    by_seed = {row["seed"]: row for row in rows_b}
    return sorted(
        ((row, by_seed[row["seed"]]) for row in rows_a if row["seed"] in by_seed),
        key=lambda pair: pair[0]["seed"],
    )


def paired_difference(rows_a: list[dict], rows_b: list[dict], metric: str) -> float | None:
    """mean metric(a) - mean metric(b) over the seeds both cells have (those of the interval,
    `difference_interval`: a cell's extra seeds would make the two disagree), or None when they
    share none."""
    pairs = shared_seeds(rows_a, rows_b)
    if not pairs:
        return None
    return cell_mean([a for a, _ in pairs], metric) - cell_mean([b for _, b in pairs], metric)


def difference_interval(
    results_dir: Path,
    rows_a: list[dict],
    rows_b: list[dict],
    metric: str,
    n_resamples: int = N_RESAMPLES,
) -> tuple[float, float] | None:
    """95% two-level paired bootstrap interval of metric(a) - metric(b) over the seeds both
    cells have and their test items (module docstring), or None without per-item data for
    every such seed.

    Raises
    ------
    ValueError
        two runs of one seed scored different numbers of test items."""
    pairs = shared_seeds(rows_a, rows_b)
    if not pairs:
        return None
    items_a, items_b = [], []
    for row_a, row_b in pairs:
        a, b = read_items(results_dir, row_a), read_items(results_dir, row_b)
        if a is None or b is None:
            return None
        if a["n"] != b["n"]:
            raise ValueError(
                f"runs {row_a['run_id']} and {row_b['run_id']} (seed {row_a['seed']}) scored "
                f"{a['n']} and {b['n']} test items: not the same test set, nothing to pair"
            )
        items_a.append(a)
        items_b.append(b)
    stat_a, stat_b = (
        _resampled(concatenate(items_a), metric),
        _resampled(concatenate(items_b), metric),
    )
    sizes = np.array([items["n"] for items in items_a])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rng = np.random.default_rng(SEED)
    diffs = []
    for _ in range(n_resamples):
        seeds = rng.integers(len(pairs), size=len(pairs))
        index = np.concatenate([starts[s] + rng.integers(sizes[s], size=sizes[s]) for s in seeds])
        diffs.append(stat_a(index) - stat_b(index))
    low, high = np.percentile(diffs, [2.5, 97.5])
    return float(low), float(high)


def seed_differences(rows_a: list[dict], rows_b: list[dict], metric: str) -> str:
    """What the reason says of the seeds compared: each shared seed's metric(a) - metric(b),
    'per seed: +1.17 (1), +1.25 (2), -0.73 (3)'; with one seed, that the spread between seeds
    is not measured (nothing to draw at the first level: the interval is the items' alone)."""
    pairs = shared_seeds(rows_a, rows_b)
    if len(pairs) == 1:
        return "one training seed: the interval covers its test items, not the spread between seeds"
    return "per seed: " + ", ".join(
        f"{a['metrics'][metric] - b['metrics'][metric]:+.2f} ({a['seed']})" for a, b in pairs
    )


def cell_mean(rows: list[dict], metric: str) -> float:
    """The mean of `metric` over a cell's rows (its seeds)."""
    return float(np.mean([row["metrics"][metric] for row in rows]))


def representative_cells(rows: list[dict], experiment: str, scale: str, evaluation: str) -> dict:
    """mapping name -> the rows (one per seed) of the cell that stands for it (module
    docstring), over the current rows of one experiment, scale and evaluation set."""
    current, _ = split_current(rows)
    cells: dict = {}
    for row in current:
        if (row["experiment"], row["scale"], row["evaluation"]) != (experiment, scale, evaluation):
            continue
        if row.get("dry_run"):
            continue
        cells.setdefault(cell_key(row), []).append(row)
    chosen: dict = {}
    for cell_rows in cells.values():
        mapping = cell_rows[0]["mapping"]
        rank = (
            any(r.get("gamma_selection") for r in cell_rows),
            len({r["seed"] for r in cell_rows if stopped_early(r)}),
            len({r["seed"] for r in cell_rows}),
            max(r["date"] for r in cell_rows),
        )
        if mapping not in chosen or rank > chosen[mapping][0]:
            chosen[mapping] = (rank, cell_rows)
    return {mapping: cell_rows for mapping, (_, cell_rows) in chosen.items()}


def _unconverged(cell_rows: list[dict]) -> list[str]:
    return [f"seed {row['seed']}" for row in cell_rows if not stopped_early(row)]


def _decide(kind: str, interval: tuple[float, float], margin: float) -> tuple[str, str]:
    low, high = interval
    if kind == "better":
        if low > 0:
            return "reproduced", "the interval lies above 0"
        if high <= 0:
            return "not reproduced", "the interval lies at or below 0"
        return "inconclusive", "the interval contains 0"
    if kind == "not_worse":
        if low > -margin:
            return "reproduced", f"the interval lies above -{margin:g}"
        if high < -margin:
            return "not reproduced", f"the interval lies below -{margin:g}"
        return "inconclusive", f"the interval contains -{margin:g}"
    # close_to
    if -margin <= low and high <= margin:
        return "reproduced", f"the interval lies within ±{margin:g}"
    if low > margin or high < -margin:
        return "not reproduced", f"the interval lies outside ±{margin:g}"
    return "inconclusive", f"the interval reaches beyond ±{margin:g}"


def judge(
    claim,
    rows: list[dict],
    experiment: str,
    scale: str,
    results_dir: Path,
    reference: str = "softmax",
) -> Verdict:
    """The verdict on one claim (a ``claims:`` entry) from a table's rows.

    Parameters
    ----------
    claim : DictConfig or dict
        ``{id, text, test: {kind, evaluation, metric, a, b | mappings, margin}}``.
    rows : list of dict
        every raw row of the table.
    experiment, scale : str
        where to judge it.
    results_dir : Path
        the results folder (per-item sidecars).
    reference : str
        the mapping that must beat the trivial baseline (the table's ``baseline:``).

    Returns
    -------
    Verdict

    Raises
    ------
    ValueError
        an unknown test kind.
    """
    test = claim["test"]
    kind = test["kind"]
    if kind not in KINDS:
        raise ValueError(f"claim {claim['id']}: unknown test kind {kind!r}; known: {KINDS}")
    evaluation, metric = test["evaluation"], test["metric"]
    margin = float(test.get("margin", 0.0))
    verdict = Verdict(claim["id"], claim["text"], "inconclusive", "")
    cells = representative_cells(rows, experiment, scale, evaluation)
    names = list(test["mappings"]) if kind == "within_of_best" else [test["a"], test["b"]]
    missing = [name for name in names if name not in cells]
    if missing:
        verdict.reason = f"no rows for {', '.join(missing)} at this scale"
        return verdict
    for name in names:
        unconverged = _unconverged(cells[name])
        if unconverged:
            verdict.reason = (
                f"{row_label(cells[name][0])} was not trained to convergence "
                f"({', '.join(unconverged)} stopped by a fixed epoch budget, not by early "
                "stopping on validation)"
            )
            return verdict
    trivial = [cell for cell in cells.values() if is_baseline(cell[0])]
    if trivial and reference in cells:
        best_trivial = max(trivial, key=lambda cell: cell_mean(cell, metric))
        if cell_mean(cells[reference], metric) <= cell_mean(best_trivial, metric):
            verdict.reason = (
                f"{reference} ({cell_mean(cells[reference], metric):.2f}) does not beat "
                f"{best_trivial[0]['mapping']} ({cell_mean(best_trivial, metric):.2f}) on "
                f"{evaluation} {metric}: the models do no better than a trivial rule, so their "
                "differences cannot test the claim"
            )
            if not _unconverged(cells[reference]):
                verdict.reason += (
                    f"; {reference} stopped on its {stopping_value(cells[reference])}, so the "
                    "shortfall is not from a cut-short training"
                )
                limit = overfitting(cells[reference])
                verdict.reason += f": {limit}" if limit else ""
                verdict.reason += " (learning curves below)"
            return verdict
    if kind == "within_of_best":
        best = max(names, key=lambda name: cell_mean(cells[name], metric))
        gaps = {}
        for name in names:
            if name == best:
                continue
            interval = difference_interval(results_dir, cells[best], cells[name], metric)
            if interval is None:
                verdict.reason = f"no per-item data to compare {name} with {best}"
                return verdict
            gaps[name] = (paired_difference(cells[best], cells[name], metric), interval)
        worst = max(gaps, key=lambda name: gaps[name][0])
        verdict.difference, verdict.interval = gaps[worst]
        if all(interval[1] <= margin for _, interval in gaps.values()):
            verdict.verdict = "reproduced"
            verdict.reason = f"every gap to {best} has its interval within {margin:g}"
        elif any(interval[0] > margin for _, interval in gaps.values()):
            verdict.verdict = "not reproduced"
            far = [name for name, (_, interval) in gaps.items() if interval[0] > margin]
            verdict.reason = f"{', '.join(far)} more than {margin:g} below {best}"
        else:
            verdict.reason = f"some gap to {best} has an interval reaching beyond {margin:g}"
        verdict.reason += (
            f" (largest gap: {worst}; {_seeds_note(cells[best], cells[worst], metric)})"
        )
        return verdict
    a, b = cells[test["a"]], cells[test["b"]]
    interval = difference_interval(results_dir, a, b, metric)
    verdict.difference = paired_difference(a, b, metric)
    if interval is None:
        verdict.reason = "no per-item data for a paired interval"
        return verdict
    verdict.interval = interval
    verdict.verdict, verdict.reason = _decide(kind, interval, margin)
    verdict.reason += f" ({_seeds_note(a, b, metric)})"
    return verdict


def _seeds_note(rows_a: list[dict], rows_b: list[dict], metric: str) -> str:
    """The reason's note on the seeds a paired comparison used: which (when the cells differ)
    and each one's difference."""
    compared = _seeds_compared(rows_a, rows_b)
    differences = seed_differences(rows_a, rows_b, metric)
    return f"{compared}; {differences}" if compared else differences


def _seeds_compared(rows_a: list[dict], rows_b: list[dict]) -> str:
    """Which seeds a paired comparison used, when either cell has seeds the other lacks (a
    cell still gathering seeds): e.g. 'on seed 1, the seeds both cells have: entmax15 1 seed,
    softmax 3 seeds'; '' when both have the same seeds."""
    pairs = shared_seeds(rows_a, rows_b)
    if len(pairs) == len(rows_a) == len(rows_b):
        return ""
    seeds = ", ".join(str(a["seed"]) for a, _ in pairs)
    counts = ", ".join(
        f"{rows[0]['mapping']} {len(rows)} seed{'s' if len(rows) > 1 else ''}"
        for rows in (rows_a, rows_b)
    )
    return f"on seed{'s' if len(pairs) > 1 else ''} {seeds}, the seeds both cells have: {counts}"


def claims_section(spec, rows: list[dict], experiment: str, scale: str, results_dir) -> list[str]:
    """The markdown "Claims at this scale" lines of one experiment and scale (none when the
    table's config lists no claims for the experiment)."""
    claims = [
        c for c in (spec.get("claims") or []) if c.get("experiment", experiment) == experiment
    ]
    if not claims or results_dir is None:
        return []
    reference = spec.get("baseline") or "softmax"
    lines = [
        "#### Claims at this scale",
        "",
        "Verdicts from this scale's cells (`claims.py`: measured difference = mean over the "
        "seeds both cells have, and its 95% paired bootstrap interval, which draws those seeds "
        "with replacement, then each drawn seed's test items: a training seed can move the "
        "scores more than the test items' sampling does, so a verdict must hold across the "
        "seeds, not only on the pooled items; inconclusive unless every run involved stopped "
        f"early on validation and {reference} beats the trivial baseline).",
        "",
        "| claim | what it says | difference | 95% interval | verdict | why |",
        "|---|---|---|---|---|---|",
    ]
    for claim in claims:
        verdict = judge(claim, rows, experiment, scale, Path(results_dir), reference)
        difference = "–" if verdict.difference is None else f"{verdict.difference:+.2f}"
        interval = (
            "–"
            if verdict.interval is None
            else f"[{verdict.interval[0]:+.2f}, {verdict.interval[1]:+.2f}]"
        )
        lines.append(
            f"| {verdict.claim} | {verdict.text} | {difference} | {interval} | "
            f"**{verdict.verdict}** | {verdict.reason} |"
        )
    return lines + [""]
