"""The module that turns attention scores into probabilities in every regattn model."""

import math
from typing import Optional

import torch
from torch import nn

from regattn import mappings

from .attention_options import AttentionSpec

# Learned alpha = ALPHA_MIN + (ALPHA_MAX - ALPHA_MIN) * sigmoid(z): within [1.01, 2] as in
# Correia et al. 2019. The margin above 1 keeps entmax defined (alpha = 1 is softmax, which
# entmax's tensor alpha rejects) and its alpha-gradient, which divides by (alpha - 1)^2, bounded.
ALPHA_MIN, ALPHA_MAX = 1.01, 2.0
ALPHA_INIT = 1.5


def alpha_logit_for(alpha: float) -> float:
    """The z for which the learned alpha equals `alpha` (in (ALPHA_MIN, ALPHA_MAX))."""
    s = (alpha - ALPHA_MIN) / (ALPHA_MAX - ALPHA_MIN)
    return math.log(s / (1 - s))


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
    range); z starts at logit(0.49 / 0.99) = ln(0.98), i.e. alpha = 1.5.

    alpha is computed in float32 whatever the parameter's dtype (--fp16/--bf16 models hold z in
    half precision): its smallest value, float32(1.01), stays above 1 when the mapping casts
    alpha to the scores' dtype (bfloat16: 1.0078; float16: 1.0098), so alpha never reaches 1
    however far z goes."""

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
        s = torch.sigmoid(self.alpha_logit.float())
        return (ALPHA_MIN + (ALPHA_MAX - ALPHA_MIN) * s).view(-1, 1, 1)

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
