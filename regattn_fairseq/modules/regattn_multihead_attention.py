"""fairseq's MultiheadAttention with its softmax replaced by an AttentionNormalizer."""

from typing import Dict, Optional, Tuple

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor

from regattn_fairseq import fairseq_adapter

from .attention_normalizer import AttentionNormalizer


class RegattnMultiheadAttention(MultiheadAttention):
    """Same projections, caching, masking and parameter names as fairseq's
    MultiheadAttention; only the score -> probability step differs.

    fairseq's forward has no hook for the normalizer, so we take its masked scores (through
    fairseq_adapter, which holds how) and finish the computation here."""

    def __init__(self, *args, normalizer: AttentionNormalizer, **kwargs):
        super().__init__(*args, **kwargs)
        self.normalizer = normalizer
        fairseq_adapter.use_python_attention_path(self)

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
