"""max_Omega is the smoothed max whose gradient is the mapping (paper §2.2)."""

import pytest
import torch

from regattn import mappings
from regattn.mappings.smoothed_max import max_omega


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", mappings.NAMES)
def test_gradient_of_smoothed_max_is_the_mapping(name, dtype):
    x = torch.randn(4, 6, dtype=dtype, generator=torch.Generator().manual_seed(3)).requires_grad_()
    (grad,) = torch.autograd.grad(max_omega(name, x).sum(), x)
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(grad, mappings.build(name)(x).detach(), rtol=0, atol=1e-5)


def test_softmax_smoothed_max_is_log_sum_exp():
    x = torch.tensor([[0.3, -1.0, 2.0]], dtype=torch.float64)
    torch.testing.assert_close(
        max_omega("softmax", x, gamma=0.5), 0.5 * torch.logsumexp(x / 0.5, -1)
    )


@pytest.mark.parametrize(
    "name,params",
    [("entmax", {"alpha": 1.5, "gamma": 2.5}), ("entmax", {"alpha": 1.3, "gamma": 0.4})],
)
def test_gradient_is_the_mapping_at_a_temperature(name, params):
    """max_{y} y.x - gamma Omega(y) has the mapping at gamma as its gradient: gamma scales the
    Tsallis regularizer as it scales the others."""
    x = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    x.requires_grad_()
    (grad,) = torch.autograd.grad(max_omega(name, x, **params).sum(), x)
    torch.testing.assert_close(grad, mappings.build(name, **params)(x).detach(), rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", mappings.NAMES)
def test_masked_smoothed_max_is_that_of_the_unmasked_positions(name):
    """With a mask, Omega is that of the masked problem: fusedmax's chain skips the masked
    positions and oscarmax pairs only unmasked ones (before, the zeros at masked positions
    entered the total variation)."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 7, generator=g, dtype=torch.float64)
    mask = torch.tensor([True, False, True, True, False, True, True])
    params = {"fusedmax": {"lam": 0.3}, "oscarmax": {"lam": 0.1}}.get(name, {})
    got = max_omega(name, x, mask=mask.expand(3, 7), **params)
    torch.testing.assert_close(got, max_omega(name, x[:, mask], **params), rtol=0, atol=1e-12)


def test_a_regularizer_that_is_not_declared_is_an_error(monkeypatch):
    """A mapping's Omega comes from its declaration: an unknown one (or a control's None) is a
    ValueError naming it, never another mapping's regularizer."""
    toy = mappings.Declaration("toymax", mappings.Sparsemax, omega="no_such_omega")
    monkeypatch.setitem(mappings.DECLARATIONS, "toymax", toy)
    x = torch.randn(2, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="toymax.*no_such_omega"):
        max_omega("toymax", x)
    with pytest.raises(ValueError, match="uniform.*None"):
        max_omega("uniform", x)
