"""Triton kernels for the mappings: one program per row, the row in one block.

Imported lazily by `_kernels.triton_kernels()` (never at `import regattn.mappings`), so a
missing triton costs nothing until a CUDA tensor (or `backend("triton")`) needs it. Under
TRITON_INTERPRET=1 (set before triton is imported) the same kernels run on CPU tensors in
Triton's interpreter, which is how the tests check them on machines with no GPU.

Every kernel reads a row of the contiguous (rows, d) float32/float64 scores (half precision
is converted by `_rows.to_rows` first) with its bool mask (True = may attend), shifts it to
a maximum of 0 over its unmasked positions, and validates it as it reads it: a NaN or an
infinite unmasked score, or a spread (max - min) / gamma that overflows, writes an error code
for the row into a flag tensor and gives the row zeros. The flags are raised without a
host-device synchronization (`torch._assert_async`) or, under `_sync.sync_checks()`, read
on the host and raised as the ValueError of the other backends. A row with no unmasked
position gets zeros (and zero gradient); `to_rows` asserts (asynchronously) that there is
none when empty="error". A -inf score is a masked position (see `_read_row`).

Algorithms (exact to the dtype's resolution, as the CPU kernels):

* softmax: max, exp, sum.
* sparsemax: bisection on tau in [-1, 0] (the row's max is 0), then Michelot's exact finish
  tau = (sum_S z - 1) / |S| on S = {z > tau}, repeated until S is stable.
* 1.5-entmax: bisection on tau, then the exact finish tau = mean_S - sqrt(1/|S| - var_S).
* alpha-entmax (alpha per row, a tensor): bisection on tau in [-1, -n^(1-alpha)], the
  references' solver, and the normalization y / sum(y).
* sq-pnorm-max: bisection on tau in [-gamma, 0], the reference's test function.
* fusedmax: the unmasked values packed, Condat's direct TV algorithm as a sequential scalar
  loop (one state transition per iteration, as fused.prox_tv1d_rows_reference), then the
  sparsemax projection; int32 segment ids (-1 at masked positions).
* oscarmax: the stable decreasing order by tl.sort (values, then exact int32 keys
  rank-of-value * BLOCK + position), the weights subtracted, pool-adjacent-violators as a
  sequential scalar loop, then the sparsemax projection; int32 cluster ids on the support
  (-1 off it). Both keep their scratch in the row's slots of the outputs.
* backward: the support Jacobian (weights 1 or y^(2-alpha)) and Sherman-Morrison for
  sq-pnorm-max, one program per row; dalpha and softmax's backward in torch ops.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._sync import sync_checks_enabled

NONFINITE = 1
SPREAD = 2
BAD_ALPHA = 3

MESSAGES = {
    NONFINITE: (
        "attention scores contain NaN or infinite values at unmasked positions; "
        "exclude positions with mask= instead of -inf scores"
    ),
    SPREAD: (
        "attention scores of a row (divided by gamma) span more than the largest finite value "
        "of their dtype (max - min overflows), so they cannot be shifted to a maximum of 0; "
        "rescale the scores"
    ),
    BAD_ALPHA: "a tensor alpha must be > 1 everywhere (alpha=1 is softmax: pass alpha=1.0)",
}
EMPTY_MESSAGE = (
    "a row has no unmasked position: there is nothing to attend to "
    "(check the padding mask; or pass empty='zero' to give such rows zeros)"
)


def raise_flags(err: torch.Tensor, codes=(NONFINITE, SPREAD), messages=None) -> None:
    """Raises the errors flagged in `err` (int32 codes, 0 = fine; any shape): asynchronously
    (`torch._assert_async`, no synchronization) by default, as ValueError under sync_checks.
    `messages` maps each code to its message (default: the mappings' MESSAGES).
    """
    messages = MESSAGES if messages is None else messages
    if err.numel() == 0:
        return
    if sync_checks_enabled():
        found = set(err.unique().tolist())
        for code in codes:
            if code in found:
                raise ValueError(messages[code])
        return
    for code in codes:
        torch._assert_async((err != code).all(), messages[code])


def assert_no_empty_row(x: torch.Tensor, mask: torch.Tensor | None) -> None:
    """A row of the scores `x` (rows, d) with no position that is unmasked and not -inf is an
    error (empty="error"), raised as raise_flags.
    """
    if x.numel() == 0:
        return
    valid = x != float("-inf")
    nonempty = (valid if mask is None else valid & mask).any(dim=1).all()
    if sync_checks_enabled():
        if not bool(nonempty):
            raise ValueError(EMPTY_MESSAGE)
        return
    torch._assert_async(nonempty, EMPTY_MESSAGE)


_PARAMS: dict = {}


def _params(like: torch.Tensor, *values: float) -> torch.Tensor:
    """The scalar parameters as a tensor of the rows' dtype on their device (a Python float
    argument would reach the kernel as float32). Made with device fills, not a host copy
    (which would synchronize), and cached.
    """
    key = (values, like.dtype, like.device)
    out = _PARAMS.get(key)
    if out is None:
        if len(_PARAMS) > 256:
            _PARAMS.clear()
        out = torch.stack([torch.full((), v, dtype=like.dtype, device=like.device) for v in values])
        _PARAMS[key] = out
    return out


def _limit(dtype: torch.dtype, gamma: float) -> float:
    # as max_spread in csrc/regattn_cpu.cpp
    return torch.finfo(dtype).max * min(gamma, 1.0)


def _setup(x: torch.Tensor, mask: torch.Tensor | None):
    rows, d = x.shape
    block = max(triton.next_power_of_2(d), 16)
    has_mask = mask is not None
    m = mask.view(torch.uint8) if has_mask else x
    iters = 29 if x.dtype == torch.float32 else 58
    return rows, d, block, has_mask, m, iters


def num_warps(block: int) -> int:
    """Warps per program (one row each): up to 16 positions per thread before a second warp.

    Each bisection step reduces over the row (tl.sum); within one warp that is a few register
    shuffles, across warps a shared-memory round trip with barriers. The kernels are bound by
    those reductions, not by memory (ncu on an H200 at 1M rows x 128: sparsemax's forward at
    78% of the SMs' throughput and 2% of DRAM's with Triton's default 4 warps), so short rows
    take one warp: 1 for BLOCK <= 512, 2 for 1024, 4 for 2048, 8 for 4096.
    """
    return min(max(block // 512, 1), 8)


@triton.jit
def _pow(v, e):
    """The power v ** e for v >= 0 (0 ** e = 0, e > 0)."""
    return tl.where(v > 0, tl.exp(tl.log(tl.where(v > 0, v, 1.0)) * e), 0.0)


@triton.jit
def _search_step(bisected):
    """Marks one step of a threshold search; `bisected` is True for the rows whose step was a
    bisection. It compiles to nothing: the interpreter run of bench/bench_kernel_passes.py
    replaces it to count the steps (regattn_bench.kernel_passes).
    """
    pass


@triton.jit
def _read_row(X, M, ERR, row, d, gamma, limit, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """Loads row `row`, validates it (error code to ERR[row]) and returns (offs, inb, valid, z,
    n): z = (x - max) / gamma on the valid positions (unmasked, not -inf), 0 elsewhere; valid
    is all False on an invalid or empty row.
    """
    offs = tl.arange(0, BLOCK)
    inb = offs < d
    x = tl.load(X + row * d + offs, mask=inb, other=0.0)
    # a -inf score is a masked position (mappings._rows.neg_inf_masked); NaN != -inf stays
    valid = inb & (x != float("-inf"))
    if HAS_MASK:
        valid = valid & (tl.load(M + row * d + offs, mask=inb, other=0) != 0)
    hi = tl.max(tl.where(valid, x, float("-inf")), axis=0)
    lo = tl.min(tl.where(valid, x, float("inf")), axis=0)
    bad = tl.sum((valid & ((x - x) != 0)).to(tl.int32), axis=0)
    n = tl.sum(valid.to(tl.int32), axis=0)
    code = tl.where(bad > 0, 1, tl.where((n > 0) & ((hi - lo) > limit), 2, 0))
    tl.store(ERR + row, code)
    valid = valid & (code == 0)
    z = tl.where(valid, (x - tl.where(n > 0, hi, 0.0)) / gamma, 0.0)
    return offs, inb, valid, z, n


@triton.jit
def _project_simplex(z, valid, ITERS: tl.constexpr):
    """P_simplex(z) over the valid positions (0 elsewhere): bisection on tau in
    [max z - 1, max z], then Michelot's exact finish.
    """
    top = tl.max(tl.where(valid, z, float("-inf")), axis=0)
    lo = tl.sum(z * 0.0, axis=0) + tl.where(top > float("-inf"), top, 0.0) - 1.0
    hi = lo + 1.0
    for _ in range(ITERS):  # mass(lo) >= 1 > mass(hi)
        _search_step(True)
        tau = (lo + hi) * 0.5
        mass = tl.sum(tl.where(valid, tl.maximum(z - tau, 0.0), 0.0), axis=0)
        lo = tl.where(mass >= 1.0, tau, lo)
        hi = tl.where(mass >= 1.0, hi, tau)
    # Michelot: from S = {z > lo}, a superset of the support, tau_S <= tau and S shrinks
    tau = lo
    for _ in range(4):
        _search_step(False)
        s = valid & (z > tau)
        k = tl.sum(s.to(z.dtype), axis=0)
        tau = tl.where(k > 0, (tl.sum(tl.where(s, z, 0.0), axis=0) - 1.0) / k, tau)
    return tl.where(valid, tl.maximum(z - tau, 0.0), 0.0)


@triton.jit
def _softmax_fwd(X, M, Y, ERR, P, d, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs, inb, valid, z, n = _read_row(
        X, M, ERR, row, d, tl.load(P), tl.load(P + 1), HAS_MASK, BLOCK
    )
    e = tl.where(valid, tl.exp(z), 0.0)
    s = tl.sum(e, axis=0)
    tl.store(Y + row * d + offs, e / tl.where(s > 0, s, 1.0), mask=inb)


@triton.jit
def _sparsemax_fwd(
    X, M, Y, ERR, P, d, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    offs, inb, valid, z, n = _read_row(
        X, M, ERR, row, d, tl.load(P), tl.load(P + 1), HAS_MASK, BLOCK
    )
    y = _project_simplex(z, valid, ITERS)
    tl.store(Y + row * d + offs, y, mask=inb)


@triton.jit
def _entmax15_fwd(
    X, M, Y, ERR, P, d, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    offs, inb, valid, z, n = _read_row(
        X, M, ERR, row, d, tl.load(P), tl.load(P + 1), HAS_MASK, BLOCK
    )
    # z = (x - max) / 2: y = (z - tau)_+^2, tau in [-1, -1/sqrt(n)]
    lo = tl.sum(z * 0.0, axis=0) - 1.0
    hi = lo + 1.0
    for _ in range(ITERS):
        _search_step(True)
        tau = (lo + hi) * 0.5
        v = tl.where(valid, tl.maximum(z - tau, 0.0), 0.0)
        mass = tl.sum(v * v, axis=0)
        lo = tl.where(mass >= 1.0, tau, lo)
        hi = tl.where(mass >= 1.0, hi, tau)
    tau = lo
    for _ in range(3):  # exact finish on S: sum_S (z - tau)^2 = 1
        _search_step(False)
        s = valid & (z > tau)
        k = tl.sum(s.to(z.dtype), axis=0)
        kk = tl.where(k > 0, k, 1.0)
        mean = tl.sum(tl.where(s, z, 0.0), axis=0) / kk
        dev = tl.where(s, z - mean, 0.0)
        var = tl.sum(dev * dev, axis=0) / kk
        tau = tl.where(k > 0, mean - tl.sqrt(tl.maximum(1.0 / kk - var, 0.0)), tau)
    v = tl.where(valid, tl.maximum(z - tau, 0.0), 0.0)
    tl.store(Y + row * d + offs, v * v, mask=inb)


@triton.jit
def _entmax_fwd(
    X, M, Y, ERR, A, P, d, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    offs, inb, valid, z, n = _read_row(
        X, M, ERR, row, d, tl.load(P), tl.load(P + 1), HAS_MASK, BLOCK
    )
    alpha = tl.load(A + row)
    good = alpha > 1.0  # False on NaN
    tl.store(ERR + row, tl.where(good, tl.load(ERR + row), 3))
    valid = valid & ((z * 0.0 + alpha) > 1.0)  # a scalar bool does not broadcast in `&`
    am1 = tl.where(good, alpha - 1.0, 1.0)
    inv = 1.0 / am1
    z = z * am1
    nn = tl.maximum(n, 1).to(z.dtype)
    lo = tl.sum(z * 0.0, axis=0) - 1.0
    hi = -_pow(nn, -am1)
    for _ in range(ITERS):
        _search_step(True)
        tau = (lo + hi) * 0.5
        mass = tl.sum(tl.where(valid, _pow(tl.maximum(z - tau, 0.0), inv), 0.0), axis=0)
        lo = tl.where(mass >= 1.0, tau, lo)
        hi = tl.where(mass >= 1.0, hi, tau)
    y = tl.where(valid, _pow(tl.maximum(z - lo, 0.0), inv), 0.0)
    s = tl.sum(y, axis=0)
    tl.store(Y + row * d + offs, y / tl.where(s > 0, s, 1.0), mask=inb)


@triton.jit
def _pnorm_fwd(
    X, M, Y, ERR, P, d, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    gamma = tl.load(P)
    p = tl.load(P + 2)
    offs, inb, valid, z, n = _read_row(X, M, ERR, row, d, 1.0, tl.load(P + 1), HAS_MASK, BLOCK)
    q = 1.0 / (p - 1.0)
    lo = tl.sum(z * 0.0, axis=0) - gamma
    hi = lo + gamma
    for _ in range(ITERS):
        _search_step(True)
        tau = (lo + hi) * 0.5
        u = tl.where(valid, _pow(tl.maximum(z - tau, 0.0), q), 0.0)
        scale = tl.max(u, axis=0)
        un = u / tl.where(scale > 0, scale, 1.0)
        excess = tl.sum(un, axis=0) * _pow(scale, p - 1.0) - gamma * _pow(
            tl.sum(_pow(un, p), axis=0), (2.0 - p) / p
        )
        above = (excess >= 0) & (scale > 0)
        lo = tl.where(above, tau, lo)
        hi = tl.where(above, hi, tau)
    u = tl.where(valid, _pow(tl.maximum(z - lo, 0.0), q), 0.0)
    s = tl.sum(u, axis=0)
    tl.store(Y + row * d + offs, u / tl.where(s > 0, s, 1.0), mask=inb)


@triton.jit
def _fusedmax_fwd(
    X, M, Y, G, ERR, P, d, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr
):
    """P_simplex(prox_TV(v; lam)), v = (x - max) / gamma, with the prox's segment ids.

    The unmasked values are packed to the front of the row's slot of Y (the chain links
    consecutive unmasked positions); Condat's direct algorithm then runs on them as a
    sequential scalar loop, one transition of its state machine per iteration (as
    fused.prox_tv1d_rows_reference), writing each segment over the packed values it has
    consumed (those are never read again) and its ids into G. The prox is unpacked and
    projected on the simplex in registers.
    """
    row = tl.program_id(0).to(tl.int64)
    lam = tl.load(P + 2)
    offs, inb, valid, v, n = _read_row(
        X, M, ERR, row, d, tl.load(P), tl.load(P + 1), HAS_MASK, BLOCK
    )
    yrow = Y + row * d
    grow = G + row * d
    valid = valid.to(tl.int32) != 0  # a fresh bool tensor (the interpreter's store masks)
    n = tl.sum(valid.to(tl.int32), axis=0)  # 0 on an invalid row
    rank = tl.cumsum(valid.to(tl.int32), axis=0) - 1
    tl.store(yrow + rank, v, mask=valid)
    tl.debug_barrier()
    k = n * 0
    k0 = k
    kminus = k
    kplus = k
    segment = k
    first = tl.load(yrow, mask=n > 0, other=0.0)
    umin = lam
    umax = -lam
    vmin = first - lam
    vmax = first + lam
    done = (n == 0).to(tl.int32)
    while done == 0:
        at_end = k == n - 1
        step = k < n - 1
        nxt = tl.load(yrow + tl.minimum(k + 1, n - 1))
        umin_next = umin + (nxt - vmin)  # the C++ kernel's association: equal decisions
        umax_next = umax + (nxt - vmax)
        # end of the row: close a segment at kminus, at kplus, or the last one
        close_min = at_end & (umin < 0)
        close_max = at_end & (umin >= 0) & (umax > 0)
        close_last = at_end & (umin >= 0) & (umax <= 0)
        # inside the row: a negative jump, a positive jump, or extend
        jump_min = step & (umin_next < -lam)
        jump_max = step & (umin_next >= -lam) & (umax_next > lam)
        extend = step & (umin_next >= -lam) & (umax_next <= lam)
        vmin = tl.where(close_last, vmin + umin / (k - k0 + 1).to(vmin.dtype), vmin)
        emit_min = close_min | jump_min
        emit_max = close_max | jump_max
        emitting = emit_min | emit_max | close_last
        last = tl.where(emit_min, kminus, tl.where(emit_max, kplus, k))
        last = tl.where(emitting, tl.maximum(last, k0), k0 - 1)
        value = tl.where(emit_max, vmax, vmin)
        for j in range(k0, last + 1):
            tl.store(yrow + j, value)
            tl.store(grow + j, segment)
        segment += emitting.to(tl.int32)
        k0 = last + 1
        # rounding can make a closing jump cover the last position: the row is done
        # (see prox_tv1d_row in csrc/row_algorithms.h)
        done = (close_last | (emitting & (k0 == n))).to(tl.int32)
        restart = emit_min | emit_max
        k = tl.where(restart, k0, tl.where(extend, k + 1, k))
        rv = tl.load(yrow + tl.minimum(k0, n - 1))
        kminus = tl.where(restart, k0, kminus)
        kplus = tl.where(restart, k0, kplus)
        # the closing jumps keep the other bound (shifted); the inner jumps reset both
        new_vmin = tl.where(emit_min, rv, tl.where(jump_max, rv - 2 * lam, vmin))
        new_vmax = tl.where(emit_max, rv, tl.where(jump_min, rv + 2 * lam, vmax))
        new_umin = tl.where(
            emit_min | jump_max,
            lam,
            tl.where(close_max, rv - lam - vmin, tl.where(extend, umin_next, umin)),
        )
        new_umax = tl.where(
            emit_max | jump_min,
            -lam,
            tl.where(close_min, rv + lam - vmax, tl.where(extend, umax_next, umax)),
        )
        vmin = new_vmin
        vmax = new_vmax
        umin = new_umin
        umax = new_umax
        # after extending: pull the tube's bounds in where they were crossed
        lower_hit = extend & (umin >= lam)
        kminus = tl.where(lower_hit, k, kminus)
        vmin = tl.where(lower_hit, vmin + (umin - lam) / (k - k0 + 1).to(vmin.dtype), vmin)
        umin = tl.where(lower_hit, lam, umin)
        upper_hit = extend & (umax <= -lam)
        kplus = tl.where(upper_hit, k, kplus)
        vmax = tl.where(upper_hit, vmax + (umax + lam) / (k - k0 + 1).to(vmax.dtype), vmax)
        umax = tl.where(upper_hit, -lam, umax)
    tl.debug_barrier()
    z = tl.load(yrow + rank, mask=valid, other=0.0)
    g = tl.load(grow + rank, mask=valid, other=-1)
    tl.debug_barrier()
    y = _project_simplex(z, valid, ITERS)
    tl.store(yrow + offs, y, mask=inb)
    tl.store(grow + offs, tl.where(valid, g, -1), mask=inb)


@triton.jit
def _oscarmax_fwd(
    X,
    M,
    Y,
    G,
    ERR,
    P,
    d,
    HAS_MASK: tl.constexpr,
    BLOCK: tl.constexpr,
    ITERS: tl.constexpr,
    LOG: tl.constexpr,
):
    """P_simplex(prox_P(v; lam)), v = (x - max) / gamma, with the prox's clusters on the
    support (-1 off it), as oscarmax_row in csrc/row_algorithms.h on the whole row.

    The stable decreasing order (ties by position, as the CPU kernel) is exact with ties:
    tl.sort of the values gives, by binary search, each value's count of strictly larger
    ones, c_i; tl.sort of the int32 keys c_i * BLOCK + i then lists the positions in order.
    Pool-adjacent-violators runs as a sequential scalar loop with its stack of blocks
    (sum, start) in the row's slots of Y and G (the stack never overtakes the values it
    reads).
    """
    row = tl.program_id(0).to(tl.int64)
    lam = tl.load(P + 2)
    offs, inb, valid, v, n = _read_row(
        X, M, ERR, row, d, tl.load(P), tl.load(P + 1), HAS_MASK, BLOCK
    )
    yrow = Y + row * d
    grow = G + row * d
    valid = valid.to(tl.int32) != 0  # a fresh bool tensor (the interpreter's store masks)
    n = tl.sum(valid.to(tl.int32), axis=0)  # 0 on an invalid row
    s = tl.sort(tl.where(valid, v, float("-inf")), descending=True)
    tl.store(yrow + offs, s, mask=offs < n)
    tl.debug_barrier()
    # c_i = #{j : v_j > v_i}, by binary search in the sorted values
    lo = offs * 0
    hi = lo + n
    for _ in range(LOG):
        act = (lo < hi) & valid
        mid = (lo + hi) // 2
        above = tl.load(yrow + mid, mask=act, other=0.0) > v
        lo = tl.where(act & above, mid + 1, lo)
        hi = tl.where(act & (~above), mid, hi)
    key = tl.where(valid, lo * BLOCK + offs, BLOCK * BLOCK + offs)
    perm = tl.sort(key) % BLOCK  # perm[r]: the position of rank r (r < n)
    ranked = offs < n
    a = s - lam * (n - 1 - offs).to(s.dtype)
    tl.debug_barrier()
    tl.store(yrow + offs, a, mask=ranked)
    tl.debug_barrier()
    # pool-adjacent-violators (pav_nonincreasing): stack of blocks, sum in Y, start in G
    top = n * 0 - 1
    for i in range(0, n):
        cur_sum = tl.load(yrow + i)
        cur_start = i + top * 0
        top += 1
        merge = top > 0
        while merge:
            prev_sum = tl.load(yrow + top - 1)
            prev_start = tl.load(grow + top - 1)
            len_top = (i + 1 - cur_start).to(cur_sum.dtype)
            len_prev = (cur_start - prev_start).to(cur_sum.dtype)
            violates = cur_sum * len_prev > prev_sum * len_top
            cur_sum = tl.where(violates, prev_sum + cur_sum, cur_sum)
            cur_start = tl.where(violates, prev_start, cur_start)
            top = tl.where(violates, top - 1, top)
            merge = violates & (top > 0)
        tl.store(yrow + top, cur_sum)
        tl.store(grow + top, cur_start)
        tl.debug_barrier()
    blocks = top + 1
    # the block of rank r: #{b : start_b <= r} - 1
    lo = offs * 0
    hi = lo + blocks
    for _ in range(LOG):
        act = (lo < hi) & ranked
        mid = (lo + hi) // 2
        le = tl.load(grow + mid, mask=act, other=0) <= offs
        lo = tl.where(act & le, mid + 1, lo)
        hi = tl.where(act & (~le), mid, hi)
    b = tl.where(ranked, lo - 1, 0)
    start = tl.load(grow + b, mask=ranked, other=0)
    end = tl.where(
        b + 1 < blocks, tl.load(grow + b + 1, mask=ranked & (b + 1 < blocks), other=0), n
    )
    total = tl.load(yrow + b, mask=ranked, other=0.0)
    zr = total / tl.where(ranked, end - start, 1).to(total.dtype)
    tl.debug_barrier()
    tl.store(yrow + perm, zr, mask=ranked)
    tl.store(grow + perm, b, mask=ranked)
    tl.debug_barrier()
    z = tl.load(yrow + offs, mask=valid, other=0.0)
    g = tl.load(grow + offs, mask=valid, other=-1)
    tl.debug_barrier()
    y = _project_simplex(z, valid, ITERS)
    tl.store(yrow + offs, y, mask=inb)
    tl.store(grow + offs, tl.where(y > 0, g, -1), mask=inb)


@triton.jit
def _support_bwd(Y, G, OUT, A, d, WEIGHTED: tl.constexpr, BLOCK: tl.constexpr):
    """The product w (g - sum(w g) / sum(w)), w = [y > 0] or y^(2 - alpha) (alpha A[row])."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    inb = offs < d
    y = tl.load(Y + row * d + offs, mask=inb, other=0.0)
    g = tl.load(G + row * d + offs, mask=inb, other=0.0)
    if WEIGHTED:
        w = _pow(y, 2.0 - tl.load(A + row))
    else:
        w = tl.where(y > 0, 1.0, 0.0).to(y.dtype)
    sw = tl.sum(w, axis=0)
    c = tl.sum(w * g, axis=0) / tl.where(sw > 0, sw, 1.0)
    tl.store(OUT + row * d + offs, w * (g - c), mask=inb)


@triton.jit
def _pnorm_bwd(Y, G, OUT, P, d, BLOCK: tl.constexpr):
    """J v by Sherman-Morrison, as pnorm.sq_pnorm_max_jvp_reference."""
    row = tl.program_id(0).to(tl.int64)
    gamma = tl.load(P)
    p = tl.load(P + 2)
    offs = tl.arange(0, BLOCK)
    inb = offs < d
    y = tl.load(Y + row * d + offs, mask=inb, other=0.0)
    v = tl.load(G + row * d + offs, mask=inb, other=0.0)
    norm = _pow(tl.sum(_pow(y, p), axis=0), 1.0 / p)
    norm = tl.where(norm > 0, norm, 1.0)
    d_inv = _pow(y, 2.0 - p) / (gamma * (p - 1.0) * _pow(norm, 2.0 - p))
    w = _pow(y, p - 1.0) * (tl.sqrt(gamma * (2.0 - p)) * _pow(norm, 1.0 - p))
    d_inv_w = d_inv * w
    denom = 1.0 + tl.sum(w * d_inv_w, axis=0)
    mv = d_inv * v - d_inv_w * (tl.sum(d_inv * v * w, axis=0) / denom)
    m1 = d_inv - d_inv_w * (tl.sum(d_inv * w, axis=0) / denom)
    s1 = tl.sum(m1, axis=0)
    dtau = tl.sum(mv, axis=0) / tl.where(s1 != 0, s1, 1.0)
    tl.store(OUT + row * d + offs, mv - dtau * m1, mask=inb)


def _forward(kernel, x, mask, params, *extra, iters=True, codes=(NONFINITE, SPREAD)):
    rows, d, block, has_mask, m, n_iters = _setup(x, mask)
    y = torch.empty_like(x)
    err = torch.empty(rows, dtype=torch.int32, device=x.device)
    if rows == 0:
        return y
    kw = {"ITERS": n_iters} if iters else {}
    kernel[(rows,)](
        x,
        m,
        y,
        err,
        *extra,
        params,
        d,
        HAS_MASK=has_mask,
        BLOCK=block,
        num_warps=num_warps(block),
        **kw,
    )
    raise_flags(err, codes)
    return y


def softmax_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float) -> torch.Tensor:
    """softmax(x / gamma) of each (unshifted) row over its unmasked positions."""
    params = _params(x, gamma, _limit(x.dtype, gamma))
    return _forward(_softmax_fwd, x, mask, params, iters=False)


def sparsemax_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float) -> torch.Tensor:
    """P_simplex(x / gamma) of each (unshifted) row over its unmasked positions."""
    return _forward(_sparsemax_fwd, x, mask, _params(x, gamma, _limit(x.dtype, gamma)))


def entmax15_rows(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """1.5-entmax of each (unshifted) row over its unmasked positions."""
    return _forward(_entmax15_fwd, x, mask, _params(x, 2.0, _limit(x.dtype, 1.0)))


def entmax_rows(x: torch.Tensor, mask: torch.Tensor | None, alpha: torch.Tensor) -> torch.Tensor:
    """alpha-entmax of each (unshifted) row, alpha (rows, 1); alpha <= 1 or NaN is flagged."""
    a = alpha.reshape(-1).to(x.dtype).contiguous()
    return _forward(
        _entmax_fwd,
        x,
        mask,
        _params(x, 1.0, _limit(x.dtype, 1.0)),
        a,
        codes=(NONFINITE, SPREAD, BAD_ALPHA),
    )


def sq_pnorm_max_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float, p: float):
    """sq-pnorm-max of each (unshifted) row over its unmasked positions."""
    return _forward(_pnorm_fwd, x, mask, _params(x, gamma, _limit(x.dtype, 1.0), p))


def _grouped_forward(kernel, x, mask, gamma, lam, **kw):
    rows, d, block, has_mask, m, n_iters = _setup(x, mask)
    y = torch.empty_like(x)
    group = torch.empty(rows, d, dtype=torch.int32, device=x.device)
    err = torch.empty(rows, dtype=torch.int32, device=x.device)
    if rows == 0:
        return y, group
    params = _params(x, gamma, _limit(x.dtype, gamma), lam)
    kernel[(rows,)](
        x,
        m,
        y,
        group,
        err,
        params,
        d,
        HAS_MASK=has_mask,
        BLOCK=block,
        ITERS=n_iters,
        num_warps=num_warps(block),
        **kw,
    )
    raise_flags(err)
    return y, group


def fusedmax_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float, lam: float):
    """(y, segment) for each (unshifted) row: y = P_simplex(prox_TV(x / gamma; lam)) over the
    unmasked positions, segment the prox's fused runs (int32, -1 at masked positions).
    """
    return _grouped_forward(_fusedmax_fwd, x, mask, gamma, lam)


def oscarmax_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float, lam: float):
    """(y, cluster) for each (unshifted) row: y = P_simplex(prox_P(x / gamma; lam)) over the
    unmasked positions, cluster the prox's pooled blocks on the support of y (int32, -1 off
    it).
    """
    block = max(triton.next_power_of_2(x.shape[1]), 16)
    return _grouped_forward(_oscarmax_fwd, x, mask, gamma, lam, LOG=block.bit_length())


def support_vjp(y: torch.Tensor, grad: torch.Tensor, alpha=2.0) -> torch.Tensor:
    """The support Jacobian (alpha = 2: weights 1; else y^(2-alpha), alpha a number or a
    (rows, 1) tensor) times grad, per row.
    """
    rows, d = y.shape
    out = torch.empty_like(y)
    if rows == 0:
        return out
    weighted = isinstance(alpha, torch.Tensor) or alpha != 2
    if isinstance(alpha, torch.Tensor):
        a = alpha.reshape(-1).to(y.dtype).contiguous()
    else:
        a = torch.full((rows,), float(alpha), dtype=y.dtype, device=y.device)
    block = max(triton.next_power_of_2(d), 16)
    _support_bwd[(rows,)](
        y, grad.contiguous(), out, a, d, WEIGHTED=weighted, BLOCK=block, num_warps=num_warps(block)
    )
    return out


def sq_pnorm_max_jvp(y: torch.Tensor, v: torch.Tensor, gamma: float, p: float) -> torch.Tensor:
    """J v for y = sq_pnorm_max(x), per row (J symmetric)."""
    rows, d = y.shape
    out = torch.empty_like(y)
    if rows == 0:
        return out
    block = max(triton.next_power_of_2(d), 16)
    params = _params(y, gamma, 0.0, p)
    _pnorm_bwd[(rows,)](y, v.contiguous(), out, params, d, BLOCK=block, num_warps=num_warps(block))
    return out
