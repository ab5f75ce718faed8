#!/usr/bin/env python
"""Count the Triton row kernels' global reads and writes, reductions and threshold-search
steps per row, in Triton's interpreter -> results/bench/row_kernel_passes.md.

Entry point; the code and its full documentation: regattn_bench.kernel_passes."""

import os

# the interpreter must be chosen before triton is imported
os.environ["TRITON_INTERPRET"] = "1"

from regattn_bench.kernel_passes import main  # noqa: E402

if __name__ == "__main__":
    main()
