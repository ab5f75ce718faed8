"""Independent oracles for regattn.dp, in numpy (and cvxpy), written from the definitions.

- entropy: brute force over every path (Viterbi: all S^(T+1) state sequences; DTW: every
  monotone alignment), value = gamma log sum exp(score / gamma), gradient = the expected
  indicator of the path under the Gibbs distribution;
- l2: the max over paths is not the recursion (that max_Omega is not associative), so the
  recursion is replayed node by node, each local max_Omega solved by cvxpy on the actual node
  values, and the expected marginals are swept back with the solver's maximisers;
- hard: plain max-sum DP with back-pointers (value and one optimal path).
"""

from __future__ import annotations

import itertools

import cvxpy as cp
import numpy as np


def lse(x, gamma):
    x = np.asarray(x, dtype=float)
    top = x.max()
    return top + gamma * np.log(np.exp((x - top) / gamma).sum())


# -- Viterbi ---------------------------------------------------------------------------


def viterbi_paths(steps, states):
    return list(itertools.product(range(states), repeat=steps + 1))


def viterbi_path_score(theta, y):
    return sum(theta[t - 1, y[t], y[t - 1]] for t in range(1, len(y)))


def viterbi_brute_entropy(theta, gamma):
    """theta (T, S, S) -> (value, marginals (T, S, S)) by enumeration."""
    steps, states, _ = theta.shape
    paths = viterbi_paths(steps, states)
    scores = np.array([viterbi_path_score(theta, y) for y in paths])
    value = lse(scores, gamma)
    prob = np.exp((scores - value) / gamma)
    marg = np.zeros_like(theta)
    for p, y in zip(prob, paths, strict=True):
        for t in range(1, steps + 1):
            marg[t - 1, y[t], y[t - 1]] += p
    return value, marg


def viterbi_hard(theta):
    """Max-sum DP: (value, path y_0..y_T)."""
    steps, states, _ = theta.shape
    v = np.zeros(states)
    pointers = []
    for t in range(steps):
        m = theta[t] + v[None, :]
        pointers.append(m.argmax(1))
        v = m.max(1)
    y = [int(v.argmax())]
    for t in reversed(range(steps)):
        y.append(int(pointers[t][y[-1]]))
    return float(v.max()), y[::-1]


def l2_max_cvxpy(v, gamma):
    """max_{p in simplex} <p, v> - gamma/2 ||p||^2 by cvxpy; entries -inf (zero mass) are
    dropped from the problem."""
    v = np.asarray(v, dtype=float)
    keep = np.isfinite(v)
    p = cp.Variable(int(keep.sum()))
    prob = cp.Problem(
        cp.Maximize(p @ v[keep] - gamma / 2 * cp.sum_squares(p)), [p >= 0, cp.sum(p) == 1]
    )
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    full = np.zeros_like(v)
    full[keep] = np.clip(p.value, 0, None)
    return float(prob.value), full


def viterbi_l2_cvxpy(theta, gamma):
    """The recursion with each node's max solved by cvxpy; (value, marginals)."""
    steps, states, _ = theta.shape
    v = np.zeros(states)
    qs = []
    for t in range(steps):
        q = np.zeros((states, states))
        new = np.zeros(states)
        for i in range(states):
            new[i], q[i] = l2_max_cvxpy(theta[t, i] + v, gamma)
        v = new
        qs.append(q)
    value, u = l2_max_cvxpy(v, gamma)
    marg = np.zeros_like(theta)
    for t in reversed(range(steps)):
        marg[t] = qs[t] * u[:, None]
        u = marg[t].sum(0)
    return value, marg


# -- DTW -------------------------------------------------------------------------------


def alignments(m, n):
    """Every monotone path (0, 0) -> (m-1, n-1) with steps (1, 0), (0, 1), (1, 1)."""
    out = []

    def walk(path):
        i, j = path[-1]
        if (i, j) == (m - 1, n - 1):
            out.append(list(path))
            return
        for di, dj in ((1, 0), (0, 1), (1, 1)):
            if i + di < m and j + dj < n:
                walk(path + [(i + di, j + dj)])

    walk([(0, 0)])
    return out


def dtw_brute_entropy(theta, gamma):
    """theta (m, n) -> (value, expected alignment) by enumeration (soft-DTW)."""
    m, n = theta.shape
    paths = alignments(m, n)
    costs = np.array([sum(theta[i, j] for i, j in a) for a in paths])
    value = -lse(-costs, gamma)
    prob = np.exp((value - costs) / gamma)
    marg = np.zeros_like(theta)
    for p, a in zip(prob, paths, strict=True):
        for i, j in a:
            marg[i, j] += p
    return value, marg


def dtw_hard(theta):
    """Min-sum DTW: (value, alignment matrix of one optimal path)."""
    m, n = theta.shape
    paths = alignments(m, n)
    costs = [sum(theta[i, j] for i, j in a) for a in paths]
    best = paths[int(np.argmin(costs))]
    a = np.zeros_like(theta)
    for i, j in best:
        a[i, j] = 1
    return float(min(costs)), a


def dtw_l2_cvxpy(theta, gamma):
    """The DTW recursion with each node's min solved by cvxpy; (value, expected alignment)."""
    m, n = theta.shape
    r = np.full((m + 1, n + 1), np.inf)
    r[0, 0] = 0
    q = np.zeros((m + 2, n + 2, 3))
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            val, p = l2_max_cvxpy(-np.array([r[i - 1, j - 1], r[i - 1, j], r[i, j - 1]]), gamma)
            r[i, j] = theta[i - 1, j - 1] - val
            q[i, j] = p
    e = np.zeros((m + 2, n + 2))
    e[m, n] = 1
    for i in reversed(range(1, m + 1)):
        for j in reversed(range(1, n + 1)):
            if (i, j) != (m, n):
                e[i, j] = (
                    q[i + 1, j + 1, 0] * e[i + 1, j + 1]
                    + q[i + 1, j, 1] * e[i + 1, j]
                    + q[i, j + 1, 2] * e[i, j + 1]
                )
    return r[m, n], e[1 : m + 1, 1 : n + 1]
