"""The module that turns attention scores into probabilities in every regattn model."""

from typing import Optional

import torch
from torch import nn

from regattn import attention, mappings
from regattn.mappings.learned_alpha import ALPHA_INIT, alpha_from_logit, alpha_logit_for

from .attention_options import AttentionSpec


def offloaded(normalize, scores: torch.Tensor, mask: Optional[torch.Tensor], device):
    """normalize(scores, mask) computed on `device` (--attention-device cpu: the paper ran
    its sort-based mappings on the CPU inside GPU training), the result copied back to the
    scores' device. The copies are differentiable: gradients flow back to `scores` (and to
    anything `normalize` closes over, e.g. a learned alpha) on their own device.
    """
    device = torch.device(device)
    probs = normalize(scores.to(device), None if mask is None else mask.to(device))
    return probs.to(scores.device)


class AttentionNormalizer(nn.Module):
    """Applies the mapping of `spec` over the last dim of scores, removing masked positions
    (mask True = may receive attention). With a learned alpha the scores must be laid out as
    (..., num_heads, tgt_len, src_len) and each head has its own
    alpha = 1.01 + 0.99 * sigmoid(z), in [1.01, 2] (Correia et al. 2019 clamp alpha to that
    range); z starts at logit(0.49 / 0.99) = ln(0.98), i.e. alpha = 1.5. The parameterization,
    shared with the `transformers` backend, is regattn.mappings.learned_alpha (alpha in float32
    whatever z's dtype, so --fp16/--bf16 models never reach alpha = 1)."""

    def __init__(self, spec: AttentionSpec, num_heads: Optional[int] = None):
        super().__init__()
        self.spec = spec
        if spec.learned_alpha:
            if num_heads is None:
                raise ValueError("a learned alpha needs the number of heads")
            self.alpha_logit = nn.Parameter(torch.full((num_heads,), alpha_logit_for(ALPHA_INIT)))
            self.mapping = None
        else:
            self.mapping = mappings.build(spec.name, **spec.params)

    def alpha(self) -> torch.Tensor:
        """The per-head alphas in float32, shaped to broadcast over (..., heads, tgt, src)."""
        return alpha_from_logit(self.alpha_logit).view(-1, 1, 1)

    def fused_alpha(self):
        """The alpha with which `regattn.attention.sparse_attention` computes this mapping
        (the learned alphas, one per head, differentiable), or None where it computes another
        mapping. Its temperature is spec.params["gamma"] (entmax(s; alpha, gamma) =
        entmax(s / gamma; alpha)).
        """
        if self.mapping is None:
            return alpha_from_logit(self.alpha_logit)
        return attention.fused_alpha(self.spec.name, self.spec.params)

    def _normalize(self, scores, mask):
        if self.mapping is None:
            alpha = self.alpha().to(scores.device)
            return mappings.entmax(
                scores, dim=-1, mask=mask, alpha=alpha, gamma=self.spec.params["gamma"]
            )
        return self.mapping(scores, dim=-1, mask=mask)

    def forward(self, scores: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.spec.device == "cpu" and scores.device.type != "cpu":
            return offloaded(self._normalize, scores, mask, "cpu")
        return self._normalize(scores, mask)

    def extra_repr(self):
        return f"{self.spec.describe()}"
