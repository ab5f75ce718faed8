"""How much training signal reaches the attention scores, epoch by epoch (issue #17, item 7).

A sparse mapping's Jacobian is zero outside its support: when the support of an attention row
is a single position, ∂p/∂s = 0 and no gradient flows back into the scores s (hence into the
query projection and, through the scores, the encoder). The row can then no longer move its
attention, whatever the loss says. This module measures that on trained checkpoints, with
teacher forcing on a held-out subset, so that a training run can be followed epoch by epoch
(`checkpoint.no_epoch_checkpoints=false` keeps one checkpoint per epoch).

For each attention row (one decoder step over the unpadded source) it records:

- the support size |{j : p_j > 0}|, and whether it is 1;
- ‖∂L/∂p‖₂ restricted to the row's positions, projected on the simplex's tangent space
  (the mean removed): the signal that *asks* the attention to change;
- ‖∂L/∂s‖₂: the signal that actually reaches the scores (for softmax, the two are related by
  diag(p) − ppᵀ; for sparsemax, ∂L/∂s is ∂L/∂p projected on the support, minus its mean there);
- the margin of the top score over the runner-up, in units of the mapping's temperature γ
  (sparsemax's support is a single position exactly when that margin is ≥ 1).

Reported per checkpoint: the means over rows, the fraction of rows whose score gradient is
exactly zero, the *pass ratio* Σ‖∂L/∂s‖ / Σ‖∂L/∂p‖ (how much of the asked-for change gets
through the mapping), and the validation NLL per target token.

  python -m regattn_fairseq.experiments.attention_gradients RUN_DIR [RUN_DIR ...] \\
      --out results/attention_gradients/NAME.json [--max-sentences 400]

writes NAME.json and a figure NAME.png/.pdf of the statistics against the epoch.

RUN_DIR is a run folder of scripts/reproduce.py (its checkpoints/ hold checkpoint<N>.pt).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

from .common import ReproError, write_json
from .provenance import provenance

_EPOCH_CHECKPOINT = re.compile(r"checkpoint(\d+)\.pt$")


def row_statistics(scores, probs, grad_scores, grad_probs, mask, gamma: float = 1.0) -> dict:
    """Per-row gradient statistics of one batch of attention rows.

    Parameters
    ----------
    scores, probs, grad_scores, grad_probs : torch.Tensor
        (rows, length): the scores s, the mapping's output p, ∂L/∂s and ∂L/∂p.
    mask : torch.Tensor or None
        (rows, length) bool, True where a position may receive attention (None: all).
    gamma : float
        the mapping's temperature (scores are divided by it before the mapping).

    Returns
    -------
    dict
        Sums over the rows that the loss depends on (∂L/∂p ≠ 0: padded target steps are
        left out) and that have a position to attend to, so that batches add up: ``rows``,
        ``support``,
        ``support_one``, ``grad_scores`` (Σ‖∂L/∂s‖), ``grad_probs`` (Σ‖P(∂L/∂p)‖, P
        removing the mean over the row's positions), ``zero_grad_scores`` (rows with
        ∂L/∂s = 0 exactly) and ``margin`` (Σ of the top-two score gap over γ).
    """
    if mask is None:
        mask = torch.ones_like(probs, dtype=torch.bool)
    # rows the loss does not depend on (a padded target step) ask nothing of the attention
    keep = mask.any(dim=-1) & (grad_probs != 0).any(dim=-1)
    scores, probs, mask = scores[keep].double(), probs[keep].double(), mask[keep]
    grad_scores, grad_probs = grad_scores[keep].double(), grad_probs[keep].double()
    count = mask.sum(dim=-1, keepdim=True)
    grad_probs = torch.where(mask, grad_probs, 0.0)
    centred = torch.where(mask, grad_probs - grad_probs.sum(-1, keepdim=True) / count, 0.0)
    grad_scores = torch.where(mask, grad_scores, 0.0)
    support = ((probs > 0) & mask).sum(dim=-1)
    masked_scores = torch.where(mask, scores, -torch.inf)
    top2 = masked_scores.topk(min(2, scores.size(-1)), dim=-1).values
    has_two = count.squeeze(-1) >= 2
    margin = torch.where(has_two, (top2[:, 0] - top2[:, -1]) / gamma, 0.0)
    score_norm = grad_scores.norm(dim=-1)
    return {
        "rows": int(keep.sum()),
        "support": float(support.sum()),
        "support_one": int((support == 1).sum()),
        "grad_scores": float(score_norm.sum()),
        "grad_probs": float(centred.norm(dim=-1).sum()),
        "zero_grad_scores": int((score_norm == 0).sum()),
        "margin": float(margin[has_two].sum()),
        "rows_with_two": int(has_two.sum()),
    }


def summarize(totals: dict, nll_sum: float, tokens: int) -> dict:
    """Means of `row_statistics` sums over a whole subset.

    Parameters
    ----------
    totals : dict
        `row_statistics` added over batches.
    nll_sum : float
        the summed negative log-likelihood (nats) of the target tokens.
    tokens : int
        the number of target tokens.

    Returns
    -------
    dict
        ``valid_nll`` (per token), ``mean_support``, ``support_one_fraction``,
        ``mean_grad_scores``, ``mean_grad_probs``, ``pass_ratio``,
        ``zero_grad_scores_fraction``, ``mean_margin_over_gamma`` and ``rows``.
    """
    rows = totals["rows"]
    if rows == 0:
        raise ReproError("no attention rows were seen (is the model a regattn model?)")
    return {
        "rows": rows,
        "valid_nll": nll_sum / tokens,
        "mean_support": totals["support"] / rows,
        "support_one_fraction": totals["support_one"] / rows,
        "mean_grad_scores": totals["grad_scores"] / rows,
        "mean_grad_probs": totals["grad_probs"] / rows,
        "pass_ratio": totals["grad_scores"] / totals["grad_probs"] if totals["grad_probs"] else 0.0,
        "zero_grad_scores_fraction": totals["zero_grad_scores"] / rows,
        "mean_margin_over_gamma": totals["margin"] / max(totals["rows_with_two"], 1),
    }


class _AttentionTap:
    """Forward hooks on every AttentionNormalizer: keep scores and outputs, and their gradients."""

    def __init__(self, model):
        from regattn_fairseq.modules.attention_normalizer import AttentionNormalizer

        self.calls = []
        self.handles = [
            module.register_forward_hook(self._record)
            for module in model.modules()
            if isinstance(module, AttentionNormalizer)
        ]
        if not self.handles:
            raise ReproError("the model has no regattn attention normalizer to measure")

    def _record(self, module, inputs, output):
        scores, mask = inputs[0], inputs[1] if len(inputs) > 1 else None
        call = {"scores": scores, "probs": output, "mask": mask, "module": module}
        scores.register_hook(lambda grad: call.__setitem__("grad_scores", grad))
        output.register_hook(lambda grad: call.__setitem__("grad_probs", grad))
        self.calls.append(call)

    def remove(self):
        for handle in self.handles:
            handle.remove()


def measure_checkpoint(path: Path, subset: str, max_sentences: int, batch_size: int) -> dict:
    """Teacher-forced forward and backward of a seq2seq checkpoint over `subset`.

    Parameters
    ----------
    path : Path
        a fairseq checkpoint of a regattn seq2seq model.
    subset : str
        the fairseq subset to read (``valid``).
    max_sentences : int
        how many sentences of the subset, in its order.
    batch_size : int
        sentences per batch.

    Returns
    -------
    dict
        `summarize` of the subset, plus ``epoch`` and ``sentences``.
    """
    from fairseq import checkpoint_utils

    import regattn_fairseq  # noqa: F401  (registers the models and task)

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    model = models[0].eval()  # no dropout; gradients are still computed
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    indices = list(range(min(max_sentences, len(dataset))))
    pad = task.target_dictionary.pad()
    tap = _AttentionTap(model)
    totals: dict = {}
    nll_sum, tokens = 0.0, 0
    try:
        for start in range(0, len(indices), batch_size):
            sample = dataset.collater([dataset[i] for i in indices[start : start + batch_size]])
            tap.calls.clear()
            model.zero_grad(set_to_none=True)
            net_output = model(**sample["net_input"])
            lprobs = model.get_normalized_probs(net_output, log_probs=True)
            target = sample["target"]
            nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)[target.ne(pad)].sum()
            nll.backward()
            nll_sum += float(nll.detach())
            tokens += int(target.ne(pad).sum())
            for call in tap.calls:
                gamma = call["module"].spec.params.get("gamma") or 1.0
                length = call["scores"].size(-1)
                mask = call["mask"]
                stats = row_statistics(
                    call["scores"].detach().reshape(-1, length),
                    call["probs"].detach().reshape(-1, length),
                    call["grad_scores"].reshape(-1, length),
                    call["grad_probs"].reshape(-1, length),
                    None if mask is None else mask.expand_as(call["scores"]).reshape(-1, length),
                    gamma,
                )
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0) + value
    finally:
        tap.remove()
    epoch = _EPOCH_CHECKPOINT.search(path.name)
    return {
        "epoch": int(epoch.group(1)) if epoch else None,
        "mapping": model.attention_spec.describe(),
        "sentences": len(indices),
        **summarize(totals, nll_sum, tokens),
    }


def epoch_checkpoints(run_dir: Path) -> list[Path]:
    """A run's per-epoch checkpoints, in epoch order.

    Raises
    ------
    ReproError
        the run kept none (train it with ``checkpoint.no_epoch_checkpoints=false``).
    """
    found = sorted(
        (int(m.group(1)), p)
        for p in (run_dir / "checkpoints").glob("checkpoint*.pt")
        if (m := _EPOCH_CHECKPOINT.search(p.name))
    )
    if not found:
        raise ReproError(
            f"{run_dir / 'checkpoints'} has no checkpoint<N>.pt: train the run with "
            "`--override checkpoint.no_epoch_checkpoints=false` to keep one per epoch"
        )
    return [p for _, p in found]


PLOTTED = (
    ("support_one_fraction", "rows with support 1"),
    ("pass_ratio", "pass ratio Σ‖∂L/∂s‖ / Σ‖∂L/∂p‖"),
    ("mean_margin_over_gamma", "top-score margin / γ"),
    ("valid_nll", "validation NLL per token"),
)


def plot_report(report: dict, path: Path) -> Path:
    """One panel per statistic against the epoch, one line per run.

    Parameters
    ----------
    report : dict
        what `main` writes (``runs``: each with its ``epochs``).
    path : Path
        the PNG to write (a PDF is written beside it).

    Returns
    -------
    Path
        The PNG.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(PLOTTED), figsize=(4 * len(PLOTTED), 3.4))
    for run in report["runs"]:
        epochs = run["epochs"]
        mapping = epochs[0]["mapping"]
        gamma = mapping["params"].get("gamma")
        label = mapping["name"] + (f" γ={gamma:g}" if gamma is not None else "")
        for axis, (key, _) in zip(axes, PLOTTED, strict=True):
            axis.plot(
                [e["epoch"] for e in epochs], [e[key] for e in epochs], marker=".", label=label
            )
    for axis, (key, title) in zip(axes, PLOTTED, strict=True):
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("epoch")
        if key == "pass_ratio":
            axis.set_yscale("symlog", linthresh=1e-3)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    figure.savefig(path.with_suffix(".pdf"))
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--subset", default="valid")
    parser.add_argument("--max-sentences", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument(
        "--every", type=int, default=1, help="measure every k-th epoch (and the last)"
    )
    args = parser.parse_args(argv)
    if args.out.exists():
        raise ReproError(f"{args.out} exists: results are never overwritten; choose another name")
    torch.manual_seed(0)
    runs = []
    for run_dir in args.run_dirs:
        checkpoints = epoch_checkpoints(run_dir)
        chosen = checkpoints[:: args.every]
        if chosen[-1] != checkpoints[-1]:
            chosen.append(checkpoints[-1])
        epochs = []
        for path in chosen:
            stats = measure_checkpoint(path, args.subset, args.max_sentences, args.batch_size)
            print(
                f"[gradients] {run_dir.name} epoch {stats['epoch']}: "
                + ", ".join(f"{k} {v:.4g}" for k, v in stats.items() if isinstance(v, float)),
                flush=True,
            )
            epochs.append(stats)
        runs.append({"run_dir": str(run_dir), "epochs": epochs})
    write_json(
        args.out,
        {
            "what": "attention gradient statistics per epoch (regattn_fairseq/experiments/"
            "attention_gradients.py)",
            "subset": args.subset,
            "max_sentences": args.max_sentences,
            "provenance": provenance(),
            "runs": runs,
        },
    )
    print(f"[gradients] -> {args.out}", flush=True)
    figure = plot_report(json.loads(args.out.read_text()), args.out.with_suffix(".png"))
    print(f"[gradients] figure {figure}", flush=True)


if __name__ == "__main__":
    main()
