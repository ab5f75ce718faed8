"""Continuous attention in one dimension (Martins et al., *Sparse and Continuous Attention
Mechanisms*, NeurIPS 2020): attention as a density p(t) over the source instead of a
distribution over its L positions.

The L unpadded source positions sit at t_l = (l - 1/2) / L in [0, 1] (padding takes no place,
so left- and right-padded rows agree). The encoder states v_1..v_L become a smooth value
function V(t) = B psi(t) over N Gaussian radial basis functions

    psi_j(t) = N(t; m_j, s_j^2),

with B the ridge regression of the states onto the basis at the positions,

    B = argmin_B sum_l ||B psi(t_l) - v_l||^2 + ridge ||B||_F^2 = V^T G,
    G = Psi (Psi^T Psi + ridge I)^+            (Psi[l, j] = psi_j(t_l), L x N).

The attention density has a location mu and a scale sigma^2:

- ``gaussian`` (continuous softmax, the Omega-regularised prediction map with Shannon's
  entropy and a quadratic score): p = N(mu, sigma^2);
- ``truncated_parabola`` (continuous sparsemax, Tsallis alpha = 2):
  p(t) = [-(t - mu)^2 / (2 sigma^2) - A]_+ with A = -a^2 / (2 sigma^2), which integrates to 1
  exactly when its support [mu - a, mu + a] has a = (3 sigma^2 / 2)^(1/3).

Both are densities on the real line, as in the authors' code: their mass outside [0, 1] is
not renormalised (mu always lies in [0, 1] when it comes from `density_from_attention` or
`LearnedDensityHead`). The context is c = E_p[V(t)] = B r with r = E_p[psi(t)]; this module
computes it as c = sum_l w_l v_l with w = G r (the same number, and w shows which source
positions the context draws on).

r and its Jacobian with respect to (mu, sigma^2) have closed forms (`expected_basis`):

- gaussian: r_j = N(mu; m_j, sigma^2 + s_j^2) (a product of Gaussians);
- truncated parabola: with u = (t - mu) / s_j, c = (mu - m_j) / s_j, h = a / s_j and
  K_k = int_{-h}^{h} u^k phi(c + u) du (phi, Phi the standard normal pdf and cdf; K_k from
  Phi(c + h) - Phi(c - h), phi(c - h), phi(c + h)):

      r_j          = s_j^2 (h^2 K_0 - K_2) / (2 sigma^2),
      dr_j/dmu     = s_j K_1 / sigma^2,
      dr_j/dsigma^2 = s_j^2 (K_2 - h^2 K_0 / 3) / (2 sigma^4);

  p vanishes at the edges of its support, so moving them contributes nothing (Leibniz) and
  the derivatives are the integrals of dp/dmu = (t - mu) / sigma^2 and
  dp/dsigma^2 = ((t - mu)^2 - a^2 / 3) / (2 sigma^4) against psi_j.

Where mu and sigma^2 come from: `density_from_attention` takes the mean and variance of t
under a discrete attention distribution (the authors' recipe, with a discrete softmax over the
usual attention scores); `LearnedDensityHead` predicts them from the query and the source.
Both floor sigma^2 at `SIGMA_SQ_FLOOR`, as the authors' code does: a discrete distribution on
one position has variance 0, which is no density.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

__all__ = [
    "BASIS_WIDTHS",
    "COMPACT_DENSITY",
    "DENSITIES",
    "DENSITY_DECLARATIONS",
    "REFERENCE_DENSITY",
    "SIGMA_SQ_FLOOR",
    "ContinuousAttention",
    "ContinuousAttentionOutput",
    "DensityDeclaration",
    "GaussianBasis",
    "LearnedDensityHead",
    "continuous_attention",
    "density_cdf",
    "density_from_attention",
    "density_pdf",
    "density_support",
    "expected_basis",
    "positions",
    "ridge_smoother",
    "token_masses",
]


@dataclass(frozen=True)
class DensityDeclaration:
    """One density family of continuous attention, the one place its name is written.

    name : the value of `density=` (and of fairseq's --continuous-density).
    label : the continuous mapping it gives (Martins et al. 2020): the benchmark's row name.
    title : its name in figures.
    compact_support : whether it is zero outside an interval (`density_support` is finite).
    """

    name: str
    label: str
    title: str
    compact_support: bool


DENSITY_DECLARATIONS = {
    d.name: d
    for d in (
        DensityDeclaration(
            "gaussian", "continuous softmax", "continuous softmax (Gaussian)", False
        ),
        DensityDeclaration(
            "truncated_parabola",
            "continuous sparsemax",
            "continuous sparsemax (truncated parabola)",
            True,
        ),
    )
}
DENSITIES = tuple(DENSITY_DECLARATIONS)
# continuous softmax: the default where continuous attention is asked for without a density
REFERENCE_DENSITY = DENSITIES[0]
# the sparse one: zero outside [mu - a, mu + a]
COMPACT_DENSITY = next(d.name for d in DENSITY_DECLARATIONS.values() if d.compact_support)
# widths s_j of the basis functions, as in the authors' code (deep-spin/quati): half of the
# basis functions are narrow (local detail), half wide (the overall trend)
BASIS_WIDTHS = (0.1, 0.5)
# the smallest sigma^2 `density_from_attention` and `LearnedDensityHead` return (the authors
# clamp sigma^2 at 1e-6): a truncated parabola of half-width (1.5e-6)^(1/3) ~ 0.011
SIGMA_SQ_FLOOR = 1e-6

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


# -- validation ---------------------------------------------------------------------------


def _check_density(density: str) -> None:
    if density not in DENSITIES:
        raise ValueError(f"unknown density {density!r}: expected one of {', '.join(DENSITIES)}")


def _check_params(mu: torch.Tensor, sigma_sq: torch.Tensor) -> None:
    # `x > 0` is False for NaN; one reduction, so one wait for the device when all is well
    good_sigma_sq = (sigma_sq > 0) & torch.isfinite(sigma_sq)
    if bool(torch.isfinite(mu).all() & good_sigma_sq.all()):
        return
    if not bool(torch.isfinite(mu).all()):
        raise ValueError("mu has NaN or infinite entries")
    bad = sigma_sq[~good_sigma_sq].flatten()[0].item()
    raise ValueError(f"sigma_sq must be positive and finite, got {bad}")


def _check_mask(mask: torch.Tensor) -> None:
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = source position), got {mask.dtype}")
    if mask.size(-1) == 0 or not bool(mask.any(-1).all()):
        raise ValueError("mask has a row with no source position (all masked)")


def _check_ridge(ridge: float) -> None:
    if not ridge >= 0 or math.isinf(ridge):
        raise ValueError(f"ridge must be >= 0 and finite, got {ridge}")


# -- positions and the basis ------------------------------------------------------------


def positions(mask: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """Where each source position sits on [0, 1]: t = (rank + 1/2) / L, with rank the
    position's index among the row's unmasked positions and L their number.

    Parameters
    ----------
    mask : torch.Tensor
        bool (..., S), True at source positions (False at padding, anywhere in the row).
    dtype : torch.dtype

    Returns
    -------
    torch.Tensor
        (..., S) in `dtype`: t at unmasked positions, 0 at masked ones.

    Raises
    ------
    ValueError
        a row with no unmasked position.
    """
    _check_mask(mask)
    return _positions(mask, dtype)


def _positions(mask: torch.Tensor, dtype) -> torch.Tensor:
    counts = mask.to(dtype)
    rank = counts.cumsum(-1) - 1
    t = (rank + 0.5) / counts.sum(-1, keepdim=True)
    return torch.where(mask, t, 0.0)


class GaussianBasis(nn.Module):
    """The N Gaussian radial basis functions psi_j(t) = N(t; m_j, s_j^2) of the value
    function. Basis function j has width BASIS_WIDTHS[j % 2]; the functions of each width have
    their centres m_j evenly spaced over [0, 1] (endpoints included; a single one at 1/2).

    Parameters
    ----------
    num_basis : int
        N >= 1.
    """

    def __init__(self, num_basis: int):
        super().__init__()
        if isinstance(num_basis, bool) or not isinstance(num_basis, int) or num_basis < 1:
            raise ValueError(
                f"the number of basis functions must be an integer >= 1, got {num_basis!r}"
            )
        centres, widths = (
            torch.empty(num_basis, dtype=torch.float64),
            torch.empty(num_basis, dtype=torch.float64),
        )
        for k, width in enumerate(BASIS_WIDTHS):
            index = torch.arange(k, num_basis, len(BASIS_WIDTHS))
            n = index.numel()
            centres[index] = torch.linspace(0, 1, n, dtype=torch.float64) if n > 1 else 0.5
            widths[index] = width
        # not persistent: a function of num_basis, so checkpoints need not carry them
        self.register_buffer("centres", centres, persistent=False)
        self.register_buffer("widths", widths, persistent=False)

    def __len__(self) -> int:
        """N, the number of basis functions."""
        return self.centres.numel()

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """psi(t): (...) -> (..., N), in t's dtype."""
        centres, widths = self.centres.to(t.dtype), self.widths.to(t.dtype)
        z = (t.unsqueeze(-1) - centres) / widths
        return torch.exp(-0.5 * z * z) * _INV_SQRT_2PI / widths

    def extra_repr(self) -> str:
        """The basis in the module's repr."""
        return f"num_basis={len(self)}, widths={BASIS_WIDTHS}"


def ridge_smoother(basis: GaussianBasis, mask: torch.Tensor, ridge: float) -> torch.Tensor:
    """The linear map from the encoder states to the value function's coefficients.

    B = V^T G minimises sum_l ||B psi(t_l) - v_l||^2 + ridge ||B||^2 over the unmasked
    positions; G = Psi (Psi^T Psi + ridge I)^+ (the pseudo-inverse makes ridge = 0 the
    minimum-norm least-squares fit when Psi^T Psi is singular, e.g. L < N). Computed in
    float64.

    Parameters
    ----------
    basis : GaussianBasis
    mask : torch.Tensor
        bool (..., S), True at source positions.
    ridge : float
        >= 0.

    Returns
    -------
    torch.Tensor
        float64 (..., S, N), zero rows at masked positions.
    """
    _check_mask(mask)
    _check_ridge(ridge)
    psi = basis(_positions(mask, torch.float64)) * mask.unsqueeze(-1)
    gram = psi.transpose(-1, -2) @ psi
    eye = torch.eye(gram.size(-1), dtype=gram.dtype, device=gram.device)
    return psi @ torch.linalg.pinv(gram + ridge * eye, hermitian=True)


# -- the densities ------------------------------------------------------------------------


def _half_width(sigma_sq: torch.Tensor) -> torch.Tensor:
    """Half-width a = (3 sigma^2 / 2)^(1/3): the truncated parabola is 0 outside mu +- a."""
    return (1.5 * sigma_sq) ** (1.0 / 3.0)


def density_support(mu: torch.Tensor, sigma_sq: torch.Tensor, density: str):
    """The interval outside which the density is zero.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        (mu - a, mu + a) for the truncated parabola, (-inf, inf) for the Gaussian, each
        shaped like mu.
    """
    _check_density(density)
    _check_params(mu, sigma_sq)
    if density == "gaussian":
        inf = torch.full_like(mu, math.inf)
        return -inf, inf
    a = _half_width(sigma_sq)
    return mu - a, mu + a


def density_pdf(t: torch.Tensor, mu: torch.Tensor, sigma_sq: torch.Tensor, density: str):
    """p(t) for densities of location mu and scale sigma^2 broadcast against t."""
    _check_density(density)
    _check_params(mu, sigma_sq)
    x = t - mu
    if density == "gaussian":
        return torch.exp(-0.5 * x * x / sigma_sq) * _INV_SQRT_2PI / sigma_sq.sqrt()
    a = _half_width(sigma_sq)
    return ((a * a - x * x) / (2 * sigma_sq)).clamp_min(0)


def density_cdf(t: torch.Tensor, mu: torch.Tensor, sigma_sq: torch.Tensor, density: str):
    """P(T <= t) for densities of location mu and scale sigma^2 broadcast against t."""
    _check_density(density)
    _check_params(mu, sigma_sq)
    return _cdf(t, mu, sigma_sq, density)


def _cdf(t, mu, sigma_sq, density):
    x = t - mu
    if density == "gaussian":
        return _ndtr(x / sigma_sq.sqrt())
    a = _half_width(sigma_sq)
    x = torch.minimum(torch.maximum(x, -a), a)
    # int_{-a}^{x} (a^2 - y^2) / (2 sigma^2) dy
    return (a * a * (x + a) - (x**3 + a**3) / 3) / (2 * sigma_sq)


def token_masses(mask, mu, sigma_sq, density: str) -> torch.Tensor:
    """The density's mass on each source position's cell [rank / L, (rank + 1) / L],
    renormalised over [0, 1]: the continuous attention read as a distribution over the source
    tokens, for plots and sparsity statistics (the truncated parabola gives exact zeros
    outside its support).

    Parameters
    ----------
    mask : torch.Tensor
        bool (..., S), True at source positions.
    mu, sigma_sq : torch.Tensor
        (...): the densities.
    density : str

    Returns
    -------
    torch.Tensor
        (..., S) in mu's dtype, 0 at masked positions; each row sums to 1.
    """
    _check_mask(mask)
    _check_density(density)
    _check_params(mu, sigma_sq)
    return _token_masses(mask, mu, sigma_sq, density)


def _token_masses(mask, mu, sigma_sq, density):
    dtype = mu.dtype
    lengths = mask.sum(-1, keepdim=True).to(dtype)
    rank = mask.to(dtype).cumsum(-1) - 1
    mu_, sigma_sq_ = mu.unsqueeze(-1), sigma_sq.unsqueeze(-1)
    lower, upper = rank / lengths, (rank + 1) / lengths
    if density == "gaussian":
        # from the nearer tail: a difference of two cdfs near 1 would cancel to 0
        sigma = sigma_sq_.sqrt()
        cells = _normal_mass((lower - mu_) / sigma, (upper - mu_) / sigma)
    else:
        cells = _cdf(upper, mu_, sigma_sq_, density) - _cdf(lower, mu_, sigma_sq_, density)
    cells = torch.where(mask, cells, 0.0).clamp_min(0)
    return cells / cells.sum(-1, keepdim=True)


# -- r = E_p[psi] and its Jacobian ----------------------------------------------------------


def _gaussian_expectation(mu, sigma_sq, centres, widths, jacobian):
    """Return r, dr/dmu, dr/dsigma^2 (None, None without `jacobian`) for p = N(mu, sigma^2):
    r_j = N(mu; m_j, sigma^2 + s_j^2).
    """
    var = sigma_sq.unsqueeze(-1) + widths * widths
    d = mu.unsqueeze(-1) - centres
    r = torch.exp(-0.5 * d * d / var) * _INV_SQRT_2PI / var.sqrt()
    if not jacobian:
        return r, None, None
    d_mu = -r * d / var
    d_sigma_sq = r * (d * d / var - 1) / (2 * var)
    return r, d_mu, d_sigma_sq


def _ndtr(x):
    """Phi(x) as erfc(-x / sqrt 2) / 2.

    Accurate in the lower tail, where torch.special.ndtr (torch 2.13, CPU) loses every digit
    below x ~ -8 (it returns 6.1e-16 at -8, 0 at -15.8).
    """
    return 0.5 * torch.erfc(-x / _SQRT2)


def _normal_mass(lo, hi):
    """Phi(hi) - Phi(lo) for lo <= hi, without the cancellation of two cdfs near 1."""
    upper_tail = lo > 0
    return torch.where(
        upper_tail,
        _ndtr(-lo) - _ndtr(-hi),
        _ndtr(hi) - _ndtr(lo),
    )


def _truncated_parabola_expectation(mu, sigma_sq, centres, widths, jacobian):
    """Return r, dr/dmu, dr/dsigma^2 (None, None without `jacobian`) for the truncated
    parabola (see the module docstring).

    Every argument float64: the closed form subtracts terms of size |c| phi to get results of
    size h^3 phi, which float32 cannot resolve for narrow densities.
    """
    sigma_sq_ = sigma_sq.unsqueeze(-1)
    h = _half_width(sigma_sq_) / widths
    c = (mu.unsqueeze(-1) - centres) / widths
    lo, hi = c - h, c + h
    phi_lo = torch.exp(-0.5 * lo * lo) * _INV_SQRT_2PI
    phi_hi = torch.exp(-0.5 * hi * hi) * _INV_SQRT_2PI
    # raw moments M_k = int_lo^hi z^k phi(z) dz, then K_k = int (z - c)^k phi(z) dz
    m0 = _normal_mass(lo, hi)
    m1 = phi_lo - phi_hi
    m2 = m0 + lo * phi_lo - hi * phi_hi
    k0 = m0
    k1 = m1 - c * m0
    k2 = m2 - 2 * c * m1 + c * c * m0
    hh = h * h
    w2 = widths * widths
    r = w2 * (hh * k0 - k2) / (2 * sigma_sq_)
    if not jacobian:
        return r, None, None
    d_mu = widths * k1 / sigma_sq_
    d_sigma_sq = w2 * (k2 - hh * k0 / 3) / (2 * sigma_sq_ * sigma_sq_)
    return r, d_mu, d_sigma_sq


class _ExpectedBasis(torch.autograd.Function):
    """The expectation r = E_p[psi(t)], with the closed-form Jacobian in backward.

    No autograd graph is built through the special functions.
    """

    @staticmethod
    def forward(ctx, mu, sigma_sq, centres, widths, density):
        compute = (
            _gaussian_expectation if density == "gaussian" else _truncated_parabola_expectation
        )
        # the truncated parabola's closed form needs float64 (see its docstring); the
        # Gaussian's is stable in the input dtype
        work = torch.float64 if density == "truncated_parabola" else mu.dtype
        # the Jacobian only when a gradient will be asked for (not in inference)
        jacobian = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        r, d_mu, d_sigma_sq = compute(
            mu.to(work), sigma_sq.to(work), centres.to(work), widths.to(work), jacobian
        )
        if jacobian:
            ctx.save_for_backward(d_mu.to(mu.dtype), d_sigma_sq.to(mu.dtype))
        return r.to(mu.dtype)

    @staticmethod
    def backward(ctx, grad_r):
        d_mu, d_sigma_sq = ctx.saved_tensors
        grad_mu = (grad_r * d_mu).sum(-1) if ctx.needs_input_grad[0] else None
        grad_sigma_sq = (grad_r * d_sigma_sq).sum(-1) if ctx.needs_input_grad[1] else None
        return grad_mu, grad_sigma_sq, None, None, None


def expected_basis(
    mu: torch.Tensor, sigma_sq: torch.Tensor, basis: GaussianBasis, density: str
) -> torch.Tensor:
    """The expectation r = E_p[psi(t)] of the basis under the density of location mu and
    scale sigma^2, differentiable in mu and sigma^2 through the closed-form Jacobian.

    Parameters
    ----------
    mu, sigma_sq : torch.Tensor
        float32 or float64, any shape (...), the same for both; sigma_sq > 0.
    basis : GaussianBasis
    density : str
        "gaussian" or "truncated_parabola".

    Returns
    -------
    torch.Tensor
        (..., N) in mu's dtype.

    Raises
    ------
    ValueError
        unknown density, sigma_sq <= 0 or non-finite, mu non-finite, mismatched shapes.
    """
    _check_density_params(mu, sigma_sq, density)
    return _ExpectedBasis.apply(mu, sigma_sq, basis.centres, basis.widths, density)


def _check_density_params(mu, sigma_sq, density):
    _check_density(density)
    if mu.shape != sigma_sq.shape:
        raise ValueError(
            f"mu {tuple(mu.shape)} and sigma_sq {tuple(sigma_sq.shape)} differ in shape"
        )
    if mu.dtype not in (torch.float32, torch.float64) or sigma_sq.dtype != mu.dtype:
        raise ValueError(
            f"mu and sigma_sq must both be float32 or float64, got {mu.dtype} and {sigma_sq.dtype}"
        )
    _check_params(mu, sigma_sq)


# -- where mu and sigma^2 come from -----------------------------------------------------


def density_from_attention(probs: torch.Tensor, mask: torch.Tensor, floor: float = SIGMA_SQ_FLOOR):
    """The density's mu and sigma^2 from a discrete attention distribution: the mean and
    variance of the positions t under it (the authors' recipe), sigma^2 floored at `floor`.

    Parameters
    ----------
    probs : torch.Tensor
        (..., S): attention over the source positions (0 at masked ones).
    mask : torch.Tensor
        bool (..., S), True at source positions.
    floor : float
        > 0.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        mu in [0, 1] and sigma^2 >= floor, each (...), in probs' dtype.
    """
    _check_mask(mask)
    if not floor > 0:
        raise ValueError(f"the floor of sigma^2 must be > 0, got {floor}")
    t = _positions(mask, probs.dtype)
    mu = (probs * t).sum(-1)
    # the centred form: E[t^2] - mu^2 can come out negative in float32
    centred = torch.where(mask, t - mu.unsqueeze(-1), 0.0)
    sigma_sq = (probs * centred * centred).sum(-1)
    return mu, sigma_sq.clamp_min(floor)


class LearnedDensityHead(nn.Module):
    """mu and sigma^2 from a linear head on the query and the mean of the source states:
    mu = sigmoid(.) in (0, 1), sigma^2 = max(softplus(.), SIGMA_SQ_FLOOR) (the authors'
    activations for their learned encoders).

    Parameters
    ----------
    query_dim, source_dim : int
    """

    def __init__(self, query_dim: int, source_dim: int):
        super().__init__()
        self.proj = nn.Linear(query_dim + source_dim, 2)

    def forward(self, query: torch.Tensor, values: torch.Tensor, mask: torch.Tensor):
        """Map query (..., Dq), values (..., S, Dv), mask (..., S) to mu, sigma_sq (...)."""
        _check_mask(mask)
        weights = mask.to(values.dtype).unsqueeze(-1)
        pooled = (values * weights).sum(-2) / weights.sum(-2)
        out = self.proj(torch.cat([query, pooled], dim=-1))
        mu = torch.sigmoid(out[..., 0])
        sigma_sq = nn.functional.softplus(out[..., 1]).clamp_min(SIGMA_SQ_FLOOR)
        return mu, sigma_sq


# -- the context -------------------------------------------------------------------------


@dataclass
class ContinuousAttentionOutput:
    """What continuous attention computed.

    context (..., D): E_p[V(t)]; weights (..., S): w = G r, with context = sum_l w_l v_l
    (signed, not a distribution); mu, sigma_sq (...): the density; token_masses (..., S):
    `token_masses` of the density, when asked for (no gradient), else None.
    """

    context: torch.Tensor
    weights: torch.Tensor
    mu: torch.Tensor
    sigma_sq: torch.Tensor
    token_masses: torch.Tensor | None = None


def continuous_attention(
    values: torch.Tensor,
    mask: torch.Tensor,
    mu: torch.Tensor,
    sigma_sq: torch.Tensor,
    basis: GaussianBasis,
    density: str,
    ridge: float = 0.01,
) -> ContinuousAttentionOutput:
    """The context c = E_p[V(t)] = B r, with B the ridge fit of `values` on the basis.

    Parameters
    ----------
    values : torch.Tensor
        (..., S, D) encoder states.
    mask : torch.Tensor
        bool (..., S), True at source positions.
    mu, sigma_sq : torch.Tensor
        (...) the densities.
    basis : GaussianBasis
    density : str
    ridge : float
        >= 0 (the authors' 0.01).

    Returns
    -------
    ContinuousAttentionOutput
    """
    _check_density_params(mu, sigma_sq, density)
    smoother = ridge_smoother(basis, mask, ridge)  # checks the mask
    return _attend(values, smoother, mu, sigma_sq, basis, density)


def _attend(values, smoother, mu, sigma_sq, basis, density) -> ContinuousAttentionOutput:
    r = _ExpectedBasis.apply(mu, sigma_sq, basis.centres, basis.widths, density)
    weights = (smoother.to(values.dtype) @ r.to(values.dtype).unsqueeze(-1)).squeeze(-1)
    context = (weights.unsqueeze(-2) @ values).squeeze(-2)
    return ContinuousAttentionOutput(context, weights, mu, sigma_sq)


class ContinuousAttention(nn.Module):
    """`continuous_attention` with a fixed basis, density and ridge, for models that call it
    on many batches: the smoother G of every source length L (it depends on L only) is
    computed once per device and dtype and kept, so a decoder step costs a gather, two small
    matrix products and the closed form of r. The table holds L_max^2 N numbers for the
    longest source seen (L_max = 100, N = 64: 2.6 MB in float32; L_max = 1000: 256 MB).

    Parameters
    ----------
    num_basis : int
        N >= 1.
    density : str
        "gaussian" (continuous softmax) or "truncated_parabola" (continuous sparsemax).
    ridge : float
        >= 0.
    """

    def __init__(self, num_basis: int, density: str, ridge: float = 0.01):
        super().__init__()
        _check_density(density)
        _check_ridge(ridge)
        self.basis = GaussianBasis(num_basis)
        self.density = density
        self.ridge = float(ridge)
        # (device, dtype) -> (L_max, L_max, N): [L - 1, l] = row l of the smoother of length L
        self._smoothers = {}
        # (mask, dtype, rows) of the last call: a decoder calls once per target step with the
        # same source mask object, whose rows are then gathered once (the mask is held, so
        # no other tensor can take its identity)
        self._last_rows = None

    def _smoother_table(self, max_length: int, device, dtype) -> torch.Tensor:
        key = (str(device), dtype)
        table = self._smoothers.get(key)
        if table is None or table.size(0) < max_length:
            # every length up to max_length at once: row L - 1 of `prefixes` unmasks L positions
            steps = torch.arange(max_length, device=device)
            prefixes = steps.unsqueeze(1) >= steps.unsqueeze(0)
            table = ridge_smoother(self.basis, prefixes, self.ridge).to(dtype)
            self._smoothers[key] = table
        return table

    def smoother(self, mask: torch.Tensor, dtype) -> torch.Tensor:
        """ridge_smoother(basis, mask, ridge) in `dtype`, from the table: (..., S, N)."""
        _check_mask(mask)
        return self._smoother_rows(mask, dtype)

    def _smoother_rows(self, mask, dtype):
        last = self._last_rows
        if last is not None and last[0] is mask and last[1] == dtype:
            return last[2]
        table = self._smoother_table(mask.size(-1), mask.device, dtype)
        lengths = mask.sum(-1, keepdim=True)
        rank = (mask.cumsum(-1) - 1).clamp_min(0)
        rows = table[lengths - 1, rank] * mask.unsqueeze(-1).to(dtype)
        self._last_rows = (mask, dtype, rows)
        return rows

    def forward(
        self, values, mask, mu, sigma_sq, report_token_masses: bool = False
    ) -> ContinuousAttentionOutput:
        """Attend: values (..., S, D), mask (..., S), mu and sigma_sq (...).

        Returns the context and the density (`continuous_attention`), and with
        `report_token_masses` the density's mass per token (`token_masses`, no gradient).
        The inputs are checked once here (each check waits for the device). float16 and
        bfloat16 inputs (mixed-precision training) are computed in float32 and the outputs
        cast back.
        """
        dtype = values.dtype
        if dtype in (torch.float16, torch.bfloat16):
            values, mu, sigma_sq = values.float(), mu.float(), sigma_sq.float()
        if self._last_rows is None or self._last_rows[0] is not mask:
            _check_mask(mask)  # (the last mask object was checked when it was first seen)
        _check_density_params(mu, sigma_sq, self.density)
        out = _attend(
            values, self._smoother_rows(mask, values.dtype), mu, sigma_sq, self.basis, self.density
        )
        if report_token_masses:
            with torch.no_grad():
                out.token_masses = _token_masses(mask, mu.detach(), sigma_sq.detach(), self.density)
        if dtype != values.dtype:
            out.context, out.weights = out.context.to(dtype), out.weights.to(dtype)
            out.mu, out.sigma_sq = out.mu.to(dtype), out.sigma_sq.to(dtype)
            if out.token_masses is not None:
                out.token_masses = out.token_masses.to(dtype)
        return out

    def extra_repr(self) -> str:
        """The density, basis size and ridge in the module's repr."""
        return f"density={self.density}, num_basis={len(self.basis)}, ridge={self.ridge}"
