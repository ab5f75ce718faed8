"""entmax 1.3's public API (deep-spin/entmax), computed by regattn: one changed import.

    import entmax as E                      # before
    from regattn.compat import entmax as E  # after: E.entmax15(x, dim=-1), E.EntmaxBisectLoss()

Same names, signatures and defaults as entmax 1.3; the differences are regattn's:

* every result is solved to the dtype's resolution (exact thresholds for sparsemax and
  1.5-entmax), so `n_iter` and `ensure_sum_one` are accepted and change nothing, and `k`
  (entmax's partial sort of the top k) is a speed hint that never changes the result;
* -inf scores are masked positions (as in entmax); a row with no other position, +inf or
  NaN scores, and alpha < 1 (outside the mappings' domain) are ValueErrors, not NaN;
* `return_support_size=True` (entmax's later releases) returns (p, support size along dim);
* EntmaxBisectLoss with a tensor alpha that requires grad gives alpha a gradient.

The losses are regattn.losses' Fenchel-Young losses, whose gradient is exactly
mapping(X) - onehot(target).
"""

from __future__ import annotations

import torch
from torch import nn

from .. import mappings
from ..losses import NORMMAX, fenchel_young_loss

__all__ = [
    "sparsemax",
    "entmax15",
    "entmax_bisect",
    "sparsemax_bisect",
    "normmax_bisect",
    "budget_bisect",
    "Sparsemax",
    "Entmax15",
    "SparsemaxBisect",
    "EntmaxBisect",
    "NormmaxBisect",
    "BudgetBisect",
    "sparsemax_loss",
    "entmax15_loss",
    "sparsemax_bisect_loss",
    "entmax_bisect_loss",
    "normmax_bisect_loss",
    "SparsemaxLoss",
    "SparsemaxBisectLoss",
    "Entmax15Loss",
    "EntmaxBisectLoss",
    "NormmaxBisectLoss",
]


def _check_count(name: str, value) -> None:
    """Raises ValueError unless value is None or an int >= 1 (entmax's k and n_iter)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be None or an int >= 1, got {value!r}")


def _with_support(p: torch.Tensor, dim: int, return_support_size: bool):
    if return_support_size:
        return p, (p > 0).sum(dim=dim, keepdim=True)
    return p


def sparsemax(X, dim=-1, k=None, return_support_size=False):
    """sparsemax: the Euclidean projection of X onto the simplex along `dim`.

    Parameters
    ----------
    X : torch.Tensor
        the scores.
    dim : int
        the dimension to normalize over.
    k : int or None
        entmax's partial-sort size: accepted, never changes the result.
    return_support_size : bool
        also return the number of nonzeros along `dim` (keepdim).

    Returns
    -------
    torch.Tensor or tuple
        The probabilities (and the support sizes).
    """
    _check_count("k", k)
    return _with_support(mappings.sparsemax(X, dim=dim), dim, return_support_size)


def entmax15(X, dim=-1, k=None, return_support_size=False):
    """1.5-entmax along `dim` (exact threshold); arguments as `sparsemax`.

    Returns
    -------
    torch.Tensor or tuple
        The probabilities (and the support sizes).
    """
    _check_count("k", k)
    return _with_support(mappings.entmax(X, dim=dim, alpha=1.5), dim, return_support_size)


def entmax_bisect(X, alpha=1.5, dim=-1, n_iter=50, ensure_sum_one=True):
    """alpha-entmax along `dim`, differentiable in X and a tensor alpha.

    Parameters
    ----------
    X : torch.Tensor
        the scores.
    alpha : float or torch.Tensor
        >= 1 (1 is softmax), or a tensor > 1 broadcastable to X with size 1 along `dim`.
    dim : int
        the dimension to normalize over.
    n_iter : int
        accepted; the threshold is always solved to the dtype's resolution.
    ensure_sum_one : bool
        accepted; the result always sums to 1.

    Returns
    -------
    torch.Tensor
        The probabilities.
    """
    _check_count("n_iter", n_iter)
    return mappings.entmax(X, dim=dim, alpha=alpha)


def sparsemax_bisect(X, dim=-1, n_iter=50, ensure_sum_one=True):
    """Sparsemax along `dim` (exact; `n_iter` and `ensure_sum_one` change nothing).

    Returns
    -------
    torch.Tensor
        The probabilities.
    """
    _check_count("n_iter", n_iter)
    return mappings.sparsemax(X, dim=dim)


def normmax_bisect(X, alpha=2, dim=-1, n_iter=50):
    """alpha-normmax, argmax_{p in simplex} <X, p> - ||p||_alpha, along `dim`.

    Parameters
    ----------
    X : torch.Tensor
        the scores.
    alpha : float or torch.Tensor
        > 1, or a tensor of such values broadcastable to X with size 1 along `dim`.
    dim : int
        the dimension to normalize over.
    n_iter : int
        accepted; the threshold is always solved to the dtype's resolution.

    Returns
    -------
    torch.Tensor
        The probabilities.
    """
    _check_count("n_iter", n_iter)
    return mappings.normmax(X, dim=dim, alpha=alpha)


def budget_bisect(X, budget=2, dim=-1, n_iter=50):
    """Budget sparsemax: the projection of X onto {p in [0, 1]^n : sum(p) = budget}.

    Parameters
    ----------
    X : torch.Tensor
        the scores.
    budget : float or torch.Tensor
        between 0 and the size of `dim`, or a tensor of such values broadcastable to X
        with size 1 along `dim`.
    dim : int
        the dimension to normalize over.
    n_iter : int
        accepted; the threshold is always solved exactly.

    Returns
    -------
    torch.Tensor
        p, summing to `budget` along `dim`.
    """
    _check_count("n_iter", n_iter)
    return mappings.budget_sparsemax(X, dim=dim, budget=budget)


def _threshold_and_support(p: torch.Tensor, X: torch.Tensor, dim: int, offset):
    top, where = X.max(dim=dim, keepdim=True)
    return top - offset(p.gather(dim, where)), (p > 0).sum(dim=dim, keepdim=True)


def _sparsemax_threshold_and_support(X, dim=-1, k=None):
    """Entmax's helper that its tests import: tau and the support size along `dim` (keepdim)
    with sparsemax(X) = clamp(X - tau, min=0).

    Returns
    -------
    tuple
        (tau, support_size).
    """
    _check_count("k", k)
    return _threshold_and_support(mappings.sparsemax(X, dim=dim), X, dim, lambda top: top)


def _entmax_threshold_and_support(X, dim=-1, k=None):
    """Entmax's helper that its tests import: tau and the support size along `dim` (keepdim)
    with clamp(X - tau, min=0) ** 2 summing to 1, i.e. 1.5-entmax of 2 X.

    Returns
    -------
    tuple
        (tau, support_size).
    """
    _check_count("k", k)
    p = mappings.entmax(2 * X, dim=dim, alpha=1.5)
    return _threshold_and_support(p, X, dim, torch.sqrt)


class _Mapping(nn.Module):
    """An entmax module: the function with fixed arguments, called as module(X)."""

    def __init__(self, function, **arguments):
        super().__init__()
        self._function = function
        self._arguments = tuple(arguments)
        for name, value in arguments.items():
            setattr(self, name, value)

    def forward(self, X):
        """The mapping of X (see the function)."""
        return self._function(X, **{name: getattr(self, name) for name in self._arguments})


class Sparsemax(_Mapping):
    """`sparsemax` as a module."""

    def __init__(self, dim=-1, k=None, return_support_size=False):
        _check_count("k", k)
        super().__init__(sparsemax, dim=dim, k=k, return_support_size=return_support_size)


class Entmax15(_Mapping):
    """`entmax15` as a module."""

    def __init__(self, dim=-1, k=None, return_support_size=False):
        _check_count("k", k)
        super().__init__(entmax15, dim=dim, k=k, return_support_size=return_support_size)


class SparsemaxBisect(_Mapping):
    """`sparsemax_bisect` as a module."""

    def __init__(self, dim=-1, n_iter=None):
        _check_count("n_iter", n_iter)
        super().__init__(sparsemax_bisect, dim=dim, n_iter=n_iter)


class EntmaxBisect(_Mapping):
    """`entmax_bisect` as a module (alpha may be a tensor, e.g. an nn.Parameter)."""

    def __init__(self, alpha=1.5, dim=-1, n_iter=50):
        _check_count("n_iter", n_iter)
        super().__init__(entmax_bisect, alpha=alpha, dim=dim, n_iter=n_iter)


class NormmaxBisect(_Mapping):
    """`normmax_bisect` as a module."""

    def __init__(self, alpha=2, dim=-1, n_iter=50):
        _check_count("n_iter", n_iter)
        super().__init__(normmax_bisect, alpha=alpha, dim=dim, n_iter=n_iter)


class BudgetBisect(_Mapping):
    """`budget_bisect` as a module."""

    def __init__(self, budget=2, dim=-1, n_iter=50):
        _check_count("n_iter", n_iter)
        super().__init__(budget_bisect, budget=budget, dim=dim, n_iter=n_iter)


def _row_loss(X, target, mapping, **params):
    return fenchel_young_loss(X, target, mapping, reduction="none", ignore_index=-100, **params)


def sparsemax_loss(X, target, k=None, return_support_size=False):
    """The sparsemax loss of (n, C) scores and (n,) class indices, one value per row.

    Returns
    -------
    torch.Tensor or tuple
        The losses (and the prediction's support sizes, (n, 1)).
    """
    _check_count("k", k)
    loss = _row_loss(X, target, "sparsemax")
    if return_support_size:
        return loss, (mappings.sparsemax(X.detach()) > 0).sum(-1, keepdim=True)
    return loss


def entmax15_loss(X, target, k=None, return_support_size=False):
    """The 1.5-entmax loss of (n, C) scores and (n,) class indices, one value per row.

    Returns
    -------
    torch.Tensor or tuple
        The losses (and the prediction's support sizes, (n, 1)).
    """
    _check_count("k", k)
    loss = _row_loss(X, target, "entmax", alpha=1.5)
    if return_support_size:
        return loss, (mappings.entmax(X.detach(), alpha=1.5) > 0).sum(-1, keepdim=True)
    return loss


def sparsemax_bisect_loss(X, target, n_iter=50):
    """The sparsemax loss (`sparsemax_loss`; `n_iter` changes nothing).

    Returns
    -------
    torch.Tensor
        The losses, one per row.
    """
    _check_count("n_iter", n_iter)
    return _row_loss(X, target, "sparsemax")


def entmax_bisect_loss(X, target, alpha=1.5, n_iter=50):
    """The alpha-entmax loss, one value per row; a tensor alpha ((n, 1) or broadcastable)
    that requires grad gets the gradient of the loss.

    Returns
    -------
    torch.Tensor
        The losses, one per row.
    """
    _check_count("n_iter", n_iter)
    return _row_loss(X, target, "entmax", alpha=alpha)


def normmax_bisect_loss(X, target, alpha=2, n_iter=50):
    """The alpha-normmax loss, one value per row.

    Returns
    -------
    torch.Tensor
        The losses, one per row.
    """
    _check_count("n_iter", n_iter)
    return _row_loss(X, target, NORMMAX, alpha=alpha)


class _Loss(nn.Module):
    """entmax's loss modules: `ignore_index` rows count for nothing, `reduction` is
    "elementwise_mean" (over the rows not ignored), "sum" or "none".
    """

    REDUCTIONS = {"elementwise_mean": "mean", "sum": "sum", "none": "none"}

    def __init__(self, ignore_index=-100, reduction="elementwise_mean"):
        if reduction not in self.REDUCTIONS:
            raise ValueError(
                f"reduction must be one of {', '.join(self.REDUCTIONS)}, got {reduction!r}"
            )
        super().__init__()
        self.ignore_index = ignore_index
        self.reduction = reduction

    def loss_options(self) -> dict:
        """The mapping and its parameters, for regattn.losses.fenchel_young_loss."""
        raise NotImplementedError

    def forward(self, X, target):
        """The reduced loss of (n, C) scores X and (n,) class indices."""
        ignore_index = self.ignore_index
        if isinstance(ignore_index, torch.Tensor):
            ignore_index = int(ignore_index)
        return fenchel_young_loss(
            X,
            target,
            ignore_index=ignore_index,
            reduction=self.REDUCTIONS[self.reduction],
            **self.loss_options(),
        )


class SparsemaxLoss(_Loss):
    """`sparsemax_loss` as a module."""

    def __init__(self, k=None, ignore_index=-100, reduction="elementwise_mean"):
        _check_count("k", k)
        super().__init__(ignore_index, reduction)
        self.k = k

    def loss_options(self) -> dict:
        """Sparsemax."""
        return {"mapping": "sparsemax"}


class SparsemaxBisectLoss(_Loss):
    """`sparsemax_bisect_loss` as a module."""

    def __init__(self, n_iter=50, ignore_index=-100, reduction="elementwise_mean"):
        _check_count("n_iter", n_iter)
        super().__init__(ignore_index, reduction)
        self.n_iter = n_iter

    def loss_options(self) -> dict:
        """Sparsemax."""
        return {"mapping": "sparsemax"}


class Entmax15Loss(_Loss):
    """`entmax15_loss` as a module."""

    def __init__(self, k=100, ignore_index=-100, reduction="elementwise_mean"):
        _check_count("k", k)
        super().__init__(ignore_index, reduction)
        self.k = k

    def loss_options(self) -> dict:
        """1.5-entmax."""
        return {"mapping": "entmax", "alpha": 1.5}


class EntmaxBisectLoss(_Loss):
    """`entmax_bisect_loss` as a module."""

    def __init__(self, alpha=1.5, n_iter=50, ignore_index=-100, reduction="elementwise_mean"):
        _check_count("n_iter", n_iter)
        super().__init__(ignore_index, reduction)
        self.alpha = alpha
        self.n_iter = n_iter

    def loss_options(self) -> dict:
        """alpha-entmax."""
        return {"mapping": "entmax", "alpha": self.alpha}


class NormmaxBisectLoss(_Loss):
    """`normmax_bisect_loss` as a module."""

    def __init__(self, alpha=2, n_iter=50, ignore_index=-100, reduction="elementwise_mean"):
        _check_count("n_iter", n_iter)
        super().__init__(ignore_index, reduction)
        self.alpha = alpha
        self.n_iter = n_iter

    def loss_options(self) -> dict:
        """alpha-normmax."""
        return {"mapping": NORMMAX, "alpha": self.alpha}
