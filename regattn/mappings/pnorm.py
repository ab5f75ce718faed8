"""sq-pnorm-max: the squared p-norm regularized max, p in (1, 2].

    sq_pnorm_max(x; gamma, p) = argmin_{y in simplex} gamma/2 ||y||_p^2 - y.x

Forward. The KKT conditions give y = u(tau) / sum(u(tau)) with u_i(tau) = (x_i - tau)_+^{1/(p-1)}
and tau the root of  sum(u) = gamma ||u||_p^{2-p}. At the solution x_max - tau <= gamma
(since ||y||_p <= 1), so tau lies in [x_max - gamma, x_max]. The CPU kernel runs safeguarded
Newton there (see csrc/row_algorithms.h), the torch reference bisects; both stop at the
floating point resolution of the input dtype. This replaces the paper's projected-gradient loop
(which it ran at tolerance 1e-2) with a solution exact to float precision.

Backward (Prop. 1, restricted to the support S). Differentiating the KKT system
gamma H_SS dy_S + dtau 1 = dx_S, 1.dy_S = 0 with H the Hessian of 1/2 ||y||_p^2,
H = diag((p-1) ||y||_p^{2-p} y^{p-2}) + (2-p) ||y||_p^{2-2p} y^{p-1} (y^{p-1})^T,
a diagonal plus rank one matrix, which Sherman-Morrison inverts in O(|S|). The Jacobian is
symmetric, so the same product serves as the vector-Jacobian product. On CPU the kernel
computes it in one pass per row from a few sums (csrc/row_algorithms.h); the torch version
below is the reference.
"""

from __future__ import annotations

import torch

from ._kernels import backend_for, kernels, mask_arg, triton_kernels
from ._module import MappingModule
from ._rows import bisect_threshold, check_positive, neg_inf_masked, to_rows


def check_sq_pnorm_max(gamma: float, p: float) -> None:
    """Raises ValueError unless gamma is a finite number > 0 and p lies in (1, 2]."""
    check_positive("gamma", gamma)
    if not (isinstance(p, (int, float)) and 1 < p <= 2):
        raise ValueError(f"p must lie in (1, 2] for sq_pnorm_max, got {p!r}")


def sq_pnorm_max_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float, p: float):
    """sq-pnorm-max of each row of a (rows, d) tensor over its unmasked positions: the
    kernel's safeguarded Newton iteration on CPU, the torch reference (bisection) elsewhere.
    """
    path = backend_for(x)
    if path == "cpu":
        return kernels.sq_pnorm_max_rows(x, mask_arg(mask), float(gamma), float(p))
    if path == "triton":
        return triton_kernels().sq_pnorm_max_rows(x, mask, float(gamma), float(p))
    return sq_pnorm_max_rows_by_bisection(x, mask, gamma, p)


def sq_pnorm_max_rows_by_bisection(
    x: torch.Tensor, mask: torch.Tensor | None, gamma: float, p: float
):
    """Bisection on tau in torch ops, to the dtype's resolution."""
    q = 1.0 / (p - 1.0)
    if mask is not None:
        x = x.masked_fill(~mask, float("-inf"))
    x_max = x.max(dim=-1, keepdim=True).values

    def unnormalized(tau):
        return (x - tau).clamp_min(0.0).pow(q)

    def below_root(tau):
        u = unnormalized(tau)
        # sum(u) - gamma ||u||_p^{2-p}, with u scaled by its max for range safety
        # (both sides are homogeneous: degrees 1 and 2-p)
        scale = u.amax(dim=-1, keepdim=True)
        un = u / scale.clamp_min(torch.finfo(x.dtype).tiny)
        excess = un.sum(-1, keepdim=True) * scale.pow(p - 1) - gamma * un.pow(p).sum(
            -1, keepdim=True
        ).pow((2 - p) / p)
        # tau too low (too much mass). Where rounding put tau at x_max, u is all zero: that
        # is the "too little mass" side.
        return (excess >= 0) & (scale > 0)

    # excess(x_max - gamma) >= 0 > excess(tau) just below x_max
    u = unnormalized(bisect_threshold(x_max - gamma, x_max, below_root))
    return u / u.sum(-1, keepdim=True)


def sq_pnorm_max_jvp(y: torch.Tensor, v: torch.Tensor, gamma: float, p: float) -> torch.Tensor:
    """J v for y = sq_pnorm_max(x), y and v (rows, d); J is symmetric. Compiled kernel on
    CPU, the torch reference elsewhere.
    """
    path = backend_for(y)
    if path == "cpu":
        return kernels.sq_pnorm_max_jvp_rows(y, v.contiguous(), float(gamma), float(p))
    if path == "triton":
        return triton_kernels().sq_pnorm_max_jvp(y, v, float(gamma), float(p))
    return sq_pnorm_max_jvp_reference(y, v, gamma, p)


def sq_pnorm_max_jvp_reference(
    y: torch.Tensor, v: torch.Tensor, gamma: float, p: float
) -> torch.Tensor:
    """J v by the formulas above in torch ops (any device)."""
    support = y > 0
    norm = y.pow(p).sum(-1, keepdim=True).pow(1.0 / p)
    # inverse of the diagonal part gamma (p-1) ||y||^{2-p} y^{p-2}; 0 off the support
    d_inv = torch.where(support, y.pow(2 - p), 0.0) / (gamma * (p - 1) * norm.pow(2 - p))
    # rank-one part w w^T with w = sqrt(gamma (2-p)) ||y||^{1-p} y^{p-1}
    w = torch.where(support, y.pow(p - 1), 0.0) * ((gamma * (2 - p)) ** 0.5 * norm.pow(1 - p))
    d_inv_w = d_inv * w
    denom = 1 + (w * d_inv_w).sum(-1, keepdim=True)

    def solve(a):  # (diag + w w^T)^{-1} a restricted to the support
        return d_inv * a - d_inv_w * ((d_inv * a * w).sum(-1, keepdim=True) / denom)

    m_inv_v, m_inv_1 = solve(v), solve(torch.ones_like(v))
    dtau = m_inv_v.sum(-1, keepdim=True) / m_inv_1.sum(-1, keepdim=True)
    return m_inv_v - dtau * m_inv_1


class SqPnormMaxFunction(torch.autograd.Function):
    """sq-pnorm-max on (rows, d) with optional row mask; gradient by Prop. 1 (Sherman-Morrison)."""

    @staticmethod
    def forward(ctx, x, mask, gamma: float, p: float):
        """Computes the mapping of the (rows, d) scores and saves what the backward needs."""
        y = sq_pnorm_max_rows(x, mask, gamma, p)
        ctx.save_for_backward(y)
        ctx.gamma, ctx.p = gamma, p
        return y

    @staticmethod
    def backward(ctx, grad):
        """The vector-Jacobian product: J grad, J symmetric (Prop. 1 restricted to the support)."""
        (y,) = ctx.saved_tensors
        return sq_pnorm_max_jvp(y, grad, ctx.gamma, ctx.p), None, None, None


@neg_inf_masked
def sq_pnorm_max(
    scores: torch.Tensor,
    dim: int = -1,
    mask: torch.Tensor | None = None,
    gamma: float = 1.0,
    p: float = 1.5,
    empty: str = "error",
) -> torch.Tensor:
    """sq-pnorm-max (Niculae & Blondel 2017): the squared p-norm regularized max,
    argmin_{y in simplex} gamma/2 ||y||_p^2 - y.scores, along `dim`. Sparse for p in (1, 2]
    (p = 2 is sparsemax); solved to the dtype's resolution (see the module docstring).

    Parameters
    ----------
    scores : torch.Tensor
        floating-point tensor of any shape (float16/bfloat16 are computed in float32
        and cast back).
    dim : int
        the dimension to normalize over.
    mask : Optional[torch.Tensor]
        optional bool tensor broadcastable to `scores`, True where a position may be
        attended to; masked positions get exactly 0 (they are removed from the problem).
    gamma : float
        regularization strength, a finite number > 0.
    p : float
        the norm's exponent, in (1, 2].
    empty : str
        what a row with no unmasked position gets: "error" (a ValueError) or "zero"
        (all zeros, zero gradient).

    Returns
    -------
    torch.Tensor
        A tensor of the shape (broadcast with `mask`) and dtype of `scores`, each row along
        `dim` a sparse probability vector over its unmasked positions.

    Raises
    ------
    ValueError
        on bad parameters, a mask that is not bool or does not broadcast, an empty
        `dim` or row (with empty="error"), NaN or infinite unmasked scores, or a row whose
        max - min overflows the dtype.
    """
    check_sq_pnorm_max(gamma, p)
    rows = to_rows(scores, dim, mask, kernel=True, empty=empty)
    return rows.apply(lambda x, m: SqPnormMaxFunction.apply(x, m, float(gamma), float(p)))


class SqPnormMax(MappingModule):
    """`sq_pnorm_max` as an nn.Module with fixed parameters (arguments: see `sq_pnorm_max`)."""

    def __init__(self, gamma: float = 1.0, p: float = 1.5, empty: str = "error"):
        super().__init__(sq_pnorm_max, check_sq_pnorm_max, empty, gamma=gamma, p=p)
