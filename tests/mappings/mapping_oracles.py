"""Independent oracles for the attention mappings.

Each oracle writes the defining optimisation problem of a mapping directly in cvxpy and hands it
to a generic conic solver (CLARABEL), so it shares no code or algorithm with
`regattn.mappings`. A masked position is removed from the problem: the oracle solves on
the unmasked positions only (the fused-lasso chain links consecutive unmasked positions) and
puts exact zeros elsewhere. softmax uses its closed form.
"""

import itertools
import warnings

import cvxpy as cp
import numpy as np

_SOLVER_OPTS = dict(
    solver=cp.CLARABEL,
    tol_gap_abs=1e-10,
    tol_gap_rel=1e-10,
    tol_feas=1e-10,
    tol_ktratio=1e-8,
    max_iter=500,
)


def _simplex_argmax(objective_of, x):
    """argmax over y in the simplex of objective_of(y, x) (a concave cvxpy expression)."""
    # yᵀx and yᵀ(x − max x) differ by a constant on the simplex; the centred scores keep the
    # objective's scale (and so the solver's absolute accuracy) independent of a large offset.
    x = x - x.max()
    y = cp.Variable(x.shape[0])
    problem = cp.Problem(cp.Maximize(objective_of(y, x)), [y >= 0, cp.sum(y) == 1])
    with warnings.catch_warnings():
        # "solution may be inaccurate": the tests' tolerances judge the accuracy
        warnings.simplefilter("ignore")
        problem.solve(**_SOLVER_OPTS)
    assert problem.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE), problem.status
    return np.clip(y.value, 0.0, None)


def _softmax(x, gamma=1.0):
    z = x / gamma
    e = np.exp(z - z.max())
    return e / e.sum()


def _sparsemax(x, gamma=1.0):
    return _simplex_argmax(lambda y, x: y @ x - gamma / 2 * cp.sum_squares(y), x)


def _sq_pnorm_max(x, gamma=1.0, p=1.5):
    return _simplex_argmax(lambda y, x: y @ x - gamma / 2 * cp.square(cp.pnorm(y, p)), x)


def _fusedmax(x, gamma=1.0, lam=0.1):
    def objective(y, x):
        tv = cp.sum(cp.abs(cp.diff(y))) if x.shape[0] > 1 else 0.0
        # ½‖y − x/γ‖² expanded, without its constant ½‖x/γ‖²
        return y @ x / gamma - (0.5 * cp.sum_squares(y) + lam * tv)

    return _simplex_argmax(objective, x)


def _oscarmax(x, gamma=1.0, lam=0.01):
    def objective(y, x):
        pairs = [
            cp.maximum(cp.abs(y[i]), cp.abs(y[j]))
            for i, j in itertools.combinations(range(x.shape[0]), 2)
        ]
        penalty = cp.sum(cp.hstack(pairs)) if pairs else 0.0
        return y @ x / gamma - (0.5 * cp.sum_squares(y) + lam * penalty)

    return _simplex_argmax(objective, x)


def _entmax(x, alpha=1.5, gamma=1.0):
    # argmax y.x + gamma H_alpha(y), divided by gamma (as the other oracles write it)
    if alpha == 1.0:
        return _softmax(x, gamma=gamma)
    return _simplex_argmax(
        lambda y, x: y @ x / gamma + (1 - cp.sum(cp.power(y, alpha))) / (alpha * (alpha - 1)),
        x,
    )


def _normmax(x, alpha=2.0, gamma=1.0):
    # argmax y.x - gamma ||y||_alpha, divided by gamma
    return _simplex_argmax(lambda y, x: y @ x / gamma - cp.pnorm(y, alpha), x)


def _budget_sparsemax(x, budget=2.0, gamma=1.0):
    """The projection of x / gamma onto {y in [0, 1]^n : sum(y) = budget}: a box and a sum,
    not the simplex."""
    y = cp.Variable(x.shape[0])
    z = (x - x.max()) / gamma
    problem = cp.Problem(cp.Minimize(cp.sum_squares(y - z)), [y >= 0, y <= 1, cp.sum(y) == budget])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problem.solve(**_SOLVER_OPTS)
    assert problem.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE), problem.status
    return np.clip(y.value, 0.0, 1.0)


_ORACLES = {
    "softmax": _softmax,
    "sparsemax": _sparsemax,
    "sq_pnorm_max": _sq_pnorm_max,
    "fusedmax": _fusedmax,
    "oscarmax": _oscarmax,
    "entmax": _entmax,
    "normmax": _normmax,
    "budget_sparsemax": _budget_sparsemax,
}


def oracle(name, scores, mask=None, **params):
    """The mapping `name` of one 1-D float64 numpy row, solved on its unmasked positions."""
    scores = np.asarray(scores, dtype=np.float64)
    keep = np.ones(scores.shape, bool) if mask is None else np.asarray(mask, bool)
    out = np.zeros_like(scores)
    out[keep] = _ORACLES[name](scores[keep], **params)
    return out
