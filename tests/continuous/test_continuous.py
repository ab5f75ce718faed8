"""regattn.continuous against quadrature oracles (continuous_oracles.py shares no code with
the closed forms), gradcheck, the densities' defining properties, limits, padding, dtypes and
every bad input."""

import math

import pytest
import torch
from continuous_oracles import (
    dpdf_dmu,
    dpdf_dsigma_sq,
    expected_rbf,
    integration_range,
    parabola_half_width,
    quad,
    rbf,
)

from regattn import continuous
from regattn.continuous import (
    DENSITIES,
    ContinuousAttention,
    GaussianBasis,
    LearnedDensityHead,
    continuous_attention,
    density_cdf,
    density_from_attention,
    density_pdf,
    density_support,
    expected_basis,
    positions,
    ridge_smoother,
    token_masses,
)

F64 = torch.float64
# (mu, sigma^2): narrow to wide, inside and outside [0, 1]
PARAMS = [(0.3, 0.01), (0.9, 0.2), (0.5, 1e-5), (0.1, 3.0), (0.02, 1e-3), (1.3, 0.05)]


def _t(*values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def _close(closed, oracle, scale):
    # within 1e-8 of the largest entry of the vector (tail entries, ~1e-12 of it, are compared
    # in absolute terms), with quad's own error estimate well below that
    value, error = oracle
    assert error <= 1e-9 * scale, oracle
    assert abs(closed - value) <= 1e-8 * scale, (closed, value)


@pytest.mark.parametrize("density", DENSITIES)
@pytest.mark.parametrize("mu,sigma_sq", PARAMS)
def test_expected_basis_and_jacobian_match_quadrature(density, mu, sigma_sq):
    basis = GaussianBasis(8)
    m, s = _t(mu).requires_grad_(), _t(sigma_sq).requires_grad_()
    r = expected_basis(m, s, basis, density)[0]
    oracle_r = [
        expected_rbf(density, mu, sigma_sq, c.item(), w.item())
        for c, w in zip(basis.centres, basis.widths, strict=True)
    ]
    scale = max(abs(v) for v, _ in oracle_r)
    for j in range(len(basis)):
        _close(r[j].item(), oracle_r[j], scale)
        g_mu, g_s = torch.autograd.grad(r[j], (m, s), retain_graph=True)
        c, w = basis.centres[j].item(), basis.widths[j].item()
        o_mu = expected_rbf(density, mu, sigma_sq, c, w, integrand=dpdf_dmu)
        o_s = expected_rbf(density, mu, sigma_sq, c, w, integrand=dpdf_dsigma_sq)
        _close(g_mu.item(), o_mu, scale / math.sqrt(sigma_sq))
        _close(g_s.item(), o_s, scale / sigma_sq)


@pytest.mark.parametrize("density", DENSITIES)
@pytest.mark.parametrize("mu,sigma_sq", PARAMS)
def test_density_integrates_to_one_on_its_support(density, mu, sigma_sq):
    m, s = _t(mu), _t(sigma_sq)
    lo, hi = integration_range(density, mu, sigma_sq)
    mass, error = quad(lambda t: density_pdf(_t(t), m, s, density).item(), lo, hi, mu)
    assert error < 1e-11 and mass == pytest.approx(1.0, abs=1e-10)
    assert density_cdf(_t(lo), m, s, density).item() == pytest.approx(0.0, abs=1e-12)
    assert density_cdf(_t(hi), m, s, density).item() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("mu,sigma_sq", PARAMS)
def test_truncated_parabola_support_edges(mu, sigma_sq):
    m, s = _t(mu), _t(sigma_sq)
    lo, hi = density_support(m, s, "truncated_parabola")
    a = (3 * sigma_sq / 2) ** (1 / 3)
    assert lo.item() == pytest.approx(mu - a, rel=1e-14, abs=1e-15)
    assert hi.item() == pytest.approx(mu + a, rel=1e-14, abs=1e-15)
    eps = 1e-6 * a
    for edge, inward in ((lo, eps), (hi, -eps)):
        assert density_pdf(edge - inward, m, s, "truncated_parabola").item() == 0.0
        assert density_pdf(edge + inward, m, s, "truncated_parabola").item() > 0.0
    assert density_support(m, s, "gaussian") == (-math.inf, math.inf)


@pytest.mark.parametrize("density", DENSITIES)
def test_gradcheck_float64(density):
    basis = GaussianBasis(7)
    gen = torch.Generator().manual_seed(0)
    mu = torch.rand(3, 2, generator=gen, dtype=F64).requires_grad_()
    sigma_sq = (0.001 + 0.1 * torch.rand(3, 2, generator=gen, dtype=F64)).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda m, s: expected_basis(m, s, basis, density), (mu, sigma_sq)
    )

    values = torch.randn(3, 2, 5, 4, generator=gen, dtype=F64, requires_grad=True)
    mask = torch.ones(3, 2, 5, dtype=torch.bool)
    mask[0, :, :2] = False
    mask[1, 1, 3:] = False
    assert torch.autograd.gradcheck(
        lambda v, m, s: continuous_attention(v, mask, m, s, basis, density).context,
        (values, mu, sigma_sq),
    )


@pytest.mark.parametrize("density", DENSITIES)
@pytest.mark.parametrize("mu", [0.0, 0.37, 1.0])
def test_narrow_density_gives_the_basis_at_mu(density, mu):
    basis = GaussianBasis(10)
    psi_at_mu = torch.tensor(
        [rbf(mu, c.item(), w.item()) for c, w in zip(basis.centres, basis.widths, strict=True)],
        dtype=F64,
    )
    errors = []
    for sigma_sq in (1e-2, 1e-4, 1e-6, 1e-8, 1e-10):
        r = expected_basis(_t(mu), _t(sigma_sq), basis, density)[0]
        errors.append((r - psi_at_mu).abs().max().item() / psi_at_mu.max().item())
    # r = psi(mu) + Var_p / 2 psi''(mu) + O(Var_p^2): the error falls as the density's variance,
    # sigma^2 for the Gaussian, a^2 / 5 ~ sigma^(4/3) for the parabola: by 100 and by
    # 100^(2/3) ~ 21.5 per step of sigma^2 / 100, down to sigma^2 = 1e-10 (no cancellation blow-up)
    step = 100.0 if density == "gaussian" else 100.0 ** (2 / 3)
    for coarse, fine in zip(errors[1:], errors[2:], strict=False):
        assert coarse / fine == pytest.approx(step, rel=0.1), errors
    assert errors[-1] < (1e-8 if density == "gaussian" else 1e-5), errors


def test_positions_ignore_padding_placement():
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], dtype=torch.bool)
    t = positions(mask)
    expected = torch.tensor([1 / 6, 1 / 2, 5 / 6])
    torch.testing.assert_close(t[0, :3], expected)
    torch.testing.assert_close(t[1, 2:], expected)
    torch.testing.assert_close(t[2], (torch.arange(5) + 0.5) / 5)
    assert t[0, 3:].eq(0).all() and t[1, :2].eq(0).all()


@pytest.mark.parametrize("density", DENSITIES)
def test_left_right_and_no_padding_agree(density):
    gen = torch.Generator().manual_seed(1)
    attention = ContinuousAttention(6, density).double()
    states = torch.randn(4, 3, generator=gen, dtype=F64)
    mu, sigma_sq = _t(0.4, 0.4, 0.4), _t(0.02, 0.02, 0.02)
    pad = torch.zeros(2, 3, dtype=F64)
    values = torch.stack([states.new_zeros(6, 3) for _ in range(3)])
    values[0, :4], values[1, 2:], values[2, :4] = states, states, states
    values[0, 4:] = 7.0  # garbage at padded positions must not matter
    values[1, :2] = pad - 3.0
    mask = torch.zeros(3, 6, dtype=torch.bool)
    mask[0, :4], mask[1, 2:], mask[2, :4] = True, True, True
    out = attention(values, mask, mu, sigma_sq, report_token_masses=True)
    unpadded = attention(
        states.unsqueeze(0), torch.ones(1, 4, dtype=torch.bool), mu[:1], sigma_sq[:1]
    )
    for row in range(3):
        torch.testing.assert_close(out.context[row], unpadded.context[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.weights[1, 2:], unpadded.weights[0])
    assert out.weights[0, 4:].eq(0).all() and out.weights[1, :2].eq(0).all()
    masses = token_masses(mask, mu, sigma_sq, density)
    torch.testing.assert_close(masses[1, 2:], masses[0, :4])
    torch.testing.assert_close(out.token_masses, masses)


def test_table_smoother_equals_the_direct_ridge_fit():
    attention = ContinuousAttention(5, "gaussian", ridge=0.03)
    mask = torch.tensor([[1, 1, 0, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1, 1], [1] * 7], dtype=torch.bool)
    direct = ridge_smoother(attention.basis, mask, 0.03)
    torch.testing.assert_close(attention.smoother(mask, F64), direct, rtol=1e-12, atol=1e-12)
    # a longer batch later grows the table; the earlier lengths still agree
    longer = torch.ones(1, 11, dtype=torch.bool)
    torch.testing.assert_close(
        attention.smoother(longer, F64), ridge_smoother(attention.basis, longer, 0.03)
    )
    torch.testing.assert_close(attention.smoother(mask, F64), direct, rtol=1e-12, atol=1e-12)
    # the rows of the last mask object are reused; another mask object of the same shape is not
    # mistaken for it
    assert attention.smoother(mask, F64) is attention.smoother(mask, F64)
    flipped = mask.flip(-1)
    torch.testing.assert_close(
        attention.smoother(flipped, F64), ridge_smoother(attention.basis, flipped, 0.03)
    )


@pytest.mark.parametrize("ridge", [0.0, 0.01, 1.0])
def test_value_function_is_the_ridge_regression(ridge):
    # B = V^T G must satisfy the normal equations (Psi^T Psi + ridge I) B^T = Psi^T V
    gen = torch.Generator().manual_seed(2)
    basis = GaussianBasis(6)
    mask = torch.ones(1, 9, dtype=torch.bool)
    values = torch.randn(9, 4, generator=gen, dtype=F64)
    psi = basis(positions(mask, F64))[0]
    b_t = ridge_smoother(basis, mask, ridge)[0].T @ values  # N x D
    lhs = (psi.T @ psi + ridge * torch.eye(6, dtype=F64)) @ b_t
    torch.testing.assert_close(lhs, psi.T @ values, rtol=1e-6, atol=1e-8)


def test_context_is_b_times_r():
    gen = torch.Generator().manual_seed(3)
    basis = GaussianBasis(4)
    mask = torch.ones(2, 5, dtype=torch.bool)
    values = torch.randn(2, 5, 3, generator=gen, dtype=F64)
    mu, sigma_sq = _t(0.2, 0.7), _t(0.05, 0.001)
    out = continuous_attention(values, mask, mu, sigma_sq, basis, "truncated_parabola")
    b = values.transpose(-1, -2) @ ridge_smoother(basis, mask, 0.01)  # D x N
    r = expected_basis(mu, sigma_sq, basis, "truncated_parabola")
    torch.testing.assert_close(out.context, (b @ r.unsqueeze(-1)).squeeze(-1))


@pytest.mark.parametrize("density", DENSITIES)
def test_float32_agrees_with_float64_on_any_batch_shape(density):
    gen = torch.Generator().manual_seed(4)
    attention = ContinuousAttention(16, density)
    values = torch.randn(2, 3, 4, 8, 5, generator=gen, dtype=F64)
    mask = torch.rand(2, 3, 4, 8, generator=gen) < 0.8
    mask[..., 0] = True
    mu = torch.rand(2, 3, 4, generator=gen, dtype=F64)
    sigma_sq = 1e-4 + 0.05 * torch.rand(2, 3, 4, generator=gen, dtype=F64)
    out64 = attention(values, mask, mu, sigma_sq)
    out32 = attention(values.float(), mask, mu.float(), sigma_sq.float())
    assert out32.context.dtype == torch.float32 and out32.context.shape == (2, 3, 4, 5)
    torch.testing.assert_close(out32.context.double(), out64.context, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_float32(dtype):
    gen = torch.Generator().manual_seed(6)
    attention = ContinuousAttention(16, "truncated_parabola")
    values = torch.randn(3, 7, 4, generator=gen)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mu, sigma_sq = torch.rand(3, generator=gen), 1e-3 + torch.rand(3, generator=gen) / 10
    rounded = [x.to(dtype).float() for x in (values, mu, sigma_sq)]
    ref = attention(rounded[0], mask, rounded[1], rounded[2])
    values_, mu_ = values.to(dtype).requires_grad_(), mu.to(dtype).requires_grad_()
    out = attention(values_, mask, mu_, sigma_sq.to(dtype), report_token_masses=True)
    assert out.context.dtype == out.token_masses.dtype == dtype
    torch.testing.assert_close(out.context.float(), ref.context, rtol=1e-2, atol=1e-2)
    out.context.sum().backward()
    assert mu_.grad.dtype == dtype and torch.isfinite(values_.grad.float()).all()


def test_density_from_attention_is_the_mean_and_variance_of_the_positions():
    mask = torch.tensor([[1, 1, 1, 1, 0], [0, 1, 1, 1, 1]], dtype=torch.bool)
    uniform = mask.double() / 4
    mu, sigma_sq = density_from_attention(uniform, mask)
    # positions 1/8, 3/8, 5/8, 7/8: mean 1/2, variance (L^2 - 1) / (12 L^2)
    torch.testing.assert_close(mu, _t(0.5, 0.5))
    torch.testing.assert_close(sigma_sq, _t(15 / 192, 15 / 192))
    one_hot = torch.zeros(2, 5, dtype=F64)
    one_hot[0, 2] = one_hot[1, 2] = 1.0
    mu, sigma_sq = density_from_attention(one_hot, mask)
    torch.testing.assert_close(mu, _t(5 / 8, 3 / 8))
    torch.testing.assert_close(sigma_sq, _t(continuous.SIGMA_SQ_FLOOR, continuous.SIGMA_SQ_FLOOR))


@pytest.mark.parametrize("density", DENSITIES)
def test_token_masses_are_a_distribution_over_the_source(density):
    mask = torch.ones(1, 40, dtype=torch.bool)
    masses = token_masses(mask, _t(0.5), _t(1e-3), density)
    assert masses.sum().item() == pytest.approx(1.0, abs=1e-12)
    nonzero = int((masses > 0).sum())
    if density == "truncated_parabola":
        # support 0.5 +- 0.1145: cells 15..24 overlap it, the rest are exact zeros
        a = parabola_half_width(1e-3)
        assert nonzero == math.ceil((0.5 + a) * 40) - math.floor((0.5 - a) * 40)
    else:
        assert nonzero == 40


def test_learned_head_gives_valid_densities():
    head = LearnedDensityHead(3, 4)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    mu, sigma_sq = head(torch.randn(2, 3), torch.randn(2, 3, 4), mask)
    assert ((mu > 0) & (mu < 1)).all() and (sigma_sq >= continuous.SIGMA_SQ_FLOOR).all()
    mu.sum().backward()
    assert head.proj.weight.grad.abs().sum() > 0


def test_basis_layout():
    basis = GaussianBasis(5)
    assert basis.widths.tolist() == [0.1, 0.5, 0.1, 0.5, 0.1]
    assert basis.centres.tolist() == [0.0, 0.0, 0.5, 1.0, 1.0]
    assert GaussianBasis(1).centres.tolist() == [0.5]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("density", DENSITIES)
def test_cuda_matches_cpu(density):
    gen = torch.Generator().manual_seed(5)
    values = torch.randn(3, 7, 4, generator=gen)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[0, :3] = False
    mu, sigma_sq = torch.rand(3, generator=gen), 1e-3 + torch.rand(3, generator=gen) / 10
    cpu = ContinuousAttention(8, density)(values, mask, mu, sigma_sq)
    gpu = ContinuousAttention(8, density).cuda()(
        values.cuda(), mask.cuda(), mu.cuda(), sigma_sq.cuda()
    )
    torch.testing.assert_close(gpu.context.cpu(), cpu.context, rtol=1e-5, atol=1e-5)


# -- bad input ------------------------------------------------------------------------------

BASIS = GaussianBasis(4)
MASK = torch.ones(2, 3, dtype=torch.bool)
VALUES = torch.randn(2, 3, 2)

BAD = {
    "sigma_sq zero": (lambda: expected_basis(_t(0.5), _t(0.0), BASIS, "gaussian"), "sigma_sq"),
    "sigma_sq negative": (
        lambda: expected_basis(_t(0.5), _t(-1.0), BASIS, "truncated_parabola"),
        "sigma_sq",
    ),
    "sigma_sq nan": (lambda: expected_basis(_t(0.5), _t(math.nan), BASIS, "gaussian"), "sigma_sq"),
    "mu inf": (lambda: expected_basis(_t(math.inf), _t(1.0), BASIS, "gaussian"), "mu"),
    "shape mismatch": (lambda: expected_basis(_t(0.5, 0.2), _t(1.0), BASIS, "gaussian"), "shape"),
    "integer mu": (
        lambda: expected_basis(torch.tensor([1]), torch.tensor([1]), BASIS, "gaussian"),
        "float32 or float64",
    ),
    "N zero": (lambda: GaussianBasis(0), "basis functions"),
    "N float": (lambda: GaussianBasis(2.5), "basis functions"),
    "N bool": (lambda: ContinuousAttention(True, "gaussian"), "basis functions"),
    "ridge negative": (lambda: ContinuousAttention(4, "gaussian", ridge=-0.1), "ridge"),
    "ridge nan": (lambda: ridge_smoother(BASIS, MASK, math.nan), "ridge"),
    "unknown density": (lambda: ContinuousAttention(4, "laplace"), "density"),
    "all-masked row": (
        lambda: continuous_attention(
            VALUES,
            torch.tensor([[1, 1, 1], [0, 0, 0]], dtype=torch.bool),
            _t(0.5, 0.5, dtype=torch.float32),
            _t(0.1, 0.1, dtype=torch.float32),
            BASIS,
            "gaussian",
        ),
        "all masked",
    ),
    "all-masked row (module)": (
        lambda: ContinuousAttention(4, "gaussian")(
            VALUES, torch.zeros(2, 3, dtype=torch.bool), _t(0.5, 0.5), _t(0.1, 0.1)
        ),
        "all masked",
    ),
    "empty source": (lambda: positions(torch.ones(2, 0, dtype=torch.bool)), "all masked"),
    "float mask": (lambda: positions(torch.ones(2, 3)), "bool"),
    "zero floor": (lambda: density_from_attention(torch.ones(2, 3) / 3, MASK, floor=0.0), "floor"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_a_value_error_naming_it(case):
    call, named = BAD[case]
    with pytest.raises(ValueError, match=named):
        call()
