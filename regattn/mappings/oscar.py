"""oscarmax: sparse attention with clusters of equal weight, contiguous or not.

    oscarmax(x; gamma, lam)
        = argmin_{y in simplex} 1/2 ||y - x/gamma||^2 + lam sum_{i<j} max(|y_i|, |y_j|)

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
pass is (1/gamma) J_P J_simplex g. Both maps commute with adding a constant to a row, so
every oscarmax path computes on x minus its row max, exact to the scores' spread; the
standalone prox_pairwise_max is applied to x as given.
"""

from __future__ import annotations

import torch

from ._backward import GroupedProjectionFunction
from ._kernels import backend_for, kernels, mask_arg, triton_kernels, use_kernels
from ._module import MappingModule
from ._rows import check_gamma_lam, check_nonnegative, neg_inf_masked, to_rows, unscale
from .simplex import project_simplex_rows_by_sort


def prox_pairwise_max_rows(x: torch.Tensor, mask: torch.Tensor | None, lam: float):
    """(z, cluster) for each row of a (rows, d) tensor: z = argmin 1/2||z - x||^2 +
    lam sum_{i<j} max(z_i, z_j) over the unmasked positions; cluster labels the pooled
    blocks (-1 at masked positions; int32 from the kernel, int64 from the reference).
    """
    if use_kernels(x):
        return tuple(kernels.prox_pairwise_max_rows(x, mask_arg(mask), float(lam)))
    return prox_pairwise_max_rows_reference(x, mask, lam)


def prox_pairwise_max_rows_reference(x: torch.Tensor, mask: torch.Tensor | None, lam: float):
    """The same as prox_pairwise_max_rows in torch ops on any device. Pool-adjacent-violators
    is replaced by the min-max formula of non-increasing isotonic regression,
    v_i = min_{j<=i} max_{k>=i} mean(a_j..a_k), over all (j, k) pairs at once: O(d^2) memory
    per row, which is fine for a reference and for attention lengths.
    """
    rows, d = x.shape
    values = x if mask is None else x.masked_fill(~mask, float("-inf"))
    x_sorted, order = torch.sort(values, dim=-1, descending=True, stable=True)
    n = torch.full((rows, 1), d, device=x.device) if mask is None else mask.sum(-1, keepdim=True)
    rank = torch.arange(d, device=x.device)
    valid = rank < n
    a = torch.where(valid, x_sorted - lam * (n - 1 - rank).to(x.dtype), 0.0)
    prefix = torch.nn.functional.pad(a.cumsum(-1), (1, 0))
    j, k = rank.view(d, 1), rank.view(1, d)
    mean = (prefix[:, None, 1:] - prefix[:, :-1, None]) / (k - j + 1).clamp_min(1).to(x.dtype)
    usable = (k >= j) & valid[:, None, :]
    # best_from_j[j, i] = max_{k >= i} mean(a_j..a_k)
    best_from_j = mean.masked_fill(~usable, float("-inf")).flip(-1).cummax(-1).values.flip(-1)
    v = best_from_j.masked_fill(j > k, float("inf")).amin(1)
    # Clusters as pool-adjacent-violators forms them: runs of equal v, cut wherever a run's
    # prefix already reaches the run's value (its residual sum is back to 0). Without the
    # cut, tied scores that need no pooling (e.g. lam = 0) would be averaged in the backward
    # pass although the prox is the identity there.
    starts = torch.ones_like(valid)
    starts[:, 1:] = v[:, 1:] != v[:, :-1]
    residual = (a - v).cumsum(-1)
    before = torch.nn.functional.pad(residual, (1, 0))[:, :-1]
    run_start = torch.where(starts, rank, 0).cummax(-1).values
    within_run = residual - before.gather(-1, run_start)
    starts[:, 1:] |= within_run[:, :-1] >= 0
    cluster = (starts.long().cumsum(-1) - 1).masked_fill(~valid, -1)
    v = v.masked_fill(~valid, 0.0)
    return (
        torch.empty_like(v).scatter_(-1, order, v),
        torch.empty_like(cluster).scatter_(-1, order, cluster),
    )


def prox_pairwise_max(
    x: torch.Tensor, lam: float, dim: int = -1, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The prox of the pairwise-max penalty (OSCAR without absolute values, see the module
    docstring): argmin_z 1/2 ||z - x||^2 + lam sum_{i<j} max(z_i, z_j) along `dim`, solved
    exactly (forward only). Not a mapping: the values are not shifted or normalized.

    Parameters
    ----------
    x : torch.Tensor
        floating-point tensor of any shape.
    lam : float
        the penalty's weight, a finite number >= 0.
    dim : int
        the dimension along which the pairs are taken.
    mask : Optional[torch.Tensor]
        optional bool tensor broadcastable to `x`; masked positions take no part and
        get 0.

    Returns
    -------
    torch.Tensor
        z, of the shape (broadcast with `mask`) and dtype of `x`.

    Raises
    ------
    ValueError
        on a bad lam or mask, an empty `dim` or row, or non-finite unmasked values.
    """
    check_nonnegative("lam", lam)
    rows = to_rows(x, dim, mask, kernel="cpu", shift=False)
    return rows.apply(lambda r, m: prox_pairwise_max_rows(r, m, lam)[0])


def oscarmax_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float, lam: float):
    """(y, cluster) for each row of a (rows, d) tensor: y = P_simplex(prox_P(x / gamma; lam))
    over the unmasked positions and the prox's clusters on the support of y (-1 off it: the
    backward pass reads no other). One kernel call on CPU, which shifts each row to a max of 0
    as it reads it and sorts only the few scores that can reach the support (oscarmax_row in
    csrc/row_algorithms.h); one Triton kernel call on the Triton backend (_triton.py); the
    torch reference on x as given elsewhere.
    """
    if backend_for(x) == "triton":
        return triton_kernels().oscarmax_rows(x, mask, float(gamma), float(lam))
    if use_kernels(x):
        return tuple(kernels.oscarmax_rows(x, mask_arg(mask), float(gamma), float(lam)))
    z, cluster = prox_pairwise_max_rows_reference(unscale(x, gamma), mask, lam)
    y = project_simplex_rows_by_sort(z, mask)
    return y, cluster.masked_fill(y <= 0, -1)


@neg_inf_masked
def oscarmax(
    scores: torch.Tensor,
    dim: int = -1,
    mask: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 0.01,
    empty: str = "error",
) -> torch.Tensor:
    """Oscarmax (Niculae & Blondel 2017): argmin_{y in simplex} 1/2 ||y - scores/gamma||^2 +
    lam sum_{i<j} max(y_i, y_j) = P_simplex(prox_P(scores / gamma; lam)) along `dim`: sparse,
    with clusters of equal weight, contiguous or not (see the module docstring).

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
    lam : float
        the OSCAR weight, a finite number >= 0 (0 is sparsemax).
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
    check_gamma_lam(gamma, lam)
    rows = to_rows(scores, dim, mask, kernel=True, empty=empty, gamma=gamma)
    return rows.apply(
        lambda x, m: GroupedProjectionFunction.apply(x, m, float(gamma), float(lam), oscarmax_rows)
    )


class Oscarmax(MappingModule):
    """`oscarmax` as an nn.Module with fixed parameters; see `oscarmax` for the arguments."""

    def __init__(self, gamma: float = 1.0, lam: float = 0.01, empty: str = "error"):
        super().__init__(oscarmax, check_gamma_lam, empty, gamma=gamma, lam=lam)
