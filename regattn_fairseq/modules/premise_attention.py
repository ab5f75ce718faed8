"""Attention of the final hypothesis state over the premise states (Rocktäschel et al. 2016)."""

from typing import Optional

import torch
from torch import nn

from .attention_normalizer import AttentionNormalizer
from .attention_options import ContinuousSpec
from .continuous_context import ContinuousContext


class PremiseAttention(nn.Module):
    """scores = w . tanh(W_y Y + W_h h_N); probs = mapping(scores) over the premise;
    returns h* = tanh(W_p r + W_x h_N) with r = probs . Y, and probs.

    With `continuous`, r is continuous attention's E_p[V(t)] over the premise states (plus
    probs . Y with combine=sum) and the returned attention is the density's mass per premise
    token (`ContinuousContext`)."""

    def __init__(
        self,
        hidden_size: int,
        normalizer: AttentionNormalizer,
        continuous: Optional[ContinuousSpec] = None,
    ):
        super().__init__()
        self.premise_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # W_y
        self.hypothesis_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # W_h
        self.score = nn.Linear(hidden_size, 1, bias=False)  # w
        self.context_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # W_p
        self.final_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # W_x
        self.normalizer = normalizer
        self.continuous = (
            None if continuous is None else ContinuousContext(continuous, hidden_size, hidden_size)
        )

    def forward(self, premise_states, premise_mask, hypothesis_final):
        # premise_states: bsz x plen x hidden; premise_mask: bsz x plen, True at real tokens;
        # hypothesis_final: bsz x hidden
        if self.continuous is None or self.continuous.needs_discrete_attention:
            hidden = torch.tanh(
                self.premise_proj(premise_states)
                + self.hypothesis_proj(hypothesis_final).unsqueeze(1)
            )
            scores = self.score(hidden).squeeze(-1)
            probs = self.normalizer(scores, premise_mask).type_as(scores)
        else:
            probs = None
        if self.continuous is None:
            context = torch.bmm(probs.unsqueeze(1), premise_states).squeeze(1)
        else:
            context, probs = self.continuous(hypothesis_final, premise_states, premise_mask, probs)
        combined = torch.tanh(self.context_proj(context) + self.final_proj(hypothesis_final))
        return combined, probs
