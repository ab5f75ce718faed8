"""The Triton kernels, run in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1, set
before triton is imported), against the compiled CPU kernels and the pure-torch reference:
forward, backward, masks, dtypes, dalpha, validation without host-device synchronization,
and the fallback for rows longer than one block. Small shapes: the interpreter runs each
program in Python.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from mapping_helpers import TRITON_CASES  # noqa: E402

from regattn import mappings  # noqa: E402
from regattn.mappings import _kernels  # noqa: E402

# the interpreter evaluates both branches of tl.where in numpy
pytestmark = pytest.mark.filterwarnings(
    "ignore:divide by zero:RuntimeWarning",
    "ignore:invalid value:RuntimeWarning",
    "ignore:overflow encountered:RuntimeWarning",
)

if not _kernels.triton_interpreting():
    pytest.skip("TRITON_INTERPRET is set to 0", allow_module_level=True)

CASES = TRITON_CASES


def case(seed, rows=4, d=13, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d, generator=g, dtype=torch.float64).mul(2).to(dtype)
    mask = torch.rand(rows, d, generator=g) > 0.3
    mask[:, 0] = True
    grad = torch.randn(rows, d, generator=g, dtype=torch.float64).to(dtype)
    return x, mask, grad


def run(backend, name, params, x, mask, grad):
    xr = x.clone().requires_grad_()
    with mappings.backend(backend):
        y = getattr(mappings, name)(xr, mask=mask, **params)
        y.backward(grad)
    return y.detach(), xr.grad


@pytest.mark.parametrize("key", list(CASES))
@pytest.mark.parametrize(
    ("masked", "dtype"), [(True, torch.float32), (False, torch.float64), (True, torch.float64)]
)
def test_triton_matches_cpu_kernels_and_reference(key, masked, dtype):
    name, params = CASES[key]
    x, mask, grad = case(list(CASES).index(key) * 4 + masked, dtype=dtype)
    mask = mask if masked else None
    y_t, g_t = run("triton", name, params, x, mask, grad)
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    for other in ("cpu", "reference"):
        y_o, g_o = run(other, name, params, x, mask, grad)
        torch.testing.assert_close(y_t, y_o, rtol=0, atol=tol)
        torch.testing.assert_close(g_t, g_o, rtol=0, atol=tol * 10)
        assert torch.equal(y_t > 0, y_o > 0) or dtype == torch.float32
    if mask is not None:
        assert (y_t[~mask] == 0).all()


@pytest.mark.parametrize("key", ["sparsemax", "entmax15", "sq_pnorm_max"])
def test_triton_long_row_within_block_and_ties(key):
    name, params = CASES[key]
    x, mask, grad = case(11, rows=2, d=300)
    x[1] = x[1].round()  # tied scores
    y_t, g_t = run("triton", name, params, x, mask, grad)
    y_c, g_c = run("cpu", name, params, x, mask, grad)
    torch.testing.assert_close(y_t, y_c, rtol=0, atol=1e-12)
    torch.testing.assert_close(g_t[0], g_c[0], rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("key", ["softmax", "sparsemax", "entmax13"])
def test_triton_half_precision_computes_in_float32(key, dtype):
    name, params = CASES[key]
    x, mask, grad = case(5, dtype=dtype)
    y_t, g_t = run("triton", name, params, x, mask, grad)
    y_c, g_c = run("cpu", name, params, x, mask, grad)
    assert y_t.dtype == dtype and g_t.dtype == dtype
    # both round a float32 result: equal up to one rounding step of the half dtype
    torch.testing.assert_close(y_t, y_c, rtol=0, atol=torch.finfo(dtype).eps)
    torch.testing.assert_close(g_t.float(), g_c.float(), rtol=1e-2, atol=1e-2)


def test_triton_tensor_alpha_per_row_with_its_gradient():
    x, mask, grad = case(3, rows=4)
    alpha = torch.tensor([1.2, 1.5, 1.8, 2.5], dtype=torch.float64).view(4, 1)
    out = {}
    for backend in ("triton", "cpu", "reference"):
        xr, ar = x.clone().requires_grad_(), alpha.clone().requires_grad_()
        with mappings.backend(backend):
            y = mappings.entmax(xr, mask=mask, alpha=ar)
            y.backward(grad)
        out[backend] = (y.detach(), xr.grad, ar.grad)
    for other in ("cpu", "reference"):
        for a, b in zip(out["triton"], out[other], strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("key", ["softmax", "sparsemax", "entmax15", "entmax13", "sq_pnorm_max"])
def test_triton_gradcheck_float64(key):
    name, params = CASES[key]
    x = torch.tensor([[0.9, 0.1, -0.35, 0.5, -1.7], [0.2, 0.05, -0.6, 0.4, 0.33]])
    x = x.double().requires_grad_()
    mask = torch.tensor([[True, True, True, True, True], [True, False, True, True, True]])
    with mappings.backend("triton"):
        assert torch.autograd.gradcheck(
            lambda s: getattr(mappings, name)(s, mask=mask, **params),
            (x,),
            eps=1e-6,
            atol=1e-7,
            fast_mode=True,
        )


def test_triton_gradcheck_tensor_alpha():
    x = torch.tensor([[0.9, 0.1, -0.35, 0.5, -1.7]], dtype=torch.float64, requires_grad=True)
    alpha = torch.tensor([[1.4]], dtype=torch.float64, requires_grad=True)
    with mappings.backend("triton"):
        assert torch.autograd.gradcheck(
            lambda s, a: mappings.entmax(s, alpha=a),
            (x, alpha),
            eps=1e-6,
            atol=1e-7,
            fast_mode=True,
        )


@pytest.mark.parametrize("key", ["softmax", "sparsemax", "entmax13", "sq_pnorm_max"])
def test_triton_empty_rows(key):
    name, params = CASES[key]
    x, mask, grad = case(2, rows=3)
    mask[1] = False
    xr = x.clone().requires_grad_()
    with mappings.backend("triton"):
        y = getattr(mappings, name)(xr, mask=mask, empty="zero", **params)
        y.backward(grad)
        assert (y[1] == 0).all() and (xr.grad[1] == 0).all()
        torch.testing.assert_close(y.sum(-1)[[0, 2]], torch.ones(2, dtype=x.dtype))
        with pytest.raises(RuntimeError, match="no unmasked position"):
            getattr(mappings, name)(x, mask=mask, **params)
        with mappings.sync_checks(), pytest.raises(ValueError, match="no unmasked position"):
            getattr(mappings, name)(x, mask=mask, **params)


@pytest.mark.parametrize("key", ["softmax", "sparsemax", "entmax13", "sq_pnorm_max"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_triton_flags_non_finite_scores(key, bad):
    name, params = CASES[key]
    x, mask, _ = case(4, rows=2, d=6)
    x[1, 0] = bad
    with mappings.backend("triton"):
        with pytest.raises(RuntimeError, match="NaN or infinite"):
            getattr(mappings, name)(x, mask=mask, **params)
        with mappings.sync_checks(), pytest.raises(ValueError, match="NaN or infinite"):
            getattr(mappings, name)(x, mask=mask, **params)
        x[1, 0] = float("nan")
        mask[1, 0] = False  # a masked NaN is never read
        getattr(mappings, name)(x, mask=mask, **params)


def test_triton_flags_spread_overflow_and_bad_alpha():
    x = torch.tensor([[3e38, -3e38, 0.0]])
    with mappings.backend("triton"):
        with pytest.raises(RuntimeError, match="max - min overflows"):
            mappings.sparsemax(x)
        with mappings.sync_checks(), pytest.raises(ValueError, match="max - min overflows"):
            mappings.sparsemax(x)
        alpha = torch.tensor([[1.5], [0.5]])
        with pytest.raises(RuntimeError, match="alpha must be > 1"):
            mappings.entmax(torch.randn(2, 4), alpha=alpha)
        with mappings.sync_checks(), pytest.raises(ValueError, match="alpha must be > 1"):
            mappings.entmax(torch.randn(2, 4), alpha=alpha)


def test_row_longer_than_a_block_takes_the_reference_path_with_one_warning(monkeypatch):
    monkeypatch.setattr(_kernels, "_warned", set())
    monkeypatch.setattr(_kernels, "TRITON_MAX_D", 64)  # the limit is 4096; keep the test small
    x, mask, grad = case(8, rows=2, d=100)
    with pytest.warns(RuntimeWarning, match="longer than 64"):
        y_t, g_t = run("triton", "sparsemax", {}, x, mask, grad)
    y_r, g_r = run("reference", "sparsemax", {}, x, mask, grad)
    torch.testing.assert_close(y_t, y_r, rtol=0, atol=0)
    torch.testing.assert_close(g_t, g_r, rtol=0, atol=0)
    assert _kernels.backend_for(torch.zeros(1, 64)) == "cpu"
    with mappings.backend("triton"):
        assert _kernels.backend_for(torch.zeros(1, 64)) == "triton"
        assert _kernels.backend_for(torch.zeros(1, 65)) == "reference"


class RecordSyncs(TorchDispatchMode):
    """Records the aten ops that read a tensor's value on the host."""

    SYNCING = ("aten._local_scalar_dense", "aten.item", "aten.is_nonzero", "aten.equal")

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func.overloadpacket) in self.SYNCING or "nonzero" in str(func):
            self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("key", ["softmax", "sparsemax", "entmax15", "entmax13", "sq_pnorm_max"])
def test_triton_path_reads_no_device_value_on_the_host(key, monkeypatch):
    name, params = CASES[key]
    x, mask, grad = case(9, rows=2, d=8)
    # The interpreter itself copies tensors to numpy to run the programs (on a GPU the launch
    # reads nothing); record only what the dispatch path around the kernels does.
    from regattn.mappings import _triton

    for kernel_name in [k for k in vars(_triton) if k.endswith(("_fwd", "_bwd"))]:
        kernel = getattr(_triton, kernel_name)

        class Quiet:
            def __init__(self, k):
                self.k = k

            def __getitem__(self, grid):
                launch = self.k[grid]

                def call(*args, **kw):
                    with torch.utils._python_dispatch._disable_current_modes():
                        return launch(*args, **kw)

                return call

        monkeypatch.setattr(_triton, kernel_name, Quiet(kernel))
    alpha = torch.full((2, 1), 1.3, dtype=x.dtype, requires_grad=True)
    xr = x.clone().requires_grad_()
    with mappings.backend("triton"):
        # the first call creates the cached parameter tensors
        getattr(mappings, name)(x, mask=mask, **params)
        recorder = RecordSyncs()
        with recorder:
            y = getattr(mappings, name)(xr, mask=mask, **params)
            y.backward(grad)
            if name == "entmax":
                mappings.entmax(xr, mask=mask, alpha=alpha).backward(grad)
    assert recorder.calls == []
