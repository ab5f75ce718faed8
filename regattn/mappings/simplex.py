"""softmax and sparsemax: the entropic and squared-l2 regularized maxes.

    softmax(x; gamma)   = argmax_{y in simplex} y.x - gamma sum_i y_i log y_i = softmax(x / gamma)
    sparsemax(x; gamma) = argmax_{y in simplex} y.x - gamma/2 ||y||^2        = P_simplex(x / gamma)

uniform is the attention-free control: 1/n on each of the n unmasked positions, whatever the
scores. It is the limit gamma -> infinity of every mapping here (each Omega is strictly convex
and permutation-invariant, so its minimizer over the simplex is the centre), and the model
that uses it weighs its inputs without attending: what a table compares its mappings against
to show that attention matters at all.

P_simplex is the Euclidean projection onto the probability simplex (Michelot 1986;
Duchi et al. 2008): y = (z - tau)_+ with tau chosen so that sum(y) = 1. Its Jacobian is
diag(s) - s s^T / |s| with s the support indicator (Martins & Astudillo 2016).
"""

from __future__ import annotations

import torch

from ._backward import sparse_vjp
from ._kernels import backend_for, kernels, mask_arg, triton_kernels
from ._module import MappingModule
from ._rows import check_empty, check_positive, neg_inf_masked, plain_rows, to_rows, unscale


def sparsemax_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float) -> torch.Tensor:
    """P_simplex(x / gamma) of each row of a (rows, d) tensor over its unmasked positions
    (masked positions get 0): the compiled kernel on CPU (which shifts each row to a max of
    0 as it reads it), the Triton kernel on CUDA (which does the same), else the sort-based
    reference on x as given (to_rows shifted it).
    """
    path = backend_for(x)
    if path == "cpu":
        return kernels.sparsemax_rows(x, mask_arg(mask), float(gamma))
    if path == "triton":
        return triton_kernels().sparsemax_rows(x, mask, float(gamma))
    return project_simplex_rows_by_sort(unscale(x, gamma), mask)


def project_simplex_rows_by_sort(z: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Sort-based projection in plain torch ops (any device): tau is set by the largest k with
    z_(k) > (sum_{j<=k} z_(j) - 1) / k.
    """
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
        """Computes the mapping of the (rows, d) scores and saves what the backward needs."""
        y = sparsemax_rows(x, mask, gamma)
        ctx.save_for_backward(y)
        ctx.gamma = gamma
        return y

    @staticmethod
    def backward(ctx, grad):
        """The vector-Jacobian product: the support Jacobian, scaled by 1/gamma."""
        (y,) = ctx.saved_tensors
        return unscale(sparse_vjp(y, grad), ctx.gamma), None, None


class TritonSoftmaxFunction(torch.autograd.Function):
    """softmax on (rows, d) by the Triton kernel (which shifts and validates each row); on
    CPU, the compiled kernel is a differentiable operator itself (its backward in C++).
    """

    @staticmethod
    def forward(ctx, x, mask, gamma: float):
        """Computes the mapping of the (rows, d) scores and saves what the backward needs."""
        y = triton_kernels().softmax_rows(x, mask, gamma)
        ctx.save_for_backward(y)
        ctx.gamma = gamma
        return y

    @staticmethod
    def backward(ctx, grad):
        """The vector-Jacobian product (diag(y) - y y^T) grad / gamma, by the kernel behind
        torch.softmax's own backward (as the CPU operator's backward).
        """
        (y,) = ctx.saved_tensors
        vjp = torch._softmax_backward_data(grad, y, -1, y.dtype)
        return unscale(vjp, ctx.gamma), None, None


def check_gamma(gamma: float) -> None:
    """Raises ValueError unless gamma is a finite number > 0."""
    check_positive("gamma", gamma)


@neg_inf_masked
def softmax(
    scores: torch.Tensor,
    dim: int = -1,
    mask: torch.Tensor | None = None,
    gamma: float = 1.0,
    empty: str = "error",
) -> torch.Tensor:
    """Softmax with temperature: argmax_{y in simplex} y.scores + gamma H(y), H the Shannon
    entropy, i.e. softmax(scores / gamma), along `dim`.

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
        temperature, a finite number > 0.
    empty : str
        what a row with no unmasked position gets: "error" (a ValueError) or "zero"
        (all zeros, zero gradient).

    Returns
    -------
    torch.Tensor
        A tensor of the shape (broadcast with `mask`) and dtype of `scores`, each row along
        `dim` a probability vector over its unmasked positions.

    Raises
    ------
    ValueError
        on bad parameters, a mask that is not bool or does not broadcast, an empty
        `dim` or row (with empty="error"), NaN or infinite unmasked scores, or a row whose
        max - min overflows the dtype.
    """
    check_gamma(gamma)
    check_empty(empty)
    x = plain_rows(scores, dim, mask)
    if x is not None:  # the CPU kernel on the scores as they are (see plain_rows)
        y = kernels.softmax_rows(x, mask_arg(None), float(gamma))
        return y if y.dim() == scores.dim() else y.reshape(scores.shape)
    # the kernels shift and check each row as they read it; for the torch reference, which
    # subtracts the row max itself, only x / gamma with gamma < 1 could overflow before it
    # does, so only then is the row shifted first (either way its spread is checked)
    rows = to_rows(
        scores,
        dim,
        mask,
        kernel=True,
        empty=empty,
        gamma=gamma,
        shift=True if gamma < 1 else "check",
    )

    def fn(x, m):
        path = backend_for(x)
        if path == "cpu":
            return kernels.softmax_rows(x, mask_arg(m), float(gamma))
        if path == "triton":
            return TritonSoftmaxFunction.apply(x, m, float(gamma))
        # x / gamma is finite: gamma >= 1, or x was shifted to a max of 0 (to_rows)
        if m is not None:
            x = x.masked_fill(~m, float("-inf"))
        return torch.softmax(unscale(x, gamma), dim=-1)

    return rows.apply(fn)


@neg_inf_masked
def sparsemax(
    scores: torch.Tensor,
    dim: int = -1,
    mask: torch.Tensor | None = None,
    gamma: float = 1.0,
    empty: str = "error",
) -> torch.Tensor:
    """Sparsemax (Martins & Astudillo 2016) with temperature: the Euclidean projection
    P_simplex(scores / gamma) = argmin_{y in simplex} ||y - scores / gamma||^2, i.e.
    argmax_{y in simplex} y.scores - gamma/2 ||y||^2, along `dim`. Sparse: exact zeros.

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
        temperature, a finite number > 0.
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
        as `softmax`.
    """
    check_gamma(gamma)
    rows = to_rows(scores, dim, mask, kernel=True, empty=empty, gamma=gamma)
    return rows.apply(lambda x, m: SparsemaxFunction.apply(x, m, float(gamma)))


class Softmax(MappingModule):
    """`softmax` as an nn.Module with a fixed temperature; see `softmax` for the arguments."""

    def __init__(self, gamma: float = 1.0, empty: str = "error"):
        super().__init__(softmax, check_gamma, empty, gamma=gamma)


class Sparsemax(MappingModule):
    """`sparsemax` as an nn.Module with a fixed temperature; see `sparsemax` for the arguments."""

    def __init__(self, gamma: float = 1.0, empty: str = "error"):
        super().__init__(sparsemax, check_gamma, empty, gamma=gamma)


@neg_inf_masked
def uniform(
    scores: torch.Tensor,
    dim: int = -1,
    mask: torch.Tensor | None = None,
    empty: str = "error",
) -> torch.Tensor:
    """The attention-free control: argmin_{y in simplex} Omega(y) for any strictly convex,
    permutation-invariant Omega (the limit gamma -> infinity of every mapping), i.e. 1/n on
    each of a row's n unmasked positions, whatever the scores.

    Parameters
    ----------
    scores : torch.Tensor
        floating-point tensor of any shape; checked as every mapping checks it (finite at the
        unmasked positions), though its values do not change the result.
    dim : int
        the dimension to normalize over.
    mask : Optional[torch.Tensor]
        optional bool tensor broadcastable to `scores`, True where a position may be
        attended to; masked positions get exactly 0.
    empty : str
        what a row with no unmasked position gets: "error" (a ValueError) or "zero".

    Returns
    -------
    torch.Tensor
        A tensor of the shape (broadcast with `mask`) and dtype of `scores`. Its gradient with
        respect to `scores` is exactly zero; the result stays in the autograd graph, so that
        the parameters that produced the scores get zero gradients rather than none (fairseq's
        optimizers and DDP expect every parameter to take part).

    Raises
    ------
    ValueError
        as `softmax`.
    """
    rows = to_rows(scores, dim, mask, kernel=False, shift=False, empty=empty)

    def fn(x, m):
        weights = torch.ones_like(x) if m is None else m.to(x.dtype)
        # x is finite (to_rows checked it): x * 0 is an exact zero that keeps y in the graph
        return weights / weights.sum(-1, keepdim=True) + x * 0

    return rows.apply(fn)


def check_no_parameters() -> None:
    """The attention-free control takes no parameter: nothing to check."""


class Uniform(MappingModule):
    """`uniform`, the attention-free control, as an nn.Module; see `uniform`."""

    def __init__(self, empty: str = "error"):
        super().__init__(uniform, check_no_parameters, empty)
