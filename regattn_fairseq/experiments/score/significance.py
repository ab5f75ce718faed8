"""Paired bootstrap significance of a mapping against its table's baseline (softmax, or the
table's `baseline:`, e.g. the entropy for NER), and the per-item sidecars it reads.

Every scored row keeps what a paired test needs in a sidecar file next to the raw rows,
``results/raw/items/<run_id>-<evaluation>.json.gz`` (the row names it and its SHA-256):

- BLEU: the detokenized hypotheses and references (corpus BLEU is not a mean of item scores);
- ROUGE: each item's ROUGE-1/2/L (`rouge.item_scores`, the row's measure, in percent);
- SNLI accuracy: each item's correctness (1/0, from the attention export's prediction);
- inflection exact match: each item's correctness and language (the statistic is the macro
  average over languages, recomputed on every resample);
- NER entity F1: each sentence's true positive, predicted and gold entities
  (`tagging.entity_counts`; the statistic is the corpus-level F1 2 tp / (predicted + gold) of
  the summed counts, in percent, recomputed on every resample).

The test (Koehn 2004, as sacrebleu's ``paired_bs`` and Moses' script): draw B = 1,000 resamples
of the test items (numpy ``default_rng(12345)``, the same indices for both systems), compute
both systems' statistic on each, and count how often the centred resampled absolute difference
exceeds the observed one: ``p = (1 + #{|d*| - mean|d*| > |d|}) / (B + 1)``, two-sided. BLEU goes
through sacrebleu's own ``PairedTest(test_type="bs")``. Identical outputs (d* all zero) would
give 1/(B+1) under that formula; the test reports p = 1 for them (no difference to test).

Seeds: a mapping's seed-s items are paired with the baseline's seed-s items and the seeds are
concatenated into one test set (items x seeds); only seeds both systems have are used. The
resampling draws items from that pool, so it measures the test items' sampling, not how much
another training seed would move the score: that spread can be larger (it was on inflection),
and the claims' verdicts (`report.claims`) use an interval that draws the seeds too. The p-value
is the conventional test, comparable with the papers' (Koehn 2004)."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from regattn_checkout.files import write_file
from regattn_fairseq.experiments.core.result_row import ResultRow, items_record

N_RESAMPLES = 1000
SEED = 12345
ITEMS_DIR = Path("raw") / "items"
# the per-sentence entity counts of kind "f1" (`tagging.entity_counts`)
F1_COUNTS = ("tp", "predicted", "gold")


def _mean(items: dict, metric: str, index: np.ndarray | None = None) -> float:
    values = np.asarray(items["scores"][metric], dtype=float)
    return float(values[index].mean() if index is not None else values.mean())


def _macro(items: dict, metric: str, index: np.ndarray | None = None) -> float:
    correct = np.asarray(items["correct"], dtype=float)
    groups = np.asarray(items["groups"])
    if index is not None:
        correct, groups = correct[index], groups[index]
    return float(100 * np.mean([correct[groups == g].mean() for g in np.unique(groups)]))


def _f1(items: dict, metric: str, index: np.ndarray | None = None) -> float:
    if metric != "f1":
        raise ValueError(f"entity counts give the F1, not {metric!r}")
    tp, predicted, gold = (np.asarray(items[k], dtype=float) for k in F1_COUNTS)
    if index is not None:
        tp, predicted, gold = tp[index], predicted[index], gold[index]
    total = predicted.sum() + gold.sum()
    # no entity predicted nor in the gold: seqeval's F1 is 0 (its zero_division default)
    return float(200 * tp.sum() / total) if total else 0.0


@dataclass(frozen=True)
class ItemKind:
    """One kind of per-item data (a metric's `item_kind`, `metrics.METRICS`).

    Attributes
    ----------
    fields : tuple of str
        its per-item lists (``scores``: a list per metric), joined over seeds by `concatenate`.
    statistic : callable or None
        ``statistic(items, metric, index)``: the metric of the items (of the resample `index`
        when given), the bootstrap statistic; None for BLEU, tested by sacrebleu itself.
    """

    fields: tuple[str, ...]
    statistic: Callable[[dict, str, np.ndarray | None], float] | None


ITEM_KINDS = {
    "bleu": ItemKind(("hypotheses", "references"), None),
    "mean": ItemKind(("scores",), _mean),
    "macro": ItemKind(("correct", "groups"), _macro),
    "f1": ItemKind(F1_COUNTS, _f1),
}


def item_statistic(items: dict, metric: str, index: np.ndarray | None = None) -> float:
    """One metric of a row's per-item data, over all items or the resample `index`
    (`ITEM_KINDS`; BLEU items have none: sacrebleu recomputes the corpus score)."""
    statistic = ITEM_KINDS[items["kind"]].statistic
    if statistic is None:
        raise ValueError(f"no item statistic for kind {items['kind']!r}")
    return statistic(items, metric, index)


def sidecar_name(run_id: str, evaluation: str) -> Path:
    """The sidecar of one row, relative to the results folder.

    Parameters
    ----------
    run_id : str
        the row's run id.
    evaluation : str
        the row's evaluation set.

    Returns
    -------
    Path
        ``raw/items/<run_id>-<evaluation>.json.gz``.
    """
    return ITEMS_DIR / f"{run_id}-{evaluation}.json.gz"


def write_items(results_dir: Path, run_id: str, evaluation: str, items: dict) -> dict:
    """Write a row's per-item data (deterministic gzip, no timestamp).

    Parameters
    ----------
    results_dir : Path
        the results folder.
    run_id, evaluation : str
        the row's run id and evaluation set.
    items : dict
        ``{"kind": "bleu"|"mean"|"macro"|"f1", ...}`` (see the module docstring).

    Returns
    -------
    dict
        ``{"file": <path relative to results_dir>, "sha256": <hex of the file>}`` for the row.
    """
    relative = sidecar_name(run_id, evaluation)
    data = gzip.compress(json.dumps(items, sort_keys=True).encode("utf-8"), mtime=0)
    write_file(results_dir / relative, data)
    return {"file": str(relative), "sha256": hashlib.sha256(data).hexdigest()}


def read_items(results_dir: Path, row: ResultRow) -> dict | None:
    """A row's per-item data, or None when it has none (rows older than the sidecars).

    Parameters
    ----------
    results_dir : Path
        the results folder.
    row : ResultRow
        a result row.

    Returns
    -------
    dict or None
        The sidecar's content.

    Raises
    ------
    ValueError
        the sidecar's SHA-256 differs from the one the row recorded.
    """
    record = items_record(row)
    if record is None:
        return None
    path = results_dir / record["file"]
    if not path.is_file():
        return None
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise ValueError(f"{path}: SHA-256 differs from the one row {row['run_id']} recorded")
    return json.loads(gzip.decompress(data))


def paired_bootstrap(
    system: dict, baseline: dict, metric: str, n_resamples: int = N_RESAMPLES, seed: int = SEED
) -> float:
    """Paired bootstrap p-value of `system` against `baseline` on the same items.

    Parameters
    ----------
    system, baseline : dict
        per-item data of the same test items in the same order (see the module docstring).
    metric : str
        the metric (a key of ``scores`` for ROUGE; ``f1`` for entity counts; ``accuracy``
        otherwise).
    n_resamples : int
        bootstrap resamples B.
    seed : int
        the resampling seed.

    Returns
    -------
    float
        ``(1 + #{|d*| - mean|d*| > |d|}) / (B + 1)``; 1.0 for identical outputs.

    Raises
    ------
    ValueError
        the two systems have a different number of items or different kinds.
    """
    if system["kind"] != baseline["kind"] or system["n"] != baseline["n"]:
        raise ValueError(
            f"cannot pair {system['kind']} x {system['n']} items with "
            f"{baseline['kind']} x {baseline['n']} items"
        )
    statistic = ITEM_KINDS[system["kind"]].statistic
    if statistic is None:  # corpus BLEU: sacrebleu's own paired bootstrap
        return _bleu_paired_bs(system, baseline, n_resamples, seed)
    system, baseline = _as_arrays(system), _as_arrays(baseline)
    observed = abs(statistic(system, metric) - statistic(baseline, metric))
    rng = np.random.default_rng(seed)
    indices = rng.choice(system["n"], size=(n_resamples, system["n"]), replace=True)
    diffs = np.abs([statistic(system, metric, i) - statistic(baseline, metric, i) for i in indices])
    if not diffs.any() and observed == 0:
        return 1.0
    centred = diffs - diffs.mean()
    return float((1 + np.sum(centred > observed)) / (n_resamples + 1))


def _as_arrays(items: dict) -> dict:
    """The per-item lists as numpy arrays, converted once: the statistics index them on each of
    the B resamples, and converting the lists there took most of a table's test time. The
    language groups become their codes in sorted order (`np.unique`), so that each resample
    visits the groups in the same order and sums the same floats as with the names."""
    arrays = dict(items)
    for field in ITEM_KINDS[items["kind"]].fields:
        if field == "scores":
            arrays[field] = {m: np.asarray(v, dtype=float) for m, v in items[field].items()}
        elif field == "groups":
            arrays[field] = np.unique(np.asarray(items[field]), return_inverse=True)[1]
        else:
            arrays[field] = np.asarray(items[field], dtype=float)
    return arrays


def _bleu_paired_bs(system: dict, baseline: dict, n_resamples: int, seed: int) -> float:
    import os

    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if system["hypotheses"] == baseline["hypotheses"]:
        return 1.0
    if system["references"] != baseline["references"]:
        raise ValueError("the two systems were scored against different references")
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        test = PairedTest(
            [("baseline", baseline["hypotheses"]), ("system", system["hypotheses"])],
            {"BLEU": BLEU()},
            [baseline["references"]],
            test_type="bs",
            n_samples=n_resamples,
        )
        _signatures, scores = test()
    finally:
        if previous is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = previous
    return float(scores["BLEU"][1].p_value)


def concatenate(per_seed: list[dict]) -> dict:
    """Concatenate per-item data of several seeds into one test set (items x seeds).

    Parameters
    ----------
    per_seed : list of dict
        per-item data of one system, one entry per seed, in the order to pair.

    Returns
    -------
    dict
        per-item data of the same kind over all the seeds' items.

    Raises
    ------
    ValueError
        an unknown kind.
    """
    kind = per_seed[0]["kind"]
    if kind not in ITEM_KINDS:
        raise ValueError(f"no item data of kind {kind!r}")
    joined = {"kind": kind, "n": sum(p["n"] for p in per_seed)}
    for field in ITEM_KINDS[kind].fields:
        if field == "scores":  # metric -> values, per metric
            joined[field] = {
                metric: [v for p in per_seed for v in p[field][metric]]
                for metric in per_seed[0][field]
            }
        else:
            joined[field] = [v for p in per_seed for v in p[field]]
    return joined


def p_against(
    results_dir: Path, system_rows: list[dict], baseline_rows: list[dict], metric: str
) -> float | None:
    """p-value of a table cell's rows against the baseline's rows of the same evaluation.

    Parameters
    ----------
    results_dir : Path
        the results folder (sidecars are under it).
    system_rows, baseline_rows : list of dict
        the cell's rows and the baseline's, one per seed.
    metric : str
        the metric tested.

    Returns
    -------
    float or None
        None when a seed both have lacks per-item data, or they share no seed.
    """
    baseline_by_seed = {r["seed"]: r for r in baseline_rows}
    pairs = [(r, baseline_by_seed[r["seed"]]) for r in system_rows if r["seed"] in baseline_by_seed]
    if not pairs:
        return None
    pairs.sort(key=lambda pair: pair[0]["seed"])
    key = _p_key(pairs, metric)
    if key in _P_VALUES:
        return _P_VALUES[key]
    system_items, baseline_items = [], []
    for row, base in pairs:
        items, base_items = read_items(results_dir, row), read_items(results_dir, base)
        if items is None or base_items is None:
            return None
        system_items.append(items)
        baseline_items.append(base_items)
    p_value = paired_bootstrap(concatenate(system_items), concatenate(baseline_items), metric)
    if key is not None:
        _P_VALUES[key] = p_value
    return p_value


# p-values already computed in this process, by the SHA-256 of the sidecars they read: a table
# asks for the same comparison twice (its p column and its claims), and each costs B resamples
# of every item of every seed (about a second for 5 seeds of SNLI). The hashes name the items
# exactly (`read_items` checks them before any bootstrap), so a hit is the same p-value (every
# call here takes `paired_bootstrap`'s default resamples and seed).
_P_VALUES: dict[tuple, float] = {}


def _p_key(pairs: list[tuple[ResultRow, ResultRow]], metric: str) -> tuple | None:
    """The cache key of `p_against` over `pairs` (in seed order); None where a row has no
    sidecar record."""
    records = [(items_record(row), items_record(base)) for row, base in pairs]
    if any(record is None for pair in records for record in pair):
        return None
    hashes = tuple((mine["sha256"], theirs["sha256"]) for mine, theirs in records)
    return (metric, hashes)
