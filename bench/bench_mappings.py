#!/usr/bin/env python
"""Time every attention mapping on CPU, as a ratio to torch.softmax in the same run.

Entry point; the code and its full documentation: regattn_bench.mapping_speed."""

from regattn_bench.mapping_speed import main

if __name__ == "__main__":
    main()
