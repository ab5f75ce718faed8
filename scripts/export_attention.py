#!/usr/bin/env python
"""Write each sentence's attention matrix, for plots, from a checkpoint trained with

Entry point; the code and its full documentation:
regattn_fairseq.experiments.decode.export_attention."""

from regattn_fairseq.experiments.decode.export_attention import main

if __name__ == "__main__":
    main()
