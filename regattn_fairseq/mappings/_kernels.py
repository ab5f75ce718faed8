"""The compiled row kernels (regattn_fairseq._C), built by `make setup` / `pip install -e .`."""
import contextlib

import torch

try:
    from regattn_fairseq import _C as kernels  # noqa: F401
except ImportError as err:  # pragma: no cover - only without a build
    raise ImportError(
        "regattn_fairseq's compiled kernels are missing: build them with `make setup` "
        "(or `pip install --no-build-isolation -e .` in an environment that has torch)"
    ) from err

_NO_TENSOR = torch.empty(0, dtype=torch.bool)


def mask_arg(mask):
    """The kernels take an empty tensor for "no mask"."""
    return mask if mask is not None else _NO_TENSOR


_kernels_enabled = True


def use_kernels(x: torch.Tensor) -> bool:
    """Whether x's rows go through the compiled kernels (CPU) or the torch reference."""
    return _kernels_enabled and x.device.type == "cpu"


@contextlib.contextmanager
def torch_reference():
    """Within this block every mapping uses its pure-torch reference path, as on devices
    without a kernel; tests compare it with the kernels, benchmarks time both."""
    global _kernels_enabled
    previous, _kernels_enabled = _kernels_enabled, False
    try:
        yield
    finally:
        _kernels_enabled = previous
