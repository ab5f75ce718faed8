"""The plugin's AttentionNormalizer takes fairseq's -inf masking as it comes (issue #50): scores
with -inf at the excluded positions (fairseq's convention for key padding, the future mask and
a -inf attn_mask) give what the boolean mask gives, for every mapping, the attention-free
control (uniform over the prefix a decoder may see) and a learned alpha, with zero gradient at
those positions."""

import pytest
import torch

from regattn import mappings
from regattn_fairseq.models.regattn_transformer import RegattnTransformerConfig
from regattn_fairseq.modules import AttentionNormalizer, attention_spec_from_cfg

HEADS = 2


def _normalizer(name, learned=False):
    cfg = RegattnTransformerConfig(attention=name, attention_alpha="learned" if learned else None)
    spec = attention_spec_from_cfg(cfg, "regattn_transformer", allow_learned_alpha=learned)
    return AttentionNormalizer(spec, HEADS)


def _scores():
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(2, HEADS, 3, 5, generator=g)  # bsz x heads x tgt x src
    future = torch.ones(3, 5, dtype=torch.bool).tril(diagonal=2)
    padding = torch.tensor([[True] * 5, [True, True, True, True, False]])[:, None, None, :]
    return scores, future & padding


@pytest.mark.parametrize(
    "name, learned",
    [(name, False) for name in (*mappings.NAMES, *mappings.CONTROLS)] + [("entmax", True)],
)
def test_normalizer_takes_neg_inf_scores_as_masked(name, learned):
    normalizer = _normalizer(name, learned)
    scores, mask = _scores()
    with_mask = scores.clone().requires_grad_()
    expected = normalizer(with_mask, mask)
    weights = torch.linspace(-1, 1, expected.numel()).view_as(expected)
    (expected * weights).sum().backward()
    with_inf = scores.masked_fill(~mask, float("-inf")).requires_grad_()
    got = normalizer(with_inf, None)
    (got * weights).sum().backward()
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(with_inf.grad, with_mask.grad, rtol=0, atol=1e-6)
    assert (got[~mask.expand_as(got)] == 0).all()
    assert (with_inf.grad[~mask.expand_as(got)] == 0).all()
