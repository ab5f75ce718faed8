"""Evaluation of the NER tagger (`regattn_ner`): Viterbi decoding of a subset, entity-level F1
with seqeval, and the expected tag marginals of the smoothed Viterbi (their sparsity: exact
zeros of the tag and transition marginals, and the number of tag sequences with nonzero mass
per sentence; and an export in the attention-export format so that the suite's figure
applies).

Scoring: decoded IOBES tags are turned back into IOB2 (builders.ner.iobes_to_iob2) and scored
against the data's original IOB2 tags with seqeval's default mode (``mode=None``), which its
README says is compatible with conlleval ("This is well-tested by using the Perl script
conlleval"; "The default mode is compatible with conlleval", https://pypi.org/project/seqeval/).
The per-sentence entity counts (`entity_counts`) let the paired bootstrap
(`significance`) recompute that corpus-level F1 on resampled sentences.
"""

from __future__ import annotations

import math
import statistics
import time
from argparse import Namespace
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

from regattn.analysis import attention_statistics
from regattn.dp import REFERENCE_REG, viterbi
from regattn_fairseq.experiments.core.paths import USER_DIR
from regattn_fairseq.experiments.data.builders.ner import iobes_to_iob2
from regattn_fairseq.experiments.decode.attention_format import (
    export_writer,
    read_export,
    rows_of_export,
)


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict:
    """Entity-level precision, recall and F1 (percent) of IOB2 tag sequences, conlleval rules
    (seqeval's default mode)."""
    from seqeval.metrics import f1_score, precision_score, recall_score

    return {
        "f1": round(100 * float(f1_score(gold, predicted)), 2),
        "precision": round(100 * float(precision_score(gold, predicted)), 2),
        "recall": round(100 * float(recall_score(gold, predicted)), 2),
    }


def entity_counts(gold: list[list[str]], predicted: list[list[str]]) -> dict:
    """Per-sentence sufficient statistics of the corpus-level entity F1, for the paired
    bootstrap (`significance`, kind "f1").

    Corpus F1 is not a mean of sentence scores: it is 2 tp / (predicted + gold) over the
    summed entity counts, so a resample of sentences needs each sentence's counts. The
    entities are seqeval's own (`get_entities`, the default mode that `entity_scores` uses):
    seqeval joins the sentences with an "O" between them, so no entity spans two sentences and
    the per-sentence counts add up to its corpus counts.

    Parameters
    ----------
    gold, predicted : list of list of str
        IOB2 tags of each sentence, in the same order.

    Returns
    -------
    dict
        ``{"kind": "f1", "n", "tp", "predicted", "gold"}``: per sentence, the number of
        predicted entities that match a gold one (type and span), of predicted entities and of
        gold entities.

    Raises
    ------
    ValueError
        the two lists differ in length, or a sentence's two tag sequences do.
    """
    from seqeval.metrics.sequence_labeling import get_entities

    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted ones")
    items = {"kind": "f1", "n": len(gold), "tp": [], "predicted": [], "gold": []}
    for index, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted, strict=True)):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(
                f"sentence {index}: {len(gold_tags)} gold tags but {len(predicted_tags)} predicted"
            )
        gold_entities = set(get_entities(gold_tags))
        predicted_entities = set(get_entities(predicted_tags))
        items["tp"].append(len(gold_entities & predicted_entities))
        items["predicted"].append(len(predicted_entities))
        items["gold"].append(len(gold_entities))
    return items


def load_tagger(checkpoint: Path):
    """The model and task of a regattn_ner checkpoint (eval mode, CPU)."""
    from fairseq import checkpoint_utils, utils

    utils.import_user_module(Namespace(user_dir=str(USER_DIR)))
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    return models[0].eval(), task


def transition_marginals(model, sample, reg: str, gamma: float):
    """The potentials theta and the expected transition marginals mu of a batch under DP_Omega.

    mu = d DP_Omega / d theta, the gradient of `regattn.dp.viterbi`: (batch, T, S, S), mu[b,
    t-1, i, j] the expected indicator of moving from state j at word t-1 to state i at word t
    (state S-1 = START, see `regattn_fairseq.models.regattn_ner`), zero past each sentence.
    Computed in float64: the entropy's marginals are never zero in exact arithmetic, and
    float32's exp underflows past about 100 nats of score difference, which would show as
    spurious exact zeros.

    Returns
    -------
    tuple of torch.Tensor
        (theta, mu), both (batch, T, S, S) float64.
    """

    net_input = sample["net_input"]
    with torch.no_grad():
        emissions = model(**net_input)
        theta = model.potentials(emissions, net_input["lengths"]).double()
    theta.requires_grad_(True)
    value = viterbi(theta, reg=reg, gamma=gamma, lengths=net_input["lengths"]).sum()
    (marginals,) = torch.autograd.grad(value, theta)
    return theta.detach(), marginals


def tag_marginals(transitions: torch.Tensor) -> torch.Tensor:
    """(batch, T, K) expected tag of each word: the transition marginals (batch, T, S, S) of
    `transition_marginals` summed over the previous state, the START state (never entered
    after y_0) dropped."""
    return transitions.sum(-1)[..., :-1]


def tag_sequence_counts(transitions: torch.Tensor, lengths: torch.Tensor) -> list[int]:
    """The number of state sequences with nonzero probability under the smoothed Viterbi's
    path distribution, per sentence, exactly (Python integers).

    Derivation (Mensch & Blondel 2018, the proposition on the gradient of DP_Omega as an
    expected path): d DP_Omega / d theta = E[Y], Y the transition indicator of the path of a
    backward random walk that picks the last state y_T with the final max_Omega weights q and
    moves from state i at step t to state j at step t-1 with the local max_Omega weights
    Q_t[i, j]. A path y has probability P(y) = q(y_T) prod_t Q_t[y_t, y_{t-1}], and the
    marginal of a transition is mu_t(i, j) = U_t(i) Q_t[i, j] >= P(y) for every path y that
    takes it (U_t the mass reaching state i at step t, U_T = q). So P(y) > 0 iff every
    transition of y has mu_t > 0: if P(y) > 0, each marginal is at least P(y); if every
    mu_t(y_t, y_{t-1}) > 0, each Q factor is > 0, and so is q(y_T) = U_T(y_T) since the last
    transition has mass. The count is therefore the number of paths of the graph of transitions
    with mu > 0, a dynamic program:

        N_0(j) = 1 for every state j (V_0(j) = 0: `regattn.dp` lets the chain start anywhere),
        N_t(i) = sum_j 1[mu_t(i, j) > 0] N_{t-1}(j),   count = sum_i N_T(i).

    With the tagger's potentials (`regattn_ner.potentials`) only START has a finite move into
    the first word (theta = -inf, hence mu = 0, from every tag at t = 1) and nothing moves back
    into START, so every counted path is START followed by n real tags: the count is that of
    tag sequences, as `tag_marginals` (START dropped) describes them. With the entropy every
    finite transition has mass: K^n sequences for an n-word sentence (no -inf between tags:
    the transition matrix is learned, not constrained to valid IOBES).

    Parameters
    ----------
    transitions : torch.Tensor
        (batch, T, S, S) transition marginals (`transition_marginals`).
    lengths : torch.Tensor
        (batch,) sentence lengths: steps past them are not counted.

    Returns
    -------
    list of int
        One count per sentence (exact: the entropy's K^n overflows float64 for long
        sentences).

    Raises
    ------
    ValueError
        transitions not (batch, T, S, S), or lengths not (batch,) in [1, T].
    """
    if transitions.dim() != 4 or transitions.shape[2] != transitions.shape[3]:
        raise ValueError(f"transition marginals must be (batch, T, S, S), got {transitions.shape}")
    batch, steps, states, _ = transitions.shape
    if lengths.shape != (batch,) or bool((lengths < 1).any() or (lengths > steps).any()):
        raise ValueError(f"lengths must be ({batch},) integers in [1, {steps}], got {lengths}")
    # object arrays: numpy's matrix product on Python integers, which never overflow
    support = (transitions > 0).cpu().numpy().astype(object)
    counts = []
    for b, n in enumerate(lengths.tolist()):
        paths = np.ones(states, dtype=object)
        for t in range(n):
            paths = support[b, t] @ paths
        counts.append(int(paths.sum()))
    return counts


def _as_float(value) -> float | None:
    """`value` as a float, None beyond float64's range (the entropy's K^n on long sentences)."""
    try:
        return float(value)
    except OverflowError:
        return None


def sequence_statistics(counts: list[int]) -> dict:
    """Summary of the per-sentence counts of tag sequences with mass (`tag_sequence_counts`).

    Parameters
    ----------
    counts : list of int
        one count (>= 1) per sentence.

    Returns
    -------
    dict
        mean_tag_sequences         mean count (float; None beyond float64's range)
        median_tag_sequences       median count (float; None beyond float64's range)
        mean_log10_tag_sequences   mean over sentences of log10(count) (always finite: the
                                   readable figure for the entropy, n log10 K per sentence)
        single_sequence_fraction   fraction of sentences whose mass is on a single sequence

    Raises
    ------
    ValueError
        no count, or a count < 1 (every sentence has at least one path with mass).
    """
    if not counts or min(counts) < 1:
        raise ValueError(f"need one count >= 1 per sentence, got {counts[:10]}")
    ordered = sorted(counts)
    middle = len(ordered) // 2
    # exact rationals: the entropy's counts are far past float64 precision
    median = Fraction(ordered[(len(ordered) - 1) // 2] + ordered[middle], 2)
    return {
        "mean_tag_sequences": _as_float(Fraction(sum(counts), len(counts))),
        "median_tag_sequences": _as_float(median),
        # math.log10 takes integers of any size (no conversion to float)
        "mean_log10_tag_sequences": statistics.fmean(math.log10(c) for c in counts),
        "single_sequence_fraction": sum(c == 1 for c in counts) / len(counts),
    }


def decode_subset(checkpoint: Path, data: Path, subset: str, reg: str, gamma: float, export):
    """Viterbi tags (IOBES names) of every sentence of `subset`, in corpus order, and the
    sparsity of its expected marginals; writes the expected tag marginals of every sentence to
    `export` (JSON lines: "src_tokens" = tags, "tgt_tokens" = words, "attention" = one row of
    tag marginals per word, "gold_tags" = the gold IOBES tags, which the figure uses to pick a
    sentence with an entity).

    Returns
    -------
    tuple
        (tags of every sentence, ``{"tag_sequences": count per sentence in corpus order
        (`tag_sequence_counts`), "transition_zeros": exact zeros among the allowed transition
        marginals, "allowed_transitions": their number}``); the allowed transitions are those
        of finite potential at the sentences' words (the -inf ones are zero by construction).
    """
    model, task = load_tagger(checkpoint)
    task.cfg.data = str(data)
    dataset = task.load_dataset(subset)
    predictions, sequences = {}, {}
    zeros = allowed = 0
    with export_writer(export) as write:
        for start in range(0, len(dataset), 64):
            ids = range(start, min(start + 64, len(dataset)))
            sample = dataset.collater([dataset[i] for i in ids])
            net_input = sample["net_input"]
            lengths = net_input["lengths"]
            with torch.no_grad():
                paths = model.decode(**net_input)
            theta, transitions = transition_marginals(model, sample, reg, gamma)
            marginals = tag_marginals(transitions)
            steps = torch.arange(theta.shape[1])[None, :] < lengths[:, None]
            finite = torch.isfinite(theta) & steps[:, :, None, None]
            zeros += int((finite & (transitions == 0)).sum())
            allowed += int(finite.sum())
            counts = tag_sequence_counts(transitions, lengths)
            for b, index in enumerate(sample["id"].tolist()):
                n = int(lengths[b])
                predictions[index] = [task.tags[t] for t in paths[b, :n].tolist()]
                sequences[index] = counts[b]
                words = [task.word_dict[w] for w in net_input["words"][b, :n].tolist()]
                record = {
                    "id": index,
                    "src_tokens": list(task.tags),
                    "tgt_tokens": words,
                    "gold_tags": [task.tags[t] for t in sample["target"][b, :n].tolist()],
                    "attention": marginals[b, :n].tolist(),
                    "mapping": {"name": f"dp_{reg}", "params": {"gamma": gamma}},
                }
                write(record)
    order = range(len(dataset))
    sparsity = {
        "tag_sequences": [sequences[i] for i in order],
        "transition_zeros": zeros,
        "allowed_transitions": allowed,
    }
    return [predictions[i] for i in order], sparsity


def evaluate(model, prepared, name: str, out_dir: Path) -> dict:
    """`evaluate.evaluate`'s "entity_f1" scorer: decode evaluation set `name`, score it, measure
    the expected tag marginals. Same result keys as the other scorers, and the per-sentence
    entity counts as "items" (the paired bootstrap's data).

    The "attention" statistics are `regattn.analysis.attention_statistics` of the tag
    marginals (rows: words; mean_zero_fraction, mean_support_size), plus
    transition_zero_fraction (exact zeros among the allowed transition marginals, pooled over
    the set) and `sequence_statistics` of the tag sequences with mass.
    """
    from omegaconf import OmegaConf

    evaluation = prepared.evaluation(name)
    criterion = OmegaConf.load(model.config_file).criterion if model.config_file.is_file() else {}
    reg, gamma = str(criterion.get("dp_reg", REFERENCE_REG)), float(criterion.get("dp_gamma", 1.0))
    out_dir.mkdir(parents=True, exist_ok=True)
    export = out_dir / f"marginals-{evaluation['subset']}.jsonl"
    start = time.time()
    predicted, sparsity = decode_subset(
        model.checkpoint, prepared.bin_dir, evaluation["subset"], reg, gamma, export
    )
    elapsed = time.time() - start
    gold = [line.split() for line in Path(evaluation["refs"][0]).read_text().splitlines()]
    hypotheses = [iobes_to_iob2(tags) for tags in predicted]
    metrics = entity_scores(gold, hypotheses)
    hyp_file = out_dir / f"{name}.hyp"
    hyp_file.write_text("\n".join(" ".join(t) for t in hypotheses) + "\n", encoding="utf-8")
    stats = {"export": str(export), "sentences": len(predicted)}
    # exact zeros (tol 0): the float64 marginals of the entropy are tiny but never 0
    stats.update(attention_statistics(rows_of_export(read_export(export)), tol=0.0))
    stats["transition_zero_fraction"] = (
        sparsity["transition_zeros"] / sparsity["allowed_transitions"]
    )
    stats.update(sequence_statistics(sparsity["tag_sequences"]))
    print(
        f"[score] {name}: entity F1 {metrics['f1']} (seqeval, conlleval rules); marginals "
        f"{100 * stats['mean_zero_fraction']:.1f}% zeros (transitions "
        f"{100 * stats['transition_zero_fraction']:.1f}%); tag sequences with mass: mean "
        f"{format_count(stats['mean_tag_sequences'])}, median "
        f"{format_count(stats['median_tag_sequences'])}, mean log10 "
        f"{stats['mean_log10_tag_sequences']:.2f}, a single one in "
        f"{100 * stats['single_sequence_fraction']:.1f}% of sentences",
        flush=True,
    )
    return {
        "metrics": metrics,
        "decode_wall_s": round(elapsed, 1),
        "hypotheses": str(hyp_file),
        "attention": stats,
        "items": entity_counts(gold, hypotheses),
        "signature": "seqeval default mode (conlleval), IOBES decoded -> IOB2",
    }


def format_count(value: float | None) -> str:
    """A count of tag sequences for the logs and tables: 3 significant digits ("1.5", "1e+32"),
    "> 1e308" where the record holds None (beyond float64)."""
    return "> 1e308" if value is None else f"{value:.3g}"
