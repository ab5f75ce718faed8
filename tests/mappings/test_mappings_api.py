"""The public API: NAMES and build()."""

import numpy as np
import pytest
import torch
from mapping_helpers import NAMES, apply
from mapping_oracles import oracle

from regattn import mappings


def test_names_lists_every_mapping_in_order():
    assert tuple(mappings.NAMES) == NAMES


BUILD_CASES = [
    ("softmax", {"gamma": 0.5}),
    ("sparsemax", {}),
    ("sparsemax", {"gamma": 2.0}),
    ("sq_pnorm_max", {"p": 1.3, "gamma": 0.8}),
    ("fusedmax", {"lam": 0.4}),
    ("oscarmax", {"lam": 0.05, "gamma": 1.5}),
    ("entmax", {"alpha": 1.7}),
    ("entmax", {"alpha": 1.5, "gamma": 3.0}),
]


@pytest.mark.parametrize("name,params", BUILD_CASES)
def test_built_module_equals_function(name, params):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 3, generator=g)
    mask = torch.tensor([[1, 1, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1]], dtype=torch.bool).unsqueeze(-1)
    module = mappings.build(name, **params)
    assert isinstance(module, torch.nn.Module)
    torch.testing.assert_close(
        module(x, dim=1, mask=mask), apply(name, x, dim=1, mask=mask, **params), rtol=0, atol=0
    )
    torch.testing.assert_close(module(x), apply(name, x, **params), rtol=0, atol=0)


def test_build_uses_paper_defaults():
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    for name in NAMES:
        torch.testing.assert_close(
            mappings.build(name)(x), apply(name, x), rtol=0, atol=0, msg=name
        )


@pytest.mark.parametrize("shape", [(7,), (5, 9), (2, 3, 17)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_on_plain_rows_equals_the_general_path(shape, dtype):
    # unmasked contiguous rows along the last dim skip to_rows (plain_rows) and call the CPU
    # kernel on the scores as they are; the same rows along another dim take to_rows: the
    # same kernel on the same values, so the same bits, forward and backward
    generator = torch.Generator().manual_seed(len(shape))
    x = (3 * torch.randn(shape, generator=generator, dtype=dtype)).requires_grad_()
    grad = torch.randn(shape, generator=generator, dtype=dtype)
    y = mappings.softmax(x, gamma=0.7)
    (gx,) = torch.autograd.grad(y, x, grad)
    xt = x.detach().unsqueeze(0).transpose(0, -1).requires_grad_()  # the rows along dim 0
    yt = mappings.softmax(xt, dim=0, gamma=0.7)
    (gt,) = torch.autograd.grad(yt, xt, grad.unsqueeze(0).transpose(0, -1))
    assert torch.equal(yt.transpose(0, -1).squeeze(0), y.detach())
    assert torch.equal(gt.transpose(0, -1).squeeze(0), gx)
    with pytest.raises(ValueError, match="empty must be"):
        mappings.softmax(x, empty="nothing")
    with pytest.raises(ValueError, match="NaN"):
        mappings.softmax(torch.full(shape, float("nan"), dtype=dtype))


ENTMAX_ALPHAS = [
    (name, d.entmax_alpha)
    for name, d in mappings.DECLARATIONS.items()
    if d.entmax_alpha is not None
]


def test_the_declared_entmax_alphas():
    assert ENTMAX_ALPHAS == [("softmax", 1.0), ("sparsemax", 2.0)]


@pytest.mark.parametrize("name,alpha", ENTMAX_ALPHAS)
@pytest.mark.parametrize("gamma", [1.0, 0.5])
def test_a_declared_entmax_alpha_is_that_alpha_entmax(name, alpha, gamma):
    """`Declaration.entmax_alpha` (what the fused attention computes a mapping as) is true:
    the mapping is alpha-entmax's oracle at that alpha (a convex solver; numpy's softmax for
    alpha = 1)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 7, generator=g, dtype=torch.float64) * 3
    mask = torch.rand(4, 7, generator=g) > 0.3
    mask[:, 0] = True
    got = mappings.build(name, gamma=gamma)(x, mask=mask)
    expected = np.stack(
        [
            oracle("entmax", s, mask=m, alpha=alpha, gamma=gamma)
            for s, m in zip(x.numpy(), mask.numpy(), strict=True)
        ]
    )
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-6)
