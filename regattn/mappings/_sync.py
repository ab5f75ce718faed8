"""The Triton backend's debug switch, `sync_checks`: its own module, so that the kernel
dispatch (_kernels.py) and the Triton kernels (_triton.py) both read it without importing each
other.
"""

from __future__ import annotations

import contextlib

_sync_checks = False


@contextlib.contextmanager
def sync_checks(enabled: bool = True):
    """Debug mode for the Triton backend: validation errors as ValueError, at once.

    By default the Triton kernels flag invalid rows (NaN/infinite scores, a spread that
    overflows, alpha out of range, a row with no unmasked position) on the device and the
    flags are raised by `torch._assert_async` with no host-device synchronization (on CUDA a
    device-side assertion, reported at the next synchronization, fatal to the CUDA context).
    Within this block the flags are read on the host after each kernel (a synchronization)
    and raise the same ValueError as the CPU and reference paths.

    Parameters
    ----------
    enabled : bool
        True to read the flags on the host, False for the asynchronous default.

    Returns
    -------
    object
        A context manager; the previous setting is restored on exit.
    """
    global _sync_checks
    previous, _sync_checks = _sync_checks, bool(enabled)
    try:
        yield
    finally:
        _sync_checks = previous


def sync_checks_enabled() -> bool:
    """Whether `sync_checks` is on."""
    return _sync_checks
