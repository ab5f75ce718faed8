"""Shared cases of the fused attention's tests (interpreter and CUDA): inputs, and the fused
path's forward and gradients against the row-wise reference in float64.
"""

import torch

from regattn.attention import sparse_attention

# alpha: sparsemax, 1.5-entmax (their own kernels) and a tensor alpha per head (learned)
MAPPINGS = {
    "sparsemax": 2.0,
    "entmax15": 1.5,
    "entmax_fixed": 1.3,
    "alpha_per_head": (1.25, 1.8),
}


def make_inputs(seed, b=1, hq=2, hk=None, lq=24, lk=None, d=16, dv=None, spread=1.5):
    """q, k, v, the output gradient: (b, heads, length, dim), k and v with hk heads."""
    g = torch.Generator().manual_seed(seed)
    hk = hq if hk is None else hk
    lk = lq if lk is None else lk
    dv = d if dv is None else dv
    q = torch.randn(b, hq, lq, d, generator=g, dtype=torch.float64) * spread
    k = torch.randn(b, hk, lk, d, generator=g, dtype=torch.float64) * spread
    v = torch.randn(b, hk, lk, dv, generator=g, dtype=torch.float64)
    grad = torch.randn(b, hq, lq, dv, generator=g, dtype=torch.float64)
    return q, k, v, grad


def alpha_of(key, heads=2, device="cpu"):
    """The case's alpha: a number, or one per query head (`heads` values spread evenly over
    the case's range: a tensor alpha must have one value per query head)."""
    alpha = MAPPINGS[key]
    if isinstance(alpha, tuple):
        return torch.linspace(*alpha, heads, dtype=torch.float64, device=device)
    return alpha


def run(impl, q, k, v, grad, alpha, dtype, device="cpu", **kwargs):
    """(output, dq, dk, dv, dalpha or None), inputs cast to dtype on device."""
    # fresh leaves (a .to() to the same dtype would return, and mark, the caller's tensor)
    xs = [x.detach().to(device=device, dtype=dtype).clone().requires_grad_() for x in (q, k, v)]
    a = alpha
    if isinstance(alpha, torch.Tensor):
        a_dtype = torch.float32 if dtype != torch.float64 else dtype
        a = alpha.detach().to(device=device, dtype=a_dtype).clone().requires_grad_()
    kwargs = {
        key: (val.to(device) if isinstance(val, torch.Tensor) else val)
        for key, val in kwargs.items()
    }
    out = sparse_attention(*xs, alpha=a, impl=impl, **kwargs)
    out.backward(grad.to(device=device, dtype=dtype))
    grads = [x.grad for x in xs] + [a.grad if isinstance(a, torch.Tensor) else None]
    return [out.detach()] + grads


def check_fused(q, k, v, grad, alpha, dtype=torch.float32, device="cpu", tol=None, **kwargs):
    """The fused path in `dtype` against the reference in float64 on the same rounded inputs:
    the output and every gradient within `tol` (relative to the largest entry), masked keys'
    gradients exactly 0 where a mask is given. Returns the fused results.
    """
    rounded = [x.to(dtype).double() for x in (q, k, v, grad)]
    fused = run("fused", q, k, v, grad, alpha, dtype, device, **kwargs)
    ref = run("reference", *rounded, alpha, torch.float64, "cpu", **kwargs)
    assert all(x.dtype == dtype for x in fused[:4])
    assert_matches_reference(fused, ref, tol or {torch.float32: 2e-5}[dtype])
    return fused


def assert_matches_reference(got, want, tol):
    """(output, dq, dk, dv, dalpha) against the reference's, each within `tol` times its
    largest entry (at least 1); dalpha within 10 times that, and None where the reference's
    is None (a fixed alpha has no gradient).
    """
    names = ["output", "dq", "dk", "dv", "dalpha"]
    for name, g, w in zip(names, got, want, strict=True):
        if w is None:
            assert g is None, name
            continue
        scale = max(w.abs().max().item(), 1.0)
        # d alpha sums terms over every (query, key) pair of a head and divides by
        # (alpha - 1)^2: its float32 error grows with the row count and as alpha nears 1
        factor = 10.0 if name == "dalpha" else 1.0
        torch.testing.assert_close(g.cpu().double(), w, rtol=0, atol=tol * scale * factor, msg=name)
