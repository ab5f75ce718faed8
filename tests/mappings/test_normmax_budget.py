"""normmax (Omega = ||y||_alpha) and budget sparsemax (sparsemax over the capped simplex),
the pure-torch mappings behind entmax 1.3's normmax_bisect and budget_bisect: against convex
solvers (cvxpy, mapping_oracles), gradcheck in float64 (budget also in the budget), masks,
-inf, tensor parameters, dims and bad input."""

import pytest
import torch
from mapping_oracles import oracle

from regattn import mappings


def _rows(seed, rows=5, d=7, scale=1.5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d, generator=g, dtype=torch.float64) * scale
    mask = torch.rand(rows, d, generator=g) > 0.3
    mask[:, 0] = True
    return x, mask


def _oracle_rows(name, x, mask, **params):
    masks = [None] * len(x) if mask is None else [m.numpy() for m in mask]
    return torch.stack(
        [
            torch.from_numpy(oracle(name, row.numpy(), m, **params))
            for row, m in zip(x, masks, strict=True)
        ]
    )


@pytest.mark.parametrize("alpha", [1.2, 1.5, 2.0, 3.0, 10.0])
@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("masked", [False, True])
def test_normmax_matches_the_convex_solver(alpha, gamma, masked):
    x, mask = _rows(int(alpha * 10) + masked)
    mask = mask if masked else None
    y = mappings.normmax(x, mask=mask, alpha=alpha, gamma=gamma)
    expected = _oracle_rows("normmax", x, mask, alpha=alpha, gamma=gamma)
    torch.testing.assert_close(y, expected, rtol=0, atol=2e-6)
    torch.testing.assert_close(y.sum(-1), torch.ones(len(x), dtype=x.dtype), rtol=0, atol=1e-12)


@pytest.mark.parametrize("budget", [0.0, 0.5, 1.0, 2.0, 3.5, 4.0])
@pytest.mark.parametrize("gamma", [0.5, 1.0])
@pytest.mark.parametrize("masked", [False, True])
def test_budget_sparsemax_matches_the_convex_solver(budget, gamma, masked):
    x, mask = _rows(int(budget * 10) + masked, d=8)
    mask[:, :4] = True  # every row has at least 4 positions: every budget here is feasible
    mask = mask if masked else None
    y = mappings.budget_sparsemax(x, mask=mask, budget=budget, gamma=gamma)
    expected = _oracle_rows("budget_sparsemax", x, mask, budget=budget, gamma=gamma)
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-6)
    assert ((y >= 0) & (y <= 1)).all()
    torch.testing.assert_close(y.sum(-1), torch.full((len(x),), budget, dtype=x.dtype))


def test_budget_one_is_sparsemax_and_an_integer_budget_can_be_a_top_k():
    x, mask = _rows(3)
    torch.testing.assert_close(
        mappings.budget_sparsemax(x, mask=mask, budget=1.0),
        mappings.sparsemax(x, mask=mask),
        rtol=0,
        atol=1e-12,
    )
    spread = torch.tensor([[0.0, 5.0, 10.0, 15.0, 20.0]], dtype=torch.float64)
    torch.testing.assert_close(
        mappings.budget_sparsemax(spread, budget=2.0),
        torch.tensor([[0.0, 0.0, 0.0, 1.0, 1.0]], dtype=torch.float64),
    )


@pytest.mark.parametrize("alpha", [1.3, 2.0, 4.0])
def test_normmax_gradcheck(alpha):
    x, mask = _rows(40)
    x.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda s: mappings.normmax(s, mask=mask, alpha=alpha, gamma=0.7), (x,), eps=1e-6
    )


def test_normmax_gradcheck_tensor_alpha_and_dims():
    g = torch.Generator().manual_seed(41)
    x = torch.randn(3, 5, 2, generator=g, dtype=torch.float64, requires_grad=True)
    alpha = torch.tensor([1.4, 2.0, 3.5], dtype=torch.float64).view(3, 1, 1)
    y = mappings.normmax(x, dim=1, alpha=alpha)
    for i in range(3):
        for j in range(2):
            torch.testing.assert_close(
                y[i, :, j], mappings.normmax(x[i, :, j], alpha=float(alpha[i])), rtol=0, atol=0
            )
    assert torch.autograd.gradcheck(lambda s: mappings.normmax(s, dim=1, alpha=alpha), (x,))


@pytest.mark.parametrize("budget", [0.0, 1.5, 2.0, 3.0, 3.7, 7.0])
def test_budget_gradcheck_in_scores_and_budget(budget):
    x, _ = _rows(50)
    x.requires_grad_()
    # at an integer budget a row may sit at a vertex (no coordinate strictly inside (0, 1)):
    # the mapping has a kink in the budget there, so the budget is checked where it is not
    b = torch.full((5, 1), budget, dtype=torch.float64, requires_grad=budget % 1 != 0)
    assert torch.autograd.gradcheck(
        lambda s, k: mappings.budget_sparsemax(s, budget=k, gamma=0.8), (x, b), eps=1e-6
    )


@pytest.mark.parametrize("name, params", [("normmax", {"alpha": 1.7}), ("budget_sparsemax", {})])
def test_neg_inf_mask_and_empty_rows(name, params):
    x, mask = _rows(60)
    mask[:, :3] = True
    fn = getattr(mappings, name)
    y = fn(x, mask=mask, **params)
    torch.testing.assert_close(fn(x.masked_fill(~mask, float("-inf")), **params), y)
    assert (y[~mask] == 0).all()
    x[2] = float("-inf")
    assert (fn(x, empty="zero", **params)[2] == 0).all()
    with pytest.raises(ValueError, match="no unmasked position"):
        fn(x, **params)
    x[2, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        fn(x, **params)


def test_modules_and_bad_parameters():
    x, _ = _rows(70)
    torch.testing.assert_close(mappings.Normmax(alpha=3.0)(x), mappings.normmax(x, alpha=3.0))
    torch.testing.assert_close(
        mappings.BudgetSparsemax(budget=3.0)(x), mappings.budget_sparsemax(x, budget=3.0)
    )
    for alpha in (1.0, 0.5, float("nan"), float("inf"), torch.tensor([1.5, 1.0])):
        with pytest.raises(ValueError, match="alpha"):
            mappings.normmax(x, alpha=alpha)
    with pytest.raises(ValueError, match="not differentiable in alpha"):
        mappings.normmax(x, alpha=torch.tensor(1.5, requires_grad=True))
    for budget in (-1.0, float("inf"), torch.tensor([[-0.5]])):
        with pytest.raises(ValueError, match="budget"):
            mappings.budget_sparsemax(x, budget=budget)
    with pytest.raises(ValueError, match="exceeds the number of unmasked positions"):
        mappings.budget_sparsemax(x, budget=7.5)
    with pytest.raises(ValueError, match="budget of shape"):
        mappings.budget_sparsemax(x, budget=torch.ones(7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_low_precision_is_computed_in_float32(dtype):
    x, _ = _rows(80)
    for fn in (mappings.normmax, mappings.budget_sparsemax):
        y = fn(x.to(dtype))
        assert y.dtype == dtype
        torch.testing.assert_close(y, fn(x.to(dtype).double()).to(dtype), rtol=0, atol=1e-5)
