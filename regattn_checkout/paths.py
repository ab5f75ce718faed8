"""The checkout and its results folders, defined once for the benchmarks and the reproduction
suite (`regattn_fairseq.experiments.core.paths` adds the suite's own folders to them).

Attributes
----------
REPO_ROOT : the checkout (holds configs/, regattn/, regattn_checkout/, regattn_fairseq/, results/).
RESULTS_DIR : result tables (results/<table>.md, results/raw/*.jsonl).
BENCH_RESULTS_DIR : benchmark runs (results/bench/).
FIGURES_DIR : figures (results/figures/).
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "results"
BENCH_RESULTS_DIR = RESULTS_DIR / "bench"
FIGURES_DIR = RESULTS_DIR / "figures"
