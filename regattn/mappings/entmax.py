"""alpha-entmax: the Tsallis-entropy regularized max (Peters, Niculae & Martins 2019).

    entmax(x; alpha) = argmax_{y in simplex} y.x + H_alpha(y),
    H_alpha(y) = (1 - sum_i y_i^alpha) / (alpha (alpha - 1))   (alpha > 1; alpha -> 1: Shannon)

With a temperature gamma > 0, as for the other regularized maxes (Omega = -H_alpha):

    entmax(x; alpha, gamma) = argmax_{y in simplex} y.x + gamma H_alpha(y)
                            = entmax(x / gamma; alpha)

(divide the objective by gamma). gamma = 1 is the paper's entmax; a larger gamma gives a
wider support, a smaller one a narrower support. The Jacobian in x is the one below times
1/gamma.

The solution is y = [(alpha - 1) x - tau]_+^{1/(alpha - 1)} with tau such that sum(y) = 1.
alpha = 1 is softmax, alpha = 2 is sparsemax. alpha = 1.5 has an exact threshold: the CPU
kernel runs Newton steps on the active set and finishes in closed form (no sort;
entmax15_row in csrc/row_algorithms.h), the torch reference sorts (entmax15_rows_by_sort).
Any other alpha (and a tensor alpha, e.g. learned per head) finds tau in
[max((alpha-1)x) - 1, max((alpha-1)x) - d^{1-alpha}] to the dtype's resolution: the CPU
kernel by safeguarded Halley/Newton steps (entmax_halley_row), the torch reference by
bisection. Every path computes on x minus its row max (y does not change when a constant is
added to a row), so the threshold arithmetic is exact to the scores' spread.

Jacobian (symmetric): with g = y^{2-alpha} on the support, J v = g*v - (g.v / sum g) g
(see _backward.py).
Gradient with respect to alpha (Correia, Niculae & Martins 2019, Prop. 1), derived by
differentiating y_i^{alpha-1} = (alpha-1) x_i - tau at fixed x, with g^ = g / sum g:
    dy_i/dalpha = (y_i - g^_i) / (alpha-1)^2 - (y_i log y_i - g^_i sum_j y_j log y_j) / (alpha-1).
"""

from __future__ import annotations

import math

import torch

from ._backward import sparse_vjp
from ._kernels import backend_for, kernels, mask_arg, triton_kernels, use_kernels
from ._module import MappingModule
from ._rows import bisect_threshold, check_positive, neg_inf_masked, per_row, to_rows, unscale
from .simplex import SparsemaxFunction, softmax


def entmax15_rows(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Exact 1.5-entmax of each row of a (rows, d) tensor over its unmasked positions."""
    path = backend_for(x)
    if path == "cpu":
        return kernels.entmax15_rows(x, mask_arg(mask))
    if path == "triton":
        return triton_kernels().entmax15_rows(x, mask)
    return entmax15_rows_by_sort(x, mask)


def entmax15_rows_by_sort(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The same threshold in plain torch ops (any device): for the k largest v = x/2,
    tau_k = mean_k - sqrt(1/k - var_k); the support is the largest k with tau_k <= v_(k).
    """
    v = x / 2
    if mask is not None:
        # the row minimum keeps squares finite; positions beyond the row's count are ignored
        v = torch.where(mask, v, v.masked_fill(~mask, float("inf")).amin(-1, keepdim=True))
    v_sorted, _ = torch.sort(v, dim=-1, descending=True)
    k = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype)
    mean = v_sorted.cumsum(-1) / k
    mean_sq = v_sorted.square().cumsum(-1) / k
    tau = mean - (1 / k - mean_sq + mean.square()).clamp_min(0).sqrt()
    support = tau <= v_sorted
    if mask is not None:
        support &= k <= mask.sum(-1, keepdim=True)
    size = support.sum(-1, keepdim=True)
    y = (v - tau.gather(-1, size - 1)).clamp_min(0).square()
    return y if mask is None else y.masked_fill(~mask, 0.0)


def entmax_threshold_rows(
    x: torch.Tensor, mask: torch.Tensor | None, alpha: torch.Tensor
) -> torch.Tensor:
    """alpha-entmax of each row, alpha (rows, 1) with every entry > 1: the kernel's
    safeguarded Halley/Newton iteration on CPU, bisection in the Triton kernel (CUDA; it
    flags alpha <= 1 without a synchronization), the torch reference (bisection) elsewhere.
    """
    path = backend_for(x)
    if path == "cpu":
        return kernels.entmax_halley_rows(x, mask_arg(mask), alpha.reshape(-1).contiguous())
    if path == "triton":
        return triton_kernels().entmax_rows(x, mask, alpha)
    return entmax_rows_by_bisection(x, mask, alpha)


def entmax_rows_by_bisection(
    x: torch.Tensor, mask: torch.Tensor | None, alpha: torch.Tensor
) -> torch.Tensor:
    """Bisection on tau in torch ops, to the dtype's resolution."""
    am1 = alpha - 1
    z = x * am1
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
        n = mask.sum(-1, keepdim=True).to(x.dtype)
    else:
        n = torch.full_like(am1, x.shape[-1])
    z_max = z.max(-1, keepdim=True).values
    inv = 1 / am1

    def below_root(tau):  # mass(tau) >= 1
        return (z - tau).clamp_min(0).pow(inv).sum(-1, keepdim=True) >= 1

    # mass(z_max - 1) >= 1 >= mass(z_max - n^{-am1})
    tau = bisect_threshold(z_max - 1, z_max - n.pow(-am1), below_root)
    y = (z - tau).clamp_min(0).pow(inv)
    return y / y.sum(-1, keepdim=True)


class Entmax15Function(torch.autograd.Function):
    """1.5-entmax on (rows, d) with optional row mask; gradient by the support formula with
    weights y^(1/2).
    """

    @staticmethod
    def forward(ctx, x, mask):
        """Computes the mapping of the (rows, d) scores and saves what the backward needs."""
        y = entmax15_rows(x, mask)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        """The vector-Jacobian product: the support Jacobian with weights y^(1/2)."""
        (y,) = ctx.saved_tensors
        return sparse_vjp(y, grad, alpha=1.5), None


class EntmaxFunction(torch.autograd.Function):
    """alpha-entmax with alpha a (rows, 1) tensor; differentiable in x and alpha."""

    @staticmethod
    def forward(ctx, x, mask, alpha):
        """Computes the mapping of the (rows, d) scores and saves what the backward needs."""
        if use_kernels(x) and not ctx.needs_input_grad[2]:
            # the kernel also returns the backward's weights y^{2-alpha}, which it gets with
            # no call to pow; the backward then needs neither y nor alpha
            y, weight = kernels.entmax_halley_weights_rows(
                x, mask_arg(mask), alpha.reshape(-1).contiguous()
            )
            ctx.save_for_backward(weight)
            ctx.weighted = True
            return y
        y = entmax_threshold_rows(x, mask, alpha)
        ctx.save_for_backward(y, alpha)
        ctx.weighted = False
        return y

    @staticmethod
    def backward(ctx, grad):
        """The vector-Jacobian product: the support Jacobian with weights y^(2-alpha), and
        d/dalpha when alpha needs a gradient.
        """
        if ctx.weighted:
            (weight,) = ctx.saved_tensors
            return kernels.weighted_jvp_rows(weight, grad.contiguous()), None, None
        y, alpha = ctx.saved_tensors
        grad_x = sparse_vjp(y, grad, alpha=alpha)
        grad_alpha = None
        if ctx.needs_input_grad[2]:
            am1 = alpha - 1
            g = torch.where(y > 0, y.pow(2 - alpha), 0.0)
            g_hat = g / g.sum(-1, keepdim=True)
            y_log_y = torch.where(y > 0, y * y.log(), 0.0)
            dy_dalpha = (y - g_hat) / am1.square() - (
                y_log_y - g_hat * y_log_y.sum(-1, keepdim=True)
            ) / am1
            grad_alpha = (grad * dy_dalpha).sum(-1, keepdim=True)
        return grad_x, None, grad_alpha


def check_entmax(alpha, gamma: float = 1.0, device_check: bool = True) -> None:
    """Raises ValueError on a bad alpha (see `check_alpha`) or a gamma that is not a finite
    number > 0.
    """
    check_alpha(alpha, device_check)
    check_positive("gamma", gamma)


def check_alpha(alpha, device_check: bool = True) -> None:
    """Raises ValueError unless alpha is a number >= 1 or a tensor > 1 everywhere (with
    device_check False a tensor's values are left to the Triton kernel, which flags them
    without a host-device synchronization).
    """
    if isinstance(alpha, torch.Tensor):
        if not device_check:
            return
        if torch.isnan(alpha).any() or (alpha <= 1).any():
            raise ValueError(
                "a tensor alpha must be > 1 everywhere (alpha=1 is softmax: pass "
                f"alpha=1.0); got min {alpha.min().item()!r}"
            )
    elif not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha >= 1):
        raise ValueError(f"alpha must be a number >= 1 (alpha=1 is softmax), got {alpha!r}")


def _triton_path(scores, alpha) -> bool:
    """Whether alpha's values will be checked by the Triton kernel (so not on the host)."""
    if not isinstance(alpha, torch.Tensor) or not isinstance(scores, torch.Tensor):
        return False
    d = scores.shape[-1] if scores.dim() else 0
    return backend_for(scores.new_empty((0, d))) == "triton"


@neg_inf_masked
def entmax(
    scores: torch.Tensor,
    dim: int = -1,
    mask: torch.Tensor | None = None,
    alpha: float | torch.Tensor = 1.5,
    gamma: float = 1.0,
    empty: str = "error",
) -> torch.Tensor:
    """alpha-entmax (Peters, Niculae & Martins 2019) with temperature: the Tsallis-entropy
    regularized max argmax_{y in simplex} y.scores + gamma H_alpha(y) = entmax(scores / gamma),
    along `dim`. alpha = 1 is softmax, alpha = 2 sparsemax (each with temperature gamma);
    alpha > 1 is sparse.

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
    alpha : Union[float, torch.Tensor]
        a number >= 1, or a tensor (every entry > 1) broadcastable to the scores with
        size 1 along `dim` (one alpha per row, head, ...), differentiable (Correia et al.
        2019).
    gamma : float
        temperature, a finite number > 0 (default 1: the paper's entmax).
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
        on a bad alpha (out of range, or a tensor of the wrong shape) or gamma, a mask that
        is not bool or does not broadcast, an empty `dim` or row (with empty="error"), NaN
        or infinite unmasked scores, or a row whose max - min overflows the dtype.
    """
    check_entmax(alpha, gamma, device_check=not _triton_path(scores, alpha))
    if not isinstance(alpha, torch.Tensor):
        if alpha == 1:
            return softmax(scores, dim, mask, gamma=gamma, empty=empty)
        if alpha == 2:
            rows = to_rows(scores, dim, mask, kernel=True, empty=empty, gamma=gamma)
            return rows.apply(lambda x, m: SparsemaxFunction.apply(x, m, float(gamma)))
    # The kernels shift and validate the rows they read, here x / gamma. For gamma < 1 that
    # division could overflow a finite row, so the rows are checked and shifted first (the
    # error then names the spread, as for the other mappings); autograd carries the 1/gamma of
    # the Jacobian.
    rows = to_rows(scores, dim, mask, kernel=gamma >= 1, empty=empty, gamma=gamma)
    if isinstance(alpha, torch.Tensor):
        alpha_rows = per_row(alpha, rows, "alpha")
        return rows.apply(lambda x, m, a: EntmaxFunction.apply(unscale(x, gamma), m, a), alpha_rows)
    if alpha == 1.5:
        return rows.apply(lambda x, m: Entmax15Function.apply(unscale(x, gamma), m))
    return rows.apply(
        lambda x, m: EntmaxFunction.apply(
            unscale(x, gamma),
            m,
            torch.full((x.shape[0], 1), float(alpha), dtype=x.dtype, device=x.device),
        )
    )


class Entmax(MappingModule):
    """alpha-entmax with a fixed alpha and temperature gamma, as an nn.Module (for a learned
    alpha, pass a tensor to `entmax`); see `entmax` for the arguments.
    """

    def __init__(self, alpha: float = 1.5, gamma: float = 1.0, empty: str = "error"):
        super().__init__(entmax, check_entmax, empty, alpha=alpha, gamma=gamma)
