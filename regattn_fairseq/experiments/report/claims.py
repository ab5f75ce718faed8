"""The sources' claims as data, and a verdict on each from a table's rows, by the rules that
../shared/docs/claims.md declares ("How each claim is judged", 2026-11-28).

A table's config lists the claims it tests (``claims:`` in configs/reproduce/<table>.yaml, ids
from claims.md), each with a test. Comparisons of two cells, ``a`` against ``b``:

- ``better``: ``a`` scores higher than ``b`` (P1, P2, P7; P8 on attention statistics).
- ``not_worse``: ``a`` is at most ``margin`` below ``b`` (E1: "as accurate or better").
- ``close_to``: ``a`` is within ``margin`` of ``b`` either way (T1).

Claims made of several comparisons:

- ``each_not_worse``: every one of ``mappings`` is at most ``margin`` below ``reference``
  (P5, X1: "within m of" claims are non-inferiority tests against softmax, not tests against
  the best mapping chosen on the test set, whose choice would favour it). The spread from the
  best to the worst mapping is reported beside the verdict, untested.
- ``all_better``: every one of ``mappings`` scores higher than every one of ``against`` (P3).

Claims on cost (no gate: they are not about what attention learns):

- ``time_ratio``: the seconds per training epoch of ``a`` over ``b``, from the converged rows'
  wall times, is at most ``1 + margin`` (``side: not_slower``, T2) or within
  [1 / (1 + margin), 1 + margin] (``side: both``, P4: "essentially the same").
- ``bench_ratio``: a benchmark record's ratio to softmax, one value per benchmark run made
  since the test's ``since`` (its declaration), the first ``runs`` of them where it declares a
  run count (fewer: provisional): throughput at least ``at_least`` (P6), or
  seconds per training step within ``margin`` as ``time_ratio`` (P4, T2: claims.md tests the
  claims on runtime by benchmarks; the rows' wall times depend on what else ran beside them).

A claim on one cell's level (no gate: a statistic of one mapping's attention):

- ``at_least``: the mean over seeds of ``a``'s ``metric`` is at least ``at_least`` (E2's heads
  that specialise: the spread of the learned α over the heads, ``attention:alpha_sd``). Its Δ
  and interval are the mean's t-interval less ``at_least``.

**Inference over seeds.** A verdict rests on the per-seed scores of each cell (one converged run
per seed): the difference of the cells' means and its 95% Welch t-interval (unequal variances;
the seeds of two cells are independent trainings, not pairs). A training seed can move a score
by more than the sampling of the test items does, so an interval over the items alone is blind
to what most often decides these claims. The item-level paired bootstrap p-value (seeds
concatenated, `significance.p_against`) is kept as a column of its own, labelled as such.
Time ratios are tested the same way on the logarithm of the seconds per epoch.

**Verdicts**, in this order:

1. runs that fail the convergence check (`convergence.check_cell`) are left out, with why;
2. *provisional* when an arm (the gate's included) keeps fewer than ``MIN_SEEDS`` converged
   seeds, none at all included (a cell not trained yet, or no run of it converged); the reason
   says what the interval would give where there is one;
3. *inconclusive* when the gate fails: a comparison of attention mappings needs attention to
   matter, i.e. the reference (softmax) beating the table's attention-free control
   (``control:``, uniform attention in the same architecture) with an interval above zero.
   Trivial baselines (lead, copy, hypothesis only) are rows beside the cells, not gates;
4. otherwise the interval decides: *reproduced* when it lies on the claimed side of the margin,
   *not reproduced at this scale* when it lies wholly on the other side, *inconclusive* when
   it straddles it.

Every claim shows its Δ and interval, whatever its verdict.

Which cell stands for a mapping: among the mapping's current cells of the experiment and scale,
the γ-tuned one (GAMMA=auto) if there is one, then the one with the most runs that stopped early,
then the most seeds, then the newest.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from scipy import stats

from regattn import mappings
from regattn_fairseq.experiments.core.result_row import (
    ResultRow,
    attention_stats,
    gamma_selection,
    train_record,
)
from regattn_fairseq.experiments.report.alpha_plots import alpha_sd
from regattn_fairseq.experiments.report.convergence import converged
from regattn_fairseq.experiments.report.learning_curves import stopped_early
from regattn_fairseq.experiments.rows.keys import cell_key, split_current
from regattn_fairseq.experiments.score.significance import p_against

CONFIDENCE = 0.95
MIN_SEEDS = 3
REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced at this scale"
INCONCLUSIVE = "inconclusive"
PROVISIONAL = "provisional"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, PROVISIONAL)
COMPARISONS = ("better", "not_worse", "close_to")
KINDS = (*COMPARISONS, "each_not_worse", "all_better", "time_ratio", "bench_ratio", "at_least")
# metrics read off a row's attention statistics rather than its scores (P8)
ATTENTION_PREFIX = "attention:"
# attention metrics computed from what a row records rather than recorded themselves
DERIVED_ATTENTION = {"alpha_sd": alpha_sd}
SECONDS_PER_EPOCH = "seconds_per_epoch"
# where a bench claim's record comes from
BENCH_WRITERS = "`make bench-model` writes model_cpu.json; model_gpu.json is written on a lent GPU"


@dataclass
class Verdict:
    """One claim's verdict at one scale of one experiment.

    ``difference`` and ``interval`` are those of the comparison that decides (for a claim of
    several comparisons, the one nearest to failing); ``p_items`` the item-level p-value of
    that comparison; ``details`` one line per comparison, for the footnote.
    """

    claim: str
    text: str
    verdict: str
    reason: str
    difference: float | None = None
    interval: tuple[float, float] | None = None
    p_items: float | None = None
    seeds: str = ""
    details: list[str] = field(default_factory=list)
    # a time claim's Δ and interval are the mapping's ratio to the reference's seconds per epoch
    ratio: bool = False


@dataclass(frozen=True)
class Comparison:
    """``a`` against ``b`` on one metric, over each cell's converged seeds."""

    a: str
    b: str
    values_a: tuple[float, ...]
    values_b: tuple[float, ...]
    difference: float
    interval: tuple[float, float] | None
    p_items: float | None = None

    @property
    def seeds(self) -> int:
        return min(len(self.values_a), len(self.values_b))

    def describe(self, unit: str = "") -> str:
        interval = (
            "no interval (one seed)"
            if self.interval is None
            else f"[{self.interval[0]:+.2f}, {self.interval[1]:+.2f}]"
        )
        return (
            f"{self.a} − {self.b}: {self.difference:+.2f}{unit} {interval} "
            f"(n = {len(self.values_a)}, {len(self.values_b)})"
        )


def welch_interval(
    a: list[float], b: list[float], confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """The Welch t-interval of mean(a) − mean(b): the cells' variances estimated apart, the
    degrees of freedom by Welch–Satterthwaite.

    Parameters
    ----------
    a, b : list of float
        one value per seed of each cell.
    confidence : float
        the interval's coverage.

    Returns
    -------
    tuple or None
        (low, high); None when a cell has fewer than 2 values (no spread to estimate). Two
        cells without any spread give the difference itself, both ends.
    """
    if len(a) < 2 or len(b) < 2:
        return None
    difference = float(np.mean(a) - np.mean(b))
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    se2 = va + vb
    if se2 == 0:
        return difference, difference
    df = se2**2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(se2)
    return difference - half, difference + half


def metric_value(row: ResultRow, metric: str) -> float:
    """A row's value of a claim's metric: a score (``bleu``), an attention statistic
    (``attention:mean_runs_per_row``, or one computed from the row, `DERIVED_ATTENTION`), or
    the training's seconds per epoch.

    Raises
    ------
    KeyError
        the row does not record it.
    """
    if metric.startswith(ATTENTION_PREFIX):
        name = metric[len(ATTENTION_PREFIX) :]
        derived = DERIVED_ATTENTION.get(name)
        value = derived(row) if derived else attention_stats(row).get(name)
        if value is None:
            raise KeyError(metric)
        return float(value)
    if metric == SECONDS_PER_EPOCH:
        train = train_record(row)
        return float(train["wall_s"]) / float(train["epochs"])
    return float(row["metrics"][metric])


def cell_mean(rows: list[ResultRow], metric: str) -> float:
    """The mean of `metric` over a cell's rows (its seeds)."""
    return float(np.mean([metric_value(row, metric) for row in rows]))


def representative_cells(
    rows: list[ResultRow], experiment: str, scale: str, evaluation: str, dry_run: bool = False
) -> dict:
    """mapping name -> the rows (one per seed) of the cell that stands for it (module
    docstring), over the current rows of one experiment, scale and evaluation set: the real
    rows, or with ``dry_run`` the dry runs' (a table's dry-run section)."""
    current, _ = split_current(rows)
    cells: dict = {}
    for row in current:
        if (row["experiment"], row["scale"], row["evaluation"]) != (experiment, scale, evaluation):
            continue
        if bool(row.get("dry_run")) != dry_run:
            continue
        cells.setdefault(cell_key(row), []).append(row)
    chosen: dict = {}
    for cell_rows in cells.values():
        mapping = cell_rows[0]["mapping"]
        rank = (
            any(gamma_selection(r) for r in cell_rows),
            len({r["seed"] for r in cell_rows if stopped_early(r)}),
            len({r["seed"] for r in cell_rows}),
            max(r["date"] for r in cell_rows),
        )
        if mapping not in chosen or rank > chosen[mapping][0]:
            chosen[mapping] = (rank, cell_rows)
    return {mapping: cell_rows for mapping, (_, cell_rows) in chosen.items()}


def compare(
    cells: dict, a: str, b: str, metric: str, results_dir: Path | None, log: bool = False
) -> Comparison:
    """``a`` against ``b`` over their cells' rows (already cut to converged runs): the
    difference of means, its Welch interval and, for scores, the item-level p-value. With
    ``log``, the difference and interval are of log(metric) (a ratio's logarithm)."""
    values_a = [metric_value(row, metric) for row in cells[a]]
    values_b = [metric_value(row, metric) for row in cells[b]]
    if log:
        values_a, values_b = list(np.log(values_a)), list(np.log(values_b))
    p_items = None
    if results_dir is not None and metric != SECONDS_PER_EPOCH and ":" not in metric:
        p_items = p_against(results_dir, cells[a], cells[b], metric)
    return Comparison(
        a,
        b,
        tuple(values_a),
        tuple(values_b),
        float(np.mean(values_a) - np.mean(values_b)),
        welch_interval(values_a, values_b),
        p_items,
    )


def decide(kind: str, interval: tuple[float, float], margin: float) -> tuple[str, str]:
    """The verdict of one comparison's interval, and why, for a test kind (module docstring)."""
    low, high = interval
    if kind == "better":
        if low > 0:
            return REPRODUCED, "the interval lies above 0"
        if high < 0:
            return NOT_REPRODUCED, "the interval lies below 0"
        return INCONCLUSIVE, "the interval contains 0"
    if kind == "not_worse":
        if low > -margin:
            return REPRODUCED, f"the interval lies above −{margin:g}"
        if high < -margin:
            return NOT_REPRODUCED, f"the interval lies below −{margin:g}"
        return INCONCLUSIVE, f"the interval contains −{margin:g}"
    if kind == "close_to":
        if -margin <= low and high <= margin:
            return REPRODUCED, f"the interval lies within ±{margin:g}"
        if low > margin or high < -margin:
            return NOT_REPRODUCED, f"the interval lies outside ±{margin:g}"
        return INCONCLUSIVE, f"the interval reaches beyond ±{margin:g}"
    raise ValueError(f"no single-comparison rule for test kind {kind!r}")


def _combine(verdicts: list[str]) -> str:
    """A claim made of several comparisons: reproduced when each is, not reproduced when any
    is not, inconclusive otherwise."""
    if all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    if any(v == NOT_REPRODUCED for v in verdicts):
        return NOT_REPRODUCED
    return INCONCLUSIVE


def _comparisons_of(test) -> list[tuple[str, str, str, float]]:
    """(a, b, single-comparison kind, margin) of every comparison a claim's test makes."""
    kind = test["kind"]
    margin = float(test.get("margin", 0.0))
    if kind in COMPARISONS:
        return [(test["a"], test["b"], kind, margin)]
    if kind == "each_not_worse":
        return [(m, test["reference"], "not_worse", margin) for m in test["mappings"]]
    if kind == "all_better":
        return [(m, b, "better", 0.0) for m in test["mappings"] for b in test["against"]]
    if kind == "time_ratio":
        log_margin = math.log1p(margin)
        side = test.get("side", "both")
        if side not in ("both", "not_slower"):
            raise ValueError(f"time_ratio side must be 'both' or 'not_slower', got {side!r}")
        reference = test["reference"]
        # not slower: log(m) − log(ref) at most log(1 + margin), i.e. ref − m not below −that
        if side == "not_slower":
            return [(reference, m, "not_worse", log_margin) for m in test["mappings"]]
        return [(m, reference, "close_to", log_margin) for m in test["mappings"]]
    raise ValueError(f"unknown test kind {kind!r}; known: {KINDS}")


def judge(
    claim,
    rows: list[ResultRow],
    experiment: str,
    scale: str,
    results_dir: Path | None,
    control: str | None = None,
    reference: str = mappings.REFERENCE_MAPPING,
) -> Verdict:
    """The verdict on one claim (a ``claims:`` entry) from a table's rows.

    Parameters
    ----------
    claim : DictConfig or dict
        ``{id, text, test: {kind, evaluation, metric, ...}}`` (module docstring).
    rows : list of dict
        every raw row of the table.
    experiment, scale : str
        where to judge it.
    results_dir : Path or None
        the results folder (per-item sidecars for the p-values; benchmark records).
    control : str, optional
        the table's attention-free control: a comparison of mappings needs ``reference`` to
        beat it. None: no gate (NER compares DP regularisers, not attention).
    reference : str
        the mapping that must beat the control.

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
    verdict = Verdict(claim["id"], claim["text"], INCONCLUSIVE, "")
    if kind == "bench_ratio":
        return _judge_bench(verdict, test, results_dir)
    cells = representative_cells(rows, experiment, scale, test["evaluation"])
    if kind == "at_least":
        return _judge_level(verdict, test, cells)
    return _judge_comparisons(verdict, test, cells, results_dir, control, reference)


def _judge_comparisons(
    verdict: Verdict, test, cells: dict, results_dir: Path | None, control, reference: str
) -> Verdict:
    """A claim made of comparisons of cells (`_comparisons_of`), by the rules of the module
    docstring: converged seeds, the gate, the intervals."""
    kind = test["kind"]
    pairs = _comparisons_of(test)
    metric = SECONDS_PER_EPOCH if kind == "time_ratio" else test["metric"]
    # cost and attention-structure claims are not about what attention adds to accuracy
    gated = control is not None and kind != "time_ratio" and ":" not in metric
    names, gate_missing = _arms(pairs, cells, gated, reference, control, verdict)
    if names is None:
        return verdict
    kept, notes = _converged_arms(cells, names)
    try:
        comparisons = _compare_pairs(kept, pairs, metric, results_dir)
    except KeyError as error:
        verdict.reason = f"a row does not record {error.args[0]}"
        return verdict
    if len(comparisons) < len(pairs):
        empty = [name for name in names if not kept[name]]
        verdict.verdict = PROVISIONAL  # no converged seed of an arm
        verdict.reason = "; ".join([f"no converged run of {', '.join(empty)}", *notes])
        return verdict
    outcome, why = _decide_comparisons(verdict, test, pairs, comparisons)
    if notes:  # how much the verdict rests on leaving those runs out
        notes.append(
            "with the runs left out counted in, "
            + _outcome_with_every_run(verdict, test, pairs, cells, metric)
        )
    verdict.seeds = _seeds_words([len(kept[name]) for name in names])
    gate = None
    if gated and not gate_missing:
        gate = compare(kept, reference, control, metric, results_dir)
        verdict.details.append("gate: " + gate.describe())
    blocked = _blocked(kept, names, gate_missing, gate, reference, control, outcome, why)
    if blocked is not None:
        verdict.verdict = PROVISIONAL if blocked[0] else verdict.verdict
        verdict.reason = "; ".join([blocked[1], *notes])
        return verdict
    verdict.verdict, verdict.reason = outcome, "; ".join([why, *notes])
    if kind == "each_not_worse":
        verdict.reason += _spread_words(kept, names, metric, control)
    return verdict


def _seeds_words(counts: list[int]) -> str:
    """The converged seeds per arm: '3', or '2–3' when the arms differ."""
    return str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}–{max(counts)}"


def _arms(pairs, cells: dict, gated: bool, reference: str, control, verdict: Verdict):
    """The cells a claim compares (with the gate's when `gated`), and the gate's cells with no
    rows yet; (None, None) after marking `verdict` provisional when a compared cell has no rows
    yet."""
    names = list(dict.fromkeys(name for a, b, _, _ in pairs for name in (a, b)))
    if gated:
        names += [name for name in (reference, control) if name not in names]
    missing = [name for name in names if name not in cells]
    gate_missing = [name for name in missing if name in (reference, control)]
    if set(missing) - set(gate_missing):
        verdict.verdict = PROVISIONAL  # no seed yet of what the claim compares
        verdict.reason = f"no rows for {', '.join(missing)} at this scale yet"
        return None, None
    return [name for name in names if name not in gate_missing], gate_missing


def _converged_arms(cells: dict, names: list[str]) -> tuple[dict, list[str]]:
    """Each cell's converged seeds (`convergence.converged`, against all the cells' rows), and
    the note naming the runs left out."""
    pool = [row for rows_of in cells.values() for row in rows_of]
    kept, left_out = {}, []
    for name in names:
        kept[name], excluded = converged(cells[name], pool)
        left_out += [f"{name} {words}" for words in excluded]
    notes = [f"left out of the verdict: {'; '.join(left_out)}"] if left_out else []
    return kept, notes


def _compare_pairs(cells: dict, pairs, metric: str, results_dir: Path | None) -> list:
    """(`compare`, kind, margin) of each of a claim's comparisons whose two cells have rows (a
    time claim's on log seconds)."""
    log = metric == SECONDS_PER_EPOCH
    return [
        (compare(cells, a, b, metric, results_dir, log=log), k, m)
        for a, b, k, m in pairs
        if cells[a] and cells[b]
    ]


def _outcome_with_every_run(verdict: Verdict, test, pairs, cells: dict, metric: str) -> str:
    """The intervals' verdict with the runs the convergence check left out counted in (the
    seeds and the gate aside), decided as the claim's own (`_decide_comparisons`, on a scratch
    verdict, no item-level p-values): a reader sees whether the verdict rests on leaving them
    out."""
    try:
        comparisons = _compare_pairs(cells, pairs, metric, None)
    except KeyError as error:
        return f"no verdict: a row does not record {error.args[0]}"
    scratch = Verdict(verdict.claim, verdict.text, INCONCLUSIVE, "")
    outcome, _ = _decide_comparisons(scratch, test, pairs, comparisons)
    nearest = min((c for c, _, _ in comparisons), key=lambda c: _margin_left(c, pairs))
    against = "/" if scratch.ratio else "−"  # a time claim's Δ is a ratio of seconds
    return (
        f"the intervals would say: {outcome} "
        f"({nearest.a} {against} {nearest.b}: {interval_text(scratch)})"
    )


def _decide_comparisons(verdict: Verdict, test, pairs, comparisons) -> tuple[str, str]:
    """Decide each comparison (`decide`) and the claim they make (`_combine`); set the
    verdict's details and the columns of the comparison nearest to failing (a time claim's
    as ratios).

    Returns
    -------
    tuple
        (the intervals' verdict, why).
    """
    kind = test["kind"]
    unit = "" if kind != "time_ratio" else " (log ratio)"
    verdict.details = [c.describe(unit) for c, _, _ in comparisons]
    decided = [
        (c, *((INCONCLUSIVE, "no interval") if c.interval is None else decide(k, c.interval, m)))
        for c, k, m in comparisons
    ]
    # the comparison nearest to failing stands for the claim in the columns
    shown, outcome, why = min(decided, key=lambda d: _margin_left(d[0], pairs))
    verdict.difference, verdict.interval, verdict.p_items = (
        shown.difference,
        shown.interval,
        shown.p_items,
    )
    outcome = _combine([d[1] for d in decided]) if len(decided) > 1 else outcome
    if len(decided) > 1:
        failing = [f"{c.a} vs {c.b}: {v}" for c, v, _ in decided if v != REPRODUCED]
        why = (
            f"each of the {len(decided)} comparisons is reproduced"
            if not failing
            else "; ".join(failing)
        )
    if kind == "time_ratio":
        sign = 1.0 if shown.b == test["reference"] else -1.0
        verdict.ratio = True
        verdict.difference = math.exp(sign * shown.difference)
        if shown.interval is not None:
            verdict.interval = tuple(sorted(math.exp(sign * end) for end in shown.interval))
        why = "; ".join(_ratio_words(c, test["reference"]) for c, _, _ in decided)
        why += f" (the claim: {'at most' if test.get('side') == 'not_slower' else 'within'} "
        why += f"×{1 + float(test['margin']):.2f})"
    return outcome, why


def _blocked(kept, names, gate_missing, gate, reference, control, outcome, why):
    """What keeps the intervals' verdict from standing, if anything: too few converged seeds,
    the gate not measured yet (both: provisional), or the gate not passed (inconclusive).

    Returns
    -------
    tuple or None
        (provisional, the reason), or None when the verdict stands.
    """
    few = [name for name in names if len(kept[name]) < MIN_SEEDS]
    if few:
        return True, (
            f"fewer than {MIN_SEEDS} converged seeds for {', '.join(few)}; the interval "
            f"alone would say: {outcome} ({why})"
        )
    if gate_missing:  # the control has no seed yet
        return True, (
            f"the gate is not measured yet: no rows for {', '.join(gate_missing)} (the "
            f"attention-free control); the interval alone would say: {outcome} ({why})"
        )
    if gate is not None and not (gate.interval is not None and gate.interval[0] > 0):
        return False, (
            f"attention is not shown to matter: {reference} − {control} (the "
            f"attention-free control) is {gate.difference:+.2f} "
            + (
                "with no interval"
                if gate.interval is None
                else f"[{gate.interval[0]:+.2f}, {gate.interval[1]:+.2f}], not above 0"
            )
        )
    return None


def _spread_words(kept: dict, names: list[str], metric: str, control: str | None) -> str:
    """An each-not-worse claim's spread from the best mapping to the worst, untested."""
    # among the mappings compared: the attention-free control is the gate, not one of them
    means = {
        name: float(np.mean([metric_value(r, metric) for r in kept[name]]))
        for name in names
        if name != control
    }
    best, worst = max(means, key=means.get), min(means, key=means.get)
    return (
        f"; spread from the best ({best} {means[best]:.2f}) to the worst ({worst} "
        f"{means[worst]:.2f}): {means[best] - means[worst]:.2f}, untested (the best is "
        "chosen on the test set)"
    )


def _ratio_words(comparison: Comparison, reference: str) -> str:
    """A time comparison (on log seconds per epoch) as the mapping's ratio to the reference's
    seconds per epoch, with its interval: 'fusedmax ×1.48 [0.31, 7.05] of softmax's'."""
    sign = 1.0 if comparison.b == reference else -1.0
    name = comparison.a if comparison.b == reference else comparison.b
    ends = ""
    if comparison.interval is not None:
        low, high = sorted(math.exp(sign * end) for end in comparison.interval)
        ends = f" [{low:.2f}, {high:.2f}]"
    ratio = math.exp(sign * comparison.difference)
    return f"{name} ×{ratio:.2f}{ends} of {reference}'s seconds per epoch"


def _margin_left(comparison: Comparison, pairs) -> float:
    """How far a comparison's interval stays on its claimed side (smaller: nearer to failing):
    its lower end plus the margin of its kind (−inf without an interval)."""
    if comparison.interval is None:
        return -math.inf
    for a, b, kind, margin in pairs:
        if (a, b) == (comparison.a, comparison.b):
            if kind == "close_to":
                return margin - max(abs(comparison.interval[0]), abs(comparison.interval[1]))
            return comparison.interval[0] + (margin if kind == "not_worse" else 0.0)
    return comparison.interval[0]


def mean_interval(
    values: list[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(mean, low, high): the t-interval of the mean of `values` (one per seed or run);
    infinite ends for a single value, which has no spread to estimate."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, -math.inf, math.inf
    half = float(stats.t.ppf(0.5 + confidence / 2, len(values) - 1)) * float(
        np.std(values, ddof=1) / math.sqrt(len(values))
    )
    return mean, mean - half, mean + half


def _judge_level(verdict: Verdict, test, cells: dict) -> Verdict:
    """A claim on one cell's level (``at_least``, module docstring): the t-interval of the
    mean of ``metric`` over ``a``'s converged seeds against ``at_least``; provisional with
    fewer than MIN_SEEDS of them."""
    name, metric, at_least = test["a"], test["metric"], float(test["at_least"])
    if name not in cells:
        verdict.verdict = PROVISIONAL
        verdict.reason = f"no rows for {name} at this scale yet"
        return verdict
    kept, notes = _converged_arms(cells, [name])
    try:
        values = [metric_value(row, metric) for row in kept[name]]
    except KeyError as error:
        verdict.reason = f"a row does not record {error.args[0]}"
        return verdict
    if not values:
        verdict.verdict = PROVISIONAL
        verdict.reason = "; ".join([f"no converged run of {name}", *notes])
        return verdict
    mean, low, high = mean_interval(values)
    verdict.difference = mean - at_least
    verdict.interval = (low - at_least, high - at_least) if len(values) > 1 else None
    verdict.seeds = str(len(values))
    verdict.details = [
        f"{name} {metric} per seed: {', '.join(f'{v:.3f}' for v in values)}; mean {mean:.3f}"
        + (f" [{low:.3f}, {high:.3f}]" if len(values) > 1 else "")
        + f" against {at_least:g}"
    ]
    if len(values) < 2:
        outcome, why = INCONCLUSIVE, "no interval (one seed)"
    elif low > at_least:
        outcome, why = REPRODUCED, f"the interval of the mean lies above {at_least:g}"
    elif high < at_least:
        outcome, why = NOT_REPRODUCED, f"the interval of the mean lies below {at_least:g}"
    else:
        outcome, why = INCONCLUSIVE, f"the interval of the mean contains {at_least:g}"
    if len(values) < MIN_SEEDS:
        verdict.verdict = PROVISIONAL
        why = (
            f"fewer than {MIN_SEEDS} converged seeds for {name}; the interval alone would "
            f"say: {outcome} ({why})"
        )
    else:
        verdict.verdict = outcome
    verdict.reason = "; ".join([why, *notes])
    return verdict


def bench_entries(test) -> dict[str, str]:
    """A bench claim's entries: mapping -> the benchmark's label of it, when ``entries`` names
    the mapping each label stands for (P4, T2: their rows in a table's headline); label ->
    label when it is a list (P6's offload setups, which no table row stands for)."""
    entries = test["entries"]
    if hasattr(entries, "keys"):
        return {str(mapping): str(label) for mapping, label in entries.items()}
    return {str(label): str(label) for label in entries}


def claim_mappings(test) -> list[str]:
    """The mappings a claim's test is about (a table's headline rows it is shown on)."""
    names = [test.get("a"), *(test.get("mappings") or [])]
    if test["kind"] == "bench_ratio" and hasattr(test["entries"], "keys"):
        names += list(bench_entries(test))
    return [str(name) for name in dict.fromkeys(names) if name]


def _since(test) -> datetime | None:
    """A bench claim's ``since`` (an ISO date or time, UTC unless it says otherwise), None
    when it has none.

    Raises
    ------
    ValueError
        ``since`` is not an ISO date or time.
    """
    text = test.get("since")
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(str(text))
    except ValueError as error:
        raise ValueError(
            f"bench_ratio since must be an ISO date or time (UTC), got {text!r}"
        ) from error
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _bench_runs(test, results_dir: Path | None) -> tuple[list[dict], str]:
    """The runs of a bench claim's record that count, in date order: full runs (not
    ``--quick``) made at or after the test's ``since`` (its declaration: runs made before it
    are not its runs); with a reason when there are none."""
    since = _since(test)
    path = None if results_dir is None else Path(results_dir) / test["record"]
    if path is None or not path.is_file():
        return [], f"no benchmark record {test['record']} yet ({BENCH_WRITERS})"
    runs = sorted(
        (
            run
            for run in json.loads(path.read_text())["runs"]
            if not run["args"].get("quick")
            and (since is None or datetime.fromisoformat(run["date"]) >= since)
        ),
        key=lambda run: datetime.fromisoformat(run["date"]),
    )
    after = f" made since {test['since']}, the test's declaration" if since else ""
    return runs, "" if runs else f"{test['record']} has no full run{after}"


def _declared_runs(test) -> int | None:
    """A bench claim's declared run count (``runs``), None when it declares none.

    Raises
    ------
    ValueError
        ``runs`` is not an integer of at least MIN_SEEDS.
    """
    count = test.get("runs")
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < MIN_SEEDS:
        raise ValueError(
            f"bench_ratio runs must be an integer of at least {MIN_SEEDS}, got {count!r}"
        )
    return count


def _judge_bench(verdict: Verdict, test, results_dir: Path | None) -> Verdict:
    """A throughput claim on a benchmark record (P4, T2, P6): every run of the record that
    measured ``model`` (`_bench_runs`) gives one ratio to softmax per entry (`bench_entries`),
    each entry's mean over the runs with its t-interval; fewer than MIN_SEEDS runs make it
    provisional.

    With ``at_least`` (P6), each entry's throughput ratio must reach it; Δ and interval are
    the worst entry's mean ratio less ``at_least``. With ``margin`` (P4, T2), each entry's
    seconds per step over softmax's, tested on their logarithm as ``time_ratio`` tests the
    rows' seconds per epoch: within ×(1 + margin) either way (``side: both``) or at most
    ×(1 + margin) (``side: not_slower``); Δ and interval are the entry nearest to failing,
    as a ratio."""
    if ("at_least" in test) == ("margin" in test):
        raise ValueError("a bench_ratio test gives either at_least (P6) or margin (P4, T2)")
    if test.get("side", "both") not in ("both", "not_slower"):
        raise ValueError(f"bench_ratio side must be 'both' or 'not_slower', got {test['side']!r}")
    declared = _declared_runs(test)
    made, missing = _bench_runs(test, results_dir)
    made = [run for run in made if any(r["model"] == test["model"] for r in run["results"])]
    # a declared run count: the first `runs` runs of the model decide, so that the verdict is
    # read at a count fixed in advance, not at whichever run first takes the interval past
    # the margin
    runs = made[:declared] if declared else made
    ratios: dict[str, list[float]] = {entry: [] for entry in bench_entries(test).values()}
    devices = set()
    for run in runs:
        for result in run["results"]:
            if result["model"] == test["model"] and result["attention"] in ratios:
                ratios[result["attention"]].append(float(result["throughput_ratio_to_softmax"]))
                device = run["env"].get("device", "?")
                devices.add(
                    f"a lent GPU ({device})" if run["env"].get("device_kind") == "gpu" else device
                )
    if missing or not all(ratios.values()):
        verdict.verdict = PROVISIONAL  # no run yet: as a cell with no rows
        verdict.reason = (
            missing or f"{test['record']} has no run of {test['model']} with every entry"
        )
        return verdict
    decided = (
        _bench_levels(verdict, test, ratios)
        if "at_least" in test
        else _bench_times(verdict, test, ratios)
    )
    days = sorted({run["date"][:10] for run in runs})
    where = f"measured on {', '.join(sorted(devices))}, {len(runs)} run(s) " + (
        f"on {days[0]}" if len(days) == 1 else f"from {days[0]} to {days[-1]}"
    )
    outcome, why = decided
    count = min(len(v) for v in ratios.values())
    verdict.seeds = str(count)
    needed = declared or MIN_SEEDS
    if count < needed:
        verdict.verdict = PROVISIONAL
        short = (
            f"{count} of the {declared} declared benchmark runs"
            if declared
            else f"fewer than {MIN_SEEDS} benchmark runs"
        )
        verdict.reason = f"{where}: {short}; the interval alone would say: {outcome} ({why})"
        return verdict
    if declared:
        later = len(made) - len(runs)
        where += f", the {declared} declared" + (f" ({later} later not counted)" if later else "")
    verdict.verdict, verdict.reason = outcome, f"{where}: {why}"
    return verdict


def _bench_levels(verdict: Verdict, test, ratios: dict) -> tuple[str, str]:
    """``at_least``: each entry's mean throughput ratio over the runs at least that level
    (`_judge_bench`); sets the verdict's columns and details."""
    at_least = float(test["at_least"])
    levels = {entry: mean_interval(values) for entry, values in ratios.items()}
    worst = min(levels, key=lambda e: levels[e][1])
    mean, low, high = levels[worst]
    verdict.difference = mean - at_least
    verdict.interval = (low - at_least, high - at_least) if math.isfinite(low) else None
    verdict.details = [
        f"{entry}: {', '.join(f'{v:.3f}' for v in values)} of softmax's throughput"
        for entry, values in ratios.items()
    ]
    words = f"the worst entry ({worst}) has mean ratio {mean:.3f} [{low:.3f}, {high:.3f}]"
    if low >= at_least:
        return REPRODUCED, f"{words}, at least {at_least:g}"
    if high < at_least:
        return NOT_REPRODUCED, f"{words}, below {at_least:g}"
    return INCONCLUSIVE, f"{words}, which contains {at_least:g}"


def _bench_times(verdict: Verdict, test, ratios: dict) -> tuple[str, str]:
    """``margin`` and ``side``: each entry's seconds per step over softmax's (the inverse of
    its throughput ratio), on the log scale, within or at most ×(1 + margin)
    (`_judge_bench`); sets the verdict's columns (as ratios) and details."""
    side = test.get("side", "both")
    log_margin = math.log1p(float(test["margin"]))
    decided = {}
    for entry, values in ratios.items():
        mean, low, high = mean_interval([-math.log(v) for v in values])
        if side == "both":
            outcome, _ = decide("close_to", (low, high), log_margin)
            left = log_margin - max(abs(low), abs(high))
        else:  # log time at most log(1 + margin): its negation not below −that
            outcome, _ = decide("not_worse", (-high, -low), log_margin)
            left = log_margin - high
        decided[entry] = (outcome, left, mean, low, high)
    shown = min(decided, key=lambda e: decided[e][1])
    _, _, mean, low, high = decided[shown]
    verdict.ratio = True
    verdict.difference = math.exp(mean)
    verdict.interval = (math.exp(low), math.exp(high)) if math.isfinite(low) else None
    words = [
        f"{entry} ×{math.exp(d[2]):.2f}"
        + (f" [{math.exp(d[3]):.2f}, {math.exp(d[4]):.2f}]" if math.isfinite(d[3]) else "")
        for entry, d in decided.items()
    ]
    verdict.details = [
        f"{entry}: {', '.join(f'{1 / v:.3f}' for v in values)} of softmax's seconds per step"
        for entry, values in ratios.items()
    ]
    claim = f"{'at most' if side == 'not_slower' else 'within'} ×{1 + float(test['margin']):.2f}"
    outcome = _combine([d[0] for d in decided.values()])
    return outcome, f"{'; '.join(words)} of softmax's seconds per step (the claim: {claim})"


def baseline_of(spec) -> str:
    """The mapping a table's p-values and claims test against: its spec's `baseline:`, the
    reference mapping (softmax) when absent (NER has no softmax: its baseline is the entropy,
    the CRF)."""
    return str(spec.get("baseline") or mappings.REFERENCE_MAPPING)


def table_claims(spec, experiment: str) -> list:
    """The claims of a table's config that concern `experiment`."""
    return [c for c in (spec.get("claims") or []) if c.get("experiment", experiment) == experiment]


def judge_table(
    spec, rows: list[ResultRow], experiment: str, scale: str, results_dir
) -> list[Verdict]:
    """Every claim of the table on one experiment and scale, by `judge` with the table's
    control and reference."""
    reference = baseline_of(spec)
    return [
        judge(
            claim,
            rows,
            experiment,
            scale,
            None if results_dir is None else Path(results_dir),
            spec.get("control"),
            reference,
        )
        for claim in table_claims(spec, experiment)
    ]


def verdicts_by_claim(verdicts: list[Verdict], emphasis: str = "") -> str:
    """'P5: inconclusive; P8 (2 tests): reproduced': one entry per claim, in order; a claim
    tested more than once (P8 on fusedmax's runs and on oscarmax's clusters, E2 on accuracy
    and on the heads' α) says how many tests, and each distinct verdict once, rather than
    repeating its id. `emphasis` wraps each verdict ('**' for bold)."""
    by_claim: dict[str, list[str]] = {}
    for v in verdicts:
        by_claim.setdefault(v.claim, []).append(f"{emphasis}{v.verdict}{emphasis}")
    return "; ".join(
        (f"{claim} ({len(found)} tests)" if len(found) > 1 else claim)
        + ": "
        + ", ".join(dict.fromkeys(found))
        for claim, found in by_claim.items()
    )


def interval_text(verdict: Verdict) -> str:
    """A verdict's Δ and interval as a table cell: '+0.78 [+0.21, +1.35]'."""
    if verdict.difference is None:
        return "–"
    if verdict.ratio:
        text = f"×{verdict.difference:.2f}"
        if verdict.interval is not None:
            text += f" [{verdict.interval[0]:.2f}, {verdict.interval[1]:.2f}]"
        return text
    text = f"{verdict.difference:+.2f}"
    if verdict.interval is not None:
        text += f" [{verdict.interval[0]:+.2f}, {verdict.interval[1]:+.2f}]"
    return text


def claims_section(spec, verdicts: list[Verdict]) -> list[str]:
    """The markdown "Claims" block of one experiment and scale from its verdicts
    (`judge_table`): one line per claim (Δ and interval of the deciding comparison, the
    item-level p-value apart, the verdict and a one-line reason), then footnotes with every
    comparison. Empty when the table tests no claim there."""
    if not verdicts:
        return []
    control = spec.get("control")
    gate = (
        f"a comparison of mappings is gated on {baseline_of(spec)} beating "
        f"the attention-free control ({control})"
        if control
        else "no gate: this table compares no attention mappings"
    )
    lines = [
        "#### Claims",
        "",
        "Per-seed means of the converged runs, Welch 95% interval over seeds; "
        f"{gate}; fewer than {MIN_SEEDS} converged seeds is provisional. Rules: "
        "[How to read these tables](../docs/reproduction.md#how-to-read-these-tables).",
        "",
        "| claim | what it says | Δ [95% interval over seeds] | seeds | item-level p | verdict "
        "| why |",
        "|---|---|---|---|---|---|---|",
    ]
    footnotes = []
    for number, verdict in enumerate(verdicts, 1):
        p_items = "–" if verdict.p_items is None else f"{verdict.p_items:.3f}"
        lines.append(
            f"| {verdict.claim} | {verdict.text} | {interval_text(verdict)} | "
            f"{verdict.seeds or '–'} | {p_items} | **{verdict.verdict}** | "
            f"{verdict.reason} [{number}] |"
        )
        footnotes.append(
            f"[{number}] {verdict.claim}: " + ("; ".join(verdict.details) or "no comparison")
        )
    return lines + [""] + [f"{note}  " for note in footnotes] + [""]
