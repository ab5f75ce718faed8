#!/usr/bin/env python
"""Training throughput of whole models with each attention mapping, as a ratio to softmax.

Entry point; the code and its full documentation: regattn_fairseq.benchmarks.model_throughput."""

from regattn_fairseq.benchmarks.model_throughput import main

if __name__ == "__main__":
    main()
