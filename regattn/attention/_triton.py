"""Triton kernels of the fused sparse attention: flash-style, no (queries x keys) matrix.

Imported lazily by `regattn.attention` (never at `import regattn`). Under TRITON_INTERPRET=1
(set before triton is imported) the kernels run on CPU tensors in Triton's interpreter, which
is how the tests check them without a GPU.

The mapping of a query row, alpha-entmax with alpha in (1, 2] (alpha = 2: sparsemax), in the
units z = (alpha - 1) s of the scores s = scale q.k, with p = 1 / (alpha - 1):

    y_j = (z_j - tau)_+^p / M,   tau such that M = sum_j (z_j - tau)_+^p = 1.

One program holds BLOCK_M query rows and sweeps the key blocks (the scores of a block are
recomputed by a tl.dot in every sweep, never stored):

1. the row max m of z over the allowed keys and their count n (and a flag for a non-finite
   score); then tau - m = t lies in [-1, -n^(1-alpha)];
2. safeguarded Newton steps on h(t) = ||(z - m - t)_+||_p - 1, one sweep each, from t = -1.
   h is convex and decreasing (a p-norm, p >= 1, of a convex decreasing vector), so Newton
   from the left never overshoots and is exact in one step whenever the support is one block
   of equal scores; for p = 1 it is Michelot's algorithm (sparsemax's exact finish on the
   support), for p = 2 the finish is exact to rounding in two or three steps once the
   support is found. Each step keeps the bracket [lo, hi] (h(lo) >= 0 > h(hi)) and bisects
   when a step leaves it (rounding). A row stops when its step is below TOL; the program
   stops when all its rows have (at most MAX_STEPS sweeps);
3. one sweep accumulating, in float32, O = sum_j y_j v_j (normalized by the mass M at the
   final tau), W = sum_j g_j v_j / sum_j g_j with g = y^(2 - alpha) (the backward's weights),
   and, when alpha needs a gradient, L = sum_j y_j log y_j v_j and H = sum_j y_j log y_j.

The backward (the Jacobian of entmax is diag(g) - g g^T / sum g) needs per row
delta = dO.W (computed by the caller), and recomputes y and g from the saved (m, t, M):

    ds_ij = g_ij (dO_i.v_j - delta_i),   dq = scale ds k,  dk = scale ds^T q,  dv = y^T dO,

in two kernels without atomics: one program per query block for dq (sweeping the keys), one
per key block and KV head for dk and dv (sweeping the query blocks of every query head that
shares the KV head: GQA). Every kernel computes the scores of a (query block, key block)
pair with the same tl.dot of the same tile shapes, so the backward sees the supports the
forward found.

Layouts: every per-token tensor (q, k, v, outputs) is addressed by strides (batch, head,
position, feature), with the position offset by the sequence's start in `cu_seqlens` when
VARLEN (packed sequences: batch stride 0). The mask (bool, as uint8) is expanded to
(batch, query heads, queries, keys) with zero strides where it broadcasts; causal is
top-left (key j is allowed for query i when j <= i), as scaled_dot_product_attention's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from regattn.mappings import _triton as mapping_kernels

# the codes of the per-row flags (0: fine)
NONFINITE = 1
BAD_ALPHA = 2
MESSAGES = {
    NONFINITE: (
        "the attention scores q.k * scale contain NaN or infinite values at allowed positions "
        "(check q and k for NaN/inf, or overflow in float16)"
    ),
    BAD_ALPHA: "alpha must be in (1, 2] for every head (alpha = 2 is sparsemax)",
}

SPARSEMAX, ENTMAX15, ENTMAX = 0, 1, 2
DOT_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}
# Newton sweeps at most; a row stops when its step is below TOL (t lies in [-1, 0], where
# float32's spacing is at most 1.2e-7)
MAX_STEPS = 32
TOL = 1e-7


def raise_flags(err) -> None:
    """Raises the errors flagged in `err` (int32 codes per query row), as the mappings' Triton
    kernels do: asynchronously, or as ValueError under `regattn.mappings.sync_checks()`.
    """
    mapping_kernels.raise_flags(err, (NONFINITE, BAD_ALPHA), MESSAGES)


@triton.jit
def _pow(v, e):
    """The power v ** e for v >= 0, with 0 ** e = 0 for every e (the support weights need it at
    e = 0).
    """
    return tl.where(v > 0, tl.exp(tl.log(tl.where(v > 0, v, 1.0)) * e), 0.0)


@triton.jit
def _dot(a, b, DOT: tl.constexpr, PRECISION: tl.constexpr):
    """The product a @ b in float32 with both operands rounded to DOT (the inputs' dtype), as flash
    attention multiplies. PRECISION "upcast": the rounded operands multiplied in float32
    (Triton's interpreter gets tl.dot of bfloat16 wrong); else tl.dot's input_precision.
    """
    a = a.to(DOT)
    b = b.to(DOT)
    if PRECISION == "upcast":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _head_alpha(A, h, KIND: tl.constexpr):
    """(alpha - 1, p = 1 / (alpha - 1)) of query head h; alpha from A for KIND == ENTMAX."""
    if KIND == 0:
        am1 = 1.0
    elif KIND == 1:
        am1 = 0.5
    else:
        am1 = tl.load(A + h).to(tl.float32) - 1.0
    return am1, 1.0 / am1


@triton.jit
def _scores(
    q,
    K,
    M,
    i_pos,
    row_ok,
    start_n,
    k_len,
    skn,
    skd,
    smm,
    smn,
    zscale,
    D,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
    DOT: tl.constexpr,
):
    """The scores z = zscale * q k^T of a (BLOCK_M, BLOCK_N) tile, and which pairs are allowed.

    K and M point at the key block's sequence (position 0) and the mask's (batch, head).
    """
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kt = tl.load(
        K + offs_n[None, :] * skn + offs_d[:, None] * skd,
        mask=(offs_n[None, :] < k_len) & (offs_d[:, None] < D),
        other=0.0,
    )
    z = _dot(q, kt, DOT, PRECISION) * zscale
    allowed = row_ok[:, None] & (offs_n[None, :] < k_len)
    if CAUSAL:
        allowed = allowed & (offs_n[None, :] <= i_pos[:, None])
    if HAS_MASK:
        keep = tl.load(M + i_pos[:, None] * smm + offs_n[None, :] * smn, mask=allowed, other=0)
        allowed = allowed & (keep != 0)
    return z, allowed


@triton.jit
def _weights(z, allowed, m, t, mass, am1, p, KIND: tl.constexpr):
    """(u, y, g) of a tile: u = (z - m - t)_+, y = u^p / mass, g = y^(2 - alpha)."""
    u = tl.where(allowed, tl.maximum((z - m[:, None]) - t[:, None], 0.0), 0.0)
    inv_mass = 1.0 / tl.where(mass > 0, mass, 1.0)
    if KIND == 0:
        y = u * inv_mass[:, None]
        g = tl.where(u > 0, 1.0, 0.0)
    elif KIND == 1:
        y = u * u * inv_mass[:, None]
        g = u * tl.sqrt(inv_mass)[:, None]
    else:
        y = _pow(u, p) * inv_mass[:, None]
        g = _pow(y, 2.0 - (am1 + 1.0))
    return u, y, g


@triton.jit
def _row_setup(
    CU_Q,
    CU_K,
    b,
    pid_m,
    LQ,
    LK,
    VARLEN: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    """(q_start, q_len, k_start, k_len, i_pos, row_ok) of the program's query block."""
    if VARLEN:
        q_start = tl.load(CU_Q + b)
        q_len = tl.load(CU_Q + b + 1) - q_start
        k_start = tl.load(CU_K + b)
        k_len = tl.load(CU_K + b + 1) - k_start
    else:
        q_start = 0
        q_len = LQ
        k_start = 0
        k_len = LK
    i_pos = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    return q_start, q_len, k_start, k_len, i_pos, i_pos < q_len


@triton.jit
def _attention_fwd(
    Q,
    K,
    V,
    M,
    A,
    CU_Q,
    CU_K,
    OUT,
    W,
    L,
    STATS,
    ERR,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    smb,
    smh,
    smm,
    smn,
    sob,
    soh,
    som,
    sod,
    ssb,
    ssh,
    ssm,
    HQ,
    GROUP,
    LQ,
    LK,
    D,
    DV,
    scale,
    KIND: tl.constexpr,
    NEED_ALPHA: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    VARLEN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr,
    DOT: tl.constexpr,
    STEPS: tl.constexpr,
    TOL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HQ
    h = bh % HQ
    hk = h // GROUP
    q_start, q_len, k_start, k_len, i_pos, row_ok = _row_setup(
        CU_Q, CU_K, b, pid_m, LQ, LK, VARLEN, BLOCK_M
    )
    b64 = b.to(tl.int64)
    h64 = h.to(tl.int64)
    hk64 = hk.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    rows = q_start + i_pos
    q = tl.load(
        Q + b64 * sqb + h64 * sqh + rows[:, None] * sqm + offs_d[None, :] * sqd,
        mask=row_ok[:, None] & (offs_d[None, :] < D),
        other=0.0,
    )
    Kb = K + b64 * skb + hk64 * skh + k_start * skn
    Vb = V + b64 * svb + hk64 * svh + k_start * svn
    Mb = M + b64 * smb + h64 * smh
    am1, p = _head_alpha(A, h, KIND)
    zscale = scale * am1
    end_n = k_len
    if CAUSAL:
        end_n = tl.minimum(k_len, (pid_m + 1) * BLOCK_M)

    # 1. the row max of z over the allowed keys, their count, non-finite scores
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    n = tl.zeros((BLOCK_M,), tl.float32)
    bad = tl.zeros((BLOCK_M,), tl.int32)
    for start_n in range(0, end_n, BLOCK_N):
        z, allowed = _scores(
            q, Kb, Mb, i_pos, row_ok, start_n, k_len, skn, skd, smm, smn, zscale, D,
            HAS_MASK, CAUSAL, BLOCK_N, BLOCK_D, PRECISION, DOT,
        )  # fmt: skip
        m = tl.maximum(m, tl.max(tl.where(allowed, z, float("-inf")), axis=1))
        n += tl.sum(allowed.to(tl.float32), axis=1)
        bad += tl.sum((allowed & ((z - z) != 0)).to(tl.int32), axis=1)
    code = tl.where(bad > 0, 1, 0)
    if KIND == 2:
        alpha_ok = (am1 > 0.0) & (am1 <= 1.0)  # False on NaN
        code = tl.where(alpha_ok, code, 2)
    live = (n > 0) & (code == 0)
    m = tl.where(live, m, 0.0)

    # 2. safeguarded Newton on h(t) = ||(z - m - t)_+||_p - 1, t in [-1, -n^(1-alpha)]
    lo = tl.full((BLOCK_M,), -1.0, tl.float32)
    hi = -tl.exp(-am1 * tl.log(tl.maximum(n, 1.0)))
    t = lo
    active = live
    n_active = tl.sum(active.to(tl.int32), axis=0)
    step = n_active * 0
    while n_active > 0:
        mass = tl.zeros((BLOCK_M,), tl.float32)
        slope = tl.zeros((BLOCK_M,), tl.float32)  # sum_j u_j^(p - 1)
        for start_n in range(0, end_n, BLOCK_N):
            z, allowed = _scores(
                q, Kb, Mb, i_pos, row_ok, start_n, k_len, skn, skd, smm, smn, zscale, D,
                HAS_MASK, CAUSAL, BLOCK_N, BLOCK_D, PRECISION, DOT,
            )  # fmt: skip
            u = tl.where(allowed, tl.maximum((z - m[:, None]) - t[:, None], 0.0), 0.0)
            if KIND == 0:
                mass += tl.sum(u, axis=1)
                slope += tl.sum(tl.where(u > 0, 1.0, 0.0), axis=1)
            elif KIND == 1:
                mass += tl.sum(u * u, axis=1)
                slope += tl.sum(u, axis=1)
            else:
                mass += tl.sum(_pow(u, p), axis=1)
                slope += tl.sum(_pow(u, p - 1.0), axis=1)
        if KIND == 0:
            norm = mass
        elif KIND == 1:
            norm = tl.sqrt(mass)
        else:
            norm = _pow(mass, am1)
        above = norm >= 1.0
        lo = tl.where(above, tl.maximum(lo, t), lo)
        hi = tl.where(above, hi, tl.minimum(hi, t))
        # h'(t) = -||u||_p^(1-p) sum u^(p-1) = -(norm / mass) slope
        denom = norm * slope
        newton = t + (norm - 1.0) * mass / tl.where(denom > 0, denom, 1.0)
        inside = (denom > 0) & (newton >= lo) & (newton <= hi)
        t_next = tl.where(inside, newton, (lo + hi) * 0.5)
        moved = tl.abs(t_next - t) > TOL
        t = tl.where(active, t_next, t)
        active = active & moved
        step += 1
        n_active = tl.where(step < STEPS, tl.sum(active.to(tl.int32), axis=0), 0)

    # 3. O, W (and L, H) in one sweep; y normalized by the final mass at the end
    acc_o = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    acc_w = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    acc_l = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    mass = tl.zeros((BLOCK_M,), tl.float32)
    gsum = tl.zeros((BLOCK_M,), tl.float32)
    hsum = tl.zeros((BLOCK_M,), tl.float32)
    one = tl.full((BLOCK_M,), 1.0, tl.float32)
    for start_n in range(0, end_n, BLOCK_N):
        z, allowed = _scores(
            q, Kb, Mb, i_pos, row_ok, start_n, k_len, skn, skd, smm, smn, zscale, D,
            HAS_MASK, CAUSAL, BLOCK_N, BLOCK_D, PRECISION, DOT,
        )  # fmt: skip
        allowed = allowed & live[:, None]
        # unnormalized y (mass 1) and g up to a factor per row: W's ratio cancels it
        u, y, g = _weights(z, allowed, m, t, one, am1, p, KIND)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        v = tl.load(
            Vb + offs_n[:, None] * svn + offs_dv[None, :] * svd,
            mask=(offs_n[:, None] < k_len) & (offs_dv[None, :] < DV),
            other=0.0,
        )
        acc_o += _dot(y, v, DOT, PRECISION)
        acc_w += _dot(g, v, DOT, PRECISION)
        mass += tl.sum(y, axis=1)
        gsum += tl.sum(g, axis=1)
        if NEED_ALPHA:
            ylogy = tl.where(u > 0, y * p * tl.log(tl.where(u > 0, u, 1.0)), 0.0)
            acc_l += _dot(ylogy, v, DOT, PRECISION)
            hsum += tl.sum(ylogy, axis=1)
    safe_mass = tl.where(mass > 0, mass, 1.0)
    out = rows[:, None] * som + offs_dv[None, :] * sod + b64 * sob + h64 * soh
    out_ok = row_ok[:, None] & (offs_dv[None, :] < DV)
    tl.store(OUT + out, acc_o / safe_mass[:, None], mask=out_ok)
    tl.store(W + out, acc_w / tl.where(gsum > 0, gsum, 1.0)[:, None], mask=out_ok)
    stat = b64 * ssb + h64 * ssh + rows * ssm
    if NEED_ALPHA:
        # sum y log y v for y = u^p / mass: (L' - log(mass) O') / mass
        log_mass = tl.log(safe_mass)
        tl.store(L + out, (acc_l - log_mass[:, None] * acc_o) / safe_mass[:, None], mask=out_ok)
        tl.store(STATS + stat * 5 + 3, tl.where(mass > 0, hsum / safe_mass - log_mass, 0.0),
                 mask=row_ok)  # fmt: skip
    tl.store(STATS + stat * 5, m, mask=row_ok)
    tl.store(STATS + stat * 5 + 1, t, mask=row_ok)
    tl.store(STATS + stat * 5 + 2, mass, mask=row_ok)
    tl.store(STATS + stat * 5 + 4, step.to(tl.float32) + tl.zeros_like(mass), mask=row_ok)
    tl.store(ERR + stat, code, mask=row_ok)


@triton.jit
def _attention_bwd_dq(
    Q,
    K,
    V,
    M,
    A,
    CU_Q,
    CU_K,
    DO,
    DELTA,
    STATS,
    DQ,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    smb,
    smh,
    smm,
    smn,
    sob,
    soh,
    som,
    sod,
    ssb,
    ssh,
    ssm,
    HQ,
    GROUP,
    LQ,
    LK,
    D,
    DV,
    scale,
    KIND: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    VARLEN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr,
    DOT: tl.constexpr,
):
    """The gradient dq = scale sum_j ds_ij k_j for one query block (DQ has q's strides)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HQ
    h = bh % HQ
    hk = h // GROUP
    q_start, q_len, k_start, k_len, i_pos, row_ok = _row_setup(
        CU_Q, CU_K, b, pid_m, LQ, LK, VARLEN, BLOCK_M
    )
    b64 = b.to(tl.int64)
    h64 = h.to(tl.int64)
    hk64 = hk.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    rows = q_start + i_pos
    q_off = b64 * sqb + h64 * sqh + rows[:, None] * sqm + offs_d[None, :] * sqd
    q_ok = row_ok[:, None] & (offs_d[None, :] < D)
    q = tl.load(Q + q_off, mask=q_ok, other=0.0)
    do = tl.load(
        DO + b64 * sob + h64 * soh + rows[:, None] * som + offs_dv[None, :] * sod,
        mask=row_ok[:, None] & (offs_dv[None, :] < DV),
        other=0.0,
    )
    stat = b64 * ssb + h64 * ssh + rows * ssm
    m = tl.load(STATS + stat * 5, mask=row_ok, other=0.0)
    t = tl.load(STATS + stat * 5 + 1, mask=row_ok, other=0.0)
    mass = tl.load(STATS + stat * 5 + 2, mask=row_ok, other=0.0)
    delta = tl.load(DELTA + stat, mask=row_ok, other=0.0)
    Kb = K + b64 * skb + hk64 * skh + k_start * skn
    Vb = V + b64 * svb + hk64 * svh + k_start * svn
    Mb = M + b64 * smb + h64 * smh
    am1, p = _head_alpha(A, h, KIND)
    zscale = scale * am1
    end_n = k_len
    if CAUSAL:
        end_n = tl.minimum(k_len, (pid_m + 1) * BLOCK_M)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    for start_n in range(0, end_n, BLOCK_N):
        z, allowed = _scores(
            q, Kb, Mb, i_pos, row_ok, start_n, k_len, skn, skd, smm, smn, zscale, D,
            HAS_MASK, CAUSAL, BLOCK_N, BLOCK_D, PRECISION, DOT,
        )  # fmt: skip
        u, y, g = _weights(z, allowed, m, t, mass, am1, p, KIND)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        vt = tl.load(
            Vb + offs_n[None, :] * svn + offs_dv[:, None] * svd,
            mask=(offs_n[None, :] < k_len) & (offs_dv[:, None] < DV),
            other=0.0,
        )
        kk = tl.load(
            Kb + offs_n[:, None] * skn + offs_d[None, :] * skd,
            mask=(offs_n[:, None] < k_len) & (offs_d[None, :] < D),
            other=0.0,
        )
        dp = _dot(do, vt, DOT, PRECISION)
        ds = g * (dp - delta[:, None])
        acc += _dot(ds, kk, DOT, PRECISION)
    tl.store(DQ + q_off, acc * scale, mask=q_ok)


@triton.jit
def _attention_bwd_dkdv(
    Q,
    K,
    V,
    M,
    A,
    CU_Q,
    CU_K,
    DO,
    DELTA,
    STATS,
    DK,
    DV_,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    smb,
    smh,
    smm,
    smn,
    sob,
    soh,
    som,
    sod,
    ssb,
    ssh,
    ssm,
    HQ,
    GROUP,
    LQ,
    LK,
    D,
    DV,
    scale,
    KIND: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    VARLEN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr,
    DOT: tl.constexpr,
):
    """The gradients dk and dv of one key block of one KV head, summed over the GROUP query
    heads that share it (DK, DV_ have k's and v's strides).
    """
    pid_n = tl.program_id(0)
    bhk = tl.program_id(1)
    hkv = HQ // GROUP
    b = bhk // hkv
    hk = bhk % hkv
    q_start, q_len, k_start, k_len, _, _ = _row_setup(CU_Q, CU_K, b, 0, LQ, LK, VARLEN, BLOCK_M)
    b64 = b.to(tl.int64)
    hk64 = hk.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k_ok = (offs_n[:, None] < k_len) & (offs_d[None, :] < D)
    v_ok = (offs_n[:, None] < k_len) & (offs_dv[None, :] < DV)
    k_off = b64 * skb + hk64 * skh + (k_start + offs_n[:, None]) * skn + offs_d[None, :] * skd
    v_off = b64 * svb + hk64 * svh + (k_start + offs_n[:, None]) * svn + offs_dv[None, :] * svd
    vv = tl.load(V + v_off, mask=v_ok, other=0.0)
    Kb = K + b64 * skb + hk64 * skh + k_start * skn
    acc_k = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    acc_v = tl.zeros((BLOCK_N, BLOCK_DV), tl.float32)
    first_m = 0
    if CAUSAL:
        first_m = (start_n // BLOCK_M) * BLOCK_M
    for j in range(0, GROUP):
        h = hk * GROUP + j
        h64 = h.to(tl.int64)
        am1, p = _head_alpha(A, h, KIND)
        zscale = scale * am1
        Mb = M + b64 * smb + h64 * smh
        for start_m in range(first_m, q_len, BLOCK_M):
            i_pos = start_m + tl.arange(0, BLOCK_M)
            row_ok = i_pos < q_len
            rows = q_start + i_pos
            q = tl.load(
                Q + b64 * sqb + h64 * sqh + rows[:, None] * sqm + offs_d[None, :] * sqd,
                mask=row_ok[:, None] & (offs_d[None, :] < D),
                other=0.0,
            )
            do = tl.load(
                DO + b64 * sob + h64 * soh + rows[:, None] * som + offs_dv[None, :] * sod,
                mask=row_ok[:, None] & (offs_dv[None, :] < DV),
                other=0.0,
            )
            stat = b64 * ssb + h64 * ssh + rows * ssm
            m = tl.load(STATS + stat * 5, mask=row_ok, other=0.0)
            t = tl.load(STATS + stat * 5 + 1, mask=row_ok, other=0.0)
            mass = tl.load(STATS + stat * 5 + 2, mask=row_ok, other=0.0)
            delta = tl.load(DELTA + stat, mask=row_ok, other=0.0)
            z, allowed = _scores(
                q, Kb, Mb, i_pos, row_ok, start_n, k_len, skn, skd, smm, smn, zscale, D,
                HAS_MASK, CAUSAL, BLOCK_N, BLOCK_D, PRECISION, DOT,
            )  # fmt: skip
            u, y, g = _weights(z, allowed, m, t, mass, am1, p, KIND)
            acc_v += _dot(tl.trans(y), do, DOT, PRECISION)
            dp = _dot(do, tl.trans(vv), DOT, PRECISION)
            ds = g * (dp - delta[:, None])
            acc_k += _dot(tl.trans(ds), q, DOT, PRECISION)
    tl.store(DK + k_off, acc_k * scale, mask=k_ok)
    tl.store(DV_ + v_off, acc_v, mask=v_ok)
