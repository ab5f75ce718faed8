"""fairseq's MultiheadAttention with its softmax replaced by an AttentionNormalizer."""
from typing import Dict, Optional, Tuple

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .attention_normalizer import AttentionNormalizer


class RegattnMultiheadAttention(MultiheadAttention):
    """Same projections, caching, masking and parameter names as fairseq's
    MultiheadAttention; only the score -> probability step differs.

    fairseq's forward has no hook for the normalizer, so we take its masked scores
    (`before_softmax=True`) and finish the computation here."""

    def __init__(self, *args, normalizer: AttentionNormalizer, **kwargs):
        super().__init__(*args, **kwargs)
        self.normalizer = normalizer
        # Otherwise forward() may return F.multi_head_attention_forward (PyTorch's softmax)
        # during training and would ignore before_softmax.
        self._set_skip_embed_dim_check()

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
        scores, v = super().forward(
            query, key, value, key_padding_mask=key_padding_mask,
            incremental_state=incremental_state, static_kv=static_kv,
            attn_mask=attn_mask, before_softmax=True,
        )
        if before_softmax:
            return scores, v
        tgt_len, bsz, embed_dim = query.size()
        src_len = scores.size(-1)
        heads = self.num_heads

        # fairseq marks excluded positions (key padding, future positions) with -inf; the
        # mappings take them as a mask instead, since -inf would turn fusedmax/oscarmax NaN.
        mask = scores != float("-inf")
        scores = scores.masked_fill(~mask, 0.0)
        probs_float = self.normalizer(
            scores.view(bsz, heads, tgt_len, src_len), mask.view(bsz, heads, tgt_len, src_len)
        ).float()
        probs = self.dropout_module(probs_float.type_as(scores))

        # During beam search the cross-attention keeps one copy of the source per sentence
        # (kv_bsz) for bsz = kv_bsz * beam queries.
        kv_bsz = v.size(0) // heads
        probs = probs.view(kv_bsz, bsz // kv_bsz, heads, tgt_len, src_len)
        v = v.view(kv_bsz, 1, heads, src_len, self.head_dim)
        attn = torch.matmul(probs, v)  # kv_bsz x beam x heads x tgt_len x head_dim
        attn = attn.view(bsz, heads, tgt_len, self.head_dim).permute(2, 0, 1, 3)
        attn = self.out_proj(attn.reshape(tgt_len, bsz, embed_dim))

        attn_weights: Optional[Tensor] = None
        if need_weights or need_head_weights:
            attn_weights = probs_float.transpose(1, 0)  # heads x bsz x tgt_len x src_len
            if not need_head_weights:
                attn_weights = attn_weights.mean(dim=0)
        return attn, attn_weights
