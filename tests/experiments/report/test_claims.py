"""Claims as data, judged by the rules of claims.md: each rule both ways (reproduced / not
reproduced at this scale / inconclusive / provisional), the interval over seeds against an
independent oracle, the gate on the attention-free control, and the convergence check that keeps
runs out of the verdicts."""

import json

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy import stats

from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.report import claims, convergence, learning_curves
from regattn_fairseq.experiments.score.significance import write_items

# a converged run: stopped by patience 3 at epoch 11, best epoch 8, a flat tail
CURVE = {
    "stop": "patience",
    "patience": 3,
    "epochs": list(range(1, 12)),
    "valid_loss": [5.0, 4.0, 3.0, 2.5, 2.2, 2.05, 2.03, 2.0, 2.04, 2.01, 2.03],
    "best_epoch": 8,
    "best_valid_loss": 2.0,
    "stopped_epoch": 11,
}
N_ITEMS = 400


def _row(results_dir, mapping, seed, accuracy, curve=CURVE, attention=None):
    """A row whose test accuracy is exactly `accuracy` (items of 100 and 0)."""
    run_id = f"{mapping}-{seed}".replace(" ", "_").replace(":", "")
    hits = round(accuracy * N_ITEMS / 100)
    scores = [100] * hits + [0] * (N_ITEMS - hits)
    items = write_items(
        results_dir, run_id, "test", {"kind": "mean", "n": N_ITEMS, "scores": {"accuracy": scores}}
    )
    return {
        "run_id": run_id,
        "experiment": "snli",
        "scale": "small",
        "data_source": "offline",
        "evaluation": "test",
        "mapping": mapping,
        "seed": seed,
        "date": f"2026-11-28T00:00:0{seed}",
        "config_sha256": "c",
        "items": items,
        "metrics": {"accuracy": 100 * hits / N_ITEMS},
        "attention": attention or {},
        "train": {"config": {"model": {}}, "learning_curve": curve, "wall_s": 600, "epochs": 11},
        "baseline": {"name": mapping, "settings": {}} if mapping.startswith("baseline") else None,
    }


def _cell(results_dir, mapping, accuracies, **kwargs):
    return [
        _row(results_dir, mapping, seed, acc, **kwargs)
        for seed, acc in enumerate(accuracies, start=1)
    ]


def _claim(kind, **test):
    return {"id": "X", "text": "t", "test": {"kind": kind, "evaluation": "test", **test}}


def _judge(claim, rows, tmp_path, control="uniform"):
    return claims.judge(claim, rows, "snli", "small", tmp_path, control=control)


@pytest.fixture
def table(tmp_path):
    """softmax well above the control; fusedmax 3 points above softmax on every seed, oscarmax
    level with it, sparsemax 3 below."""
    return [
        *_cell(tmp_path, "uniform", [50.0, 50.5, 49.75]),
        *_cell(tmp_path, "softmax", [70.0, 70.5, 69.5]),
        *_cell(tmp_path, "fusedmax", [73.0, 73.5, 72.75]),
        *_cell(tmp_path, "oscarmax", [70.5, 69.25, 70.0]),
        *_cell(tmp_path, "sparsemax", [67.0, 67.25, 66.5]),
    ]


def test_the_interval_over_seeds_is_welchs():
    a, b = [70.0, 71.5, 69.0, 72.0], [68.0, 68.5, 66.0]
    low, high = claims.welch_interval(a, b)
    oracle = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (low, high) == pytest.approx((oracle.low, oracle.high))
    assert claims.welch_interval([1.0], b) is None
    assert claims.welch_interval([1.0, 1.0], [0.0, 0.0]) == (1.0, 1.0)


def test_better_each_way(table, tmp_path):
    up = _judge(_claim("better", metric="accuracy", a="fusedmax", b="softmax"), table, tmp_path)
    assert up.verdict == "reproduced" and up.interval[0] > 0 and up.seeds == "3"
    assert up.difference == pytest.approx(np.mean([73, 73.5, 72.75]) - np.mean([70, 70.5, 69.5]))
    assert up.p_items is not None and "gate: softmax − uniform" in up.details[-1]
    down = _judge(_claim("better", metric="accuracy", a="sparsemax", b="softmax"), table, tmp_path)
    assert down.verdict == "not reproduced at this scale" and down.interval[1] < 0
    level = _judge(_claim("better", metric="accuracy", a="oscarmax", b="softmax"), table, tmp_path)
    assert level.verdict == "inconclusive" and level.interval[0] < 0 < level.interval[1]


def test_margins_of_not_worse_and_close_to(table, tmp_path):
    def verdict(kind, a, b, margin):
        claim = _claim(kind, metric="accuracy", a=a, b=b, margin=margin)
        return _judge(claim, table, tmp_path).verdict

    assert verdict("not_worse", "oscarmax", "softmax", 3) == "reproduced"
    assert verdict("not_worse", "sparsemax", "softmax", 1) == "not reproduced at this scale"
    assert verdict("not_worse", "sparsemax", "softmax", 3) == "inconclusive"
    assert verdict("close_to", "oscarmax", "softmax", 3) == "reproduced"
    assert verdict("close_to", "fusedmax", "softmax", 1) == "not reproduced at this scale"


def test_each_not_worse_against_softmax_not_against_the_best(table, tmp_path):
    """P5's rule: each mapping non-inferior to softmax. fusedmax being best by 3 points does
    not fail the others, as a test against the best mapping would."""
    claim = _claim(
        "each_not_worse",
        metric="accuracy",
        reference="softmax",
        mappings=["fusedmax", "oscarmax"],
        margin=2,
    )
    near = _judge(claim, table, tmp_path)
    assert near.verdict == "reproduced" and "spread from the best (fusedmax" in near.reason
    # the spread is among the mappings compared, not down to the attention-free control
    assert "to the worst (oscarmax" in near.reason
    assert len(near.details) == 3  # two comparisons and the gate
    claim["test"]["mappings"] = ["fusedmax", "oscarmax", "sparsemax"]
    far = _judge(claim, table, tmp_path)
    assert far.verdict == "not reproduced at this scale"
    assert "sparsemax vs softmax: not reproduced" in far.reason
    assert far.difference == pytest.approx(-3.0833, abs=1e-3)  # the comparison nearest to failing


def test_all_better(table, tmp_path):
    claim = _claim(
        "all_better", metric="accuracy", mappings=["fusedmax"], against=["softmax", "sparsemax"]
    )
    assert _judge(claim, table, tmp_path).verdict == "reproduced"
    claim["test"]["mappings"] = ["fusedmax", "oscarmax"]
    verdict = _judge(claim, table, tmp_path)
    assert (
        verdict.verdict == "inconclusive" and "oscarmax vs softmax: inconclusive" in verdict.reason
    )


def test_the_gate_is_the_attention_free_control_not_a_trivial_baseline(table, tmp_path):
    claim = _claim("better", metric="accuracy", a="fusedmax", b="softmax")
    # a trivial baseline above every model gates nothing: it is a row beside the cells
    strong = [*table, _row(tmp_path, "baseline: majority", 0, 90.0, curve=None)]
    assert _judge(claim, strong, tmp_path).verdict == "reproduced"
    # no control yet: Δ and interval shown, the verdict waits for the gate
    no_control = [row for row in table if row["mapping"] != "uniform"]
    waiting = _judge(claim, no_control, tmp_path)
    assert waiting.verdict == "provisional" and waiting.interval[0] > 0
    assert "the gate is not measured yet: no rows for uniform" in waiting.reason
    assert "would say: reproduced" in waiting.reason
    # softmax no better than uniform attention: attention is not shown to matter
    level = [row for row in table if row["mapping"] != "uniform"]
    level += _cell(tmp_path, "uniform", [70.25, 69.75, 70.0])
    gated = _judge(claim, level, tmp_path)
    assert gated.verdict == "inconclusive" and "attention is not shown to matter" in gated.reason
    assert gated.interval[0] > 0  # the comparison itself is still shown
    # a table without a control (NER compares DP regularisers) has no gate
    assert _judge(claim, no_control, tmp_path, control=None).verdict == "reproduced"


def test_fewer_than_three_converged_seeds_is_provisional(table, tmp_path):
    claim = _claim("better", metric="accuracy", a="fusedmax", b="softmax")
    two = [row for row in table if not (row["mapping"] == "fusedmax" and row["seed"] == 3)]
    verdict = _judge(claim, two, tmp_path)
    assert verdict.verdict == "provisional" and verdict.seeds == "2–3"
    assert "fewer than 3 converged seeds for fusedmax" in verdict.reason
    assert "would say: reproduced" in verdict.reason
    # a run left out by the convergence check counts as missing
    budget = {**CURVE, "stop": "max_epoch"}
    unconverged = [
        _row(tmp_path, "fusedmax", 3, 72.75, curve=budget) if row is table[8] else row
        for row in table
    ]
    assert table[8]["mapping"] == "fusedmax" and table[8]["seed"] == 3
    verdict = _judge(claim, unconverged, tmp_path)
    assert verdict.verdict == "provisional"
    assert "left out of the verdict: fusedmax seed 3" in verdict.reason
    assert "did not stop on its validation value" in verdict.reason


def test_a_verdict_with_runs_left_out_says_what_they_would_change(table, tmp_path):
    """A verdict that leaves runs out (the convergence check) also says what the intervals
    would say with them counted in, with the comparison nearest to failing: whether the
    verdict rests on leaving them out."""
    claim = _claim("better", metric="accuracy", a="fusedmax", b="softmax")
    budget = {**CURVE, "stop": "max_epoch"}
    # a fourth fusedmax seed, far below the others, stopped by the epoch budget: left out
    low = [*table, _row(tmp_path, "fusedmax", 4, 60.0, curve=budget)]
    verdict = _judge(claim, low, tmp_path)
    assert verdict.verdict == "reproduced" and "left out of the verdict: fusedmax seed 4" in (
        verdict.reason
    )
    every = [73.0, 73.5, 72.75, 60.0]
    oracle = stats.ttest_ind(every, [70.0, 70.5, 69.5], equal_var=False).confidence_interval()
    difference = sum(every) / 4 - 70.0
    assert (
        "with the runs left out counted in, the intervals would say: inconclusive "
        f"(fusedmax − softmax: {difference:+.2f} [{oracle.low:+.2f}, {oracle.high:+.2f}])"
    ) in verdict.reason
    # one level with the others: counting it in changes nothing
    level = [*table, _row(tmp_path, "fusedmax", 4, 73.25, curve=budget)]
    verdict = _judge(claim, level, tmp_path)
    assert "counted in, the intervals would say: reproduced (fusedmax − softmax" in verdict.reason
    # nothing left out: nothing to say
    assert "counted in" not in _judge(claim, table, tmp_path).reason


def test_a_falling_tail_or_a_high_outlier_keeps_a_run_out(tmp_path):
    falling = {
        **CURVE,
        "valid_loss": [5.0, 4.0, 3.0, 2.8, 2.6, 2.4, 2.3, 2.2, 2.15, 2.1, 2.05],
        "best_epoch": 11,
        "best_valid_loss": 2.05,
    }
    assert convergence.tail_still_falls(falling).startswith("its validation loss still falls")
    assert convergence.tail_still_falls(CURVE) == ""
    pool = [
        _row(tmp_path, name, seed, 70.0, curve={**CURVE, "best_valid_loss": loss})
        for name, losses in (("a", [2.0, 2.02, 1.98]), ("b", [2.01, 1.99, 2.03]))
        for seed, loss in enumerate(losses, 1)
    ]
    high = _row(tmp_path, "c", 1, 70.0, curve={**CURVE, "best_valid_loss": 2.5})
    low = _row(tmp_path, "c", 2, 70.0, curve={**CURVE, "best_valid_loss": 1.5})
    mid = _row(tmp_path, "c", 3, 70.0, curve={**CURVE, "best_valid_loss": 2.0})
    tail = _row(tmp_path, "c", 4, 70.0, curve=falling)
    cell = [high, low, mid, tail]
    issues = convergence.check_cell(cell, pool + cell)
    assert set(issues) == {high["run_id"], tail["run_id"]}  # a better basin is no failure
    assert "scaled MADs above its cell's median" in issues[high["run_id"]]
    kept, left_out = convergence.converged(cell, pool + cell)
    assert kept == [low, mid] and left_out[0].startswith("seed 1 (run c-1): its best")


def test_the_replay_counts_epochs_a_log_lost():
    """A run whose log lost epoch 13: the rule stops it at epoch 14 (3 epochs after the best,
    11), not at the third logged value after it (15). It trained to 15 and is disclosed, with
    the epoch the rule keeps (the same, 11)."""
    curve = {
        "epochs": [9, 10, 11, 12, 14, 15],
        "valid_loss": [2.18, 2.16, 2.0, 2.03, 2.19, 2.13],
        "patience": 3,
        "best_epoch": 11,
        "stopped_epoch": 15,
    }
    assert learning_curves.rule_stop_epoch(curve) == 14
    assert learning_curves.past_rule(curve) == (
        "trained to epoch 15, past its rule's stop at epoch 14; the rule keeps the same epoch "
        "(11), the checkpoint scored"
    )
    assert (
        learning_curves.past_rule(
            {
                **curve,
                "stopped_epoch": 14,
                "epochs": curve["epochs"][:-1],
                "valid_loss": curve["valid_loss"][:-1],
            }
        )
        == ""
    )


def test_time_claims_on_seconds_per_epoch(table, tmp_path):
    def timed(rows, mapping, seconds):
        return [
            {**row, "train": {**row["train"], "wall_s": s * row["train"]["epochs"]}}
            for row, s in zip([r for r in rows if r["mapping"] == mapping], seconds, strict=True)
        ]

    rows = timed(table, "softmax", [100, 102, 98]) + timed(table, "fusedmax", [101, 99, 100.5])
    same = _claim("time_ratio", side="both", mappings=["fusedmax"], reference="softmax", margin=0.1)
    assert _judge(same, rows, tmp_path).verdict == "reproduced"
    slow = timed(table, "softmax", [100, 102, 98]) + timed(table, "fusedmax", [150, 155, 148])
    slower = _claim(
        "time_ratio", side="not_slower", mappings=["fusedmax"], reference="softmax", margin=0.1
    )
    assert _judge(slower, slow, tmp_path).verdict == "not reproduced at this scale"
    assert _judge(slower, rows, tmp_path).verdict == "reproduced"  # cost claims are not gated


def test_structure_claims_read_attention_statistics(tmp_path):
    rows = [
        *_cell(tmp_path, "fusedmax", [70, 70, 70], attention={"mean_runs_per_row": 2.5}),
        *_cell(tmp_path, "sparsemax", [70, 70, 70], attention={"mean_runs_per_row": 0.0}),
    ]
    for index, row in enumerate(rows):
        row["attention"] = {"mean_runs_per_row": row["attention"]["mean_runs_per_row"] + index / 10}
    claim = _claim("better", metric="attention:mean_runs_per_row", a="fusedmax", b="sparsemax")
    verdict = _judge(claim, rows, tmp_path)  # no control needed: not a claim on accuracy
    assert verdict.verdict == "reproduced" and verdict.p_items is None


def _learned(tmp_path, spreads):
    """A cell of entmax_learned whose seed k learned α 1.5 ± spreads[k] in half its heads each
    (2 modules × 4 heads): the sd over its heads is exactly spreads[k]."""
    rows = _cell(tmp_path, "entmax_learned", [70.0] * len(spreads))
    for row, d in zip(rows, spreads, strict=True):
        row["attention"] = {"alpha": [[1.5 - d, 1.5 + d, 1.5 - d, 1.5 + d]] * 2}
    return rows


def test_level_claims_on_the_spread_of_learned_alpha(tmp_path):
    """E2's heads that specialise: the sd of the learned α over the heads, its mean over seeds
    against a level, each way, with the t-interval of the mean as the oracle's."""
    claim = _claim("at_least", metric="attention:alpha_sd", a="entmax_learned", at_least=0.1)
    spreads = [0.3, 0.25, 0.35]
    verdict = _judge(claim, _learned(tmp_path, spreads), tmp_path, control=None)
    low, high = stats.t.interval(0.95, 2, loc=np.mean(spreads), scale=stats.sem(spreads))
    assert verdict.verdict == "reproduced" and verdict.seeds == "3"
    assert verdict.difference == pytest.approx(0.3 - 0.1)
    assert verdict.interval == pytest.approx((low - 0.1, high - 0.1))
    # the control's absence does not gate it: a statistic of one mapping's attention
    gated = _judge(claim, _learned(tmp_path, spreads), tmp_path)
    assert gated.verdict == "reproduced"
    flat = _judge(claim, _learned(tmp_path, [0.01, 0.02, 0.015]), tmp_path)
    assert flat.verdict == "not reproduced at this scale"
    mixed = _judge(claim, _learned(tmp_path, [0.02, 0.3, 0.1]), tmp_path)
    assert mixed.verdict == "inconclusive" and "contains 0.1" in mixed.reason
    two = _judge(claim, _learned(tmp_path, [0.3, 0.31]), tmp_path)
    assert two.verdict == "provisional" and "would say: reproduced" in two.reason
    one = _judge(claim, _learned(tmp_path, [0.3]), tmp_path)
    assert one.verdict == "provisional" and one.interval is None and "one seed" in one.reason
    assert "no rows for entmax_learned" in _judge(claim, [], tmp_path).reason
    unrecorded = _cell(tmp_path, "entmax_learned", [70.0] * 3)  # rows without a learned α
    assert "does not record attention:alpha_sd" in _judge(claim, unrecorded, tmp_path).reason


def test_every_declared_claim_is_well_formed(tmp_path):
    """Every claim of every table config (configs/reproduce) names a known kind with the fields
    it needs: judged before any row, each waits for its rows (a benchmark claim for its
    record), never an error."""
    declared = 0
    for path in sorted((REPO_ROOT / "configs" / "reproduce").glob("*.yaml")):
        spec = OmegaConf.load(path)
        for claim in spec.get("claims") or []:
            assert claim.test.kind in claims.KINDS, (path.name, claim.id)
            verdict = claims.judge(claim, [], "x", "small", tmp_path, spec.get("control"))
            assert verdict.verdict in ("provisional", "inconclusive"), (path.name, claim.id)
            declared += 1
    assert declared >= 20


def _bench_run(ratios: dict, date="2026-11-30T00:00:00+00:00", device="H100", quick=False):
    """A benchmark run (results/bench/model_<device>.json's layout) with these throughput
    ratios to softmax, one per entry."""
    return {
        "date": date,
        "args": {"quick": quick},
        "env": {"device": device, "device_kind": "gpu" if device == "H100" else "cpu"},
        "results": [
            {"model": "LSTM", "attention": entry, "throughput_ratio_to_softmax": ratio}
            for entry, ratio in ratios.items()
        ],
    }


def _bench_record(tmp_path, *runs):
    (tmp_path / "b.json").write_text(json.dumps({"runs": list(runs)}))


def test_bench_claims_need_three_runs(tmp_path):
    claim = _claim(
        "bench_ratio", record="b.json", model="LSTM", entries=["fusedmax, CPU"], at_least=0.75
    )

    def record(*ratios):
        _bench_record(tmp_path, *(_bench_run({"fusedmax, CPU": r}) for r in ratios))

    record(0.9, 0.92)
    two = _judge(claim, [], tmp_path)
    assert two.verdict == "provisional" and "measured on a lent GPU (H100)" in two.reason
    assert "would say: reproduced" in two.reason
    record(0.9, 0.92, 0.91)
    assert _judge(claim, [], tmp_path).verdict == "reproduced"
    record(0.5, 0.52, 0.51)
    assert _judge(claim, [], tmp_path).verdict == "not reproduced at this scale"
    assert (
        "no benchmark record"
        in _judge({**claim, "test": {**claim["test"], "record": "x"}}, [], tmp_path).reason
    )


def test_bench_time_claims_test_seconds_per_step_within_the_margin(tmp_path):
    """P4 ("essentially the same") and T2 ("no slower") on the model benchmark: each entry's
    seconds per step over softmax's (1 / its throughput ratio), on the log scale, against
    ×(1 + margin); the entry nearest to failing stands for the claim, as a ratio."""
    # mapping -> the benchmark's label of it
    entries = {"sparsemax": "sparsemax", "fusedmax": "fusedmax (λ=0.1)"}
    both = _claim(
        "bench_ratio", record="b.json", model="LSTM", entries=entries, side="both", margin=0.1
    )
    not_slower = {**both, "test": {**both["test"], "side": "not_slower"}}

    def record(sparsemax, fusedmax):
        runs = [
            _bench_run({"sparsemax": s, "fusedmax (λ=0.1)": f}, device="CPU (x)")
            for s, f in zip(sparsemax, fusedmax, strict=True)
        ]
        _bench_record(tmp_path, *runs)

    # the headline shows P4 and T2 on the rows of the mappings they name; P6's offload
    # setups stand for no row
    assert claims.claim_mappings(both["test"]) == ["sparsemax", "fusedmax"]
    offload = _claim("bench_ratio", record="b.json", model="LSTM", entries=["f, CPU"], at_least=1)
    assert claims.claim_mappings(offload["test"]) == []
    record([1.0, 1.01, 0.99], [0.98, 0.99, 0.985])
    same = _judge(both, [], tmp_path)
    assert same.verdict == "reproduced" and same.ratio
    # fusedmax (throughput 0.985 of softmax's) is the entry nearest to the margin
    assert same.difference == pytest.approx(1 / 0.985, rel=1e-3)
    assert same.interval[0] < same.difference < same.interval[1] < 1.1
    assert "measured on CPU (x), 3 run(s) on 2026-11-30" in same.reason
    # fusedmax twice as slow: outside ×1.1 either way
    record([1.0, 1.01, 0.99], [0.5, 0.51, 0.49])
    assert _judge(both, [], tmp_path).verdict == "not reproduced at this scale"
    assert _judge(not_slower, [], tmp_path).verdict == "not reproduced at this scale"
    # fusedmax twice as fast: not "the same", but no slower
    record([1.0, 1.01, 0.99], [2.0, 2.02, 1.98])
    assert _judge(both, [], tmp_path).verdict == "not reproduced at this scale"
    assert _judge(not_slower, [], tmp_path).verdict == "reproduced"
    # runs that spread over the margin
    record([1.0, 1.01, 0.99], [0.8, 1.2, 1.0])
    assert _judge(both, [], tmp_path).verdict == "inconclusive"
    # a malformed test is refused by name, record or not (the config test judges every
    # declared claim before any run)
    for bad, words in (
        ({"side": "faster"}, "side"),
        ({"at_least": 0.75}, "either at_least"),
    ):
        for results_dir in (tmp_path, tmp_path / "none"):
            with pytest.raises(ValueError, match=words):
                _judge({**both, "test": {**both["test"], **bad}}, [], results_dir)
    without = {k: v for k, v in both["test"].items() if k != "margin"}
    with pytest.raises(ValueError, match="either at_least"):
        _judge({**both, "test": without}, [], tmp_path)


def _fusedmax_no_slower_since(**extra):
    """T2's shape on the LSTM model: fusedmax no slower than softmax, declared 2026-11-30."""
    return _claim(
        "bench_ratio",
        record="b.json",
        model="LSTM",
        entries=["fusedmax"],
        side="not_slower",
        margin=0.1,
        since="2026-11-30",
        **extra,
    )


def test_bench_claims_count_only_full_runs_made_since_their_declaration(tmp_path):
    claim = _fusedmax_no_slower_since()
    before = [_bench_run({"fusedmax": 1.0}, date="2026-11-26T07:09:00+00:00")] * 3
    quick = [_bench_run({"fusedmax": 1.0}, quick=True)] * 3
    _bench_record(tmp_path, *before, *quick)
    verdict = _judge(claim, [], tmp_path)
    assert verdict.verdict == "provisional" and verdict.difference is None
    assert "no full run made since 2026-11-30, the test's declaration" in verdict.reason
    after = [_bench_run({"fusedmax": r}) for r in (1.0, 1.02, 0.98)]
    _bench_record(tmp_path, *before, *quick, *after)
    counted = _judge(claim, [], tmp_path)
    assert counted.verdict == "reproduced" and counted.seeds == "3"
    # a run a minute before a declaration made at a time of day does not count
    at_noon = {**claim, "test": {**claim["test"], "since": "2026-11-30T12:00"}}
    early = _bench_run({"fusedmax": 0.5}, date="2026-11-30T11:59:00+00:00")
    later = [
        _bench_run({"fusedmax": r}, date="2026-11-30T12:00:30+00:00") for r in (1.0, 1.02, 0.98)
    ]
    _bench_record(tmp_path, early, *later)
    noon = _judge(at_noon, [], tmp_path)
    assert noon.verdict == "reproduced" and noon.seeds == "3"
    with pytest.raises(ValueError, match="since must be an ISO date"):
        _judge({**claim, "test": {**claim["test"], "since": "yesterday"}}, [], tmp_path)


def test_a_declared_run_count_is_judged_on_its_first_runs_alone(tmp_path):
    """With ``runs`` declared, the verdict waits for that many runs (provisional before) and
    is read on the first of them in date order: a later run does not move it."""
    claim = _fusedmax_no_slower_since(runs=5)

    def run(ratio, minute):
        return _bench_run({"fusedmax": ratio}, date=f"2026-11-30T10:{minute:02d}:00+00:00")

    first = [run(r, m) for r, m in ((1.0, 1), (1.02, 2), (0.98, 3))]
    # a run that timed other models only takes none of the claim's runs
    other = {**run(0.3, 0), "results": [{"model": "Transformer", "attention": "fusedmax"}]}
    _bench_record(tmp_path, other, *first)
    three = _judge(claim, [], tmp_path)
    assert three.verdict == "provisional" and three.seeds == "3"
    assert "3 of the 5 declared benchmark runs; the interval alone would say: reproduced" in (
        three.reason
    )
    five = [*first, run(1.01, 4), run(0.99, 5)]
    # written out of date order: the first five by date decide, the much slower one is later
    _bench_record(tmp_path, other, run(0.3, 30), *reversed(five))
    decided = _judge(claim, [], tmp_path)
    assert decided.verdict == "reproduced" and decided.seeds == "5"
    assert "6 run(s)" not in decided.reason and "the 5 declared (1 later not counted)" in (
        decided.reason
    )
    _bench_record(tmp_path, *five[:4], run(0.3, 5))  # the fifth run slow: it counts
    assert _judge(claim, [], tmp_path).verdict != "reproduced"
    for bad in (2, "ten", True, 4.5):
        for results_dir in (tmp_path, tmp_path / "none"):
            with pytest.raises(ValueError, match="runs must be an integer of at least 3"):
                _judge({**claim, "test": {**claim["test"], "runs": bad}}, [], results_dir)


def test_missing_cells_and_unknown_kinds(table, tmp_path):
    missing = _judge(
        _claim("better", metric="accuracy", a="entmax15", b="softmax"), table, tmp_path
    )
    # a cell not trained yet has none of the seeds a verdict needs
    assert missing.verdict == "provisional" and "no rows for entmax15" in missing.reason
    with pytest.raises(ValueError, match="unknown test kind 'most'"):
        _judge(_claim("most", metric="accuracy", a="fusedmax", b="softmax"), table, tmp_path)


def test_a_converged_cell_stands_for_its_mapping_before_one_with_more_unconverged_seeds(tmp_path):
    """Among a mapping's γ-tuned cells, the one whose runs stopped early stands for it, even
    with fewer seeds so far; seeds decide between cells equally converged."""

    def cell(gamma, seeds, curve, day):
        return [
            {
                **_row(tmp_path, "softmax", seed, 50.0, curve=curve),
                "config_sha256": f"c{gamma}",
                "sweep_params": {"gamma": gamma},
                "gamma_selection": {"chosen": gamma},
                "date": f"2026-11-2{day}T00:00:0{seed}",
            }
            for seed in seeds
        ]

    budget = cell(4.0, [1, 2, 3], {"stop": "max_epoch"}, 4)
    converged = cell(1.0, [1, 2], CURVE, 5)
    chosen = claims.representative_cells(budget + converged, "snli", "small", "test")
    assert [r["config_sha256"] for r in chosen["softmax"]] == ["c1.0", "c1.0"]
    more_seeds = cell(16.0, [1, 2, 3], CURVE, 3)
    chosen = claims.representative_cells(budget + converged + more_seeds, "snli", "small", "test")
    assert [r["seed"] for r in chosen["softmax"]] == [1, 2, 3]
    assert chosen["softmax"][0]["config_sha256"] == "c16.0"


def test_the_seed_plan_line_counts_planned_seeds_in_and_those_left_out(tmp_path):
    """Under each headline: how many of the declared seeds are in, and which runs a verdict
    leaves out as not converged; "interim" only while some cell lacks planned seeds."""
    from regattn_fairseq.experiments.report.tables import _seed_plan_lines, seed_plan

    spec = OmegaConf.create(
        {
            "table": "t",
            "mappings": ["softmax", "sparsemax", "uniform"],
            "seeds": {"small": [1, 2, 3], "smoke": [1]},
            "experiments": [{"name": "snli"}],
        }
    )
    falling = {**CURVE, "valid_loss": [5.0, 4.0, 3.0, 2.8, 2.6, 2.4, 2.3, 2.2, 2.15, 2.1, 2.05]}
    softmax = _cell(tmp_path, "softmax", [70.0, 70.5, 69.5])
    sparsemax = _cell(tmp_path, "sparsemax", [67.0, 67.5])
    sparsemax[1]["train"]["learning_curve"] = {**falling, "best_epoch": 11}
    standing = {"test": {"softmax": softmax, "sparsemax": sparsemax}}
    plan = seed_plan(spec, "snli", "small", standing)
    assert (plan.done, plan.total, plan.interim) == (5, 9, True)
    assert plan.left_out == {"sparsemax": [2]}
    [line, blank] = _seed_plan_lines(spec, plan)
    assert blank == "" and line == (
        "Seed plan: seeds 1–3 in every cell (`configs/reproduce/t.yaml`, declared in "
        "claims.md): 5 of 9 runs are in (sparsemax 2, uniform 0, of 3); 1 left out of the "
        "verdicts as not converged (sparsemax seed 2). The verdicts are interim until every "
        "cell has its seeds."
    )
    standing["test"]["sparsemax"] = _cell(tmp_path, "sparsemax", [67.0, 67.5, 66.0])
    standing["test"]["uniform"] = _cell(tmp_path, "uniform", [50.0, 50.5, 49.75])
    [line, _] = _seed_plan_lines(spec, seed_plan(spec, "snli", "small", standing))
    assert line.endswith(": all 9 runs are in, all converged.")
    assert seed_plan(spec, "snli", "smoke", standing) is None  # a one-seed plan
    assert _seed_plan_lines(spec, None) == []
