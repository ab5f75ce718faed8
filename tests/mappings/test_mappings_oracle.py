"""Every mapping against an independent convex solver (mapping_oracles), in float64."""

import zlib

import numpy as np
import pytest
import torch
from mapping_helpers import apply
from mapping_oracles import oracle

# (mapping, params) grid: several temperatures, penalties, norms and alphas.
PARAM_GRID = [
    ("softmax", {"gamma": 1.0}),
    ("softmax", {"gamma": 0.5}),
    ("softmax", {"gamma": 3.0}),
    ("sparsemax", {"gamma": 1.0}),
    ("sparsemax", {"gamma": 0.3}),
    ("sparsemax", {"gamma": 2.5}),
    ("sq_pnorm_max", {"gamma": 1.0, "p": 1.5}),
    ("sq_pnorm_max", {"gamma": 0.5, "p": 1.25}),
    ("sq_pnorm_max", {"gamma": 2.0, "p": 1.75}),
    ("sq_pnorm_max", {"gamma": 1.0, "p": 2.0}),
    ("fusedmax", {"gamma": 1.0, "lam": 0.1}),
    ("fusedmax", {"gamma": 1.0, "lam": 0.5}),
    ("fusedmax", {"gamma": 0.5, "lam": 0.05}),
    ("fusedmax", {"gamma": 2.0, "lam": 1.0}),
    ("oscarmax", {"gamma": 1.0, "lam": 0.01}),
    ("oscarmax", {"gamma": 1.0, "lam": 0.1}),
    ("oscarmax", {"gamma": 0.5, "lam": 0.2}),
    ("oscarmax", {"gamma": 2.0, "lam": 0.05}),
    ("entmax", {"alpha": 1.0}),
    ("entmax", {"alpha": 1.25}),
    ("entmax", {"alpha": 1.5}),
    ("entmax", {"alpha": 2.0}),
    ("entmax", {"alpha": 3.0}),
    ("entmax", {"alpha": 1.5, "gamma": 0.5}),
    ("entmax", {"alpha": 1.5, "gamma": 4.0}),
    ("entmax", {"alpha": 1.25, "gamma": 16.0}),
    ("entmax", {"alpha": 2.0, "gamma": 0.3}),
    ("entmax", {"alpha": 1.0, "gamma": 2.0}),
]

# The power-cone problems (p-norms, Tsallis) come back from the solver less exactly than
# the quadratic programs; softmax's oracle is a closed form.
ATOL = {
    "softmax": 1e-10,
    "sparsemax": 1e-5,
    "fusedmax": 1e-5,
    "oscarmax": 1e-5,
    "sq_pnorm_max": 3e-5,
    "entmax": 3e-5,
}

ROWS = 5


def _inputs(kind, rng):
    """A (ROWS, d) float64 batch of one kind of scores, a mask (or None), and a gamma factor."""
    d = int(rng.integers(2, 9))
    if kind == "random":
        return rng.normal(size=(ROWS, d)) * 2, None, 1.0
    if kind == "ties":
        return rng.choice([-1.0, 0.0, 0.5, 1.0], size=(ROWS, d)), None, 1.0
    if kind == "large_offset":
        return 1e3 + rng.normal(size=(ROWS, d)), None, 1.0
    if kind == "large_scale":
        return 1e3 * rng.normal(size=(ROWS, d)), None, 1.0
    if kind == "large_scale_gamma_scaled":
        return 1e3 * rng.normal(size=(ROWS, d)), None, 1e3
    if kind == "masked":
        d = 8
        mask = rng.random((ROWS, d)) < 0.6
        mask[np.arange(ROWS), rng.integers(0, d, ROWS)] = True  # at least one real position
        mask[0] = True  # one unpadded row in the batch
        return rng.normal(size=(ROWS, d)) * 2, mask, 1.0
    raise AssertionError(kind)


KINDS = ["random", "ties", "large_offset", "large_scale", "large_scale_gamma_scaled", "masked"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "name,params", PARAM_GRID, ids=[f"{n}-{'-'.join(map(str, p.values()))}" for n, p in PARAM_GRID]
)
def test_mapping_matches_convex_solver(name, params, kind):
    if kind == "large_scale_gamma_scaled" and "gamma" not in params:
        pytest.skip("entmax has no temperature")
    rng = np.random.default_rng(zlib.crc32(f"{name}{params}{kind}".encode()))
    scores, mask, gamma_factor = _inputs(kind, rng)
    if "gamma" in params:
        params = {**params, "gamma": params["gamma"] * gamma_factor}
    got = apply(
        name,
        torch.from_numpy(scores),
        mask=None if mask is None else torch.from_numpy(mask),
        **params,
    )
    assert got.dtype == torch.float64
    real = np.ones(scores.shape, bool) if mask is None else mask
    expected = np.stack(
        [oracle(name, s, mask=m, **params) for s, m in zip(scores, real, strict=True)]
    )
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=ATOL[name])


@pytest.mark.parametrize("alpha_shape", [(ROWS, 1), (1, 1), ()])
def test_entmax_tensor_alpha_matches_convex_solver(alpha_shape):
    rng = np.random.default_rng(7)
    scores = rng.normal(size=(ROWS, 6)) * 2
    alpha = rng.choice([1.25, 1.5, 2.0, 3.0], size=alpha_shape)
    got = apply("entmax", torch.from_numpy(scores), alpha=torch.from_numpy(alpha))
    alphas = np.broadcast_to(alpha, (ROWS, 1))[:, 0]
    expected = np.stack(
        [oracle("entmax", s, alpha=float(a)) for s, a in zip(scores, alphas, strict=True)]
    )
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=ATOL["entmax"])
