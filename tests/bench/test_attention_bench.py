"""python -m regattn_bench attention without a GPU: it refuses to run, its exact outputs are the
mappings', and its table renders every kind of row (timed, out of memory, no deviation)."""

import sys

import pytest
import torch

from regattn import mappings
from regattn_bench import attention_speed


def test_without_cuda_it_exits_with_a_message(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sys, "argv", ["bench_attention.py", "--quick"])
    with pytest.raises(SystemExit, match="no CUDA device"):
        attention_speed.main()


@pytest.mark.parametrize("alpha", [1.0, 1.5, 2.0])
@pytest.mark.parametrize("causal", [False, True])
def test_exact_is_the_mapping_of_the_scores_in_float64(alpha, causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 9, 4, generator=g) for _ in range(3))
    scores = q.double() @ k.double().transpose(-1, -2) / 2
    mask = torch.ones(9, 9, dtype=torch.bool).tril() if causal else None
    p = mappings.entmax(scores, mask=mask, alpha=alpha)  # alpha = 1: softmax
    torch.testing.assert_close(attention_speed.exact(q, k, v, alpha, causal), p @ v.double())


def test_the_table_renders_timed_failed_and_untimed_rows():
    base = {"length": 1024, "head_dim": 64, "heads": 16, "causal": False, "blocks": 3}
    record = {
        "env": {"device": "GPU", "torch": "2", "triton": "3", "git_commit": "abc", "date": "d"},
        "notes": ["AdaSplash not importable (x)"],
        "results": [
            {**base, "method": "sdpa (flash)", "mode": "fwd", "median_ms": 1.0,
             "peak_mib": 10.0, "max_abs_diff_vs_exact": 1e-3, "ratio_to_sdpa_flash": 1.0},
            {**base, "method": "regattn row-wise: 1.5-entmax", "mode": "fwd+bwd",
             "median_ms": None, "peak_mib": None, "ratio_to_sdpa_flash": None,
             "error": "out of memory (x)"},
        ],
    }  # fmt: skip
    text = attention_speed.markdown(record)
    assert "| 1024 | 64 | False | sdpa (flash) | 1.000 | 1.00 | 10 | 1.0e-03 |" in text
    assert "row-wise: 1.5-entmax (out of memory (x)) | — |" in text
    assert "AdaSplash not importable" in text
