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

- the largest attention weight max_j p_j (how peaked the row is, for softmax too).

Reported per checkpoint: the means over rows, the fraction of rows whose score gradient is
exactly zero, the *pass ratio* Σ‖∂L/∂s‖ / Σ‖∂L/∂p‖ (how much of the asked-for change gets
through the mapping), and the validation NLL per target token. That the measured rows are the
mapping's own is tests/experiments/studies/test_attention_gradients.py's to check: softmax,
sparsemax and entmax against independent implementations (torch.softmax, the `entmax`
package), on every row of trained checkpoints, p and ∂L/∂s given the model's own ∂L/∂p;
torch.autograd.gradcheck of the model's normalizer on real rows; and that epoch 0 is the model
its training started from.

  python -m regattn_fairseq.experiments.studies.attention_gradients RUN_DIR [RUN_DIR ...] \\
      --out results/attention_gradients/NAME.json [--max-sentences 400] [--init] \\
      [--bleu test2016]

writes NAME.json and a figure NAME.png/.pdf of the statistics against the epoch. `--init`
adds epoch 0: a fresh model built from the run's config and seed as fairseq-train builds it.
`--bleu EVAL` also decodes the evaluation set with each measured checkpoint (beam 5, the
reproduction suite's decoding and sacrebleu scoring) and records its BLEU.
`--checkpoint checkpoint_best.pt` measures that one checkpoint of each run (a table's runs keep
no per-epoch checkpoints).

RUN_DIR is a run folder of scripts/reproduce.py (its checkpoints/ hold checkpoint<N>.pt).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from regattn_checkout.errors import ReproError
from regattn_checkout.files import replacing, write_json
from regattn_fairseq.experiments.core.labels import mapping_label
from regattn_fairseq.experiments.core.provenance import provenance
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.data.test_sets import prepared_gold
from regattn_fairseq.experiments.decode.decode import decode
from regattn_fairseq.experiments.score.metrics import METRICS
from regattn_fairseq.experiments.train.train import TrainedModel

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
        ∂L/∂s = 0 exactly), ``margin`` (Σ of the top-two score gap over γ) and ``top_prob``
        (Σ of the largest attention weight).
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
        "top_prob": float(torch.where(mask, probs, 0.0).max(dim=-1).values.sum()),
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
        ``zero_grad_scores_fraction``, ``mean_margin_over_gamma``, ``mean_top_prob`` and
        ``rows``.
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
        "mean_top_prob": totals["top_prob"] / rows,
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


@dataclass
class AttentionRows:
    """One call of a model's attention normalizer in a teacher-forced batch, as rows.

    `scores`, `probs`, `grad_scores`, `grad_probs` and `mask` are as in `row_statistics`;
    `module` is the normalizer and `gamma` its temperature.
    """

    module: torch.nn.Module
    gamma: float
    scores: torch.Tensor
    probs: torch.Tensor
    grad_scores: torch.Tensor
    grad_probs: torch.Tensor
    mask: torch.Tensor | None

    def as_tuple(self) -> tuple:
        """(scores, probs, grad_scores, grad_probs, mask), `row_statistics`' arguments."""
        return self.scores, self.probs, self.grad_scores, self.grad_probs, self.mask


def without_grad_surrogate(model) -> str | None:
    """Gives a model trained with a surrogate gradient (--attention-grad-surrogate) its
    mapping's own Jacobian back, so that what would reach its scores without the surrogate is
    measured.

    Returns
    -------
    str or None
        The surrogate it was trained with (None: none).
    """
    surrogate = None
    for module in model.modules():
        if getattr(module, "grad_surrogate", None) is not None:
            surrogate, module.grad_surrogate = module.grad_surrogate, None
    return surrogate


def teacher_forced_batches(
    model, task, subset: str, max_sentences: int, batch_size: int
) -> Iterator[tuple[float, int, list[AttentionRows]]]:
    """Teacher-forced forward and backward of a seq2seq model over `subset`, batch by batch.

    Parameters
    ----------
    model : fairseq model
        a regattn seq2seq model (put in eval mode here: no dropout; gradients still flow).
    task : fairseq task
        its task.
    subset : str
        the fairseq subset to read (``valid``).
    max_sentences : int
        how many sentences of the subset, in its order.
    batch_size : int
        sentences per batch.

    Yields
    ------
    tuple
        (summed negative log-likelihood of the batch's target tokens in nats, their number,
        the `AttentionRows` of every normalizer call of the batch). The normalizers' hooks are
        removed once the batches are exhausted.
    """
    model = model.eval()
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    indices = list(range(min(max_sentences, len(dataset))))
    pad = task.target_dictionary.pad()
    tap = _AttentionTap(model)
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
            calls = []
            for call in tap.calls:
                length = call["scores"].size(-1)
                mask = call["mask"]
                calls.append(
                    AttentionRows(
                        module=call["module"],
                        gamma=call["module"].spec.params.get("gamma") or 1.0,
                        scores=call["scores"].detach().reshape(-1, length),
                        probs=call["probs"].detach().reshape(-1, length),
                        grad_scores=call["grad_scores"].reshape(-1, length),
                        grad_probs=call["grad_probs"].reshape(-1, length),
                        mask=None
                        if mask is None
                        else mask.expand_as(call["scores"]).reshape(-1, length),
                    )
                )
            yield float(nll.detach()), int(target.ne(pad).sum()), calls
    finally:
        tap.remove()


def measure_model(model, task, subset: str, max_sentences: int, batch_size: int) -> dict:
    """The gradient statistics of a seq2seq model over `subset` (`teacher_forced_batches`,
    whose parameters these are), through its mapping's own Jacobian.

    Returns
    -------
    dict
        `summarize` of the subset, plus ``mapping``, ``trained_grad_surrogate``
        (`without_grad_surrogate`) and ``sentences``.
    """
    surrogate = without_grad_surrogate(model)
    totals: dict = {}
    nll_sum, tokens = 0.0, 0
    for batch_nll, batch_tokens, calls in teacher_forced_batches(
        model, task, subset, max_sentences, batch_size
    ):
        nll_sum += batch_nll
        tokens += batch_tokens
        for rows in calls:
            for key, value in row_statistics(*rows.as_tuple(), rows.gamma).items():
                totals[key] = totals.get(key, 0) + value
    return {
        "mapping": model.attention_spec.describe(),
        "trained_grad_surrogate": surrogate,
        "sentences": min(max_sentences, len(task.dataset(subset))),
        **summarize(totals, nll_sum, tokens),
    }


def load_checkpoint(path: Path):
    """(model, task) of a seq2seq checkpoint, as fairseq loads it for evaluation."""
    from fairseq import checkpoint_utils

    import regattn_fairseq  # noqa: F401  (registers the models and task)

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    return models[0], task


def measure_checkpoint(path: Path, subset: str, max_sentences: int, batch_size: int) -> dict:
    """`measure_model` of a seq2seq checkpoint, plus its ``epoch``."""
    from fairseq import checkpoint_utils

    model, task = load_checkpoint(path)
    epoch = _EPOCH_CHECKPOINT.search(path.name)
    if epoch is None:  # checkpoint_best.pt, checkpoint_last.pt: the epoch it was saved after
        iterator = checkpoint_utils.load_checkpoint_to_cpu(str(path))["extra_state"][
            "train_iterator"
        ]
        # saved at an epoch's end, the iterator already points at the next epoch's start
        epoch = iterator["epoch"] - (iterator["iterations_in_epoch"] == 0)
    else:
        epoch = int(epoch.group(1))
    return {
        "epoch": epoch,
        **measure_model(model, task, subset, max_sentences, batch_size),
    }


def initial_model(path: Path):
    """The model a run started from: built from `path`'s config and seed in fairseq-train's
    order (seed, task, model).

    Returns
    -------
    tuple
        (model, task).
    """
    import numpy as np
    from fairseq import checkpoint_utils, tasks, utils

    import regattn_fairseq  # noqa: F401  (registers the models and task)

    cfg = checkpoint_utils.load_checkpoint_to_cpu(str(path))["cfg"]
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    return task.build_model(cfg.model), task


def measure_initial(path: Path, subset: str, max_sentences: int, batch_size: int) -> dict:
    """`measure_model` of the model the run of checkpoint `path` started from (epoch 0)."""
    model, task = initial_model(path)
    return {"epoch": 0, **measure_model(model, task, subset, max_sentences, batch_size)}


def checkpoint_bleu(path: Path, evaluation: str, out_dir: Path, beam: int = 5) -> dict:
    """BLEU of a translation checkpoint on an evaluation set of its prepared data.

    Decodes and scores as the reproduction suite does (`decode.decode`: fairseq-generate;
    the registry's BLEU, `metrics.METRICS`: BPE removed, detokenised, sacrebleu). The prepared
    data is found from the checkpoint's ``task.data`` (its parent folder's stamp.json).

    Returns
    -------
    dict
        ``{"bleu", "signature", "beam", "decode_wall_s"}``.
    """
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf

    cfg = checkpoint_utils.load_checkpoint_to_cpu(str(path))["cfg"]
    root = Path(cfg.task.data).parent
    stamp = root / "stamp.json"
    if not stamp.is_file():
        raise ReproError(f"{stamp} is missing: --bleu needs the run's prepared data")
    prepared = PreparedData(root, json.loads(stamp.read_text())["manifest"])
    spec = prepared.evaluation(evaluation)
    model = TrainedModel(path, {}, None, None, None, path.parent / "none")
    out_dir.mkdir(parents=True, exist_ok=True)
    decode_cfg = OmegaConf.create({"beam": beam, "batch_size": 64})
    bleu = METRICS["bleu"]
    hypotheses, elapsed = decode(
        model, prepared, spec["subset"], out_dir, decode_cfg, remove_bpe=bleu.remove_bpe
    )
    gold = prepared_gold(spec)
    scored = bleu.score(bleu.from_decoder(hypotheses, gold), gold)
    return {
        "bleu": scored.metrics["bleu"],
        "signature": scored.signature,
        "beam": beam,
        "decode_wall_s": round(elapsed, 1),
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


def run_record(checkpoint: Path) -> dict:
    """What trained a run, from its checkpoint's config and the run folder's started.json.

    Returns
    -------
    dict
        ``seed``, ``data`` (task.data), ``model`` (the model config), ``optimization``
        (max_epoch, lr, clip_norm, batch_size), ``optimizer`` and ``started`` (the
        provenance of the code that started training, where recorded).
    """
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf

    cfg = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))["cfg"]
    started = checkpoint.parent.parent / "started.json"
    return {
        "seed": cfg.common.seed,
        "data": cfg.task.data,
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "optimization": {
            "max_epoch": cfg.optimization.max_epoch,
            "lr": list(cfg.optimization.lr),
            "clip_norm": cfg.optimization.clip_norm,
            "batch_size": cfg.dataset.batch_size,
        },
        "optimizer": OmegaConf.to_container(cfg.optimizer, resolve=True),
        "started": json.loads(started.read_text()) if started.is_file() else None,
    }


PLOTTED = (
    ("mean_support", "mean support size"),
    ("support_one_fraction", "rows with support 1 (= zero ∂L/∂s, sparse maps)"),
    ("pass_ratio", "pass ratio Σ‖∂L/∂s‖ / Σ‖∂L/∂p‖"),
    ("mean_margin_over_gamma", "top-score margin / γ"),
    ("mean_top_prob", "largest attention weight"),
    ("mean_grad_probs", "mean ‖P(∂L/∂p)‖ (asked-for change)"),
    ("valid_nll", "validation NLL per token"),
    ("bleu", "BLEU (beam 5)"),
)


def run_label(epochs: list[dict]) -> str:
    """The run's mapping with γ, α and (when trained with one) the surrogate gradient
    (`labels.mapping_label`)."""
    mapping = epochs[0]["mapping"]
    params = {k: mapping["params"].get(k) for k in ("gamma", "alpha")}
    params["backward"] = epochs[0].get("trained_grad_surrogate")
    return mapping_label(mapping["name"], params)


def plot_report(report: dict, path: Path) -> Path:
    """One panel per statistic against the epoch, one line per run (BLEU: where measured).

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

    columns = 4
    figure, axes = plt.subplots(2, columns, figsize=(4 * columns, 6.8))
    axes = axes.ravel()
    for run in report["runs"]:
        epochs = run["epochs"]
        label = run_label(epochs)
        for axis, (key, _) in zip(axes, PLOTTED, strict=True):
            points = [(e["epoch"], e[key]) for e in epochs if e.get(key) is not None]
            if points:
                axis.plot(*zip(*points, strict=True), marker=".", label=label)
    for axis, (key, title) in zip(axes, PLOTTED, strict=True):
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("epoch")
        if not axis.lines:  # e.g. BLEU without --bleu: say so rather than draw empty axes
            axis.text(0.5, 0.5, "not measured", ha="center", va="center", transform=axis.transAxes)
            axis.set_xticks([])
            axis.set_yticks([])
        if key == "pass_ratio":
            axis.set_yscale("symlog", linthresh=1e-3)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    with replacing(path) as partial:
        figure.savefig(partial, dpi=120)
    with replacing(path.with_suffix(".pdf")) as partial:
        figure.savefig(partial)
    plt.close(figure)
    return path


def _print_epoch(run_dir: Path, stats: dict) -> None:
    print(
        f"[gradients] {run_dir.name} epoch {stats['epoch']}: "
        + ", ".join(f"{k} {v:.4g}" for k, v in stats.items() if isinstance(v, float)),
        flush=True,
    )


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
    parser.add_argument(
        "--checkpoint",
        metavar="NAME",
        help="measure only RUN_DIR/checkpoints/NAME (e.g. checkpoint_best.pt, the one a table "
        "row scores) instead of every epoch's checkpoint: for runs that kept none",
    )
    parser.add_argument(
        "--init",
        action="store_true",
        help="also measure epoch 0: the model the run started from (its config and seed)",
    )
    parser.add_argument(
        "--bleu",
        metavar="EVALUATION",
        help="also decode this evaluation set (e.g. test2016) with every measured checkpoint "
        "(beam 5) and record its BLEU; the outputs go to RUN_DIR/gradients_decode/",
    )
    args = parser.parse_args(argv)
    if args.out.exists():
        raise ReproError(f"{args.out} exists: results are never overwritten; choose another name")
    torch.manual_seed(0)
    runs = []
    for run_dir in args.run_dirs:
        if args.checkpoint:
            checkpoints = [run_dir / "checkpoints" / args.checkpoint]
            if not checkpoints[0].is_file():
                raise ReproError(f"{checkpoints[0]} does not exist")
            chosen = checkpoints
        else:
            checkpoints = epoch_checkpoints(run_dir)
            chosen = checkpoints[:: args.every]
            if chosen[-1] != checkpoints[-1]:
                chosen.append(checkpoints[-1])
        epochs = []
        if args.init:
            epochs.append(
                measure_initial(checkpoints[0], args.subset, args.max_sentences, args.batch_size)
            )
            _print_epoch(run_dir, epochs[-1])
        for path in chosen:
            stats = measure_checkpoint(path, args.subset, args.max_sentences, args.batch_size)
            if args.bleu:
                out_dir = run_dir / "gradients_decode" / f"epoch{stats['epoch']}"
                stats["bleu_eval"] = {"evaluation": args.bleu} | checkpoint_bleu(
                    path, args.bleu, out_dir
                )
                stats["bleu"] = stats["bleu_eval"]["bleu"]
            epochs.append(stats)
            _print_epoch(run_dir, stats)
        runs.append({"run_dir": str(run_dir), **run_record(checkpoints[-1]), "epochs": epochs})
    write_json(
        args.out,
        {
            "what": "attention gradient statistics per epoch (regattn_fairseq/experiments/"
            "studies/attention_gradients.py)",
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
