"""fairseq's MultiheadAttention with its softmax replaced by an AttentionNormalizer, computed
row-wise (the scores matrix, the mapping, P V) or, where the mapping allows, by the fused
kernels of `regattn.attention` (no scores matrix in memory)."""

from typing import Dict, Optional, Tuple

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor

from regattn.attention import MODEL_IMPLS, fused_unsupported, sparse_attention, use_fused
from regattn_fairseq import fairseq_adapter

from .attention_normalizer import AttentionNormalizer


def _a_query_sees_no_key(mask: Tensor, causal: bool) -> bool:
    """Whether some query row of the fused path's mask (bool, broadcastable to bsz x heads x
    tgt_len x src_len) has no key to attend to; with causal (tgt_len = src_len), query i sees
    only the keys up to i. Read on the host (a synchronization)."""
    if causal:
        return not bool((mask.cumsum(-1) > 0).all())
    return not bool(mask.any(-1).all())


class RegattnMultiheadAttention(MultiheadAttention):
    """Same projections, caching, masking and parameter names as fairseq's
    MultiheadAttention; only the score -> probability step differs.

    fairseq's forward has no hook for the normalizer, so we take its masked scores (through
    fairseq_adapter, which holds how) and finish the computation here.

    attention_impl (--attention-impl) chooses between that row-wise path and the fused one
    (`regattn.attention.sparse_attention` on the projected q, k, v): "auto" takes the fused
    path for CUDA tensors where `fused_blocker` finds nothing against it, "fused" always (a
    ValueError naming why where it cannot), "rowwise" never; a call the fused path does not
    serve takes the row-wise path under each (see `_fused_forward`)."""

    def __init__(
        self, *args, normalizer: AttentionNormalizer, attention_impl: str = "auto", **kwargs
    ):
        super().__init__(*args, **kwargs)
        if attention_impl not in MODEL_IMPLS:
            raise ValueError(
                f"attention_impl must be one of {', '.join(MODEL_IMPLS)}, got {attention_impl!r}"
            )
        self.normalizer = normalizer
        self.attention_impl = attention_impl
        fairseq_adapter.use_python_attention_path(self)

    def fused_blocker(self, query: Tensor) -> Optional[str]:
        """Why this module cannot take the fused path for a query (tgt_len x bsz x embed_dim)
        of its device and dtype, or None: the fused kernels compute entmax(scale q k^T, mask) v
        and no more. A call the fused path does not serve (one that asks for the weights, an
        incremental decoding step, ...: `fairseq_adapter.fused_attention_inputs`) is no reason
        here: it takes the row-wise path whatever attention_impl says.
        """
        if self.normalizer.fused_alpha() is None:
            return (
                "the fused kernels compute sparsemax and alpha-entmax with alpha in (1, 2], "
                f"not {self.normalizer.spec.describe()}"
            )
        if self.normalizer.spec.device != "same":
            return f"--attention-device {self.normalizer.spec.device} moves the mapping"
        if self.dropout_module.p > 0 and (
            self.training or self.dropout_module.apply_during_inference
        ):
            # dropout applies to the weights after the mapping, which the kernels never form
            return f"attention dropout {self.dropout_module.p}: the fused kernels have no dropout"
        return fused_unsupported(query.device, query.dtype, self.head_dim)

    def _fused_forward(
        self, query, key, value, key_padding_mask, incremental_state, attn_mask, need
    ) -> Optional[Tensor]:
        """The attention's output by the fused path, or None where this call takes the
        row-wise path: attention_impl "rowwise", "auto" off CUDA or where `fused_blocker`
        objects, and under any attention_impl a call that asks for the weights (`need`:
        fairseq's decoder asks for its last layer's cross-attention, its alignment) or that
        `fairseq_adapter.fused_attention_inputs` does not serve (incremental decoding)."""
        if need or not use_fused(
            self.attention_impl,
            query.device,
            # "auto" asks only for CUDA tensors: on the CPU the row-wise path is taken unasked
            self.fused_blocker(query) if self.attention_impl != "rowwise" else None,
            option="--attention-impl",
        ):
            return None
        inputs = fairseq_adapter.fused_attention_inputs(
            self, query, key, value, key_padding_mask, incremental_state, attn_mask
        )
        if inputs is None:
            return None
        q, k, v, mask, causal = inputs
        if mask is not None and _a_query_sees_no_key(mask, causal):
            # the row-wise path's mappings raise on such a row (empty="error"); the kernels
            # would give it zeros
            raise ValueError(
                "a row has no unmasked position: there is nothing to attend to (check the "
                "padding mask)"
            )
        tgt_len, bsz, embed_dim = query.size()
        out = sparse_attention(
            q,
            k,
            v,
            alpha=self.normalizer.fused_alpha(),
            mask=mask,
            causal=causal,
            scale=self.scaling / self.normalizer.spec.params["gamma"],
            impl="fused",
        )  # bsz x heads x tgt_len x head_dim
        return self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim))

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if before_softmax:
            return super().forward(
                query,
                key,
                value,
                key_padding_mask=key_padding_mask,
                incremental_state=incremental_state,
                static_kv=static_kv,
                attn_mask=attn_mask,
                before_softmax=True,
            )
        fused = self._fused_forward(
            query,
            key,
            value,
            key_padding_mask,
            incremental_state,
            attn_mask,
            need_weights or need_head_weights,
        )
        if fused is not None:
            return fused, None
        tgt_len, bsz, embed_dim = query.size()
        heads = self.num_heads
        # scores, mask: bsz x heads x tgt_len x src_len; v: kv_bsz x 1 x heads x src_len x head_dim
        scores, mask, v = fairseq_adapter.masked_attention_scores(
            self, query, key, value, key_padding_mask, incremental_state, static_kv, attn_mask
        )
        kv_bsz, src_len = v.size(0), scores.size(-1)
        probs_float = self.normalizer(scores, mask).float()
        probs = self.dropout_module(probs_float.type_as(scores))

        # during beam search the cross-attention has one source (kv_bsz) per beam of queries
        probs = probs.view(kv_bsz, bsz // kv_bsz, heads, tgt_len, src_len)
        attn = torch.matmul(probs, v)  # kv_bsz x beam x heads x tgt_len x head_dim
        attn = attn.view(bsz, heads, tgt_len, self.head_dim).permute(2, 0, 1, 3)
        attn = self.out_proj(attn.reshape(tgt_len, bsz, embed_dim))

        attn_weights: Optional[Tensor] = None
        if need_weights or need_head_weights:
            attn_weights = probs_float.transpose(1, 0)  # heads x bsz x tgt_len x src_len
            if not need_head_weights:
                attn_weights = attn_weights.mean(dim=0)
        return attn, attn_weights
