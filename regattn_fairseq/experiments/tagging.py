"""Evaluation of the NER tagger (`regattn_ner`): Viterbi decoding of a subset, entity-level F1
with seqeval, and the expected tag marginals of the smoothed Viterbi (their sparsity, and an
export in the attention-export format so that the suite's figure and statistics apply).

Scoring: decoded IOBES tags are turned back into IOB2 (builders.ner.iobes_to_iob2) and scored
against the data's original IOB2 tags with seqeval's default mode (``mode=None``), which its
README says is compatible with conlleval ("This is well-tested by using the Perl script
conlleval"; "The default mode is compatible with conlleval", https://pypi.org/project/seqeval/).
"""

from __future__ import annotations

import json
import time
from argparse import Namespace
from pathlib import Path

import torch

from .builders.ner import iobes_to_iob2
from .paths import USER_DIR


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict:
    """Entity-level precision, recall and F1 (percent) of IOB2 tag sequences, conlleval rules
    (seqeval's default mode)."""
    from seqeval.metrics import f1_score, precision_score, recall_score

    return {
        "f1": round(100 * float(f1_score(gold, predicted)), 2),
        "precision": round(100 * float(precision_score(gold, predicted)), 2),
        "recall": round(100 * float(recall_score(gold, predicted)), 2),
    }


def load_tagger(checkpoint: Path):
    """The model and task of a regattn_ner checkpoint (eval mode, CPU)."""
    from fairseq import checkpoint_utils, utils

    utils.import_user_module(Namespace(user_dir=str(USER_DIR)))
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    return models[0].eval(), task


def tag_marginals(model, sample, reg: str, gamma: float) -> torch.Tensor:
    """(batch, T, K) expected tag of each word under DP_Omega: the gradient of
    `regattn.dp.viterbi` summed over the previous state (the START state dropped)."""
    from regattn.dp import viterbi

    net_input = sample["net_input"]
    with torch.no_grad():
        emissions = model(**net_input)
    theta = model.potentials(emissions, net_input["lengths"]).detach().requires_grad_(True)
    value = viterbi(theta, reg=reg, gamma=gamma, lengths=net_input["lengths"]).sum()
    (marginals,) = torch.autograd.grad(value, theta)
    return marginals.sum(-1)[..., :-1]


def decode_subset(checkpoint: Path, data: Path, subset: str, reg: str, gamma: float, export):
    """Viterbi tags (IOBES names) of every sentence of `subset`, in corpus order; writes the
    expected tag marginals of every sentence to `export` (JSON lines: "src_tokens" = tags,
    "tgt_tokens" = words, "attention" = one row of tag marginals per word)."""
    model, task = load_tagger(checkpoint)
    task.cfg.data = str(data)
    dataset = task.load_dataset(subset)
    predictions = {}
    with open(export, "w", encoding="utf-8") as out:
        for start in range(0, len(dataset), 64):
            ids = range(start, min(start + 64, len(dataset)))
            sample = dataset.collater([dataset[i] for i in ids])
            net_input = sample["net_input"]
            with torch.no_grad():
                paths = model.decode(**net_input)
            marginals = tag_marginals(model, sample, reg, gamma)
            for b, index in enumerate(sample["id"].tolist()):
                n = int(net_input["lengths"][b])
                predictions[index] = [task.tags[t] for t in paths[b, :n].tolist()]
                words = [task.word_dict[w] for w in net_input["words"][b, :n].tolist()]
                record = {
                    "id": index,
                    "src_tokens": list(task.tags),
                    "tgt_tokens": words,
                    "attention": marginals[b, :n].tolist(),
                    "mapping": {"name": f"dp_{reg}", "params": {"gamma": gamma}},
                }
                out.write(json.dumps(record) + "\n")
    return [predictions[i] for i in range(len(dataset))]


def evaluate(model, prepared, name: str, out_dir: Path) -> dict:
    """runs.evaluate's "entity_f1" scorer: decode evaluation set `name`, score it, measure
    the expected tag marginals. Same result keys as the other scorers."""
    from omegaconf import OmegaConf

    from regattn.analysis import attention_statistics, read_export, rows_of_export

    evaluation = prepared.evaluation(name)
    criterion = OmegaConf.load(model.config_file).criterion if model.config_file.is_file() else {}
    reg, gamma = str(criterion.get("dp_reg", "entropy")), float(criterion.get("dp_gamma", 1.0))
    out_dir.mkdir(parents=True, exist_ok=True)
    export = out_dir / f"marginals-{evaluation['subset']}.jsonl"
    start = time.time()
    predicted = decode_subset(
        model.checkpoint, prepared.bin_dir, evaluation["subset"], reg, gamma, export
    )
    elapsed = time.time() - start
    gold = [line.split() for line in Path(evaluation["refs"][0]).read_text().splitlines()]
    hypotheses = [iobes_to_iob2(tags) for tags in predicted]
    metrics = entity_scores(gold, hypotheses)
    hyp_file = out_dir / f"{name}.hyp"
    hyp_file.write_text("\n".join(" ".join(t) for t in hypotheses) + "\n", encoding="utf-8")
    stats = {"export": str(export), "sentences": len(predicted)}
    stats.update(attention_statistics(rows_of_export(read_export(export)), tol=1e-9))
    print(
        f"[score] {name}: entity F1 {metrics['f1']} (seqeval, conlleval rules); marginals "
        f"{100 * stats['mean_zero_fraction']:.1f}% zeros, support {stats['mean_support_size']:.2f}",
        flush=True,
    )
    return {
        "metrics": metrics,
        "decode_wall_s": round(elapsed, 1),
        "hypotheses": str(hyp_file),
        "attention": stats,
        "signature": "seqeval default mode (conlleval), IOBES decoded -> IOB2",
    }
