"""The reproduction suite: data preparation, training and decoding with fairseq, scoring,
result tables with provenance, sweeps and figures. `scripts/*.py` and the Makefile targets
are thin entry points into these modules."""
