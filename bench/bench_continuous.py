#!/usr/bin/env python
"""Continuous attention vs discrete softmax in the LSTM decoder: step time and training tokens/s.

Entry point; the code and its full documentation: regattn_fairseq.benchmarks.continuous_speed."""

from regattn_fairseq.benchmarks.continuous_speed import main

if __name__ == "__main__":
    main()
