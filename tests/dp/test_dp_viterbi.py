"""regattn.dp.viterbi and viterbi_decode against brute force (entropy), a node-by-node cvxpy
replay (l2), finite differences, and the structure of the expected marginals; every test runs
on the compiled sweeps and on the torch reference."""

import numpy as np
import pytest
import torch
from dp_oracles import viterbi_brute_entropy, viterbi_hard, viterbi_l2_cvxpy

from regattn import dp
from regattn.mappings import backend

REGS = ("entropy", "l2")


@pytest.fixture(autouse=True, params=["compiled", "torch"])
def sweeps(request):
    """The Viterbi sweeps under test: the compiled ones (forced: an error, not the torch path,
    if regattn._C lacks them) or the torch reference."""
    with backend("cpu" if request.param == "compiled" else "reference"):
        yield request.param


def rand_theta(batch, steps, states, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(batch, steps, states, states, generator=g, dtype=torch.float64)


def value_and_grad(theta, **kw):
    theta = theta.clone().requires_grad_()
    value = dp.viterbi(theta, **kw)
    (grad,) = torch.autograd.grad(value.sum(), theta)
    return value.detach(), grad


@pytest.mark.parametrize("gamma", [1.0, 0.3])
def test_entropy_is_the_log_partition_over_all_sequences(gamma):
    theta = rand_theta(2, 3, 3, seed=1)
    value, grad = value_and_grad(theta, gamma=gamma)
    for b in range(2):
        ref_value, ref_marg = viterbi_brute_entropy(theta[b].numpy(), gamma)
        assert value[b].item() == pytest.approx(ref_value, abs=1e-12)
        np.testing.assert_allclose(grad[b].numpy(), ref_marg, atol=1e-12)


def test_entropy_padded_is_brute_force_on_the_prefix():
    theta = rand_theta(3, 4, 2, seed=2)
    lengths = torch.tensor([4, 1, 3])
    value, grad = value_and_grad(theta, gamma=0.5, lengths=lengths)
    for b, length in enumerate(lengths.tolist()):
        ref_value, ref_marg = viterbi_brute_entropy(theta[b, :length].numpy(), 0.5)
        assert value[b].item() == pytest.approx(ref_value, abs=1e-12)
        np.testing.assert_allclose(grad[b, :length].numpy(), ref_marg, atol=1e-12)
        assert (grad[b, length:] == 0).all()


@pytest.mark.parametrize("gamma", [1.0, 0.2])
def test_l2_is_the_recursion_of_cvxpy_local_maxes(gamma):
    theta = rand_theta(2, 3, 3, seed=3)
    value, grad = value_and_grad(theta, reg="l2", gamma=gamma)
    for b in range(2):
        ref_value, ref_marg = viterbi_l2_cvxpy(theta[b].numpy(), gamma)
        assert value[b].item() == pytest.approx(ref_value, abs=1e-7)
        np.testing.assert_allclose(grad[b].numpy(), ref_marg, atol=1e-6)


def test_l2_gradient_matches_central_differences():
    theta = rand_theta(1, 3, 3, seed=4)
    _, grad = value_and_grad(theta, reg="l2", gamma=0.5)
    eps = 1e-6
    fd = torch.zeros_like(theta)
    for idx in np.ndindex(*theta.shape):
        d = torch.zeros_like(theta)
        d[idx] = eps
        up = dp.viterbi(theta + d, reg="l2", gamma=0.5)
        down = dp.viterbi(theta - d, reg="l2", gamma=0.5)
        fd[idx] = (up - down).item() / (2 * eps)
    torch.testing.assert_close(grad, fd, atol=1e-7, rtol=0)


@pytest.mark.parametrize("reg", REGS)
@pytest.mark.parametrize("padded", [False, True])
def test_gradcheck_and_gradgradcheck(reg, padded):
    theta = rand_theta(3, 3, 3, seed=5).requires_grad_()
    lengths = torch.tensor([3, 1, 2]) if padded else None

    def f(x):
        return dp.viterbi(x, reg=reg, gamma=0.7, lengths=lengths)

    assert torch.autograd.gradcheck(f, (theta,))
    assert torch.autograd.gradgradcheck(f, (theta,))


@pytest.mark.parametrize("reg", REGS)
def test_hessian_vector_product_is_symmetric(reg):
    theta = rand_theta(2, 4, 3, seed=6).requires_grad_()
    g = torch.Generator().manual_seed(7)
    u, w = (torch.randn(theta.shape, generator=g, dtype=torch.float64) for _ in range(2))
    (grad,) = torch.autograd.grad(dp.viterbi(theta, reg=reg).sum(), theta, create_graph=True)
    (hu,) = torch.autograd.grad(grad, theta, u, retain_graph=True)
    (hw,) = torch.autograd.grad(grad, theta, w)
    assert (hu * w).sum().item() == pytest.approx((hw * u).sum().item(), abs=1e-10)


@pytest.mark.parametrize("reg", REGS)
def test_marginals_sum_to_one_and_are_consistent_along_the_chain(reg):
    theta = rand_theta(3, 5, 4, seed=8)
    lengths = torch.tensor([5, 2, 4])
    _, marg = value_and_grad(theta, reg=reg, gamma=0.5, lengths=lengths)
    assert (marg >= 0).all()
    for b, length in enumerate(lengths.tolist()):
        m = marg[b, :length]
        torch.testing.assert_close(m.sum((1, 2)), torch.ones(length, dtype=m.dtype))
        # mass arriving in state k at time t = mass leaving it at time t + 1
        torch.testing.assert_close(m[:-1].sum(2), m[1:].sum(1))


@pytest.mark.parametrize("reg", REGS)
def test_gamma_to_zero_gives_the_hard_viterbi(reg):
    theta = rand_theta(3, 4, 3, seed=9, scale=3.0)
    lengths = torch.tensor([4, 4, 2])
    path = dp.viterbi_decode(theta, lengths=lengths)
    value, marg = value_and_grad(theta, reg=reg, gamma=1e-4, lengths=lengths)
    for b, length in enumerate(lengths.tolist()):
        ref_value, ref_path = viterbi_hard(theta[b, :length].numpy())
        assert path[b, : length + 1].tolist() == ref_path
        assert (path[b, length + 1 :] == -1).all()
        assert value[b].item() == pytest.approx(ref_value, abs=1e-2)
        indicator = torch.zeros_like(marg[b])
        for t in range(1, length + 1):
            indicator[t - 1, ref_path[t], ref_path[t - 1]] = 1
        torch.testing.assert_close(marg[b], indicator, atol=1e-6, rtol=0)


def test_decode_ties_and_single_state():
    theta = torch.zeros(1, 3, 2, 2)
    assert dp.viterbi_decode(theta).tolist() == [[0, 0, 0, 0]]
    theta = torch.randn(2, 3, 1, 1)
    assert dp.viterbi_decode(theta, lengths=torch.tensor([3, 1])).tolist() == [
        [0, 0, 0, 0],
        [0, 0, -1, -1],
    ]


def test_l2_marginals_have_exact_zeros_entropy_none():
    theta = rand_theta(2, 4, 5, seed=10, scale=2.0)
    _, sparse = value_and_grad(theta, reg="l2", gamma=0.5)
    _, dense = value_and_grad(theta, reg="entropy", gamma=0.5)
    assert (sparse == 0).sum() > sparse.numel() // 2
    assert (dense > 0).all()


@pytest.mark.parametrize("reg", REGS)
def test_padded_batch_matches_each_sequence_alone(reg):
    theta = rand_theta(3, 5, 3, seed=11)
    lengths = torch.tensor([5, 2, 3])
    # garbage (even NaN) past the end is ignored
    theta[1, 2:] = float("nan")
    value, grad = value_and_grad(theta, reg=reg, gamma=0.4, lengths=lengths)
    path = dp.viterbi_decode(theta, lengths=lengths)
    for b, length in enumerate(lengths.tolist()):
        alone_value, alone_grad = value_and_grad(theta[b : b + 1, :length], reg=reg, gamma=0.4)
        torch.testing.assert_close(value[b : b + 1], alone_value)
        torch.testing.assert_close(grad[b : b + 1, :length], alone_grad)
        assert (grad[b, length:] == 0).all()
        assert (
            path[b, : length + 1].tolist()
            == dp.viterbi_decode(theta[b : b + 1, :length])[0].tolist()
        )


@pytest.mark.parametrize("reg", REGS)
def test_forbidden_transitions_get_zero_mass(reg):
    theta = rand_theta(1, 3, 3, seed=12)
    theta[0, :, 0, 1] = float("-inf")  # never 1 -> 0
    value, marg = value_and_grad(theta, reg=reg, gamma=0.5)
    assert torch.isfinite(value).all()
    assert (marg[0, :, 0, 1] == 0).all()
    if reg == "entropy":
        ref_value, ref_marg = viterbi_brute_entropy(theta[0].numpy(), 0.5)
        assert value.item() == pytest.approx(ref_value, abs=1e-12)
        np.testing.assert_allclose(marg[0].numpy(), ref_marg, atol=1e-12)


def test_float32_and_large_scores():
    theta = rand_theta(2, 6, 4, seed=13).float() * 1e4
    for reg in REGS:
        value, marg = value_and_grad(theta, reg=reg, gamma=1.0)
        assert torch.isfinite(value).all() and torch.isfinite(marg).all()
        torch.testing.assert_close(marg.sum((2, 3)), torch.ones(2, 6))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("reg", REGS)
def test_cuda_matches_cpu(reg):
    theta = rand_theta(3, 5, 4, seed=14)
    lengths = torch.tensor([5, 2, 3])
    with backend(None):  # the default dispatch: CPU compiled, CUDA the torch code
        cpu = value_and_grad(theta, reg=reg, lengths=lengths)
        gpu = value_and_grad(theta.cuda(), reg=reg, lengths=lengths.cuda())
        for a, b in zip(cpu, gpu, strict=True):
            torch.testing.assert_close(a, b.cpu())
        assert torch.equal(
            dp.viterbi_decode(theta, lengths), dp.viterbi_decode(theta.cuda(), lengths).cpu()
        )
