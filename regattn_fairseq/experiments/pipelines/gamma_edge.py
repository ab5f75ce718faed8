"""The edge rule of a γ grid: which γ wins, and which value to try beyond the grid when the
best γ lies at its edge (the optimum may lie beyond it); the search it makes over a grid
(`search_grid`), and its replay over a recorded choice (`selection_settled`). Shared by the
fairseq tables' selection (`gamma_select.choose_gamma`) and the pretrained-encoder table's
(`pretrained`)."""

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


def search_grid(grid, extend, loss_at, beyond_the_edge):
    """Every γ of the grid, then the values beyond its edge that the rule asks for
    (`gamma_beyond_edge`), and the winner (`best_gamma`).

    Parameters
    ----------
    grid : list of float
        the grid.
    extend : int
        the most values added on each side.
    loss_at : callable
        γ -> its validation loss (training what it must).
    beyond_the_edge : callable
        (the values tried so far, sorted; the next γ) -> None, called before that γ is tried.

    Returns
    -------
    tuple
        (``{str(γ): loss}`` of every γ tried, the values added beyond the grid in the order
        tried, the chosen γ).
    """
    validation = {str(gamma): loss_at(gamma) for gamma in grid}
    extended = []
    while (beyond := gamma_beyond_edge(grid, extended, validation, extend)) is not None:
        beyond_the_edge(sorted([*grid, *extended]), beyond)
        validation[str(beyond)] = loss_at(beyond)
        extended.append(beyond)
    return validation, extended, best_gamma(grid, extended, validation)


def selection_settled(selection: dict, extend: int) -> bool:
    """Whether a recorded γ choice is the one the edge rule gives with ``extend``: the rule
    replayed over its recorded validation losses adds the same values beyond the grid (none,
    for a choice recorded before the rule) and picks the same γ. A choice at the grid's edge
    recorded without trying beyond it is not settled."""
    grid, validation = selection["grid"], selection["validation"]
    extended = []
    while (beyond := gamma_beyond_edge(grid, extended, validation, extend)) is not None:
        if str(beyond) not in validation:
            return False
        extended.append(beyond)
    chosen = best_gamma(grid, extended, validation)
    return extended == selection.get("extended", []) and chosen == selection["chosen"]
