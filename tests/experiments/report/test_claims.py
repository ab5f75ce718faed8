"""Claims as data: each test kind's verdict from per-item data, and the conditions without
which the numbers cannot carry a verdict (convergence, a trivial baseline beaten)."""

import numpy as np
import pytest

from regattn_fairseq.experiments.report import claims
from regattn_fairseq.experiments.score.significance import read_items, write_items

CONVERGED = {"stop": "patience", "best_epoch": 5, "stopped_epoch": 8}


def _row(results_dir, mapping, seed, scores, curve=CONVERGED, evaluation="test"):
    run_id = f"{mapping}-{seed}".replace(" ", "_").replace(":", "")
    items = write_items(
        results_dir,
        run_id,
        evaluation,
        {"kind": "mean", "n": len(scores), "scores": {"accuracy": list(scores)}},
    )
    return {
        "run_id": run_id,
        "experiment": "snli",
        "scale": "small",
        "data_source": "offline",
        "evaluation": evaluation,
        "mapping": mapping,
        "seed": seed,
        "date": f"2026-11-25T00:00:0{seed}",
        "config_sha256": "c",
        "items": items,
        "metrics": {"accuracy": float(np.mean(scores))},
        "train": {"config": {"model": {}}, "learning_curve": curve},
        # a trivial baseline's rows carry its record (`rows.baselines`), which is what marks them
        "baseline": {"name": mapping, "settings": {}} if mapping.startswith("baseline") else None,
    }


def _correct(rng, share, n=400):
    return (100 * (rng.random(n) < share)).tolist()


def _claim(kind, **test):
    return {"id": "X", "text": "t", "test": {"kind": kind, "evaluation": "test", **test}}


@pytest.fixture
def rows(tmp_path):
    rng = np.random.default_rng(0)
    made = []
    for seed in (1, 2):
        made.append(_row(tmp_path, "softmax", seed, _correct(rng, 0.70)))
        made.append(_row(tmp_path, "fusedmax", seed, _correct(rng, 0.80)))
        made.append(_row(tmp_path, "oscarmax", seed, _correct(rng, 0.70)))
    made.append(_row(tmp_path, "baseline: majority", 0, _correct(rng, 0.34), curve=None))
    return made


def _judge(claim, rows, tmp_path):
    return claims.judge(claim, rows, "snli", "small", tmp_path)


def test_better_reproduced_not_reproduced_and_inconclusive(rows, tmp_path):
    better = _judge(_claim("better", metric="accuracy", a="fusedmax", b="softmax"), rows, tmp_path)
    assert better.verdict == "reproduced" and better.interval[0] > 0
    assert better.difference == pytest.approx(
        np.mean([r["metrics"]["accuracy"] for r in rows if r["mapping"] == "fusedmax"])
        - np.mean([r["metrics"]["accuracy"] for r in rows if r["mapping"] == "softmax"])
    )
    worse = _judge(_claim("better", metric="accuracy", a="softmax", b="fusedmax"), rows, tmp_path)
    assert worse.verdict == "not reproduced" and worse.interval[1] <= 0
    tie = _judge(_claim("better", metric="accuracy", a="oscarmax", b="softmax"), rows, tmp_path)
    assert tie.verdict == "inconclusive" and tie.interval[0] < 0 < tie.interval[1]


def test_not_worse_and_close_to_use_the_margin(rows, tmp_path):
    claim = _claim("not_worse", metric="accuracy", a="oscarmax", b="softmax", margin=20)
    assert _judge(claim, rows, tmp_path).verdict == "reproduced"
    claim = _claim("not_worse", metric="accuracy", a="softmax", b="fusedmax", margin=1)
    assert _judge(claim, rows, tmp_path).verdict == "not reproduced"
    claim = _claim("close_to", metric="accuracy", a="oscarmax", b="softmax", margin=20)
    assert _judge(claim, rows, tmp_path).verdict == "reproduced"
    claim = _claim("close_to", metric="accuracy", a="softmax", b="fusedmax", margin=1)
    assert _judge(claim, rows, tmp_path).verdict == "not reproduced"


def test_within_of_best(rows, tmp_path):
    names = ["softmax", "fusedmax", "oscarmax"]
    far = _judge(
        _claim("within_of_best", metric="accuracy", mappings=names, margin=1), rows, tmp_path
    )
    assert far.verdict == "not reproduced" and "below fusedmax" in far.reason
    near = _judge(
        _claim("within_of_best", metric="accuracy", mappings=names, margin=30), rows, tmp_path
    )
    assert near.verdict == "reproduced"


def test_no_verdict_without_convergence_missing_cells_or_below_the_baseline(rows, tmp_path):
    claim = _claim("better", metric="accuracy", a="fusedmax", b="softmax")
    fixed_budget = [
        {**r, "train": {**r["train"], "learning_curve": {"stop": "max_epoch"}}}
        if r["mapping"] == "fusedmax"
        else r
        for r in rows
    ]
    verdict = _judge(claim, fixed_budget, tmp_path)
    assert verdict.verdict == "inconclusive" and "not trained to convergence" in verdict.reason
    missing = _judge(_claim("better", metric="accuracy", a="entmax15", b="softmax"), rows, tmp_path)
    assert missing.verdict == "inconclusive" and "no rows for entmax15" in missing.reason
    rng = np.random.default_rng(1)
    strong_baseline = [r for r in rows if not r["mapping"].startswith("baseline")]
    strong_baseline.append(_row(tmp_path, "baseline: majority", 0, _correct(rng, 0.9), None))
    verdict = _judge(claim, strong_baseline, tmp_path)
    assert (
        verdict.verdict == "inconclusive" and "does not beat baseline: majority" in verdict.reason
    )
    assert "softmax stopped on its validation loss" in verdict.reason
    assert "training loss still fell" not in verdict.reason  # its curves record no train loss
    # a converged softmax whose training loss still fell after its kept epoch: the curves say so
    overfit = dict(CONVERGED, epochs=[5, 6, 7, 8], train_loss=[3.0, 2.8, 2.6, 2.5])
    overfitting_softmax = [
        {**r, "train": {**r["train"], "learning_curve": overfit}}
        if r["mapping"] == "softmax"
        else r
        for r in strong_baseline
    ]
    verdict = _judge(claim, overfitting_softmax, tmp_path)
    assert verdict.reason.endswith(
        "not from a cut-short training: after the kept epoch the training loss still fell "
        "(seed 1: 3.00 at epoch 5 to 2.50 at 8; seed 2: 3.00 at epoch 5 to 2.50 at 8) and the "
        "validation loss no longer improved: more epochs fit the training set, not held-out "
        "data (learning curves below)"
    )
    unconverged_softmax = [
        {**r, "train": {**r["train"], "learning_curve": {"stop": "max_epoch"}}}
        if r["mapping"] == "softmax"
        else r
        for r in strong_baseline
    ]
    verdict = _judge(
        _claim("better", metric="accuracy", a="fusedmax", b="oscarmax"),
        unconverged_softmax,
        tmp_path,
    )
    assert "does not beat baseline: majority" in verdict.reason
    assert "stopped on its validation loss" not in verdict.reason


def test_bleu_interval_is_corpus_bleu_on_resampled_items(tmp_path):
    refs = [f"the cat number {i} sat on the mat" for i in range(30)]
    good = list(refs)
    bad = [f"a dog {i}" for i in range(30)]
    rows_a, rows_b = [], []
    for mapping, hyps, target in (("a", good, rows_a), ("b", bad, rows_b)):
        items = write_items(
            tmp_path,
            mapping,
            "test",
            {"kind": "bleu", "n": 30, "hypotheses": hyps, "references": refs},
        )
        target.append({"seed": 1, "items": items})
    low, high = claims.difference_interval(tmp_path, rows_a, rows_b, "bleu", n_resamples=50)
    assert 90 < low <= high <= 100 + 1e-9


def test_unknown_kind_is_an_error(rows, tmp_path):
    with pytest.raises(ValueError, match="unknown test kind 'most'"):
        _judge(_claim("most", metric="accuracy", a="fusedmax", b="softmax"), rows, tmp_path)


def test_a_converged_cell_stands_for_its_mapping_before_one_with_more_unconverged_seeds(tmp_path):
    """Among a mapping's γ-tuned cells, the one whose runs stopped early stands for it, even
    with fewer seeds so far; seeds decide between cells equally converged."""
    rng = np.random.default_rng(0)

    def cell(gamma, seeds, curve, day):
        made = []
        for seed in seeds:
            row = _row(tmp_path, "softmax", seed, _correct(rng, 0.5), curve)
            made.append(
                {
                    **row,
                    "run_id": f"{row['run_id']}-{gamma}",
                    "config_sha256": f"c{gamma}",
                    "sweep_params": {"gamma": gamma},
                    "gamma_selection": {"chosen": gamma},
                    "date": f"2026-11-2{day}T00:00:0{seed}",
                }
            )
        return made

    budget = cell(4.0, [1, 2, 3], {"stop": "max_epoch"}, 4)
    converged = cell(1.0, [1, 2], CONVERGED, 5)
    chosen = claims.representative_cells(budget + converged, "snli", "small", "test")
    assert [r["config_sha256"] for r in chosen["softmax"]] == ["c1.0", "c1.0"]
    more_seeds = cell(16.0, [1, 2, 3], CONVERGED, 3)
    chosen = claims.representative_cells(budget + converged + more_seeds, "snli", "small", "test")
    assert [r["seed"] for r in chosen["softmax"]] == [1, 2, 3]
    assert chosen["softmax"][0]["config_sha256"] == "c16.0"


def test_the_difference_is_over_the_seeds_of_its_interval_when_a_cell_has_more(tmp_path):
    """A cell still gathering seeds: the difference and the interval both compare the seeds
    the two cells share. Measured once on inflection: 1.5-entmax's one seed against softmax's
    three gave +5.12 (all of softmax's seeds) beside an interval of seed 1 only, [-1.62, -0.19]."""
    rng = np.random.default_rng(2)
    rows = [
        _row(tmp_path, "softmax", 1, _correct(rng, 0.80)),
        _row(tmp_path, "softmax", 2, _correct(rng, 0.50)),
        _row(tmp_path, "softmax", 3, _correct(rng, 0.50)),
        _row(tmp_path, "entmax15", 1, _correct(rng, 0.78)),
    ]
    claim = _claim("not_worse", metric="accuracy", a="entmax15", b="softmax", margin=0.5)
    verdict = _judge(claim, rows, tmp_path)
    seed_1 = rows[3]["metrics"]["accuracy"] - rows[0]["metrics"]["accuracy"]
    assert verdict.difference == pytest.approx(seed_1)
    assert verdict.interval[0] <= verdict.difference <= verdict.interval[1]
    assert verdict.reason.endswith(
        "(on seed 1, the seeds both cells have: entmax15 1 seed, softmax 3 seeds; one training "
        "seed: the interval covers its test items, not the spread between seeds)"
    )
    # with the same seeds on both sides, only the one seed is said
    same = _judge(claim, [rows[0], rows[3]], tmp_path)
    assert "the seeds both cells have" not in same.reason
    assert same.reason.endswith(
        "(one training seed: the interval covers its test items, not the spread between seeds)"
    )
    within = _claim("within_of_best", metric="accuracy", mappings=["softmax", "entmax15"])
    verdict = _judge(within, rows, tmp_path)
    # the best by its cell mean is entmax15 (78 against softmax's 60); its gap on seed 1
    assert verdict.difference == pytest.approx(seed_1)
    assert "the seeds both cells have" in verdict.reason


def test_a_verdict_holds_on_every_seed_not_only_on_the_pooled_items(tmp_path):
    """Two seeds where a is clearly better and one where it is clearly worse: the pooled items
    alone would call a better (its interval over items x seeds lies above 0, checked below);
    drawing the seeds too reaches the worse seed's difference, so the verdict is inconclusive
    and the reason lists each seed's difference. Measured on the tables: 1.5-entmax against
    softmax, per seed +1.17, +1.25, -0.73 BLEU (NMT) and -0.89, +10.14, +1.10 (inflection)."""
    rng = np.random.default_rng(3)
    shares = {1: (0.80, 0.60), 2: (0.80, 0.60), 3: (0.55, 0.70)}
    rows = []
    for seed, (share_a, share_b) in shares.items():
        rows.append(_row(tmp_path, "entmax15", seed, _correct(rng, share_a, n=1000)))
        rows.append(_row(tmp_path, "softmax", seed, _correct(rng, share_b, n=1000)))
    claim = _claim("better", metric="accuracy", a="entmax15", b="softmax")
    verdict = _judge(claim, rows, tmp_path)
    per_seed = [
        a["metrics"]["accuracy"] - b["metrics"]["accuracy"]
        for a, b in zip(rows[::2], rows[1::2], strict=True)
    ]
    assert verdict.difference == pytest.approx(np.mean(per_seed)) and verdict.difference > 5
    assert verdict.verdict == "inconclusive"
    assert verdict.interval[0] <= min(per_seed) + 2 < 0 < verdict.interval[1]
    assert verdict.reason.endswith(
        "(per seed: "
        + ", ".join(f"{d:+.2f} ({s})" for d, s in zip(per_seed, shares, strict=True))
        + ")"
    )
    # the items alone, pooled over the seeds (a one-level bootstrap of the same difference)
    a = np.concatenate([_items(tmp_path, r) for r in rows[::2]])
    b = np.concatenate([_items(tmp_path, r) for r in rows[1::2]])
    draws = np.random.default_rng(0).integers(len(a), size=(1000, len(a)))
    pooled = np.percentile(a[draws].mean(1) - b[draws].mean(1), 2.5)
    assert pooled > 0


def _items(results_dir, row):
    return np.asarray(read_items(results_dir, row)["scores"]["accuracy"], dtype=float)


def test_runs_scored_on_different_test_sets_are_an_error_not_a_missing_interval(tmp_path):
    rng = np.random.default_rng(4)
    a = [_row(tmp_path, "fusedmax", 1, _correct(rng, 0.7, n=400))]
    b = [_row(tmp_path, "softmax", 1, _correct(rng, 0.7, n=300))]
    with pytest.raises(ValueError, match="scored 400 and 300 test items"):
        claims.difference_interval(tmp_path, a, b, "accuracy", n_resamples=10)
