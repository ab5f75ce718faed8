"""Bad inputs raise ValueError with a message that names the problem."""

import pytest
import torch
from mapping_helpers import GAMMA_NAMES, NAMES, apply

from regattn import mappings

X = torch.tensor([[0.5, -1.0, 2.0, 0.0]])


@pytest.mark.parametrize("gamma", [0.0, -1.0])
@pytest.mark.parametrize("name", GAMMA_NAMES)
def test_nonpositive_gamma_is_rejected(name, gamma):
    with pytest.raises(ValueError, match="gamma"):
        apply(name, X, gamma=gamma)


@pytest.mark.parametrize("name", ["fusedmax", "oscarmax"])
def test_negative_lam_is_rejected(name):
    with pytest.raises(ValueError, match="lam"):
        apply(name, X, lam=-0.1)


@pytest.mark.parametrize("p", [1.0, 0.5, 2.5, float("nan")])
def test_p_outside_1_2_is_rejected(p):
    with pytest.raises(ValueError, match=r"\bp\b"):
        apply("sq_pnorm_max", X, p=p)


@pytest.mark.parametrize("alpha", [0.5, 0.999, -2.0], ids=str)
def test_alpha_below_1_is_rejected(alpha):
    with pytest.raises(ValueError, match="alpha"):
        apply("entmax", X, alpha=alpha)


def test_tensor_alpha_with_an_entry_below_1_is_rejected():
    with pytest.raises(ValueError, match="alpha"):
        apply("entmax", X.expand(3, 4), alpha=torch.tensor([[1.5], [0.8], [2.0]]))


@pytest.mark.parametrize("name", NAMES)
def test_nan_at_an_unmasked_position_is_rejected(name):
    x = X.clone()
    x[0, 2] = float("nan")
    with pytest.raises(ValueError, match="(?i)nan"):
        apply(name, x)
    with pytest.raises(ValueError, match="(?i)nan"):
        apply(name, x, mask=torch.tensor([[True, False, True, True]]))


@pytest.mark.parametrize("name", NAMES)
def test_nan_at_a_masked_position_is_accepted(name):
    x = X.clone()
    x[0, 2] = float("nan")
    y = apply(name, x, mask=torch.tensor([[True, True, False, True]]))
    assert torch.isfinite(y).all() and y[0, 2] == 0


@pytest.mark.parametrize("name", NAMES)
def test_row_without_unmasked_position_is_rejected(name):
    x = X.expand(2, 4)
    mask = torch.tensor([[True, True, False, False], [False, False, False, False]])
    with pytest.raises(ValueError, match="(?i)mask"):
        apply(name, x, mask=mask)


def test_build_rejects_unknown_name():
    with pytest.raises(ValueError, match="bogusmax"):
        mappings.build("bogusmax")


@pytest.mark.parametrize(
    "name,param",
    [("softmax", "lam"), ("sparsemax", "p"), ("fusedmax", "alpha"), ("entmax", "lam")],
)
def test_build_rejects_unknown_param(name, param):
    with pytest.raises(ValueError, match=param):
        mappings.build(name, **{param: 1.5})


@pytest.mark.parametrize(
    "name,params,word",
    [
        ("sparsemax", {"gamma": 0.0}, "gamma"),
        ("fusedmax", {"lam": -1.0}, "lam"),
        ("sq_pnorm_max", {"p": 3.0}, r"\bp\b"),
        ("entmax", {"alpha": 0.5}, "alpha"),
    ],
)
def test_build_rejects_bad_param_values(name, params, word):
    with pytest.raises(ValueError, match=word):
        mappings.build(name, **params)(X)
