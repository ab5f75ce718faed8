"""Smoothed dynamic programming: differentiable Viterbi and DTW (Mensch & Blondel 2018).

A dynamic program is a recursion of maxes over a directed acyclic graph. Replacing every
max by the smoothed max

    max_Omega(v) = max_{p in simplex} <p, v> - gamma Omega(p),

whose maximiser p = argmax_Omega(v) is its gradient (Danskin), makes the value of the
program differentiable, and by the chain rule its gradient is the "expected path": the
probability mass that flows through each edge when every node spreads its incoming mass
over its parents with the weights p of its local max. Two regularizers:

    Omega(p) = sum_i p_i log p_i  ->  max_Omega(v) = gamma logsumexp(v / gamma),
                                      p = softmax(v / gamma);
    Omega(p) = 1/2 ||p||^2        ->  p = sparsemax(v / gamma) = P_simplex(v / gamma),
                                      max_Omega(v) = <p, v> - gamma/2 ||p||^2.

Entries v_k = -inf get exactly zero mass in both. min_Omega(v) = -max_Omega(-v).

Viterbi (linear-chain CRF). theta[t, i, j] (t = 0..T-1) is the potential of moving from
state j at time t to state i at time t + 1, emissions folded in. With V_0(j) = 0,

    V_t(i) = max_Omega_j (theta[t-1, i, j] + V_{t-1}(j)),    t = 1..T,
    Vit(theta) = max_Omega_i V_T(i).

With the entropy this is gamma log sum_y exp(sum_t theta[t-1, y_t, y_{t-1}] / gamma) over
all S^(T+1) sequences y_0..y_T (the CRF log-partition), since logsumexp is associative;
with the squared l2 norm it is not a max over paths but the recursion itself. Let
Q_t[i, :] = argmax_Omega of node (t, i) and q = argmax_Omega of the final max. Then

    U_T = q,   E_t = Q_t * U_t[:, None],   U_{t-1} = sum_i E_t[i, :],

and dVit/dtheta[t-1] = E_t, the expected transition marginals (chain rule through the
recursion: dVit/dV_t = U_t, and dV_t(i)/dtheta[t-1, i, j] = Q_t[i, j]). Each E_t sums to
1, and the mass is conserved along the chain: sum_i E_t[i, :] = U_{t-1} = sum_j E_{t-1}[:, j].

DTW. theta[i, j] (m x n) are costs; with R[0, 0] = 0, R[i, 0] = R[0, j] = +inf,

    R[i, j] = theta[i-1, j-1] + min_Omega(R[i-1, j-1], R[i-1, j], R[i, j-1]),
    DTW(theta) = R[m, n];

with the entropy, -gamma log sum_A exp(-<A, theta> / gamma) over the monotone alignments
A (soft-DTW). The gradient is the expected alignment E: E[m, n] = 1 and each cell passes
its mass E[i, j] to its three parents with the weights of its local min.

Directional derivatives (the paper's "dot" pass). In direction Z, the forward recursion
gives Vdot_t(i) = <Q_t[i], Z[t-1, i] + Vdot_{t-1}> and Qdot_t[i] = J(Q_t[i]) (Z[t-1, i] +
Vdot_{t-1}), with J(p) the Jacobian of argmax_Omega, a function of p alone:

    entropy:  J(p) z = (p * z - p <p, z>) / gamma,
    l2:       J(p) z = (s * z - s <s, z> / |s|) / gamma,   s = 1[p > 0];

the backward recursion differentiated gives Edot_t = Qdot_t * U_t + Q_t * Udot_t, and
Edot = Hessian(theta) Z. This Hessian-vector product is the backward of the backward,
so that double backward (gradgradcheck, Hessian-vector products) works. For DTW the
local op is a min: Qdot = -J(Q) Rdot_parents.

Two implementations of the sweeps (Viterbi: forward with the local argmax distributions Q,
reverse sweep, hard decode; DTW: forward with the local weights, expected alignment):
compiled C++ ones (regattn/csrc/dp_sweeps.h, parallel over the batch), used for
float32/float64 CPU tensors when regattn._C is built (the dispatch of `regattn.mappings`'
kernels: `mappings.torch_reference()` forces the torch path), and the torch code here, on
any device, which is the reference they are tested against. The Hessian-vector products are
torch code for both. In the torch code cells are processed
vectorised over the batch and the states (Viterbi) or over the anti-diagonals i + j = const
(DTW); time is sequential. Padded batches: positions past a sequence's length are ignored
(the torch code replaces them by 0 before the recursion), get gradient 0, and the value is
read at the sequence's own end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .mappings import sparsemax
from .mappings._kernels import kernels, use_kernels

__all__ = ["REFERENCE_REG", "REGS", "dtw", "viterbi", "viterbi_decode"]

REGS = ("entropy", "l2")
# the entropy: its DP is the CRF (its value the log-partition, its gradient the marginals)
REFERENCE_REG = REGS[0]
# the compiled sweeps take an empty tensor for "every sequence uses all T steps"
_NO_LENGTHS = torch.empty(0, dtype=torch.long)


# -- local smoothed max over the last dimension ------------------------------------------


def _project_simplex(z: torch.Tensor) -> torch.Tensor:
    """P_simplex over the last dim, by `mappings.sparsemax` (the compiled kernel on CPU, Triton
    on CUDA); -inf entries (forbidden moves) get 0 and rows of only -inf get 0.
    """
    finite = torch.isfinite(z)
    if bool(finite.all()):
        return sparsemax(z)
    return sparsemax(torch.where(finite, z, 0.0), mask=finite, empty="zero")


def _local_max(v: torch.Tensor, reg: str, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """max_Omega and argmax_Omega over the last dim; entries -inf get zero mass, a row of
    only -inf has value -inf and p = 0.
    """
    vmax = v.amax(-1, keepdim=True)
    live = vmax > -math.inf
    shift = torch.where(live, vmax, 0.0)
    z = (v - shift) / gamma  # max 0, -inf kept
    if reg == "entropy":
        e = z.exp_()
        total = e.sum(-1, keepdim=True)  # >= 1 on live rows, 0 on dead ones
        p = e.div_(total.clamp_min(1.0))
        value = torch.where(live, gamma * total.log(), -math.inf).squeeze(-1)
    else:
        p = _project_simplex(z)
        vz = torch.where(p > 0, v - shift, 0.0)
        value = (p * vz).sum(-1) - 0.5 * gamma * (p * p).sum(-1)
        value = torch.where(live.squeeze(-1), value, -math.inf)
    return value + shift.squeeze(-1), p


def _local_jvp(p: torch.Tensor, z: torch.Tensor, reg: str, gamma: float) -> torch.Tensor:
    """J(p) z: the derivative of argmax_Omega at the point whose argmax is p, along z."""
    if reg == "entropy":
        return (p * z - p * (p * z).sum(-1, keepdim=True)) / gamma
    s = (p > 0).to(p.dtype)
    size = s.sum(-1, keepdim=True).clamp_min(1)
    return (s * z - s * (s * z).sum(-1, keepdim=True) / size) / gamma


# -- Viterbi ---------------------------------------------------------------------------


def _viterbi_forward(theta, valid, reg, gamma):
    """Returns the value, the values V_0..V_T (batch, T+1, S), and for l2 the local argmax
    distributions Q (batch, T, S, S) (None for the entropy: recomputed from V by
    `_entropy_q`) and the final one q (batch, S).
    """
    batch, steps, states, _ = theta.shape
    v = theta.new_zeros(batch, states)
    v_all = theta.new_empty(batch, steps + 1, states)
    v_all[:, 0] = v
    q_all = theta.new_empty(batch, steps, states, states) if reg == "l2" else None
    eye = torch.eye(states, dtype=theta.dtype, device=theta.device)
    for t in range(steps):
        arg = theta[:, t] + v[:, None, :]
        if reg == "entropy":  # the value alone: 3 ops per step
            vt = gamma * torch.logsumexp(arg / gamma, -1) if gamma != 1 else arg.logsumexp(-1)
        else:
            vt, qt = _local_max(arg, reg, gamma)
        if valid is not None:  # frozen past the end: V_t = V_{t-1}, Q_t = identity
            keep = valid[:, t]
            vt = torch.where(keep[:, None], vt, v)
            if reg == "l2":
                qt = torch.where(keep[:, None, None], qt, eye)
        v = vt
        v_all[:, t + 1] = v
        if reg == "l2":
            q_all[:, t] = qt
    value, q_final = _local_max(v, reg, gamma)
    return value, v_all, q_all, q_final


def _entropy_q(theta, v_all, valid, gamma):
    """Q_t[i, j] = exp((theta[t-1, i, j] + V_{t-1}(j) - V_t(i)) / gamma) for all t at once:
    the softmax of node (t, i), whose log-normaliser is V_t(i). Rows of unreachable nodes
    (V_t(i) = -inf) get 0; steps past the end get the identity.
    """
    prev, cur = v_all[:, :-1, None, :], v_all[:, 1:, :, None]
    live = cur > -math.inf
    q = torch.exp((theta + prev - torch.where(live, cur, 0.0)) / gamma)
    q = torch.where(live, q, 0.0)
    if valid is not None:
        eye = torch.eye(theta.shape[-1], dtype=theta.dtype, device=theta.device)
        q = torch.where(valid[:, :, None, None], q, eye)
    return q


def _valid_steps(lengths, steps):
    """(batch, T) bool, True at the steps t < lengths[b]; None for no lengths."""
    if lengths is None:
        return None
    return torch.arange(steps, device=lengths.device)[None, :] < lengths[:, None]


def _compiled(theta: torch.Tensor) -> bool:
    """Whether theta's sweeps run compiled (float32/float64 on the "cpu" backend)."""
    return theta.dtype in (torch.float32, torch.float64) and use_kernels(theta)


def _lengths_arg(lengths):
    return _NO_LENGTHS if lengths is None else lengths.contiguous()


def _viterbi_marginals(q_all, u_final, lengths, compiled):
    """The reverse sweep from U_T = u_final: (E, U_0..U_T), E zero past each length."""
    if compiled:
        return kernels.viterbi_marginals_sweep(q_all, u_final.contiguous(), _lengths_arg(lengths))
    valid = _valid_steps(lengths, q_all.shape[1])
    steps = q_all.shape[1]
    marg = torch.empty_like(q_all)
    mass = u_final.new_empty(u_final.shape[0], steps + 1, u_final.shape[1])
    u = u_final
    mass[:, steps] = u
    for t in reversed(range(steps)):
        e = q_all[:, t] * u[:, :, None]
        marg[:, t] = e
        u = e.sum(1)
        mass[:, t] = u
    if valid is not None:
        marg = marg * valid[:, :, None, None]
    return marg, mass


def _viterbi_hvp(z, q_all, q_final, mass, valid, reg, gamma):
    if valid is not None:
        z = z * valid[:, :, None, None]
    steps = q_all.shape[1]
    vdot = z.new_zeros(z.shape[0], z.shape[2])
    qdot = torch.empty_like(q_all)
    for t in range(steps):
        arg = z[:, t] + vdot[:, None, :]
        vdot = (q_all[:, t] * arg).sum(-1)
        qdot[:, t] = _local_jvp(q_all[:, t], arg, reg, gamma)
    udot = _local_jvp(q_final, vdot, reg, gamma)
    edot = torch.empty_like(q_all)
    for t in reversed(range(steps)):
        e = qdot[:, t] * mass[:, t + 1, :, None] + q_all[:, t] * udot[:, :, None]
        edot[:, t] = e
        udot = e.sum(1)
    if valid is not None:
        edot = edot * valid[:, :, None, None]
    return edot


class ViterbiFunction(torch.autograd.Function):
    """Smoothed Viterbi value; its backward is `ViterbiGradFunction` (double-differentiable).

    The compiled forward saves the local argmax distributions Q. The torch forward saves the
    node values V (entropy: the softmax weights Q are recomputed from them in one vectorised
    op in the backward) or Q (l2). `lengths`: checked (batch,) long tensor or None; past a
    sequence's length theta is ignored by the compiled sweep and must be 0 for the torch one.
    """

    @staticmethod
    def forward(ctx, theta, lengths, reg: str, gamma: float, compiled: bool):
        """The forward recursion; saves Q (or V), and the final q."""
        if compiled:
            value, saved, q_final = kernels.viterbi_forward_sweep(
                theta.detach().contiguous(), _lengths_arg(lengths), reg, gamma
            )
        else:
            valid = _valid_steps(lengths, theta.shape[1])
            value, v_all, q_all, q_final = _viterbi_forward(theta.detach(), valid, reg, gamma)
            saved = v_all if q_all is None else q_all
        ctx.save_for_backward(theta, saved, q_final)
        ctx.lengths, ctx.reg, ctx.gamma, ctx.compiled = lengths, reg, gamma, compiled
        return value

    @staticmethod
    def backward(ctx, grad):
        """The reverse sweep: grad times the expected transition marginals."""
        theta, saved, q_final = ctx.saved_tensors
        if ctx.reg == "entropy" and not ctx.compiled:
            valid = _valid_steps(ctx.lengths, theta.shape[1])
            q_all = _entropy_q(theta.detach(), saved, valid, ctx.gamma)
        else:
            q_all = saved
        out = ViterbiGradFunction.apply(
            theta, grad, q_all, q_final, ctx.lengths, ctx.reg, ctx.gamma, ctx.compiled
        )
        return out, None, None, None, None


class ViterbiGradFunction(torch.autograd.Function):
    """grad[b] * E[b] from the saved Q; its backward is the Hessian-vector product.

    theta is an input only so that the Hessian-vector product flows back to it.
    """

    @staticmethod
    def forward(ctx, theta, grad, q_all, q_final, lengths, reg: str, gamma: float, compiled):
        """The reverse sweep from U_T = grad * q (linear in U_T: it gives grad * E)."""
        marg, _ = _viterbi_marginals(q_all, grad[:, None] * q_final, lengths, compiled)
        ctx.save_for_backward(grad, q_all, q_final)
        ctx.lengths, ctx.reg, ctx.gamma, ctx.compiled = lengths, reg, gamma, compiled
        return marg

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, z):
        """Hessian(theta) z (the "dot" pass) times grad, and <z, E> for grad; E and the
        mass U are swept again from U_T = q (only double backward needs them unscaled).
        """
        grad, q_all, q_final = ctx.saved_tensors
        marg, mass = _viterbi_marginals(q_all, q_final, ctx.lengths, ctx.compiled)
        valid = _valid_steps(ctx.lengths, q_all.shape[1])
        d_theta = d_grad = None
        if ctx.needs_input_grad[0]:
            hz = _viterbi_hvp(z, q_all, q_final, mass, valid, ctx.reg, ctx.gamma)
            d_theta = grad[:, None, None, None] * hz
        if ctx.needs_input_grad[1]:
            d_grad = (z * marg).sum((1, 2, 3))
        return d_theta, d_grad, None, None, None, None, None, None


# -- DTW -------------------------------------------------------------------------------


def _diagonals(m: int, n: int, device):
    """Index tensors (i, j), 1-based, of the cells of each anti-diagonal i + j = k."""
    out = []
    for k in range(2, m + n + 1):
        i = torch.arange(max(1, k - n), min(m, k - 1) + 1, device=device)
        out.append((i, k - i))
    return out


def _parents(r, i, j):
    return torch.stack((r[:, i - 1, j - 1], r[:, i - 1, j], r[:, i, j - 1]), -1)


def _dtw_forward(theta, diags, reg, gamma):
    batch, m, n = theta.shape
    r = theta.new_full((batch, m + 1, n + 1), math.inf)
    r[:, 0, 0] = 0
    q = theta.new_zeros(batch, m + 2, n + 2, 3)
    for i, j in diags:
        val, p = _local_max(-_parents(r, i, j), reg, gamma)
        r[:, i, j] = theta[:, i - 1, j - 1] - val
        q[:, i, j] = p
    return r, q


def _children(x, q, i, j):
    """The sum over the children c of (i, j) of q[c, slot of (i, j) in c] * x[c]."""
    return (
        q[:, i + 1, j + 1, 0] * x[:, i + 1, j + 1]
        + q[:, i + 1, j, 1] * x[:, i + 1, j]
        + q[:, i, j + 1, 2] * x[:, i, j + 1]
    )


def _dtw_marginals(q, ends, diags):
    batch = q.shape[0]
    seed = q.new_zeros(q.shape[:3])
    seed[torch.arange(batch, device=q.device), ends[0], ends[1]] = 1
    e = torch.zeros_like(seed)
    for i, j in reversed(diags):
        e[:, i, j] = seed[:, i, j] + _children(e, q, i, j)
    return e


def _dtw_hvp(z, q, e, valid, diags, reg, gamma):
    if valid is not None:
        z = z * valid
    batch, m, n = z.shape
    rdot = z.new_zeros(batch, m + 1, n + 1)
    qdot = torch.zeros_like(q)
    for i, j in diags:
        par = _parents(rdot, i, j)
        p = q[:, i, j]
        rdot[:, i, j] = z[:, i - 1, j - 1] + (p * par).sum(-1)
        qdot[:, i, j] = -_local_jvp(p, par, reg, gamma)
    edot = torch.zeros_like(e)
    for i, j in reversed(diags):
        edot[:, i, j] = _children(e, qdot, i, j) + _children(edot, q, i, j)
    edot = edot[:, 1 : m + 1, 1 : n + 1]
    return edot * valid if valid is not None else edot


class DTWFunction(torch.autograd.Function):
    """Smoothed DTW value; its backward is `DTWGradFunction` (double-differentiable)."""

    @staticmethod
    def forward(ctx, theta, ends, valid, reg: str, gamma: float, compiled: bool):
        """The forward recursion (compiled, or over anti-diagonals); saves the weights."""
        if compiled:  # the torch sweeps' anti-diagonals: built for an HVP only
            diags = None
            r, q = kernels.dtw_forward_sweep(theta.detach().contiguous(), reg, gamma)
        else:
            diags = _diagonals(theta.shape[1], theta.shape[2], theta.device)
            r, q = _dtw_forward(theta.detach(), diags, reg, gamma)
        batch = torch.arange(theta.shape[0], device=theta.device)
        ctx.save_for_backward(theta, q)
        ctx.ends, ctx.valid, ctx.diags, ctx.reg, ctx.gamma = ends, valid, diags, reg, gamma
        ctx.compiled = compiled
        return r[batch, ends[0], ends[1]]

    @staticmethod
    def backward(ctx, grad):
        """The reverse sweep: grad times the expected alignment."""
        theta, q = ctx.saved_tensors
        out = DTWGradFunction.apply(
            theta, grad, q, ctx.ends, ctx.valid, ctx.diags, ctx.reg, ctx.gamma, ctx.compiled
        )
        return out, None, None, None, None, None


class DTWGradFunction(torch.autograd.Function):
    """grad[b] * E[b] from the saved local weights; its backward is the Hessian product."""

    @staticmethod
    def forward(ctx, theta, grad, q, ends, valid, diags, reg: str, gamma: float, compiled):
        """The reverse sweep: each cell passes its mass to its parents."""
        if compiled:
            e = kernels.dtw_marginals_sweep(q, ends[0].contiguous(), ends[1].contiguous())
        else:
            e = _dtw_marginals(q, ends, diags)
        m, n = theta.shape[1:]
        ctx.save_for_backward(grad, q, e)
        ctx.valid, ctx.diags, ctx.reg, ctx.gamma = valid, diags, reg, gamma
        return grad[:, None, None] * e[:, 1 : m + 1, 1 : n + 1]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, z):
        """Hessian(theta) z (the "dot" pass) times grad, and <z, E> for grad."""
        grad, q, e = ctx.saved_tensors
        d_theta = d_grad = None
        if ctx.needs_input_grad[0]:
            diags = ctx.diags or _diagonals(z.shape[1], z.shape[2], z.device)
            hz = _dtw_hvp(z, q, e, ctx.valid, diags, ctx.reg, ctx.gamma)
            d_theta = grad[:, None, None] * hz
        if ctx.needs_input_grad[1]:
            m, n = z.shape[1:]
            d_grad = (z * e[:, 1 : m + 1, 1 : n + 1]).sum((1, 2))
        return d_theta, d_grad, None, None, None, None, None, None, None


# -- argument checks -------------------------------------------------------------------


def _check_reg_gamma(reg, gamma):
    if reg not in REGS:
        raise ValueError(f"reg must be one of {REGS}, got {reg!r}")
    ok = isinstance(gamma, (int, float)) and not isinstance(gamma, bool)
    if not (ok and math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma must be a finite number > 0, got {gamma!r}")


def _check_theta(theta, rank, what):
    if not isinstance(theta, torch.Tensor) or not theta.is_floating_point():
        raise ValueError(f"theta must be a floating-point tensor {what}")
    if theta.dim() != rank:
        raise ValueError(f"theta must be {what}, got shape {tuple(theta.shape)}")
    if any(s == 0 for s in theta.shape[1:]):
        raise ValueError(f"theta must be {what} with no empty dimension, got {tuple(theta.shape)}")


def _check_lengths(lengths, batch, upper, name, device):
    if not isinstance(lengths, torch.Tensor):
        try:
            lengths = torch.as_tensor(lengths)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{name} must be a (batch,) integer tensor: {err}") from None
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor, got {lengths.dtype}")
    if lengths.shape != (batch,):
        raise ValueError(f"{name} must have shape ({batch},), got {tuple(lengths.shape)}")
    if batch and (int(lengths.min()) < 1 or int(lengths.max()) > upper):
        raise ValueError(f"{name} must lie in [1, {upper}], got {lengths.tolist()}")
    return lengths.to(device=device, dtype=torch.long)


def _check_values(theta, valid, allow_neg_inf):
    x = theta.detach() if valid is None else theta.detach()[valid]
    if torch.isnan(x).any():
        raise ValueError("theta contains NaN")
    bad = x == math.inf if allow_neg_inf else torch.isinf(x)
    if bad.any():
        kind = "+inf" if allow_neg_inf else "infinite values"
        raise ValueError(f"theta contains {kind}")


# -- public API ------------------------------------------------------------------------


def _viterbi_lengths(theta, lengths):
    """The checked (batch,) long lengths on theta's device, or None."""
    if lengths is None:
        return None
    batch, steps = theta.shape[:2]
    return _check_lengths(lengths, batch, steps, "lengths", theta.device)


def viterbi(
    theta: torch.Tensor,
    reg: str = "entropy",
    gamma: float = 1.0,
    lengths: torch.Tensor | None = None,
) -> torch.Tensor:
    """The smoothed Viterbi value max_Omega over the sequences y_0..y_T of a linear chain,
    by the recursion V_0 = 0, V_t(i) = max_Omega_j (theta[:, t-1, i, j] + V_{t-1}(j)),
    value = max_Omega_i V_T(i). Its gradient is the expected transition marginals.

    Parameters
    ----------
    theta : torch.Tensor
        (batch, T, S, S) floating-point potentials: theta[b, t, i, j] is the score of moving
        from state j at time t to state i at time t + 1 (emissions folded in). Entries -inf
        are forbidden transitions (zero mass); NaN and +inf are rejected.
    reg : str
        "entropy" (max_Omega = gamma logsumexp(. / gamma): the CRF log-partition) or "l2"
        (max_Omega with gamma/2 ||p||^2: sparse marginals).
    gamma : float
        regularization strength, a finite number > 0.
    lengths : Optional[torch.Tensor]
        (batch,) integers in [1, T]: sequence b uses theta[b, :lengths[b]] only (positions
        past it are ignored and get zero gradient); None for all T.

    Returns
    -------
    torch.Tensor
        (batch,) values. Differentiable twice: the gradient is computed by the reverse
        sweep of the saved local argmax distributions, the Hessian-vector product by the
        directional-derivative ("dot") pass.

    Raises
    ------
    ValueError
        theta not a (batch, T, S, S) floating tensor (wrong rank, non-square transitions,
        T = 0 or S = 0), NaN or +inf potentials at used positions, an unknown `reg`,
        gamma <= 0 or not finite, `lengths` of the wrong shape or type or out of [1, T],
        or a sequence with no path of finite score.
    """
    _check_theta(theta, 4, "(batch, T, S, S)")
    if theta.shape[2] != theta.shape[3]:
        raise ValueError(f"theta must have square (S, S) transitions, got {tuple(theta.shape)}")
    _check_reg_gamma(reg, gamma)
    lengths = _viterbi_lengths(theta, lengths)
    if _compiled(theta):  # the sweep checks the used potentials and the values as it goes
        return ViterbiFunction.apply(theta, lengths, reg, float(gamma), True)
    valid = _valid_steps(lengths, theta.shape[1])
    _check_values(theta, valid, allow_neg_inf=True)
    if valid is not None:
        theta = torch.where(valid[:, :, None, None], theta, 0.0)
    value = ViterbiFunction.apply(theta, lengths, reg, float(gamma), False)
    if not torch.isfinite(value.detach()).all():
        raise ValueError("theta leaves some sequence with no path of finite score")
    return value


def viterbi_decode(theta: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """The hard Viterbi path: argmax over y_0..y_T of sum_t theta[:, t-1, y_t, y_{t-1}]
    (ties to the lowest state), by max-product with back-pointers.

    Parameters
    ----------
    theta : torch.Tensor
        (batch, T, S, S) potentials, as in `viterbi`.
    lengths : Optional[torch.Tensor]
        (batch,) integers in [1, T], as in `viterbi`.

    Returns
    -------
    torch.Tensor
        (batch, T + 1) long tensor of states y_0..y_T; positions past a sequence's length
        (t > lengths[b]) are -1.

    Raises
    ------
    ValueError
        as `viterbi` (without reg and gamma).
    """
    _check_theta(theta, 4, "(batch, T, S, S)")
    if theta.shape[2] != theta.shape[3]:
        raise ValueError(f"theta must have square (S, S) transitions, got {tuple(theta.shape)}")
    lengths = _viterbi_lengths(theta, lengths)
    theta = theta.detach()
    if _compiled(theta):  # the sweep checks the used potentials and the values as it goes
        return kernels.viterbi_decode_sweep(theta.contiguous(), _lengths_arg(lengths))
    valid = _valid_steps(lengths, theta.shape[1])
    _check_values(theta, valid, allow_neg_inf=True)
    batch, steps, states, _ = theta.shape
    ident = torch.arange(states, device=theta.device).expand(batch, states)
    v = theta.new_zeros(batch, states)
    pointers = []
    for t in range(steps):
        vt, bp = (theta[:, t] + v[:, None, :]).max(-1)
        if valid is not None:
            vt = torch.where(valid[:, t, None], vt, v)
            bp = torch.where(valid[:, t, None], bp, ident)
        v = vt
        pointers.append(bp)
    if not torch.isfinite(v.amax(-1)).all():
        raise ValueError("theta leaves some sequence with no path of finite score")
    path = torch.empty(batch, steps + 1, dtype=torch.long, device=theta.device)
    y = v.argmax(-1)
    for t in reversed(range(steps)):
        path[:, t + 1] = y
        y = pointers[t].gather(-1, y[:, None]).squeeze(-1)
    path[:, 0] = y
    if valid is not None:
        past = torch.cat((torch.zeros_like(valid[:, :1]), ~valid), 1)
        path = path.masked_fill(past, -1)
    return path


def dtw(
    theta: torch.Tensor,
    reg: str = "entropy",
    gamma: float = 1.0,
    lengths: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """The smoothed DTW value R[m, n] of the recursion R[0, 0] = 0, R[i, 0] = R[0, j] = +inf,
    R[i, j] = theta[:, i-1, j-1] + min_Omega(R[i-1, j-1], R[i-1, j], R[i, j-1]), with
    min_Omega(v) = -max_Omega(-v) (soft-DTW for the entropy). Its gradient is the expected
    alignment matrix.

    Parameters
    ----------
    theta : torch.Tensor
        (batch, m, n) finite floating-point costs.
    reg : str
        "entropy" or "l2", as in `viterbi`.
    gamma : float
        regularization strength, a finite number > 0.
    lengths : Optional[Sequence[torch.Tensor]]
        a pair (lengths_m, lengths_n) of (batch,) integer tensors in [1, m] and [1, n]:
        sequence b aligns theta[b, :lengths_m[b], :lengths_n[b]] only (the rest is ignored
        and gets zero gradient); None for the full m x n.

    Returns
    -------
    torch.Tensor
        (batch,) values, differentiable twice (reverse sweep for the gradient, "dot" pass
        for Hessian-vector products).

    Raises
    ------
    ValueError
        theta not a (batch, m, n) floating tensor with m, n >= 1, NaN or infinite costs at
        used positions, an unknown `reg`, gamma <= 0 or not finite, or `lengths` not a pair
        of (batch,) integer tensors within range.
    """
    _check_theta(theta, 3, "(batch, m, n)")
    _check_reg_gamma(reg, gamma)
    batch, m, n = theta.shape
    if lengths is None:
        ends = (
            torch.full((batch,), m, dtype=torch.long, device=theta.device),
            torch.full((batch,), n, dtype=torch.long, device=theta.device),
        )
        valid = None
    else:
        if isinstance(lengths, torch.Tensor) or len(lengths) != 2:
            raise ValueError("lengths must be a pair (lengths_m, lengths_n) of (batch,) tensors")
        ends = (
            _check_lengths(lengths[0], batch, m, "lengths[0]", theta.device),
            _check_lengths(lengths[1], batch, n, "lengths[1]", theta.device),
        )
        rows = torch.arange(m, device=theta.device)[None, :, None] < ends[0][:, None, None]
        cols = torch.arange(n, device=theta.device)[None, None, :] < ends[1][:, None, None]
        valid = rows & cols
    _check_values(theta, valid, allow_neg_inf=False)
    if valid is not None:
        theta = torch.where(valid, theta, 0.0)
    return DTWFunction.apply(theta, ends, valid, reg, float(gamma), _compiled(theta))
