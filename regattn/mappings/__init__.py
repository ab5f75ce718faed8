"""Regularized attention mappings Pi_Omega(x) = argmax_{y in simplex} y.x - gamma Omega(y).

Pure torch (plus compiled row kernels); importing this package never imports fairseq.

    from regattn import mappings
    mappings.fusedmax(scores, dim=-1, mask=padding_is_false, gamma=1.0, lam=0.1)
    attn = mappings.build("oscarmax", lam=0.01)   # nn.Module: attn(scores, dim=-1, mask=None)

`normmax` (Omega = ||y||_alpha) and `budget_sparsemax` (sparsemax over the capped simplex)
are mappings too, in pure torch, outside NAMES (the fairseq plugin and `build` do not offer
them). A -inf score is a masked position in every mapping (combined with `mask=` by AND);
+inf and NaN scores are errors.

Every mapping takes `empty="error"` (a row with no unmasked position is a ValueError) or
`empty="zero"` (such a row gets zeros and zero gradient), and computes on each row minus its
max over the unmasked positions (it is invariant to that shift), so that its accuracy is set
by the spread of the scores, not by their magnitude.

Backends (see _kernels.py): CUDA tensors go through Triton kernels, CPU tensors through the
compiled C++ kernels, anything else (or a missing backend, with one warning) through pure
torch; `with mappings.backend("triton" | "cpu" | "reference"):` forces one, and
`mappings.sync_checks()` makes the Triton path's validation errors synchronous ValueErrors.
"""

from __future__ import annotations

import inspect

from torch import nn

from ._kernels import BACKENDS, backend, sync_checks, torch_reference
from .budget import BudgetSparsemax, budget_sparsemax
from .entmax import Entmax, entmax
from .fused import Fusedmax, fusedmax, prox_tv1d
from .normmax import Normmax, normmax
from .oscar import Oscarmax, oscarmax, prox_pairwise_max
from .pnorm import SqPnormMax, sq_pnorm_max
from .simplex import Softmax, Sparsemax, Uniform, softmax, sparsemax, uniform

MODULES = {
    "softmax": Softmax,
    "sparsemax": Sparsemax,
    "sq_pnorm_max": SqPnormMax,
    "fusedmax": Fusedmax,
    "oscarmax": Oscarmax,
    "entmax": Entmax,
}
NAMES = tuple(MODULES)
# Controls: normalizers that are no regularized max of the scores, built and checked like the
# mappings but kept out of NAMES (what the library's mapping tests and figures iterate over).
# uniform is the attention-free control of the tables' claims (1/n, whatever the scores).
CONTROLS = {"uniform": Uniform}
CONTROL_NAMES = tuple(CONTROLS)


def _module_class(name: str) -> type:
    """The nn.Module class of a mapping or control (looked up at each call: a mapping
    registered in MODULES after import, as docs/extending.md does, is found).
    """
    check_name(name)
    return MODULES.get(name) or CONTROLS[name]


def defaults_of(name: str) -> dict:
    """The regularization parameters of a mapping, with their (paper) defaults.

    Parameters
    ----------
    name : str
        one of NAMES or CONTROL_NAMES.

    Returns
    -------
    dict
        A dict such as {"gamma": 1.0, "lam": 0.1} for fusedmax (read off the module's
        constructor; `empty`, which is not a parameter of the mapping, is left out).

    Raises
    ------
    ValueError
        if `name` is not one of NAMES.
    """
    return {
        k: p.default
        for k, p in inspect.signature(_module_class(name)).parameters.items()
        if k != "empty"
    }


def parameters_of(name: str) -> tuple:
    """The names of the regularization parameters of a mapping.

    Parameters
    ----------
    name : str
        one of NAMES.

    Returns
    -------
    tuple
        A tuple such as ("gamma", "lam") for fusedmax.

    Raises
    ------
    ValueError
        if `name` is not one of NAMES.
    """
    return tuple(defaults_of(name))


def check_name(name: str) -> None:
    """Raises ValueError unless `name` is one of NAMES or CONTROL_NAMES."""
    if name not in MODULES and name not in CONTROLS:
        raise ValueError(
            f"unknown attention mapping {name!r}; choose one of {', '.join(NAMES)} (or the "
            f"control {', '.join(CONTROL_NAMES)})"
        )


def build(name: str, empty: str = "error", **params) -> nn.Module:
    """A mapping as an nn.Module, called as module(scores, dim=-1, mask=None).

    Parameters
    ----------
    name : str
        one of NAMES.
    empty : str
        what a row with no unmasked position gets: "error" (a ValueError) or "zero"
        (all zeros, zero gradient).
    **params
        the mapping's parameters (see parameters_of); missing ones take their
        defaults (defaults_of).

    Returns
    -------
    nn.Module
        The module (Softmax, Sparsemax, SqPnormMax, Fusedmax, Oscarmax, Entmax, or the
        control Uniform).

    Raises
    ------
    ValueError
        on an unknown name, a parameter the mapping does not take (an error, not
        ignored), a parameter out of range, or an unknown `empty`.
    """
    allowed = parameters_of(name)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"attention mapping {name!r} takes no parameter {', '.join(map(repr, unknown))}; "
            f"its parameters are: {', '.join(allowed) or 'none'}"
        )
    return _module_class(name)(**params, empty=empty)


__all__ = [
    "NAMES",
    "CONTROL_NAMES",
    "build",
    "defaults_of",
    "parameters_of",
    "softmax",
    "sparsemax",
    "sq_pnorm_max",
    "fusedmax",
    "oscarmax",
    "entmax",
    "uniform",
    "normmax",
    "budget_sparsemax",
    "prox_tv1d",
    "prox_pairwise_max",
    "torch_reference",
    "backend",
    "BACKENDS",
    "sync_checks",
    "Softmax",
    "Sparsemax",
    "SqPnormMax",
    "Fusedmax",
    "Oscarmax",
    "Entmax",
    "Uniform",
    "Normmax",
    "BudgetSparsemax",
]
