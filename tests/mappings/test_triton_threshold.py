"""The Triton row kernels' threshold searches (safeguarded Newton/Halley steps from a
bracket, the exact finish on the support) and their multi-row programs, in Triton's
interpreter: against the compiled CPU kernels, the safeguard's bisection fallbacks hit (forced
from the first step, and where Newton leaves the bracket by itself), few steps on the tests'
rows, several rows per program at d <= 128 (d not a power of two, masked and empty rows),
and the edge rows: d = 1, -inf entries, ties, large magnitudes. The steps and programs are
counted by regattn_bench.kernel_passes. Small shapes: the interpreter is slow."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from mapping_helpers import TRITON_CASES  # noqa: E402
from test_triton_kernels import case, run  # noqa: E402

from regattn import mappings  # noqa: E402
from regattn.mappings import _kernels  # noqa: E402
from regattn_bench import kernel_passes  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:divide by zero:RuntimeWarning",
    "ignore:invalid value:RuntimeWarning",
    "ignore:overflow encountered:RuntimeWarning",
)

if not _kernels.triton_interpreting():
    pytest.skip("TRITON_INTERPRET is set to 0", allow_module_level=True)

SEARCHES = ["sparsemax", "entmax15", "entmax13", "sq_pnorm_max", "sq_pnorm_max_p12"]


def counted(name, params, x, mask):
    """The forward's launch (kernel_passes.Launch) of mapping `name` on x."""
    with mappings.backend("triton"), kernel_passes.count_kernel_passes() as launches:
        getattr(mappings, name)(x, mask=mask, **params)
    (launch,) = launches
    return launch


def assert_matches_cpu(name, params, x, mask, tol=1e-12):
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    y_t, g_t = run("triton", name, params, x, mask, grad)
    y_c, g_c = run("cpu", name, params, x, mask, grad)
    torch.testing.assert_close(y_t, y_c, rtol=0, atol=tol)
    torch.testing.assert_close(g_t, g_c, rtol=0, atol=tol * 10)


@pytest.mark.parametrize("key", SEARCHES)
def test_search_takes_few_steps_on_random_rows(key):
    # bisection took 29 steps in float32 (and 3-4 more to finish); Newton from the bracket's
    # lower end a handful
    name, params = TRITON_CASES[key]
    x, mask, _ = case(31, rows=4, d=50, dtype=torch.float32)
    launch = counted(name, params, x, mask)
    assert max(p.steps for p in launch.programs) <= 8
    assert_matches_cpu(name, params, x.double(), mask)


@pytest.mark.parametrize("key", SEARCHES)
def test_forced_bisection_fallback_stays_exact(key, monkeypatch):
    # no pure Newton steps: every other step bisects from the first (the safeguard's path for
    # rows whose Newton steps crawl); the result must not change
    from regattn.mappings import _triton

    monkeypatch.setattr(_triton, "NEWTON_STEPS", 0)
    name, params = TRITON_CASES[key]
    x, mask, _ = case(32, rows=3, d=21)
    x = x / 4  # a smaller spread: more values in the support, a search of several steps
    x[2] = (x[2] * 4).round()  # ties
    launch = counted(name, params, x, mask)
    assert all(p.bisections >= 1 for p in launch.programs)
    assert_matches_cpu(name, params, x, mask)


def test_halley_leaving_the_bracket_falls_back_to_bisection():
    # alpha > 2: F is concave and Halley/Newton steps overshoot the root (on 2 of the 9
    # steps of these 8 rows, in one program)
    x, mask, _ = case(33, rows=8, d=17)
    params = {"alpha": 2.5}
    launch = counted("entmax", params, x, mask)
    assert all(p.bisections >= 1 for p in launch.programs)
    assert_matches_cpu("entmax", params, x, mask)


@pytest.mark.parametrize("key", ["softmax", *SEARCHES])
def test_several_rows_per_program_at_short_rows(key):
    # d = 20 (a block of 32): 32 rows per program, so 45 rows take 2 programs, the second
    # partly empty; masked positions, a row with no unmasked position (empty="zero"), a row
    # of -inf scores but one
    name, params = TRITON_CASES[key]
    x, mask, grad = case(34, rows=45, d=20)
    mask[3] = False
    x[7, 1:] = float("-inf")
    launch = counted(name, {**params, "empty": "zero"}, x, mask)
    assert len(launch.programs) == 2
    y_t, g_t = run("triton", name, {**params, "empty": "zero"}, x, mask, grad)
    y_c, g_c = run("cpu", name, {**params, "empty": "zero"}, x, mask, grad)
    torch.testing.assert_close(y_t, y_c, rtol=0, atol=1e-12)
    torch.testing.assert_close(g_t, g_c, rtol=0, atol=1e-10)
    assert (y_t[3] == 0).all() and y_t[7, 0] == 1


@pytest.mark.parametrize("key", ["softmax", *SEARCHES])
def test_edge_rows(key):
    name, params = TRITON_CASES[key]
    # d = 1
    one = torch.tensor([[0.3], [-2.0]], dtype=torch.float64)
    y, _ = run("triton", name, params, one, None, torch.ones_like(one))
    torch.testing.assert_close(y, torch.ones_like(one))
    # large magnitudes, ties, every value tied, a -inf entry
    x = torch.tensor(
        [
            [1e30, 1e30 - 1e24, -1e30, 5e29],
            [1.0, 1.0, 1.0, 0.5],
            [2.0, 2.0, 2.0, 2.0],
            [0.1, float("-inf"), 0.3, -0.2],
        ],
        dtype=torch.float64,
    )
    assert_matches_cpu(name, params, x, None)


def michelot_worst_row():
    """A float64 row on which Michelot's iteration (sparsemax's Newton steps) from tau = -1
    drops one value per step, 17 steps: each value lies just below the threshold of the
    values above it, by gaps that grow about m-fold (from 1e-15)."""
    z, gap = [0.0, 0.0], 1e-15
    for m in range(2, 18):
        z.append((sum(z) - 1) / m - gap)
        gap *= m + 1.2
    return torch.tensor([z], dtype=torch.float64)


def test_newton_steps_that_crawl_are_interleaved_with_bisection():
    x = michelot_worst_row()
    launch = counted("sparsemax", {}, x, None)
    (program,) = launch.programs
    assert program.bisections >= 1
    assert_matches_cpu("sparsemax", {}, x, None)
    y, _ = run("triton", "sparsemax", {}, x, None, torch.ones_like(x))
    expected = mappings.simplex.project_simplex_rows_by_sort(x - x.max(), None)
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-12)


def test_softmax_checks_fold_into_its_one_pass():
    # the max and the normalizing sum are its only reductions over the row (the checks were
    # three more: min, a count of non-finite values and one of valid positions)
    x, mask, _ = case(35, rows=3, d=40)
    launch = counted("softmax", {"gamma": 0.7}, x, mask)
    assert all(p.reductions == 2 for p in launch.programs)
    assert all(p.reads <= 2 * 3 * 40 + 1 for p in launch.programs)  # the scores, the mask, P


@pytest.mark.parametrize("name", ["fusedmax", "oscarmax"])
def test_grouped_backward_is_one_kernel_with_no_atomics(name):
    x, mask, grad = case(36, rows=3, d=30)
    x[1] = x[1].round()  # tied values: larger groups
    params = {"gamma": 0.8, "lam": 0.3}
    xr = x.clone().requires_grad_()
    with mappings.backend("triton"):
        y = getattr(mappings, name)(xr, mask=mask, **params)
        with kernel_passes.count_kernel_passes() as launches, RecordOps() as ops:
            y.backward(grad)
    assert [launch.kernel for launch in launches] == ["_grouped_support_bwd"]
    assert not any("index_add" in op for op in ops.calls)
    _, g_c = run("cpu", name, params, x, mask, grad)
    torch.testing.assert_close(xr.grad, g_c, rtol=0, atol=1e-12)


class RecordOps(TorchDispatchMode):
    """Records every aten op run within the block."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))
