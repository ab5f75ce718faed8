#!/usr/bin/env python
"""Reproduce one paper table end to end: prepare the data, train one model per attention

Entry point; the code and its full documentation:
regattn_fairseq.experiments.pipelines.reproduce."""

from regattn_fairseq.experiments.pipelines.reproduce import main

if __name__ == "__main__":
    main()
