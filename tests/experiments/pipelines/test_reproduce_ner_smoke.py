"""`scripts/reproduce.py ner --scale smoke` end to end (Spanish and Dutch x entropy and l2:
prepare, train, Viterbi decode, seqeval, the marginals' sparsity, the p-values' sidecars,
results/ner.md and the marginals figure), in tmp folders. About a minute on 2 cores: marked slow."""

import json
import sys
from pathlib import Path

import children
import pytest

from regattn_checkout.paths import REPO_ROOT


@pytest.mark.slow
def test_reproduce_ner_smoke(tmp_path: Path):
    results = tmp_path / "results"
    children.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "reproduce.py"),
            "ner",
            "--scale",
            "smoke",
            "--work-dir",
            str(tmp_path / "work"),
            "--results-dir",
            str(results),
            "--allow-dirty",
        ],
        check=True,
        cwd=REPO_ROOT,
    )
    table = (results / "ner.md").read_text()
    for cell in ("| entropy |", "| l2 |", "86.68", "85.51", "87.56", "86.58", "p vs entropy (f1)"):
        assert cell in table
    assert "tag sequences with mass (mean / median)" in table and "oscarmax" not in table
    rows = [json.loads(line) for line in (results / "raw" / "ner.jsonl").read_text().splitlines()]
    # each language's table also gets its trivial baseline (rows.baselines), scored alike
    models = [r for r in rows if "baseline" not in r]
    assert sorted((r["experiment"], r["mapping"]) for r in models) == [
        ("dutch", "entropy"),
        ("dutch", "l2"),
        ("spanish", "entropy"),
        ("spanish", "l2"),
    ]
    assert sorted(r["experiment"] for r in rows if "baseline" in r) == ["dutch", "spanish"]
    for row in models:
        assert 0 <= row["metrics"]["f1"] <= 100
        stats = row["attention"]
        zeros = stats["mean_zero_fraction"], stats["transition_zero_fraction"]
        if row["mapping"] == "entropy":  # every tag sequence has mass
            assert zeros == (0, 0) and stats["single_sequence_fraction"] == 0
        else:
            assert min(zeros) > 0
        assert row["items"]["file"].endswith(f"-{row['evaluation']}.json.gz")
    assert list((results / "figures").glob("ner_*_smoke_attention*"))
