"""The Triton kernels of fusedmax and oscarmax (and the group averaging of their backward),
run in Triton's interpreter on CPU tensors, against the compiled CPU kernels and the
pure-torch reference: values, supports, groups (up to splits among equal values), masks,
gamma, lam = 0, ties, float32, gradients, validation and no host-device synchronization.
Small shapes: the interpreter runs each program, and the prox's scalar loops, in Python.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from test_triton_kernels import RecordSyncs, case  # noqa: E402

from regattn import mappings  # noqa: E402
from regattn.mappings import _kernels, fused, oscar  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:divide by zero:RuntimeWarning",
    "ignore:invalid value:RuntimeWarning",
    "ignore:overflow encountered:RuntimeWarning",
)

if not _kernels.triton_interpreting():
    pytest.skip("TRITON_INTERPRET is set to 0", allow_module_level=True)

ROWS = {"fusedmax": fused.fusedmax_rows, "oscarmax": oscar.oscarmax_rows}
PROX = {
    "fusedmax": fused.prox_tv1d_rows_reference,
    "oscarmax": oscar.prox_pairwise_max_rows_reference,
}


def forward(backend, name, x, mask, gamma, lam):
    with mappings.backend(backend):
        y, group = ROWS[name](x, mask, gamma, lam)
    return y, group.long()


def prox_values(name, x, mask, gamma, lam):
    """The prox's values on (x - max) / gamma (reference), to tell tied groups apart."""
    top = (x if mask is None else x.masked_fill(~mask, float("-inf"))).amax(-1, keepdim=True)
    v = (x - top) / gamma
    return PROX[name](v if mask is None else v.masked_fill(~mask, 0.0), mask, lam)[0]


def same_partition_up_to_ties(z, a, b):
    """As in test_kernels_vs_reference: the partitions agree except for splits among equal z."""
    same_a, same_b = a.unsqueeze(-1) == a.unsqueeze(-2), b.unsqueeze(-1) == b.unsqueeze(-2)
    tie = (z.unsqueeze(-1) - z.unsqueeze(-2)).abs() <= 1e-12
    return bool(((same_a == same_b) | tie).all())


def run(backend, name, params, x, mask, grad):
    xr = x.clone().requires_grad_()
    with mappings.backend(backend):
        y = getattr(mappings, name)(xr, mask=mask, **params)
        y.backward(grad)
    return y.detach(), xr.grad


@pytest.mark.parametrize("name", list(ROWS))
@pytest.mark.parametrize(
    ("gamma", "lam", "masked", "ties"),
    [(1.0, 0.1, True, False), (0.7, 0.3, False, False), (1.3, 0.05, True, True)],
)
def test_grouped_triton_matches_cpu_kernels_and_reference(name, gamma, lam, masked, ties):
    x, mask, grad = case(21 + ties, rows=5, d=24)
    if ties:
        x = x.round()
    mask = mask if masked else None
    y_t, group_t = forward("triton", name, x, mask, gamma, lam)
    z = prox_values(name, x, mask, gamma, lam)
    valid = torch.ones_like(x, dtype=torch.bool) if mask is None else mask
    for other in ("cpu", "reference"):
        y_o, group_o = forward(other, name, x, mask, gamma, lam)
        torch.testing.assert_close(y_t, y_o, rtol=0, atol=1e-12)
        assert torch.equal(y_t > 0, y_o > 0)
        assert torch.equal(group_t < 0, group_o < 0)
        assert same_partition_up_to_ties(z, group_t, group_o)
        if not ties:
            assert torch.equal(
                group_t.unsqueeze(-1) == group_t.unsqueeze(-2),
                group_o.unsqueeze(-1) == group_o.unsqueeze(-2),
            )
    assert (y_t[~valid] == 0).all() and (group_t[~valid] == -1).all()
    torch.testing.assert_close(y_t.sum(-1), torch.ones(len(x), dtype=x.dtype))
    params = {"gamma": gamma, "lam": lam}
    g_t = run("triton", name, params, x, mask, grad)[1]
    for other in ("cpu", "reference"):
        torch.testing.assert_close(
            g_t, run(other, name, params, x, mask, grad)[1], rtol=0, atol=1e-10
        )


@pytest.mark.parametrize("name", list(ROWS))
def test_grouped_triton_lam_zero_is_sparsemax_and_float32(name):
    x, mask, grad = case(31, rows=4, d=16)
    y, group = forward("triton", name, x, mask, 0.8, 0.0)
    with mappings.backend("triton"):
        torch.testing.assert_close(
            y, mappings.sparsemax(x, mask=mask, gamma=0.8), rtol=0, atol=1e-12
        )
    x32 = x.float()
    y32 = forward("triton", name, x32, mask, 0.8, 0.2)[0]
    assert y32.dtype == torch.float32
    torch.testing.assert_close(y32, forward("cpu", name, x32, mask, 0.8, 0.2)[0], rtol=0, atol=2e-6)
    g32 = run("triton", name, {"lam": 0.2}, x32, mask, grad.float())[1]
    torch.testing.assert_close(
        g32, run("cpu", name, {"lam": 0.2}, x32, mask, grad.float())[1], rtol=0, atol=2e-5
    )


def test_fusedmax_triton_left_and_right_padding_agree():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 9, generator=g, dtype=torch.float64)
    pad = torch.zeros(3, 4, dtype=torch.float64)
    on, off = torch.ones(3, 9, dtype=torch.bool), torch.zeros(3, 4, dtype=torch.bool)
    left = forward("triton", "fusedmax", torch.cat([pad, x], 1), torch.cat([off, on], 1), 1, 0.2)
    right = forward("triton", "fusedmax", torch.cat([x, pad], 1), torch.cat([on, off], 1), 1, 0.2)
    torch.testing.assert_close(left[0][:, 4:], right[0][:, :9], rtol=0, atol=0)
    assert torch.equal(left[1][:, 4:], right[1][:, :9])


@pytest.mark.parametrize("name", list(ROWS))
def test_grouped_triton_long_row_with_ties(name):
    x, mask, _ = case(41, rows=2, d=200)
    x[1] = x[1].mul(2).round()  # many tied scores
    y_t, group_t = forward("triton", name, x, mask, 1.0, 0.02)
    y_c, group_c = forward("cpu", name, x, mask, 1.0, 0.02)
    torch.testing.assert_close(y_t, y_c, rtol=0, atol=1e-12)
    assert same_partition_up_to_ties(prox_values(name, x, mask, 1.0, 0.02), group_t, group_c)


@pytest.mark.parametrize("name", list(ROWS))
def test_grouped_triton_gradcheck(name):
    x = torch.tensor([[0.9, 0.1, -0.35, 0.5, -1.7, 0.45], [0.2, 0.05, -0.6, 0.4, 0.33, 0.3]])
    x = x.double().requires_grad_()
    mask = torch.tensor([[True] * 6, [True, False, True, True, True, True]])
    with mappings.backend("triton"):
        assert torch.autograd.gradcheck(
            lambda s: getattr(mappings, name)(s, mask=mask, lam=0.1),
            (x,),
            eps=1e-6,
            atol=1e-7,
            fast_mode=True,
        )


@pytest.mark.parametrize("name", list(ROWS))
def test_grouped_triton_flags_bad_rows_and_empty_rows(name):
    x, mask, grad = case(4, rows=3, d=6)
    x[1, 2] = float("nan")
    mask[1, 2] = True
    with mappings.backend("triton"):
        with pytest.raises(RuntimeError, match="NaN or infinite"):
            getattr(mappings, name)(x, mask=mask)
        with mappings.sync_checks(), pytest.raises(ValueError, match="NaN or infinite"):
            getattr(mappings, name)(x, mask=mask)
        with pytest.raises(RuntimeError, match="max - min overflows"):
            getattr(mappings, name)(torch.tensor([[3e38, -3e38, 0.0]]))
        mask[1, 2] = False  # a masked NaN is never read
        getattr(mappings, name)(x, mask=mask)
        mask[2] = False
        xr = x.clone().requires_grad_()
        y = getattr(mappings, name)(xr, mask=mask, empty="zero")
        y.backward(grad)
        assert (y[2] == 0).all() and (xr.grad[2] == 0).all()


@pytest.mark.parametrize("name", list(ROWS))
def test_grouped_triton_path_reads_no_device_value_on_the_host(name, monkeypatch):
    x, mask, grad = case(9, rows=2, d=8)
    from regattn.mappings import _triton

    # as in test_triton_kernels: the interpreter copies tensors to numpy to run the programs
    # (on a GPU the launch reads nothing); record only what the path around the kernels does
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
    xr = x.clone().requires_grad_()
    with mappings.backend("triton"):
        getattr(mappings, name)(x, mask=mask)  # the first call caches the parameter tensors
        recorder = RecordSyncs()
        with recorder:
            y = getattr(mappings, name)(xr, mask=mask)
            y.backward(grad)
    assert recorder.calls == []
