"""Length-grouped batches against plain random batches in the pretrained-encoder table's
fine-tuning (`train.hf_finetune.length_grouped_batches`): the padding each leaves, and the
training time it costs.

Measured on the SNLI training pairs the table trains on (its experiment's data at ``small``,
prepared as the table prepares it), tokenized by the pinned all-MiniLM-L6-v2's tokenizer, at the
table's fine-tuning settings for softmax (configs/reproduce/table1_pretrained.yaml):

- **padding**, exact, no timing: over every batch of one epoch's plan (seed 1, epoch 1), the
  tokens the batches are padded to over the pairs' real tokens, per pool size (``--pools``;
  1 is plain random batches, 16 the table's);
- **time**: training steps of the pinned MiniLM with a new 3-way head (regattn softmax, the
  table's AdamW, float32), one model per pool size from the same seed.
  Each timed block runs the next ``--steps`` batches of each pool size's plan, round-robin
  over the pool sizes, ``--repeats`` blocks, so that a shared machine slows all alike. A pool
  size's speed is its real tokens trained per second over all its blocks; its ratio to plain
  random batches (pool 1) in the same run is how much faster an epoch trains, since an epoch
  holds the same real tokens whatever its batches. Step times per block are kept in the record.

Every run is appended to results/bench/finetune_batching_<device>.json and
results/bench/finetune_batching_<device>.md is regenerated from the latest full run.

    python -m regattn_bench finetune-batching                 # pools 1 and 16, 5 blocks of 8
    python -m regattn_bench finetune-batching --pools 1 4 16 --threads 1
    python -m regattn_bench finetune-batching --quick         # smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import transformers

from regattn.integrations import pretrained_models
from regattn_bench.run_record import (
    add_round_robin_arguments,
    append_run,
    commit_label,
    environment,
    settle_round_robin_arguments,
)
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.data.prepare import prepare
from regattn_fairseq.experiments.pipelines.pretrained import pinned_model, settings_for
from regattn_fairseq.experiments.train.hf_finetune import (
    FineTuneSettings,
    NliPairs,
    build_model,
    encode,
    epoch_rng,
    length_grouped_batches,
    pair_lengths,
    read_pairs,
    training_state,
)

TABLE, SCALE, MAPPING = "table1_pretrained", "small", "softmax"
DEFAULT_POOLS = (1, 16)


def epoch_plan(lengths: list[int], size: int, pool: int, seed: int = 1, epoch: int = 1):
    """The batches of one epoch, drawn as the table's fine-tuning draws them."""
    return length_grouped_batches(lengths, size, pool, epoch_rng(seed, epoch))


def padding_ratio(lengths: list[int], plan: list[list[int]]) -> float:
    """Tokens the batches of `plan` are padded to, over the pairs' real tokens."""
    padded = sum(len(batch) * max(lengths[i] for i in batch) for batch in plan)
    return padded / sum(lengths[i] for batch in plan for i in batch)


def time_pools(
    model_path: Path,
    pairs: NliPairs,
    lengths: list[int],
    settings: FineTuneSettings,
    pools: list[int],
    steps: int,
    repeats: int,
) -> list[dict]:
    """Round-robin timed training blocks per pool size (module docstring)."""
    runs = {}
    for pool in pools:
        model, tokenizer = build_model(model_path, settings)
        optimizer = training_state(model, settings)["optimizer"]
        model.train()
        plan = epoch_plan(lengths, settings.batch_size, pool, settings.seed)
        runs[pool] = {"model": model, "optimizer": optimizer, "plan": plan, "next": 0}

    def train_on(run: dict, count: int) -> int:
        tokens = 0
        for _ in range(count):
            indices = run["plan"][run["next"] % len(run["plan"])]
            run["next"] += 1
            batch = encode(pairs, tokenizer, indices, settings.max_length)
            run["optimizer"].zero_grad(set_to_none=True)
            run["model"](**batch).loss.backward()
            run["optimizer"].step()
            tokens += int(batch["attention_mask"].sum())
        return tokens

    for run in runs.values():
        train_on(run, 1)  # warm-up (allocations, first-call dispatch)
    blocks = {pool: [] for pool in pools}
    for _ in range(repeats):
        for pool, run in runs.items():
            start = time.perf_counter()
            tokens = train_on(run, steps)
            blocks[pool].append({"seconds": time.perf_counter() - start, "real_tokens": tokens})
    return [
        {
            "pool": pool,
            "real_tokens_per_s": sum(b["real_tokens"] for b in blocks[pool])
            / sum(b["seconds"] for b in blocks[pool]),
            "median_step_s": statistics.median(b["seconds"] / steps for b in blocks[pool]),
            "blocks": blocks[pool],
        }
        for pool in pools
    ]


def markdown(record: dict) -> str:
    env, args = record["env"], record["args"]
    base = next(r for r in record["results"] if r["pool"] == 1)
    lines = [
        f"# Fine-tuning with length-grouped batches ({record['date']}, {env['device']})",
        "",
        f"The pretrained-encoder table's fine-tuning of the pinned all-MiniLM-L6-v2 "
        f"({record['model']['distribution']}), regattn softmax, batches of "
        f"{args['batch_size']} of the {record['pairs']:,} SNLI training pairs, float32. "
        f"Padding: tokens the batches of one epoch (seed {args['seed']}) are padded to over "
        f"their real tokens, exact. Speed: {args['repeats']} round-robin blocks of "
        f"{args['steps']} "
        "training steps per pool size, each on the next batches of its epoch; real tokens per "
        "second over all blocks, and its ratio to plain random batches (pool 1) in the same run: "
        "how much faster an epoch trains. "
        f"commit `{commit_label(env)}`, torch {env['torch']}, transformers "
        f"{record['transformers']}, {env['cpu_model']}, {env['threads']} threads; load average "
        f"(1 min) {env['loadavg_1_5_15_before_after'][0][0]:.1f} before and "
        f"{env['loadavg_1_5_15_before_after'][1][0]:.1f} after the run ({env['cpus']} CPUs).",
        "",
        "| batches | padded / real tokens | median s / step | real tokens / s | epoch speed vs "
        "random |",
        "|---|---|---|---|---|",
    ]
    for r in record["results"]:
        label = "plain random (pool 1)" if r["pool"] == 1 else f"pools of {r['pool']} batches"
        lines.append(
            f"| {label} | {record['padding'][str(r['pool'])]:.2f} | {r['median_step_s']:.2f} | "
            f"{r['real_tokens_per_s']:.0f} | "
            f"{r['real_tokens_per_s'] / base['real_tokens_per_s']:.2f}x |"
        )
    lines += ["", f"All runs: `results/bench/{record['file_stem']}.json`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, nargs="+", default=list(DEFAULT_POOLS))
    # seed 1: the table's first seed (its new head, its epochs' batches)
    add_round_robin_arguments(parser, steps=8, repeats=5, seed=1)
    parser.add_argument("--work-dir", type=Path, help="where the prepared data is (WORK_DIR)")
    args = parser.parse_args(argv)
    if 1 not in args.pools or min(args.pools) < 1:
        parser.error(f"--pools must hold 1 (plain random batches, the reference), got {args.pools}")
    settle_round_robin_arguments(args)
    [experiment] = load_config("reproduce", TABLE).experiments
    where = {"work_dir": args.work_dir} if args.work_dir else {}
    data = prepare(experiment.dataset, SCALE, overrides=experiment.get("dataset_options"), **where)
    pairs = read_pairs(data, "train")
    settings = settings_for(experiment, SCALE, MAPPING, seed=args.seed)
    model_path = pretrained_models.model_dir(pinned_model(experiment))
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_path)
    lengths = pair_lengths(pairs, tokenizer, settings.max_length)
    padding = {
        str(pool): padding_ratio(
            lengths, epoch_plan(lengths, settings.batch_size, pool, settings.seed)
        )
        for pool in args.pools
    }
    env = environment()
    results = time_pools(model_path, pairs, lengths, settings, args.pools, args.steps, args.repeats)
    record = {
        "args": {
            "pools": args.pools,
            "steps": args.steps,
            "repeats": args.repeats,
            "quick": args.quick,
            "seed": args.seed,
            "batch_size": settings.batch_size,
        },
        "settings": settings.config(),
        "env": environment(before=env),
        "transformers": transformers.__version__,
        "model": settings.model,
        "pairs": len(pairs),
        "padding": padding,
        "results": results,
    }
    stem = f"finetune_batching_{record['env']['device_kind']}"
    print(append_run(args.out_dir, stem, record, markdown).read_text())
