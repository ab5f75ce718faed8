"""The compiled CPU kernels against the pure-torch reference path (the path other devices
take): same probabilities, same gradients, same groups."""

import pytest
import torch

from regattn import mappings
from regattn.mappings import torch_reference
from regattn.mappings._backward import group_mean_reference, sparse_vjp, support_jvp_reference
from regattn.mappings._rows import shift_to_max
from regattn.mappings.entmax import entmax15_rows, entmax15_rows_by_sort, entmax_threshold_rows
from regattn.mappings.fused import fusedmax_rows, prox_tv1d_rows, prox_tv1d_rows_reference
from regattn.mappings.oscar import (
    oscarmax_rows,
    prox_pairwise_max_rows,
    prox_pairwise_max_rows_reference,
)
from regattn.mappings.pnorm import sq_pnorm_max_jvp, sq_pnorm_max_jvp_reference
from regattn.mappings.simplex import project_simplex_rows_by_sort

PARAMS = {
    "fusedmax": {"lam": 0.3},
    "oscarmax": {"lam": 0.05},
    "sq_pnorm_max": {"p": 1.5},
    "entmax": {"alpha": 1.5},
}


def random_case(seed, rows=40, d=13, ties=False, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d, generator=g, dtype=dtype) * 2
    if ties:
        x = x.round()  # many exactly equal scores
    mask = torch.rand(rows, d, generator=g) > 0.3
    mask[torch.arange(rows), torch.randint(0, d, (rows,), generator=g)] = True
    return x, mask


def same_partition(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Group labels may differ; the partition of each row into groups must not."""
    return torch.equal(a.unsqueeze(-1) == a.unsqueeze(-2), b.unsqueeze(-1) == b.unsqueeze(-2))


@pytest.mark.parametrize("name", mappings.NAMES)
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_kernel_and_reference_agree_forward_and_backward(name, ties, masked):
    x, mask = random_case(seed=mappings.NAMES.index(name) * 4 + 2 * ties + masked, ties=ties)
    mask = mask if masked else None
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=x.dtype)
    outputs = []
    for use_reference in (False, True):
        xr = x.clone().requires_grad_()
        module = mappings.build(name, **PARAMS.get(name, {}))
        if use_reference:
            with mappings.torch_reference():
                y = module(xr, mask=mask)
                y.backward(grad)
        else:
            y = module(xr, mask=mask)
            y.backward(grad)
        outputs.append((y.detach(), xr.grad))
    (y_kernel, g_kernel), (y_ref, g_ref) = outputs
    torch.testing.assert_close(y_kernel, y_ref, rtol=0, atol=1e-12)
    if not ties:
        # With tied integer scores some entries sit exactly on a kink (an output that is 0 in
        # exact arithmetic comes out as 0 or 4e-16); the two paths may then pick different,
        # equally valid generalized Jacobians. Away from ties they must agree.
        torch.testing.assert_close(g_kernel, g_ref, rtol=0, atol=1e-10)


def same_partition_up_to_ties(z, a, b):
    """The partitions a and b of each row agree, except that one may split what the other
    joins among equal values z: in exact arithmetic that is a degenerate tie (two adjacent
    segments or blocks of one value; both generalized Jacobians are valid), and with tied
    integer scores the algorithms make or skip such a split depending on the values around it
    (Condat's algorithm on a window instead of the whole row; pool-adjacent-violators, which
    does not merge blocks of equal means, against the reference's min-max formula)."""
    same_a, same_b = a.unsqueeze(-1) == a.unsqueeze(-2), b.unsqueeze(-1) == b.unsqueeze(-2)
    tie = (z.unsqueeze(-1) - z.unsqueeze(-2)).abs() <= 1e-12
    return bool(((same_a == same_b) | tie).all())


@pytest.mark.parametrize("d", [1, 2, 7, 64])
@pytest.mark.parametrize("lam", [0.0, 0.1, 2.0])
def test_prox_tv1d_kernel_matches_reference_values_and_segments(d, lam):
    for ties in (False, True):
        x, mask = random_case(seed=d, rows=50, d=d, ties=ties)
        for m in (None, mask):
            z_kernel, seg_kernel = prox_tv1d_rows(x, m, lam)
            z_ref, seg_ref = prox_tv1d_rows_reference(x, m, lam)
            torch.testing.assert_close(z_kernel, z_ref, rtol=0, atol=1e-12)
            if ties:
                assert same_partition_up_to_ties(z_ref, seg_kernel, seg_ref)
            else:
                assert same_partition(seg_kernel, seg_ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lam", [0.01, 0.1, 0.5])
@pytest.mark.parametrize("scale", [0.3, 1.0, 10.0])
def test_prox_tv1d_kernel_windows_match_condat_on_attention_like_rows(dtype, lam, scale):
    # prox_tv1d_row guesses that every position is its own segment and solves the failing
    # edges in windows (csrc/row_algorithms.h); Condat's algorithm (the reference, in lockstep)
    # solves the whole row. Rows of 30-50 scores at these scales give windows of one edge
    # (closed form), longer ones, merges of windows, and rows left to Condat's algorithm.
    g = torch.Generator().manual_seed(int(lam * 100 + scale * 10))
    for d in (30, 50):
        x = (torch.randn(400, d, generator=g, dtype=torch.float64) * scale).to(dtype)
        z_kernel, seg_kernel = prox_tv1d_rows(x, None, lam)
        z_ref, seg_ref = prox_tv1d_rows_reference(x, None, lam)
        atol = 1e-5 * scale if dtype == torch.float32 else 1e-12 * scale
        torch.testing.assert_close(z_kernel, z_ref, rtol=0, atol=atol)
        assert same_partition(seg_kernel, seg_ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_prox_tv1d_rounding_that_closes_the_row_early(dtype):
    # Scores tied at multiples of lam: in float64, rounding makes Condat's closing jump cover
    # the last position. The kernel used to read past the row (segfault) and the reference to
    # loop forever; both must finish, agree exactly, and match the solution (found by cvxpy).
    x = torch.tensor(
        [
            [
                0.1,
                -0.3,
                0.05,
                -0.25,
                -0.15,
                0.2,
                -0.1,
                -0.15,
                -0.1,
                0.1,
                -0.2,
                0.1,
                0.15,
                -0.05,
                -0.05,
                0.1,
                -0.05,
            ]
        ],
        dtype=dtype,
    )
    z_kernel, _ = prox_tv1d_rows(x, None, 0.05)
    z_ref, _ = prox_tv1d_rows_reference(x, None, 0.05)
    assert torch.equal(z_kernel, z_ref)
    expected = torch.tensor(
        [0.05, -0.2, -0.05, -0.15, -0.15, 0.1]
        + [-0.25 / 3] * 3
        + [0.0, -0.1, 0.075, 0.075, 0.0, 0.0, 0.0, 0.0],
        dtype=dtype,
    )
    torch.testing.assert_close(z_kernel[0], expected, rtol=0, atol=1e-6)
    y = mappings.fusedmax(x, lam=0.05)
    torch.testing.assert_close(y.sum(), torch.ones((), dtype=dtype))


@pytest.mark.parametrize("d", [1, 2, 7, 64, 200])  # 200: radix sort (see below)
@pytest.mark.parametrize("lam", [0.0, 0.05, 1.0])
def test_prox_pairwise_max_kernel_matches_reference_values_and_clusters(d, lam):
    for ties in (False, True):
        x, mask = random_case(seed=d + 1, rows=50, d=d, ties=ties)
        for m in (None, mask):
            z_kernel, cl_kernel = prox_pairwise_max_rows(x, m, lam)
            z_ref, cl_ref = prox_pairwise_max_rows_reference(x, m, lam)
            torch.testing.assert_close(z_kernel, z_ref, rtol=0, atol=1e-12)
            if ties:
                assert same_partition_up_to_ties(z_ref, cl_kernel, cl_ref)
            else:
                assert same_partition(cl_kernel, cl_ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_prox_pairwise_max_long_rows_radix_sorted(dtype):
    # rows longer than kRankSortMax (128) are radix-sorted on their float32 or float64 bits
    # (csrc/row_algorithms.h); signed zeros and, in float64, large magnitudes included. The
    # reference runs in float64: its prefix-sum differences lose float32's digits.
    x, mask = random_case(seed=5, rows=40, d=300)
    if dtype == torch.float64:
        x[:10] *= 1e3
    x[10:20, ::7] = -0.0
    x[10:20, 1::7] = 0.0
    for m in (None, mask):
        z_kernel, cl_kernel = prox_pairwise_max_rows(x.to(dtype), m, 0.05)
        z_ref, cl_ref = prox_pairwise_max_rows_reference(x, m, 0.05)
        torch.testing.assert_close(
            z_kernel.double(), z_ref, rtol=0, atol=1e-5 if dtype == torch.float32 else 1e-9
        )
        if dtype == torch.float64:
            assert same_partition_up_to_ties(z_ref, cl_kernel, cl_ref)


@pytest.mark.parametrize("p", [1.2, 1.5, 1.75, 2.0])
@pytest.mark.parametrize("gamma", [0.5, 1.0, 3.0])
def test_sq_pnorm_max_jvp_kernel_matches_reference(p, gamma):
    x, mask = random_case(seed=int(p * 100), rows=60, d=17)
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=x.dtype)
    for m in (None, mask):
        y = mappings.sq_pnorm_max(x, mask=m, gamma=gamma, p=p)
        torch.testing.assert_close(
            sq_pnorm_max_jvp(y, v, gamma, p),
            sq_pnorm_max_jvp_reference(y, v, gamma, p),
            rtol=0,
            atol=1e-10,
        )


@pytest.mark.parametrize("p", [1.3, 1.5, 2.0])
def test_sq_pnorm_max_kernel_backward_passes_gradcheck(p):
    x, mask = random_case(seed=11, rows=5, d=6)
    x.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda t: mappings.sq_pnorm_max(t, mask=mask, gamma=0.7, p=p), (x,), eps=1e-6, atol=1e-6
    )


# d = 200 > kRankSortMax (csrc/row_algorithms.h) takes the radix sort
@pytest.mark.parametrize(
    "name, rows_fn", [("fusedmax", fusedmax_rows), ("oscarmax", oscarmax_rows)]
)
@pytest.mark.parametrize("d", [1, 2, 7, 64, 200])
@pytest.mark.parametrize("lam", [0.0, 0.05, 1.0])
def test_fused_prox_and_projection_kernels_match_reference(name, rows_fn, d, lam):
    """The one-call kernels P_simplex(prox(x)) against the reference prox and projection:
    same probabilities, same groups on the support (the only ones the backward pass reads).
    Rows as the mappings hand them over: the kernel shifts each row to a max of 0 as it reads
    it, the reference gets it shifted (to_rows); here both get it shifted, so that tied
    scores round the same way on both paths."""
    for ties in (False, True):
        x, mask = random_case(seed=d + 2, rows=50, d=d, ties=ties)
        for m in (None, mask):
            x = shift_to_max(x, m)
            y_kernel, group_kernel = rows_fn(x, m, 1.0, lam)
            with torch_reference():
                y_ref, group_ref = rows_fn(x, m, 1.0, lam)
            torch.testing.assert_close(y_kernel, y_ref, rtol=0, atol=1e-12)
            on = y_ref > 0
            assert (
                torch.equal(y_kernel > 0, on) or ties
            )  # ties may sit exactly on the support's edge
            for r in range(x.shape[0]):
                support = on[r] & (y_kernel[r] > 0)
                assert same_partition(group_kernel[r][support], group_ref[r][support])


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 100.0])
@pytest.mark.parametrize("lam", [0.001, 0.01, 0.1])
def test_oscarmax_kernel_sorting_only_candidates_matches_full_prox(scale, lam):
    # The kernel sorts and pools only the scores above x_max - 1 - lam (n-1) (oscarmax_row in
    # csrc/row_algorithms.h); the reference pools the whole row. At large scales only a few
    # scores are candidates; the last rows put every candidate in the support (a cluster of
    # near-ties far above the rest), the case where the candidates' scan runs to its end.
    x, mask = random_case(seed=int(scale * 1000 + lam * 1e4), rows=300, d=50)
    x = x * scale
    x[-20:] = -50.0
    x[-20:, :6] = (
        20.0 + torch.randn(20, 6, generator=torch.Generator().manual_seed(5), dtype=x.dtype) * lam
    )
    mask[-20:, :6] = True
    for m in (None, mask):
        y_kernel, group_kernel = oscarmax_rows(x, m, 1.0, lam)
        with torch_reference():
            y_ref, group_ref = oscarmax_rows(x, m, 1.0, lam)
        torch.testing.assert_close(y_kernel, y_ref, rtol=0, atol=1e-12)
        assert torch.equal(y_kernel > 0, y_ref > 0)
        assert torch.equal(group_kernel < 0, y_kernel <= 0)  # -1 exactly off the support
        assert same_partition(group_kernel, group_ref)
    assert (y_kernel[-20:, :6] > 0).all()


@pytest.mark.parametrize("d", [100, 400, 1000])
@pytest.mark.parametrize("lam", [0.001, 0.01, 0.05])
@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0])
def test_oscarmax_kernel_pruned_sort_on_long_rows_matches_full_prox(d, lam, scale):
    # Rows with more than 64 candidates first try the pruned path (oscarmax_pruned in
    # csrc/row_algorithms.h): the prox of the top few scores only, kept when a bound on the
    # rest of the row certifies it. Here at lengths and lam where it is taken and where its
    # certificate fails (large lam (n-1): the whole row pools), with ties, masks, and rows
    # whose top scores are near-ties (a cluster at the support's edge).
    rows = max(4, 4000 // d)
    for ties in (False, True):
        x, mask = random_case(seed=d + int(lam * 1e4) + int(scale * 10), rows=rows, d=d, ties=ties)
        x = x * scale
        if not ties:
            x[: rows // 4, :8] = x[: rows // 4].amax(-1, keepdim=True) - lam * torch.rand(
                rows // 4, 8
            )
        for m in (None, mask):
            y_kernel, group_kernel = oscarmax_rows(x, m, 1.0, lam)
            with torch_reference():
                y_ref, group_ref = oscarmax_rows(x, m, 1.0, lam)
            # rows that pool whole sum ~d values (the reference's O(d^2) formula rounds
            # differently); with ties, entries at the support's edge get y of a few ulps
            # in one and 0 in the other (as for the full sort: not the pruned path)
            torch.testing.assert_close(y_kernel, y_ref, rtol=0, atol=1e-14 * d * d)
            assert torch.equal(group_kernel < 0, y_kernel <= 0)
            if not ties:
                assert torch.equal(y_kernel > 0, y_ref > 0)
                on = y_kernel > 0
                assert same_partition(
                    group_kernel.masked_fill(~on, -1), group_ref.masked_fill(~on, -1)
                )
    # the float32 kernel agrees with the float64 one on every row, those that pool whole
    # (support ~ d) included: the prox's values reach spread + lam (n-1), and its block sums
    # and the threshold's prefix sums accumulate in double (acc_t in csrc/row_algorithms.h),
    # so the error is a few roundings of that size, not one per summed value (5e-3 at d = 4096
    # when they summed in float). The supports agree where no value is that close to the edge.
    x, _ = random_case(seed=7 + d, rows=rows, d=d)
    y64, _ = oscarmax_rows(x * scale, None, 1.0, lam)
    y32, _ = oscarmax_rows((x * scale).float(), None, 1.0, lam)
    spread = (x * scale).amax(-1, keepdim=True) - (x * scale).amin(-1, keepdim=True)
    atol = 16 * torch.finfo(torch.float32).eps * (1 + spread + lam * (d - 1))
    assert ((y32.double() - y64).abs() <= atol).all(), (y32.double() - y64).abs().max()
    small = (y64 > 0).sum(-1) < 32
    assert torch.equal(y32[small] > 0, y64[small] > 0)


@pytest.mark.parametrize("d", [1, 2, 5, 50, 200])
@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0])
def test_entmax15_kernel_matches_sort_based_threshold(d, scale):
    for ties in (False, True):
        x, mask = random_case(seed=d, rows=200, d=d, ties=ties)
        x = x * scale
        for m in (None, mask):
            torch.testing.assert_close(
                entmax15_rows(x, m), entmax15_rows_by_sort(x, m), rtol=0, atol=1e-12
            )


@pytest.mark.parametrize("alpha", [1.05, 1.3, 1.7, 2.5, 4.0])
@pytest.mark.parametrize("d", [1, 3, 50, 200])
def test_entmax_halley_kernel_matches_bisection_reference(alpha, d):
    x, mask = random_case(seed=d, rows=100, d=d)
    alpha_rows = torch.full((x.shape[0], 1), alpha, dtype=x.dtype)
    # Both find tau to float64 resolution; for alpha > 2, y = d^{1/(alpha-1)} has an unbounded
    # slope at the support's edge and turns that resolution into ~1e-10 on small entries.
    atol = 1e-12 if alpha <= 2 else 1e-9
    for m in (None, mask):
        y_kernel = entmax_threshold_rows(x, m, alpha_rows)
        with torch_reference():
            y_ref = entmax_threshold_rows(x, m, alpha_rows)
        torch.testing.assert_close(y_kernel, y_ref, rtol=0, atol=atol)


def test_reference_path_is_actually_taken():
    # The kernels and the reference label groups differently for masked positions only in
    # the packed layout; here we simply check the switch is scoped and restored.
    from regattn.mappings import _kernels

    assert _kernels.use_kernels(torch.zeros(1))
    with mappings.torch_reference():
        assert not _kernels.use_kernels(torch.zeros(1))
    assert _kernels.use_kernels(torch.zeros(1))


@pytest.mark.parametrize("alpha", [1.05, 1.3, 1.7, 2.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_entmax_halley_weights_are_y_to_the_2_minus_alpha(vector_isa, alpha, dtype):
    # The forward kernel hands the backward y^{2-alpha} computed without pow; it must be the
    # same as the power of the returned y, and 0 off the support and at masked positions.
    from regattn.mappings._kernels import kernels, mask_arg

    x, mask = random_case(seed=int(alpha * 100), rows=200, d=37, dtype=dtype)
    alpha_rows = torch.full((x.shape[0],), alpha, dtype=dtype)
    for m in (None, mask):
        y, w = kernels.entmax_halley_weights_rows(x, mask_arg(m), alpha_rows)
        torch.testing.assert_close(
            y, kernels.entmax_halley_rows(x, mask_arg(m), alpha_rows), rtol=0, atol=0
        )
        expected = torch.where(y > 0, y.pow(2 - alpha), 0.0)
        rtol = 1e-5 if dtype == torch.float32 else 1e-12
        torch.testing.assert_close(w, expected, rtol=rtol, atol=0)


@pytest.mark.parametrize("alpha", [1.3, 1.7, 2.5])
@pytest.mark.parametrize("masked", [False, True])
def test_entmax_halley_float32_gradient_matches_reference(vector_isa, alpha, masked):
    # float32 takes the kernel's weights path (alpha a number); the reference takes y^{2-alpha}
    x, mask = random_case(seed=3, rows=300, d=50, dtype=torch.float32)
    mask = mask if masked else None
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    grads = []
    for use_reference in (False, True):
        xr = x.clone().requires_grad_()
        if use_reference:
            with torch_reference():
                y = mappings.entmax(xr, mask=mask, alpha=alpha)
        else:
            y = mappings.entmax(xr, mask=mask, alpha=alpha)
        y.backward(grad)
        grads.append(xr.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-5)


@pytest.fixture(params=["avx512", "avx2", "portable"])
def vector_isa(request):
    """The float32 kernels take AVX-512 or AVX2 paths where the CPU has them (softmax's
    exponentials, alpha-entmax's powers, the rows' compaction; csrc/avx*.h), else portable
    loops and libm: run a test on each path this machine has."""
    from regattn.mappings._kernels import kernels

    available = kernels.use_vector_isa(request.param)
    if not available:
        kernels.use_vector_isa("avx512")
        pytest.skip(f"this CPU has no {request.param}")
    yield request.param
    kernels.use_vector_isa("avx512")


@pytest.mark.parametrize("d", [1, 7, 16, 17, 50, 400])
@pytest.mark.parametrize("gamma", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("masked", [False, True])
def test_softmax_float32_kernel_matches_float64(vector_isa, d, gamma, masked):
    # every path of the float32 kernel (AVX-512 with its masked last vector, AVX2 with a
    # padded one, libm's expf) against torch's float64 softmax: peaked rows whose small
    # entries underflow, rows of one value repeated, and the masks' gathered rows
    x, mask = random_case(seed=d, rows=300, d=d)
    mask = mask if masked else None
    x[:30] *= 60  # e^(x - max) down to the subnormals and 0
    x[30:40] = 2.5  # ties: a uniform row
    x = x.float()
    y32 = mappings.softmax(x, mask=mask, gamma=gamma)
    filled = x.double() if mask is None else x.double().masked_fill(~mask, float("-inf"))
    y64 = torch.softmax(filled / gamma, dim=-1)
    # float32 rounds (x - max) / gamma to 2^-24 of itself: up to 21 * 2^-24 relative in the
    # entries above 1e-9 (exponents down to -21), which the absolute tolerance covers below
    torch.testing.assert_close(y32.double(), y64, rtol=5e-6, atol=1e-9)
    if mask is not None:
        assert bool((y32[~mask] == 0).all())


@pytest.mark.parametrize("d", [1, 2, 16, 17, 30, 50, 64, 65, 400])
@pytest.mark.parametrize("gamma", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("ties", [False, True])
def test_sparsemax_float32_kernel_matches_sort_based_projection(vector_isa, d, gamma, ties):
    # every path of the float32 kernel (rows of up to 64 values in AVX-512 registers, the
    # compaction and pairwise/Michelot thresholds otherwise) against the sort-based projection
    # in float64 of the same float32 scores: supports equal, values to float32 rounding
    x, _ = random_case(seed=d, rows=300, d=d, ties=ties)
    x[:30] *= 40  # supports of one or two values
    x[30:40] = 1.5  # a uniform row: every value in the support
    x = x.float()
    y32 = mappings.sparsemax(x, gamma=gamma)
    y64 = project_simplex_rows_by_sort(x.double() / gamma, None)
    torch.testing.assert_close(y32.double(), y64, rtol=0, atol=2e-6)
    if not ties:  # a tie at the threshold may round either way
        assert torch.equal(y32 > 0, y64 > 0)
    torch.testing.assert_close(y32.sum(-1), torch.ones(x.shape[0]), rtol=0, atol=1e-5)
    for bad in (float("nan"), float("inf")):
        x_bad = x.clone()
        x_bad[7, d // 2] = bad
        with pytest.raises(ValueError, match="(?i)nan" if bad != bad else "(?i)infinite"):
            mappings.sparsemax(x_bad, gamma=gamma)


@pytest.mark.parametrize("d", [1, 2, 16, 17, 30, 50, 64, 65, 400])
@pytest.mark.parametrize("gamma", [0.5, 2.0])
@pytest.mark.parametrize("lam", [0.01, 0.1])
@pytest.mark.parametrize("ties", [False, True])
def test_oscarmax_float32_kernel_matches_float64(vector_isa, d, gamma, lam, ties):
    # every path of the float32 kernel (unmasked rows of up to 64 values in AVX-512 registers,
    # the portable rows otherwise, masked rows included): the same outputs as the portable
    # path, bit for bit, and against the float64 kernel on the same float32 scores, values to
    # float32 rounding of the prox's size and, without ties (whose pooling float32 rounding
    # may decide otherwise), the same supports and clusters
    from regattn.mappings._kernels import kernels

    x, mask = random_case(seed=d + 100, rows=200, d=d, ties=ties)
    x[:20] *= 40  # supports of one or two values
    x[20:30] = 1.5  # a uniform row: one cluster
    x = x.float()
    for m in (None, mask):
        y32, g32 = oscarmax_rows(x, m, gamma, lam)
        kernels.use_vector_isa("portable")
        try:
            y_portable, g_portable = oscarmax_rows(x, m, gamma, lam)
        finally:
            kernels.use_vector_isa(vector_isa)
        assert torch.equal(y32, y_portable) and torch.equal(g32, g_portable)
        y64, g64 = oscarmax_rows(x.double(), m, gamma, lam)
        spread = (x.double().amax(-1, keepdim=True) - x.double().amin(-1, keepdim=True)) / gamma
        atol = 16 * torch.finfo(torch.float32).eps * (1 + spread + lam * (d - 1))
        assert ((y32.double() - y64).abs() <= atol).all(), (y32.double() - y64).abs().max()
        assert torch.equal(g32 < 0, y32 <= 0)
        if m is not None:
            assert bool((y32[~m] == 0).all())
        if not ties:
            assert torch.equal(y32 > 0, y64 > 0)
            for r in range(x.shape[0]):
                on = y32[r] > 0
                assert same_partition(g32[r][on], g64[r][on])
        # the backward (group means of the support Jacobian; its AVX-512 row for any d)
        v = torch.randn(x.shape, generator=torch.Generator().manual_seed(d))
        expected = group_mean_reference(support_jvp_reference(y32.double(), v.double(), 2), g32)
        torch.testing.assert_close(
            sparse_vjp(y32, v, group=g32).double(), expected, rtol=0, atol=1e-5
        )
    x_bad = x.clone()
    x_bad[7, d // 2] = float("nan")
    with pytest.raises(ValueError, match="(?i)nan"):
        mappings.oscarmax(x_bad, gamma=gamma, lam=lam)


@pytest.mark.parametrize("d", [1, 2, 16, 17, 30, 50, 64, 65, 400])
@pytest.mark.parametrize("gamma", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("p", [1.5, 1.7])
@pytest.mark.parametrize("masked", [False, True])
def test_sq_pnorm_max_float32_kernel_matches_float64(vector_isa, d, gamma, p, masked):
    # every path of the float32 kernels (for p = 1.5: unmasked rows of up to 64 values in
    # AVX-512 registers and the backward in 16 lanes; the portable rows otherwise) against the
    # float64 kernel on the same float32 scores: peaked rows (supports of one or two values),
    # a uniform row, and the masks' gathered rows
    x, mask = random_case(seed=d, rows=300, d=d)
    mask = mask if masked else None
    x[:30] *= 40
    x[30:40] = 1.5
    x = x.float()
    y32 = mappings.sq_pnorm_max(x, mask=mask, gamma=gamma, p=p)
    y64 = mappings.sq_pnorm_max(x.double(), mask=mask, gamma=gamma, p=p)
    torch.testing.assert_close(y32.double(), y64, rtol=0, atol=2e-6)
    torch.testing.assert_close(y32.sum(-1), torch.ones(x.shape[0]), rtol=0, atol=1e-5)
    if mask is not None:
        assert bool((y32[~mask] == 0).all())
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(d))
    j32 = sq_pnorm_max_jvp(y32, v, gamma, p)
    j64 = sq_pnorm_max_jvp_reference(y32.double(), v.double(), gamma, p)
    # J v is v's deviation on the support scaled by y^{2-p} / gamma: float32 rounding of that
    torch.testing.assert_close(j32.double(), j64, rtol=0, atol=2e-6 * (1 + 1 / gamma))
    for bad in (float("nan"), float("inf")):
        x_bad = x.clone()
        x_bad[7, d // 2] = bad
        if mask is not None:
            mask[7, d // 2] = True
        with pytest.raises(ValueError, match="(?i)nan" if bad != bad else "(?i)infinite"):
            mappings.sq_pnorm_max(x_bad, mask=mask, gamma=gamma, p=p)


# (a -inf score is a masked position: test_mappings_neg_inf)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("d", [9, 50])
def test_softmax_float32_kernel_rejects_non_finite_scores(vector_isa, bad, d):
    x = torch.randn(6, d)
    x[4, 3] = bad
    kind = "nan" if bad != bad else "infinite"
    with pytest.raises(ValueError, match=f"(?i){kind}"):
        mappings.softmax(x)
    spread = torch.randn(6, d)
    spread[2, 0], spread[2, 1] = 3e38, -3e38  # max - min overflows float32
    with pytest.raises(ValueError, match="span more than"):
        mappings.softmax(spread)


def test_softmax_kernel_backward_is_torchs_and_passes_gradcheck():
    # the operator's backward (C++) against torch.softmax's autograd, and gradcheck in
    # float64 with a mask and a temperature
    x, mask = random_case(seed=3, rows=40, d=13)
    g = torch.randn(x.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(2))
    for gamma in (0.5, 1.0, 2.0):
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        mappings.softmax(xa, gamma=gamma).backward(g)
        torch.softmax(xb / gamma, dim=-1).backward(g)
        torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-12, atol=1e-14)
    xs = x[:6].clone().requires_grad_()
    torch.autograd.gradcheck(
        lambda t: mappings.softmax(t, mask=mask[:6], gamma=0.7), (xs,), eps=1e-6, atol=1e-8
    )
    torch.autograd.gradgradcheck(lambda t: mappings.softmax(t, gamma=0.7), (xs,))


@pytest.mark.parametrize("alpha", [1.05, 1.3, 1.7, 2.5, 4.0])
@pytest.mark.parametrize("masked", [False, True])
def test_entmax_halley_float32_kernel_matches_float64(vector_isa, alpha, masked):
    # float32 rows through the kernel, against the float64 kernel (glibc pow) on the same
    # scores: both powers paths give float32 accuracy, masks and extreme alphas included
    x, mask = random_case(seed=int(alpha * 10), rows=400, d=50)
    mask = mask if masked else None
    x[:20] *= 30  # very peaked rows: powers of tiny differences
    alpha_rows = torch.full((x.shape[0], 1), alpha, dtype=torch.float64)
    y32 = entmax_threshold_rows(x.float(), mask, alpha_rows.float())
    y64 = entmax_threshold_rows(x, mask, alpha_rows)
    # for alpha > 2, y = d^{1/(alpha-1)} has an unbounded slope at the support's edge: float32's
    # resolution of d (1e-7) becomes (1e-7)^{1/3} ~ 5e-3 at alpha = 4, on either powers path
    torch.testing.assert_close(y32.double(), y64, rtol=0, atol=2e-6 if alpha <= 2 else 1e-2)
    assert torch.equal(y32 > 0, y64 > 0) or alpha > 2
    torch.testing.assert_close(y32.sum(-1), torch.ones(x.shape[0]), rtol=0, atol=1e-5)


@pytest.mark.parametrize("d", [1, 2, 15, 16, 17, 33, 64, 65])
def test_entmax_halley_float32_rows_of_every_width_match_float64(vector_isa, d):
    # unmasked float32 rows of up to 64 values take the AVX-512 register kernel (one to four
    # registers, the last one's lanes masked), longer ones the row algorithm: one alpha per
    # row (the learned-alpha case), outputs against the float64 kernel at the same alphas,
    # and weights against y^{2-alpha}
    from regattn.mappings._kernels import kernels, mask_arg

    x, _ = random_case(seed=d, rows=300, d=d)
    x[:20] *= 30
    generator = torch.Generator().manual_seed(d)
    alpha = (1.05 + 0.9 * torch.rand(x.shape[0], generator=generator, dtype=torch.float64)).float()
    y32, w32 = kernels.entmax_halley_weights_rows(x.float(), mask_arg(None), alpha)
    y64 = kernels.entmax_halley_rows(x, mask_arg(None), alpha.double())
    # y = (z - tau)^q / S with q = 1/(alpha - 1) up to 20: q times the rounding of z - tau
    torch.testing.assert_close(y32.double(), y64, rtol=0, atol=5e-6)
    torch.testing.assert_close(y32.sum(-1), torch.ones(x.shape[0]), rtol=0, atol=1e-5)
    expected = torch.where(y32 > 0, y32.double().pow(2 - alpha.double()[:, None]), 0.0)
    torch.testing.assert_close(w32.double(), expected, rtol=1e-5, atol=0)


@pytest.mark.parametrize("name", mappings.NAMES)
# (a -inf score is a masked position: test_mappings_neg_inf)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_kernels_check_finiteness_of_unmasked_scores_only(name, bad):
    # the kernels check the scores as they read them (to_rows leaves it to them on CPU)
    module = mappings.build(name, **PARAMS.get(name, {}))
    x = torch.randn(6, 9)
    x[4, 3] = bad
    kind = "nan" if bad != bad else "infinite"
    with pytest.raises(ValueError, match=f"(?i){kind}"):
        module(x)
    mask = torch.ones(6, 9, dtype=torch.bool)
    mask[4, 3] = False
    y = module(x, mask=mask)
    assert torch.isfinite(y).all() and y[4, 3] == 0


@pytest.mark.parametrize("d", [1, 2, 7, 16, 17, 30, 50, 64, 65, 400])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize(
    "name, params",
    [
        ("fusedmax", {"lam": 0.1}),
        ("fusedmax", {"lam": 1.0, "gamma": 3.0}),
        ("oscarmax", {"lam": 0.01}),
    ],
)
def test_grouped_float32_kernels_match_float64(vector_isa, d, masked, name, params):
    # every path of the float32 fusedmax kernel (AVX-512: fusedmax_rows_avx512 on unmasked
    # rows, its threshold by pairwise comparisons up to 16 candidates, Michelot's passes in
    # registers up to 64 and in memory beyond; Condat's algorithm on whole rows at large lam)
    # and of the grouped backward (its compaction, shared with oscarmax) against the float64
    # kernels on the same scores: values and gradients to float32 rounding, the same groups on
    # the support
    x, mask = random_case(seed=d + 100, rows=300, d=d)
    mask = mask if masked else None
    x[:20] *= 0.01  # near-uniform rows: every value a candidate
    x[20:40] *= 20  # supports of one or two values
    x = x.float()
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(d), dtype=torch.float64)
    outputs = []
    for dtype in (torch.float32, torch.float64):
        xr = x.to(dtype).requires_grad_()
        y = mappings.build(name, **params)(xr, mask=mask)
        (g,) = torch.autograd.grad(y, xr, grad.to(dtype))
        outputs.append((y.detach().double(), g.double()))
    (y32, g32), (y64, g64) = outputs
    torch.testing.assert_close(y32, y64, rtol=0, atol=2e-6)
    assert torch.equal(y32 > 0, y64 > 0)
    torch.testing.assert_close(g32, g64, rtol=0, atol=1e-5)
    if name == "fusedmax":
        y32k, group32 = fusedmax_rows(x, mask, params.get("gamma", 1.0), params["lam"])
        _, group64 = fusedmax_rows(x.double(), mask, params.get("gamma", 1.0), params["lam"])
        on = y32k > 0
        for r in range(x.shape[0]):
            assert same_partition(group32[r][on[r]], group64[r][on[r]])
    x_bad = x.clone()
    x_bad[7, d // 2] = float("nan")
    with pytest.raises(ValueError, match="(?i)nan"):
        mappings.build(name, **params)(x_bad)


@pytest.mark.parametrize("d", [7, 17, 30, 50, 64, 65, 400])
def test_fusedmax_float32_avx512_groups_with_ties_match_portable(d):
    # scores tied and spaced by multiples of lam: runs of equal scores fuse, and neighbours
    # 2 lam apart sit at the edge of fusing. The AVX-512 rows label a segment by its first
    # position where neighbours' values differ (a running max over the lanes, across
    # vectors), the portable rows by counting the windows' and Condat's segments: the same
    # values and the same partition on the support, up to segments of equal value
    from regattn.mappings._kernels import kernels

    x, _ = random_case(seed=d + 700, rows=200, d=d, ties=True)
    x = (x * 0.05).float()
    results = []
    try:
        for isa in ("avx512", "portable"):
            if not kernels.use_vector_isa(isa):
                pytest.skip(f"this CPU has no {isa}")
            results.append(fusedmax_rows(x, None, 1.0, 0.1))
    finally:
        kernels.use_vector_isa("avx512")
    (y_vec, group_vec), (y_port, group_port) = results
    torch.testing.assert_close(y_vec, y_port, rtol=0, atol=1e-6)
    for r in range(x.shape[0]):
        on = (y_vec[r] > 0) & (y_port[r] > 0)
        assert same_partition_up_to_ties(
            y_port[r][on].double(), group_vec[r][on], group_port[r][on]
        )
