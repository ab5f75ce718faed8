"""The Triton kernels compiled for a CUDA device (no interpreter), against the pure-torch
reference in float64 on the CPU and the convex-solver oracles: every mapping in float64,
float32, bfloat16 and float16, with and without masks, rows up to TRITON_MAX_D positions, ties,
empty rows, a per-row tensor alpha and its gradient, gradcheck in float64, the validation flags
(read on the host under sync_checks, a device-side assertion otherwise), the fallback for rows
longer than a block, and no host-device synchronization on the Triton path
(`torch.cuda.set_sync_debug_mode("error")`).

Skipped without a CUDA device. Run on a GPU machine with TRITON_INTERPRET unset or 0
(`make test-cuda`); the interpreter tests of the other test_triton_* modules skip themselves
then.
"""

import os
import sys
import textwrap

import children
import pytest
import torch

# Decide before triton or the kernels are imported: in CI (no CUDA) nothing here may import
# triton before the interpreter tests set TRITON_INTERPRET=1.
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from mapping_helpers import ORACLE_CASES, TRITON_CASES, oracle_problem  # noqa: E402

from regattn import mappings  # noqa: E402
from regattn.mappings import _kernels  # noqa: E402

if _kernels.triton_interpreting():
    pytest.skip(
        "TRITON_INTERPRET=1 runs the kernels on CPU tensors; unset it to compile for CUDA",
        allow_module_level=True,
    )

CASES = {
    **{k: v for k, v in TRITON_CASES.items() if k != "sq_pnorm_max_p12"},
    "fusedmax": ("fusedmax", {"gamma": 0.8, "lam": 0.3}),
    "oscarmax": ("oscarmax", {"gamma": 0.8, "lam": 0.1}),
}
SHAPES = [(300, 7), (64, 128), (16, 1000), (4, 4096)]
# (y, gradient) absolute tolerances against the float64 reference. Half dtypes: the kernels
# compute in float32 and round once, so one rounding step of the dtype.
TOLERANCE = {
    torch.float64: (1e-10, 1e-8),
    torch.float32: (1e-5, 1e-3),
    torch.bfloat16: (torch.finfo(torch.bfloat16).eps, 3e-2),
    torch.float16: (torch.finfo(torch.float16).eps, 1e-2),
}


def case(seed, rows, d, dtype, masked=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d, generator=g, dtype=torch.float64).mul(2).to(dtype)
    mask = torch.rand(rows, d, generator=g) > 0.3
    mask[:, 0] = True
    grad = torch.randn(rows, d, generator=g, dtype=torch.float64).to(dtype)
    return x, (mask if masked else None), grad


def run(backend, name, params, x, mask, grad, device):
    xr = x.to(device).clone().requires_grad_()
    mask = None if mask is None else mask.to(device)
    with mappings.backend(backend):
        y = getattr(mappings, name)(xr, mask=mask, **params)
        y.backward(grad.to(device))
    return y.detach(), xr.grad


def reference(name, params, x, mask, grad):
    """The pure-torch reference on the CPU in float64, on the same (rounded) inputs."""
    return run("reference", name, params, x.double(), mask, grad.double(), "cpu")


def check_against_reference(key, x, mask, grad, dtype):
    name, params = CASES[key]
    y, g = run("triton", name, params, x, mask, grad, "cuda")
    assert y.dtype == dtype and g.dtype == dtype and y.is_cuda
    y_ref, g_ref = reference(name, params, x, mask, grad)
    atol_y, atol_g = TOLERANCE[dtype]
    if name == "oscarmax" and dtype == torch.float32:
        # the OSCAR prox adds lam * (rank - 1) to the sorted scores / gamma: its intermediates
        # reach lam * d / gamma (512 at d = 4096) and float32 rounds them to 6e-8 of that (seen
        # on an H200: 2.8e-5 at d = 4096, where torch's float32 reference is within 6e-6 and
        # the CPU kernel, summing in double, within 7e-6)
        scale = 1.0 + params["lam"] * x.shape[-1] / params["gamma"] / 64
        atol_y, atol_g = atol_y * scale, atol_g * scale
    torch.testing.assert_close(y.cpu().double(), y_ref, rtol=0, atol=atol_y)
    torch.testing.assert_close(g.cpu().double(), g_ref, rtol=atol_g, atol=atol_g)
    if mask is not None:
        assert (y.cpu()[~mask] == 0).all() and (g.cpu()[~mask] == 0).all()
    if dtype == torch.float64:
        assert torch.equal(y.cpu() > 0, y_ref > 0)  # the same supports


@pytest.mark.parametrize("key", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_cuda_matches_the_float64_reference(key, dtype, shape):
    x, mask, grad = case(list(CASES).index(key) + shape[1], *shape, dtype)
    check_against_reference(key, x, mask, grad, dtype)


@pytest.mark.parametrize("key", list(CASES))
def test_cuda_float32_without_a_mask(key):
    x, mask, grad = case(3, 64, 128, torch.float32, masked=False)
    check_against_reference(key, x, mask, grad, torch.float32)


@pytest.mark.parametrize("key", list(CASES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_cuda_half_precision_computes_in_float32(key, dtype):
    x, mask, grad = case(5, 64, 128, dtype)
    check_against_reference(key, x, mask, grad, dtype)


@pytest.mark.parametrize("key", list(CASES))
def test_cuda_tied_scores_and_empty_rows(key):
    name, params = CASES[key]
    x, mask, grad = case(7, 6, 300, torch.float64)
    x[1::2] = x[1::2].round()  # many tied scores
    mask[4] = False  # a row with no unmasked position
    xr = x.cuda().requires_grad_()
    y = getattr(mappings, name)(xr, mask=mask.cuda(), empty="zero", **params)
    y.backward(grad.cuda())
    assert (y[4] == 0).all() and (xr.grad[4] == 0).all()
    keep = [0, 1, 2, 3, 5]
    y_ref, _ = reference(name, params, x[keep], mask[keep], grad[keep])
    torch.testing.assert_close(y.detach().cpu()[keep], y_ref, rtol=0, atol=1e-10)


def test_cuda_tensor_alpha_per_row_with_its_gradient():
    x, mask, grad = case(3, 4, 200, torch.float64)
    alpha = torch.tensor([1.2, 1.5, 1.8, 2.5], dtype=torch.float64).view(4, 1)
    out = {}
    for backend, device in (("triton", "cuda"), ("reference", "cpu")):
        xr = x.to(device).requires_grad_()
        ar = alpha.to(device).requires_grad_()
        with mappings.backend(backend):
            y = mappings.entmax(xr, mask=mask.to(device), alpha=ar)
            y.backward(grad.to(device))
        out[backend] = [t.detach().cpu() for t in (y, xr.grad, ar.grad)]
    for a, b in zip(out["triton"], out["reference"], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9)


@pytest.mark.parametrize("key", list(CASES))
def test_cuda_gradcheck_float64(key):
    name, params = CASES[key]
    x = torch.tensor(
        [[0.9, 0.1, -0.35, 0.5, -1.7], [0.2, 0.05, -0.6, 0.4, 0.33]], dtype=torch.float64
    )
    mask = torch.tensor([[True, True, True, True, True], [True, False, True, True, True]])
    x, mask = x.cuda().requires_grad_(), mask.cuda()
    with mappings.backend("triton"):
        assert torch.autograd.gradcheck(
            lambda s: getattr(mappings, name)(s, mask=mask, **params),
            (x,),
            eps=1e-6,
            atol=1e-7,
        )


def test_cuda_gradcheck_tensor_alpha():
    x = torch.tensor([[0.9, 0.1, -0.35, 0.5, -1.7]], dtype=torch.float64, device="cuda")
    alpha = torch.tensor([[1.4]], dtype=torch.float64, device="cuda")
    with mappings.backend("triton"):
        assert torch.autograd.gradcheck(
            lambda s, a: mappings.entmax(s, alpha=a),
            (x.requires_grad_(), alpha.requires_grad_()),
            eps=1e-6,
            atol=1e-7,
        )


@pytest.mark.parametrize("key", list(CASES))
def test_cuda_forward_backward_never_synchronizes(key):
    name, params = CASES[key]
    x, mask, grad = (None if t is None else t.cuda() for t in case(9, 64, 512, torch.float32))
    getattr(mappings, name)(x, mask=mask, **params)  # warm-up: compile, cache parameters
    xr = x.clone().requires_grad_()
    alpha = torch.full((64, 1), 1.3, device="cuda", requires_grad=True)
    torch.cuda.set_sync_debug_mode("error")
    try:
        getattr(mappings, name)(xr, mask=mask, **params).backward(grad)
        if name == "entmax":
            mappings.entmax(xr, mask=mask, alpha=alpha).backward(grad)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("key", list(CASES))
def test_cuda_sync_checks_raise_the_cpu_paths_errors(key):
    name, params = CASES[key]
    x, mask, _ = (None if t is None else t.cuda() for t in case(4, 3, 40, torch.float32))
    with mappings.backend("triton"), mappings.sync_checks():
        bad = x.clone()
        bad[1, 0] = float("nan")
        with pytest.raises(ValueError, match="NaN or infinite"):
            getattr(mappings, name)(bad, mask=mask, **params)
        empty = mask.clone()
        empty[2] = False
        with pytest.raises(ValueError, match="no unmasked position"):
            getattr(mappings, name)(x, mask=empty, **params)
        bad[1, 0], mask[1, 0] = float("nan"), False  # a masked NaN is never read
        assert torch.isfinite(getattr(mappings, name)(bad, mask=mask, **params)).all()


def test_cuda_invalid_rows_fail_asynchronously_without_sync_checks():
    # a device-side assertion is fatal to the CUDA context: observe it in a child process
    program = textwrap.dedent(
        """
        import torch
        from regattn import mappings
        x = torch.randn(4, 16, device="cuda")
        x[2, 3] = float("nan")
        y = mappings.sparsemax(x)  # returns at once: the flag is checked on the device
        print("launched", flush=True)
        torch.cuda.synchronize()
        print("not reached", flush=True)
        """
    )
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    done = children.run([sys.executable, "-c", program], timeout=300, env=env)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "launched" in done.stdout and "not reached" not in done.stdout
    assert "device-side assert" in done.stderr or "NaN or infinite" in done.stderr, done.stderr


def test_cuda_row_longer_than_a_block_takes_the_reference_path(monkeypatch):
    monkeypatch.setattr(_kernels, "_warned", set())
    x, mask, grad = case(8, 2, _kernels.TRITON_MAX_D + 1, torch.float64)
    with pytest.warns(RuntimeWarning, match=f"longer than {_kernels.TRITON_MAX_D}"):
        y, g = run("triton", "sparsemax", {}, x, mask, grad, "cuda")
    y_ref, g_ref = reference("sparsemax", {}, x, mask, grad)
    torch.testing.assert_close(y.cpu(), y_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(g.cpu(), g_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("name", "params"), ORACLE_CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_cuda_kernel_solves_the_defining_problem(name, params, kind):
    np = pytest.importorskip("numpy")
    pytest.importorskip("cvxpy", reason="the oracles need cvxpy")
    from mapping_oracles import oracle
    from test_mappings_oracle import ATOL

    scores, mask = oracle_problem(kind)
    got = getattr(mappings, name)(
        torch.from_numpy(scores).cuda(), mask=torch.from_numpy(mask).cuda(), **params
    )
    expected = np.stack(
        [oracle(name, s, mask=m, **params) for s, m in zip(scores, mask, strict=True)]
    )
    np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=0, atol=ATOL[name])
