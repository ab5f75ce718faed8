"""The benchmarks' lists of what they time, in configs/bench/<module>.yaml: the mappings,
their parameters and the labels the records keep from run to run, written once there rather
than in the code (which names no mapping; regattn.mappings declares them).
"""

from __future__ import annotations

import yaml

from regattn_checkout.paths import REPO_ROOT

BENCH_CONFIG_DIR = REPO_ROOT / "configs" / "bench"


def bench_config(module: str) -> dict:
    """configs/bench/<module>.yaml, named after the benchmark's module, as plain dicts and
    lists (in the file's order)."""
    return yaml.safe_load((BENCH_CONFIG_DIR / f"{module}.yaml").read_text(encoding="utf-8"))
