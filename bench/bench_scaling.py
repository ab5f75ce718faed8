#!/usr/bin/env python
"""How the cost of each mapping grows: forward+backward time against the number of rows (at a

Entry point; the code and its full documentation: regattn_bench.scaling."""

from regattn_bench.scaling import main

if __name__ == "__main__":
    main()
