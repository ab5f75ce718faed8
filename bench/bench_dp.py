#!/usr/bin/env python
"""Time the smoothed Viterbi of regattn.dp against autograd through the recursion and a hard
Viterbi forward.

Entry point; the code and its full documentation: regattn_bench.dp_speed."""

from regattn_bench.dp_speed import main

if __name__ == "__main__":
    main()
