"""regattn.dp.dtw against brute force over alignments (entropy), a node-by-node cvxpy replay
(l2), finite differences, and the structure of the expected alignment; every test runs on the
compiled sweeps and on the torch reference."""

import numpy as np
import pytest
import torch
from dp_oracles import alignments, dtw_brute_entropy, dtw_hard, dtw_l2_cvxpy

from regattn import dp
from regattn.mappings import backend

REGS = ("entropy", "l2")


@pytest.fixture(autouse=True, params=["compiled", "torch"])
def sweeps(request):
    """The DTW sweeps under test: the compiled ones (forced) or the torch reference."""
    with backend("cpu" if request.param == "compiled" else "reference"):
        yield request.param


def rand_costs(batch, m, n, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(batch, m, n, generator=g, dtype=torch.float64)


def value_and_grad(theta, **kw):
    theta = theta.clone().requires_grad_()
    value = dp.dtw(theta, **kw)
    (grad,) = torch.autograd.grad(value.sum(), theta)
    return value.detach(), grad


def test_alignment_count_is_delannoy():
    assert [len(alignments(k, k)) for k in range(1, 5)] == [1, 3, 13, 63]


@pytest.mark.parametrize("shape", [(3, 4), (1, 3), (4, 1), (1, 1), (3, 3)])
@pytest.mark.parametrize("gamma", [1.0, 0.3])
def test_entropy_is_soft_dtw_over_all_alignments(shape, gamma):
    theta = rand_costs(2, *shape, seed=1)
    value, grad = value_and_grad(theta, gamma=gamma)
    for b in range(2):
        ref_value, ref_marg = dtw_brute_entropy(theta[b].numpy(), gamma)
        assert value[b].item() == pytest.approx(ref_value, abs=1e-12)
        np.testing.assert_allclose(grad[b].numpy(), ref_marg, atol=1e-12)


@pytest.mark.parametrize("gamma", [1.0, 0.2])
def test_l2_is_the_recursion_of_cvxpy_local_mins(gamma):
    theta = rand_costs(2, 3, 4, seed=2)
    value, grad = value_and_grad(theta, reg="l2", gamma=gamma)
    for b in range(2):
        ref_value, ref_marg = dtw_l2_cvxpy(theta[b].numpy(), gamma)
        assert value[b].item() == pytest.approx(ref_value, abs=1e-7)
        np.testing.assert_allclose(grad[b].numpy(), ref_marg, atol=1e-6)


def test_l2_gradient_matches_central_differences():
    theta = rand_costs(1, 3, 4, seed=3)
    _, grad = value_and_grad(theta, reg="l2", gamma=0.5)
    eps = 1e-6
    fd = torch.zeros_like(theta)
    for idx in np.ndindex(*theta.shape):
        d = torch.zeros_like(theta)
        d[idx] = eps
        up = dp.dtw(theta + d, reg="l2", gamma=0.5)
        down = dp.dtw(theta - d, reg="l2", gamma=0.5)
        fd[idx] = (up - down).item() / (2 * eps)
    torch.testing.assert_close(grad, fd, atol=1e-7, rtol=0)


@pytest.mark.parametrize("reg", REGS)
@pytest.mark.parametrize("padded", [False, True])
def test_gradcheck_and_gradgradcheck(reg, padded):
    theta = rand_costs(3, 3, 4, seed=4).requires_grad_()
    lengths = (torch.tensor([3, 1, 2]), torch.tensor([4, 2, 3])) if padded else None

    def f(x):
        return dp.dtw(x, reg=reg, gamma=0.6, lengths=lengths)

    assert torch.autograd.gradcheck(f, (theta,))
    assert torch.autograd.gradgradcheck(f, (theta,))


@pytest.mark.parametrize("reg", REGS)
def test_expected_alignment_structure(reg):
    theta = rand_costs(3, 5, 4, seed=5)
    lengths = (torch.tensor([5, 2, 4]), torch.tensor([4, 3, 1]))
    _, e = value_and_grad(theta, reg=reg, gamma=0.5, lengths=lengths)
    assert ((e >= 0) & (e <= 1 + 1e-12)).all()
    for b, (lm, ln) in enumerate(zip(*(x.tolist() for x in lengths), strict=True)):
        assert e[b, 0, 0].item() == pytest.approx(1.0, abs=1e-12)
        assert e[b, lm - 1, ln - 1].item() == pytest.approx(1.0, abs=1e-12)
        # every path crosses each anti-diagonal band i + j in {k, k+1} at least once
        # and each row (and column) at least once: mass per row and per column >= 1
        assert (e[b, :lm, :ln].sum(1) >= 1 - 1e-12).all()
        assert (e[b, :lm, :ln].sum(0) >= 1 - 1e-12).all()
        assert (e[b, lm:] == 0).all() and (e[b, :, ln:] == 0).all()


@pytest.mark.parametrize("reg", REGS)
def test_gamma_to_zero_gives_the_hard_dtw(reg):
    theta = rand_costs(2, 4, 3, seed=6, scale=3.0)
    value, e = value_and_grad(theta, reg=reg, gamma=1e-5)
    for b in range(2):
        ref_value, ref_align = dtw_hard(theta[b].numpy())
        assert value[b].item() == pytest.approx(ref_value, abs=1e-2)
        np.testing.assert_allclose(e[b].numpy(), ref_align, atol=1e-6)


def test_l2_alignment_has_exact_zeros_entropy_none():
    theta = rand_costs(2, 6, 5, seed=7, scale=2.0)
    _, sparse = value_and_grad(theta, reg="l2", gamma=0.3)
    _, dense = value_and_grad(theta, reg="entropy", gamma=0.3)
    assert (sparse == 0).sum() > sparse.numel() // 3
    assert (dense > 0).all()


@pytest.mark.parametrize("reg", REGS)
def test_padded_batch_matches_each_pair_alone(reg):
    theta = rand_costs(3, 5, 4, seed=8)
    lm, ln = torch.tensor([5, 2, 3]), torch.tensor([4, 4, 1])
    theta[1, 2:] = float("nan")  # ignored
    theta[2, :, 1:] = float("inf")
    value, grad = value_and_grad(theta, reg=reg, gamma=0.4, lengths=(lm, ln))
    for b in range(3):
        alone = theta[b : b + 1, : lm[b], : ln[b]]
        alone_value, alone_grad = value_and_grad(alone, reg=reg, gamma=0.4)
        torch.testing.assert_close(value[b : b + 1], alone_value)
        torch.testing.assert_close(grad[b : b + 1, : lm[b], : ln[b]], alone_grad)
        assert grad[b].abs().sum().item() == pytest.approx(alone_grad.abs().sum().item())


def test_float32_large_costs():
    theta = rand_costs(2, 6, 7, seed=9).float() * 1e4
    for reg in REGS:
        value, e = value_and_grad(theta, reg=reg)
        assert torch.isfinite(value).all() and torch.isfinite(e).all()
        assert ((e >= 0) & (e <= 1 + 1e-5)).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("reg", REGS)
def test_cuda_matches_cpu(reg):
    theta = rand_costs(3, 5, 4, seed=10)
    lengths = (torch.tensor([5, 2, 3]), torch.tensor([4, 4, 1]))
    cpu = value_and_grad(theta, reg=reg, lengths=lengths)
    gpu = value_and_grad(theta.cuda(), reg=reg, lengths=tuple(x.cuda() for x in lengths))
    for a, b in zip(cpu, gpu, strict=True):
        torch.testing.assert_close(a, b.cpu())
