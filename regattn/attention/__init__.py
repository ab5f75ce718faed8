"""Sparse attention with alpha-entmax, fused flash-style: no (queries x keys) matrix in memory.

    out_i = sum_j y_ij v_j,   y_i = entmax_alpha(scale * q_i K^T over the allowed keys),

entmax_alpha(s) = argmax_{y in simplex} y.s + H_alpha(y) (Peters, Niculae & Martins 2019),
alpha in (1, 2]: alpha = 2 is sparsemax, alpha = 1.5 the exact 1.5-entmax, a tensor alpha (one
per query head) is differentiable (Correia, Niculae & Martins 2019), so that it can be learned.

Two paths compute the same function:

* "fused": Triton kernels (`regattn.attention._triton`), one program per block of query rows,
  sweeping the key blocks: the row max, then safeguarded Newton steps on the threshold (one
  sweep each), then the output; the backward recomputes the scores blockwise. Memory is
  linear in the sequence length. CUDA tensors of float16, bfloat16 or float32 (computed and
  accumulated in float32), head dimensions up to 256; CPU tensors too under
  TRITON_INTERPRET=1 (how the tests run it without a GPU).
* "reference": the row-wise path (`regattn.attention.reference`): the scores matrix, the
  mapping by `regattn.mappings.entmax`, then P v. Any device and dtype; the fused path's
  oracle, and the default on the CPU.

Masks: a bool `mask` broadcastable to (batch, query heads, queries, keys) (True = may attend;
a key padding mask is (batch, 1, 1, keys) and costs no (queries x keys) memory in the fused
path), `causal` (key j for query i when j <= i, top-left aligned as
`scaled_dot_product_attention`), packed sequences (`cu_seqlens_q`, `cu_seqlens_k`), GQA (k
and v with fewer heads), and cross-attention (any query and key lengths). A query with no
allowed key gets zeros and zero gradient.

The models use it through `fused_alpha` (which mappings it computes), `fused_unsupported`
(which tensors it takes) and `use_fused` (their `attention_impl` choice): the Hugging Face
backends (`regattn.integrations.transformers`) and the fairseq Transformer
(`--attention-impl`).
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from regattn import mappings
from regattn.mappings import _kernels
from regattn.mappings.learned_alpha import ALPHA_INIT, alpha_from_logit, alpha_logit_for

from .reference import dense_reference, varlen_reference

__all__ = [
    "SparseAttention",
    "SparseAttentionFunction",
    "fused_alpha",
    "fused_unsupported",
    "sparse_attention",
    "threshold_sweeps",
    "use_fused",
]

FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
IMPLS = ("auto", "fused", "reference")
# the models' choice (the Hugging Face backends' and the fairseq Transformer's attention_impl):
# "rowwise" is their own path, which computes every mapping, not only `reference`'s entmax
MODEL_IMPLS = ("auto", "fused", "rowwise")

_triton_module = None


def _fused_kernels():
    """regattn.attention._triton, imported on first use; None when triton is not importable."""
    global _triton_module
    if _triton_module is None:
        try:
            from . import _triton as module
        except ImportError:
            _triton_module = False
        else:
            _triton_module = module
    return _triton_module or None


# ------------------------------------------------------------------------------------------
# input checks


def _check_alpha(alpha, heads: int, values_on_host: bool | None = None) -> None:
    """alpha: a number in (1, 2], or a floating tensor of `heads` values (or one) in (1, 2].
    A tensor's values are read on the host when values_on_host, by default unless it is on a
    CUDA device (the fused kernel checks those without a host-device synchronization).
    """
    if isinstance(alpha, torch.Tensor):
        if not alpha.is_floating_point():
            raise ValueError(f"a tensor alpha must be floating point, got {alpha.dtype}")
        if alpha.numel() not in (1, heads) or alpha.dim() > 1:
            raise ValueError(
                f"a tensor alpha holds one value per query head: shape ({heads},), got "
                f"{tuple(alpha.shape)}"
            )
        if values_on_host is None:
            values_on_host = alpha.device.type != "cuda"
        if values_on_host and not bool(((alpha > 1) & (alpha <= 2)).all()):
            raise ValueError(
                "alpha must be in (1, 2] for every head (alpha = 2 is sparsemax), got "
                f"{alpha.detach().flatten().tolist()}"
            )
        return
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 1 < alpha <= 2:
        raise ValueError(f"alpha must be a number in (1, 2] (2 is sparsemax), got {alpha!r}")


def _check_inputs(q, k, v, alpha, mask, scale, cu_seqlens_q, cu_seqlens_k):
    """Validates the arguments of `sparse_attention`; returns the scale (default 1/sqrt(D))."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            kind = f"{t.dtype} tensor" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a floating-point tensor, got a {kind}")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    dims = 3 if varlen else 4
    layout = "(tokens, heads, dim)" if varlen else "(batch, heads, length, dim)"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != dims:
            raise ValueError(f"{name} must be {layout}, got shape {tuple(t.shape)}")
    head_axis, len_axis = (1, 0) if varlen else (1, 2)
    if not varlen and not q.shape[0] == k.shape[0] == v.shape[0]:
        raise ValueError(
            f"q, k and v must have one batch size, got {q.shape[0]}, {k.shape[0]}, {v.shape[0]}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have one head dim, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[head_axis] != v.shape[head_axis] or k.shape[len_axis] != v.shape[len_axis]:
        raise ValueError(
            f"k and v must have the same heads and length, got {tuple(k.shape)} and "
            f"{tuple(v.shape)}"
        )
    hq, hk = q.shape[head_axis], k.shape[head_axis]
    if hk == 0 or hq % hk != 0:
        raise ValueError(
            f"the query heads ({hq}) must be a multiple of the key/value heads ({hk}) (GQA)"
        )
    _check_alpha(alpha, hq)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
    elif (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not (math.isfinite(scale) and scale > 0)
    ):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    if varlen:
        if mask is not None:
            raise ValueError(
                "mask= is not supported with packed sequences (cu_seqlens_q/k); each sequence "
                "attends to its own keys (causal=True for causal attention)"
            )
        _check_cu_seqlens(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0], q.device)
    elif mask is not None:
        full = (q.shape[0], hq, q.shape[2], k.shape[2])
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise ValueError(
                "mask must be a bool tensor (True where a key may be attended to), got "
                + (str(mask.dtype) if isinstance(mask, torch.Tensor) else type(mask).__name__)
            )
        try:
            if torch.broadcast_shapes(mask.shape, full) != torch.Size(full):
                raise RuntimeError
        except RuntimeError:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} must broadcast to (batch, query heads, "
                f"queries, keys) = {full}"
            ) from None
        if mask.device != q.device:
            raise ValueError(f"mask is on {mask.device}, q on {q.device}")
    return float(scale)


def _check_cu_seqlens(cu_q, cu_k, total_q: int, total_k: int, device) -> None:
    if cu_q is None or cu_k is None:
        raise ValueError("packed sequences need both cu_seqlens_q and cu_seqlens_k")
    for name, cu, total in (("cu_seqlens_q", cu_q, total_q), ("cu_seqlens_k", cu_k, total_k)):
        if not isinstance(cu, torch.Tensor) or cu.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{name} must be an int32 or int64 tensor")
        if cu.dim() != 1 or cu.numel() < 2:
            raise ValueError(
                f"{name} must be 1-D with batch + 1 >= 2 entries, got {tuple(cu.shape)}"
            )
        if cu.device != device:
            raise ValueError(f"{name} is on {cu.device}, q on {device}")
        values = cu.tolist()
        if (
            values[0] != 0
            or values[-1] != total
            or any(b < a for a, b in itertools.pairwise(values))
        ):
            raise ValueError(
                f"{name} must rise from 0 to the number of tokens ({total}), got {values}"
            )
    if cu_q.numel() != cu_k.numel():
        raise ValueError(
            f"cu_seqlens_q and cu_seqlens_k must name one batch, got {cu_q.numel() - 1} and "
            f"{cu_k.numel() - 1} sequences"
        )


def fused_unsupported(device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why the fused kernels cannot take tensors of this device, dtype and head dim (the
    larger of the query/key and the value head dims), or None when they can.

    Parameters
    ----------
    device : torch.device or str
        the tensors' device.
    dtype : torch.dtype
        their dtype.
    head_dim : int
        the largest head dim among q, k and v.

    Returns
    -------
    str or None
        The reason, in words (for an error message), or None.
    """
    device = torch.device(device)
    if _fused_kernels() is None:
        return "triton is not importable (pip install triton; CUDA builds of torch bring it)"
    if device.type != "cuda" and not (device.type == "cpu" and _kernels.triton_interpreting()):
        return (
            f"the fused kernels run on CUDA tensors (CPU tensors only under TRITON_INTERPRET=1), "
            f"got {device}"
        )
    if dtype not in FUSED_DTYPES:
        return f"the fused kernels take float16, bfloat16 or float32, got {dtype}"
    if head_dim > MAX_HEAD_DIM:
        return f"the fused kernels take head dims up to {MAX_HEAD_DIM}, got {head_dim}"
    return None


def _fused_unsupported(q, v) -> str | None:
    """Why the fused kernels cannot take these inputs (None when they can)."""
    return fused_unsupported(q.device, q.dtype, max(q.shape[-1], v.shape[-1]))


def fused_alpha(mapping: str, params: dict) -> float | torch.Tensor | None:
    """The alpha with which `sparse_attention` computes the mapping `mapping` of
    `regattn.mappings` with parameters `params`, or None when it computes another mapping.

    A mapping's declaration says which α-entmax it is (`Declaration.entmax_alpha`: sparsemax
    is alpha = 2, softmax alpha = 1); entmax, whose parameter is alpha, is the α-entmax of
    that alpha. The fused attention computes alpha in (1, 2], or a tensor of alphas (one per
    query head, e.g. learned). A temperature gamma is no alpha: entmax(s; alpha, gamma) =
    entmax(s / gamma; alpha) (sparsemax too), so a caller folds 1 / params["gamma"] into
    `sparse_attention`'s scale.

    Parameters
    ----------
    mapping : str
        a mapping's name (`regattn.mappings.NAMES`, or a control's).
    params : dict
        its parameters (`regattn.mappings.parameters_of`); those not given take the mapping's
        defaults. params["alpha"] may be a tensor.

    Returns
    -------
    float or torch.Tensor or None
        The alpha, or None (softmax, alpha = 1, is flash attention's; the structured mappings
        and the controls are not entmax).

    Raises
    ------
    ValueError
        on an unknown mapping.
    """
    declared = mappings.declaration(mapping)
    if "alpha" in declared.defaults:
        alpha = params.get("alpha", declared.defaults["alpha"])
    else:
        alpha = declared.entmax_alpha
    if alpha is None:
        return None
    if isinstance(alpha, torch.Tensor) or 1 < alpha <= 2:
        return alpha
    return None


def use_fused(impl: str, device, why_not: str | None, option: str = "impl") -> bool:
    """The choice of a model's attention (the integrations' `attention_impl`) between the
    fused path (`sparse_attention`) and its row-wise path (the scores matrix, the mapping,
    then P V, for every mapping).

    Parameters
    ----------
    impl : str
        one of MODEL_IMPLS: "fused" (an error where it cannot run), "rowwise", or "auto":
        fused for CUDA tensors when it can run (on the CPU the row-wise path's compiled
        kernels are the faster; the interpreter is for tests).
    device : torch.device or str
        the attention's tensors' device.
    why_not : str or None
        why the fused path cannot compute this attention (the caller's reasons, and
        `fused_unsupported`'s), None when it can.
    option : str
        the option's name in the caller's words, for the error.

    Returns
    -------
    bool
        Whether to take the fused path.

    Raises
    ------
    ValueError
        on an unknown impl, or impl "fused" where `why_not` says it cannot run.
    """
    if impl not in MODEL_IMPLS:
        raise ValueError(f"{option} must be one of {', '.join(MODEL_IMPLS)}, got {impl!r}")
    if impl == "rowwise":
        return False
    if impl == "fused":
        if why_not is not None:
            raise ValueError(f"{option}='fused' cannot run: {why_not}")
        return True
    return why_not is None and torch.device(device).type == "cuda"


# ------------------------------------------------------------------------------------------
# the fused path


def _same_strides(t: torch.Tensor) -> torch.Tensor:
    """t, or a contiguous copy when t is not dense (a slice): torch.empty_like keeps the
    strides of a dense tensor only, and the kernels address a gradient with its input's.
    """
    expected = 1
    for i in sorted(range(t.dim()), key=t.stride):
        if t.shape[i] != 1 and t.stride(i) != expected:
            return t.contiguous()
        expected *= t.shape[i]
    return t


def _strides(t: torch.Tensor, varlen: bool):
    """(batch, head, position, feature) strides: packed (tokens, heads, dim) has batch 0."""
    if varlen:
        return 0, t.stride(1), t.stride(0), t.stride(2)
    return t.stride()


def _kind(alpha) -> int:
    tri = _fused_kernels()
    if isinstance(alpha, torch.Tensor):
        return tri.ENTMAX
    if alpha == 2:
        return tri.SPARSEMAX
    if alpha == 1.5:
        return tri.ENTMAX15
    return tri.ENTMAX


def _blocks(head_dim: int, interpreting: bool):
    """(BLOCK_M, BLOCK_N, num_warps), shared by the forward and both backward kernels (so that
    they compute the same score tiles): small tiles in the interpreter (it runs each program in
    numpy); on a GPU the tiles whose kernels ptxas compiles for sm_90 with the fewest register
    spills (Triton 3.9, bf16, alpha per head: at D = 64, 64 x 32 with 4 warps spills 80 bytes
    in the forward and none in the backward, where 64 x 64 spills 40-250; at D = 128,
    32 x 64 with 8 warps spills none in the forward and 20-30 in the backward, where 64 x 32
    spills 110-430; at D = 256 every tile tried spills 200-500). Not yet timed on a GPU.
    """
    if interpreting:
        return 16, 16, 1
    if head_dim <= 64:
        return 64, 32, 4
    if head_dim <= 128:
        return 32, 64, 8
    return 32, 32, 8


class _Launch:
    """The kernels' shared arguments for one problem."""

    def __init__(self, q, k, v, mask, alpha_rows, causal, scale, cu_q, cu_k, max_q, max_k):
        tri = _fused_kernels()
        self.varlen = cu_q is not None
        if self.varlen:
            self.batch = cu_q.numel() - 1
            self.hq, self.hk = q.shape[1], k.shape[1]
            self.lq, self.lk = max_q, max_k
        else:
            self.batch, self.hq, self.lq = q.shape[:3]
            self.hk, self.lk = k.shape[1], k.shape[2]
        self.d, self.dv = q.shape[-1], v.shape[-1]
        interpreting = q.device.type == "cpu"
        self.block_m, self.block_n, self.num_warps = _blocks(max(self.d, self.dv), interpreting)
        self.block_d = max(_next_pow2(self.d), 16)
        self.block_dv = max(_next_pow2(self.dv), 16)
        self.has_mask = mask is not None
        if mask is None:
            self.mask, self.mask_strides = q, (0, 0, 0, 0)
        else:
            full = mask.expand(self.batch, self.hq, self.lq, self.lk)
            self.mask, self.mask_strides = full.view(torch.uint8), full.stride()
        self.cu_q = cu_q if cu_q is not None else q
        self.cu_k = cu_k if cu_k is not None else q
        self.alpha = alpha_rows if alpha_rows is not None else q
        self.causal = causal
        self.scale = scale
        # float32 inputs: exact float32 products (not TF32), to match the reference
        if interpreting and q.dtype == torch.bfloat16:
            self.precision = "upcast"
        else:
            self.precision = "ieee" if q.dtype == torch.float32 else "tf32"
        self.dot = tri.DOT_DTYPES[q.dtype]
        self.tri = tri

    def common(self):
        return dict(
            HQ=self.hq,
            GROUP=self.hq // self.hk,
            LQ=self.lq,
            LK=self.lk,
            D=self.d,
            DV=self.dv,
            scale=self.scale,
            HAS_MASK=self.has_mask,
            CAUSAL=self.causal,
            VARLEN=self.varlen,
            BLOCK_M=self.block_m,
            BLOCK_N=self.block_n,
            BLOCK_D=self.block_d,
            BLOCK_DV=self.block_dv,
            PRECISION=self.precision,
            DOT=self.dot,
            num_warps=self.num_warps,
        )


def _next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _fused_forward(launch: _Launch, q, k, v, kind: int, need_alpha: bool):
    tri = launch.tri
    out_shape = (*q.shape[:-1], launch.dv)
    out = torch.empty(out_shape, dtype=torch.float32, device=q.device)
    weighted = torch.empty_like(out)
    logs = torch.empty_like(out) if need_alpha else out
    # per query row: m, t, mass, H (sum y log y, with d alpha) and the Newton sweeps taken
    stats = torch.empty((*q.shape[:-1], 5), dtype=torch.float32, device=q.device)
    err = torch.zeros(q.shape[:-1], dtype=torch.int32, device=q.device)
    so = _strides(out, launch.varlen)
    ss = (0, err.stride(1), err.stride(0)) if launch.varlen else err.stride()
    grid = (_cdiv(launch.lq, launch.block_m), launch.batch * launch.hq)
    if grid[0] > 0 and grid[1] > 0:
        tri._attention_fwd[grid](
            q, k, v, launch.mask, launch.alpha, launch.cu_q, launch.cu_k,
            out, weighted, logs, stats, err,
            *_strides(q, launch.varlen), *_strides(k, launch.varlen), *_strides(v, launch.varlen),
            *launch.mask_strides, *so, *ss,
            KIND=kind, NEED_ALPHA=need_alpha, STEPS=tri.MAX_STEPS, TOL=tri.TOL,
            **launch.common(),
        )  # fmt: skip
    tri.raise_flags(err)
    return out, weighted, (logs if need_alpha else None), stats, ss


def _fused_backward(launch: _Launch, q, k, v, kind, grad_out, delta, stats, ss):
    tri = launch.tri
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    args = (
        *_strides(q, launch.varlen), *_strides(k, launch.varlen), *_strides(v, launch.varlen),
        *launch.mask_strides, *_strides(grad_out, launch.varlen), *ss,
    )  # fmt: skip
    common = launch.common()
    grid_q = (_cdiv(launch.lq, launch.block_m), launch.batch * launch.hq)
    if grid_q[0] > 0 and grid_q[1] > 0:
        tri._attention_bwd_dq[grid_q](
            q, k, v, launch.mask, launch.alpha, launch.cu_q, launch.cu_k,
            grad_out, delta, stats, dq, *args, KIND=kind, **common,
        )  # fmt: skip
    grid_k = (_cdiv(launch.lk, launch.block_n), launch.batch * launch.hk)
    if grid_k[0] > 0 and grid_k[1] > 0:
        tri._attention_bwd_dkdv[grid_k](
            q, k, v, launch.mask, launch.alpha, launch.cu_q, launch.cu_k,
            grad_out, delta, stats, dk, dv, *args, KIND=kind, **common,
        )  # fmt: skip
    return dq, dk, dv


def _run_forward(q, k, v, alpha, mask, causal, scale, cu_q, cu_k, max_q, max_k, need_alpha):
    """(launch, kind, per-head alphas or None, _fused_forward's results)."""
    kind = _kind(alpha)
    alpha_rows = None
    if kind == _fused_kernels().ENTMAX:
        heads = q.shape[1]
        if isinstance(alpha, torch.Tensor):
            alpha_rows = alpha.detach().reshape(-1).float().expand(heads).contiguous()
        else:
            alpha_rows = torch.full((heads,), float(alpha), device=q.device)
    launch = _Launch(q, k, v, mask, alpha_rows, causal, scale, cu_q, cu_k, max_q, max_k)
    return launch, kind, alpha_rows, _fused_forward(launch, q, k, v, kind, need_alpha)


class SparseAttentionFunction(torch.autograd.Function):
    """The fused attention's autograd Function: the forward kernel, and the backward in q, k, v
    and a tensor alpha (per query head). Inputs are checked by `sparse_attention`.
    """

    @staticmethod
    def forward(ctx, q, k, v, alpha, mask, causal, scale, cu_q, cu_k, max_q, max_k):
        """The attention output (q's layout and dtype, v's head dim)."""
        q, k, v = _same_strides(q), _same_strides(k), _same_strides(v)
        need_alpha = isinstance(alpha, torch.Tensor) and ctx.needs_input_grad[3]
        launch, kind, alpha_rows, results = _run_forward(
            q, k, v, alpha, mask, causal, scale, cu_q, cu_k, max_q, max_k, need_alpha
        )
        out, weighted, logs, stats, ss = results
        ctx.launch, ctx.kind, ctx.ss = launch, kind, ss
        ctx.alpha_shape = alpha.shape if isinstance(alpha, torch.Tensor) else None
        ctx.alpha_dtype = alpha.dtype if isinstance(alpha, torch.Tensor) else None
        ctx.save_for_backward(q, k, v, out, weighted, logs, stats, alpha_rows)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        """dq, dk, dv by the kernels; dalpha per head from the forward's O, W, L, H."""
        q, k, v, out, weighted, logs, stats, alpha_rows = ctx.saved_tensors
        launch = ctx.launch
        grad_out = grad_out.contiguous()
        g32 = grad_out.float()
        delta = (g32 * weighted).sum(-1).contiguous()
        dq, dk, dv = _fused_backward(launch, q, k, v, ctx.kind, grad_out, delta, stats, ctx.ss)
        grad_alpha = None
        if logs is not None:
            # per row: (dO.O - delta) / (alpha - 1)^2 - (dO.L - delta H) / (alpha - 1)
            head_axis = 1
            shape = [1] * delta.dim()
            shape[head_axis] = -1
            am1 = (alpha_rows - 1).reshape(shape)
            entropy = stats[..., 3]
            per_row = ((g32 * out).sum(-1) - delta) / am1.square() - (
                (g32 * logs).sum(-1) - delta * entropy
            ) / am1
            dims = [i for i in range(per_row.dim()) if i != head_axis]
            grad_alpha = per_row.sum(dims)
            if ctx.alpha_shape.numel() == 1:
                grad_alpha = grad_alpha.sum()
            grad_alpha = grad_alpha.reshape(ctx.alpha_shape).to(ctx.alpha_dtype)
        return dq, dk, dv, grad_alpha, None, None, None, None, None, None, None


# ------------------------------------------------------------------------------------------
# the public API


def sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    alpha: float | torch.Tensor = 1.5,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Attention with alpha-entmax in place of softmax: out_i = sum_j y_ij v_j with
    y_i = entmax_alpha(scale * q_i K^T) over the keys query i may attend to.

    Parameters
    ----------
    q, k, v : torch.Tensor
        (batch, heads, length, dim) tensors, q (B, Hq, Lq, D), k (B, Hk, Lk, D) and
        v (B, Hk, Lk, Dv), Hq a multiple of Hk (GQA: query head h reads KV head
        h // (Hq // Hk)), any Lq and Lk (cross-attention). With `cu_seqlens_q/k`, packed
        sequences: q (Tq, Hq, D), k (Tk, Hk, D), v (Tk, Hk, Dv). One floating dtype.
    alpha : float or torch.Tensor
        a number in (1, 2] (2: sparsemax; 1.5: 1.5-entmax), or a tensor of one value per
        query head (shape (Hq,)), each in (1, 2], differentiable (a learned alpha: see
        `SparseAttention`).
    mask : torch.Tensor or None
        bool, broadcastable to (B, Hq, Lq, Lk), True where a key may be attended to
        (key padding: (B, 1, 1, Lk)). Not with packed sequences.
    causal : bool
        query i attends to keys j <= i only (top-left aligned, as
        `torch.nn.functional.scaled_dot_product_attention`).
    scale : float or None
        the scores' factor, default 1 / sqrt(D).
    cu_seqlens_q, cu_seqlens_k : torch.Tensor or None
        packed sequences: int tensors of batch + 1 cumulative lengths from 0 to Tq and Tk
        (sequence b: rows cu[b]:cu[b + 1]); both or neither. Read on the host (a
        synchronization).
    impl : str
        "fused" (the Triton kernels), "reference" (the row-wise path) or "auto": fused for
        CUDA tensors of float16/bfloat16/float32 with head dims up to 256 when triton is
        importable, the reference otherwise.

    Returns
    -------
    torch.Tensor
        (B, Hq, Lq, Dv), or (Tq, Hq, Dv) for packed sequences, in q's dtype. A query with no
        allowed key gets zeros (and zero gradient).

    Raises
    ------
    ValueError
        on tensors of the wrong kind, rank, dtype, device or shape (batch, heads, head dim,
        lengths), alpha out of (1, 2] or of the wrong shape, scale <= 0, a mask that is not
        bool or does not broadcast, bad cu_seqlens, impl="fused" where the kernels cannot
        run, and (fused path, float16 overflow or NaN inputs) non-finite scores.

    Notes
    -----
    The fused path flags non-finite scores and, for a CUDA tensor alpha, values out of
    (1, 2] on the device; they are raised without a host-device synchronization by
    `torch._assert_async` (under `regattn.mappings.sync_checks()`: at once, as ValueError).
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    scale = _check_inputs(q, k, v, alpha, mask, scale, cu_seqlens_q, cu_seqlens_k)
    if isinstance(alpha, torch.Tensor):
        alpha = alpha.to(q.device)
    why_not = _fused_unsupported(q, v)
    if impl == "fused" and why_not is not None:
        raise ValueError(f"impl='fused' cannot run: {why_not}")
    if impl == "reference" or (impl == "auto" and (why_not is not None or q.device.type != "cuda")):
        if isinstance(alpha, torch.Tensor):  # the row-wise path reads its scores on the host too
            _check_alpha(alpha, alpha.numel(), values_on_host=True)
        if cu_seqlens_q is not None:
            return varlen_reference(q, k, v, alpha, causal, scale, cu_seqlens_q, cu_seqlens_k)
        return dense_reference(q, k, v, alpha, mask, causal, scale)
    max_q, max_k = _longest(cu_seqlens_q), _longest(cu_seqlens_k)
    return SparseAttentionFunction.apply(
        q, k, v, alpha, mask, bool(causal), scale, cu_seqlens_q, cu_seqlens_k, max_q, max_k
    )


def _longest(cu_seqlens):
    """The longest packed sequence (None without packing); read on the host."""
    if cu_seqlens is None:
        return None
    return int((cu_seqlens[1:] - cu_seqlens[:-1]).max())


def threshold_sweeps(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    alpha: float | torch.Tensor = 1.5,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
) -> torch.Tensor:
    """How many Newton sweeps over the keys the fused forward takes to find each query's
    threshold (the program of a query block stops when all its rows have converged, so each
    row reports its block's count). Every sweep recomputes the block's scores; the forward
    makes two more (the row max, the output). For profiling; the arguments are
    `sparse_attention`'s.

    Returns
    -------
    torch.Tensor
        int32 of q's shape without its head dim.

    Raises
    ------
    ValueError
        as `sparse_attention`, and where the fused kernels cannot run.
    """
    scale = _check_inputs(q, k, v, alpha, mask, scale, cu_seqlens_q, cu_seqlens_k)
    why_not = _fused_unsupported(q, v)
    if why_not is not None:
        raise ValueError(f"threshold_sweeps needs the fused kernels: {why_not}")
    max_q, max_k = _longest(cu_seqlens_q), _longest(cu_seqlens_k)
    q, k, v = _same_strides(q), _same_strides(k), _same_strides(v)
    with torch.no_grad():
        *_, results = _run_forward(
            q, k, v, alpha, mask, bool(causal), scale, cu_seqlens_q, cu_seqlens_k, max_q, max_k,
            False,
        )  # fmt: skip
    return results[3][..., 4].to(torch.int32)


class SparseAttention(nn.Module):
    """`sparse_attention` as a module, with a fixed alpha or one learned per head.

    Parameters
    ----------
    num_heads : int
        the number of query heads (the learned alphas' count).
    alpha : float
        the fixed alpha in (1, 2], or the learned alphas' start (strictly inside
        (ALPHA_MIN, ALPHA_MAX) = (1.01, 2), `regattn.mappings.learned_alpha`).
    learn_alpha : bool
        learn one alpha per head, parameterized alpha = 1.01 + 0.99 sigmoid(alpha_logit).
    causal : bool
        the default of `forward`'s causal.
    impl : str
        as `sparse_attention`'s.
    """

    def __init__(
        self,
        num_heads: int,
        alpha: float = ALPHA_INIT,
        learn_alpha: bool = False,
        causal: bool = False,
        impl: str = "auto",
    ):
        super().__init__()
        if not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")
        self.num_heads, self.causal, self.impl = num_heads, causal, impl
        if learn_alpha:
            logit = alpha_logit_for(alpha)
            self.alpha_logit = nn.Parameter(torch.full((num_heads,), logit))
        else:
            _check_alpha(alpha, num_heads)
            self.register_parameter("alpha_logit", None)
            self.fixed_alpha = float(alpha)

    @property
    def alpha(self) -> float | torch.Tensor:
        """The alpha in use: a number, or the learned (num_heads,) tensor."""
        if self.alpha_logit is None:
            return self.fixed_alpha
        return alpha_from_logit(self.alpha_logit)

    def forward(
        self, q, k, v, mask=None, causal=None, scale=None, cu_seqlens_q=None, cu_seqlens_k=None
    ):
        """`sparse_attention(q, k, v, ...)` with this module's alpha (see there)."""
        return sparse_attention(
            q, k, v, alpha=self.alpha, mask=mask, causal=self.causal if causal is None else causal,
            scale=scale, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, impl=self.impl,
        )  # fmt: skip

    def extra_repr(self) -> str:
        """The heads, alpha (a number or "learned") and causal."""
        alpha = "learned" if self.alpha_logit is not None else self.fixed_alpha
        return f"num_heads={self.num_heads}, alpha={alpha}, causal={self.causal}"
