"""Sparsity and structure of attention weights, for the result tables and the figures.

Pure numpy (rows may also be torch tensors or lists); importing this module never imports
fairseq. Everything is defined on one *attention row*: the weights one output step (or one
SNLI hypothesis) puts on the unpadded source positions, a probability vector a of length n.

Definitions, for a tolerance `tol` (default 0: the paper's convention of *exact* zeros and
*exactly* equal weights, which sparsemax, fusedmax and oscarmax produce in float32 and which
survive a JSON round trip, since float32 -> Python float is exact):

- a position i is a **zero** if a_i <= tol; its **support** is the set of the other positions;
- two weights are **equal** if |a_i - a_j| <= tol (with tol > 0, equality is chained:
  a group is a maximal set linked by such steps);
- a **run** (fusedmax's structure) is a maximal set of >= 2 *adjacent* positions i..j whose
  weights are nonzero and pairwise-adjacent equal;
- a **cluster** (oscarmax's structure) is a maximal set of >= 2 positions *anywhere* in the
  row whose weights are nonzero and equal. Every run lies inside a cluster.

Singletons are not groups: a row with all-distinct weights (softmax, in practice) has no runs
and no clusters. Zeros are never grouped, although they are equal: they are counted by the
zero fraction instead.

`attention_statistics` averages these over a set of rows (e.g. every row of every sentence
of an evaluation set).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

# A row must sum to 1 within this; float32 rows of a few hundred positions do.
ROW_SUM_TOLERANCE = 1e-3


def as_row(row, tol: float = 0.0) -> np.ndarray:
    """Checks that `row` is an attention row: a probability vector.

    Parameters
    ----------
    row
        a list, numpy vector or torch tensor.
    tol : float
        weights >= -tol count as nonnegative.

    Returns
    -------
    np.ndarray
        The row as a float64 numpy vector.

    Raises
    ------
    ValueError
        if it is not a non-empty vector, holds NaN or infinite or negative
        weights, or does not sum to 1 within ROW_SUM_TOLERANCE.
    """
    if hasattr(row, "detach"):  # a torch tensor
        row = row.detach().cpu().double().numpy()
    values = np.asarray(row, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"an attention row must be a non-empty vector, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError("attention row has NaN or infinite weights")
    if values.min() < -tol:
        raise ValueError(f"attention row has a negative weight {values.min():.3g}")
    if abs(values.sum() - 1.0) > ROW_SUM_TOLERANCE:
        raise ValueError(f"attention row sums to {values.sum():.6g}, not 1")
    return values


def _linked_groups(order: np.ndarray, linked: np.ndarray) -> list[np.ndarray]:
    """Split the positions `order` into maximal stretches where consecutive entries are
    linked (linked[k] links order[k] and order[k+1]); keep stretches of >= 2 positions.
    """
    groups, start = [], 0
    for k in range(len(order)):
        if k == len(order) - 1 or not linked[k]:
            if k > start:
                groups.append(order[start : k + 1])
            start = k + 1
    return groups


def equal_weight_runs(row, tol: float = 0.0) -> list[np.ndarray]:
    """The runs of an attention row (fusedmax's structure; see the module docstring).

    Parameters
    ----------
    row
        an attention row (see `as_row`).
    tol : float
        weights <= tol are zeros, weights within tol are equal.

    Returns
    -------
    list[np.ndarray]
        Index arrays of >= 2 adjacent positions with equal nonzero weight, in order of position.

    Raises
    ------
    ValueError
        if `row` is not a probability vector (`as_row`).
    """
    a = as_row(row, tol)
    nonzero = a > tol
    linked = (np.abs(np.diff(a)) <= tol) & nonzero[:-1] & nonzero[1:]
    return _linked_groups(np.arange(a.size), linked)


def equal_weight_clusters(row, tol: float = 0.0) -> list[np.ndarray]:
    """The clusters of an attention row (oscarmax's structure; see the module docstring).

    Parameters
    ----------
    row
        an attention row (see `as_row`).
    tol : float
        weights <= tol are zeros, weights within tol are equal.

    Returns
    -------
    list[np.ndarray]
        Sorted index arrays of >= 2 positions anywhere in the row with equal nonzero weight,
        in order of increasing weight.

    Raises
    ------
    ValueError
        if `row` is not a probability vector (`as_row`).
    """
    a = as_row(row, tol)
    support = np.flatnonzero(a > tol)
    by_weight = support[np.argsort(a[support], kind="stable")]
    linked = np.diff(a[by_weight]) <= tol
    return [np.sort(group) for group in _linked_groups(by_weight, linked)]


def attention_statistics(rows_of_attention: Iterable, tol: float = 0.0) -> dict:
    """Sparsity and structure of a set of attention rows (definitions in the module docstring).

    Parameters
    ----------
    rows_of_attention : Iterable
        attention rows (lists, numpy vectors or torch tensors), each a
        probability vector over the unpadded source; e.g. every row of every sentence of
        an evaluation set.
    tol : float
        weights <= tol are zeros, weights within tol are equal.

    Returns
    -------
    dict
        A JSON-ready dict:

        rows                    number of rows
        mean_row_length         mean n (source positions per row)
        mean_zero_fraction      mean over rows of (#zeros / n)
        mean_support_size       mean over rows of #nonzeros
        mean_runs_per_row       mean over rows of the number of runs (fusedmax's groups)
        mean_run_size           mean size of a run, over all runs of all rows (None if no run)
        mean_clusters_per_row   mean over rows of the number of clusters (oscarmax's groups)
        mean_cluster_size       mean size of a cluster, over all clusters (None if no cluster)

    Group sizes are pooled over groups rather than averaged per row, so that rows without
    groups (where a mean size is undefined) do not enter them.

    Raises
    ------
    ValueError
        if there is no row, or a row is not a probability vector (`as_row`).
    """
    lengths, zero_fractions, supports = [], [], []
    run_sizes, runs_per_row, cluster_sizes, clusters_per_row = [], [], [], []
    for row in rows_of_attention:
        a = as_row(row, tol)
        zeros = int(np.count_nonzero(a <= tol))
        lengths.append(a.size)
        zero_fractions.append(zeros / a.size)
        supports.append(a.size - zeros)
        runs = equal_weight_runs(a, tol)
        clusters = equal_weight_clusters(a, tol)
        runs_per_row.append(len(runs))
        run_sizes.extend(len(run) for run in runs)
        clusters_per_row.append(len(clusters))
        cluster_sizes.extend(len(cluster) for cluster in clusters)
    if not lengths:
        raise ValueError("no attention rows to compute statistics over")

    def mean(values):
        return float(np.mean(values)) if values else None

    return {
        "rows": len(lengths),
        "mean_row_length": mean(lengths),
        "mean_zero_fraction": mean(zero_fractions),
        "mean_support_size": mean(supports),
        "mean_runs_per_row": mean(runs_per_row),
        "mean_run_size": mean(run_sizes),
        "mean_clusters_per_row": mean(clusters_per_row),
        "mean_cluster_size": mean(cluster_sizes),
    }


PARAMETER_SYMBOLS = {"gamma": "γ", "lam": "λ", "alpha": "α", "p": "p"}


def describe_mapping(name: str, params: dict) -> str:
    """A label for figures and tables in the paper's spelling.

    Parameters
    ----------
    name : str
        a mapping name, e.g. "sq_pnorm_max".
    params : dict
        its parameters, e.g. {"gamma": 1.0, "p": 1.5}.

    Returns
    -------
    str
        e.g. "sq-pnorm-max (γ=1, p=1.5)".
    """
    settings = ", ".join(
        f"{PARAMETER_SYMBOLS.get(key, key)}={value:g}"
        if isinstance(value, (int, float))
        else f"{PARAMETER_SYMBOLS.get(key, key)}={value}"
        for key, value in params.items()
    )
    label = name.replace("_", "-")
    return f"{label} ({settings})" if settings else label


def learned_alpha_spread(alpha) -> float:
    """The standard deviation (population) of learned α over every head: how far α-entmax's
    heads spread apart from their common start (Correia et al. 2019's heads that specialise).

    Parameters
    ----------
    alpha : array_like
        the learned α, any shape (e.g. layers × heads).
    """
    return float(np.std(np.asarray(alpha, dtype=float)))


def describe_learned_alpha(alpha) -> str:
    """One line on the α that α-entmax's heads learned (Correia et al. 2019): over all heads,
    their mean, range and standard deviation (how far the heads specialised from a common
    start), and how many ended sparser than 1.5-entmax.

    Parameters
    ----------
    alpha : array_like
        the learned α, any shape (e.g. layers × heads).

    Returns
    -------
    str
        e.g. "α mean 1.50, range 1.20–1.80, sd over heads 0.21; 1 of 4 heads above 1.5".
    """
    alpha = np.asarray(alpha, dtype=float)
    return (
        f"α mean {alpha.mean():.2f}, range {alpha.min():.2f}–{alpha.max():.2f}, sd over heads "
        f"{learned_alpha_spread(alpha):.2f}; {int((alpha > 1.5).sum())} of {alpha.size} heads "
        "above 1.5"
    )
