#!/usr/bin/env python
"""Merge the rows a worktree's or a GPU machine's results folder landed into results/, with
their per-item and figure sidecars (checked against the SHA-256 each row records).

Entry point; the code and its full documentation:
regattn_fairseq.experiments.pipelines.merge_rows."""

import sys

from regattn_fairseq.experiments.pipelines.merge_rows import main

if __name__ == "__main__":
    sys.exit(main())
