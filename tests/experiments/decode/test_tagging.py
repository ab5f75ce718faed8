"""The NER tagger's evaluation (experiments/decode/tagging.py): seqeval's entity F1 on a hand
example (conlleval rules); the sparsity of the smoothed Viterbi's marginals: the count of tag
sequences with nonzero mass against a brute-force enumeration of every path with its
probability as the product of the local max_Omega weights, a hand-made support with a known
count, the entropy's K^n, l2 with a small gamma on a single sequence (the Viterbi path), and
the summary statistics."""

import itertools
import math

import numpy as np
import pytest
import torch

from regattn.dp import viterbi, viterbi_decode
from regattn_fairseq.experiments.decode.tagging import (
    entity_scores,
    sequence_statistics,
    tag_marginals,
    tag_sequence_counts,
)
from regattn_fairseq.models.regattn_ner import potentials


def _local_weights(v: np.ndarray, reg: str, gamma: float) -> tuple[float, np.ndarray]:
    """max_Omega and argmax_Omega of v (-inf entries get 0; only -inf: -inf and 0), written
    out independently of regattn: softmax, or the sort-based projection onto the simplex
    (Held et al. 1974)."""
    finite = np.isfinite(v)
    z = v[finite] / gamma
    p = np.zeros_like(v)
    if not finite.any():  # a state no move enters (START after y_0)
        return -math.inf, p
    if reg == "entropy":
        top = z.max()
        e = np.exp(z - top)
        p[finite] = e / e.sum()
        return gamma * (top + math.log(e.sum())), p
    u = np.sort(z)[::-1]
    cumulative = np.cumsum(u) - 1
    k = np.nonzero(u - cumulative / np.arange(1, len(u) + 1) > 0)[0][-1]
    p[finite] = np.maximum(z - cumulative[k] / (k + 1), 0)
    return float(p[finite] @ v[finite] - gamma / 2 * p[finite] @ p[finite]), p


def _path_probabilities(theta: np.ndarray, reg: str, gamma: float) -> dict:
    """Every path y_0..y_T of one unpadded theta (T, S, S) with its probability under the
    backward random walk: q(y_T) prod_t Q_t[y_t, y_{t-1}], Q from the forward recursion."""
    steps, states, _ = theta.shape
    v = np.zeros(states)
    local = []
    for t in range(steps):
        values, weights = zip(
            *(_local_weights(theta[t, i] + v, reg, gamma) for i in range(states)), strict=True
        )
        v, q_t = np.array(values), np.stack(weights)
        local.append(q_t)
    _, q = _local_weights(v, reg, gamma)
    probabilities = {}
    for path in itertools.product(range(states), repeat=steps + 1):
        p = q[path[-1]]
        for t in range(steps):
            p *= local[t][path[t + 1], path[t]]
        probabilities[path] = p
    return probabilities


def _marginals(theta, reg, gamma, lengths):
    theta = theta.clone().requires_grad_(True)
    (mu,) = torch.autograd.grad(viterbi(theta, reg, gamma, lengths).sum(), theta)
    return mu


def _tagger_theta(lengths: list[int], tags=3, seed=0):
    """The tagger's potentials (`regattn_ner.potentials`) of random scores, and the lengths."""
    g = torch.Generator().manual_seed(seed)
    emissions = 2 * torch.randn(len(lengths), max(lengths), tags, generator=g, dtype=torch.float64)
    transition = torch.randn(tags, tags, generator=g, dtype=torch.float64)
    start, end = (torch.randn(tags, generator=g, dtype=torch.float64) for _ in range(2))
    lengths = torch.tensor(lengths)
    return potentials(emissions, transition, start, end, lengths), lengths


@pytest.mark.parametrize("reg, gamma", [("l2", 0.5), ("l2", 2.0), ("l2", 8.0), ("entropy", 1.0)])
@pytest.mark.parametrize("kind", ["finite", "tagger"])
def test_count_is_the_number_of_paths_with_mass(kind, reg, gamma):
    if kind == "finite":  # no forbidden move: the chain may start in any state
        g = torch.Generator().manual_seed(3)
        theta = torch.randn(2, 3, 3, 3, generator=g, dtype=torch.float64) * 2
        lengths = torch.tensor([3, 2])
    else:  # the tagger's START convention: -inf outside the moves of a tag sequence
        theta, lengths = _tagger_theta([4, 2])
    mu = _marginals(theta, reg, gamma, lengths)
    counts = tag_sequence_counts(mu, lengths)
    states = theta.shape[-1]
    for b, n in enumerate(lengths.tolist()):
        probabilities = _path_probabilities(theta[b, :n].numpy(), reg, gamma)
        # the gradient is the expectation of the path (the derivation's premise)
        expected = np.zeros((n, states, states))
        for path, p in probabilities.items():
            for t in range(n):
                expected[t, path[t + 1], path[t]] += p
        np.testing.assert_allclose(mu[b, :n].numpy(), expected, atol=1e-12)
        with_mass = [path for path, p in probabilities.items() if p > 0]
        assert counts[b] == len(with_mass)
        if kind == "tagger":  # every path with mass starts at START and never returns to it
            start = states - 1
            assert all(path[0] == start and start not in path[1:] for path in with_mass)
        # every finite path: S^(n+1), or K^n tag sequences for the tagger
        every = states ** (n + 1) if kind == "finite" else (states - 1) ** n
        if reg == "entropy":
            assert counts[b] == every
        elif gamma == 0.5:  # l2 is sparse here (counts 1 to 2; 6 to 72 at gamma = 8)
            assert counts[b] < every


def test_count_of_a_hand_made_support():
    # S = 3, T = 3; the moves with mass (to <- from): t=1: 0<-0, 2<-1; t=2: 0<-0, 0<-2, 1<-0;
    # t=3: 0<-0, 0<-1, 2<-0. N_1 = [1, 0, 1], N_2 = [2, 1, 0], N_3 = [3, 0, 2]: 5 paths,
    # (0,0,0,0) (0,0,0,2) (0,0,1,0) (1,2,0,0) (1,2,0,2); the second sentence stops at
    # t = 2: 3 paths. The values are arbitrary: only their support counts.
    support = [
        [[1, 0, 0], [0, 0, 0], [0, 1, 0]],
        [[1, 0, 1], [1, 0, 0], [0, 0, 0]],
        [[1, 1, 0], [0, 0, 0], [1, 0, 0]],
    ]
    mu = torch.tensor(support, dtype=torch.float64) * 0.25
    mu = torch.stack([mu, mu])
    assert tag_sequence_counts(mu, torch.tensor([3, 2])) == [5, 3]
    with pytest.raises(ValueError, match="lengths"):
        tag_sequence_counts(mu, torch.tensor([4, 2]))
    with pytest.raises(ValueError, match="batch, T, S, S"):
        tag_sequence_counts(mu[:, :, :2], torch.tensor([3, 2]))


def test_l2_with_a_small_gamma_puts_all_mass_on_the_viterbi_path():
    theta, lengths = _tagger_theta([6, 4, 1], tags=5, seed=7)
    mu = _marginals(theta, "l2", 1e-3, lengths)
    assert tag_sequence_counts(mu, lengths) == [1, 1, 1]
    decoded = viterbi_decode(theta, lengths)[:, 1:]
    nodes = tag_marginals(mu)
    for b, n in enumerate(lengths.tolist()):
        assert nodes[b, :n].argmax(-1).tolist() == decoded[b, :n].tolist()
    # the entropy on the same potentials: every one of the K^n tag sequences
    entropy = tag_sequence_counts(_marginals(theta, "entropy", 1.0, lengths), lengths)
    assert entropy == [5**6, 5**4, 5]


def test_sequence_statistics():
    stats = sequence_statistics([1, 1, 4, 10])
    assert stats == {
        "mean_tag_sequences": 4.0,
        "median_tag_sequences": 2.5,
        "mean_log10_tag_sequences": pytest.approx((math.log10(4) + 1) / 4),
        "single_sequence_fraction": 0.5,
    }
    # the entropy's K^n: beyond float64, the mean and median are None, the log10 is exact
    huge = sequence_statistics([17**300, 17**300, 1])
    assert huge["mean_tag_sequences"] is None and huge["median_tag_sequences"] is None
    assert huge["mean_log10_tag_sequences"] == pytest.approx(2 * 300 * math.log10(17) / 3)
    with pytest.raises(ValueError, match="count >= 1"):
        sequence_statistics([1, 0])
    with pytest.raises(ValueError, match="count >= 1"):
        sequence_statistics([])


def test_seqeval_entity_f1_hand_example():
    # gold entities: PER(0-1), LOC(3), ORG(5); predicted: PER(0-1) correct, LOC(3) as MISC
    # (wrong type), ORG missed, a spurious PER(6). correct 1, predicted 3, gold 3:
    # P = 1/3, R = 1/3, F1 = 1/3.
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-MISC"], ["O", "O", "B-PER"]]
    scores = entity_scores(gold, pred)
    assert scores == {"f1": 33.33, "precision": 33.33, "recall": 33.33}
    # conlleval rules (seqeval's default mode): an I- after O starts an entity
    assert entity_scores([["O", "B-PER", "I-PER"]], [["O", "I-PER", "I-PER"]])["f1"] == 100.0
