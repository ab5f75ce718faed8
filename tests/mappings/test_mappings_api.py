"""The public API: NAMES and build()."""

import pytest
import torch
from mapping_helpers import NAMES, apply

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
