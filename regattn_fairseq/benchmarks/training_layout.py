"""Training throughput of the tables' LSTM seq2seq on this machine's cores: one process with
every core against one single-threaded process per core (issue #24 item 1).

Each layout runs the real thing: `fairseq-hydra-train` with the NMT table's config
(configs/nmt_multi30k.yaml at `scale/lstm_seq2seq=small`, softmax attention) on the prepared
Multi30k data, for a fixed number of updates, no checkpoints written. Throughput is fairseq's
own `wps` (target tokens per second of training) over the logged intervals after the first
one (warm-up); a layout's machine throughput is the sum over its concurrent processes. The
layouts run back to back, `--repeats` times round-robin, so that changing load hits both.

Before the layouts, one training step of the same model on a real batch of 64 pairs is timed
by part on one thread (`step_profile`: encoder and decoder forward and backward, the output
layer with the loss forward and backward, fairseq's Adam step), and the output layer's
matrix-product rate is given in GFLOP/s. It says where a step's time goes and how much of it
is the dense output layer over the target vocabulary, which no engineering removes without
computing something else (a smaller vocabulary, sampled or adaptive softmax: a model change).

    python -m regattn_bench training                      # profile + both layouts, 3 repeats
    python -m regattn_bench training --updates 100 --repeats 1 --quick
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from regattn_bench.run_record import append_run, commit_label, environment
from regattn_checkout.errors import ReproError
from regattn_checkout.paths import BENCH_RESULTS_DIR
from regattn_fairseq.experiments.core.paths import CONFIG_DIR, USER_DIR
from regattn_fairseq.experiments.data.prepare import prepare
from regattn_fairseq.experiments.train.fairseq_logs import json_records
from regattn_fairseq.experiments.train.train import HYDRA_TRAIN

from .model_throughput import BASELINE, MAPPINGS, _scale_options

LOG_INTERVAL = 25


def training_command(data_bin: Path, run_dir: Path, updates: int) -> list[str]:
    """The NMT table's small-scale softmax training, stopped after `updates` updates."""
    return [
        *HYDRA_TRAIN,
        "--config-dir",
        str(CONFIG_DIR),
        "--config-name",
        "nmt_multi30k",
        "scale/lstm_seq2seq=small",
        "attention=softmax",
        f"task.data={data_bin}",
        f"common.user_dir={USER_DIR}",
        f"checkpoint.save_dir={run_dir / 'checkpoints'}",
        f"hydra.run.dir={run_dir / 'hydra'}",
        f"optimization.max_update={updates}",
        f"common.log_interval={LOG_INTERVAL}",
        "checkpoint.no_save=true",
        "common.wandb_project=null",
    ]


def steady_wps(log_text: str) -> float:
    """Mean fairseq `wps` over the logged training intervals after the first (warm-up)."""
    wps = [float(r["wps"]) for r in json_records(log_text) if "wps" in r and "num_updates" in r]
    if len(wps) < 2:
        raise ReproError(f"too few logged training intervals to measure ({len(wps)})")
    return statistics.mean(wps[1:])


def run_layout(data_bin: Path, processes: int, threads: int, updates: int, tmp: Path) -> dict:
    """Start `processes` trainings at once, each with `threads` threads; wait for all.

    Returns
    -------
    dict
        processes, threads, per-process tokens/s, their sum (the machine's throughput) and the
        wall time of the slowest process.
    """
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env["WANDB_MODE"] = "disabled"
    started = time.perf_counter()
    procs = []
    for index in range(processes):
        run_dir = Path(tempfile.mkdtemp(prefix=f"p{processes}t{threads}-{index}-", dir=tmp))
        log = open(run_dir / "train.log", "w")  # noqa: SIM115 (closed after wait)
        cmd = training_command(data_bin, run_dir, updates)
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    per_process = []
    for proc, log in procs:
        proc.wait()
        log.close()
        text = Path(log.name).read_text()
        if proc.returncode != 0:
            raise ReproError(f"training failed ({proc.returncode}): {log.name}\n{text[-2000:]}")
        per_process.append(steady_wps(text))
    return {
        "processes": processes,
        "threads": threads,
        "tokens_per_s_per_process": per_process,
        "machine_tokens_per_s": sum(per_process),
        "wall_s": time.perf_counter() - started,
    }


def _median_ms(fn, repeats: int = 7) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def step_profile(data_bin: Path) -> dict:
    """Time the parts of one training step of the small LSTM seq2seq on one thread.

    Returns
    -------
    dict
        target tokens of the batch, vocabulary size, milliseconds per part, their share of the
        whole step, and the output layer's forward GFLOP/s.
    """
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim.adam import Adam

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        arch, flags = _scale_options("lstm_seq2seq", "small")
        argv = [str(data_bin), "--task", "translation", "-s", "en", "-t", "de"]
        argv += ["--user-dir", str(USER_DIR), "--arch", arch, *flags, *MAPPINGS[BASELINE]]
        parser = options.get_training_parser()
        cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
        task = tasks.setup_task(cfg.task)
        task.load_dataset("train")
        torch.manual_seed(1)
        model = task.build_model(cfg.model).train()
        batches = task.get_batch_iterator(task.dataset("train"), max_sentences=64, seed=1)
        batch = next(batches.next_epoch_itr(shuffle=True))
        net_input, target = batch["net_input"], batch["target"]
        pad = task.target_dictionary.pad()
        optimizer = Adam(model.parameters(), lr=1e-3)

        def loss_of(logits):
            lprobs = torch.log_softmax(logits.float(), dim=-1)
            return torch.nn.functional.nll_loss(
                lprobs.view(-1, lprobs.size(-1)), target.view(-1), ignore_index=pad, reduction="sum"
            )

        def features():
            encoded = model.encoder(net_input["src_tokens"], net_input["src_lengths"])
            return model.decoder.extract_features(net_input["prev_output_tokens"], encoded)[0]

        hidden = features().detach().requires_grad_()

        def whole_step():
            optimizer.zero_grad()
            loss_of(model(**net_input)[0]).backward()
            optimizer.step()

        parts = {
            "encoder + decoder (attention included), forward + backward": lambda: (
                features().sum().backward()
            ),
            "output layer + log-softmax loss, forward + backward": lambda: loss_of(
                model.decoder.output_layer(hidden)
            ).backward(),
            "Adam step (fairseq's)": optimizer.step,
        }
        ms = {name: _median_ms(fn) for name, fn in parts.items()}
        step_ms = _median_ms(whole_step)
        output_forward_ms = _median_ms(lambda: model.decoder.output_layer(hidden.detach()))
        vocab = len(task.target_dictionary)
        flops = 2 * hidden.shape[0] * hidden.shape[1] * hidden.shape[2] * vocab
        return {
            "target_tokens": int(batch["ntokens"]),
            "positions": int(target.numel()),
            "vocabulary": vocab,
            "step_ms": step_ms,
            "parts_ms": ms,
            "parts_share": {name: value / step_ms for name, value in ms.items()},
            "output_layer_forward_gflops": flops / output_forward_ms / 1e6,
        }
    finally:
        torch.set_num_threads(threads)


def markdown(record: dict) -> str:
    env = record["env"]
    runs = record["results"]
    lines = [
        f"# Training throughput by process layout ({record['date']}, {env['device']})",
        "",
        "The NMT table's LSTM seq2seq (configs/nmt_multi30k.yaml, `scale/lstm_seq2seq=small`, "
        f"softmax) trained by `fairseq-hydra-train` on prepared Multi30k for "
        f"{record['args']['updates']} updates per process; tokens/s = fairseq's `wps` after the "
        "first logged interval; machine = the sum over the processes running at once. Layouts "
        f"ran round-robin, {record['args']['repeats']} times; medians. commit "
        f"`{commit_label(env)}`, torch {env['torch']}, {env['cpu_model']}, {env['cpus']} cores, "
        f"load average {env['loadavg_1_5_15_before_after'][0][0]:.1f} before and "
        f"{env['loadavg_1_5_15_before_after'][1][0]:.1f} after the run.",
        "",
        "| layout | tokens/s per process | machine tokens/s | vs 1 process x all cores |",
        "|---|---|---|---|",
    ]
    base = None
    for layout in dict.fromkeys((r["processes"], r["threads"]) for r in runs):
        same = [r for r in runs if (r["processes"], r["threads"]) == layout]
        per = statistics.median(v for r in same for v in r["tokens_per_s_per_process"])
        machine = statistics.median(r["machine_tokens_per_s"] for r in same)
        base = base or machine
        lines.append(
            f"| {layout[0]} process(es) x {layout[1]} thread(s) | {per:.0f} | {machine:.0f} | "
            f"{machine / base:.2f} |"
        )
    profile = record["profile"]
    lines += [
        "",
        f"## One step, by part (1 thread; {profile['target_tokens']} target tokens, "
        f"{profile['positions']} target positions, vocabulary {profile['vocabulary']})",
        "",
        f"Whole step (forward, loss, backward, Adam): {profile['step_ms']:.1f} ms. Parts, timed "
        "apart (they overlap the whole step's time, not add up to it exactly):",
        "",
        "| part | ms | share of the step |",
        "|---|---|---|",
    ]
    for name, value in profile["parts_ms"].items():
        lines.append(f"| {name} | {value:.1f} | {profile['parts_share'][name]:.0%} |")
    lines += [
        "",
        f"The output layer's forward runs at {profile['output_layer_forward_gflops']:.0f} "
        "GFLOP/s on one core.",
    ]
    lines += ["", f"All runs: `results/bench/{record['file_stem']}.json`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=300, help="training updates per process")
    parser.add_argument("--repeats", type=int, default=3, help="round-robin passes")
    parser.add_argument("--quick", action="store_true", help="a smoke run (not the .md's run)")
    parser.add_argument("--work-dir", type=Path, help="where the prepared data is (WORK_DIR)")
    parser.add_argument("--out-dir", type=Path, default=BENCH_RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.updates < 2 * LOG_INTERVAL:
        parser.error(f"--updates must be at least {2 * LOG_INTERVAL} (two logged intervals)")
    cores = os.cpu_count() or 1
    data = prepare("multi30k", "small", **({"work_dir": args.work_dir} if args.work_dir else {}))
    layouts = [(1, cores), (cores, 1)]
    env = environment()
    profile = step_profile(data.bin_dir)
    print(f"[bench] one step: {profile['step_ms']:.1f} ms, parts {profile['parts_ms']}", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for processes, threads in layouts:
                result = run_layout(data.bin_dir, processes, threads, args.updates, Path(tmp))
                results.append({"repeat": repeat, **result})
                print(
                    f"[bench] {processes} x {threads} threads: "
                    f"{result['machine_tokens_per_s']:.0f} tokens/s",
                    flush=True,
                )
    record = {
        "args": {"updates": args.updates, "repeats": args.repeats, "quick": args.quick},
        "env": environment(before=env),
        "torch_default_threads": torch.get_num_threads(),
        "profile": profile,
        "results": results,
    }
    print(append_run(args.out_dir, "training_cpu", record, markdown))


if __name__ == "__main__":
    main()
