#!/usr/bin/env python
"""How the cost of each mapping grows: forward+backward time against the number of rows (at a

Entry point; the code and its full documentation: regattn_fairseq.benchmarks.scaling."""

from regattn_fairseq.benchmarks.scaling import main

if __name__ == "__main__":
    main()
