"""Continuous attention against discrete softmax attention in the LSTM decoder (issue #12's
performance target: at least 0.8x discrete softmax's training throughput at N = 64 basis
functions).

Two measurements, each as a ratio to discrete softmax in the same run:

- **per decoder step**: forward + backward of the LSTM attention layer alone
  (`RegattnLSTMAttentionLayer`: scores, normalization or density, context, output
  projection), for one decoder step of a batch, as fairseq's LSTMDecoder calls it once per
  target position;
- **training tokens/s**: full training steps (forward, cross-entropy, backward, Adam) of
  `regattn_lstm` at the sizes of configs/scale/lstm_seq2seq/<scale>, on Multi30k-shaped
  batches (`model_throughput.run`, the same timing loop as `make bench-model`).

Variants: discrete softmax, continuous softmax (Gaussian), continuous sparsemax (truncated
parabola) and continuous sparsemax + the discrete context, at each `--basis` N. Timed
round-robin over the variants, `--repeats` times; the reported time is the median. Every run
is appended to results/bench/continuous_<device>.json and results/bench/continuous_<device>.md
is regenerated from the latest full run.

    python -m regattn_bench continuous            # N = 64
    python -m regattn_bench continuous --basis 16 64 256
    python -m regattn_bench continuous --quick    # smoke test
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from regattn.continuous import COMPACT_DENSITY, DENSITY_DECLARATIONS
from regattn_bench.mapping_speed import require_device
from regattn_bench.run_record import (
    add_round_robin_arguments,
    append_run,
    commit_label,
    environment,
    settle_round_robin_arguments,
)

from .model_throughput import BASELINE, MAPPINGS, _scale_options, build, write_dictionaries
from .model_throughput import run as run_training

DENSITY_VARIANTS = {  # label -> options, without the basis size
    **{d.label: ["--continuous-density", d.name] for d in DENSITY_DECLARATIONS.values()},
    f"{DENSITY_DECLARATIONS[COMPACT_DENSITY].label} + discrete": [
        "--continuous-density",
        COMPACT_DENSITY,
        "--continuous-combine",
        "sum",
    ],
}
# Multi30k en-de after BPE: ~14 source and ~15 target tokens per sentence
MODELS = {
    "LSTM NMT": {
        "scale": ("lstm_seq2seq", "small"),
        "task": "translation",
        "batch": 64,
        "src": 14,
        "tgt": 15,
    },
}
# the attention layer alone: one decoder step of a batch over sources of this length
LAYER_SHAPE = {"batch": 64, "src": 14}


def variants(basis_sizes: list[int]) -> dict:
    """label -> fairseq options: discrete softmax (make bench-model's baseline), then each
    density at each N."""
    out = {BASELINE: list(MAPPINGS[BASELINE])}
    for n in basis_sizes:
        for label, options in DENSITY_VARIANTS.items():
            out[f"{label} (N={n})"] = [
                "--attention-domain",
                "continuous",
                "--continuous-basis",
                str(n),
                *options,
            ]
    return out


def layer_step_times(
    data_dir: Path, labels: dict, steps: int, repeats: int, seed: int, device
) -> dict:
    """Median seconds of forward + backward of the decoder's attention layer, per variant."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    arch, flags = _scale_options(*MODELS["LSTM NMT"]["scale"])
    gen = torch.Generator().manual_seed(seed)
    calls = {}
    for label, options in labels.items():
        torch.manual_seed(seed)
        _, model = build(data_dir, MODELS["LSTM NMT"]["task"], arch, flags, options)
        layer = model.decoder.attention.to(device)
        hidden, source = layer.input_proj.in_features, layer.input_proj.out_features
        bsz, src = LAYER_SHAPE["batch"], LAYER_SHAPE["src"]
        query = torch.randn(bsz, hidden, generator=gen).to(device).requires_grad_()
        source_hids = torch.randn(src, bsz, source, generator=gen).to(device).requires_grad_()
        lengths = torch.randint(src // 2, src + 1, (bsz,), generator=gen)
        padding = (torch.arange(src).unsqueeze(1) >= lengths).to(device)  # srclen x bsz

        def call(layer=layer, query=query, source_hids=source_hids, padding=padding):
            out, _ = layer(query, source_hids, padding)
            out.sum().backward()

        call()  # warm-up (the continuous layer also builds its smoother table here)
        calls[label] = call
    times = {label: [] for label in labels}
    for _ in range(repeats):
        for label, call in calls.items():
            sync()
            start = time.perf_counter()
            for _ in range(steps):
                call()
            sync()
            times[label].append((time.perf_counter() - start) / steps)
    return {label: statistics.median(t) for label, t in times.items()}


def markdown(record: dict) -> str:
    env = record["env"]
    layer, training = record["results"]["layer"], record["results"]["training"]
    first = training[0]
    lines = [
        f"# Continuous vs discrete softmax attention in the LSTM decoder ({record['date']}, "
        f"{env['device']})",
        "",
        f"Medians of {record['args']['repeats']} round-robin blocks; ratio = discrete softmax's "
        f"time / the variant's time in the same run (1.0 = as fast as discrete softmax; the "
        f"issue's target is >= 0.8 at N = 64). commit `{commit_label(env)}`, torch "
        f"{env['torch']}, {env['cpu_model']}, {env['threads']} threads (load average "
        f"{env['loadavg_1_5_15_before_after'][0][0]:.1f} before the run).",
        "",
        f"Model: `{first['arch']} {' '.join(first['model_options'])}`; attention layer alone: "
        f"one decoder step of {LAYER_SHAPE['batch']} sentences over sources of up to "
        f"{LAYER_SHAPE['src']} tokens; training: batches of {first['batch']['batch']} pairs, "
        f"source ~{first['batch']['src']} and target ~{first['batch']['tgt']} tokens.",
        "",
        "| attention | layer fwd+bwd µs / step | vs softmax | training target tokens/s "
        "| vs softmax |",
        "|---|---|---|---|---|",
    ]
    base = layer[BASELINE]
    for r in training:
        label = r["attention"]
        lines.append(
            f"| {label} | {1e6 * layer[label]:.0f} | {base / layer[label]:.2f} | "
            f"{r['per_s']:.0f} | {r['throughput_ratio_to_softmax']:.2f} |"
        )
    lines += ["", f"All runs: `results/bench/{record['file_stem']}.json`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--basis", type=int, nargs="+", default=[64], help="basis sizes N")
    add_round_robin_arguments(parser, steps=5, repeats=5)
    parser.add_argument("--layer-steps", type=int, default=200, help="layer calls per block")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args(argv)
    device = require_device(args.device)
    settle_round_robin_arguments(args)
    if args.quick:
        args.layer_steps = 2
    labels = variants(args.basis)

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        write_dictionaries(data_dir)
        env = environment()
        layer = layer_step_times(
            data_dir, labels, args.layer_steps, args.repeats, args.seed, device
        )
        training = run_training(
            list(MODELS),
            args.steps,
            args.repeats,
            args.seed,
            data_dir,
            args.device,
            model_specs=MODELS,
            variants_of=labels,
        )
    env = environment(before=env)
    record = {
        "args": {
            "basis": args.basis,
            "steps": args.steps,
            "layer_steps": args.layer_steps,
            "repeats": args.repeats,
            "quick": args.quick,
            "seed": args.seed,
            "device": args.device,
        },
        "env": env,
        "results": {"layer": layer, "training": training},
    }
    print(append_run(args.out_dir, f"continuous_{env['device_kind']}", record, markdown))


if __name__ == "__main__":
    main()
