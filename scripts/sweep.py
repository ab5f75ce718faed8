#!/usr/bin/env python
"""Hyperparameter sweep as one Hydra multirun: `fairseq-hydra-train --multirun` trains every

Entry point; the code and its full documentation:
regattn_fairseq.experiments.pipelines.sweep."""

from regattn_fairseq.experiments.pipelines.sweep import main

if __name__ == "__main__":
    main()
