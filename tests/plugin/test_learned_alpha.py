"""Learned alpha = 1.01 + 0.99 * sigmoid(z) lies in [1.01, 2] for any z, in float32 and
bfloat16, so entmax stays defined and its gradients finite however far training pushes z."""

import pytest
import torch
from fairseq_helpers import MODEL_ARGS, build_model, translation_batch

from regattn_fairseq.models.regattn_transformer import RegattnTransformerConfig
from regattn_fairseq.modules import AttentionNormalizer, attention_spec_from_cfg
from regattn_fairseq.modules.attention_normalizer import ALPHA_INIT

LOWEST = torch.tensor(1.01)  # float32(1.01), the smallest alpha
HEADS = 6


def _normalizer(logits=None, dtype=torch.float32, gamma=None):
    cfg = RegattnTransformerConfig(
        attention="entmax", attention_alpha="learned", attention_gamma=gamma
    )
    normalizer = AttentionNormalizer(
        attention_spec_from_cfg(cfg, "regattn_transformer", allow_learned_alpha=True), HEADS
    )
    if logits is not None:
        with torch.no_grad():
            normalizer.alpha_logit.copy_(torch.tensor(logits))
    return normalizer.to(dtype)


def _extreme_logits(dtype):
    info = torch.finfo(dtype)
    return [-1e4, 1e4, info.min, info.max, -30.0, 0.0][:HEADS]


def test_alpha_starts_at_one_and_a_half():
    torch.testing.assert_close(_normalizer().alpha().flatten(), torch.full((HEADS,), ALPHA_INIT))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_alpha_is_within_the_bounds_for_extreme_logits(dtype):
    alpha = _normalizer(_extreme_logits(dtype), dtype).alpha().flatten()
    assert alpha.dtype == torch.float32  # computed in float32 whatever z's dtype
    assert (alpha >= LOWEST).all() and (alpha <= 2).all()
    assert alpha[0] == LOWEST and alpha[1] == 2
    # the mappings cast alpha to the scores' dtype: it must stay above 1 there too
    assert (alpha.to(torch.bfloat16) > 1).all() and (alpha.to(torch.float16) > 1).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_and_backward_are_finite_for_extreme_logits(dtype):
    normalizer = _normalizer(_extreme_logits(dtype), dtype)
    torch.manual_seed(0)
    scores = torch.randn(2, HEADS, 3, 7).to(dtype).requires_grad_()
    mask = torch.ones(2, HEADS, 3, 7, dtype=torch.bool)
    mask[0, :, :, :2] = False
    probs = normalizer(scores, mask)
    assert probs.dtype == dtype and torch.isfinite(probs).all()
    torch.testing.assert_close(
        probs.float().sum(-1),
        torch.ones(2, HEADS, 3),
        rtol=0,
        atol=2e-2 if dtype == torch.bfloat16 else 1e-5,
    )
    (probs.float() * torch.randn(probs.shape)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.isfinite(normalizer.alpha_logit.grad).all()


def test_transformer_with_extreme_learned_alphas_trains(translation_data):
    torch.manual_seed(0)
    task, model = build_model(
        translation_data,
        MODEL_ARGS["regattn_transformer"],
        ["--attention", "entmax", "--attention-alpha", "learned"],
    )
    alpha_logits = [p for n, p in model.named_parameters() if n.endswith("alpha_logit")]
    with torch.no_grad():
        for z in alpha_logits:
            z.copy_(torch.tensor([-1e4, 1e4, -1e4, 0.0]))
    model.train()
    logits, _ = model(**translation_batch(task, split="train", size=8)["net_input"])
    assert torch.isfinite(logits).all()
    logits.logsumexp(-1).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert all(z.grad is not None for z in alpha_logits)


def test_learned_alpha_takes_the_temperature():
    """--attention-gamma reaches a learned-alpha entmax: entmax(s / gamma) with each head's
    alpha (the learned path calls the function itself, not a built module)."""
    logits = [-2.0, -1.0, 0.0, 0.5, 1.0, 3.0]
    scores = torch.randn(2, HEADS, 3, 7, generator=torch.Generator().manual_seed(1))
    hot, cold = _normalizer(logits, gamma=2.0), _normalizer(logits)
    torch.testing.assert_close(hot(scores), cold(scores / 2.0), rtol=0, atol=1e-6)
    assert not torch.allclose(hot(scores), cold(scores), atol=1e-3)


def test_the_rows_read_each_heads_alpha_from_a_checkpoint(translation_data, tmp_path):
    """`train.learned_alphas` reads what each head learned from a fairseq checkpoint of the
    Transformer, module by module in the model's order, named; a model without learned α has
    none (the rows' ``attention.alpha``, the E2 figure)."""
    from regattn.mappings.learned_alpha import alpha_from_logit
    from regattn_fairseq.experiments.train.train import learned_alphas

    task, model = build_model(
        translation_data,
        MODEL_ARGS["regattn_transformer"],
        ["--attention", "entmax", "--attention-alpha", "learned"],
    )
    named = [(n, p) for n, p in model.named_parameters() if n.endswith("alpha_logit")]
    with torch.no_grad():
        for i, (_, z) in enumerate(named):
            z.copy_(torch.linspace(-2.0, 2.0, z.numel()) + i)
    checkpoint = tmp_path / "checkpoint_best.pt"
    torch.save({"model": model.state_dict()}, checkpoint)
    learned = learned_alphas(checkpoint)
    layers = len(model.encoder.layers)
    assert learned["alpha_layers"][0] == "encoder 0 self_attn"
    assert learned["alpha_layers"][layers : layers + 2] == [
        "decoder 0 self_attn",
        "decoder 0 encoder_attn",
    ]
    assert len(learned["alpha"]) == len(named) == 3 * layers
    for row, (_, z) in zip(learned["alpha"], named, strict=True):
        assert row == pytest.approx(alpha_from_logit(z.detach()).tolist(), abs=1e-4)
    _, softmax_model = build_model(translation_data, MODEL_ARGS["regattn_transformer"])
    torch.save({"model": softmax_model.state_dict()}, checkpoint)
    assert learned_alphas(checkpoint) is None
