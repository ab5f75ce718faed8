"""float16/bfloat16: same dtype out, close to the float32 computation, backward works."""

import pytest
import torch
from mapping_helpers import NAMES, apply

# half inputs are computed in float32 and cast back, so outputs and gradients are float32
# results rounded to the low precision dtype: a few units of its epsilon.
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", NAMES)
def test_low_precision_matches_float32(name, dtype):
    g = torch.Generator().manual_seed(0)
    x = (2 * torch.randn(4, 3, 9, generator=g)).to(dtype)
    grad_out = torch.randn(4, 3, 9, generator=g).to(dtype)
    mask = torch.ones(4, 1, 9, dtype=torch.bool)
    mask[1, :, :3] = False

    x_low = x.clone().requires_grad_()
    y_low = apply(name, x_low, mask=mask)
    y_low.backward(grad_out)

    x32 = x.float().requires_grad_()
    y32 = apply(name, x32, mask=mask)
    y32.backward(grad_out.float())

    assert y_low.dtype == dtype and x_low.grad.dtype == dtype
    torch.testing.assert_close(y_low.float(), y32, rtol=0, atol=TOL[dtype])
    torch.testing.assert_close(x_low.grad.float(), x32.grad, rtol=0, atol=4 * TOL[dtype])
    assert (y_low[~mask.expand_as(y_low)] == 0).all()
