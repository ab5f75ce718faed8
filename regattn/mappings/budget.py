"""budget sparsemax: sparsemax over the capped simplex (entmax 1.3's `budget_bisect`).

    budget_sparsemax(x; budget, gamma) = argmax_{0 <= y <= 1, sum(y) = budget} y.x - gamma/2 ||y||^2
                                       = P_capped(x / gamma)

the Euclidean projection of z = x / gamma onto {y in [0, 1]^n : sum(y) = budget}, a
"k-subset" relaxation: budget = 1 is sparsemax, an integer budget k puts mass 1 on the top k
positions when their scores stand far enough apart. The output sums to `budget`, not 1.

The solution is y = clip(z - tau, 0, 1) with tau such that sum(y) = budget (0 <= budget <= n,
n the row's unmasked positions). tau is bracketed by [min z - 1, max z], bisected to the
dtype's resolution, then finished exactly: with U = {y = 1} and A = {0 < y < 1} from the
current tau, tau = (sum_A z + |U| - budget) / |A|, repeated a few times (from a tau at
the dtype's resolution the sets are right, or off by values within rounding of tau).

Jacobian (symmetric): on the active set A, J = (I - 1 1^T / |A|) / gamma, 0 elsewhere (the
capped coordinates do not move); in the budget, dy_i / dbudget = 1 / |A| on A.

Pure torch (any device); no compiled or Triton kernel.
"""

from __future__ import annotations

import math

import torch

from ._module import MappingModule
from ._rows import bisect_threshold, check_positive, neg_inf_masked, per_row, to_rows, unscale


def check_budget(budget, gamma: float = 1.0) -> None:
    """Raises ValueError unless budget is a finite number >= 0 (or a tensor of such numbers)
    and gamma a finite number > 0 (whether budget exceeds a row's positions is checked with
    the rows).
    """
    if isinstance(budget, torch.Tensor):
        if not bool(torch.isfinite(budget).all()) or bool((budget < 0).any()):
            raise ValueError(f"budget must be finite and >= 0 everywhere, got {budget!r}")
    elif not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget >= 0):
        raise ValueError(f"budget must be a finite number >= 0, got {budget!r}")
    check_positive("gamma", gamma)


def budget_rows(z: torch.Tensor, mask: torch.Tensor | None, budget: torch.Tensor) -> torch.Tensor:
    """The capped-simplex projection of each row of a (rows, d) tensor over its unmasked
    positions (masked positions get 0); budget (rows, 1), at most each row's count.
    """
    valid = torch.ones_like(z, dtype=torch.bool) if mask is None else mask
    n = valid.sum(-1, keepdim=True).to(z.dtype)
    if bool((budget > n).any()):
        raise ValueError(
            "budget exceeds the number of unmasked positions of a row: no y in [0, 1]^n sums to it"
        )
    top = z.masked_fill(~valid, float("-inf")).amax(-1, keepdim=True)
    low = z.masked_fill(~valid, float("inf")).amin(-1, keepdim=True)

    def mass(tau):
        return torch.where(valid, (z - tau).clamp(0, 1), 0.0).sum(-1, keepdim=True)

    # mass(low - 1) = n >= budget >= 0 = mass(top); bisect_threshold halves a unit bracket
    # to the dtype's resolution, so bisect on the bracket rescaled to [0, 1]
    width = top - low + 1
    t = bisect_threshold(
        torch.zeros_like(top), torch.ones_like(top), lambda t: mass(low - 1 + t * width) >= budget
    )
    tau = low - 1 + t * width
    for _ in range(4):  # exact finish on the active set
        active = valid & (z > tau) & (z - tau < 1)
        capped = valid & (z - tau >= 1)
        size = active.sum(-1, keepdim=True).to(z.dtype)
        exact = (
            torch.where(active, z, 0.0).sum(-1, keepdim=True)
            + capped.sum(-1, keepdim=True)
            - budget
        ) / size.clamp_min(1)
        tau = torch.where(size > 0, exact, tau)
    return torch.where(valid, (z - tau).clamp(0, 1), 0.0)


class BudgetFunction(torch.autograd.Function):
    """Budget sparsemax on (rows, d) with optional mask, budget (rows, 1); differentiable in
    the scores and the budget.
    """

    @staticmethod
    def forward(ctx, z, mask, budget):
        """Computes the mapping of the (rows, d) scores and saves what the backward needs."""
        y = budget_rows(z, mask, budget)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        """The vector-Jacobian product: grad minus its mean over the active set, on it."""
        (y,) = ctx.saved_tensors
        active = (y > 0) & (y < 1)
        size = active.sum(-1, keepdim=True).clamp_min(1).to(grad.dtype)
        mean = torch.where(active, grad, 0.0).sum(-1, keepdim=True) / size
        grad_budget = None
        if ctx.needs_input_grad[2]:
            grad_budget = mean
        return torch.where(active, grad - mean, 0.0), None, grad_budget


@neg_inf_masked
def budget_sparsemax(
    scores: torch.Tensor,
    dim: int = -1,
    mask: torch.Tensor | None = None,
    budget: float | torch.Tensor = 2.0,
    gamma: float = 1.0,
    empty: str = "error",
) -> torch.Tensor:
    """Budget sparsemax: the projection of scores / gamma onto the capped simplex
    {y in [0, 1]^n : sum(y) = budget}, i.e. argmax y.scores - gamma/2 ||y||^2 over it, along
    `dim` (entmax 1.3's `budget_bisect`, solved exactly).

    Parameters
    ----------
    scores : torch.Tensor
        floating-point tensor of any shape (float16/bfloat16 are computed in float32
        and cast back).
    dim : int
        the dimension to normalize over.
    mask : Optional[torch.Tensor]
        optional bool tensor broadcastable to `scores`, True where a position may be
        attended to; masked positions (and -inf scores) get exactly 0.
    budget : Union[float, torch.Tensor]
        the total mass, a finite number between 0 and each row's number of unmasked
        positions, or a tensor of such numbers broadcastable to the scores with size 1
        along `dim` (differentiable).
    gamma : float
        temperature, a finite number > 0.
    empty : str
        what a row with no unmasked position gets: "error" (a ValueError) or "zero".

    Returns
    -------
    torch.Tensor
        A tensor of the shape (broadcast with `mask`) and dtype of `scores`, each row along
        `dim` in [0, 1] and summing to its budget.

    Raises
    ------
    ValueError
        on a bad budget (negative, not finite, or above a row's number of unmasked
        positions) or gamma, a mask that is not bool or does not broadcast, an empty `dim` or
        row (with empty="error"), +inf or NaN unmasked scores, or a row whose max - min
        overflows the dtype.
    """
    check_budget(budget, gamma)
    rows = to_rows(scores, dim, mask, empty=empty, gamma=gamma)
    budget_rows_ = per_row(budget, rows, "budget")
    return rows.apply(lambda x, m, b: BudgetFunction.apply(unscale(x, gamma), m, b), budget_rows_)


class BudgetSparsemax(MappingModule):
    """`budget_sparsemax` as an nn.Module with a fixed budget and gamma; see
    `budget_sparsemax` for the arguments.
    """

    def __init__(self, budget: float = 2.0, gamma: float = 1.0, empty: str = "error"):
        super().__init__(budget_sparsemax, check_budget, empty, budget=budget, gamma=gamma)
