"""python -m regattn_bench dp --quick runs and writes its tables; timings are never asserted."""

import json
import sys

import children
import torch

from regattn import dp
from regattn_bench.dp_speed import autograd_viterbi


def test_autograd_baseline_is_the_same_function():
    theta = torch.randn(2, 4, 3, 3, dtype=torch.float64, requires_grad=True)
    for reg in ("entropy", "l2"):
        ours = dp.viterbi(theta, reg=reg, gamma=0.5)
        base = autograd_viterbi(theta, reg=reg, gamma=0.5)
        torch.testing.assert_close(ours, base)
        torch.testing.assert_close(
            torch.autograd.grad(ours.sum(), theta)[0], torch.autograd.grad(base.sum(), theta)[0]
        )


def test_dp_bench_quick(tmp_path):
    cmd = [sys.executable, "-m", "regattn_bench", "dp", "--quick", "--out-dir", str(tmp_path)]
    cmd += ["--lengths", "3", "--states", "4", "--batch", "2"]
    proc = children.run(cmd, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    run = json.loads((tmp_path / "dp_cpu.json").read_text())["runs"][-1]
    assert run["args"]["quick"] and run["args"]["lengths"] == [3]
    assert {(r["method"], r["mode"]) for r in run["results"]} >= {
        ("hard viterbi (decode, compiled)", "fwd"),
        ("hard viterbi (decode, torch)", "fwd"),
        ("regattn.dp.viterbi (l2, compiled)", "fwd+bwd"),
        ("regattn.dp.viterbi (l2, torch)", "fwd+bwd"),
        ("autograd through the recursion (entropy)", "fwd+bwd"),
    }
    text = (tmp_path / "dp_cpu.md").read_text()
    assert "ratio to the hard viterbi (decode, compiled) forward" in text
    assert "| regattn.dp.viterbi (entropy, compiled) | fwd+bwd |" in text
    assert "| fwd+bwd / hard fwd (compiled) | fwd+bwd / hard fwd (torch) |" in text
    assert "| entropy | torch | 3 |" in text
