"""The compiled row kernels (regattn._C), built by `make setup` / `pip install .`.

Without them (a source checkout that was never built, a platform with no compiler) every
mapping still works through its pure-torch reference path; importing warns once, naming
what is missing and how to build it.
"""

import contextlib
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


def mask_arg(mask):
    """The kernels take an empty tensor for "no mask"."""
    return mask if mask is not None else _NO_TENSOR


_kernels_enabled = True


def use_kernels(x: torch.Tensor) -> bool:
    """Whether x's rows go through the compiled kernels (CPU) or the torch reference."""
    return _kernels_enabled and kernels is not None and x.device.type == "cpu"


@contextlib.contextmanager
def torch_reference():
    """Forces the pure-torch reference paths: within this block every mapping computes as on
    devices without a kernel (tests compare it with the kernels, benchmarks time both).

    Returns
    -------
    object
        A context manager; the previous setting is restored on exit.
    """
    global _kernels_enabled
    previous, _kernels_enabled = _kernels_enabled, False
    try:
        yield
    finally:
        _kernels_enabled = previous
