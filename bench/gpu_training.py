#!/usr/bin/env python
"""Training on one GPU, read off the logs of a device run, against the CPU runs.

Entry point; the code and its full documentation: regattn_fairseq.benchmarks.gpu_training."""

from regattn_fairseq.benchmarks.gpu_training import main

if __name__ == "__main__":
    main()
