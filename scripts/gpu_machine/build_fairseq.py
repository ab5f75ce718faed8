"""fairseq-fixed 0.12.3.1 from its sdist on the GPU machine (Python 3.12, its torch): only
the extensions a training and fairseq-generate need (the Cython batching helpers, libbleu),
compiled in place; fairseq's torch C++/CUDA extensions (libnat, libbase, alignment) are for
models this project does not train and would take minutes of nvcc.

    cd <unpacked sdist> && python3 build_fairseq.py build_ext --inplace -j 16
"""

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

args = ["-std=c++11", "-O3"]
setup(
    name="fairseq-fixed-exts",
    ext_modules=[
        Extension(
            "fairseq.libbleu",
            sources=["fairseq/clib/libbleu/libbleu.cpp", "fairseq/clib/libbleu/module.cpp"],
            extra_compile_args=args,
        ),
        *cythonize(
            [
                Extension(
                    f"fairseq.data.{name}",
                    sources=[f"fairseq/data/{name}.pyx"],
                    language="c++",
                    include_dirs=[numpy.get_include()],
                    extra_compile_args=args,
                )
                for name in ("data_utils_fast", "token_block_utils_fast")
            ],
            language_level=3,
        ),
    ],
)
