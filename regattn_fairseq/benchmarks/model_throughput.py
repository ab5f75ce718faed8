"""Training throughput of whole models with each attention mapping, as a ratio to softmax.

Issue #5's model-level benchmark, and the test of the sources' runtime claims (P4, T2, P6:
``bench_ratio`` in `report.claims`): items per second of a full training step (forward,
cross-entropy, backward, Adam step) of

- the LSTM summarizer of Table 2 (`regattn_lstm`, sizes of configs/scale/lstm_seq2seq/<scale>),
  on Gigaword-shaped batches: 64 articles of ~31 tokens, titles of ~9 (lengths drawn +-30%,
  sources left-padded as fairseq collates them); target tokens per second;
- the Transformer (`regattn_transformer_small`, configs/scale/transformer/small), on batches of
  ~2048 tokens (80 sentence pairs of ~25 tokens); target tokens per second;
- the SNLI classifier of Table 1 (`regattn_snli`, configs/scale/snli/small: fixed GloVe
  vectors, as the table trains it), on batches of 64 pairs with premises of ~15 tokens and
  hypotheses of ~9 (the means of the 20k offline training pairs, eos included); pairs per
  second;

built by fairseq exactly as fairseq-train builds them (--user-dir regattn_fairseq), with every
mapping of the plugin. Synthetic token ids over an 8000-word dictionary: the cost of a step
does not depend on which words they are. Steps are timed round-robin over the mappings,
`--repeats` times, so that a shared machine slows all alike; the reported time is the median.

Every run is appended to results/bench/model_<device>.json and the markdown table
results/bench/model_<device>.md is regenerated from the latest full run.

    python -m regattn_bench model                 # every model, every mapping
    python -m regattn_bench model --quick         # fewer steps (smoke test)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
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
    "LSTM summarizer": {
        "scale": ("lstm_seq2seq", "small"),
        "task": "translation",
        "batch": 64,
        "src": 31,
        "tgt": 9,
    },
    "Transformer": {
        "scale": ("transformer", "small"),
        "task": "translation",
        "batch": 80,
        "src": 25,
        "tgt": 25,
    },
    # src / tgt: the premise's and the hypothesis's lengths
    "SNLI classifier": {
        "scale": ("snli", "small"),
        "task": "regattn_snli",
        "batch": 64,
        "src": 15,
        "tgt": 9,
    },
}


def build(data_dir: Path, task_kind: str, arch: str, model_flags: list[str], attention: list[str]):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            str(data_dir),
            *TASKS[task_kind].options,
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


def _lengths(nominal: int, batch: int, generator: torch.Generator) -> torch.Tensor:
    """`batch` lengths drawn within +-30% of `nominal`."""
    return torch.randint(int(0.7 * nominal), int(1.3 * nominal) + 1, (batch,), generator=generator)


def _sentence(dictionary, length: int, generator: torch.Generator) -> torch.Tensor:
    """`length` - 1 random words and eos, as fairseq-preprocess binarizes a sentence."""
    words = torch.randint(dictionary.nspecial, len(dictionary), (length - 1,), generator=generator)
    return torch.cat([words, torch.tensor([dictionary.eos()])])


def synthetic_batch(task, spec: dict, generator: torch.Generator) -> dict:
    """A collated translation batch as fairseq's collater makes it: sorted by decreasing
    source length (the LSTM packs sequences), left-padded sources, eos-terminated targets;
    lengths drawn within +-30% of the nominal ones. Its items are the target tokens."""
    dictionary, batch = task.target_dictionary, spec["batch"]
    src_len = _lengths(spec["src"], batch, generator).sort(descending=True).values
    tgt_len = _lengths(spec["tgt"], batch, generator)
    src_tokens = torch.full((batch, int(src_len.max())), dictionary.pad())
    target = torch.full((batch, int(tgt_len.max())), dictionary.pad())
    prev = target.clone()
    for i in range(batch):
        s, t = int(src_len[i]), int(tgt_len[i])
        src_tokens[i, -s:] = _sentence(dictionary, s, generator)
        target[i, :t] = _sentence(dictionary, t, generator)
        prev[i, :t] = torch.cat([torch.tensor([dictionary.eos()]), target[i, : t - 1]])
    return {
        "net_input": {"src_tokens": src_tokens, "src_lengths": src_len, "prev_output_tokens": prev},
        "target": target,
        "items": int(tgt_len.sum()),
    }


def synthetic_pairs(task, spec: dict, generator: torch.Generator) -> dict:
    """A collated SNLI batch as the regattn_snli task makes it: right-padded premises and
    hypotheses (``src`` and ``tgt`` their nominal lengths, drawn within +-30%) with their
    lengths, and a label per pair. Its items are the pairs."""
    dictionary, batch = task.source_dictionary, spec["batch"]

    def sentences(nominal):
        lengths = _lengths(nominal, batch, generator)
        tokens = torch.full((batch, int(lengths.max())), dictionary.pad())
        for i, length in enumerate(lengths.tolist()):
            tokens[i, :length] = _sentence(dictionary, length, generator)
        return tokens, lengths

    premises, premise_lengths = sentences(spec["src"])
    hypotheses, hypothesis_lengths = sentences(spec["tgt"])
    return {
        "net_input": {
            "premise_tokens": premises,
            "premise_lengths": premise_lengths,
            "hypothesis_tokens": hypotheses,
            "hypothesis_lengths": hypothesis_lengths,
        },
        "target": torch.randint(0, len(task.labels), (batch,), generator=generator),
        "items": batch,
    }


@dataclass(frozen=True)
class BenchTask:
    """How the benchmark sets up and feeds a model's fairseq task.

    Attributes
    ----------
    options : tuple of str
        the task's command-line options after the data folder.
    dictionaries : tuple of str
        the files of the data folder that hold the synthetic dictionary.
    unit : str
        what a step's items are (the throughput's unit).
    batch : callable
        (task, model spec, generator) -> a collated batch with its ``items``.
    padded_targets : bool
        whether the targets hold padding, left out of the loss.
    """

    options: tuple[str, ...]
    dictionaries: tuple[str, ...]
    unit: str
    batch: Callable[..., dict]
    padded_targets: bool


TASKS = {
    "translation": BenchTask(
        ("--task", "translation", "-s", "src", "-t", "tgt"),
        ("dict.src.txt", "dict.tgt.txt"),
        "target tokens",
        synthetic_batch,
        True,
    ),
    "regattn_snli": BenchTask(
        ("--task", "regattn_snli"), ("input0/dict.txt",), "pairs", synthetic_pairs, False
    ),
}


def write_dictionaries(data_dir: Path) -> None:
    """The synthetic dictionary (VOCAB words) in every file a benchmarked task reads."""
    words = "".join(f"w{i} 1\n" for i in range(VOCAB))
    for name in dict.fromkeys(name for task in TASKS.values() for name in task.dictionaries):
        path = data_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(words)


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


def make_step(model, batch: dict, ignore_index: int):
    """One training step of `model` on `batch` (Adam); `ignore_index`: the target id left out
    of the loss (the padding, or -100 where the targets hold none)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits, _ = model(**batch["net_input"])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)),
            batch["target"].reshape(-1),
            ignore_index=ignore_index,
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
        a folder with the tasks' dictionaries (`write_dictionaries`).
    device : str
    model_specs : dict, optional
        name -> {"scale": (group, scale), "task" (a key of `TASKS`), "batch", "src", "tgt"}
        (default `MODELS`).
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
        kind = TASKS[spec["task"]]
        arch, flags = _scale_options(*spec["scale"])
        labels = variants_of or variants(arch, device)
        steps_of, batch = {}, None
        for label, attention in labels.items():
            torch.manual_seed(seed)
            task, model = build(data_dir, spec["task"], arch, flags, attention)
            model = model.to(device)
            if batch is None:
                generator = torch.Generator().manual_seed(seed)
                batch = to_device(kind.batch(task, spec, generator), device)
            ignore = task.target_dictionary.pad() if kind.padded_targets else -100
            steps_of[label] = make_step(model, batch, ignore)
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
                    "unit": kind.unit,
                    "per_step": batch["items"],
                    "median_step_ms": 1e3 * median,
                    "per_s": batch["items"] / median,
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
        f"Items per second (target tokens, or pairs for the classifier) of a full training step "
        f"(forward, cross-entropy, backward, Adam), "
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
        unit = first["unit"]
        lines += [
            f"## {model}: `{first['arch']} {' '.join(first['model_options'])}`",
            "",
            _batch_words(first),
            "",
            f"| attention | ms / step | {unit}/s | throughput vs softmax |"
            + (" earlier runs on this device |" if same_device else ""),
            "|---|---|---|---|" + ("---|" if same_device else ""),
        ]
        for r in rows:
            lines.append(
                f"| {r['attention']} | {r['median_step_ms']:.1f} | {r['per_s']:.0f} | "
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


def _batch_words(result: dict) -> str:
    """A result's batch in words."""
    batch = result["batch"]
    if result["unit"] == "pairs":
        return (
            f"batches of {batch['batch']} pairs, premises ~{batch['src']} and hypotheses "
            f"~{batch['tgt']} tokens"
        )
    return (
        f"batches of {batch['batch']} pairs, source ~{batch['src']} and target ~{batch['tgt']} "
        f"tokens ({result['per_step']} {result['unit']})"
    )


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
        write_dictionaries(data_dir)
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
