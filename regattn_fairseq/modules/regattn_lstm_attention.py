"""fairseq's LSTM attention layer (Luong "general" scores) with a configurable mapping, or
continuous attention over the source."""

from typing import Optional

import torch
from fairseq.models.lstm import AttentionLayer

from regattn import mappings

from .attention_normalizer import AttentionNormalizer
from .attention_options import ContinuousSpec
from .continuous_context import ContinuousContext


class RegattnLSTMAttentionLayer(AttentionLayer):
    """Keeps fairseq's `input_proj`/`output_proj` (same parameter names as the stock `lstm`);
    source padding is a mask for the mapping rather than -inf scores.

    With `continuous` the context is continuous attention's E_p[V(t)] (plus the discrete
    context with combine=sum), and the reported attention is the density's mass per source
    token (`ContinuousContext`) in evaluation, zeros in training (where fairseq drops it).

    `grad_surrogate = "softmax"` (a diagnostic, `--attention-grad-surrogate`): the weights are
    the mapping's, their gradient is softmax's at the same temperature (straight-through)."""

    def __init__(
        self,
        input_embed_dim,
        source_embed_dim,
        output_embed_dim,
        normalizer: AttentionNormalizer,
        bias=False,
        continuous: Optional[ContinuousSpec] = None,
    ):
        super().__init__(input_embed_dim, source_embed_dim, output_embed_dim, bias=bias)
        self.normalizer = normalizer
        self.grad_surrogate = None  # or "softmax", see the class docstring
        self._last_mask = None  # (encoder_padding_mask, its source mask), see _source_mask
        self.continuous = (
            None
            if continuous is None
            else ContinuousContext(continuous, input_embed_dim, source_embed_dim)
        )

    def _source_mask(self, encoder_padding_mask):
        """bsz x srclen, True at source tokens (None without padding), made once per source
        batch: LSTMDecoder passes the same padding mask object at every step, and continuous
        attention reuses what it derived from the mask object it saw last."""
        if encoder_padding_mask is None:
            return None
        last = self._last_mask
        if last is None or last[0] is not encoder_padding_mask:
            self._last_mask = (encoder_padding_mask, ~encoder_padding_mask.t())
        return self._last_mask[1]

    def forward(self, input, source_hids, encoder_padding_mask):
        # input: bsz x input_embed_dim; source_hids: srclen x bsz x source_embed_dim;
        # encoder_padding_mask: srclen x bsz, True at padding
        mask = self._source_mask(encoder_padding_mask)
        if self.continuous is None or self.continuous.needs_discrete_attention:
            scores = torch.einsum("sbd,bd->bs", source_hids, self.input_proj(input))
            probs = self.normalizer(scores, mask).type_as(scores)  # bsz x srclen
            if self.grad_surrogate == mappings.REFERENCE_MAPPING:  # softmax: dense
                gamma = self.normalizer.spec.params.get("gamma") or 1.0
                dense = mappings.softmax(scores, dim=-1, mask=mask, gamma=gamma)
                probs = probs.detach() + (dense - dense.detach())
        else:
            probs = None

        if self.continuous is None:
            context = torch.einsum("bs,sbd->bd", probs, source_hids)
        else:
            if mask is None:
                mask = source_hids.new_ones(source_hids.shape[:2], dtype=torch.bool).t()
            # fairseq's LSTMDecoder stores the reported attention of every step but drops it
            # in training: only evaluation computes it (training reports zeros)
            context, reported = self.continuous(
                input, source_hids.transpose(0, 1), mask, probs, report=not self.training
            )
            probs = reported if reported is not None else context.new_zeros(mask.shape)
        x = torch.tanh(self.output_proj(torch.cat((context, input), dim=1)))
        return x, probs.t()
