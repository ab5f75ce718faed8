"""-inf scores are masked positions (issue #50): the masking idiom of torch.softmax, entmax and
fairseq, `scores.masked_fill(~mask, -inf)`, gives what mask= gives, on every backend (the
compiled CPU kernels, the torch reference and Triton in its interpreter), for every mapping
and a learned (tensor) alpha: exact zeros, zero gradient, combination with mask= by AND, the
`empty` policy for a row of -inf only, and +inf and NaN still errors.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from mapping_helpers import DEFAULTS, NAMES, apply  # noqa: E402

from regattn import mappings  # noqa: E402
from regattn.mappings import _kernels  # noqa: E402

# the interpreter evaluates both branches of tl.where in numpy
pytestmark = pytest.mark.filterwarnings(
    "ignore:divide by zero:RuntimeWarning",
    "ignore:invalid value:RuntimeWarning",
    "ignore:overflow encountered:RuntimeWarning",
)


def _triton_available():
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return _kernels.triton_interpreting()


BACKENDS = [
    "cpu",
    "reference",
    pytest.param(
        "triton",
        marks=pytest.mark.skipif(
            not _triton_available(), reason="triton is not installed or TRITON_INTERPRET=0"
        ),
    ),
]


def _case(seed, rows=3, d=6):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d, generator=g, dtype=torch.float64) * 2
    mask = torch.rand(rows, d, generator=g) > 0.35
    mask[:, 1] = True
    return x, mask


def _run(backend, name, x, mask=None, **params):
    xr = x.clone().requires_grad_()
    with mappings.backend(backend):
        y = apply(name, xr, mask=mask, **params)
        grad = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
        y.backward(grad)
    return y.detach(), xr.grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_neg_inf_scores_equal_the_mask(backend, name):
    x, mask = _case(NAMES.index(name))
    y_mask, g_mask = _run(backend, name, x, mask)
    y_inf, g_inf = _run(backend, name, x.masked_fill(~mask, float("-inf")))
    torch.testing.assert_close(y_inf, y_mask, rtol=0, atol=1e-12)
    torch.testing.assert_close(g_inf, g_mask, rtol=0, atol=1e-12)
    assert (y_inf[~mask] == 0).all() and (g_inf[~mask] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_neg_inf_combines_with_mask(backend, name):
    """mask= and -inf each remove some positions: the union is removed."""
    x, mask = _case(10 + NAMES.index(name))
    holes = torch.zeros_like(mask)
    holes[:, 3] = True
    holes[:, 1] = False
    y, g = _run(backend, name, x.masked_fill(holes, float("-inf")), mask)
    y_both, g_both = _run(backend, name, x, mask & ~holes)
    torch.testing.assert_close(y, y_both, rtol=0, atol=1e-12)
    torch.testing.assert_close(g, g_both, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_learned_alpha_with_neg_inf(backend):
    x, mask = _case(20, rows=4)
    alpha = torch.tensor([1.2, 1.5, 1.8, 1.35], dtype=torch.float64).view(4, 1)

    def run(scores, m):
        xr, ar = scores.clone().requires_grad_(), alpha.clone().requires_grad_()
        with mappings.backend(backend):
            y = mappings.entmax(xr, mask=m, alpha=ar)
            y.backward(torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y))
        return y.detach(), xr.grad, ar.grad

    got = run(x.masked_fill(~mask, float("-inf")), None)
    expected = run(x, mask)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_row_of_only_neg_inf_follows_the_empty_policy(backend, name):
    x, _ = _case(30)
    x[1] = float("-inf")
    with mappings.backend(backend):
        y, g = _run(backend, name, x, empty="zero")
        assert (y[1] == 0).all() and (g[1] == 0).all()
        torch.testing.assert_close(y.sum(-1)[[0, 2]], torch.ones(2, dtype=x.dtype))
        with mappings.sync_checks(), pytest.raises(ValueError, match="no unmasked position"):
            apply(name, x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [float("inf"), float("nan")], ids=["+inf", "nan"])
@pytest.mark.parametrize("name", NAMES)
def test_plus_inf_and_nan_stay_errors_beside_neg_inf(backend, name, bad):
    x, _ = _case(40)
    x[0, 2] = float("-inf")
    x[2, 4] = bad
    expected = "NaN" if bad != bad else "infinite"
    with mappings.backend(backend), mappings.sync_checks():
        with pytest.raises(ValueError, match=expected):
            apply(name, x)


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_with_neg_inf_entries(name):
    """float64 gradcheck with -inf entries (their finite-difference derivative is 0)."""
    g = torch.Generator().manual_seed(50 + NAMES.index(name))
    x = torch.randn(3, 7, generator=g, dtype=torch.float64) * 1.5
    x[0, 2] = x[1, 0] = x[1, 6] = x[2, 3] = float("-inf")
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[2, 5] = False
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda s: apply(name, s, mask=mask), (x,), eps=1e-7, atol=1e-6)


def test_gradcheck_learned_alpha_with_neg_inf():
    g = torch.Generator().manual_seed(60)
    x = torch.randn(3, 6, generator=g, dtype=torch.float64)
    x[0, 1] = x[2, 4] = float("-inf")
    alpha = torch.tensor([[1.3], [1.6], [1.9]], dtype=torch.float64)
    x.requires_grad_()
    alpha.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda s, a: mappings.entmax(s, alpha=a), (x, alpha), eps=1e-7, atol=1e-6
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_half_precision_neg_inf(dtype):
    x, mask = _case(70)
    for name in NAMES:
        y = apply(name, x.to(dtype).masked_fill(~mask, float("-inf")))
        assert y.dtype == dtype and (y[~mask] == 0).all()
        torch.testing.assert_close(y, apply(name, x.to(dtype), mask=mask), rtol=0, atol=0)


def test_modules_and_broadcast_mask_take_neg_inf():
    """An nn.Module (build), -inf along a non-last dim, and a lower-rank mask broadcast."""
    x, _ = _case(80, rows=4, d=5)
    scores = x.view(2, 2, 5).transpose(1, 2).contiguous()  # normalize along dim 1
    scores[0, 3, :] = float("-inf")
    key_mask = torch.tensor([True, True, False, True, True]).view(1, 5, 1)
    for name in NAMES:
        module = mappings.build(name, **DEFAULTS[name])
        y = module(scores, dim=1, mask=key_mask)
        combined = key_mask & (scores != float("-inf"))
        torch.testing.assert_close(y, module(scores.masked_fill(~combined, 0), 1, combined))
        assert (y[~combined] == 0).all()


@pytest.mark.parametrize("alpha", [1.25, 1.5, 1.75, 2.25])
def test_float32_entmax_of_masked_rows_is_that_of_the_shorter_rows_bit_for_bit(alpha):
    """entmax's own test_mask compares -inf-padded rows with the rows cut short to 1e-8 in
    float32: the CPU kernel runs a masked row of up to 64 values through the register
    kernel of unmasked rows, so the two agree bit for bit (the scalar iteration differed by
    an ulp)."""
    g = torch.Generator().manual_seed(42)
    x = torch.randn(500, 10, generator=g)
    x[:, 6:] = float("-inf")
    short = x[:, :6].contiguous()
    got = mappings.entmax(x, alpha=alpha)
    assert torch.equal(got[:, :6], mappings.entmax(short, alpha=alpha))
    mask = torch.ones(10, dtype=torch.bool)
    mask[6:] = False
    assert torch.equal(mappings.entmax(x.masked_fill(~mask, 0), mask=mask, alpha=alpha), got)
