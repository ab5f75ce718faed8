#!/usr/bin/env python
"""Training throughput of the tables' LSTM seq2seq by process layout, and a step's profile.

Entry point; the code and its full documentation: regattn_fairseq.benchmarks.training_layout."""

from regattn_fairseq.benchmarks.training_layout import main

if __name__ == "__main__":
    main()
