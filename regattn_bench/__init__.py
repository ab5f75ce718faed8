"""Benchmarks of the library `regattn` that need no fairseq (the mappings per call against
torch.softmax and the reference libraries, their scaling, the smoothed DP), and what every
benchmark record and result row of the project says about where it ran: the checkout's paths,
its git state, the CPU (`provenance`). `bench/*.py` and `make bench-*` run them; the model
benchmarks, which train fairseq models, are in `regattn_fairseq.benchmarks`.

This package imports `regattn` and never `regattn_fairseq` (an import-linter contract), so the
mapping benchmarks run where fairseq is not installed, e.g. on a GPU machine."""
