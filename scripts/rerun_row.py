#!/usr/bin/env python
"""Re-run one committed result row at its training commit in a git worktree and print the
difference per metric: `scripts/rerun_row.py results/raw/<table>.jsonl RUN_ID`.

Entry point; the code and its full documentation:
regattn_fairseq.experiments.pipelines.rerun."""

from regattn_fairseq.experiments.pipelines.rerun import main

if __name__ == "__main__":
    main()
