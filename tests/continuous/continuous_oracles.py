"""Independent references for regattn.continuous: the densities, the basis functions and the
Jacobian integrands written out from their definitions (plain Python floats, nothing
imported from regattn.continuous) and integrated numerically with scipy.integrate.quad."""

import math
import warnings

from scipy import integrate


def gaussian_pdf(t, mu, sigma_sq):
    return math.exp(-((t - mu) ** 2) / (2 * sigma_sq)) / math.sqrt(2 * math.pi * sigma_sq)


def parabola_half_width(sigma_sq):
    # from the normalisation int_{-a}^{a} (a^2 - x^2) / (2 sigma^2) dx = 2 a^3 / (3 sigma^2) = 1
    return (1.5 * sigma_sq) ** (1 / 3)


def parabola_pdf(t, mu, sigma_sq):
    a = parabola_half_width(sigma_sq)
    return max(0.0, (a * a - (t - mu) ** 2) / (2 * sigma_sq))


def pdf(density, t, mu, sigma_sq):
    return (gaussian_pdf if density == "gaussian" else parabola_pdf)(t, mu, sigma_sq)


def dpdf_dmu(density, t, mu, sigma_sq):
    """d p(t) / d mu, by hand from each pdf."""
    if density == "gaussian":
        return gaussian_pdf(t, mu, sigma_sq) * (t - mu) / sigma_sq
    inside = abs(t - mu) < parabola_half_width(sigma_sq)
    return (t - mu) / sigma_sq if inside else 0.0


def dpdf_dsigma_sq(density, t, mu, sigma_sq):
    """d p(t) / d sigma^2, by hand from each pdf."""
    if density == "gaussian":
        x2 = (t - mu) ** 2
        return gaussian_pdf(t, mu, sigma_sq) * (x2 / (2 * sigma_sq**2) - 1 / (2 * sigma_sq))
    a = parabola_half_width(sigma_sq)
    if abs(t - mu) >= a:
        return 0.0
    # p = a^2 / (2 sigma^2) - x^2 / (2 sigma^2) with a^2 / (2 sigma^2) = k sigma^(-2/3)
    k = 1.5 ** (2 / 3) / 2
    return -k / 3 * sigma_sq ** (-4 / 3) + (t - mu) ** 2 / (2 * sigma_sq**2)


def rbf(t, centre, width):
    return math.exp(-((t - centre) ** 2) / (2 * width * width)) / (math.sqrt(2 * math.pi) * width)


def integration_range(density, mu, sigma_sq):
    """Where the integrands live: the parabola's support, or mu +- 40 sigma (quad over an
    infinite range misses a narrow Gaussian)."""
    if density == "gaussian":
        s = math.sqrt(sigma_sq)
        return mu - 40 * s, mu + 40 * s
    a = parabola_half_width(sigma_sq)
    return mu - a, mu + a


def quad(f, lo, hi, centre):
    """(value, quad's error estimate) of int_lo^hi f, with mu as a break point."""
    points = [p for p in (centre,) if lo < p < hi]
    with warnings.catch_warnings():
        # quad warns when roundoff keeps it from epsrel = 1e-10 (integrands that cancel to
        # nearly 0): the callers check its error estimate against their own scale instead
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        value, error = integrate.quad(
            f, lo, hi, points=points or None, epsabs=0, epsrel=1e-10, limit=400
        )
    return value, error


def expected_rbf(density, mu, sigma_sq, centre, width, integrand=pdf):
    """int integrand(t) psi(t) dt for one basis function psi = N(centre, width^2), and quad's
    error estimate."""
    lo, hi = integration_range(density, mu, sigma_sq)
    return quad(lambda t: integrand(density, t, mu, sigma_sq) * rbf(t, centre, width), lo, hi, mu)
