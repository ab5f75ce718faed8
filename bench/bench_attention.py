#!/usr/bin/env python
"""Time the fused sparse attention on a GPU against the row-wise path, sdpa flash and AdaSplash.

Entry point; the code and its full documentation: regattn_bench.attention_speed."""

from regattn_bench.attention_speed import main

if __name__ == "__main__":
    main()
