"""The row-wise sparse attention: P = entmax(q k^T * scale, mask; alpha), out = P v.

The whole (queries x keys) score matrix is formed and each row is mapped by
`regattn.mappings.entmax` (which dispatches to its own kernels: compiled on the CPU, Triton
rows on CUDA), so that this path is exact to the mappings' resolution and differentiable in
q, k, v and a tensor alpha by their autograd Functions. It is the fused kernel's oracle in
the tests and its fallback: on the CPU, for float64, and for head dimensions the kernel does
not take. Inputs are checked by the caller (`regattn.attention.sparse_attention`).
"""

from __future__ import annotations

import torch

from regattn import mappings


def dense_reference(q, k, v, alpha, mask, causal: bool, scale: float) -> torch.Tensor:
    """The attention of (batch, heads, length, dim) tensors, k and v with heads // group heads.

    Parameters
    ----------
    q, k, v : torch.Tensor
        (B, Hq, Lq, D), (B, Hk, Lk, D), (B, Hk, Lk, Dv), Hq a multiple of Hk (GQA: query
        head h reads KV head h // (Hq // Hk)).
    alpha : float or torch.Tensor
        a number in (1, 2] or a tensor of Hq values in (1, 2].
    mask : torch.Tensor or None
        bool, broadcastable to (B, Hq, Lq, Lk), True where a key may be attended to.
    causal : bool
        key j is attended to by query i only when j <= i (top-left aligned).
    scale : float
        the scores' factor.

    Returns
    -------
    torch.Tensor
        (B, Hq, Lq, Dv); a query with no allowed key gets zeros.
    """
    if k.shape[2] == 0:  # no key at all (e.g. an empty packed sequence)
        return q.new_zeros(*q.shape[:3], v.shape[-1])
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        lq, lk = q.shape[2], k.shape[2]
        below = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
        mask = below if mask is None else mask & below
    if isinstance(alpha, torch.Tensor):
        alpha = alpha.reshape(1, -1, 1, 1)
    p = mappings.entmax(scores, dim=-1, mask=mask, alpha=alpha, empty="zero")
    return torch.matmul(p, v)


def varlen_reference(q, k, v, alpha, causal: bool, scale: float, cu_q, cu_k) -> torch.Tensor:
    """The attention of packed sequences: q (Tq, Hq, D), k (Tk, Hk, D), v (Tk, Hk, Dv), and
    sequence b at rows cu_q[b]:cu_q[b + 1] of q and cu_k[b]:cu_k[b + 1] of k and v.

    Returns
    -------
    torch.Tensor
        (Tq, Hq, Dv).
    """
    starts_q, starts_k = cu_q.tolist(), cu_k.tolist()
    outs = []
    for b in range(len(starts_q) - 1):
        qs = q[starts_q[b] : starts_q[b + 1]].transpose(0, 1).unsqueeze(0)
        ks = k[starts_k[b] : starts_k[b + 1]].transpose(0, 1).unsqueeze(0)
        vs = v[starts_k[b] : starts_k[b + 1]].transpose(0, 1).unsqueeze(0)
        outs.append(dense_reference(qs, ks, vs, alpha, None, causal, scale)[0].transpose(0, 1))
    return torch.cat(outs, dim=0)
