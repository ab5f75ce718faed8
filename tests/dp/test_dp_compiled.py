"""The compiled Viterbi and DTW sweeps (regattn/csrc/dp_sweeps.h) against the torch reference
in regattn.dp, the dispatch between them, and the error a stale build gives."""

import sys
import types

import children
import pytest
import torch

from regattn import _C, dp
from regattn.mappings import backend, torch_reference
from regattn.mappings._kernels import KERNEL_OPS

REGS = ("entropy", "l2")
DP_OPS = (
    "viterbi_forward_sweep",
    "viterbi_marginals_sweep",
    "viterbi_decode_sweep",
    "dtw_forward_sweep",
    "dtw_marginals_sweep",
)
INF = float("inf")
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float64: dict(atol=1e-10, rtol=1e-9)}


def padded_batch(scale, dtype, seed=0):
    """(5, 7, 6, 6) potentials with lengths (7, 1, 4, 7, 3): NaN past the end of sequence 2,
    forbidden transitions (-inf) in sequence 3, and in sequence 4 a state that nothing can
    reach after t = 0."""
    g = torch.Generator().manual_seed(seed)
    theta = scale * torch.randn(5, 7, 6, 6, generator=g, dtype=torch.float64)
    theta[2, 4:] = float("nan")
    theta[3][torch.rand(7, 6, 6, generator=g) < 0.3] = -INF
    theta[3, :, :, 0] = 0.0  # leaving state 0 stays allowed: a path of finite score
    theta[4, :, 2, :] = -INF
    return theta.to(dtype), torch.tensor([7, 1, 4, 7, 3])


def value_and_grad(theta, **kw):
    theta = theta.clone().requires_grad_()
    value = dp.viterbi(theta, **kw)
    (grad,) = torch.autograd.grad(value.sum(), theta)
    return value.detach(), grad


CASES = {  # name: (scale of the potentials, gamma)
    "unit scores": (1.0, 1.0),
    "gamma small": (1.0, 0.01),
    "gamma large": (1.0, 50.0),
    "large scores": (1e4, 1.0),
    "tiny scores": (1e-6, 1.0),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reg", REGS)
def test_compiled_value_and_marginals_match_the_torch_reference(reg, dtype, case):
    scale, gamma = CASES[case]
    theta, lengths = padded_batch(scale, dtype)
    with backend("cpu"):
        value, grad = value_and_grad(theta, reg=reg, gamma=gamma, lengths=lengths)
    with torch_reference():
        ref_value, ref_grad = value_and_grad(theta, reg=reg, gamma=gamma, lengths=lengths)
    torch.testing.assert_close(value, ref_value, **TOL[dtype])
    torch.testing.assert_close(grad, ref_grad, **TOL[dtype])
    assert (grad[3][theta[3] == -INF] == 0).all() and (grad[2, 4:] == 0).all()


@pytest.mark.parametrize("reg", REGS)
def test_compiled_hessian_vector_product_matches_the_torch_reference(reg):
    theta, lengths = padded_batch(1.0, torch.float64, seed=1)
    z = torch.randn(theta.shape, generator=torch.Generator().manual_seed(2), dtype=theta.dtype)
    out = []
    for path in ("cpu", "reference"):
        with backend(path):
            x = theta.clone().requires_grad_()
            (grad,) = torch.autograd.grad(
                dp.viterbi(x, reg=reg, gamma=0.5, lengths=lengths).sum(), x, create_graph=True
            )
            out.append(torch.autograd.grad(grad, x, z)[0])
    torch.testing.assert_close(out[0], out[1], atol=1e-10, rtol=1e-9)
    assert out[0].abs().sum() > 0


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reg", REGS)
def test_compiled_dtw_matches_the_torch_reference(reg, dtype, case):
    scale, gamma = CASES[case]
    g = torch.Generator().manual_seed(4)
    theta = (scale * torch.randn(4, 6, 5, generator=g, dtype=torch.float64)).to(dtype)
    theta[1, 3:] = float("nan")  # past the lengths: ignored
    lengths = (torch.tensor([6, 3, 1, 6]), torch.tensor([5, 5, 2, 1]))
    out = []
    for path in ("cpu", "reference"):
        with backend(path):
            x = theta.clone().requires_grad_()
            value = dp.dtw(x, reg=reg, gamma=gamma, lengths=lengths)
            out.append((value.detach(), torch.autograd.grad(value.sum(), x)[0]))
    torch.testing.assert_close(out[0][0], out[1][0], **TOL[dtype])
    torch.testing.assert_close(out[0][1], out[1][1], **TOL[dtype])


@pytest.mark.parametrize("reg", REGS)
def test_compiled_dtw_hessian_vector_product_matches_the_torch_reference(reg):
    theta = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    lengths = (torch.tensor([4, 2, 3]), torch.tensor([5, 5, 1]))
    z = torch.randn(theta.shape, generator=torch.Generator().manual_seed(6), dtype=theta.dtype)
    out = []
    for path in ("cpu", "reference"):
        with backend(path):
            x = theta.clone().requires_grad_()
            (grad,) = torch.autograd.grad(
                dp.dtw(x, reg=reg, gamma=0.5, lengths=lengths).sum(), x, create_graph=True
            )
            out.append(torch.autograd.grad(grad, x, z)[0])
    torch.testing.assert_close(out[0], out[1], atol=1e-10, rtol=1e-9)
    assert out[0].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_decode_matches_the_torch_reference(dtype):
    theta, lengths = padded_batch(1.0, dtype, seed=3)
    ties = torch.zeros(2, 4, 3, 3, dtype=dtype)  # every path ties: the lowest states win
    for x, n in ((theta, lengths), (theta, None), (ties, torch.tensor([4, 2]))):
        if n is None:
            x = torch.nan_to_num(x, nan=0.0)
        with backend("cpu"):
            path = dp.viterbi_decode(x, lengths=n)
        with torch_reference():
            ref = dp.viterbi_decode(x, lengths=n)
        assert torch.equal(path, ref)


def test_default_dispatch_compiled_on_cpu_torch_otherwise(monkeypatch):
    calls = []

    def recording(name):
        def call(*args):
            calls.append(name)
            return getattr(_C, name)(*args)

        return call

    monkeypatch.setattr(dp, "kernels", types.SimpleNamespace(**{n: recording(n) for n in DP_OPS}))
    theta = torch.randn(2, 3, 4, 4, requires_grad=True)
    torch.autograd.grad(dp.viterbi(theta, reg="l2").sum(), theta)
    dp.viterbi_decode(theta)
    costs = theta.detach()[:, 0].requires_grad_()
    torch.autograd.grad(dp.dtw(costs).sum(), costs)
    assert calls == list(DP_OPS)
    calls.clear()
    with torch_reference():  # forced torch code
        torch.autograd.grad(dp.viterbi(theta).sum(), theta)
        torch.autograd.grad(dp.dtw(costs).sum(), costs)
    half = theta.detach().to(torch.bfloat16)  # no compiled sweep for this dtype
    assert torch.isfinite(dp.viterbi(half)).all()
    assert calls == []


def test_stale_build_is_an_import_error_naming_the_rebuild():
    """An extension built before the sweeps existed: its operators are registered but it has
    no viterbi_* functions; importing regattn.mappings must fail, not fall back."""
    assert set(DP_OPS) <= set(KERNEL_OPS)
    script = (
        "import sys, types, torch\n"
        f"torch.ops.load_library({_C.__file__!r})\n"
        "stale = types.ModuleType('regattn._C')\n"
        f"for name in {[n for n in KERNEL_OPS if n not in DP_OPS]!r}:\n"
        "    setattr(stale, name, print)\n"
        "sys.modules['regattn._C'] = stale\n"
        "import regattn.mappings\n"
    )
    proc = children.run([sys.executable, "-c", script], timeout=300)
    assert proc.returncode != 0
    assert "ImportError: regattn._C has no kernel 'viterbi_forward_sweep'" in proc.stderr
    assert "rebuild it with `make setup`" in proc.stderr
