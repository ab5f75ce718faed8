"""Backward passes shared by the sparse mappings. All their Jacobians are symmetric, so each
Jacobian-vector product below is also the vector-Jacobian product autograd needs.

* Support Jacobian (sparsemax, Martins & Astudillo 2016; entmax, Peters et al. 2019): with
  weights w_i on the support of y (w = 1 for the simplex projection, w = y^{2-alpha} for
  alpha-entmax), (J v)_i = w_i (v_i - sum_j w_j v_j / sum_j w_j), 0 off the support.
* Group averaging (Niculae & Blondel 2017, Prop. 3): prox_TV and the oscarmax prox fuse
  coordinates into groups; their Jacobian averages a vector within each group. The forward
  kernels label each position with its group index within its row (-1 outside any group).
  On the Triton backend both are kernels, the group means one program per row with no
  atomics (_triton.grouped_support_vjp).

On CPU both run in the compiled kernel in one pass per row; the torch versions are the
reference (and the path for other devices).
"""

import torch

from ._kernels import backend_for, kernels, triton_kernels
from ._rows import unscale

_NO_ALPHA = torch.empty(0)
_NO_GROUP = torch.empty(0, dtype=torch.int32)


def sparse_vjp(
    y: torch.Tensor,
    grad: torch.Tensor,
    alpha: float | torch.Tensor = 2.0,
    group: torch.Tensor | None = None,
) -> torch.Tensor:
    """Support Jacobian (alpha = 2: simplex projection; else alpha-entmax, alpha a number or
    a (rows, 1) tensor) times grad, then group-averaged when `group` is given (with alpha = 2:
    the grouped projections, fusedmax and oscarmax); y, grad and group are (rows, d).
    """
    grad = grad.contiguous()
    path = backend_for(y)
    if path == "triton":
        if group is None:
            return triton_kernels().support_vjp(y, grad, alpha)
        return triton_kernels().grouped_support_vjp(y, grad, group)
    if path == "cpu":
        per_row = isinstance(alpha, torch.Tensor)
        return kernels.sparse_jvp_rows(
            y,
            grad,
            0.0 if per_row else float(alpha),
            _NO_GROUP if group is None else group.to(torch.int32),
            alpha.reshape(-1).contiguous() if per_row else _NO_ALPHA,
        )
    out = support_jvp_reference(y, grad, alpha)
    return out if group is None else group_mean_reference(out, group)


def support_jvp_reference(y: torch.Tensor, v: torch.Tensor, alpha) -> torch.Tensor:
    support = y > 0
    w = (
        support.to(y.dtype)
        if not isinstance(alpha, torch.Tensor) and alpha == 2
        else torch.where(support, y.pow(2 - alpha), 0.0)
    )
    return w * (v - (w * v).sum(-1, keepdim=True) / w.sum(-1, keepdim=True))


def group_mean_reference(v: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """out[r, i] = mean of v[r, j] over j with group[r, j] == group[r, i]; 0 where group is -1."""
    rows, d = v.shape
    outside = group < 0
    slot = group + torch.arange(rows, device=v.device).unsqueeze(1) * d
    slot = slot.masked_fill(outside, rows * d).flatten()  # one spare slot collects the -1s
    sums = v.new_zeros(rows * d + 1).index_add_(0, slot, v.flatten())
    # counts by index_add_, not bincount (which reads its maximum on the host): no
    # host-device synchronization on any device
    counts = v.new_zeros(rows * d + 1).index_add_(0, slot, torch.ones_like(v).flatten())
    means = sums / counts.clamp_min(1)
    return means.index_select(0, slot).view(rows, d).masked_fill_(outside, 0.0)


class GroupedProjectionFunction(torch.autograd.Function):
    """P_simplex(prox(x / gamma; lam)) on (rows, d) for a prox that fuses coordinates into
    groups, fusedmax's TV segments or oscarmax's clusters, with gradient by group averaging
    (Prop. 3): (1/gamma) J_group J_P g. `rows_fn(x, mask, gamma, lam) -> (y, group)` computes
    the forward (fused.fusedmax_rows, oscar.oscarmax_rows); group is -1 where the backward
    needs no group.
    """

    @staticmethod
    def forward(ctx, x, mask, gamma: float, lam: float, rows_fn):
        """Computes the mapping of the (rows, d) scores and saves what the backward needs."""
        y, group = rows_fn(x, mask, gamma, lam)
        ctx.save_for_backward(y, group)
        ctx.gamma = gamma
        return y

    @staticmethod
    def backward(ctx, grad):
        """The vector-Jacobian product: the projection's support Jacobian, then group means."""
        y, group = ctx.saved_tensors
        return unscale(sparse_vjp(y, grad, group=group), ctx.gamma), None, None, None, None
