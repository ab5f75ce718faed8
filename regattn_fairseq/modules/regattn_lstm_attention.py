"""fairseq's LSTM attention layer (Luong "general" scores) with a configurable mapping."""

import torch
from fairseq.models.lstm import AttentionLayer

from .attention_normalizer import AttentionNormalizer


class RegattnLSTMAttentionLayer(AttentionLayer):
    """Keeps fairseq's `input_proj`/`output_proj` (same parameter names as the stock `lstm`);
    source padding is a mask for the mapping rather than -inf scores."""

    def __init__(
        self,
        input_embed_dim,
        source_embed_dim,
        output_embed_dim,
        normalizer: AttentionNormalizer,
        bias=False,
    ):
        super().__init__(input_embed_dim, source_embed_dim, output_embed_dim, bias=bias)
        self.normalizer = normalizer

    def forward(self, input, source_hids, encoder_padding_mask):
        # input: bsz x input_embed_dim; source_hids: srclen x bsz x source_embed_dim;
        # encoder_padding_mask: srclen x bsz, True at padding
        scores = torch.einsum("sbd,bd->bs", source_hids, self.input_proj(input))
        mask = None if encoder_padding_mask is None else ~encoder_padding_mask.t()
        probs = self.normalizer(scores, mask).type_as(scores)  # bsz x srclen

        context = torch.einsum("bs,sbd->bd", probs, source_hids)
        x = torch.tanh(self.output_proj(torch.cat((context, input), dim=1)))
        return x, probs.t()
