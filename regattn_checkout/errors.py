"""The error the reproduction suite and the benchmarks report to their user without a
traceback."""


class ReproError(RuntimeError):
    """A user-facing failure (bad input, missing data, failed tool); printed without a traceback."""
