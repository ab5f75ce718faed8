"""Every Triton kernel (run in Triton's interpreter on CPU tensors) against the independent
convex-solver oracles of mapping_oracles.py on the mappings' defining problems: random rows,
ties and masks, with the parameters away from their defaults."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from mapping_oracles import oracle  # noqa: E402
from test_mappings_oracle import ATOL  # noqa: E402

from regattn import mappings  # noqa: E402
from regattn.mappings import _kernels  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:divide by zero:RuntimeWarning",
    "ignore:invalid value:RuntimeWarning",
    "ignore:overflow encountered:RuntimeWarning",
)

if not _kernels.triton_interpreting():
    pytest.skip("TRITON_INTERPRET is set to 0", allow_module_level=True)

CASES = [
    ("softmax", {"gamma": 0.7}),
    ("sparsemax", {"gamma": 0.7}),
    ("sq_pnorm_max", {"gamma": 0.8, "p": 1.5}),
    ("fusedmax", {"gamma": 0.8, "lam": 0.3}),
    ("oscarmax", {"gamma": 0.8, "lam": 0.1}),
    ("entmax", {"alpha": 1.5}),
    ("entmax", {"alpha": 1.3}),
]


@pytest.mark.parametrize(("name", "params"), CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_triton_kernel_solves_the_defining_problem(name, params, kind):
    rng = np.random.default_rng(11)
    rows, d = 4, 7
    if kind == "random":
        scores = rng.normal(size=(rows, d)) * 2
    else:
        scores = rng.choice([-1.0, 0.0, 0.5, 1.0], size=(rows, d))
    mask = rng.random((rows, d)) > 0.25
    mask[:, 0] = True
    with mappings.backend("triton"):
        got = getattr(mappings, name)(
            torch.from_numpy(scores), mask=torch.from_numpy(mask), **params
        ).numpy()
    expected = np.stack(
        [oracle(name, s, mask=m, **params) for s, m in zip(scores, mask, strict=True)]
    )
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL[name])
