"""fusedmax: sparse attention with contiguous groups of equal weight.

    fusedmax(x; gamma, lam) = argmax_{y in simplex} y.x - gamma (1/2 ||y||^2 + lam sum_i |y_{i+1} - y_i|)
                            = argmin_{y in simplex} 1/2 ||y - x/gamma||^2 + lam sum_i |y_{i+1} - y_i|
                            = P_simplex(prox_TV(x / gamma; lam))          (Niculae & Blondel 2017, Prop. 2)

prox_TV is solved exactly by Condat's direct algorithm. Its Jacobian averages within each
fused segment (Prop. 3), so the backward pass is (1/gamma) J_TV J_P g. With a mask, the
total-variation chain links consecutive *unmasked* positions: left and right padding give
the same result.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ._backward import sparse_vjp
from ._kernels import kernels, mask_arg
from ._rows import check_nonnegative, check_positive, to_rows, unscale
from .simplex import project_simplex_rows


def prox_tv1d_rows(x: torch.Tensor, mask: Optional[torch.Tensor], lam: float):
    """(z, segment) for each row of a (rows, d) tensor: z = argmin 1/2||z - x||^2 + lam TV(z)
    over the unmasked positions; segment labels the fused runs (-1 at masked positions)."""
    if x.device.type != "cpu":
        raise NotImplementedError(
            f"prox_TV has no kernel for {x.device.type} tensors yet; "
            "use --attention-device cpu (the paper's CPU offload) for fusedmax on GPU")
    z, segment = kernels.prox_tv1d_rows(x, mask_arg(mask), float(lam))
    return z, segment


def prox_tv1d(x: torch.Tensor, lam: float, dim: int = -1,
              mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """argmin_z 1/2 ||z - x||^2 + lam sum_i |z_{i+1} - z_i| along `dim` (forward only)."""
    check_nonnegative("lam", lam)
    rows, m, layout = to_rows(x, dim, mask)
    return layout.restore(prox_tv1d_rows(rows, m, lam)[0])


class FusedmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mask, gamma: float, lam: float):
        z, segment = prox_tv1d_rows(unscale(x, gamma), mask, lam)
        y = project_simplex_rows(z, mask)
        ctx.save_for_backward(y, segment)
        ctx.gamma = gamma
        return y

    @staticmethod
    def backward(ctx, grad):
        y, segment = ctx.saved_tensors
        return unscale(sparse_vjp(y, grad, group=segment), ctx.gamma), None, None, None


def fusedmax(scores: torch.Tensor, dim: int = -1, mask: Optional[torch.Tensor] = None,
             gamma: float = 1.0, lam: float = 0.1) -> torch.Tensor:
    """P_simplex(prox_TV(scores / gamma; lam)) over `dim`."""
    check_positive("gamma", gamma)
    check_nonnegative("lam", lam)
    x, m, layout = to_rows(scores, dim, mask)
    return layout.restore(FusedmaxFunction.apply(x, m, float(gamma), float(lam)))


class Fusedmax(nn.Module):
    def __init__(self, gamma: float = 1.0, lam: float = 0.1):
        super().__init__()
        check_positive("gamma", gamma)
        check_nonnegative("lam", lam)
        self.gamma, self.lam = gamma, lam

    def forward(self, scores, dim=-1, mask=None):
        return fusedmax(scores, dim, mask, self.gamma, self.lam)

    def extra_repr(self):
        return f"gamma={self.gamma}, lam={self.lam}"
