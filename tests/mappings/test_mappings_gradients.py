"""Backward passes: gradcheck in float64, and agreement with differentiable references."""

import entmax as entmax_pkg
import pytest
import torch
from mapping_helpers import NAMES, apply, assert_structure_stable

EPS = 1e-6

# Penalties large enough that fusedmax/oscarmax really fuse some coordinates of the inputs
# below, so that the group-averaging part of their Jacobian is exercised.
GRAD_PARAMS = {
    "softmax": {"gamma": 0.7},
    "sparsemax": {"gamma": 0.7},
    "sq_pnorm_max": {"gamma": 0.7, "p": 1.5},
    "fusedmax": {"gamma": 0.7, "lam": 0.5},
    "oscarmax": {"gamma": 0.7, "lam": 0.3},
    "entmax": {"alpha": 1.5, "gamma": 0.7},
}


def _scores(seed, shape=(4, 7)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64)


# (B, T, H) scores with attention along dim 1 and a (B, T, 1) mask broadcast over H
MASK_DIM1 = torch.tensor(
    [[1, 1, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], dtype=torch.bool
).unsqueeze(-1)


def _plain_case(name):
    """(scores, mapping of the scores, attention dim)"""
    return _scores(0), lambda x: apply(name, x, **GRAD_PARAMS[name]), -1


def _masked_case(name):
    fn = lambda x: apply(name, x, dim=1, mask=MASK_DIM1, **GRAD_PARAMS[name])  # noqa: E731
    return _scores(1, (3, 6, 2)), fn, 1


@pytest.mark.parametrize("case", [_plain_case, _masked_case], ids=["plain", "mask-and-dim1"])
@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_wrt_scores(name, case):
    x, fn, _ = case(name)
    x.requires_grad_()
    assert_structure_stable(fn, (x,), EPS)
    assert torch.autograd.gradcheck(fn, (x,), eps=EPS, atol=1e-6)


@pytest.mark.parametrize("case", [_plain_case, _masked_case], ids=["plain", "mask-and-dim1"])
@pytest.mark.parametrize("name", ["fusedmax", "oscarmax"])
def test_gradcheck_inputs_do_fuse_coordinates(name, case):
    """Guards the gradchecks above: some row has two nonzero outputs with equal value, so
    the group-averaging part of the Jacobian is exercised."""
    x, fn, dim = case(name)
    rows = fn(x).movedim(dim, -1).reshape(-1, x.shape[dim])
    assert any((r > 0).sum() > r[r > 0].unique().numel() for r in rows)


@pytest.mark.parametrize(
    "alpha_shape",
    [(2, 3, 1), (1, 3, 1), ()],
    ids=["per-row", "per-head", "scalar-tensor"],
)
@pytest.mark.parametrize("gamma", [1.0, 2.5])
def test_entmax_gradcheck_wrt_scores_and_alpha(alpha_shape, gamma):
    x = _scores(2, (2, 3, 5)).requires_grad_()
    g = torch.Generator().manual_seed(3)
    alpha = (
        1.15 + 1.3 * torch.rand(alpha_shape, generator=g, dtype=torch.float64)
    ).requires_grad_()
    fn = lambda x, a: apply("entmax", x, alpha=a, gamma=gamma)  # noqa: E731
    assert_structure_stable(fn, (x, alpha), EPS)
    assert torch.autograd.gradcheck(fn, (x, alpha), eps=EPS, atol=1e-6)


def _vjp(fn, x, g, *extra):
    inputs = [x.detach().clone().requires_grad_()] + [
        e.detach().clone().requires_grad_() for e in extra
    ]
    out = fn(*inputs)
    grads = torch.autograd.grad(out, inputs, g)
    return out.detach(), grads


# (our mapping and params, the reference function of the scores).
REFERENCES = [
    ("softmax", {"gamma": 0.7}, lambda x: torch.softmax(x / 0.7, -1)),
    ("sparsemax", {"gamma": 1.0}, lambda x: entmax_pkg.sparsemax(x, -1)),
    ("sparsemax", {"gamma": 0.7}, lambda x: entmax_pkg.sparsemax(x / 0.7, -1)),
    ("sq_pnorm_max", {"gamma": 0.7, "p": 2.0}, lambda x: entmax_pkg.sparsemax(x / 0.7, -1)),
    ("fusedmax", {"gamma": 0.7, "lam": 0.0}, lambda x: entmax_pkg.sparsemax(x / 0.7, -1)),
    ("oscarmax", {"gamma": 0.7, "lam": 0.0}, lambda x: entmax_pkg.sparsemax(x / 0.7, -1)),
    ("entmax", {"alpha": 1.5}, lambda x: entmax_pkg.entmax15(x, -1)),
    ("entmax", {"alpha": 2.0}, lambda x: entmax_pkg.sparsemax(x, -1)),
    ("entmax", {"alpha": 1.3}, lambda x: entmax_pkg.entmax_bisect(x, 1.3, -1, n_iter=80)),
    ("entmax", {"alpha": 1.5, "gamma": 4.0}, lambda x: entmax_pkg.entmax15(x / 4.0, -1)),
    ("entmax", {"alpha": 2.0, "gamma": 0.7}, lambda x: entmax_pkg.sparsemax(x / 0.7, -1)),
    (
        "entmax",
        {"alpha": 1.3, "gamma": 0.5},
        lambda x: entmax_pkg.entmax_bisect(x / 0.5, 1.3, -1, n_iter=80),
    ),
]


@pytest.mark.parametrize(
    "name,params,reference",
    REFERENCES,
    ids=[f"{n}-{'-'.join(map(str, p.values()))}" for n, p, _ in REFERENCES],
)
def test_backward_matches_reference_autograd(name, params, reference):
    x = _scores(4, (6, 9)) * 2
    g = _scores(5, (6, 9))
    y, (grad,) = _vjp(lambda x: apply(name, x, **params), x, g)
    y_ref, (grad_ref,) = _vjp(reference, x, g)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-10)
    torch.testing.assert_close(grad, grad_ref, rtol=0, atol=1e-9)


def test_entmax_alpha_gradient_matches_entmax_bisect():
    x = _scores(6, (2, 3, 8)) * 2
    g = _scores(7, (2, 3, 8))
    alpha = torch.tensor([1.2, 1.6, 2.4], dtype=torch.float64).view(1, 3, 1)  # per head
    _, (gx, ga) = _vjp(lambda x, a: apply("entmax", x, alpha=a), x, g, alpha)
    _, (gx_ref, ga_ref) = _vjp(
        lambda x, a: entmax_pkg.entmax_bisect(x, a.expand(2, 3, 1), -1, n_iter=80), x, g, alpha
    )
    torch.testing.assert_close(gx, gx_ref, rtol=0, atol=1e-9)
    torch.testing.assert_close(ga, ga_ref, rtol=0, atol=1e-9)
