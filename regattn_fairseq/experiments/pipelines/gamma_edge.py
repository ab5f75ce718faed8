"""The edge rule of a γ grid: which γ wins, and which value to try beyond the grid when the
best γ lies at its edge (the optimum may lie beyond it). Shared by the fairseq tables'
selection (`reproduce.choose_gamma`) and the pretrained-encoder table's (`pretrained`)."""

from __future__ import annotations


def best_gamma(grid, extended, validation):
    """The γ of lowest validation loss among the grid and the values added beyond it; of
    equal losses, the one tried first (the grid's before an extension's)."""
    return min([*grid, *extended], key=lambda g: validation[str(g)])


def gamma_beyond_edge(grid, extended, validation, extend):
    """The next γ to try beyond the grid, or None: the edge value times (or divided by) the
    grid's factor at that end, when the best γ tried so far is the largest (smallest) and
    fewer than ``extend`` values were added on that side.

    Parameters
    ----------
    grid : list of float
        the grid (at least 2 values for any extension).
    extended : list of float
        the values already added beyond it, in the order tried.
    validation : dict
        ``{str(γ): loss}`` of every γ tried.
    extend : int
        the most values added on each side.
    """
    if len(grid) < 2 or not extend:
        return None
    ordered = sorted(grid)
    tried = sorted([*grid, *extended])
    best = best_gamma(grid, extended, validation)
    if best == tried[-1] and sum(g > ordered[-1] for g in extended) < extend:
        return best * ordered[-1] / ordered[-2]
    if best == tried[0] and sum(g < ordered[0] for g in extended) < extend:
        return best * ordered[0] / ordered[1]
    return None
