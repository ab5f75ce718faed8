"""Benchmarks of the mappings (per call, against torch.softmax and the reference libraries),
of their scaling, and of model training throughput; `bench/*.py` and `make bench-*` run them."""
