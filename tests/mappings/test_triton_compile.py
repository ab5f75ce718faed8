"""The row kernels compile for a CUDA GPU (sm_90) on a machine with none: Triton lowers them
to PTX and its bundled ptxas assembles them, which catches what the interpreter lets through
(loop-carried types of the threshold searches' while loops, the scalar branches of the row
checks, scans and sorts), at a multi-row block (BLOCK 128, 8 rows a program) and a one-row
block (BLOCK 1024), in float32 and float64.

In a subprocess with TRITON_INTERPRET=0 (the test session runs the interpreter). Slow: minutes
on two cores with an empty Triton cache.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

SCRIPT = textwrap.dedent(
    """
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    from regattn.mappings import _triton as K

    KERNELS = [
        K._softmax_fwd, K._sparsemax_fwd, K._entmax15_fwd, K._entmax_fwd, K._pnorm_fwd,
        K._fusedmax_fwd, K._oscarmax_fwd, K._support_bwd, K._pnorm_bwd, K._grouped_support_bwd,
    ]
    for dtype, eps in (("fp32", 1.2e-7), ("fp64", 2.3e-16)):
        for block, rows in ((128, 8), (1024, 1)):
            for fn in KERNELS:
                grouped = fn in (K._fusedmax_fwd, K._oscarmax_fwd)
                values = dict(HAS_MASK=True, ROWS=rows, BLOCK=block, MAX_STEPS=74,
                              NEWTON=12, EPS=eps, LOG=block.bit_length(), WEIGHTED=True)
                constants = {n: values[n] for n in fn.arg_names if n in values}
                ints = {"ERR", "GROUP"} | ({"G"} if grouped else set())
                signature = {
                    name: "constexpr" if name in constants
                    else "*u8" if name == "M"
                    else "*i32" if name in ints
                    else "i32" if name in ("rows", "d")
                    else "*" + dtype
                    for name in fn.arg_names
                }
                warps = K.num_warps(block * rows)
                compiled = triton.compile(
                    ASTSource(fn, signature, constants),
                    target=GPUTarget("cuda", 90, 32),
                    options={"num_warps": warps},
                )
                assert compiled.asm.get("cubin"), fn.__name__
                print("compiled", fn.__name__, dtype, block)
    """
)


@pytest.mark.slow
def test_row_kernels_compile_for_sm90():
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=3600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.count("compiled") == 40
