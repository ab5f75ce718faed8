"""The error the suite reports to its user without a traceback: one class for the suite and the
benchmarks, defined in `regattn_bench.errors` (provenance raises it there too)."""

from regattn_bench.errors import ReproError

__all__ = ["ReproError"]
