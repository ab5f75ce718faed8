"""Triton kernels for the mappings: each row loaded once into one block, several rows per
program for short rows.

Imported lazily by `_kernels.triton_kernels()` (never at `import regattn.mappings`), so a
missing triton costs nothing until a CUDA tensor (or `backend("triton")`) needs it. Under
TRITON_INTERPRET=1 (set before triton is imported) the same kernels run on CPU tensors in
Triton's interpreter, which is how the tests check them on machines with no GPU.

Every kernel reads its rows of the contiguous (rows, d) float32/float64 scores (half
precision is converted by `_rows.to_rows` first) with their bool mask (True = may attend)
once, as a (ROWS, BLOCK) tile in registers (BLOCK the next power of two >= d, at most 4096;
ROWS = 1024 // BLOCK rows per program at BLOCK <= 128, else 1), shifts each row to a
maximum of 0 over its unmasked positions, and validates it: a NaN or an infinite unmasked
score, or a spread (max - min) / gamma that overflows, writes an error code for the row
into a flag tensor and gives the row zeros. The check costs one reduction, folded into
softmax's sum (see `_read_rows`). The flags are raised without a host-device
synchronization (`torch._assert_async`) or, under `_sync.sync_checks()`, read on the host
and raised as the ValueError of the other backends. A row with no unmasked position gets
zeros (and zero gradient); `to_rows` asserts (asynchronously) that there is none when
empty="error". A -inf score is a masked position (see `_read_rows`).

Algorithms (exact to the dtype's resolution, as the CPU kernels). The threshold searches
run on the row in registers, every row of a program in lockstep until all have ended; each
step is one to four reductions over the row, and `_safeguard` bounds them: pure Newton
(Halley) steps for NEWTON_STEPS, then every other step a bisection, and a bisection
wherever Newton leaves the bracket, so a search ends within NEWTON_STEPS + 2 (ITERS + 2)
steps (ITERS = 29 in float32, 58 in float64). results/bench/row_kernel_passes.md counts
the steps taken on the tests' inputs.

* softmax: max, then exp and the sum: two reductions.
* sparsemax: Newton's step on sum_S (z - tau) - 1 is Michelot's tau_S = (sum_S z - 1) / |S|
  from tau in [-1, -1/d], exact once no value of S lies below it (`_simplex_threshold`).
* 1.5-entmax: from tau in [-1, -1/sqrt(d)], the closed form mean_S - sqrt(1/|S| - var_S),
  exact where it lies below S, else a Newton step (as entmax15_row on the CPU).
* alpha-entmax (alpha per row, a tensor): Halley steps on ||(z - tau)_+||_q - 1 from tau in
  [-1, -d^(1-alpha)] (as EntmaxThresholdSearch on the CPU), and the normalization
  y / sum(y).
* sq-pnorm-max: Halley steps on the log KKT condition from tau in [-gamma, 0] (as
  sq_pnorm_max_row on the CPU), and the normalization.
* fusedmax: the unmasked values packed, Condat's direct TV algorithm as a sequential scalar
  loop (one state transition per iteration, as fused.prox_tv1d_rows_reference), then the
  sparsemax projection; int32 segment ids (-1 at masked positions). One row per program.
* oscarmax: the stable decreasing order by tl.sort (values, then exact int32 keys
  rank-of-value * BLOCK + position), the weights subtracted, pool-adjacent-violators as a
  sequential scalar loop, then the sparsemax projection; int32 cluster ids on the support
  (-1 off it). Both keep their scratch in the row's slots of the outputs. One row per
  program.
* backward: the support Jacobian (weights 1 or y^(2-alpha)) and Sherman-Morrison for
  sq-pnorm-max, rows per program as the forward; dalpha, softmax's backward and the
  grouped mappings' group means in torch ops.
"""

from __future__ import annotations

from typing import NamedTuple

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


# Short rows share a program: at BLOCK <= MULTI_ROW_MAX_BLOCK a program holds
# PROGRAM_ELEMENTS // BLOCK rows (8 at 128, 32 at 32), so that a program has as many lanes as
# one row of 1024 and the launch fewer programs than rows
MULTI_ROW_MAX_BLOCK = 128
PROGRAM_ELEMENTS = 1024
# The threshold searches take pure Newton (Halley) steps first, then alternate them with
# bisection (see _safeguard): 12 covers the usual climbs (sparsemax's and 1.5-entmax's steps
# on N(0, s^2) rows, s = 0.5 to 10, d up to 4096, simulated in numpy: at most 9; on the pass
# table's rows, results/bench/row_kernel_passes.md: at most 5)
NEWTON_STEPS = 12


class _Layout(NamedTuple):
    """How a (rows, d) launch is laid out: `block` lanes per row (a power of two >= d),
    `rows_per_program` rows per program, `grid`, and the launch's constants.
    """

    rows: int
    d: int
    block: int
    rows_per_program: int
    grid: tuple
    has_mask: bool
    mask: torch.Tensor
    iters: int  # bisection steps to the dtype's resolution from a unit bracket
    eps: float

    def constants(self) -> dict:
        """The search kernels' constexpr arguments and their warps."""
        return {
            "HAS_MASK": self.has_mask,
            "ROWS": self.rows_per_program,
            "BLOCK": self.block,
            "MAX_STEPS": NEWTON_STEPS + 2 * (self.iters + 2),
            "NEWTON": NEWTON_STEPS,
            "EPS": self.eps,
            "num_warps": num_warps(self.block * self.rows_per_program),
        }


def _layout(x: torch.Tensor, mask: torch.Tensor | None = None) -> _Layout:
    rows, d = x.shape
    block = max(triton.next_power_of_2(d), 16)
    per_program = PROGRAM_ELEMENTS // block if block <= MULTI_ROW_MAX_BLOCK else 1
    return _Layout(
        rows,
        d,
        block,
        per_program,
        (triton.cdiv(rows, per_program),),
        mask is not None,
        mask.view(torch.uint8) if mask is not None else x,
        29 if x.dtype == torch.float32 else 58,
        torch.finfo(x.dtype).eps,
    )


def num_warps(elements: int) -> int:
    """Warps per program of `elements` lanes (rows x BLOCK): up to 16 positions per thread
    before a second warp.

    Each search step reduces over the row (tl.sum); within one warp that is a few register
    shuffles, across warps a shared-memory round trip with barriers. The bisection kernels
    were bound by those reductions, not by memory (ncu on an H200 at 1M rows x 128:
    sparsemax's forward at 78% of the SMs' throughput and 2% of DRAM's with Triton's default 4
    warps), so a program takes one warp up to 512 lanes, 2 for 1024, 4 for 2048, 8 for 4096
    (not tuned for the Newton kernels: that needs a GPU).
    """
    return min(max(elements // 512, 1), 8)


@triton.jit
def _pow(v, e):
    """The power v ** e for v >= 0 (0 ** e = 0, e > 0)."""
    return tl.where(v > 0, tl.exp(tl.log(tl.where(v > 0, v, 1.0)) * e), 0.0)


@triton.jit
def _search_step(bisected):
    """Marks one step of a threshold search; `bisected` is True for the rows whose step was a
    bisection. It compiles to nothing: the interpreter run of ``python -m regattn_bench
    kernel-passes`` replaces it to count the steps (regattn_bench.kernel_passes).
    """
    pass


@triton.jit
def _read_rows(
    X,
    M,
    first,
    rows,
    d,
    gamma,
    HAS_MASK: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Loads rows first .. first + ROWS - 1 (those < rows) as a (ROWS, BLOCK) tile, once, and
    returns (r, offs, inb, x, valid, z): r (ROWS, 1) the row indices, offs (1, BLOCK), inb the
    tile's lanes inside the rows, x the scores, valid the unmasked lanes that are not -inf
    (a -inf score is a masked position, mappings._rows.neg_inf_masked; NaN stays valid), and
    z = (x - max) / gamma on them, 0 elsewhere.

    One reduction (the max). The row is fine exactly where z is finite on every valid lane: a
    NaN or +inf score makes z NaN, a spread (max - min) / gamma that overflows makes it -inf
    (csrc's max_spread, to rounding); the callers fold that test into their first sum and
    flag the rows with `_flag_rows`.
    """
    r = first + tl.arange(0, ROWS)[:, None]
    offs = tl.arange(0, BLOCK)[None, :]
    inb = (r < rows) & (offs < d)
    x = tl.load(X + r * d + offs, mask=inb, other=0.0)
    valid = inb & (x != float("-inf"))
    if HAS_MASK:
        valid = valid & (tl.load(M + r * d + offs, mask=inb, other=0) != 0)
    hi = tl.max(tl.where(valid, x, float("-inf")), axis=1, keep_dims=True)
    z = tl.where(valid, (x - tl.where(hi > float("-inf"), hi, 0.0)) / gamma, 0.0)
    return r, offs, inb, x, valid, z


@triton.jit
def _flag_rows(ERR, r, rows, x, valid, broken, code):
    """Writes each row's error code to ERR and returns `valid` cleared on the flagged rows.
    `broken` (ROWS, 1) marks the rows with a non-finite z (see _read_rows): NONFINITE where a
    valid score is NaN or infinite, else SPREAD; other rows keep `code` (0, or BAD_ALPHA).
    The scores are scanned again only when a row of the program is broken.
    """
    code = tl.where(broken, 2, code)
    if tl.max(code) > 0:
        nonfinite = tl.sum((valid & ((x - x) != 0)).to(tl.int32), axis=1, keep_dims=True)
        code = tl.where(broken & (nonfinite > 0), 1, code)
    tl.store(ERR + r, code, mask=r < rows)
    return valid & (code == 0)


@triton.jit
def _checked_rows(
    X,
    M,
    ERR,
    P,
    rows,
    d,
    HAS_MASK: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """_read_rows at gamma P[0] (the program's block of rows), flagged: (r, offs, inb, valid,
    z), valid all False on an invalid row. Two reductions: the max and the finiteness sum.
    """
    first = tl.program_id(0).to(tl.int64) * ROWS
    r, offs, inb, x, valid, z = _read_rows(X, M, first, rows, d, tl.load(P), HAS_MASK, ROWS, BLOCK)
    finite = tl.sum(tl.where(valid, z - z, 0.0), axis=1, keep_dims=True) == 0  # NaN: False
    valid = _flag_rows(ERR, r, rows, x, valid, ~finite, (r * 0).to(tl.int32))
    return r, offs, inb, valid, tl.where(valid, z, 0.0)


@triton.jit
def _safeguard(tau, above, newton, lo, hi, step, NEWTON: tl.constexpr):
    """One safeguarded step of a threshold search on a decreasing function with its root in
    [lo, hi]: the bracket narrowed by the sign at tau (`above`: the root is at or above tau)
    and the next point, `newton` (the Newton or Halley step) where it lies strictly inside
    the bracket, the bracket's midpoint where it does not (or is NaN) and, after the first
    NEWTON steps, at every other step, so that the bracket halves at least every second step
    from there. Returns (next, lo, hi, bisected).
    """
    lo = tl.where(above, tau, lo)
    hi = tl.where(above, hi, tau)
    forced = tl.where((step >= NEWTON) & ((step - NEWTON) % 2 == 0), 1.0, 0.0)
    bisect = ~((newton > lo) & (newton < hi)) | ((lo * 0.0 + forced) > 0)
    return tl.where(bisect, (lo + hi) * 0.5, newton), lo, hi, bisect


@triton.jit
def _simplex_threshold(
    z, valid, d, ROWS: tl.constexpr, MAX_STEPS: tl.constexpr, NEWTON: tl.constexpr
):
    """The threshold tau (ROWS, 1) of the simplex projection of each row of z over its valid
    lanes, their max 0: sum_i (z_i - tau)_+ = 1, with tau in [-1, -1/d] (y_max <= 1, and
    y_max >= 1/n >= 1/d).

    Newton's step from tau on F(tau) = sum_S (z - tau) - 1, S = {valid z > tau}, is Michelot's
    tau_S = (sum_S z - 1) / |S|; from below the root it stays below, and where no value of S
    lies below tau_S, S is the support and tau_S the exact threshold: the search ends there.
    Each step sums over the on-chip row (count, sum, min of S); _safeguard keeps the bracket
    and bisects where Newton leaves it (from above the root, or by rounding) and every other
    step after NEWTON, and a row whose bracket closes to float resolution first finishes with
    one Michelot step from its lower end.
    """
    lo = tl.zeros((ROWS, 1), z.dtype) - 1.0
    hi = lo + 1.0 - 1.0 / (lo * 0.0 + d)
    tau = lo
    done = lo != lo
    exact = done
    step = tl.program_id(0) * 0
    while (step < MAX_STEPS) & (tl.max(tl.where(done, 0, 1)) > 0):
        s = valid & (z > tau)
        k = tl.sum(s.to(z.dtype), axis=1, keep_dims=True)
        sz = tl.sum(tl.where(s, z, 0.0), axis=1, keep_dims=True)
        zmin = tl.min(tl.where(s, z, float("inf")), axis=1, keep_dims=True)
        newton = (sz - 1.0) / tl.where(k > 0, k, 1.0)
        above = sz - tau * k >= 1.0
        hit = above & (newton <= zmin) & (k > 0)
        nxt, lo, hi, bisected = _safeguard(tau, above, newton, lo, hi, step, NEWTON)
        stop = done | hit | (k == 0) | (nxt == tau)
        _search_step(bisected & ~stop)  # the rows that go on to the bisected point
        tau = tl.where(done, tau, tl.where(hit, newton, tl.where(stop, tau, nxt)))
        exact = exact | (hit & ~done) | (k == 0)
        done = stop
        step += 1
    if tl.max(tl.where(exact, 0, 1)) > 0:
        # S(lo) holds the support (F(lo) >= 0): tau_S is within float resolution of the root
        s = valid & (z > lo)
        k = tl.sum(s.to(z.dtype), axis=1, keep_dims=True)
        sz = tl.sum(tl.where(s, z, 0.0), axis=1, keep_dims=True)
        tau = tl.where(exact | (k == 0), tau, (sz - 1.0) / tl.where(k > 0, k, 1.0))
    return tau


@triton.jit
def _softmax_fwd(
    X, M, Y, ERR, P, rows, d, HAS_MASK: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr
):
    """softmax((x - max) / gamma), its checks in the one pass: exp(z) + (z - z) is exp(z)
    where z is finite and NaN where the row is broken (see _read_rows), so the normalizing sum
    tells the broken rows. Two reductions, the max and the sum.
    """
    first = tl.program_id(0).to(tl.int64) * ROWS
    r, offs, inb, x, valid, z = _read_rows(X, M, first, rows, d, tl.load(P), HAS_MASK, ROWS, BLOCK)
    e = tl.where(valid, tl.exp(z) + (z - z), 0.0)
    s = tl.sum(e, axis=1, keep_dims=True)
    valid = _flag_rows(ERR, r, rows, x, valid, s != s, (r * 0).to(tl.int32))
    y = tl.where(valid, e / tl.where(s > 0, s, 1.0), 0.0)
    tl.store(Y + r * d + offs, y, mask=inb)


@triton.jit
def _sparsemax_fwd(
    X,
    M,
    Y,
    ERR,
    P,
    rows,
    d,
    HAS_MASK: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    MAX_STEPS: tl.constexpr,
    NEWTON: tl.constexpr,
    EPS: tl.constexpr,
):
    r, offs, inb, valid, z = _checked_rows(X, M, ERR, P, rows, d, HAS_MASK, ROWS, BLOCK)
    tau = _simplex_threshold(z, valid, d, ROWS, MAX_STEPS, NEWTON)
    tl.store(Y + r * d + offs, tl.where(valid, tl.maximum(z - tau, 0.0), 0.0), mask=inb)


@triton.jit
def _entmax15_fwd(
    X,
    M,
    Y,
    ERR,
    P,
    rows,
    d,
    HAS_MASK: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    MAX_STEPS: tl.constexpr,
    NEWTON: tl.constexpr,
    EPS: tl.constexpr,
):
    """1.5-entmax: z = (x - max) / 2, y = (z - tau)_+^2, tau in [-1, -1/sqrt(d)], the root of
    the convex decreasing F(tau) = sum_S (z - tau)^2 - 1, S = {valid z > tau}.

    From tau, with d = z - tau on S: the quadratic sum_S (d - t)^2 = 1 has the closed-form
    root t = mean(d) - sqrt(1/|S| - var(d)); where tau is below the root and t is below every
    d, S is the support and tau + t the exact threshold (as entmax15_row in
    csrc/row_algorithms.h). Otherwise Newton's step tau + F / (2 sum d), safeguarded as in
    _simplex_threshold (F convex: from either side it lands below the root).
    """
    r, offs, inb, valid, z = _checked_rows(X, M, ERR, P, rows, d, HAS_MASK, ROWS, BLOCK)
    lo = tl.zeros((ROWS, 1), z.dtype) - 1.0
    hi = -1.0 / tl.sqrt(lo * 0.0 + d)
    tau = lo
    done = lo != lo
    exact = done
    step = tl.program_id(0) * 0
    while (step < MAX_STEPS) & (tl.max(tl.where(done, 0, 1)) > 0):
        s = valid & (z > tau)
        dev = tl.where(s, z - tau, 0.0)
        k = tl.sum(s.to(z.dtype), axis=1, keep_dims=True)
        s1 = tl.sum(dev, axis=1, keep_dims=True)
        s2 = tl.sum(dev * dev, axis=1, keep_dims=True)
        dmin = tl.min(tl.where(s, dev, float("inf")), axis=1, keep_dims=True)
        kk = tl.where(k > 0, k, 1.0)
        mean = s1 / kk
        delta = 1.0 / kk - (s2 / kk - mean * mean)
        t = mean - tl.sqrt(tl.maximum(delta, 0.0))
        above = s2 >= 1.0
        hit = above & (delta >= 0) & (t <= dmin) & (k > 0)
        newton = tau + (s2 - 1.0) / (2.0 * tl.where(s1 > 0, s1, 1.0))
        nxt, lo, hi, bisected = _safeguard(tau, above, newton, lo, hi, step, NEWTON)
        stop = done | hit | (k == 0) | (nxt == tau)
        _search_step(bisected & ~stop)  # the rows that go on to the bisected point
        tau = tl.where(done, tau, tl.where(hit, tau + t, tl.where(stop, tau, nxt)))
        exact = exact | (hit & ~done) | (k == 0)
        done = stop
        step += 1
    if tl.max(tl.where(exact, 0, 1)) > 0:
        # closed to float resolution: the closed form on S(lo), a superset of the support
        s = valid & (z > lo)
        dev = tl.where(s, z - lo, 0.0)
        kk = tl.maximum(tl.sum(s.to(z.dtype), axis=1, keep_dims=True), 1.0)
        mean = tl.sum(dev, axis=1, keep_dims=True) / kk
        var = tl.sum(dev * dev, axis=1, keep_dims=True) / kk - mean * mean
        tau = tl.where(exact, tau, lo + mean - tl.sqrt(tl.maximum(1.0 / kk - var, 0.0)))
    v = tl.where(valid, tl.maximum(z - tau, 0.0), 0.0)
    tl.store(Y + r * d + offs, v * v, mask=inb)


@triton.jit
def _entmax_fwd(
    X,
    M,
    Y,
    ERR,
    A,
    P,
    rows,
    d,
    HAS_MASK: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    MAX_STEPS: tl.constexpr,
    NEWTON: tl.constexpr,
    EPS: tl.constexpr,
):
    """alpha-entmax, alpha per row (A): z = (alpha - 1)(x - max), y = (z - tau)_+^q / sum,
    q = 1/(alpha - 1), tau in [-1, -d^(1 - alpha)] the root of F(tau) = ||(z - tau)_+||_q - 1.

    The search of EntmaxThresholdSearch (csrc/entmax_threshold.h): F is nearly linear, so
    Newton's method from the lower end climbs to the root in a few steps; Halley's step where
    its denominator is positive (it needs sum d^(q-2) too), Newton's elsewhere, safeguarded as
    in _simplex_threshold (alpha > 2 makes F concave: steps leave the bracket). A row ends
    where sum d^q is 1 to 8 q eps (F is known to a few ulps only); the output is normalized.
    """
    first = tl.program_id(0).to(tl.int64) * ROWS
    r, offs, inb, x, valid, z = _read_rows(X, M, first, rows, d, tl.load(P), HAS_MASK, ROWS, BLOCK)
    alpha = tl.load(A + r, mask=r < rows, other=2.0)
    good = alpha > 1.0  # False on NaN
    finite = tl.sum(tl.where(valid, z - z, 0.0), axis=1, keep_dims=True) == 0
    valid = _flag_rows(ERR, r, rows, x, valid, ~finite, tl.where(good, 0, 3).to(tl.int32))
    am1 = tl.where(good, alpha - 1.0, 1.0)
    q = 1.0 / am1
    z = tl.where(valid, z * am1, 0.0)
    lo = tl.zeros((ROWS, 1), z.dtype) - 1.0
    hi = -_pow(lo * 0.0 + d, -am1)
    tau = lo
    done = lo != lo
    step = tl.program_id(0) * 0
    while (step < MAX_STEPS) & (tl.max(tl.where(done, 0, 1)) > 0):
        s = valid & (z > tau)
        dev = tl.where(s, z - tau, 1.0)
        pw = tl.where(s, tl.exp(tl.log(dev) * (q - 1.0)), 0.0)  # d^(q-1)
        s_qm1 = tl.sum(pw, axis=1, keep_dims=True)
        s_qm2 = tl.sum(pw / dev, axis=1, keep_dims=True)
        s_q = tl.sum(pw * dev, axis=1, keep_dims=True)
        converged = tl.abs(s_q - 1.0) <= 8.0 * q * EPS
        norm = _pow(s_q, am1)
        f = norm - 1.0
        sq = tl.where(s_q > 0, s_q, 1.0)
        d1 = -s_qm1 * norm / sq
        d2 = (q - 1.0) * norm / sq * (s_qm2 - s_qm1 * s_qm1 / sq)
        halley = 2.0 * d1 * d1 - f * d2
        newton = tl.where(halley > 0, tau - 2.0 * f * d1 / halley, tau - f / d1)
        nxt, lo, hi, bisected = _safeguard(tau, f > 0, newton, lo, hi, step, NEWTON)
        stop = done | converged | (s_q == 0) | (nxt == tau)
        _search_step(bisected & ~stop)  # the rows that go on to the bisected point
        tau = tl.where(stop, tau, nxt)
        done = stop
        step += 1
    y = tl.where(valid, _pow(tl.maximum(z - tau, 0.0), q), 0.0)
    s = tl.sum(y, axis=1, keep_dims=True)
    tl.store(Y + r * d + offs, y / tl.where(s > 0, s, 1.0), mask=inb)


@triton.jit
def _pnorm_fwd(
    X,
    M,
    Y,
    ERR,
    P,
    rows,
    d,
    HAS_MASK: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    MAX_STEPS: tl.constexpr,
    NEWTON: tl.constexpr,
    EPS: tl.constexpr,
):
    """sq-pnorm-max (P: 1, gamma, p): on z = x - max, y = u / sum(u), u = (z - tau)_+^q,
    q = 1/(p-1), tau in [-gamma, 0) the root of phi(tau) = log A_q - (2-p)/p log A_{q+1} -
    log gamma, A_k = sum (z - tau)_+^k: sq_pnorm_max_row's search (csrc/row_algorithms.h),
    safeguarded Halley steps from the lower end (Newton where Halley's denominator is not
    positive), ending where |phi| <= 8 eps; safeguarded as in _simplex_threshold.
    """
    gamma = tl.load(P + 1)
    p = tl.load(P + 2)
    r, offs, inb, valid, z = _checked_rows(X, M, ERR, P, rows, d, HAS_MASK, ROWS, BLOCK)
    q = 1.0 / (p - 1.0)
    c = (2.0 - p) / p
    rq = q * (2.0 - p)
    log_gamma = tl.log(gamma)
    lo = tl.zeros((ROWS, 1), z.dtype) - gamma
    hi = lo * 0.0
    tau = lo
    done = lo != lo
    step = tl.program_id(0) * 0
    while (step < MAX_STEPS) & (tl.max(tl.where(done, 0, 1)) > 0):
        s = valid & (z > tau)
        dev = tl.where(s, z - tau, 1.0)
        pw = tl.where(s, tl.exp(tl.log(dev) * (q - 1.0)), 0.0)  # d^(q-1)
        a_qm2 = tl.sum(pw / dev, axis=1, keep_dims=True)
        a_qm1 = tl.sum(pw, axis=1, keep_dims=True)
        a_q = tl.sum(pw * dev, axis=1, keep_dims=True)
        a_qp1 = tl.sum(pw * dev * dev, axis=1, keep_dims=True)
        empty = a_q == 0
        a_q = tl.where(empty, 1.0, a_q)
        a_qp1 = tl.where(empty, 1.0, a_qp1)
        phi = tl.log(a_q) - c * tl.log(a_qp1) - log_gamma
        converged = tl.abs(phi) <= 8.0 * EPS
        # with A_k' = -k A_{k-1}: phi' = -q u + r v, u = A_{q-1} / A_q, v = A_q / A_{q+1}
        u = a_qm1 / a_q
        v = a_q / a_qp1
        dphi = -q * u + rq * v
        du = (q * a_qm1 * a_qm1 - (q - 1.0) * a_qm2 * a_q) / (a_q * a_q)
        dv = ((q + 1.0) * a_q * a_q - q * a_qm1 * a_qp1) / (a_qp1 * a_qp1)
        halley = 2.0 * dphi * dphi - phi * (-q * du + rq * dv)
        newton = tl.where(halley > 0, tau - 2.0 * phi * dphi / halley, tau - phi / dphi)
        # a step where phi does not decrease is no step: lo is outside the open bracket
        newton = tl.where(dphi < 0, newton, lo)
        nxt, lo, hi, bisected = _safeguard(tau, phi > 0, newton, lo, hi, step, NEWTON)
        stop = done | converged | empty | (nxt == tau) | ~(hi > lo)
        _search_step(bisected & ~stop)  # the rows that go on to the bisected point
        tau = tl.where(stop, tau, nxt)
        done = stop
        step += 1
    u = tl.where(valid, _pow(tl.maximum(z - tau, 0.0), q), 0.0)
    s = tl.sum(u, axis=1, keep_dims=True)
    tl.store(Y + r * d + offs, u / tl.where(s > 0, s, 1.0), mask=inb)


@triton.jit
def _read_row(X, M, ERR, P, rows, d, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """_checked_rows with one row per program, as 1-D tensors (offs, inb, valid, z): the
    grouped kernels, whose scalar loops walk one row.
    """
    r, offs, inb, valid, z = _checked_rows(X, M, ERR, P, rows, d, HAS_MASK, 1, BLOCK)
    return (
        tl.reshape(offs, (BLOCK,)),
        tl.reshape(inb, (BLOCK,)),
        tl.reshape(valid, (BLOCK,)),
        tl.reshape(z, (BLOCK,)),
    )


@triton.jit
def _project_simplex(z, valid, d, MAX_STEPS: tl.constexpr, NEWTON: tl.constexpr):
    """P_simplex(z) of one row (1-D) over its valid positions, 0 elsewhere: the threshold of
    z - max(z) by _simplex_threshold.
    """
    top = tl.max(tl.where(valid, z, float("-inf")), axis=0)
    zs = tl.where(valid, z - tl.where(top > float("-inf"), top, 0.0), 0.0)
    tau = _simplex_threshold(zs[None, :], valid[None, :], d, 1, MAX_STEPS, NEWTON)
    return tl.where(valid, tl.maximum(zs - tl.reshape(tau, (1,)), 0.0), 0.0)


@triton.jit
def _fusedmax_fwd(
    X,
    M,
    Y,
    G,
    ERR,
    P,
    rows,
    d,
    HAS_MASK: tl.constexpr,
    BLOCK: tl.constexpr,
    MAX_STEPS: tl.constexpr,
    NEWTON: tl.constexpr,
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
    lam = tl.load(P + 1)
    offs, inb, valid, v = _read_row(X, M, ERR, P, rows, d, HAS_MASK, BLOCK)
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
    y = _project_simplex(z, valid, d, MAX_STEPS, NEWTON)
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
    rows,
    d,
    HAS_MASK: tl.constexpr,
    BLOCK: tl.constexpr,
    MAX_STEPS: tl.constexpr,
    NEWTON: tl.constexpr,
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
    lam = tl.load(P + 1)
    offs, inb, valid, v = _read_row(X, M, ERR, P, rows, d, HAS_MASK, BLOCK)
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
    y = _project_simplex(z, valid, d, MAX_STEPS, NEWTON)
    tl.store(yrow + offs, y, mask=inb)
    tl.store(grow + offs, tl.where(y > 0, g, -1), mask=inb)


@triton.jit
def _grad_rows(Y, G, rows, d, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """The program's block of rows of Y and G as (ROWS, BLOCK) tiles: (r, offs, inb, y, g)."""
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]
    offs = tl.arange(0, BLOCK)[None, :]
    inb = (r < rows) & (offs < d)
    y = tl.load(Y + r * d + offs, mask=inb, other=0.0)
    g = tl.load(G + r * d + offs, mask=inb, other=0.0)
    return r, offs, inb, y, g


@triton.jit
def _support_bwd(
    Y, G, OUT, A, rows, d, WEIGHTED: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr
):
    """The product w (g - sum(w g) / sum(w)), w = [y > 0] or y^(2 - alpha) (alpha A[row])."""
    r, offs, inb, y, g = _grad_rows(Y, G, rows, d, ROWS, BLOCK)
    if WEIGHTED:
        w = _pow(y, 2.0 - tl.load(A + r, mask=r < rows, other=2.0))
    else:
        w = tl.where(y > 0, 1.0, 0.0).to(y.dtype)
    sw = tl.sum(w, axis=1, keep_dims=True)
    c = tl.sum(w * g, axis=1, keep_dims=True) / tl.where(sw > 0, sw, 1.0)
    tl.store(OUT + r * d + offs, w * (g - c), mask=inb)


@triton.jit
def _pnorm_bwd(Y, G, OUT, P, rows, d, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """J v by Sherman-Morrison, as pnorm.sq_pnorm_max_jvp_reference (P: gamma, p)."""
    gamma = tl.load(P)
    p = tl.load(P + 1)
    r, offs, inb, y, v = _grad_rows(Y, G, rows, d, ROWS, BLOCK)
    norm = _pow(tl.sum(_pow(y, p), axis=1, keep_dims=True), 1.0 / p)
    norm = tl.where(norm > 0, norm, 1.0)
    d_inv = _pow(y, 2.0 - p) / (gamma * (p - 1.0) * _pow(norm, 2.0 - p))
    w = _pow(y, p - 1.0) * (tl.sqrt(gamma * (2.0 - p)) * _pow(norm, 1.0 - p))
    d_inv_w = d_inv * w
    denom = 1.0 + tl.sum(w * d_inv_w, axis=1, keep_dims=True)
    mv = d_inv * v - d_inv_w * (tl.sum(d_inv * v * w, axis=1, keep_dims=True) / denom)
    m1 = d_inv - d_inv_w * (tl.sum(d_inv * w, axis=1, keep_dims=True) / denom)
    s1 = tl.sum(m1, axis=1, keep_dims=True)
    dtau = tl.sum(mv, axis=1, keep_dims=True) / tl.where(s1 != 0, s1, 1.0)
    tl.store(OUT + r * d + offs, mv - dtau * m1, mask=inb)


@triton.jit
def _segment_sum(a_sum, a_group, b_sum, b_group):
    """The scan's combine for sums within runs of equal group ids (a before b)."""
    return tl.where(a_group == b_group, a_sum + b_sum, b_sum), b_group


@triton.jit
def _run_last(a_value, a_group, b_value, b_group):
    """The reverse scan's combine (a: the elements after b) that gives each element the
    value of the last element of its run of equal group ids.
    """
    return tl.where(a_group == b_group, a_value, b_value), b_group


@triton.jit
def _grouped_support_bwd(Y, G, GROUP, OUT, rows, d, BLOCK: tl.constexpr):
    """The support Jacobian (weights [y > 0]) times g, then averaged within each group of
    GROUP (int32 ids in [0, d), -1 outside any group: 0 there), one row per program, with no
    atomics: the positions sorted by (group, position) with tl.sort, the product read back in
    that order from the row's slot of OUT, sums and counts by segmented scans over the runs
    of equal ids, each run's total passed to its members by a reverse scan, and the means
    stored back at their positions.
    """
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    inb = offs < d
    y = tl.load(Y + row * d + offs, mask=inb, other=0.0)
    g = tl.load(G + row * d + offs, mask=inb, other=0.0)
    group = tl.load(GROUP + row * d + offs, mask=inb, other=-1)
    w = tl.where(y > 0, 1.0, 0.0).to(y.dtype)
    sw = tl.sum(w, axis=0)
    out = w * (g - tl.sum(w * g, axis=0) / tl.where(sw > 0, sw, 1.0))
    tl.store(OUT + row * d + offs, out, mask=inb)
    tl.debug_barrier()
    # ids outside any group (and lanes past d) sort last, as id BLOCK
    key = tl.where(inb & (group >= 0), group, BLOCK) * BLOCK + offs
    ordered = tl.sort(key)
    perm = ordered % BLOCK
    run = ordered // BLOCK
    inside = run < BLOCK
    v = tl.load(OUT + row * d + perm, mask=inside, other=0.0)
    total, _ = tl.associative_scan((v, run), 0, _segment_sum)
    count, _ = tl.associative_scan((inside.to(v.dtype), run), 0, _segment_sum)
    total, _ = tl.associative_scan((total, run), 0, _run_last, reverse=True)
    count, _ = tl.associative_scan((count, run), 0, _run_last, reverse=True)
    mean = tl.where(inside, total / tl.where(count > 0, count, 1.0), 0.0)
    tl.debug_barrier()
    tl.store(OUT + row * d + perm, mean, mask=perm < d)


def _forward(kernel, x, mask, params, *extra, codes=(NONFINITE, SPREAD), search=True):
    layout = _layout(x, mask)
    y = torch.empty_like(x)
    err = torch.empty(layout.rows, dtype=torch.int32, device=x.device)
    if layout.rows == 0:
        return y
    constants = layout.constants()
    if not search:
        constants = {k: constants[k] for k in ("HAS_MASK", "ROWS", "BLOCK", "num_warps")}
    kernel[layout.grid](x, layout.mask, y, err, *extra, params, layout.rows, layout.d, **constants)
    raise_flags(err, codes)
    return y


def softmax_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float) -> torch.Tensor:
    """softmax(x / gamma) of each (unshifted) row over its unmasked positions."""
    return _forward(_softmax_fwd, x, mask, _params(x, gamma), search=False)


def sparsemax_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float) -> torch.Tensor:
    """P_simplex(x / gamma) of each (unshifted) row over its unmasked positions."""
    return _forward(_sparsemax_fwd, x, mask, _params(x, gamma))


def entmax15_rows(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """1.5-entmax of each (unshifted) row over its unmasked positions."""
    return _forward(_entmax15_fwd, x, mask, _params(x, 2.0))


def entmax_rows(x: torch.Tensor, mask: torch.Tensor | None, alpha: torch.Tensor) -> torch.Tensor:
    """alpha-entmax of each (unshifted) row, alpha (rows, 1); alpha <= 1 or NaN is flagged."""
    a = alpha.reshape(-1).to(x.dtype).contiguous()
    return _forward(_entmax_fwd, x, mask, _params(x, 1.0), a, codes=(NONFINITE, SPREAD, BAD_ALPHA))


def sq_pnorm_max_rows(x: torch.Tensor, mask: torch.Tensor | None, gamma: float, p: float):
    """sq-pnorm-max of each (unshifted) row over its unmasked positions."""
    return _forward(_pnorm_fwd, x, mask, _params(x, 1.0, gamma, p))


def _grouped_forward(kernel, x, mask, gamma, lam, **kw):
    layout = _layout(x, mask)
    y = torch.empty_like(x)
    group = torch.empty(layout.rows, layout.d, dtype=torch.int32, device=x.device)
    err = torch.empty(layout.rows, dtype=torch.int32, device=x.device)
    if layout.rows == 0:
        return y, group
    constants = layout.constants()
    kernel[(layout.rows,)](
        x,
        layout.mask,
        y,
        group,
        err,
        _params(x, gamma, lam),
        layout.rows,
        layout.d,
        HAS_MASK=layout.has_mask,
        BLOCK=layout.block,
        MAX_STEPS=constants["MAX_STEPS"],
        NEWTON=NEWTON_STEPS,
        num_warps=num_warps(layout.block),
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
    layout = _layout(y)
    out = torch.empty_like(y)
    if layout.rows == 0:
        return out
    weighted = isinstance(alpha, torch.Tensor) or alpha != 2
    if isinstance(alpha, torch.Tensor):
        a = alpha.reshape(-1).to(y.dtype).contiguous()
    else:
        a = torch.full((layout.rows,), float(alpha), dtype=y.dtype, device=y.device)
    _support_bwd[layout.grid](
        y,
        grad.contiguous(),
        out,
        a,
        layout.rows,
        layout.d,
        WEIGHTED=weighted,
        ROWS=layout.rows_per_program,
        BLOCK=layout.block,
        num_warps=num_warps(layout.block * layout.rows_per_program),
    )
    return out


def grouped_support_vjp(y: torch.Tensor, grad: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """The support Jacobian (weights 1) times grad, then averaged within each group of
    `group` ((rows, d) int32 ids, -1 outside any group: 0 there), per row: the backward of
    fusedmax and oscarmax (_backward.GroupedProjectionFunction).
    """
    layout = _layout(y)
    out = torch.empty_like(y)
    if layout.rows == 0:
        return out
    _grouped_support_bwd[(layout.rows,)](
        y,
        grad.contiguous(),
        group.to(torch.int32).contiguous(),
        out,
        layout.rows,
        layout.d,
        BLOCK=layout.block,
        num_warps=num_warps(layout.block),
    )
    return out


def sq_pnorm_max_jvp(y: torch.Tensor, v: torch.Tensor, gamma: float, p: float) -> torch.Tensor:
    """J v for y = sq_pnorm_max(x), per row (J symmetric)."""
    layout = _layout(y)
    out = torch.empty_like(y)
    if layout.rows == 0:
        return out
    _pnorm_bwd[layout.grid](
        y,
        v.contiguous(),
        out,
        _params(y, gamma, p),
        layout.rows,
        layout.d,
        ROWS=layout.rows_per_program,
        BLOCK=layout.block,
        num_warps=num_warps(layout.block * layout.rows_per_program),
    )
    return out
