"""The `transformers` backends' fused path compiled for a CUDA device (no interpreter) against
their row-wise path on the same device: logits and every parameter gradient (∂α of learned
alphas too) of the tiny random models, float32, with padding, a causal decoder with
grouped-query attention and an encoder-decoder's cross-attention; and that "auto" takes the
fused path there.

Skipped without a CUDA device. Run on a GPU machine with TRITON_INTERPRET unset or 0
(`make test-cuda`); the interpreter's version is test_transformers_fused.py.
"""

import pytest
import torch

# Decide before triton is imported: in CI (no CUDA) nothing here may import triton before
# the interpreter tests set TRITON_INTERPRET=1.
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
pytest.importorskip("transformers", reason="transformers is not installed (.[hf])")

from hf_tiny_models import FUSED, run_with_impl  # noqa: E402

from regattn import attention  # noqa: E402
from regattn.mappings import _kernels  # noqa: E402

if _kernels.triton_interpreting():
    pytest.skip(
        "TRITON_INTERPRET=1 runs the kernels on CPU tensors; unset it to compile for CUDA",
        allow_module_level=True,
    )

TOL = 2e-4  # float32 (exact products on both paths), relative to the largest entry


@pytest.mark.parametrize(
    "kind, case",
    [("encoder", case) for case in FUSED]
    + [("decoder", "sparsemax"), ("decoder", "entmax_learned"), ("encoder_decoder", "entmax15")],
)
def test_fused_equals_rowwise_on_cuda(kind, case, monkeypatch):
    calls = []
    fused_attention = attention.sparse_attention

    def counted(*args, **kwargs):
        calls.append(kwargs["impl"])
        return fused_attention(*args, **kwargs)

    monkeypatch.setattr(attention, "sparse_attention", counted)
    logits, grads = run_with_impl(kind, case, "auto", device="cuda")
    assert calls and set(calls) == {"fused"}  # "auto" takes the fused path on CUDA
    fused_calls = len(calls)
    expected_logits, expected_grads = run_with_impl(kind, case, "rowwise", device="cuda")
    assert len(calls) == fused_calls
    scale = max(expected_logits.abs().max().item(), 1.0)
    torch.testing.assert_close(logits, expected_logits, atol=TOL * scale, rtol=0)
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        scale = max(expected_grads[name].abs().max().item(), 1.0)
        torch.testing.assert_close(grad, expected_grads[name], atol=TOL * scale, rtol=0, msg=name)
