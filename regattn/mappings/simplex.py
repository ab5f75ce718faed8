"""softmax and sparsemax: the entropic and squared-l2 regularized maxes.

    softmax(x; gamma)   = argmax_{y in simplex} y.x - gamma * sum_i y_i log y_i = softmax(x / gamma)
    sparsemax(x; gamma) = argmax_{y in simplex} y.x - gamma/2 ||y||^2          = P_simplex(x / gamma)

P_simplex is the Euclidean projection onto the probability simplex (Michelot 1986;
Duchi et al. 2008): y = (z - tau)_+ with tau chosen so that sum(y) = 1. Its Jacobian is
diag(s) - s s^T / |s| with s the support indicator (Martins & Astudillo 2016).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ._backward import sparse_vjp
from ._kernels import kernels, mask_arg, use_kernels
from ._rows import check_positive, to_rows, unscale


def project_simplex_rows(z: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Exact projection of each row of a (rows, d) tensor onto the simplex over its unmasked
    positions (masked positions get 0)."""
    if use_kernels(z):
        return kernels.project_simplex_rows(z, mask_arg(mask))
    return project_simplex_rows_by_sort(z, mask)


def project_simplex_rows_by_sort(z: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Sort-based projection in plain torch ops (any device): tau is set by the largest k with
    z_(k) > (sum_{j<=k} z_(j) - 1) / k."""
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
    z_sorted, _ = torch.sort(z, dim=-1, descending=True)
    finite = torch.isfinite(z_sorted)
    cumsum = torch.where(finite, z_sorted, 0.0).cumsum(-1) - 1
    k = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    support = (k * z_sorted > cumsum) & finite
    size = support.sum(-1, keepdim=True)
    tau = cumsum.gather(-1, size - 1) / size.to(z.dtype)
    return (z - tau).clamp_min(0.0)


class SparsemaxFunction(torch.autograd.Function):
    """sparsemax on (rows, d) with optional row mask; gradient by the support formula."""

    @staticmethod
    def forward(ctx, x, mask, gamma: float):
        y = project_simplex_rows(unscale(x, gamma), mask)
        ctx.save_for_backward(y)
        ctx.gamma = gamma
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return unscale(sparse_vjp(y, grad), ctx.gamma), None, None


def softmax(scores: torch.Tensor, dim: int = -1, mask: Optional[torch.Tensor] = None,
            gamma: float = 1.0) -> torch.Tensor:
    """softmax(scores / gamma) over `dim`; masked positions get exactly 0."""
    check_positive("gamma", gamma)
    x, m, layout = to_rows(scores, dim, mask)
    if m is not None:
        x = x.masked_fill(~m, float("-inf"))
    return layout.restore(torch.softmax(unscale(x, gamma), dim=-1))


def sparsemax(scores: torch.Tensor, dim: int = -1, mask: Optional[torch.Tensor] = None,
              gamma: float = 1.0) -> torch.Tensor:
    """P_simplex(scores / gamma) over `dim`: sparse probabilities (exact zeros)."""
    check_positive("gamma", gamma)
    x, m, layout = to_rows(scores, dim, mask, kernel_checks_finite=True)
    return layout.restore(SparsemaxFunction.apply(x, m, float(gamma)))


class Softmax(nn.Module):
    def __init__(self, gamma: float = 1.0):
        super().__init__()
        check_positive("gamma", gamma)
        self.gamma = gamma

    def forward(self, scores, dim=-1, mask=None):
        return softmax(scores, dim, mask, self.gamma)

    def extra_repr(self):
        return f"gamma={self.gamma}"


class Sparsemax(nn.Module):
    def __init__(self, gamma: float = 1.0):
        super().__init__()
        check_positive("gamma", gamma)
        self.gamma = gamma

    def forward(self, scores, dim=-1, mask=None):
        return sparsemax(scores, dim, mask, self.gamma)

    def extra_repr(self):
        return f"gamma={self.gamma}"
