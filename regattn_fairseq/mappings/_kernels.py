"""The compiled row kernels (regattn_fairseq._C), built by `pip install -e .`."""
try:
    from regattn_fairseq import _C as kernels  # noqa: F401
except ImportError as err:  # pragma: no cover - only without a build
    raise ImportError(
        "regattn_fairseq's compiled kernels are missing: build them with `make setup` "
        "(or `pip install --no-build-isolation -e .` in an environment that has torch)"
    ) from err


def mask_arg(mask):
    """The kernels take an empty tensor for "no mask"."""
    import torch

    return mask if mask is not None else torch.empty(0, dtype=torch.bool)
