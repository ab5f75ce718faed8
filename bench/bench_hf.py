#!/usr/bin/env python
"""Training step time of a whole Hugging Face model with each regattn attention backend, as a
ratio to `transformers`' own eager and sdpa softmax attention.

Entry point; the code and its full documentation: regattn_bench.hf_speed."""

from regattn_bench.hf_speed import main

if __name__ == "__main__":
    main()
