"""Builds the compiled kernels (regattn._C) with torch's extension builder.

Metadata lives in pyproject.toml. Install with `pip install --no-build-isolation -e .` so the
extension is compiled against the torch already in the environment (`make setup` does this).
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    ext_modules=[
        CppExtension(
            "regattn._C",
            ["regattn/csrc/regattn_cpu.cpp"],
            # -fno-math-errno: the kernels never read errno, and without it GCC keeps sqrt scalar
            # (with a branch to the libm call that would set errno) instead of vectorizing it
            extra_compile_args=["-O3", "-fno-math-errno", "-fopenmp"],
            extra_link_args=["-fopenmp"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
