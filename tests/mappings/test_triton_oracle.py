"""Every Triton kernel (run in Triton's interpreter on CPU tensors) against the independent
convex-solver oracles of mapping_oracles.py on the mappings' defining problems: random rows,
ties and masks, with the parameters away from their defaults."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from mapping_helpers import ORACLE_CASES, oracle_problem  # noqa: E402
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


@pytest.mark.parametrize(("name", "params"), ORACLE_CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_triton_kernel_solves_the_defining_problem(name, params, kind):
    scores, mask = oracle_problem(kind)
    with mappings.backend("triton"):
        got = getattr(mappings, name)(
            torch.from_numpy(scores), mask=torch.from_numpy(mask), **params
        ).numpy()
    expected = np.stack(
        [oracle(name, s, mask=m, **params) for s, m in zip(scores, mask, strict=True)]
    )
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL[name])
