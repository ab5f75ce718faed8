#!/usr/bin/env python
"""Pictures of the mappings themselves (no trained model needed).

Entry point; the code and its full documentation:
regattn_fairseq.experiments.report.mapping_plots."""

from regattn_fairseq.experiments.report.mapping_plots import main

if __name__ == "__main__":
    main()
