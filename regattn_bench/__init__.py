"""Benchmarks of the library `regattn` that need no fairseq: the mappings per call against
torch.softmax and the reference libraries, the fused attention, their scaling, the smoothed DP,
and a Hugging Face model's training step per attention backend; with the record every
benchmark keeps of its runs (`run_record`). The model benchmarks, which train fairseq models,
are in `regattn_fairseq.benchmarks`.

The convention for every benchmark: its code is a module of one of these two packages, with a
`main(argv)`, declared once in `regattn_bench.catalog`; `python -m regattn_bench <name>` runs
it, and `make bench-<name>` runs that. Where a result
came from (paths, git state, CPU) is `regattn_checkout`'s, shared with the result rows.

This package imports `regattn` and never `regattn_fairseq` (an import-linter contract), so that
the mapping benchmarks run where fairseq is not installed, e.g. on a GPU machine."""
