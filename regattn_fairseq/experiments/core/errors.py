"""The error the suite reports to its user without a traceback."""


class ReproError(RuntimeError):
    """A user-facing failure (bad input, missing data, failed tool); printed without a traceback."""
