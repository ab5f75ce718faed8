"""The compiled row kernels (regattn_fairseq._C), built by `make setup` / `pip install -e .`."""
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
    """The kernels take an empty tensor for "no mask" / "no groups"."""
    return mask if mask is not None else _NO_TENSOR
