"""fusedmax: sparse attention with contiguous groups of equal weight.

    fusedmax(x; gamma, lam)
        = argmax_{y in simplex} y.x - gamma (1/2 ||y||^2 + lam sum_i |y_{i+1} - y_i|)
        = argmin_{y in simplex} 1/2 ||y - x/gamma||^2 + lam sum_i |y_{i+1} - y_i|
        = P_simplex(prox_TV(x / gamma; lam))          (Niculae & Blondel 2017, Prop. 2)

Both maps commute with adding a constant to a row, so every path computes on x minus its row
max: the prox's and the projection's arithmetic is then exact to the scores' spread.

prox_TV is solved exactly: by Condat's direct algorithm in the torch reference, and in the
CPU kernel by guessing that every position is its own segment and solving only the edges
where that guess violates the optimality conditions, in windows (Condat's algorithm again, or
a closed form for one edge; prox_tv1d_row in csrc/row_algorithms.h). Its Jacobian averages
within each fused segment (Prop. 3), so the backward pass is (1/gamma) J_TV J_P g. With a mask, the
total-variation chain links consecutive *unmasked* positions: left and right padding give
the same result.
"""

from __future__ import annotations

import torch

from ._backward import GroupedProjectionFunction
from ._kernels import backend_for, kernels, mask_arg, triton_kernels, use_kernels
from ._module import MappingModule
from ._rows import (
    check_gamma_lam,
    check_nonnegative,
    neg_inf_masked,
    pack_unmasked,
    to_rows,
    unpack_unmasked,
    unscale,
)
from .simplex import project_simplex_rows_by_sort


def prox_tv1d_rows(x: torch.Tensor, mask: torch.Tensor | None, lam: float):
    """(z, segment) for each row of a (rows, d) tensor: z = argmin 1/2||z - x||^2 + lam TV(z)
    over the unmasked positions; segment labels the fused runs (-1 at masked positions; int32
    from the kernel, int64 from the reference). Compiled kernel on CPU; the torch reference
    elsewhere.
    """
    if use_kernels(x):
        return tuple(kernels.prox_tv1d_rows(x, mask_arg(mask), float(lam)))
    return prox_tv1d_rows_reference(x, mask, lam)


def prox_tv1d_rows_reference(x: torch.Tensor, mask: torch.Tensor | None, lam: float):
    """The same as prox_tv1d_rows in torch ops on any device: Condat's algorithm run on all
    rows in lockstep, one transition of its state machine per row and iteration (the loop is
    over algorithm steps, about 2d, never over rows).
    """
    packed, n, order = pack_unmasked(x, mask)
    rows, d = packed.shape
    dev, dt = x.device, x.dtype
    col = lambda t: t.unsqueeze(1)  # noqa: E731
    at = lambda idx: packed.gather(1, col(idx)).squeeze(1)  # noqa: E731
    n = n.squeeze(1)
    lam_t = torch.full((rows,), float(lam), device=dev, dtype=dt)
    k = torch.zeros(rows, dtype=torch.long, device=dev)
    k0, kminus, kplus = k.clone(), k.clone(), k.clone()
    umin, umax = lam_t.clone(), -lam_t
    vmin, vmax = packed[:, 0] - lam_t, packed[:, 0] + lam_t
    # A segment's value is stored at its last position; segment_end marks those positions.
    end_value = torch.zeros_like(packed)
    segment_end = torch.zeros(rows, d, dtype=torch.bool, device=dev)
    done = n == 0
    while not bool(done.all()):
        at_end = ~done & (k == n - 1)
        step = ~done & ~at_end
        nxt = at(torch.minimum(k + 1, n - 1))
        umin_next = umin + (nxt - vmin)  # same association as the kernel: equal decisions
        umax_next = umax + (nxt - vmax)
        # end of the row: close a segment at kminus (A), at kplus (B), or the last one (C)
        close_min = at_end & (umin < 0)
        close_max = at_end & ~close_min & (umax > 0)
        close_last = at_end & ~close_min & ~close_max
        # inside the row: a negative jump (D), a positive jump (E), or extend (F)
        jump_min = step & (umin_next < -lam_t)
        jump_max = step & ~jump_min & (umax_next > lam_t)
        extend = step & ~jump_min & ~jump_max

        vmin = torch.where(close_last, vmin + umin / (k - k0 + 1).to(dt), vmin)
        emit_min = close_min | jump_min
        emit_max = close_max | jump_max
        emitting = emit_min | emit_max | close_last
        last = torch.where(emit_min, kminus, torch.where(emit_max, kplus, k))
        value = torch.where(emit_max, vmax, vmin)
        rows_e = emitting.nonzero().squeeze(1)
        end_value[rows_e, last[rows_e]] = value[rows_e]
        segment_end[rows_e, last[rows_e]] = True
        k0 = torch.where(emitting, last + 1, k0)
        # rounding can make a closing jump (A, B) cover the last position: the row is done
        # (see prox_tv1d_row in csrc/row_algorithms.h)
        done = done | close_last | (emitting & (k0 == n))

        restart = emit_min | emit_max
        k = torch.where(restart, k0, torch.where(extend, k + 1, k))
        restart_value = at(torch.minimum(k0, n - 1))
        kminus = torch.where(restart, k0, kminus)
        kplus = torch.where(restart, k0, kplus)
        # A and B keep the other bound (shifted); D and E reset both to a 2 lam wide tube
        new_vmin = torch.where(
            close_min | jump_min,
            restart_value,
            torch.where(jump_max, restart_value - 2 * lam_t, vmin),
        )
        new_vmax = torch.where(
            close_max | jump_max,
            restart_value,
            torch.where(jump_min, restart_value + 2 * lam_t, vmax),
        )
        new_umin = torch.where(
            close_min | jump_min | jump_max,
            lam_t,
            torch.where(
                close_max, restart_value - lam_t - vmin, torch.where(extend, umin_next, umin)
            ),
        )
        new_umax = torch.where(
            close_max | jump_min | jump_max,
            -lam_t,
            torch.where(
                close_min, restart_value + lam_t - vmax, torch.where(extend, umax_next, umax)
            ),
        )
        vmin, vmax, umin, umax = new_vmin, new_vmax, new_umin, new_umax
        # after extending: pull the tube's bounds in where they were crossed
        lower_hit = extend & (umin >= lam_t)
        kminus = torch.where(lower_hit, k, kminus)
        vmin = torch.where(lower_hit, vmin + (umin - lam_t) / (k - k0 + 1).to(dt), vmin)
        umin = torch.where(lower_hit, lam_t, umin)
        upper_hit = extend & (umax <= -lam_t)
        kplus = torch.where(upper_hit, k, kplus)
        vmax = torch.where(upper_hit, vmax + (umax + lam_t) / (k - k0 + 1).to(dt), vmax)
        umax = torch.where(upper_hit, -lam_t, umax)
    # each position takes the value of the first segment end at or after it
    positions = torch.arange(d, device=dev).expand(rows, d)
    end_at = torch.where(segment_end, positions, d).flip(-1).cummin(-1).values.flip(-1)
    z = end_value.gather(1, end_at.clamp_max(d - 1))
    segment = segment_end.long().cumsum(-1) - segment_end.long()
    valid = positions < col(n)
    z, segment = z.masked_fill(~valid, 0.0), segment.masked_fill(~valid, -1)
    return unpack_unmasked(z, order), unpack_unmasked(segment, order)


def prox_tv1d(
    x: torch.Tensor, lam: float, dim: int = -1, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The prox of 1-D total variation (TV denoising): argmin_z 1/2 ||z - x||^2 +
    lam sum_i |z_{i+1} - z_i| along `dim`, solved exactly (forward only). Not a mapping: the
    values are not shifted or normalized.

    Parameters
    ----------
    x : torch.Tensor
        floating-point tensor of any shape.
    lam : float
        the penalty's weight, a finite number >= 0.
    dim : int
        the dimension along which the chain runs.
    mask : Optional[torch.Tensor]
        optional bool tensor broadcastable to `x`; the chain links consecutive unmasked
        positions, masked positions get 0.

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
    return rows.apply(lambda r, m: prox_tv1d_rows(r, m, lam)[0])


def fusedmax_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float, lam: float):
    """(y, segment) for each row of a (rows, d) tensor: y = P_simplex(prox_TV(x / gamma; lam))
    over the unmasked positions and the prox's segments, which the backward reads on the
    support only (the CPU kernel's AVX-512 path labels only those, -1 elsewhere). One kernel
    call on CPU or Triton (which shift each row to a max of 0 as they read it); the torch
    reference on x as given elsewhere.
    """
    if backend_for(x) == "triton":
        return triton_kernels().fusedmax_rows(x, mask, float(gamma), float(lam))
    if use_kernels(x):
        return tuple(kernels.fusedmax_rows(x, mask_arg(mask), float(gamma), float(lam)))
    z, segment = prox_tv1d_rows_reference(unscale(x, gamma), mask, lam)
    return project_simplex_rows_by_sort(z, mask), segment


@neg_inf_masked
def fusedmax(
    scores: torch.Tensor,
    dim: int = -1,
    mask: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 0.1,
    empty: str = "error",
) -> torch.Tensor:
    """Fusedmax (Niculae & Blondel 2017): argmax_{y in simplex} y.scores -
    gamma (1/2 ||y||^2 + lam sum_i |y_{i+1} - y_i|) = P_simplex(prox_TV(scores / gamma; lam))
    along `dim`: sparse, with contiguous groups of equal weight.

    Parameters
    ----------
    scores : torch.Tensor
        floating-point tensor of any shape (float16/bfloat16 are computed in float32
        and cast back).
    dim : int
        the dimension to normalize over.
    mask : Optional[torch.Tensor]
        optional bool tensor broadcastable to `scores`, True where a position may be
        attended to; masked positions get exactly 0 and the chain links consecutive
        unmasked positions.
    gamma : float
        temperature, a finite number > 0.
    lam : float
        the total-variation weight, a finite number >= 0 (0 is sparsemax).
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
        lambda x, m: GroupedProjectionFunction.apply(x, m, float(gamma), float(lam), fusedmax_rows)
    )


class Fusedmax(MappingModule):
    """`fusedmax` as an nn.Module with fixed parameters; see `fusedmax` for the arguments."""

    def __init__(self, gamma: float = 1.0, lam: float = 0.1, empty: str = "error"):
        super().__init__(fusedmax, check_gamma_lam, empty, gamma=gamma, lam=lam)
