"""Backends and dispatch: which implementation computes a mapping's rows.

Three backends compute every mapping, with the same results (up to float rounding and the
documented splits among tied values):

* "cpu": the compiled C++ row kernels (regattn._C), built by `make setup` /
  `pip install .`; CPU tensors only.
* "triton": Triton kernels (regattn/mappings/_triton.py), one program per row; CUDA tensors,
  or CPU tensors when the environment variable TRITON_INTERPRET=1 was set before triton was
  imported (Triton's interpreter: tests on machines with no GPU). Rows of up to
  TRITON_MAX_D positions; longer rows take the reference path (one warning).
* "reference": pure torch ops, on any device.

Default dispatch: CUDA tensors -> "triton", CPU tensors -> "cpu", any other device ->
"reference"; a backend that is missing (triton not installed, regattn._C not built) falls
back to "reference" with one warning naming what is missing (for triton: only when a CUDA
tensor would have needed it, never at import). `backend(name)` forces one; forcing a
backend that cannot run the tensor at hand raises RuntimeError instead of falling back.
"""

from __future__ import annotations

import contextlib
import os
import warnings

import torch

try:
    from regattn import _C as kernels
except ImportError as err:
    kernels = None
    warnings.warn(
        f"regattn's compiled CPU kernels (regattn._C) are not importable ({err}); every "
        "mapping falls back to its pure-torch reference path, which is exact but slower. "
        "Build them with `make setup` or `pip install --no-build-isolation -e .`.",
        RuntimeWarning,
        stacklevel=2,
    )

_NO_TENSOR = torch.empty(0, dtype=torch.bool)

BACKENDS = ("triton", "cpu", "reference")
# The Triton kernels hold a row in one block (next power of two >= d).
TRITON_MAX_D = 4096

_forced: str | None = None
_warned: set = set()
_triton = None  # the imported regattn.mappings._triton, False once its import failed
_triton_error: str = ""


def mask_arg(mask):
    """The kernels take an empty tensor for "no mask"."""
    return mask if mask is not None else _NO_TENSOR


def warn_once(key: str, message: str) -> None:
    """Warns (RuntimeWarning) the first time `key` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def triton_kernels():
    """The Triton kernel module (regattn.mappings._triton), or None if triton is not importable.

    Returns
    -------
    module or None
        The module, imported on first use (never at `import regattn.mappings`).
    """
    global _triton, _triton_error
    if _triton is None:
        try:
            from . import _triton as module
        except ImportError as err:  # triton not installed (or blocked)
            _triton, _triton_error = False, str(err)
        else:
            _triton = module
    return _triton or None


def triton_interpreting() -> bool:
    """Whether Triton runs in its interpreter (TRITON_INTERPRET=1): kernels on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _triton_runs(x: torch.Tensor) -> bool:
    return x.device.type == "cuda" or (x.device.type == "cpu" and triton_interpreting())


def _too_long(x: torch.Tensor) -> bool:
    if x.dim() > 0 and x.shape[-1] > TRITON_MAX_D:
        warn_once(
            "long",
            f"rows longer than {TRITON_MAX_D} positions do not fit the Triton kernels' one "
            "block per row; they take the pure-torch reference path (exact, slower, and it "
            "synchronizes with the device to validate the scores)",
        )
        return True
    return False


def backend_for(x: torch.Tensor) -> str:
    """The backend that computes the rows of x: "triton", "cpu" or "reference".

    Parameters
    ----------
    x : torch.Tensor
        the (rows, d) scores (or, in a backward pass, outputs) about to be computed on.

    Returns
    -------
    str
        One of BACKENDS, by the rules in this module's docstring.

    Raises
    ------
    RuntimeError
        if a forced backend (see `backend`) is not available or cannot run on x's device.
    """
    forced = _forced
    if forced == "reference":
        return "reference"
    if forced == "cpu":
        if kernels is None:
            raise RuntimeError(
                "backend('cpu') was forced but regattn's compiled kernels (regattn._C) are not "
                "importable; build them with `make setup` or `pip install "
                "--no-build-isolation -e .`"
            )
        if x.device.type != "cpu":
            raise RuntimeError(f"backend('cpu') was forced on a tensor on {x.device}")
        return "cpu"
    if forced == "triton":
        if triton_kernels() is None:
            raise RuntimeError(
                f"backend('triton') was forced but triton is not importable ({_triton_error}); "
                "install it (`pip install triton`; CUDA builds of torch bring their own)"
            )
        if not _triton_runs(x):
            raise RuntimeError(
                f"backend('triton') was forced on a tensor on {x.device}: Triton kernels run "
                "on CUDA tensors, or on CPU tensors under TRITON_INTERPRET=1 (set before "
                "triton is imported)"
            )
        return "reference" if _too_long(x) else "triton"
    device = x.device.type
    if device == "cpu":
        return "cpu" if kernels is not None else "reference"
    if device == "cuda":
        if triton_kernels() is None:
            warn_once(
                "triton",
                f"triton is not importable ({_triton_error}); mappings on CUDA tensors take the "
                "pure-torch reference path (exact, slower, and it synchronizes with the device "
                "to validate the scores). Install triton to use the Triton kernels.",
            )
            return "reference"
        return "reference" if _too_long(x) else "triton"
    warn_once(
        f"device:{device}",
        f"regattn has no kernel for {device} tensors (Triton kernels run on CUDA, the compiled "
        "kernels on CPU); mappings on them take the pure-torch reference path",
    )
    return "reference"


def use_kernels(x: torch.Tensor) -> bool:
    """Whether x's rows go through the compiled CPU kernels (backend "cpu")."""
    return backend_for(x) == "cpu"


def use_triton(x: torch.Tensor) -> bool:
    """Whether x's rows go through the Triton kernels (backend "triton")."""
    return backend_for(x) == "triton"


@contextlib.contextmanager
def backend(name: str):
    """Forces a backend for every mapping computed (forward and backward) within the block.

    Parameters
    ----------
    name : str
        "triton" (CUDA tensors; CPU tensors under TRITON_INTERPRET=1), "cpu" (the compiled
        kernels; CPU tensors) or "reference" (pure torch, any device); None restores the
        default dispatch.

    Returns
    -------
    object
        A context manager; the previous setting is restored on exit.

    Raises
    ------
    ValueError
        on an unknown name.
    RuntimeError
        (when a mapping runs) if the forced backend is not available or cannot run on
        the tensor's device: a forced backend never falls back silently.
    """
    global _forced
    if name is not None and name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    previous, _forced = _forced, name
    try:
        yield
    finally:
        _forced = previous


def torch_reference():
    """Forces the pure-torch reference paths: within this block every mapping computes as on
    devices without a kernel (tests compare it with the kernels, benchmarks time both). The
    same as `backend("reference")`.

    Returns
    -------
    object
        A context manager; the previous setting is restored on exit.
    """
    return backend("reference")


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
