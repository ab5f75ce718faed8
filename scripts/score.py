#!/usr/bin/env python
"""Score a system's output file on one of the suite's test sets (duc2004, gigaword, snli, ...).

Entry point; the code and its full documentation:
regattn_fairseq.experiments.pipelines.score_file."""

import sys

from regattn_fairseq.experiments.pipelines.score_file import main

if __name__ == "__main__":
    sys.exit(main())
