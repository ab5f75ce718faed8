"""Benchmarks that train fairseq models (model throughput per mapping, the continuous-attention
model, the training layout); `bench/*.py` and `make bench-*` run them. The mapping, DP and
scaling benchmarks, which need no fairseq, are in `regattn_bench`."""
