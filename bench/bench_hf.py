#!/usr/bin/env python
"""Training step time of a whole Hugging Face model with each regattn attention backend, as a
ratio to `transformers`' own eager and sdpa softmax attention.

Issue #27's benchmark: a small random BERT-like sequence classifier (hidden 128, 2 layers, 4
heads, feed-forward 512, 8000 words), batches of 16 sequences of up to 128 tokens (lengths drawn
in [90, 128], right-padded), one training step = forward, cross-entropy, backward, AdamW step;
the same weights and batch for every attention. Steps are timed round-robin over the attentions,
`--repeats` blocks of `--steps` steps, so that a shared machine slows all alike; the reported
time is the median over the blocks, and each ratio is that median over eager's (or sdpa's)
median in the same run (above 1: slower than transformers' softmax).

Every run is appended to results/bench/hf_<device>.json with its environment (commit, torch,
transformers, CPU, threads, load average before and after) and results/bench/hf_<device>.md is
regenerated from the latest full run. Record keeping is run_record's, shared with the other
benchmarks (`regattn_bench.run_record`, which needs no fairseq).

    python bench/bench_hf.py            # every attention
    python bench/bench_hf.py --quick    # 1 step, 1 repeat (smoke test)
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import transformers
from transformers import BertConfig, BertForSequenceClassification

from regattn.integrations import transformers as rt
from regattn_bench.paths import BENCH_RESULTS_DIR
from regattn_bench.run_record import append_run, commit_label, environment

MODEL = {
    "vocab_size": 8000,
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "max_position_embeddings": 128,
    "num_labels": 3,
}
BATCH, MAX_LENGTH, MIN_LENGTH = 16, 128, 90
BASELINES = ("eager", "sdpa")
# label -> (attn_implementation, configure's parameters or None for the backend's defaults)
ATTENTIONS = {
    "eager (transformers softmax)": ("eager", None),
    "sdpa (transformers softmax)": ("sdpa", None),
    "regattn softmax": ("regattn_softmax", None),
    "sparsemax": ("regattn_sparsemax", None),
    "fusedmax (λ=0.1)": ("regattn_fusedmax", {"lam": 0.1}),
    "oscarmax (λ=0.01)": ("regattn_oscarmax", {"lam": 0.01}),
    "sq-pnorm-max (p=1.5)": ("regattn_sq_pnorm_max", {"p": 1.5}),
    "1.5-entmax": ("regattn_entmax15", None),
    "α-entmax (learned α)": ("regattn_entmax", {"alpha": "learned"}),
}


def synthetic_batch(seed: int) -> dict:
    """Random tokens, lengths in [MIN_LENGTH, MAX_LENGTH], right-padded, 3-way labels."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(MIN_LENGTH, MAX_LENGTH + 1, (BATCH,), generator=generator)
    ids = torch.randint(1, MODEL["vocab_size"], (BATCH, MAX_LENGTH), generator=generator)
    mask = torch.arange(MAX_LENGTH)[None, :] < lengths[:, None]
    labels = torch.randint(0, MODEL["num_labels"], (BATCH,), generator=generator)
    return {"input_ids": ids.masked_fill(~mask, 0), "attention_mask": mask.long(), "labels": labels}


def make_step(attn: str, params: dict | None, batch: dict, seed: int):
    """A closure running one training step of a freshly seeded model on `attn`."""
    torch.manual_seed(seed)
    model = BertForSequenceClassification(BertConfig(**MODEL, pad_token_id=0))
    model.set_attn_implementation(attn)
    if params is not None:
        rt.configure(model, **params)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        optimizer.step()

    return step


def run(steps: int, repeats: int, seed: int) -> list[dict]:
    """Times every attention round-robin; one result per attention with its ratios."""
    batch = synthetic_batch(seed)
    steps_of = {}
    for label, (attn, params) in ATTENTIONS.items():
        steps_of[label] = make_step(attn, params, batch, seed)
        steps_of[label]()  # warm-up (allocations, first-call dispatch)
    times = {label: [] for label in ATTENTIONS}
    for _ in range(repeats):
        for label, step in steps_of.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            times[label].append((time.perf_counter() - start) / steps)
    medians = {label: statistics.median(t) for label, t in times.items()}
    baseline = {
        name: next(medians[label] for label, (attn, _) in ATTENTIONS.items() if attn == name)
        for name in BASELINES
    }
    return [
        {
            "attention": label,
            "attn_implementation": attn,
            "params": params,
            "median_step_ms": 1e3 * medians[label],
            "ratio_to_eager": medians[label] / baseline["eager"],
            "ratio_to_sdpa": medians[label] / baseline["sdpa"],
            "block_step_ms": [1e3 * t for t in times[label]],
        }
        for label, (attn, params) in ATTENTIONS.items()
    ]


def markdown(record: dict) -> str:
    env, args = record["env"], record["args"]
    load_before, load_after = (
        ", ".join(f"{load:.1f}" for load in loads) for loads in env["loadavg_1_5_15_before_after"]
    )
    lines = [
        f"# Hugging Face training step time per attention ({record['date']}, {env['device']})",
        "",
        f"A random BERT-like classifier ({', '.join(f'{k}={v}' for k, v in MODEL.items())}), "
        f"batches of {BATCH} sequences of {MIN_LENGTH}-{MAX_LENGTH} tokens (right-padded to "
        f"{MAX_LENGTH}); a step is forward, cross-entropy, backward and AdamW. Median of "
        f"{args['repeats']} round-robin blocks of {args['steps']} steps; ratio = step time / "
        "transformers' eager (or sdpa) softmax step time in the same run (above 1: slower). "
        f"commit `{commit_label(env)}`, torch {env['torch']}, transformers "
        f"{record['transformers']}, {env['cpu_model']}, {env['threads']} threads. The machine "
        f"was shared with other jobs: load average (1, 5, 15 min) {load_before} before and "
        f"{load_after} after the run ({env['cpus']} CPUs).",
        "",
        "| attention | ms / step | vs eager | vs sdpa |",
        "|---|---|---|---|",
    ]
    for r in record["results"]:
        lines.append(
            f"| {r['attention']} | {r['median_step_ms']:.1f} | {r['ratio_to_eager']:.2f} | "
            f"{r['ratio_to_sdpa']:.2f} |"
        )
    lines += ["", f"All runs: `results/bench/{record['file_stem']}.json`."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="training steps per timed block")
    parser.add_argument("--repeats", type=int, default=7, help="round-robin passes")
    parser.add_argument("--quick", action="store_true", help="1 step, 1 repeat (smoke test)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=BENCH_RESULTS_DIR)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 1, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    rt.register()
    env = environment()
    results = run(args.steps, args.repeats, args.seed)
    record = {
        "args": {
            "steps": args.steps,
            "repeats": args.repeats,
            "quick": args.quick,
            "seed": args.seed,
        },
        "env": environment(before=env),
        "transformers": transformers.__version__,
        "model": MODEL,
        "batch": {"sequences": BATCH, "min_length": MIN_LENGTH, "max_length": MAX_LENGTH},
        "results": results,
    }
    md_path = append_run(args.out_dir, f"hf_{record['env']['device_kind']}", record, markdown)
    print(md_path.read_text())


if __name__ == "__main__":
    main()
