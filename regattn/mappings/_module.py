"""The nn.Module form shared by every mapping: one class holds the parameters, checks them
with the same function that checks the functional form's, and calls the function.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ._rows import check_empty


class MappingModule(nn.Module):
    """A mapping with fixed parameters, called as module(scores, dim=-1, mask=None).

    Subclasses (Softmax, Sparsemax, ...) spell out their parameters and defaults in their
    __init__ signature (mappings.defaults_of reads it) and pass them here.

    Parameters
    ----------
    function
        the functional form, function(scores, dim, mask, **params, empty=...).
    check
        raises ValueError on invalid params (the function calls it too).
    empty
        "error" or "zero", see the functions.
    **params
        the mapping's parameters, e.g. gamma=1.0, lam=0.1; each is an attribute.

    Raises
    ------
    ValueError
        on a parameter out of range or an unknown `empty`.
    """

    def __init__(self, function: Callable, check: Callable, empty: str = "error", **params):
        super().__init__()
        check(**params)
        check_empty(empty)
        self._function = function
        self._names = tuple(params)
        for name, value in params.items():
            setattr(self, name, value)
        self.empty = empty

    def forward(
        self, scores: torch.Tensor, dim: int = -1, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mapping of `scores` along `dim` (see the function's docstring)."""
        params = {name: getattr(self, name) for name in self._names}
        return self._function(scores, dim, mask, **params, empty=self.empty)

    def extra_repr(self) -> str:
        shown = [f"{name}={getattr(self, name)}" for name in self._names]
        if self.empty != "error":
            shown.append(f"empty={self.empty!r}")
        return ", ".join(shown)
