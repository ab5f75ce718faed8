"""regattn.attention's fused kernels compiled for a CUDA device (no interpreter), against the
row-wise reference in float64 on the CPU: forward and every gradient (q, k, v, alpha) in
float32, bfloat16 and float16, with masks, causal, packed sequences, GQA and cross-attention,
at shapes of several blocks; memory linear in the sequence length; no host-device
synchronization on the dense path (`torch.cuda.set_sync_debug_mode("error")`).

Skipped without a CUDA device. Run on a GPU machine with TRITON_INTERPRET unset or 0
(`make test-cuda`); the interpreter tests (test_attention_fused.py) skip themselves then.
"""

import pytest
import torch

# Decide before triton or the kernels are imported: in CI (no CUDA) nothing here may import
# triton before the interpreter tests set TRITON_INTERPRET=1.
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from attention_cases import MAPPINGS, alpha_of, check_fused, make_inputs, run  # noqa: E402

from regattn.attention import SparseAttention, sparse_attention  # noqa: E402
from regattn.mappings import _kernels  # noqa: E402

if _kernels.triton_interpreting():
    pytest.skip(
        "TRITON_INTERPRET=1 runs the kernels on CPU tensors; unset it to compile for CUDA",
        allow_module_level=True,
    )

# float32: exact products (no TF32), so float32 rounding; half dtypes: P and the products
# rounded to the dtype as in flash attention, a few of its rounding steps
TOLERANCE = {torch.float32: 5e-5, torch.bfloat16: 4 * 2**-7, torch.float16: 4 * 2**-10}


@pytest.mark.parametrize("key", list(MAPPINGS))
@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_cuda_matches_the_reference(key, dtype, head_dim):
    q, k, v, grad = make_inputs(head_dim, b=2, hq=4, hk=2, lq=200, lk=333, d=head_dim)
    check_fused(
        q, k, v, grad, alpha_of(key, heads=4), dtype=dtype, device="cuda", tol=TOLERANCE[dtype]
    )


@pytest.mark.parametrize("key", list(MAPPINGS))
def test_cuda_causal_mask_and_padding(key):
    q, k, v, grad = make_inputs(3, b=2, hq=2, lq=257, lk=257, d=64)
    mask = torch.rand(2, 1, 257, 257, generator=torch.Generator().manual_seed(1)) > 0.2
    mask[1, :, 7] = False  # a query with no key
    out = check_fused(
        q, k, v, grad, alpha_of(key), device="cuda", tol=TOLERANCE[torch.float32],
        mask=mask, causal=True,
    )  # fmt: skip
    assert (out[0][1, :, 7] == 0).all()


@pytest.mark.parametrize("key", ["sparsemax", "alpha_per_head"])
def test_cuda_packed_sequences(key):
    cu_q = torch.tensor([0, 100, 100, 400], dtype=torch.int32)
    cu_k = torch.tensor([0, 150, 170, 500], dtype=torch.int32)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(400, 4, 64, generator=g, dtype=torch.float64) * 1.5
    k = torch.randn(500, 2, 64, generator=g, dtype=torch.float64) * 1.5
    v = torch.randn(500, 2, 64, generator=g, dtype=torch.float64)
    grad = torch.randn(400, 4, 64, generator=g, dtype=torch.float64)
    alpha = alpha_of(key)
    if isinstance(alpha, torch.Tensor):
        alpha = torch.tensor([1.1, 1.5, 1.9, 2.0], dtype=torch.float64)
    check_fused(
        q, k, v, grad, alpha, device="cuda", tol=TOLERANCE[torch.float32], causal=True,
        cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
    )  # fmt: skip


def test_cuda_memory_is_linear_in_the_length():
    # 8192 x 8192 float32 scores would be 256 MiB per head; the fused pass holds O(L) memory
    n, heads = 8192, 2
    q, k, v = (torch.randn(1, heads, n, 64, device="cuda", dtype=torch.bfloat16) for _ in "qkv")
    for x in (q, k, v):
        x.requires_grad_()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = sparse_attention(q, k, v, alpha=torch.full((heads,), 1.5, device="cuda"), causal=True)
    out.float().sum().backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    assert peak < 64 * n * heads * 64 * 4, peak  # tens of (L, D) float32 tensors, not L^2


def test_cuda_dense_path_never_synchronizes():
    q, k, v, grad = make_inputs(6, b=2, hq=4, hk=2, lq=130, lk=70, d=64)
    xs = [x.float().cuda().requires_grad_() for x in (q, k, v)]
    alpha = torch.tensor([1.2, 1.5, 1.8, 2.0], device="cuda", requires_grad=True)
    mask = torch.ones(2, 1, 1, 70, dtype=torch.bool, device="cuda")
    grad = grad.float().cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = sparse_attention(*xs, alpha=alpha, mask=mask, causal=True)
        out.backward(grad)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(alpha.grad).all()


def test_cuda_the_module_trains_alpha():
    q, k, v, grad = make_inputs(7, b=2, hq=4, lq=128, lk=128, d=64)
    module = SparseAttention(4, alpha=1.5, learn_alpha=True).cuda()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    before = module.alpha.detach().clone()
    out = module(*(x.float().cuda() for x in (q, k, v)), causal=True)
    out.backward(grad.float().cuda())
    optimizer.step()
    assert not torch.equal(module.alpha.detach(), before)


def test_cuda_auto_agrees_with_the_reference():
    q, k, v, grad = make_inputs(8, lq=100, lk=100, d=64)
    fused = run("auto", q, k, v, grad, 1.5, torch.float32, device="cuda")
    ref = run("reference", q, k, v, grad, 1.5, torch.float32, device="cuda")
    for a, b in zip(fused[:4], ref[:4], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=5e-5 * max(b.abs().max().item(), 1.0))
