"""Training throughput of whole models with each attention mapping, as a ratio to softmax.

Issue #5's model-level benchmark: target tokens per second of a full training step (forward,
cross-entropy, backward, Adam step) of

- the LSTM summarizer of Table 2 (`regattn_lstm`, sizes of configs/scale/lstm_seq2seq/<scale>),
  on Gigaword-shaped batches: 64 articles of ~31 tokens, titles of ~9 (lengths drawn +-30%,
  sources left-padded as fairseq collates them);
- the Transformer (`regattn_transformer_small`, configs/scale/transformer/small), on batches of
  ~2048 tokens (80 sentence pairs of ~25 tokens);

built by fairseq exactly as fairseq-train builds them (--user-dir regattn_fairseq), with every
mapping of the plugin. Synthetic token ids over an 8000-word dictionary: the cost of a step
does not depend on which words they are. Steps are timed round-robin over the mappings,
`--repeats` times, so that a shared machine slows all alike; the reported time is the median.

Every run is appended to results/bench/model_<device>.json and the markdown table
results/bench/model_<device>.md is regenerated from the latest full run.

    python -m regattn_bench model                 # both models, every mapping
    python -m regattn_bench model --quick         # fewer steps (smoke test)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from regattn_bench.bench_configs import bench_config
from regattn_bench.mapping_speed import require_device
from regattn_bench.run_record import (
    add_round_robin_arguments,
    append_run,
    commit_label,
    environment,
    settle_round_robin_arguments,
)
from regattn_fairseq.experiments.core.paths import CONFIG_DIR, USER_DIR

VOCAB = 8000
# the variants timed: label -> the plugin's attention options (configs/bench/model_throughput.yaml)
_VARIANTS = bench_config("model_throughput")
MAPPINGS: dict[str, list[str]] = _VARIANTS["mappings"]
# every ratio is to the first variant's median step
BASELINE = next(iter(MAPPINGS))
TRANSFORMER_ONLY: dict[str, list[str]] = _VARIANTS["transformer_only"]
CPU_OFFLOAD = {
    f"{label}, mapping on the CPU": [*MAPPINGS[label], "--attention-device", "cpu"]
    for label in _VARIANTS["cpu_offload"]
}


def variants(arch: str, device: torch.device) -> dict[str, list[str]]:
    """The attention variants timed for a model: every mapping (`MAPPINGS`), learned α for the
    Transformer (`TRANSFORMER_ONLY`), and on a GPU the CPU offload of the paper
    (`CPU_OFFLOAD`)."""
    return {
        **MAPPINGS,
        **(TRANSFORMER_ONLY if "transformer" in arch else {}),
        **(CPU_OFFLOAD if device.type == "cuda" else {}),
    }


def _scale_options(group: str, scale: str) -> tuple[str, list[str]]:
    """The architecture and model options of configs/scale/<group>/<scale>.yaml as CLI flags,
    so that the benchmark times the models the reproduction trains."""
    model = dict(OmegaConf.load(CONFIG_DIR / "scale" / group / f"{scale}.yaml").model)
    arch = model.pop("_name")
    flags = []
    for key, value in model.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is not False:
            flags += [flag, str(value)]
    return arch, flags


MODELS = {
    "LSTM summarizer": {"scale": ("lstm_seq2seq", "small"), "batch": 64, "src": 31, "tgt": 9},
    "Transformer": {"scale": ("transformer", "small"), "batch": 80, "src": 25, "tgt": 25},
}


def build(data_dir: Path, arch: str, model_flags: list[str], attention: list[str]):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            str(data_dir),
            "--task",
            "translation",
            "-s",
            "src",
            "-t",
            "tgt",
            "--user-dir",
            str(USER_DIR),
            "--arch",
            arch,
            *model_flags,
            *attention,
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--dropout",
            "0.1",
        ],
    )
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    return task, task.build_model(cfg.model)


def synthetic_batch(dictionary, batch: int, src: int, tgt: int, generator: torch.Generator) -> dict:
    """A collated translation batch as fairseq's collater makes it: sorted by decreasing
    source length (the LSTM packs sequences), left-padded sources, eos-terminated targets;
    lengths drawn within +-30% of the nominal ones."""

    def lengths(nominal):
        return torch.randint(
            int(0.7 * nominal), int(1.3 * nominal) + 1, (batch,), generator=generator
        )

    def tokens(n):
        return torch.randint(dictionary.nspecial, len(dictionary), (n,), generator=generator)

    src_len, tgt_len = lengths(src).sort(descending=True).values, lengths(tgt)
    src_tokens = torch.full((batch, int(src_len.max())), dictionary.pad())
    target = torch.full((batch, int(tgt_len.max())), dictionary.pad())
    prev = target.clone()
    for i in range(batch):
        s, t = int(src_len[i]), int(tgt_len[i])
        src_tokens[i, -s:] = torch.cat([tokens(s - 1), torch.tensor([dictionary.eos()])])
        target[i, :t] = torch.cat([tokens(t - 1), torch.tensor([dictionary.eos()])])
        prev[i, :t] = torch.cat([torch.tensor([dictionary.eos()]), target[i, : t - 1]])
    return {
        "net_input": {"src_tokens": src_tokens, "src_lengths": src_len, "prev_output_tokens": prev},
        "target": target,
        "ntokens": int(tgt_len.sum()),
    }


def to_device(batch: dict, device: torch.device) -> dict:
    """The batch with its tensors on `device`."""
    return {
        k: to_device(v, device)
        if isinstance(v, dict)
        else v.to(device)
        if isinstance(v, torch.Tensor)
        else v
        for k, v in batch.items()
    }


def make_step(model, batch: dict, pad: int):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits, _ = model(**batch["net_input"])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)),
            batch["target"].reshape(-1),
            ignore_index=pad,
            reduction="sum",
        )
        loss.backward()
        optimizer.step()

    return step


def run(
    models: list[str],
    steps: int,
    repeats: int,
    seed: int,
    data_dir: Path,
    device: str = "cpu",
    model_specs: dict | None = None,
    variants_of: dict | None = None,
) -> list[dict]:
    """Time training steps of each model with each attention variant, round-robin.

    Parameters
    ----------
    models : list of str
        names in `model_specs`.
    steps, repeats, seed : int
        steps per timed block, round-robin passes, seed of the weights and the batch.
    data_dir : Path
        a folder with the dictionaries (dict.src.txt, dict.tgt.txt).
    device : str
    model_specs : dict, optional
        name -> {"scale": (group, scale), "batch", "src", "tgt"} (default `MODELS`).
    variants_of : dict, optional
        label -> fairseq attention options, with a BASELINE entry (default: `variants` of the
        model on the device).

    Returns
    -------
    list of dict
        one result per model and variant, its throughput relative to softmax's in this run.
    """
    device = require_device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    results = []
    for model_name in models:
        spec = (model_specs or MODELS)[model_name]
        arch, flags = _scale_options(*spec["scale"])
        labels = variants_of or variants(arch, device)
        steps_of, batch = {}, None
        for label, attention in labels.items():
            torch.manual_seed(seed)
            task, model = build(data_dir, arch, flags, attention)
            model = model.to(device)
            if batch is None:
                batch = to_device(
                    synthetic_batch(
                        task.target_dictionary,
                        spec["batch"],
                        spec["src"],
                        spec["tgt"],
                        torch.Generator().manual_seed(seed),
                    ),
                    device,
                )
            steps_of[label] = make_step(model, batch, task.target_dictionary.pad())
            steps_of[label]()  # warm-up (allocations, first-call dispatch)
        times = {label: [] for label in labels}
        for _ in range(repeats):  # round-robin over the mappings
            for label, step in steps_of.items():
                sync()
                start = time.perf_counter()
                for _ in range(steps):
                    step()
                sync()
                times[label].append((time.perf_counter() - start) / steps)
        base = statistics.median(times[BASELINE])
        for label in labels:
            median = statistics.median(times[label])
            results.append(
                {
                    "model": model_name,
                    "arch": arch,
                    "model_options": flags,
                    "attention": label,
                    "batch": {k: spec[k] for k in ("batch", "src", "tgt")},
                    "target_tokens": batch["ntokens"],
                    "median_step_ms": 1e3 * median,
                    "tokens_per_s": batch["ntokens"] / median,
                    "throughput_ratio_to_softmax": base / median,
                    "samples": len(times[label]),
                }
            )
        print(f"done {model_name}", flush=True)
    return results


def earlier_runs(out_dir: Path, stem: str) -> list[dict]:
    """The full runs already in out_dir/<stem>.json (none when it does not exist)."""
    path = out_dir / f"{stem}.json"
    runs = json.loads(path.read_text())["runs"] if path.is_file() else []
    return [r for r in runs if not r["args"].get("quick")]


def markdown(record: dict, earlier: list[dict] = ()) -> str:
    """The record's tables; with `earlier` runs on the same device, each ratio is shown beside
    theirs: a GPU step of these small models is bound by the host launching kernels, so a
    ratio moves between runs (machines) by more than the differences it is read for."""
    env = record["env"]
    same_device = [r for r in earlier if r["env"]["device"] == env["device"]]

    def earlier_ratios(result: dict) -> str:
        ratios = [
            f"{r['throughput_ratio_to_softmax']:.2f}"
            for run in same_device
            for r in run["results"]
            if (r["model"], r["attention"]) == (result["model"], result["attention"])
        ]
        return ", ".join(ratios) or "–"

    lines = [
        f"# Training throughput per attention mapping ({record['date']}, {env['device']})",
        "",
        f"Target tokens/s of a full training step (forward, cross-entropy, backward, Adam), "
        f"median of {record['args']['repeats']} round-robin blocks of {record['args']['steps']} "
        f"steps; ratio = throughput / softmax's throughput in the same run (1.0 = as fast as "
        f"softmax). commit `{commit_label(env)}`, torch {env['torch']}, {env['cpu_model']}, "
        f"{env['threads']} threads (load average {env['loadavg_1_5_15_before_after'][0][0]:.1f} "
        f"before the run).",
        "",
    ]
    for model in dict.fromkeys(r["model"] for r in record["results"]):
        rows = [r for r in record["results"] if r["model"] == model]
        first = rows[0]
        lines += [
            f"## {model}: `{first['arch']} {' '.join(first['model_options'])}`",
            "",
            f"batches of {first['batch']['batch']} pairs, source ~{first['batch']['src']} and "
            f"target ~{first['batch']['tgt']} tokens ({first['target_tokens']} target tokens)",
            "",
            "| attention | ms / step | target tokens/s | throughput vs softmax |"
            + (" earlier runs on this device |" if same_device else ""),
            "|---|---|---|---|" + ("---|" if same_device else ""),
        ]
        for r in rows:
            lines.append(
                f"| {r['attention']} | {r['median_step_ms']:.1f} | {r['tokens_per_s']:.0f} | "
                f"{r['throughput_ratio_to_softmax']:.2f} |"
                + (f" {earlier_ratios(r)} |" if same_device else "")
            )
        lines.append("")
    if same_device:
        lines += [
            f"Earlier runs on {env['device']}: "
            + ", ".join(
                f"{run['date'][:16]} (commit `{commit_label(run['env'])}`)" for run in same_device
            )
            + ". Where the ratios of one variant differ between runs by more than the gap "
            "between variants, that gap is not measured.",
            "",
        ]
    lines.append(f"All runs: `results/bench/{record['file_stem']}.json`.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    add_round_robin_arguments(parser, steps=5, repeats=5)
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the models train (cuda: the mappings run their Triton kernels)",
    )
    args = parser.parse_args(argv)
    require_device(args.device)
    settle_round_robin_arguments(args)

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        words = "".join(f"w{i} 1\n" for i in range(VOCAB))
        for lang in ("src", "tgt"):
            (data_dir / f"dict.{lang}.txt").write_text(words)
        env = environment()
        results = run(args.models, args.steps, args.repeats, args.seed, data_dir, args.device)
    env = environment(before=env)
    record = {
        "args": {
            "models": args.models,
            "steps": args.steps,
            "repeats": args.repeats,
            "quick": args.quick,
            "seed": args.seed,
            "device": args.device,
        },
        "env": env,
        "results": results,
    }
    stem = f"model_{env['device_kind']}"
    earlier = earlier_runs(args.out_dir, stem)
    print(append_run(args.out_dir, stem, record, lambda latest: markdown(latest, earlier)))


if __name__ == "__main__":
    main()
