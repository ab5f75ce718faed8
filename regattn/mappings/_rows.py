"""Shared plumbing: input checks and the (rows, d) layout every mapping computes in.

A mapping is applied along one `dim` of a tensor of any shape. We move that dim last,
flatten the rest into rows and compute on a contiguous (rows, d) float32/float64 tensor;
`RowLayout.restore` undoes it. Masked positions are removed from each row's problem (not set
to -inf), so every check about "the row" is about its unmasked positions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from ._kernels import use_kernels


def check_positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def check_nonnegative(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


@dataclass
class RowLayout:
    shape: torch.Size  # broadcast shape of scores (and mask), dim moved last
    dim: int
    dtype: torch.dtype  # caller's dtype, restored on output

    @property
    def scores_shape(self) -> torch.Size:
        """The broadcast scores' shape in the caller's dim order."""
        shape = list(self.shape)
        shape.insert(self.dim, shape.pop())
        return torch.Size(shape)

    def restore(self, rows: torch.Tensor) -> torch.Tensor:
        # each step only where it does something: on small inputs their fixed costs add up
        if rows.shape != self.shape:
            rows = rows.reshape(self.shape)
        if self.dim != len(self.shape) - 1:
            rows = rows.movedim(-1, self.dim)
        return rows if rows.dtype == self.dtype else rows.to(self.dtype)


def unscale(x: torch.Tensor, gamma: float) -> torch.Tensor:
    """x / gamma, skipping the pass over memory for the default gamma = 1."""
    return x if gamma == 1 else x / gamma


def bisection_steps(dtype: torch.dtype) -> int:
    """Halvings that shrink a unit bracket below the dtype's relative resolution."""
    return int(-math.log2(torch.finfo(dtype).eps)) + 3


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # Half precision loses the exact ties that fusedmax/oscarmax groups depend on and the
    # thresholds' cancellation; compute in float32 and cast back.
    if dtype in (torch.float32, torch.float64):
        return dtype
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    raise ValueError(f"attention scores must be a floating-point tensor, got dtype {dtype}")


def to_rows(scores: torch.Tensor, dim: int, mask: Optional[torch.Tensor], kernel_checks_finite: bool = False):
    """Returns (x, mask_rows, layout): x is (rows, d) contiguous, mask_rows a (rows, d)
    bool tensor or None. Raises ValueError on a row with no unmasked position and on
    non-finite unmasked scores; with kernel_checks_finite, the latter is left to the
    compiled kernel where one will run (CPU): they check as they read the scores, with the
    same error, which saves a pass over memory."""
    if not isinstance(scores, torch.Tensor):
        raise ValueError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    if scores.dim() == 0:
        raise ValueError("scores must have at least one dimension")
    dim = dim % scores.dim()
    dtype = compute_dtype(scores.dtype)
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
        try:
            shape = torch.broadcast_shapes(scores.shape, mask.shape)
        except RuntimeError as err:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to scores "
                             f"of shape {tuple(scores.shape)}") from err
        scores = scores.expand(shape)
        mask = mask.to(scores.device).expand(shape)
    last = dim == scores.dim() - 1
    x = scores if last else scores.movedim(dim, -1)
    layout = RowLayout(shape=x.shape, dim=dim, dtype=scores.dtype)
    d = x.shape[-1]
    if d == 0:
        raise ValueError("cannot normalize over an empty dimension: the row has no position to attend to")
    if x.dim() != 2:
        x = x.reshape(-1, d)
    if x.dtype != dtype:
        x = x.to(dtype)
    x = x.contiguous()
    check = not (kernel_checks_finite and use_kernels(x))
    if mask is None:
        if check:
            check_finite(x)
        return x, None, layout
    m = (mask if last else mask.movedim(dim, -1)).reshape(-1, d).contiguous()
    if not m.any(dim=1).all():
        raise ValueError("a row has no unmasked position: there is nothing to attend to "
                         "(check the padding mask)")
    if bool(m.all()):
        if check:
            check_finite(x)
        return x, None, layout
    # masked values are never read by the algorithms; zero them so no inf/NaN can leak
    x = x.masked_fill(~m, 0.0)
    if check:
        check_finite(x)
    return x, m, layout


def check_finite(x: torch.Tensor) -> None:
    # One sum is far cheaper than an elementwise isfinite; it is non-finite whenever an
    # entry is (or, rarely, when finite entries overflow), so only then look closer. The sum
    # is tested as a Python float: torch.isfinite on a 0-d tensor costs more than the sum.
    if math.isfinite(float(x.detach().sum())) or torch.isfinite(x).all():
        return
    kind = "NaN" if torch.isnan(x).any() else "infinite"
    raise ValueError(f"attention scores contain {kind} values at unmasked positions; "
                     "exclude positions with mask= instead of -inf scores")


def pack_unmasked(x: torch.Tensor, mask: Optional[torch.Tensor]):
    """Moves each row's unmasked values to its front, in order, for the torch reference
    algorithms that walk a row as a chain. Returns (packed, n, order): n (rows, 1) counts the
    unmasked positions, order[r, j] is the original position of packed[r, j]; positions past
    n hold arbitrary values."""
    rows, d = x.shape
    if mask is None:
        order = torch.arange(d, device=x.device).expand(rows, d)
        return x, torch.full((rows, 1), d, device=x.device, dtype=torch.long), order
    order = torch.sort((~mask).to(torch.uint8), dim=-1, stable=True).indices
    return x.gather(-1, order), mask.sum(-1, keepdim=True), order


def unpack_unmasked(packed: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_unmasked's permutation (values past n land on the masked positions)."""
    return torch.empty_like(packed).scatter_(-1, order, packed)
