"""regattn.compat.entmax has entmax 1.3's public names, with its signatures and defaults
(read from the installed, pinned entmax), and computes what entmax computes; plus what it
adds: `k` never changes a result, `return_support_size`, errors instead of NaN, and a
gradient for a tensor alpha in EntmaxBisectLoss."""

import importlib.metadata
import inspect

import pytest
import torch

from regattn.compat import entmax as E

entmax = pytest.importorskip("entmax", reason="entmax==1.3 (requirements.txt) is not installed")
if importlib.metadata.version("entmax") != "1.3":
    pytest.fail("requirements.txt pins entmax==1.3", pytrace=False)

PUBLIC = sorted(
    name for name in vars(entmax) if not name.startswith("_") and callable(getattr(entmax, name))
)
ADDED = {"return_support_size"}  # entmax's later releases


def test_every_public_name_of_entmax_is_here():
    assert len(PUBLIC) == 22
    assert [name for name in PUBLIC if not hasattr(E, name)] == []
    assert sorted(E.__all__) == PUBLIC


@pytest.mark.parametrize("name", PUBLIC)
def test_signatures_and_defaults_are_entmaxs(name):
    def params(obj):
        return [
            (p.name, p.default)
            for p in inspect.signature(obj).parameters.values()
            if p.name not in ADDED
        ]

    theirs = getattr(entmax, name)
    assert params(getattr(E, name)) == params(theirs)


def _x(seed=0, shape=(5, 7)):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


CALLS = [
    ("sparsemax", {}),
    ("entmax15", {}),
    ("sparsemax_bisect", {}),
    ("entmax_bisect", {"alpha": 1.3}),
    ("entmax_bisect", {"alpha": 2.5}),
    ("normmax_bisect", {"alpha": 2}),
    ("normmax_bisect", {"alpha": 4.0}),
    ("budget_bisect", {"budget": 2}),
]


@pytest.mark.parametrize("name, kwargs", CALLS)
@pytest.mark.parametrize("dim", [0, 1])
def test_values_match_entmax(name, kwargs, dim):
    x = _x(dim) * 2
    ours = getattr(E, name)(x, dim=dim, **kwargs)
    theirs = getattr(entmax, name)(x, dim=dim, **kwargs)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-7)


LOSSES = [
    ("SparsemaxLoss", {}),
    ("Entmax15Loss", {}),
    ("SparsemaxBisectLoss", {}),
    ("EntmaxBisectLoss", {"alpha": 1.7}),
    ("NormmaxBisectLoss", {"alpha": 3}),
]


@pytest.mark.parametrize("name, kwargs", LOSSES)
@pytest.mark.parametrize("reduction", ["none", "sum", "elementwise_mean"])
def test_losses_match_entmax(name, kwargs, reduction):
    x = _x(3, (6, 5)).requires_grad_()
    target = torch.tensor([0, 4, 2, 2, 1, 3])
    ours = getattr(E, name)(ignore_index=2, reduction=reduction, **kwargs)(x, target)
    theirs = getattr(entmax, name)(ignore_index=2, reduction=reduction, **kwargs)(x, target)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-7)
    (ours_grad,) = torch.autograd.grad(ours.sum(), x)
    (theirs_grad,) = torch.autograd.grad(theirs.sum(), x)
    torch.testing.assert_close(ours_grad, theirs_grad, rtol=0, atol=1e-7)


def test_k_never_changes_a_result_and_support_sizes():
    x = _x(4, (4, 50)) * 3
    for fn in (E.sparsemax, E.entmax15):
        p = fn(x)
        for k in (1, 3, 100):
            assert torch.equal(fn(x, k=k), p)
        q, support = fn(x, return_support_size=True)
        assert torch.equal(q, p) and torch.equal(support, (p > 0).sum(-1, keepdim=True))
    assert torch.equal(
        E.Entmax15Loss(k=2)(x, torch.zeros(4, dtype=torch.long)),
        E.Entmax15Loss(k=None)(x, torch.zeros(4, dtype=torch.long)),
    )
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="k must be"):
            E.sparsemax(x, k=bad)


def test_errors_instead_of_nan():
    x = _x(5)
    with pytest.raises(ValueError, match="alpha"):
        E.entmax_bisect(x, alpha=0.5)
    x[1] = float("-inf")
    with pytest.raises(ValueError, match="no unmasked position"):
        E.entmax15(x)
    with pytest.raises(ValueError, match="reduction"):
        E.SparsemaxLoss(reduction="mean_of_all")


def test_entmax_bisect_loss_differentiates_a_tensor_alpha():
    x = _x(6, (4, 6)).requires_grad_()
    alpha = torch.tensor([[1.2], [1.5], [1.9], [2.4]], dtype=torch.float64, requires_grad=True)
    target = torch.tensor([0, 1, 2, 3])
    assert torch.autograd.gradcheck(
        lambda s, a: E.entmax_bisect_loss(s, target, alpha=a), (x, alpha), eps=1e-6, atol=1e-6
    )
