#!/usr/bin/env python
"""Prepare (tokenize, segment, binarize) one dataset at one scale; cached under data/.

Entry point; the code and its full documentation:
regattn_fairseq.experiments.pipelines.prepare_data."""

from regattn_fairseq.experiments.pipelines.prepare_data import main

if __name__ == "__main__":
    main()
