"""alpha-normmax: the alpha-norm regularized max (entmax 1.3's `normmax_bisect`).

    normmax(x; alpha, gamma) = argmax_{y in simplex} y.x - gamma ||y||_alpha,   alpha > 1

||y||_alpha is strictly convex on the simplex for alpha > 1 (the simplex holds no two points
of one ray), so the maximizer is unique; alpha = 1 is excluded (||y||_1 = 1 there: every
point is a maximizer). With z = x / gamma, the optimality conditions
(y_i / ||y||_alpha)^(alpha-1) = [z_i - tau]_+ give

    q_i = [z_i - tau]_+^(1/(alpha-1)),  tau such that sum_i q_i^alpha = 1,  y = q / sum(q),

so q = y / ||y||_alpha and sum(q) = 1 / ||y||_alpha. tau lies in
[max z - 1, max z - n^(-(alpha-1)/alpha)] (n unmasked positions) and is found by bisection to
the dtype's resolution, on each row minus its max (tau absorbs the shift).

Jacobian (not symmetric): with beta = 1 / (alpha - 1), s = sum(q) and b = q^(2-alpha) on the
support, differentiating q_i^(alpha-1) = z_i - tau under sum q^alpha = 1 gives
dtau = y.dz and dq = beta b (dz - y.dz), hence dy = (dq - y sum(dq)) / s, and the
vector-Jacobian product

    grad_z = (beta / s) (w - sum(w) y),   w = b * (g - g.y).

Pure torch (any device); no compiled or Triton kernel.
"""

from __future__ import annotations

import math

import torch

from ._module import MappingModule
from ._rows import bisect_threshold, check_positive, neg_inf_masked, per_row, to_rows, unscale


def check_normmax(alpha, gamma: float = 1.0) -> None:
    """Raises ValueError unless alpha is a number > 1 (or a tensor > 1 everywhere) and gamma a
    finite number > 0.
    """
    if isinstance(alpha, torch.Tensor):
        if torch.isnan(alpha).any() or (alpha <= 1).any() or torch.isinf(alpha).any():
            raise ValueError(
                "normmax's alpha must be finite and > 1 everywhere (alpha = 1 has no unique "
                f"maximizer); got min {alpha.min().item()!r}"
            )
    elif not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 1):
        raise ValueError(
            f"normmax's alpha must be a finite number > 1 (alpha = 1 has no unique "
            f"maximizer), got {alpha!r}"
        )
    check_positive("gamma", gamma)


def normmax_rows(z: torch.Tensor, mask: torch.Tensor | None, alpha: torch.Tensor) -> torch.Tensor:
    """Normmax of each row of a (rows, d) tensor shifted to a max of 0 over its unmasked
    positions (masked entries 0); alpha (rows, 1). Bisection on tau, then y = q / sum(q).
    """
    am1 = alpha - 1
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
        n = mask.sum(-1, keepdim=True).to(z.dtype)
    else:
        n = torch.full_like(am1, z.shape[-1])
    power = alpha / am1  # q^alpha = [z - tau]_+^(alpha / (alpha - 1))

    def below_root(tau):  # sum q(tau)^alpha >= 1
        return (z - tau).clamp_min(0).pow(power).sum(-1, keepdim=True) >= 1

    # at tau = -1 the top q is 1; at tau = -n^(-am1/alpha) every q^alpha <= 1/n
    tau = bisect_threshold(torch.full_like(am1, -1.0), -n.pow(-am1 / alpha), below_root)
    q = (z - tau).clamp_min(0).pow(1 / am1)
    return q / q.sum(-1, keepdim=True)


class NormmaxFunction(torch.autograd.Function):
    """Normmax on (rows, d) shifted rows with optional mask, alpha (rows, 1); gradient by the
    implicit function theorem (module docstring). Not differentiable in alpha.
    """

    @staticmethod
    def forward(ctx, z, mask, alpha):
        """Computes the mapping of the (rows, d) scores and saves what the backward needs."""
        y = normmax_rows(z, mask, alpha)
        ctx.save_for_backward(y, alpha)
        return y

    @staticmethod
    def backward(ctx, grad):
        """The vector-Jacobian product (beta / s) (w - sum(w) y), w = y^(2-alpha) (g - g.y)
        scaled by s^(2-alpha) (module docstring), with s = 1 / ||y||_alpha.
        """
        y, alpha = ctx.saved_tensors
        support = y > 0
        # s^(1-alpha) = ||y||_alpha^(alpha-1); b / s = s^(1-alpha) y^(2-alpha)
        scale = y.pow(alpha).sum(-1, keepdim=True).pow((alpha - 1) / alpha) / (alpha - 1)
        r = grad - (grad * y).sum(-1, keepdim=True)
        w = torch.where(support, y.pow(2 - alpha), 0.0) * r
        return scale * (w - w.sum(-1, keepdim=True) * y), None, None


@neg_inf_masked
def normmax(
    scores: torch.Tensor,
    dim: int = -1,
    mask: torch.Tensor | None = None,
    alpha: float | torch.Tensor = 2.0,
    gamma: float = 1.0,
    empty: str = "error",
) -> torch.Tensor:
    """alpha-normmax: argmax_{y in simplex} y.scores - gamma ||y||_alpha along `dim`, sparse
    (entmax 1.3's `normmax_bisect`, solved to the dtype's resolution).

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
    alpha : Union[float, torch.Tensor]
        the norm's exponent, a finite number > 1, or a tensor of such numbers broadcastable
        to the scores with size 1 along `dim` (not differentiated).
    gamma : float
        regularization strength, a finite number > 0.
    empty : str
        what a row with no unmasked position gets: "error" (a ValueError) or "zero".

    Returns
    -------
    torch.Tensor
        A tensor of the shape (broadcast with `mask`) and dtype of `scores`, each row along
        `dim` a sparse probability vector over its unmasked positions.

    Raises
    ------
    ValueError
        on a bad alpha or gamma, a mask that is not bool or does not broadcast, an empty
        `dim` or row (with empty="error"), +inf or NaN unmasked scores, or a row whose
        max - min overflows the dtype.
    """
    check_normmax(alpha, gamma)
    if isinstance(alpha, torch.Tensor) and alpha.requires_grad:
        raise ValueError(
            "normmax is not differentiable in alpha: pass a tensor alpha that does not "
            "require grad (alpha.detach())"
        )
    rows = to_rows(scores, dim, mask, empty=empty, gamma=gamma)
    alpha_rows = per_row(alpha, rows, "alpha")
    return rows.apply(lambda x, m, a: NormmaxFunction.apply(unscale(x, gamma), m, a), alpha_rows)


class Normmax(MappingModule):
    """`normmax` as an nn.Module with a fixed alpha and gamma; see `normmax` for the arguments."""

    def __init__(self, alpha: float = 2.0, gamma: float = 1.0, empty: str = "error"):
        super().__init__(normmax, check_normmax, empty, alpha=alpha, gamma=gamma)
