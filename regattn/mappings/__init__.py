"""Regularized attention mappings Pi_Omega(x) = argmax_{y in simplex} y.x - gamma Omega(y).

Pure torch (plus compiled row kernels); importing this package never imports fairseq.

    from regattn import mappings
    mappings.fusedmax(scores, dim=-1, mask=padding_is_false, gamma=1.0, lam=0.1)
    attn = mappings.build("oscarmax", lam=0.01)   # nn.Module: attn(scores, dim=-1, mask=None)
"""
from __future__ import annotations

import inspect

from torch import nn

from .entmax import Entmax, entmax
from .fused import Fusedmax, fusedmax, prox_tv1d
from .oscar import Oscarmax, oscarmax, prox_pairwise_max
from .pnorm import SqPnormMax, sq_pnorm_max
from .simplex import Softmax, Sparsemax, softmax, sparsemax
from ._kernels import torch_reference

MODULES = {
    "softmax": Softmax,
    "sparsemax": Sparsemax,
    "sq_pnorm_max": SqPnormMax,
    "fusedmax": Fusedmax,
    "oscarmax": Oscarmax,
    "entmax": Entmax,
}
NAMES = tuple(MODULES)


def defaults_of(name: str) -> dict:
    """The parameters mapping `name` takes, with their (paper) defaults,
    e.g. {"gamma": 1.0, "lam": 0.1} for fusedmax."""
    check_name(name)
    return {k: p.default for k, p in inspect.signature(MODULES[name]).parameters.items()}


def parameters_of(name: str) -> tuple:
    """The names of the parameters mapping `name` takes (e.g. ("gamma", "lam") for fusedmax)."""
    return tuple(defaults_of(name))


def check_name(name: str) -> None:
    if name not in MODULES:
        raise ValueError(f"unknown attention mapping {name!r}; choose one of {', '.join(NAMES)}")


def build(name: str, **params) -> nn.Module:
    """The mapping `name` as an nn.Module called as module(scores, dim=-1, mask=None).
    Parameters the mapping does not take are an error, not ignored."""
    allowed = parameters_of(name)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"attention mapping {name!r} takes no parameter {', '.join(map(repr, unknown))}; "
                         f"its parameters are: {', '.join(allowed) or 'none'}")
    return MODULES[name](**params)


__all__ = [
    "NAMES", "build", "defaults_of", "parameters_of",
    "softmax", "sparsemax", "sq_pnorm_max", "fusedmax", "oscarmax", "entmax",
    "prox_tv1d", "prox_pairwise_max", "torch_reference",
    "Softmax", "Sparsemax", "SqPnormMax", "Fusedmax", "Oscarmax", "Entmax",
]
