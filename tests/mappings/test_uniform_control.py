"""The attention-free control `uniform`: 1/n on the unmasked positions, against its two
oracles (counting, and the limit gamma -> infinity of the mappings), with a zero gradient that
stays in the graph, and the mappings' checks of its input."""

import pytest
import torch

from regattn import mappings


def _case(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 7, generator=g, dtype=torch.float64) * 3
    mask = torch.rand(6, 7, generator=g) > 0.4
    mask[:, 0] = True
    return x, mask


def test_uniform_is_one_over_the_unmasked_count():
    x, mask = _case()
    y = mappings.uniform(x, mask=mask)
    expected = mask.double() / mask.sum(-1, keepdim=True)
    assert torch.equal(y, expected)
    assert torch.equal(mappings.uniform(x), torch.full_like(x, 1 / 7))


def test_uniform_is_the_limit_of_every_mapping_as_gamma_grows():
    # once spread / gamma < 1/n every position is in sparsemax's support, where
    # P_simplex(x / gamma) = 1/n + (x - mean x) / gamma: uniform plus an O(1/gamma) term; the
    # other mappings approach it too
    x, mask = _case(1)
    y = mappings.uniform(x, mask=mask)
    gamma = 10 * 7 * float(x.max() - x.min())
    n = mask.sum(-1, keepdim=True)
    mean = (x * mask).sum(-1, keepdim=True) / n
    exact = torch.where(mask, y + (x - mean) / gamma, 0.0)
    assert torch.allclose(mappings.sparsemax(x, mask=mask, gamma=gamma), exact, atol=1e-12)
    for name in ("softmax", "sq_pnorm_max", "fusedmax", "oscarmax", "entmax"):
        far = mappings.build(name, gamma=1e7)(x, mask=mask)
        assert torch.allclose(far, y, atol=1e-5), name


def test_uniform_gradient_is_zero_and_reaches_the_scores():
    x, mask = _case(2)
    x.requires_grad_(True)
    y = mappings.uniform(x, mask=mask)
    (y * torch.randn_like(y)).sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.zeros_like(x))
    assert torch.autograd.gradcheck(lambda t: mappings.uniform(t, mask=mask), (x,))


def test_uniform_module_and_checks():
    module = mappings.build("uniform", empty="zero")
    assert mappings.parameters_of("uniform") == ()
    assert "uniform" not in mappings.NAMES and "uniform" in mappings.CONTROL_NAMES
    empty_row = torch.tensor([[False, False], [True, False]])
    assert torch.equal(
        module(torch.zeros(2, 2), mask=empty_row), torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    )
    with pytest.raises(ValueError, match="no unmasked position"):
        mappings.uniform(torch.zeros(2, 2), mask=empty_row)
    with pytest.raises(ValueError, match="NaN"):
        mappings.uniform(torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="takes no parameter 'gamma'"):
        mappings.build("uniform", gamma=2.0)


def test_uniform_takes_neg_inf_as_masked_like_every_mapping():
    x, mask = _case(3)
    scores = x.masked_fill(~mask, float("-inf"))
    assert torch.equal(mappings.uniform(scores), mappings.uniform(x, mask=mask))
