"""The NER tagger of the plugin: the theta convention of regattn_ner (gold paths score
correctly), the DP loss against a brute-force CRF negative log-likelihood, Viterbi decoding,
and a tiny model + loss + decode step."""

import itertools
import math

import pytest
import torch

from regattn.dp import viterbi_decode
from regattn_fairseq.criterions.regattn_ner_dp import dp_loss
from regattn_fairseq.models.regattn_ner import path_score, potentials


def _random_crf(batch=2, steps=4, tags=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    emissions = torch.randn(batch, steps, tags, generator=g, dtype=torch.float64)
    transition = torch.randn(tags, tags, generator=g, dtype=torch.float64)
    start = torch.randn(tags, generator=g, dtype=torch.float64)
    end = torch.randn(tags, generator=g, dtype=torch.float64)
    return emissions, transition, start, end


def _crf_score(emissions, transition, start, end, y):
    """The textbook linear-chain CRF score of tags y (one sentence)."""
    score = start[y[0]] + emissions[0, y[0]] + end[y[-1]]
    for t in range(1, len(y)):
        score = score + transition[y[t], y[t - 1]] + emissions[t, y[t]]
    return score


def test_theta_convention_scores_gold_paths_like_a_crf():
    emissions, transition, start, end = _random_crf()
    lengths = torch.tensor([4, 2])
    theta = potentials(emissions, transition, start, end, lengths)
    assert theta.shape == (2, 4, 4, 4)  # K + 1 states, START = 3
    assert torch.isinf(theta[:, :, 3, :]).all()  # nothing goes back into START
    assert torch.isinf(theta[:, 0, :3, :3]).all()  # the first word comes from START only
    assert torch.isinf(theta[:, 1:, :, 3]).all()  # START only at y_0
    for y in itertools.product(range(3), repeat=4):
        target = torch.tensor([list(y), [y[0], y[1], 0, 0]])
        got = path_score(theta, target, lengths)
        assert got[0].item() == pytest.approx(
            _crf_score(emissions[0], transition, start, end, y).item()
        )
        want = _crf_score(emissions[1, :2], transition, start, end, y[:2]).item()
        assert got[1].item() == pytest.approx(want)


def test_entropy_loss_is_the_brute_force_crf_nll_and_decode_is_the_argmax():
    emissions, transition, start, end = _random_crf(seed=1)
    lengths = torch.tensor([4, 3])
    target = torch.tensor([[0, 2, 1, 1], [2, 2, 0, -1]])
    theta = potentials(emissions, transition, start, end, lengths)
    loss = dp_loss(theta, target, lengths, "entropy", 1.0)
    paths = viterbi_decode(theta, lengths)
    for b in range(2):
        n = int(lengths[b])
        scores = {
            y: _crf_score(emissions[b, :n], transition, start, end, y).item()
            for y in itertools.product(range(3), repeat=n)
        }
        log_z = math.log(sum(math.exp(s) for s in scores.values()))
        gold = tuple(target[b, :n].tolist())
        assert loss[b].item() == pytest.approx(log_z - scores[gold], rel=1e-10)
        assert paths[b, 0].item() == 3  # y_0 = START
        assert tuple(paths[b, 1 : n + 1].tolist()) == max(scores, key=scores.get)
    # the gradient is expected minus gold transitions: the loss is >= 0 and l2 is finite
    assert (loss >= 0).all()
    assert torch.isfinite(dp_loss(theta, target, lengths, "l2", 0.5)).all()


def test_tiny_model_loss_and_decode():
    from fairseq.data import Dictionary

    from regattn_fairseq.models.regattn_ner import RegattnNERModel, RegattnNERModelConfig
    from regattn_fairseq.tasks.regattn_ner import NERDataset

    words, chars = Dictionary(), Dictionary()
    sentences = [["Jan", "woont", "in", "Gent"], ["Ja"]]
    for sentence in sentences:
        for w in sentence:
            words.add_symbol(w)
            for c in w:
                chars.add_symbol(c)
    tags = [[1, 0, 0, 2], [1]]  # e.g. O=0, S-PER=1, S-LOC=2
    dataset = NERDataset(sentences, tags, words, chars, seed=1)
    sample = dataset.collater([dataset[i] for i in range(2)])
    assert sample["net_input"]["chars"].shape == (2, 4, 5)
    assert sample["target"].tolist() == [[1, 0, 0, 2], [1, -1, -1, -1]]
    torch.manual_seed(0)
    cfg = RegattnNERModelConfig(
        word_embed_dim=8, char_embed_dim=4, char_hidden_size=4, hidden_size=8, dropout=0.0
    )
    model = RegattnNERModel(cfg, words, chars, num_tags=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    lengths = sample["net_input"]["lengths"]
    for reg in ("entropy", "l2"):
        for _ in range(30):
            theta = model.potentials(model(**sample["net_input"]), lengths)
            loss = dp_loss(theta, sample["target"], lengths, reg, 1.0).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        assert model.transition.grad is not None and torch.isfinite(model.transition.grad).all()
        model.eval()
        decoded = model.decode(**sample["net_input"])
        model.train()
        assert decoded[0].tolist() == [1, 0, 0, 2] and decoded[1].tolist()[:1] == [1]
