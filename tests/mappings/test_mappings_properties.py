"""Special cases, temperature, simplex output, structure (groups, clusters) and sparsity."""

import pytest
import torch
from mapping_helpers import GAMMA_NAMES, NAMES, SPARSE_NAMES, apply


def _scores(seed, shape):
    g = torch.Generator().manual_seed(seed)
    return 2 * torch.randn(shape, generator=g, dtype=torch.float64)


# --- special cases and invariances ----------------------------------------------------------


@pytest.mark.parametrize("name", ["fusedmax", "oscarmax"])
@pytest.mark.parametrize("gamma", [1.0, 0.4])
def test_structured_penalty_zero_is_sparsemax(name, gamma):
    x = _scores(0, (8, 7))
    torch.testing.assert_close(
        apply(name, x, gamma=gamma, lam=0.0), apply("sparsemax", x, gamma=gamma), rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("gamma", [1.0, 0.4])
def test_sq_pnorm_max_with_p2_is_sparsemax(gamma):
    x = _scores(1, (8, 7))
    torch.testing.assert_close(
        apply("sq_pnorm_max", x, gamma=gamma, p=2.0),
        apply("sparsemax", x, gamma=gamma),
        rtol=0,
        atol=1e-10,
    )


def test_entmax_alpha1_is_softmax():
    x = _scores(2, (8, 7))
    torch.testing.assert_close(
        apply("entmax", x, alpha=1.0), torch.softmax(x, -1), rtol=0, atol=1e-12
    )


def test_entmax_alpha2_is_sparsemax():
    x = _scores(3, (8, 7))
    torch.testing.assert_close(
        apply("entmax", x, alpha=2.0), apply("sparsemax", x), rtol=0, atol=1e-10
    )


def test_entmax_approaches_softmax_as_alpha_goes_to_1():
    x = _scores(4, (8, 7))
    gaps = [
        (apply("entmax", x, alpha=a) - torch.softmax(x, -1)).abs().max().item()
        for a in (1.1, 1.01, 1.001)
    ]
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < 2e-3


def test_entmax_tensor_alpha_equals_float_alpha_row_by_row():
    x = _scores(5, (3, 4, 6))
    alpha = torch.tensor([1.2, 1.5, 2.0, 2.7], dtype=torch.float64).view(1, 4, 1)
    y = apply("entmax", x, alpha=alpha)
    for h, a in enumerate(alpha.flatten().tolist()):
        torch.testing.assert_close(y[:, h], apply("entmax", x[:, h], alpha=a), rtol=0, atol=1e-12)


@pytest.mark.parametrize("shift", [-5.0, 3.0, 1e3])
@pytest.mark.parametrize("name", NAMES)
def test_adding_a_constant_to_the_scores_changes_nothing(name, shift):
    """yᵀ(x + c·1) = yᵀx + c on the simplex, so every mapping is shift invariant."""
    x = _scores(11, (8, 7))
    torch.testing.assert_close(apply(name, x + shift), apply(name, x), rtol=0, atol=1e-9)


def test_oscarmax_of_mixed_sign_scores():
    # On the simplex |y| = y: the OSCAR ranks are those of y, and the large negative score
    # must not take a rank. With support {0, 2}: y0 - y2 = (1 - 0.5) - lam, so y = (0.7, 0, 0.3).
    x = torch.tensor([1.0, -0.8, 0.5], dtype=torch.float64)
    torch.testing.assert_close(
        apply("oscarmax", x, lam=0.1),
        torch.tensor([0.7, 0.0, 0.3], dtype=torch.float64),
        rtol=0,
        atol=1e-12,
    )


# --- temperature -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", GAMMA_NAMES)
@pytest.mark.parametrize("gamma", [0.25, 4.0])
def test_temperature_divides_the_scores(name, gamma):
    """Pi(x; gamma, ...) == Pi(x / gamma; 1, ...) with the other parameters unchanged."""
    x = _scores(6, (8, 7))
    torch.testing.assert_close(
        apply(name, x, gamma=gamma), apply(name, x / gamma, gamma=1.0), rtol=0, atol=1e-10
    )


def test_softmax_temperature_matches_closed_form():
    x = _scores(8, (8, 7))
    torch.testing.assert_close(
        apply("softmax", x, gamma=0.3), torch.softmax(x / 0.3, -1), rtol=0, atol=1e-12
    )


# --- simplex, shapes and dims ------------------------------------------------------------------

SHAPES_DIMS = [
    ((5, 7), -1),
    ((5, 7), 0),
    ((2, 3, 6), 1),
    ((2, 3, 4, 5), -1),
    ((2, 3, 4, 5), 2),
    ((4, 3, 2, 5), 0),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,dim", SHAPES_DIMS)
@pytest.mark.parametrize("name", NAMES)
def test_output_lies_on_simplex_along_dim(name, shape, dim, dtype):
    x = _scores(9, shape).to(dtype)
    y = apply(name, x, dim=dim)
    assert y.shape == x.shape and y.dtype == dtype
    assert (y >= 0).all()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(y.sum(dim), torch.ones_like(y.sum(dim)), rtol=0, atol=tol)


@pytest.mark.parametrize("shape,dim", SHAPES_DIMS)
@pytest.mark.parametrize("name", NAMES)
def test_any_dim_equals_rows_of_the_last_dim(name, shape, dim):
    """Batching over leading dims and the choice of dim do not change any single row."""
    x = _scores(10, shape)
    y = apply(name, x, dim=dim)
    rows = x.movedim(dim, -1).reshape(-1, shape[dim])
    expected = torch.stack([apply(name, r) for r in rows])
    torch.testing.assert_close(
        y.movedim(dim, -1).reshape(-1, shape[dim]), expected, rtol=0, atol=1e-10
    )


# --- structure: groups, clusters, sparsity ----------------------------------------------------


def _runs(values):
    """Lengths of the maximal runs of exactly equal consecutive values."""
    lengths = [1]
    for a, b in zip(values[:-1], values[1:], strict=True):
        if a == b:
            lengths[-1] += 1
        else:
            lengths.append(1)
    return lengths


def test_fusedmax_fuses_contiguous_segments():
    # three noisy plateaus; with lam=0.5 the TV prox flattens each one, the middle one is
    # then cut by the simplex projection (prox levels 3-0.5/3, 0+1/3, 3-0.5/2).
    x = torch.tensor([3.0, 3.05, 2.95, 0.0, 0.05, -0.05, 3.02, 2.98], dtype=torch.float64)
    y = apply("fusedmax", x, lam=0.5)
    assert _runs(y.tolist()) == [3, 3, 2]
    torch.testing.assert_close(
        y, torch.tensor([0.7 / 3] * 3 + [0.0] * 3 + [0.15] * 2, dtype=torch.float64)
    )


def test_fusedmax_groups_only_contiguous_positions():
    # positions 0 and 2 have equal scores but are separated by a low one: no shared group
    x = torch.tensor([2.0, -2.0, 2.0, 1.97], dtype=torch.float64)
    y = apply("fusedmax", x, lam=0.05)
    assert _runs(y.tolist()) == [1, 1, 2]


def test_oscarmax_clusters_equal_values_anywhere():
    x = torch.tensor([1.0, 0.7, 1.02, 0.71, 0.98, -0.5, 0.69, 1.01], dtype=torch.float64)
    y = apply("oscarmax", x, lam=0.03)
    high, low = [0, 2, 4, 7], [1, 3, 6]
    assert y[high].unique().numel() == 1 and y[low].unique().numel() == 1
    assert y[high][0] > y[low][0] > 0 and y[5] == 0
    torch.testing.assert_close(y[high][0], torch.tensor(0.2275, dtype=torch.float64))


def test_oscarmax_with_small_penalty_keeps_values_apart():
    x = torch.tensor([1.0, 0.7, 1.02, 0.71, 0.98, -0.5, 0.69, 1.01], dtype=torch.float64)
    y = apply("oscarmax", x, lam=0.005)
    assert y[y > 0].unique().numel() == (y > 0).sum()


@pytest.mark.parametrize("name", SPARSE_NAMES)
def test_sparse_mappings_give_exact_zeros(name):
    # the three low scores are far below the threshold of every sparse mapping (oracle:
    # supports are {0, 1} for all of them with the paper defaults)
    x = torch.tensor([3.0, 2.5, -3.0, -5.0, -8.0], dtype=torch.float64)
    y = apply(name, x)
    assert (y[2:] == 0).all() and (y[:2] > 0).all()


def test_softmax_is_dense():
    x = torch.tensor([[2.0, 1.5, 0.0, -1.0, -3.0]], dtype=torch.float64)
    assert (apply("softmax", x) > 0).all()
