"""--attention-device cpu: the device -> CPU -> device copy around the mapping, driven
without a GPU (the copy function takes its target device; the normalize function records
what it saw)."""

import torch

from regattn import mappings
from regattn_fairseq.modules.attention_normalizer import offloaded


def test_offload_computes_on_the_target_device_and_gradients_flow_back():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 7, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 3, 7, generator=g) > 0.3
    mask[..., 0] = True
    grad = torch.randn(2, 3, 7, generator=g, dtype=torch.float64)
    seen = []

    def normalize(s, m):
        seen.append((s.device, None if m is None else m.device))
        return mappings.fusedmax(s, mask=m, lam=0.2)

    for m in (mask, None):
        leaf = scores.clone().requires_grad_()
        y = offloaded(normalize, leaf, m, "cpu")
        y.backward(grad)
        direct = scores.clone().requires_grad_()
        mappings.fusedmax(direct, mask=m, lam=0.2).backward(grad)
        assert y.device == leaf.device
        torch.testing.assert_close(y, mappings.fusedmax(scores, mask=m, lam=0.2))
        torch.testing.assert_close(leaf.grad, direct.grad)
    assert seen == [(torch.device("cpu"), torch.device("cpu")), (torch.device("cpu"), None)]


def test_offload_gradient_reaches_parameters_of_the_normalizer():
    logit = torch.zeros(3, 1, 1, requires_grad=True)
    scores = torch.randn(2, 3, 4, 6, requires_grad=True)

    def normalize(s, m):
        alpha = (1.01 + 0.99 * torch.sigmoid(logit)).to(s.device)
        return mappings.entmax(s, mask=m, alpha=alpha)

    offloaded(normalize, scores, None, torch.device("cpu")).pow(2).sum().backward()
    assert logit.grad is not None and logit.grad.abs().sum() > 0
    assert scores.grad is not None and scores.grad.abs().sum() > 0
