#!/usr/bin/env python
"""Put the committed γ-grid selection logs (results/gamma_grids/) into a table run's work folder,
so that `reproduce.py --gamma auto` reads them instead of training the grids again.

Entry point; the code and its full documentation:
regattn_fairseq.experiments.pipelines.grid_logs."""

import sys

from regattn_fairseq.experiments.pipelines.grid_logs import main

if __name__ == "__main__":
    sys.exit(main())
