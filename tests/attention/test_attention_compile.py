"""The fused attention's kernels compile for a CUDA GPU (sm_90) on a machine with none:
Triton lowers them to PTX and its bundled ptxas assembles them, which catches what the
interpreter lets through (loop-carried types, constexpr branches, dot shapes and dtypes).

In a subprocess with TRITON_INTERPRET=0 (the test session runs the interpreter). Slow: a few
minutes on two cores with an empty Triton cache.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

SCRIPT = textwrap.dedent(
    """
    import triton, triton.language as tl
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    from regattn.attention import _blocks, _triton as K

    def signature(fn, pointers, constants):
        return {
            name: "constexpr" if name in constants
            else pointers.get(name, "fp32" if name == "scale" else "i32")
            for name in fn.arg_names
        }

    for dtype, dot, kind, head_dim in [("bf16", tl.bfloat16, 2, 64), ("fp32", tl.float32, 0, 128)]:
        block_m, block_n, warps = _blocks(head_dim, interpreting=False)
        common = dict(
            KIND=kind, HAS_MASK=True, CAUSAL=True, VARLEN=kind == 0, BLOCK_M=block_m,
            BLOCK_N=block_n, BLOCK_D=head_dim, BLOCK_DV=head_dim,
            PRECISION="ieee" if dtype == "fp32" else "tf32", DOT=dot,
        )
        pointers = {name: "*" + dtype for name in ("Q", "K", "V", "DO", "DQ", "DK", "DV_")}
        pointers.update(M="*u8", A="*fp32", CU_Q="*i32", CU_K="*i32", OUT="*fp32", W="*fp32",
                        L="*fp32", STATS="*fp32", ERR="*i32", DELTA="*fp32")
        forward = dict(NEED_ALPHA=kind == 2, STEPS=K.MAX_STEPS, TOL=K.TOL)
        for fn, extra in ((K._attention_fwd, forward), (K._attention_bwd_dq, {}),
                          (K._attention_bwd_dkdv, {})):
            constants = {**common, **extra}
            source = ASTSource(fn, signature(fn, pointers, constants), constants)
            compiled = triton.compile(
                source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}
            )
            assert compiled.asm.get("cubin"), fn.__name__
            print("compiled", fn.__name__, dtype, kind, head_dim)
    """
)


@pytest.mark.slow
def test_kernels_compile_for_sm90():
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=1800
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.count("compiled") == 6
