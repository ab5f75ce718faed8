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
benchmarks (`regattn_bench.run_record`, which needs no fairseq). `python -m regattn_bench hf` and
`make bench-hf` run `main`.

    python -m regattn_bench hf                          # every attention, the random BERT
    python -m regattn_bench hf --model minilm --bf16    # the pinned all-MiniLM-L6-v2, bf16 autocast
    python -m regattn_bench hf --quick                  # 1 step, 1 repeat (smoke test)
    python -m regattn_bench hf --only regattn_sparsemax # eager, sdpa and sparsemax alone

`--model minilm` times the pretrained encoder of the pretrained-encoder table
(`regattn.integrations.pretrained_models`: all-MiniLM-L6-v2, 6 layers, hidden 384, 12 heads)
on batches shaped like that table's SNLI batches (32 pairs of 30-50 tokens), written to
results/bench/hf_minilm_<device>[_bf16].{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import transformers
from transformers import BertConfig, BertForSequenceClassification

from regattn.integrations import transformers as rt
from regattn_bench.bench_configs import bench_config
from regattn_bench.run_record import (
    add_round_robin_arguments,
    append_run,
    commit_label,
    environment,
    settle_round_robin_arguments,
)

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
# the pinned pretrained encoder, on SNLI-shaped batches (pairs of 30-50 WordPiece tokens)
MINILM_VOCAB, MINILM_BATCH, MINILM_LENGTHS = 30522, 32, (30, 50)
BASELINES = ("eager", "sdpa")
# label -> (attn_implementation, configure's parameters or None for the backend's defaults)
# (configs/bench/hf_speed.yaml)
ATTENTIONS = {
    label: (spec["implementation"], spec.get("params"))
    for label, spec in bench_config("hf_speed")["attentions"].items()
}


def batch_shape(model: str) -> tuple[int, int, int, int]:
    """(vocabulary, sequences, min length, max length) of the model's batches."""
    if model == "minilm":
        return MINILM_VOCAB, MINILM_BATCH, *MINILM_LENGTHS
    return MODEL["vocab_size"], BATCH, MIN_LENGTH, MAX_LENGTH


def synthetic_batch(seed: int, model: str = "random-bert") -> dict:
    """Random tokens, lengths in [min, max], right-padded to max, 3-way labels."""
    vocab, size, shortest, longest = batch_shape(model)
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(shortest, longest + 1, (size,), generator=generator)
    ids = torch.randint(1000, vocab, (size, longest), generator=generator)
    mask = torch.arange(longest)[None, :] < lengths[:, None]
    labels = torch.randint(0, MODEL["num_labels"], (size,), generator=generator)
    return {"input_ids": ids.masked_fill(~mask, 0), "attention_mask": mask.long(), "labels": labels}


def build(model_name: str, attn: str, seed: int):
    """A freshly seeded classifier on `attn`: the random BERT, or the pinned MiniLM with a new
    3-way head."""
    torch.manual_seed(seed)
    if model_name == "minilm":
        from transformers import AutoModelForSequenceClassification

        from regattn.integrations.pretrained_models import model_dir

        return AutoModelForSequenceClassification.from_pretrained(
            model_dir(), num_labels=MODEL["num_labels"], attn_implementation=attn
        )
    model = BertForSequenceClassification(BertConfig(**MODEL, pad_token_id=0))
    model.set_attn_implementation(attn)
    return model


def make_step(attn: str, params, batch: dict, seed: int, model_name="random-bert", bf16=False):
    """A closure running one training step of a freshly seeded model on `attn` (bfloat16
    autocast with `bf16`)."""
    model = build(model_name, attn, seed)
    if params is not None:
        rt.configure(model, **params)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()

    return step


def chosen_attentions(only: list[str] | None) -> dict:
    """The attentions to time: every one of ATTENTIONS, or the baselines (which every ratio
    divides by) and those whose attn_implementation is in `only`."""
    if not only:
        return dict(ATTENTIONS)
    return {
        label: (attn, params)
        for label, (attn, params) in ATTENTIONS.items()
        if attn in BASELINES or attn in only
    }


def run(
    steps: int, repeats: int, seed: int, model="random-bert", bf16=False, attentions=None
) -> list[dict]:
    """Times each attention of `attentions` (default: all of ATTENTIONS) round-robin; one
    result per attention with its ratios."""
    attentions = ATTENTIONS if attentions is None else attentions
    batch = synthetic_batch(seed, model)
    steps_of = {}
    for label, (attn, params) in attentions.items():
        steps_of[label] = make_step(attn, params, batch, seed, model, bf16)
        steps_of[label]()  # warm-up (allocations, first-call dispatch)
    times = {label: [] for label in attentions}
    for _ in range(repeats):
        for label, step in steps_of.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            times[label].append((time.perf_counter() - start) / steps)
    medians = {label: statistics.median(t) for label, t in times.items()}
    baseline = {
        name: next(medians[label] for label, (attn, _) in attentions.items() if attn == name)
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
        for label, (attn, params) in attentions.items()
    ]


def _model_words(record: dict) -> str:
    model = record["model"]
    if model.get("pretrained"):
        return (
            f"The pretrained {model['pretrained']['name']} ({model['pretrained']['distribution']}) "
            "with a new 3-way head"
        )
    return f"A random BERT-like classifier ({', '.join(f'{k}={v}' for k, v in model.items())})"


# below this 1-minute load average before the run, nothing else was running: the machine was
# quiet (the load after the run is the benchmark's own threads)
QUIET_LOAD = 0.5


def _machine_words(env: dict) -> str:
    """Whether the machine was quiet, from the 1-minute load average before the run."""
    if env["loadavg_1_5_15_before_after"][0][0] < QUIET_LOAD:
        return f"The machine was quiet (1-minute load under {QUIET_LOAD} before the run)"
    return "The machine was shared with other jobs"


def markdown(record: dict) -> str:
    env, args = record["env"], record["args"]
    load_before, load_after = (
        ", ".join(f"{load:.1f}" for load in loads) for loads in env["loadavg_1_5_15_before_after"]
    )
    lines = [
        f"# Hugging Face training step time per attention ({record['date']}, {env['device']})",
        "",
        f"{_model_words(record)}, batches of {record['batch']['sequences']} sequences of "
        f"{record['batch']['min_length']}-{record['batch']['max_length']} tokens (right-padded "
        f"to {record['batch']['max_length']}); a step is forward, cross-entropy, backward and "
        f"AdamW, in {record['args'].get('precision', 'float32')}. Median of "
        f"{args['repeats']} round-robin blocks of {args['steps']} steps; ratio = step time / "
        "transformers' eager (or sdpa) softmax step time in the same run (above 1: slower). "
        f"commit `{commit_label(env)}`, torch {env['torch']}, transformers "
        f"{record['transformers']}, {env['cpu_model']}, {env['threads']} threads. "
        f"{_machine_words(env)}: load average (1, 5, 15 min) {load_before} before and "
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


def main(argv: list[str] | None = None) -> None:
    """The command line (see the module docstring); `argv` defaults to sys.argv's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_robin_arguments(parser, steps=3, repeats=7)
    parser.add_argument(
        "--model",
        choices=("random-bert", "minilm"),
        default="random-bert",
        help="the random BERT (default) or the pinned pretrained all-MiniLM-L6-v2",
    )
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast on the CPU")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="IMPLEMENTATION",
        choices=sorted({attn for attn, _ in ATTENTIONS.values()} - set(BASELINES)),
        help="time only these attn_implementations (e.g. regattn_sparsemax), beside the eager "
        "and sdpa baselines that every ratio divides by; default: all of them",
    )
    args = parser.parse_args(argv)
    settle_round_robin_arguments(args)
    rt.register()
    env = environment()
    attentions = chosen_attentions(args.only)
    results = run(args.steps, args.repeats, args.seed, args.model, args.bf16, attentions)
    _, sequences, shortest, longest = batch_shape(args.model)
    model = MODEL
    if args.model == "minilm":
        from regattn.integrations.pretrained_models import MINILM_L6_V2

        model = {"pretrained": MINILM_L6_V2.record()}
    record = {
        "args": {
            "steps": args.steps,
            "repeats": args.repeats,
            "quick": args.quick,
            "seed": args.seed,
            "only": args.only,
            "precision": "bf16 autocast" if args.bf16 else "float32",
        },
        "env": environment(before=env),
        "transformers": transformers.__version__,
        "model": model,
        "batch": {"sequences": sequences, "min_length": shortest, "max_length": longest},
        "results": results,
    }
    stem = "hf_minilm" if args.model == "minilm" else "hf"
    stem = f"{stem}_{record['env']['device_kind']}" + ("_bf16" if args.bf16 else "")
    md_path = append_run(args.out_dir, stem, record, markdown)
    print(md_path.read_text())
