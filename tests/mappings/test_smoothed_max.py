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
