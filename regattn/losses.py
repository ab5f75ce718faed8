"""Fenchel-Young losses (Blondel, Martins & Niculae 2020) of the regularized maxes.

    L_Omega(theta; y) = Omega*(theta) - theta.y + Omega(y),
    Omega*(theta) = max_{p in simplex} p.theta - Omega(p) = p*.theta - Omega(p*),
    p* = mapping(theta)   (the mapping is the gradient of Omega*)

so L = (p* - y).theta - Omega(p*) + Omega(y) >= 0, zero exactly when p* = y, with gradient
mapping(theta) - y in theta: cross-entropy for softmax, the sparsemax loss (Martins &
Astudillo 2016), the entmax losses (Peters, Niculae & Martins 2019) and, for the structured
mappings (fusedmax, oscarmax), losses no other library has. Omega is the mapping's
regularizer with its temperature (mappings.smoothed_max.regularizer), normmax's
gamma ||y||_alpha for normmax.

The gradients are exact by construction: the loss is written with p* held constant (it is
the maximizer, so by the envelope theorem the total derivative of Omega* in theta, and in
entmax's alpha, is the partial one at p*), which gives theta the gradient p* - y and a
tensor alpha dL/dalpha = dOmega_alpha(y)/dalpha - dOmega_alpha(p*)/dalpha, with no
derivative of the mapping computed.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import mappings
from .mappings.normmax import check_normmax
from .mappings.smoothed_max import regularizer

# normmax is outside mappings.NAMES (the plugin and `mappings.build` do not offer it) and has
# a Fenchel-Young loss here all the same
NORMMAX = "normmax"
REDUCTIONS = ("none", "sum", "mean")


def loss_mappings() -> tuple[str, ...]:
    """The mappings with a Fenchel-Young loss: every declared mapping (`mappings.NAMES`, read
    when called, so that a mapping declared after this import counts too; controls, which are
    no regularized max, aside) and normmax. The loss computes p* with the mapping's function,
    `mappings.<name>`, and Omega with its declared regularizer.
    """
    return (*mappings.NAMES, NORMMAX)


def check_loss_options(mapping: str, reduction: str, label_smoothing: float, **params) -> None:
    """Raises ValueError on an unknown mapping or reduction, a label smoothing outside [0, 1),
    or parameters the mapping does not take or that are out of range.
    """
    if mapping not in loss_mappings():
        raise ValueError(
            f"unknown mapping {mapping!r} for a Fenchel-Young loss; choose one of "
            f"{', '.join(loss_mappings())}"
        )
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    if not (
        isinstance(label_smoothing, (int, float))
        and math.isfinite(label_smoothing)
        and 0 <= label_smoothing < 1
    ):
        raise ValueError(f"label_smoothing must be a number in [0, 1), got {label_smoothing!r}")
    if mapping == NORMMAX:
        unknown = sorted(set(params) - {"alpha", "gamma"})
        if unknown:
            raise ValueError(f"normmax takes no parameter {', '.join(map(repr, unknown))}")
        check_normmax(params.get("alpha", 2.0), params.get("gamma", 1.0))
    else:
        mappings.build(mapping, **params)  # names the unknown or out-of-range parameter


def _power(y: torch.Tensor, exponent) -> torch.Tensor:
    """y^exponent with 0^exponent = 0 and a finite gradient in a tensor exponent there."""
    support = y > 0
    return torch.where(support, torch.where(support, y, 1.0).pow(exponent), 0.0)


def _omega(mapping: str, y: torch.Tensor, classes, alpha_rows, params) -> torch.Tensor:
    """Omega(y) of (rows, C) points of the simplex over the `classes` (bool (rows, C), the
    classes whose score is not -inf; None: all), one value per row (alpha_rows: a tensor
    alpha as (rows, 1), else None).
    """
    gamma = params.get("gamma", 1.0)
    if mapping == NORMMAX:
        alpha = params.get("alpha", 2.0) if alpha_rows is None else alpha_rows
        # ||y||_alpha through the largest entry: y^alpha underflows for a large alpha
        top = y.amax(-1, keepdim=True)
        norm = top * _power(y / top, alpha).sum(-1, keepdim=True).pow(1 / alpha)
        return gamma * norm.squeeze(-1)
    if alpha_rows is not None:  # entmax with a tensor alpha (> 1): negative Tsallis entropy
        tsallis = (_power(y, alpha_rows).sum(-1, keepdim=True) - 1) / (
            alpha_rows * (alpha_rows - 1)
        )
        return gamma * tsallis.squeeze(-1)
    return regularizer(mapping, y, dim=-1, mask=classes, **params)


def _targets(scores, target, ignore_index, label_smoothing):
    """(y, kept): the target distributions (rows, C) and the bool rows that count."""
    rows, classes = scores.shape
    if target.is_floating_point():
        y = target.reshape(rows, classes).to(scores.dtype)
        if not bool((y >= 0).all()) or not bool(((y.sum(-1) - 1).abs() <= 1e-6 * classes).all()):
            raise ValueError(
                "a floating-point target must hold distributions over the classes (>= 0, "
                "summing to 1 along the last dim)"
            )
        kept = torch.ones(rows, dtype=torch.bool, device=scores.device)
    else:
        if target.dtype in (torch.bool, torch.uint8) or target.is_complex():
            raise ValueError(f"target must hold class indices (int64), got dtype {target.dtype}")
        index = target.reshape(rows).long()
        kept = index != ignore_index
        bad = kept & ((index < 0) | (index >= classes))
        if bool(bad.any()):
            raise ValueError(
                f"target class index out of range [0, {classes}) (and not ignore_index="
                f"{ignore_index}): {index[bad][0].item()}"
            )
        y = torch.zeros_like(scores).scatter_(1, index.where(kept, 0).unsqueeze(1), 1.0)
    if label_smoothing:
        y = (1 - label_smoothing) * y + label_smoothing / classes
    return y, kept


def fenchel_young_loss(
    scores: torch.Tensor,
    target: torch.Tensor,
    mapping: str = mappings.REFERENCE_MAPPING,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    **params,
) -> torch.Tensor:
    """The Fenchel-Young loss L(theta; y) = Omega*(theta) - theta.y + Omega(y) of a mapping,
    with gradient mapping(theta) - y in the scores theta.

    Parameters
    ----------
    scores : torch.Tensor
        (..., C) floating-point scores theta, the classes along the last dim; -inf scores
        are masked classes (probability 0; the target may put no mass there).
    target : torch.Tensor
        class indices of shape (...) (int64; `ignore_index` rows count for nothing), or
        distributions of shape (..., C) (floating point, on the simplex).
    mapping : str
        one of `loss_mappings()`: softmax (cross-entropy), sparsemax, entmax (alpha=1.5 is
        1.5-entmax; a tensor alpha of shape (..., 1) or broadcastable to it, > 1, gets a
        gradient), sq_pnorm_max, fusedmax, oscarmax, and normmax.
    ignore_index : int
        the target index of rows that count for nothing (zero loss, zero gradient).
    reduction : str
        "none" (one loss per row, of shape (...)), "sum", or "mean" (over the rows that are
        not ignored; 0 when all are).
    label_smoothing : float
        epsilon in [0, 1): the target becomes (1 - epsilon) y + epsilon / C.
    **params
        the mapping's parameters (gamma, alpha, p, lam), as in `mappings.build`.

    Returns
    -------
    torch.Tensor
        The loss, reduced as asked.

    Raises
    ------
    ValueError
        on an unknown mapping, reduction or parameter, a label smoothing outside [0, 1), a
        target of the wrong shape or kind, a class index out of range, target mass on a
        class with a -inf score, or scores the mapping rejects (NaN, +inf).
    """
    check_loss_options(mapping, reduction, label_smoothing, **params)
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point() or scores.dim() < 1:
        raise ValueError(
            "scores must be a floating-point tensor with the classes along its last dim"
        )
    lead, classes = scores.shape[:-1], scores.shape[-1]
    expected = (*lead, classes) if target.is_floating_point() else tuple(lead)
    if tuple(target.shape) != expected:
        raise ValueError(
            f"target of shape {tuple(target.shape)} does not match scores of shape "
            f"{tuple(scores.shape)}: expected {expected}"
        )
    theta = scores.reshape(-1, classes)
    y, kept = _targets(theta, target, ignore_index, label_smoothing)
    masked = torch.isneginf(theta)
    if bool((masked & (y > 0) & kept.unsqueeze(1)).any()):
        raise ValueError(
            "the target puts mass on a class whose score is -inf: the loss is infinite "
            "(label smoothing spreads mass over every class)"
        )
    alpha = params.get("alpha")
    alpha_rows = None
    if isinstance(alpha, torch.Tensor):
        alpha_rows = alpha.to(theta.dtype).expand(*lead, 1).reshape(-1, 1)
        params = {**params, "alpha": alpha_rows.detach()}
    with torch.no_grad():
        p = getattr(mappings, mapping)(theta.detach(), **params)
    theta = theta.masked_fill(masked, 0.0)
    # p* held constant (the envelope theorem): exact gradients p* - y in theta and
    # dOmega(y)/dalpha - dOmega(p*)/dalpha in a tensor alpha
    classes = ~masked if bool(masked.any()) else None
    loss = ((p - y) * theta).sum(-1) - _omega(mapping, p, classes, alpha_rows, params)
    loss = loss + _omega(mapping, y, classes, alpha_rows, params)
    loss = loss.masked_fill(~kept, 0.0)
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / kept.sum().clamp_min(1)
    return loss.reshape(lead)


class FenchelYoungLoss(nn.Module):
    """`fenchel_young_loss` with a fixed mapping and options, called as loss(scores, target);
    see `fenchel_young_loss` for the arguments.
    """

    def __init__(
        self,
        mapping: str = mappings.REFERENCE_MAPPING,
        ignore_index: int = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
        **params,
    ):
        super().__init__()
        check_loss_options(mapping, reduction, label_smoothing, **params)
        self.mapping = mapping
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.params = params

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss of `scores` against `target` (see `fenchel_young_loss`)."""
        return fenchel_young_loss(
            scores,
            target,
            self.mapping,
            self.ignore_index,
            self.reduction,
            self.label_smoothing,
            **self.params,
        )

    def extra_repr(self) -> str:
        """The mapping, its parameters and the options that are not the defaults."""
        shown = [repr(self.mapping), *(f"{k}={v}" for k, v in self.params.items())]
        if self.ignore_index != -100:
            shown.append(f"ignore_index={self.ignore_index}")
        if self.reduction != "mean":
            shown.append(f"reduction={self.reduction!r}")
        if self.label_smoothing:
            shown.append(f"label_smoothing={self.label_smoothing}")
        return ", ".join(shown)
