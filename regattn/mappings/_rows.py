"""Shared plumbing: input checks and the (rows, d) layout every mapping computes in.

A mapping is applied along one `dim` of a tensor of any shape. We move that dim last,
flatten the rest into rows and compute on a contiguous (rows, d) float32/float64 tensor;
`RowLayout.restore` undoes it. Masked positions are removed from each row's problem (not set
to -inf), so every check about "the row" is about its unmasked positions. A -inf score is a
masked position too (`neg_inf_masked`, the entry every mapping function goes through).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from ._kernels import backend_for, kernels, triton_kernels


def neg_inf_masked(mapping):
    """The mapping function `mapping(scores, dim, mask, ...)` with -inf scores taken as masked
    positions: combined with `mask` by AND, such a position gets an exact 0 and zero
    gradient, and a row with no other position follows the `empty` policy. +inf and NaN stay
    errors.

    -inf is the masking idiom of torch.softmax, entmax and fairseq. The backends do not pay
    for it on scores without -inf: the Triton kernels drop -inf positions as they read a row
    (_triton._read_row); the compiled kernels and the torch reference reject a non-finite
    row, and only then are the -inf positions looked for and the mapping run again with them
    masked. The failed call is wasted work: little for padded batches (the kernels skip the
    rows that hold a -inf), up to a whole mapping when few rows do; a mask= costs nothing.

    Parameters
    ----------
    mapping : callable
        a mapping function, mapping(scores, dim=-1, mask=None, **params).

    Returns
    -------
    callable
        The same function, with -inf scores masked.
    """

    @functools.wraps(mapping)
    def with_neg_inf_masked(scores, dim=-1, mask=None, *args, **kwargs):
        try:
            return mapping(scores, dim, mask, *args, **kwargs)
        except ValueError:
            folded = mask_of_neg_inf(scores, mask)
            if folded is None:  # no -inf to mask: the error stands
                raise
        return mapping(scores, dim, folded, *args, **kwargs)

    return with_neg_inf_masked


def mask_of_neg_inf(scores, mask):
    """`mask` AND (scores != -inf), broadcast; None when no unmasked score is -inf (or when
    scores or mask are of the wrong kind, for the mapping's own error to name).
    """
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        return None
    if mask is not None and not (isinstance(mask, torch.Tensor) and mask.dtype == torch.bool):
        return None
    kept = ~torch.isneginf(scores)
    if mask is not None:
        try:
            torch.broadcast_shapes(scores.shape, mask.shape)
        except RuntimeError:
            return None
        kept = kept & mask.to(scores.device)
        if bool(kept.eq(mask.to(scores.device)).all()):
            return None
    elif bool(kept.all()):
        return None
    return kept


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


def check_gamma_lam(gamma: float, lam: float) -> None:
    """Raises ValueError unless gamma is a finite number > 0 and lam one >= 0 (the parameters
    of fusedmax and oscarmax).
    """
    check_positive("gamma", gamma)
    check_nonnegative("lam", lam)


def unscale(x: torch.Tensor, gamma: float) -> torch.Tensor:
    """X / gamma, skipping the pass over memory for the default gamma = 1."""
    return x if gamma == 1 else x / gamma


def bisect_threshold(lo: torch.Tensor, hi: torch.Tensor, below_root) -> torch.Tensor:
    """Bisection for the threshold tau of a row, the torch references' solver (sq-pnorm-max,
    alpha-entmax): the root of a function that decreases in tau, bracketed in [lo, hi]
    ((rows, 1) tensors). below_root(tau) is True where the root lies at or above tau. Returns
    the lower end after enough halvings to shrink a unit bracket below the dtype's relative
    resolution, on every row at once.
    """
    for _ in range(int(-math.log2(torch.finfo(lo.dtype).eps)) + 3):
        tau = (lo + hi) / 2
        above = below_root(tau)
        lo = torch.where(above, tau, lo)
        hi = torch.where(above, hi, tau)
    return lo


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # Half precision loses the exact ties that fusedmax/oscarmax groups depend on and the
    # thresholds' cancellation; compute in float32 and cast back.
    if dtype in (torch.float32, torch.float64):
        return dtype
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    raise ValueError(f"attention scores must be a floating-point tensor, got dtype {dtype}")


EMPTY_CHOICES = ("error", "zero")


def check_empty(empty) -> None:
    """Raises ValueError unless `empty` is one of EMPTY_CHOICES."""
    if empty not in EMPTY_CHOICES:
        raise ValueError(
            f"empty must be 'error' (a row with no unmasked position is an error) or "
            f"'zero' (such a row gets zeros), got {empty!r}"
        )


@dataclass
class Rows:
    """A mapping's input as (rows, d) rows, ready for its row algorithms.

    x: contiguous float32/float64; masked entries 0. Where the compiled kernel will not run,
    each row is shifted to a maximum of 0 over its unmasked positions (the kernels shift as
    they read the row). mask: (rows, d) bool or None. keep: with empty="zero", the indices (in
    the full (rows, d) layout) of the rows that have an unmasked position, x and mask holding
    only those; None when every row has one.
    """

    x: torch.Tensor
    mask: torch.Tensor | None
    layout: RowLayout
    keep: torch.Tensor | None = None
    total: int = 0  # rows in the full layout

    def apply(self, fn, *per_row: torch.Tensor) -> torch.Tensor:
        """fn(x, mask, *per_row) in the caller's shape and dtype; per_row are (rows, k)
        tensors of the full layout (e.g. entmax's alpha). Rows dropped for having no unmasked
        position get zeros and, through index_copy, zero gradient.
        """
        if self.keep is None:
            return self.layout.restore(fn(self.x, self.mask, *per_row))
        if self.keep.numel() == 0:
            # no row to compute (the reference algorithms take no empty rows); x.sum() is an
            # exact 0 that keeps the result in the graph, so it backpropagates zeros
            return self.layout.restore(
                self.x.new_zeros(self.total, self.x.shape[-1]) + self.x.sum()
            )
        y = fn(self.x, self.mask, *(t.index_select(0, self.keep) for t in per_row))
        full = y.new_zeros((self.total, y.shape[-1])).index_copy(0, self.keep, y)
        return self.layout.restore(full)


def per_row(value, rows, name: str) -> torch.Tensor:
    """A parameter given as a number, or as a tensor broadcastable to the scores with size 1
    along `dim`, as one value per row of `rows` (a Rows; its full layout): (rows, 1) in
    the rows' dtype, keeping the graph.
    """
    like = rows.x
    total = rows.total
    if not isinstance(value, torch.Tensor):
        return torch.full((total, 1), float(value), dtype=like.dtype, device=like.device)
    shape = list(rows.layout.scores_shape)
    shape[rows.layout.dim] = 1
    try:
        if torch.broadcast_shapes(value.shape, shape) != torch.Size(shape):
            raise RuntimeError
    except RuntimeError:
        raise ValueError(
            f"{name} of shape {tuple(value.shape)} must broadcast to the scores' shape "
            f"{tuple(rows.layout.scores_shape)} with size 1 along dim {rows.layout.dim}"
        ) from None
    value = value.to(device=like.device, dtype=like.dtype).expand(shape)
    return value.movedim(rows.layout.dim, -1).reshape(-1, 1)


def plain_rows(scores: torch.Tensor, dim: int, mask: torch.Tensor | None) -> torch.Tensor | None:
    """The (rows, d) view of `scores` where to_rows would do nothing but take it, else None:
    no mask, `dim` the last dimension, contiguous float32 or float64 scores with at least one
    position, and the "cpu" backend, whose kernels check and shift each row as they read it.
    A mapping with a kernel that is differentiable itself (softmax) calls it on this view
    directly: after a kernel has streamed a large tensor through the caches, to_rows's Python
    costs tens of microseconds (measured 20-50 us on 1024 x 400 rows), a tenth of a softmax.
    """
    if mask is not None or not isinstance(scores, torch.Tensor) or scores.dim() == 0:
        return None
    if dim not in (-1, scores.dim() - 1) or scores.dtype not in (torch.float32, torch.float64):
        return None
    if scores.shape[-1] == 0 or not scores.is_contiguous() or backend_for(scores) != "cpu":
        return None
    return scores if scores.dim() == 2 else scores.reshape(-1, scores.shape[-1])


def to_rows(
    scores: torch.Tensor,
    dim: int,
    mask: torch.Tensor | None,
    kernel: bool | str = False,
    shift: bool | str = True,
    empty: str = "error",
    gamma: float = 1.0,
) -> Rows:
    """The (rows, d) layout of `scores` along `dim` (see Rows), checked.

    Raises ValueError on a row with no unmasked position (unless empty="zero"), on non-finite
    unmasked scores and, with `shift` (the mappings, which compute on (x - max) / gamma), on a
    row whose (max - min) / gamma overflows. With `kernel`, the checks and the shift are left to
    the compiled kernel where one will run (CPU): it makes them as it reads the scores, with
    the same errors, which saves passes over memory. `kernel` may also name the one backend
    that has a kernel for the mapping ("cpu" or "triton"). On the Triton backend nothing here
    reads the device: the kernels validate the rows and a row with no unmasked position is
    asserted asynchronously (see _triton.py), so no host-device synchronization happens.
    """
    if not isinstance(scores, torch.Tensor):
        raise ValueError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    if scores.dim() == 0:
        raise ValueError("scores must have at least one dimension")
    check_empty(empty)
    dim = dim % scores.dim()
    dtype = compute_dtype(scores.dtype)
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(
                f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}"
            )
        try:
            shape = torch.broadcast_shapes(scores.shape, mask.shape)
        except RuntimeError as err:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to scores "
                f"of shape {tuple(scores.shape)}"
            ) from err
        scores = scores.expand(shape)
        mask = mask.to(scores.device).expand(shape)
    last = dim == scores.dim() - 1
    x = scores if last else scores.movedim(dim, -1)
    layout = RowLayout(shape=x.shape, dim=dim, dtype=scores.dtype)
    d = x.shape[-1]
    if d == 0 and empty == "error":
        raise ValueError(
            "cannot normalize over an empty dimension: the row has no position to attend to"
        )
    rows = math.prod(x.shape[:-1])  # not -1: with d = 0 it would be ambiguous
    if x.dim() != 2:  # a reshape to its own shape is still a view, an autograd node
        x = x.reshape(rows, d)
    if x.dtype != dtype:
        x = x.to(dtype)
    x = x.contiguous()
    path = backend_for(x)
    runs = path != "reference" and kernel in (True, path)
    check = not runs
    m = (
        None
        if mask is None
        else (mask if last else mask.movedim(dim, -1)).reshape(rows, d).contiguous()
    )
    keep = None
    if runs and path == "triton":
        # no synchronization: the kernel gives rows with no unmasked position (nor one that
        # is not -inf) zeros
        if empty == "error":
            triton_kernels().assert_no_empty_row(x, m)
        return Rows(x, m, layout, None, rows)
    if d == 0:  # empty="zero": every row is empty
        keep = torch.zeros(0, dtype=torch.long, device=x.device)
        x, m = x[:0], None
    elif m is not None:
        nonempty = m.any(dim=1)
        if not bool(nonempty.all()):
            if empty == "error":
                raise ValueError(
                    "a row has no unmasked position: there is nothing to attend to "
                    "(check the padding mask; or pass empty='zero' to give such rows zeros)"
                )
            keep = nonempty.nonzero().squeeze(1)
            x, m = x.index_select(0, keep), m.index_select(0, keep)
        if bool(m.all()):
            m = None
        else:
            # masked values are never read by the algorithms; zero them so no inf/NaN can leak
            x = x.masked_fill(~m, 0.0)
    if check:
        if shift:
            x = shift_to_max(x, m, gamma, subtract=shift != "check")
        else:
            check_finite(x)
    return Rows(x, m, layout, keep, rows)


def shift_to_max(
    x: torch.Tensor, mask: torch.Tensor | None, gamma: float = 1.0, subtract: bool = True
) -> torch.Tensor:
    """X minus each row's max over its unmasked positions (masked entries stay 0): every
    mapping is invariant to adding a constant to a row, and on the shifted row its threshold
    arithmetic is exact to the scores' spread, not their magnitude. Raises ValueError on
    non-finite unmasked scores and on a row whose (max - min) / gamma overflows (the mapping
    computes on (x - max) / gamma). With subtract=False, only checks (softmax, which shifts
    by the max itself, skips a pass over memory).
    """
    if x.numel() == 0:  # no row, or (empty="zero") rows of no position: nothing to shift
        return x
    # the shift is a constant: the mappings are invariant to it, and so is their gradient
    values = x.detach()
    # as max_spread in csrc/regattn_cpu.cpp
    limit = torch.finfo(x.dtype).max * min(gamma, 1.0)
    # Fast path, one cheap pass over the whole tensor (_spread_within): only when it fails
    # does the exact per-row check below run (an aminmax along rows costs more than a softmax).
    if not _spread_within(values, limit):
        if mask is None:
            low, high = torch.aminmax(values, dim=-1, keepdim=True)  # NaN propagates into both
        else:
            high = values.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)
            low = values.masked_fill(~mask, float("inf")).amin(-1, keepdim=True)
        if not bool(((high - low) <= limit).all()):  # NaN fails the comparison too
            check_finite(x)
            raise ValueError(
                "attention scores of a row (divided by gamma) span more than the largest finite "
                "value of their dtype (max - min overflows), so they cannot be shifted to a "
                "maximum of 0; rescale the scores"
            )
    if not subtract:
        return x
    if mask is None:
        high = values.amax(-1, keepdim=True)
    else:
        high = values.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)
    x = x - high
    return x if mask is None else x.masked_fill(~mask, 0.0)


def _spread_within(values: torch.Tensor, limit: float) -> bool:
    """A sufficient test that values (contiguous rows; masked entries 0) hold no NaN or inf
    and that no row's max - min exceeds `limit`. On CPU the compiled range_within: the
    whole tensor's max - min, one vectorised pass with no temporary (softmax's check was a
    quarter to a half of its cost with abs().sum() below, which writes |x| and reads it back).
    Elsewhere (and under torch.compile) sum |x| <= limit / 2: it is finite only without
    NaN/inf, and every row's spread is at most 2 max |x| <= 2 sum |x|.
    """
    if (
        kernels is not None
        and values.device.type == "cpu"
        and values.is_contiguous()
        and not torch.compiler.is_compiling()
    ):
        return kernels.range_within(values, limit)
    return float(values.abs().sum()) <= limit / 2


def check_finite(x: torch.Tensor) -> None:
    """Raises ValueError if x holds a NaN or an infinite value."""
    # One sum is far cheaper than an elementwise isfinite; it is non-finite whenever an
    # entry is (or, rarely, when finite entries overflow), so only then look closer. The sum
    # is tested as a Python float: torch.isfinite on a 0-d tensor costs more than the sum.
    if math.isfinite(float(x.detach().sum())) or torch.isfinite(x).all():
        return
    kind = "NaN" if torch.isnan(x).any() else "infinite"
    raise ValueError(
        f"attention scores contain {kind} values at unmasked positions; "
        "exclude positions with mask= instead of -inf scores"
    )


def pack_unmasked(x: torch.Tensor, mask: torch.Tensor | None):
    """Moves each row's unmasked values to its front, in order, for the torch reference
    algorithms that walk a row as a chain. Returns (packed, n, order): n (rows, 1) counts the
    unmasked positions, order[r, j] is the original position of packed[r, j]; positions past
    n hold arbitrary values.
    """
    rows, d = x.shape
    if mask is None:
        order = torch.arange(d, device=x.device).expand(rows, d)
        return x, torch.full((rows, 1), d, device=x.device, dtype=torch.long), order
    order = torch.sort((~mask).to(torch.uint8), dim=-1, stable=True).indices
    return x.gather(-1, order), mask.sum(-1, keepdim=True), order


def unpack_unmasked(packed: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_unmasked's permutation (values past n land on the masked positions)."""
    return torch.empty_like(packed).scatter_(-1, order, packed)
