"""Session-wide test settings, and the tiny fairseq data of the trees that train models.

TRITON_INTERPRET=1 runs the Triton kernels in Triton's interpreter on CPU tensors (how they
are tested without a GPU). Triton reads it when a kernel is decorated, i.e. when
`regattn.mappings._triton` is first imported, which may happen in any test module (a
backend test, torch.compile's inductor): so it is set here, before any test module imports
anything. On a GPU machine, `TRITON_INTERPRET=0 pytest` runs the CUDA tests instead (the
interpreter tests then skip themselves).

`translation_data` and `snli_data` serve tests/plugin/ and the suite's tests of trained
checkpoints (tests/experiments/studies/); they import fairseq only when a test asks for them,
so that the library's tests run where fairseq is not installed (`make test-cuda` on a GPU
machine).
"""

import datetime
import os
import random
import zlib

import pytest
from slow_tier import CI_DEADLINE_ENV, changed_modules, past_ci_deadline, todays_slow_tests

os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _seeded_global_generators(request):
    """Each test starts from its own fixed state of torch's and Python's global generators,
    derived from its id: a test that draws without a generator of its own then draws the same
    numbers whichever tests ran before it in its worker (pytest-xdist orders them anew each
    run), so a tolerance it passes here it passes in CI."""
    import torch

    seed = zlib.crc32(request.node.nodeid.encode())
    random.seed(seed)
    torch.manual_seed(seed)


@pytest.fixture(scope="session")
def translation_data(tmp_path_factory):
    """Tiny binarized src->tgt data (`fairseq_helpers.make_translation_data`)."""
    from fairseq_helpers import make_translation_data

    return make_translation_data(tmp_path_factory.mktemp("translation"))


@pytest.fixture(scope="session")
def snli_data(tmp_path_factory):
    """Tiny data of the regattn_snli task (`fairseq_helpers.make_snli_data`)."""
    from fairseq_helpers import make_snli_data

    return make_snli_data(tmp_path_factory.mktemp("snli"))


def pytest_addoption(parser):
    parser.addoption(
        "--slow-tier",
        choices=("all", "daily"),
        default="all",
        help="daily: of the tests marked slow, today's half and those whose module changed in "
        "the last day's commits (CI; tests/slow_tier.py)",
    )


def pytest_runtest_setup(item):
    if past_ci_deadline(item.get_closest_marker("slow") is not None):
        pytest.skip(
            f"CI's time budget for the slow tier is spent ({CI_DEADLINE_ENV}); this test runs "
            "on a later day, or in `make test-slow`"
        )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow-tier") != "daily":
        return
    slow = [item.nodeid for item in items if item.get_closest_marker("slow")]
    today = datetime.datetime.now(datetime.UTC).date()
    _, left_out = todays_slow_tests(slow, today, changed_modules(config.rootpath))
    if left_out:
        left_out = set(left_out)
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid in left_out])
        items[:] = [item for item in items if item.nodeid not in left_out]
