"""Fenchel-Young losses (regattn.losses) against an independent oracle: Omega written out in
cvxpy, Omega*(theta) = max_{y in simplex} y.theta - Omega(y) solved by a generic conic solver
(CLARABEL, float64), L = Omega*(theta) - theta.y + Omega(y). Also: the gradient is exactly
mapping(theta) - y, gradcheck in float64 (in theta, and in a tensor alpha for entmax and
normmax), ignore_index, reductions, label smoothing (softmax against torch's cross-entropy),
distribution targets, -inf classes and bad input."""

import itertools
import warnings

import cvxpy as cp
import numpy as np
import pytest
import torch

from regattn import losses, mappings

CASES = [
    ("softmax", {}),
    ("softmax", {"gamma": 0.5}),
    ("sparsemax", {}),
    ("sparsemax", {"gamma": 2.0}),
    ("entmax", {}),
    ("entmax", {"alpha": 1.3}),
    ("entmax", {"alpha": 1.8, "gamma": 0.7}),
    ("sq_pnorm_max", {"p": 1.5}),
    ("normmax", {"alpha": 2.0}),
    ("normmax", {"alpha": 3.0, "gamma": 0.5}),
    ("fusedmax", {"lam": 0.3}),
    ("oscarmax", {"lam": 0.1}),
]
IDS = [f"{name}-{'-'.join(f'{k}{v}' for k, v in p.items())}" for name, p in CASES]


def omega_cvx(name, y, gamma=1.0, alpha=1.5, p=1.5, lam=0.1):
    """The regularizer gamma Omega(y) as a cvxpy expression (convex in y)."""
    sq = 0.5 * cp.sum_squares(y)
    if name == "softmax":
        return -gamma * cp.sum(cp.entr(y))
    if name == "sparsemax":
        return gamma * sq
    if name == "entmax":
        return gamma * (cp.sum(cp.power(y, alpha)) - 1) / (alpha * (alpha - 1))
    if name == "sq_pnorm_max":
        return gamma * 0.5 * cp.square(cp.pnorm(y, p))
    if name == "normmax":
        return gamma * cp.pnorm(y, alpha)
    if name == "fusedmax":
        return gamma * (sq + lam * cp.sum(cp.abs(cp.diff(y))))
    pairs = [cp.maximum(y[i], y[j]) for i, j in itertools.combinations(range(y.shape[0]), 2)]
    return gamma * (sq + lam * cp.sum(cp.hstack(pairs)))


def oracle_loss(name, theta, y, **params):
    """Omega*(theta) - theta.y + Omega(y) for one row (numpy float64), -inf classes removed."""
    keep = np.isfinite(theta)
    theta, y = theta[keep], y[keep]
    shift = theta.max()  # Omega*(theta + c) = Omega*(theta) + c: solve on the centred row
    var = cp.Variable(theta.shape[0])
    problem = cp.Problem(
        cp.Maximize(var @ (theta - shift) - omega_cvx(name, var, **params)),
        [var >= 0, cp.sum(var) == 1],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    assert problem.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE), problem.status
    # the objective at the solver's point made feasible (its tiny negative entries would make
    # y^alpha NaN): a maximum, so an error of the point moves it to second order only
    best = np.clip(var.value, 0.0, None)
    best /= best.sum()
    conjugate = best @ theta - omega_cvx(name, cp.Constant(best), **params).value
    return conjugate - theta @ y + omega_cvx(name, cp.Constant(y), **params).value


def _case(seed, rows=4, classes=6):
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(rows, classes, generator=g, dtype=torch.float64) * 1.5
    target = torch.randint(0, classes, (rows,), generator=g)
    return theta, target


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize(("name", "params"), CASES, ids=IDS)
def test_loss_matches_the_convex_solver(name, params, smoothing):
    theta, target = _case(CASES.index((name, params)))
    theta[1, 2] = float("-inf")  # a masked class
    target[1] = 4
    got = losses.fenchel_young_loss(theta, target, name, reduction="none", **params)
    y = torch.nn.functional.one_hot(target, theta.shape[1]).double()
    if smoothing:
        theta[1, 2] = 0.3  # label smoothing puts mass on every class
        got = losses.fenchel_young_loss(
            theta, target, name, reduction="none", label_smoothing=smoothing, **params
        )
        y = (1 - smoothing) * y + smoothing / theta.shape[1]
    expected = [
        oracle_loss(name, t.numpy(), r.numpy(), **params) for t, r in zip(theta, y, strict=True)
    ]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=got.dtype), rtol=0, atol=2e-6)
    assert (got >= -1e-12).all()


@pytest.mark.parametrize(("name", "params"), CASES, ids=IDS)
def test_gradient_is_mapping_minus_target_and_gradcheck(name, params):
    theta, target = _case(100 + CASES.index((name, params)))
    theta.requires_grad_()
    loss = losses.fenchel_young_loss(theta, target, name, reduction="sum", **params)
    (grad,) = torch.autograd.grad(loss, theta)
    p = getattr(mappings, name)(theta.detach(), **params)
    y = torch.nn.functional.one_hot(target, theta.shape[1]).double()
    torch.testing.assert_close(grad, p - y, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda t: losses.fenchel_young_loss(t, target, name, reduction="none", **params),
        (theta,),
        eps=1e-6,
        atol=1e-6,
    )


@pytest.mark.parametrize("name", ["entmax", "normmax"])
def test_gradcheck_in_a_tensor_alpha(name):
    theta, target = _case(200)
    theta.requires_grad_()
    alpha = torch.tensor([[1.3], [1.7], [2.2], [1.5]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda t, a: losses.fenchel_young_loss(t, target, name, reduction="none", alpha=a),
        (theta, alpha),
        eps=1e-6,
        atol=1e-6,
    )
    # and a tensor alpha gives the loss of each row's float alpha, with leading dims too
    per_row = losses.fenchel_young_loss(theta, target, name, reduction="none", alpha=alpha)
    shaped = losses.fenchel_young_loss(
        theta.view(2, 2, 6), target.view(2, 2), name, reduction="none", alpha=alpha.view(2, 2, 1)
    )
    torch.testing.assert_close(shaped.flatten(), per_row, rtol=0, atol=0)
    for i, a in enumerate(alpha.flatten().tolist()):
        row = losses.fenchel_young_loss(theta[i : i + 1], target[i : i + 1], name, alpha=a)
        torch.testing.assert_close(per_row[i], row, rtol=0, atol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_softmax_loss_is_cross_entropy_minus_the_target_entropy(reduction, smoothing):
    theta, target = _case(300, rows=6)
    target[[1, 4]] = -1
    got = losses.fenchel_young_loss(
        theta, target, ignore_index=-1, reduction="none", label_smoothing=smoothing
    )
    ce = torch.nn.functional.cross_entropy(
        theta, target, ignore_index=-1, reduction="none", label_smoothing=smoothing
    )
    classes = theta.shape[1]
    y = torch.full((classes,), smoothing / classes, dtype=theta.dtype)
    y[0] += 1 - smoothing
    entropy = -torch.special.xlogy(y, y).sum()  # the same for every row's target
    kept = target != -1
    torch.testing.assert_close(got[kept], ce[kept] - entropy, rtol=0, atol=1e-12)
    assert (got[~kept] == 0).all()
    reduced = losses.FenchelYoungLoss(
        ignore_index=-1, reduction=reduction, label_smoothing=smoothing
    )(theta, target)
    expected = {"none": got, "sum": got.sum(), "mean": got.sum() / kept.sum()}[reduction]
    torch.testing.assert_close(reduced, expected, rtol=0, atol=1e-12)


def test_ignored_rows_get_no_gradient_and_an_all_ignored_mean_is_zero():
    theta, target = _case(400)
    theta.requires_grad_()
    target[2] = -100
    losses.fenchel_young_loss(theta, target, "sparsemax", reduction="mean").backward()
    assert (theta.grad[2] == 0).all() and (theta.grad[[0, 1, 3]] != 0).any()
    loss = losses.fenchel_young_loss(theta, torch.full((4,), -100), "sparsemax")
    assert loss.item() == 0.0


def test_distribution_targets_and_leading_dims():
    theta, _ = _case(500, rows=6)
    y = mappings.sparsemax(torch.randn(6, 6, dtype=torch.float64))
    got = losses.fenchel_young_loss(
        theta.view(2, 3, 6), y.view(2, 3, 6), "sparsemax", reduction="none"
    )
    assert got.shape == (2, 3)
    expected = [
        oracle_loss("sparsemax", t.numpy(), r.numpy()) for t, r in zip(theta, y, strict=True)
    ]
    torch.testing.assert_close(got.flatten(), torch.tensor(expected), rtol=0, atol=2e-6)
    # the loss vanishes where the target is the mapping's own output
    p = mappings.entmax(theta)
    assert losses.fenchel_young_loss(theta, p, "entmax", reduction="sum").abs() < 1e-12


def test_neg_inf_classes_equal_the_loss_over_the_other_classes():
    theta, target = _case(600)
    target[:] = 1
    theta[:, [0, 4]] = float("-inf")
    for name, params in CASES:
        got = losses.fenchel_young_loss(theta, target, name, reduction="none", **params)
        fewer = losses.fenchel_young_loss(
            theta[:, [1, 2, 3, 5]],
            torch.zeros(4, dtype=torch.long),
            name,
            reduction="none",
            **params,
        )
        torch.testing.assert_close(got, fewer, rtol=0, atol=1e-10)


def test_bad_input_is_a_clear_error():
    theta, target = _case(700)
    cases = [
        (dict(mapping="budget"), "unknown mapping"),
        (dict(reduction="elementwise_mean"), "reduction"),
        (dict(label_smoothing=1.0), "label_smoothing"),
        (dict(mapping="sparsemax", alpha=1.5), "takes no parameter"),
        (dict(mapping="normmax", alpha=1.0), "alpha"),
        (dict(mapping="entmax", alpha=0.5), "alpha"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            losses.fenchel_young_loss(theta, target, **kwargs)
    with pytest.raises(ValueError, match="out of range"):
        losses.fenchel_young_loss(theta, torch.tensor([0, 1, 6, 2]))
    with pytest.raises(ValueError, match="does not match"):
        losses.fenchel_young_loss(theta, target[:3])
    with pytest.raises(ValueError, match="distributions"):
        losses.fenchel_young_loss(theta, torch.ones(4, 6, dtype=torch.float64))
    theta[0, target[0]] = float("-inf")
    with pytest.raises(ValueError, match="-inf"):
        losses.fenchel_young_loss(theta, target)
    theta[0, target[0]] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        losses.fenchel_young_loss(theta, target)


def test_a_mapping_declared_later_has_its_loss(monkeypatch):
    """The loss's mappings are the declarations' (read when called), not a list of their own:
    a toy sparsemax declared after `regattn.losses` was imported, with its function in the
    package as every mapping has, has the sparsemax loss."""

    class Toymax(mappings.Sparsemax):
        pass

    toy = mappings.Declaration("toymax", Toymax, omega="squared_l2")
    monkeypatch.setitem(mappings.DECLARATIONS, "toymax", toy)
    monkeypatch.setitem(mappings.MODULES, "toymax", Toymax)
    monkeypatch.setattr(mappings, "NAMES", (*mappings.NAMES, "toymax"))
    monkeypatch.setattr(mappings, "toymax", mappings.sparsemax, raising=False)
    assert losses.loss_mappings() == (*mappings.NAMES, losses.NORMMAX)
    theta, target = _case(701)
    torch.testing.assert_close(
        losses.fenchel_young_loss(theta, target, mapping="toymax"),
        losses.fenchel_young_loss(theta, target, mapping="sparsemax"),
    )
