"""Continuous attention inside a model's attention layer: the density's parameters from the
layer's discrete attention (or a learned head), the context E_p[V(t)], and the attention the
layer reports (regattn.continuous does the mathematics)."""

from typing import Optional

import torch
from torch import nn

from regattn.continuous import ContinuousAttention, LearnedDensityHead, density_from_attention

from .attention_options import ContinuousSpec


class ContinuousContext(nn.Module):
    """The context vector of continuous attention for one query per row.

    Parameters
    ----------
    spec : ContinuousSpec
    query_dim, source_dim : int
        sizes of the query (used by the learned head) and of the source states.
    """

    def __init__(self, spec: ContinuousSpec, query_dim: int, source_dim: int):
        super().__init__()
        self.spec = spec
        self.attention = ContinuousAttention(spec.num_basis, spec.density, ridge=spec.ridge)
        self.head = (
            LearnedDensityHead(query_dim, source_dim) if spec.params == "learned_head" else None
        )

    @property
    def needs_discrete_attention(self) -> bool:
        """Whether forward needs the layer's discrete attention probabilities."""
        return self.head is None

    def forward(
        self,
        query: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        probs: Optional[torch.Tensor],
        report: bool = True,
    ):
        """Continuous attention of `query` over `values`.

        Parameters
        ----------
        query : torch.Tensor
            bsz x query_dim.
        values : torch.Tensor
            bsz x srclen x source_dim, the source states.
        mask : torch.Tensor
            bool bsz x srclen, True at source tokens.
        probs : torch.Tensor or None
            bsz x srclen, the layer's discrete attention (None with the learned head).
        report : bool
            whether to compute the attention to report (see Returns).

        Returns
        -------
        (torch.Tensor, torch.Tensor or None)
            the context (bsz x source_dim) and the attention the layer reports
            (bsz x srclen; None without `report`): the density's mass on each token's cell
            of [0, 1] (`regattn.continuous.token_masses`), for plots and statistics; it
            carries no gradient (the context does not depend on it).
        """
        if self.head is None:
            mu, sigma_sq = density_from_attention(probs, mask)
        else:
            mu, sigma_sq = self.head(query, values, mask)
        out = self.attention(values, mask, mu, sigma_sq, report_token_masses=report)
        context = out.context
        if self.spec.combine == "sum":
            context = context + torch.bmm(probs.unsqueeze(1), values).squeeze(1)
        return context, out.token_masses
