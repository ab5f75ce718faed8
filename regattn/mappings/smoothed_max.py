"""The smoothed max max_Omega(x) = max_{y in simplex} y.x - gamma Omega(y), whose gradient is
the mapping Pi_Omega(x) (Niculae & Blondel 2017, §2.2). Useful for plots (the paper's
Figure 2) and as a loss; not needed for attention itself.
"""

from __future__ import annotations

import torch

from . import build, declaration, defaults_of


def _shannon(y, mask, p):
    # xlogy: 0 log 0 = 0 with finite gradients, in every dtype
    return torch.special.xlogy(y, y).sum(-1)


def _squared_l2(y, mask, p):
    return 0.5 * y.square().sum(-1)


def _squared_p_norm(y, mask, p):
    return 0.5 * y.abs().pow(p["p"]).sum(-1).pow(2.0 / p["p"])


def _fused_lasso(y, mask, p):
    chain = y
    if mask is not None:  # the unmasked values first, in order, then zeros
        chain = y.gather(-1, torch.sort((~mask).to(torch.uint8), dim=-1, stable=True).indices)
    steps = (chain[..., 1:] - chain[..., :-1]).abs()
    if mask is not None:  # only the steps between two unmasked values
        n = mask.sum(-1, keepdim=True)
        steps = steps * (torch.arange(1, y.shape[-1], device=y.device) < n)
    return _squared_l2(y, mask, p) + p["lam"] * steps.sum(-1)


def _oscar(y, mask, p):
    magnitude = y.abs()
    pairs = torch.maximum(magnitude.unsqueeze(-1), magnitude.unsqueeze(-2)).triu(1)
    if mask is not None:
        pairs = pairs * (mask.unsqueeze(-1) & mask.unsqueeze(-2))
    return _squared_l2(y, mask, p) + p["lam"] * pairs.sum((-1, -2))


def _tsallis(y, mask, p):
    # the negative Tsallis entropy (Shannon's at alpha = 1)
    alpha = p["alpha"]
    if alpha == 1:
        return _shannon(y, mask, p)
    return (y.pow(alpha).sum(-1) - 1) / (alpha * (alpha - 1))


# a declaration's `omega` -> Omega(y, mask, params) of y's last dimension (without gamma), y
# zero at the masked positions
REGULARIZERS = {
    "shannon": _shannon,
    "squared_l2": _squared_l2,
    "squared_p_norm": _squared_p_norm,
    "fused_lasso": _fused_lasso,
    "oscar": _oscar,
    "tsallis": _tsallis,
}


def regularizer(
    name: str, y: torch.Tensor, dim: int = -1, mask: torch.Tensor | None = None, **params
) -> torch.Tensor:
    """The regularizer gamma * Omega(y) of a mapping, along `dim`: the term its argmax
    subtracts from y.x (for entmax, gamma is 1 and Omega the negative Tsallis entropy).
    With a mask, Omega of the unmasked positions, as the masked mapping sees them: fusedmax's
    chain links consecutive unmasked positions, oscarmax's pairs are pairs of them.

    Parameters
    ----------
    name : str
        one of mappings.NAMES.
    y : torch.Tensor
        points of the simplex along `dim` (e.g. a mapping's output).
    dim : int
        the dimension of the simplex.
    mask : Optional[torch.Tensor]
        optional bool tensor broadcastable to `y`, True at the positions of the problem
        (y should be 0 elsewhere).
    **params
        the mapping's parameters, as in `mappings.build` (defaults filled in).

    Returns
    -------
    torch.Tensor
        gamma * Omega(y), of y's shape without `dim`.

    Raises
    ------
    ValueError
        on an unknown name or bad parameters (as `mappings.build`), or a mapping whose
        declared Omega is not one of REGULARIZERS (a control declares none).
    """
    build(name, **params)  # validates the name and the parameters
    omega = declaration(name).omega
    if omega not in REGULARIZERS:
        raise ValueError(
            f"attention mapping {name!r} declares the regularizer {omega!r}, none of "
            f"smoothed_max's {', '.join(REGULARIZERS)}: it has no smoothed max here"
        )
    p = {**defaults_of(name), **params}
    y = y.movedim(dim, -1)
    if mask is not None:
        mask = mask.expand_as(y.movedim(-1, dim)).movedim(dim, -1)
        y = y.masked_fill(~mask, 0.0)
    return p.get("gamma", 1.0) * REGULARIZERS[omega](y, mask, p)


def max_omega(
    name: str, scores: torch.Tensor, dim: int = -1, mask: torch.Tensor | None = None, **params
) -> torch.Tensor:
    """The smoothed max max_Omega(scores) = max_{y in simplex} y.scores - gamma Omega(y) along
    `dim`, whose gradient in the scores is the mapping (Niculae & Blondel 2017, §2.2).

    Parameters
    ----------
    name : str
        one of mappings.NAMES.
    scores : torch.Tensor
        floating-point tensor of any shape.
    dim : int
        the dimension to take the max over.
    mask : Optional[torch.Tensor]
        optional bool tensor broadcastable to `scores`, True where a position takes
        part; masked positions are excluded.
    **params
        the mapping's parameters, as in `mappings.build`.

    Returns
    -------
    torch.Tensor
        max_Omega(scores), of the scores' shape without `dim`.

    Raises
    ------
    ValueError
        as the mapping (`mappings.build` and its function).
    """
    y = build(name, **params)(scores, dim=dim, mask=mask)
    x = scores if mask is None else scores.masked_fill(~mask, 0.0)
    return (y * x).sum(dim) - regularizer(name, y, dim=dim, mask=mask, **params)
