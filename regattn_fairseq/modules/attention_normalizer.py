"""The module that turns attention scores into probabilities in every regattn model."""
from typing import Optional

import torch
from torch import nn

from regattn import mappings

from .attention_options import AttentionSpec


class AttentionNormalizer(nn.Module):
    """Applies the mapping of `spec` over the last dim of scores, removing masked positions
    (mask True = may receive attention). With a learned alpha the scores must be laid out as
    (..., num_heads, tgt_len, src_len) and each head has its own alpha = 1 + sigmoid(z)
    (Correia et al. 2019); z starts at 0, i.e. alpha = 1.5."""

    def __init__(self, spec: AttentionSpec, num_heads: Optional[int] = None):
        super().__init__()
        self.spec = spec
        if spec.learned_alpha:
            if num_heads is None:
                raise ValueError("a learned alpha needs the number of heads")
            self.alpha_logit = nn.Parameter(torch.zeros(num_heads))
            self.mapping = None
        else:
            self.mapping = mappings.build(spec.name, **spec.params)

    def alpha(self) -> torch.Tensor:
        """The per-head alphas, shaped to broadcast over (..., heads, tgt_len, src_len)."""
        return 1 + torch.sigmoid(self.alpha_logit).view(-1, 1, 1)

    def _normalize(self, scores, mask):
        if self.mapping is None:
            alpha = self.alpha().to(scores.device)
            return mappings.entmax(scores, dim=-1, mask=mask, alpha=alpha)
        return self.mapping(scores, dim=-1, mask=mask)

    def forward(self, scores: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.spec.device == "cpu" and scores.device.type != "cpu":
            # the paper ran sort-based mappings on the CPU inside GPU training
            probs = self._normalize(scores.cpu(), None if mask is None else mask.cpu())
            return probs.to(scores.device)
        return self._normalize(scores, mask)

    def extra_repr(self):
        return f"{self.spec.describe()}"
