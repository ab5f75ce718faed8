"""oscarmax: sparse attention with clusters of equal weight, contiguous or not.

    oscarmax(x; gamma, lam) = argmin_{y in simplex} 1/2 ||y - x/gamma||^2 + lam sum_{i<j} max(|y_i|, |y_j|)

On the simplex |y_i| = y_i, so the OSCAR penalty equals P(y) = lam sum_{i<j} max(y_i, y_j)
= lam sum_k (d - k) y_[k] (values sorted decreasingly; d counts the unmasked positions), and
we compute

    oscarmax(x) = P_simplex(prox_P(x / gamma))      (Niculae & Blondel 2017, Prop. 2).

Why P and not OSCAR itself: Prop. 2 needs a prox that commutes with adding a constant to
every coordinate, which prox_P does (P(y + c1) = P(y) + const * c) and the prox of the
absolute-value form does not; with negative scores P_simplex(prox_OSCAR(.)) is not the
minimizer (tests/mappings check both against a convex solver). prox_P sorts the values,
subtracts the weights and pools adjacent violators (Zeng & Figueiredo 2014, minus the
absolute values). Its Jacobian averages within each pooled cluster (Prop. 3), so the backward
pass is (1/gamma) J_P J_simplex g.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ._backward import sparse_vjp
from ._kernels import kernels, mask_arg
from ._rows import check_nonnegative, check_positive, to_rows, unscale
from .simplex import project_simplex_rows


def prox_pairwise_max_rows(x: torch.Tensor, mask: Optional[torch.Tensor], lam: float):
    """(z, cluster) for each row of a (rows, d) tensor: z = argmin 1/2||z - x||^2 +
    lam sum_{i<j} max(z_i, z_j) over the unmasked positions; cluster labels the pooled
    blocks (-1 at masked positions)."""
    if x.device.type != "cpu":
        raise NotImplementedError(
            f"the oscarmax prox has no kernel for {x.device.type} tensors yet; "
            "use --attention-device cpu (the paper's CPU offload) for oscarmax on GPU")
    z, cluster = kernels.prox_pairwise_max_rows(x, mask_arg(mask), float(lam))
    return z, cluster


def prox_pairwise_max(x: torch.Tensor, lam: float, dim: int = -1,
                      mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """argmin_z 1/2 ||z - x||^2 + lam sum_{i<j} max(z_i, z_j) along `dim` (forward only)."""
    check_nonnegative("lam", lam)
    rows, m, layout = to_rows(x, dim, mask)
    return layout.restore(prox_pairwise_max_rows(rows, m, lam)[0])


class OscarmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mask, gamma: float, lam: float):
        z, cluster = prox_pairwise_max_rows(unscale(x, gamma), mask, lam)
        y = project_simplex_rows(z, mask)
        ctx.save_for_backward(y, cluster)
        ctx.gamma = gamma
        return y

    @staticmethod
    def backward(ctx, grad):
        y, cluster = ctx.saved_tensors
        return unscale(sparse_vjp(y, grad, group=cluster), ctx.gamma), None, None, None


def oscarmax(scores: torch.Tensor, dim: int = -1, mask: Optional[torch.Tensor] = None,
             gamma: float = 1.0, lam: float = 0.01) -> torch.Tensor:
    """P_simplex(prox_P(scores / gamma; lam)) over `dim` (see the module docstring)."""
    check_positive("gamma", gamma)
    check_nonnegative("lam", lam)
    x, m, layout = to_rows(scores, dim, mask)
    return layout.restore(OscarmaxFunction.apply(x, m, float(gamma), float(lam)))


class Oscarmax(nn.Module):
    def __init__(self, gamma: float = 1.0, lam: float = 0.01):
        super().__init__()
        check_positive("gamma", gamma)
        check_nonnegative("lam", lam)
        self.gamma, self.lam = gamma, lam

    def forward(self, scores, dim=-1, mask=None):
        return oscarmax(scores, dim, mask, self.gamma, self.lam)

    def extra_repr(self):
        return f"gamma={self.gamma}, lam={self.lam}"
