"""The compiled kernels write only inside their buffers: every mapping's forward and backward,
on every vector path, over rows whose length grows one value at a time, in a child process
under glibc's malloc checker (libc_malloc_debug, glibc.malloc.check=3), or under
AddressSanitizer where the suite runs under it (`make test-asan`).

The kernels keep per-thread scratch that grows with the row length, and their vector paths
store whole vectors past a row's end into that scratch's slack. A write past an allocation
corrupts the heap silently: the process aborts later, at another kernel's allocation (this is
how a fusedmax scratch sized by one buffer's length showed up, as a SIGABRT of the test suite
thousands of tests after the write). The checker puts a guard byte right after each block and
aborts at the block's free. Each first row length runs in a new thread, whose per-thread
scratch is then allocated for exactly that length and freed when the thread ends; the thread
then also runs the next few lengths, because an undersized buffer overflows only for rows a
few values longer than the one it was sized for.
"""

import os
import sys
import textwrap
from pathlib import Path

import children
import pytest

import regattn
from regattn.mappings._kernels import kernels

MALLOC_DEBUG = Path("/lib/x86_64-linux-gnu/libc_malloc_debug.so.0")

pytestmark = [
    pytest.mark.skipif(kernels is None, reason="regattn._C is not built"),
    pytest.mark.skipif(not MALLOC_DEBUG.exists(), reason="no libc_malloc_debug (glibc's checker)"),
]

CHILD = textwrap.dedent(
    """
    import sys
    import threading
    import torch
    from regattn import mappings
    from regattn.mappings._kernels import kernels

    CASES = {
        "softmax": dict(gamma=0.5),
        "sparsemax": dict(gamma=0.5),
        "sq_pnorm_max": dict(p=1.5),
        "fusedmax": dict(lam=0.1),
        "oscarmax": dict(lam=0.01),
        "entmax15": dict(alpha=1.5),
        "entmax_1.3": dict(alpha=1.3),
    }
    isa, longest, grow = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if not kernels.use_vector_isa(isa):
        print("no", isa)
        sys.exit(3)
    torch.set_num_threads(1)  # the kernels run on the calling thread, in its scratch
    gen = torch.Generator().manual_seed(0)
    failures = []

    def rows_from(first):
        # every mapping at `first` values, then at each of the next `grow` lengths
        try:
            for d in range(first, first + grow + 1):
                x = torch.randn(67, d, generator=gen)  # 67 rows: not a multiple of 2 or 4
                x[::4] *= 0.01  # near-uniform rows: every value a candidate, most TV edges failing
                x[1::4, ::2] += 0.05  # alternating rows: every guessed TV dual wrong
                mask = torch.rand(67, d, generator=gen) > 0.3
                mask[:, 0] = True
                for key, params in CASES.items():
                    fn = getattr(mappings, "entmax" if key.startswith("entmax") else key)
                    for m in (None, mask):
                        xr = x.clone().requires_grad_()
                        y = fn(xr, mask=m, **params)
                        (y * torch.arange(d)).sum().backward()
                        assert torch.isfinite(xr.grad).all(), (key, d)
        except Exception as err:
            failures.append((first, repr(err)))

    # a new thread per first length: its scratch is allocated for exactly that length (no
    # spare capacity from earlier growth), and freed (checked) when the thread ends
    for first in range(1, longest + 1):
        worker = threading.Thread(target=rows_from, args=(first,))
        worker.start()
        worker.join()
    print("failures", failures)
    sys.exit(4 if failures else 0)
    """
)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_kernels_write_inside_their_buffers_as_rows_grow(isa):
    # the child imports the regattn this process imported (-P: not the one in its working
    # directory), so that under `make test-asan` it is the instrumented build
    package_root = str(Path(regattn.__file__).resolve().parent.parent)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": package_root}
    if "libasan" not in env.get("LD_PRELOAD", ""):
        # under `make test-asan` the child inherits AddressSanitizer, which checks every write
        env.update(LD_PRELOAD=str(MALLOC_DEBUG), GLIBC_TUNABLES="glibc.malloc.check=3")
    # first lengths up to 72, each grown by up to 9 values: past one and several 16-lane
    # vectors and the register kernels' 64-value limit, and every length up to kPad (8) + 1
    # beyond the one a thread's scratch was sized for
    command = [sys.executable, "-P", "-c", CHILD, isa, "72", "9"]
    done = children.run(command, env=env, timeout=600)
    if done.returncode == 3:
        pytest.skip(f"this CPU has no {isa}")
    assert done.returncode == 0, (
        f"the kernels corrupted the heap on the {isa} path (exit {done.returncode}): "
        f"{done.stderr[-2000:]}{done.stdout[-500:]}"
    )
    assert "failures []" in done.stdout
