"""Time the smoothed Viterbi of regattn.dp (custom backward) against autograd through the
recursion and against a hard Viterbi forward.

regattn.dp runs its Viterbi sweeps compiled (regattn/csrc/dp_sweeps.h) on CPU tensors, and its
torch code elsewhere or under `mappings.torch_reference()`; both paths are timed ("compiled"
only on CPU). For S states, batch B and each length T this times, for reg in (entropy, l2):

- `regattn.dp.viterbi` on each path, forward, and forward+backward (its reverse sweep of the
  saved local argmax distributions);
- the same recursion written in plain torch ops and differentiated by autograd
  (`autograd_viterbi`, here and not in the library; its sparsemax takes the default dispatch),
  forward and forward+backward;
- the hard Viterbi forward (`regattn.dp.viterbi_decode`: max-sum with back-pointers and the
  backtrack) on each path, the reference for "how much does smoothing cost". Ratios are to
  the hard forward of the first path (the compiled one on CPU: compiled against compiled),
  and in the summary also to the torch one.

Methods are measured round-robin, `--repeats` times each; the reported time is the median
block time (torch.utils.benchmark.Timer.blocked_autorange) over all repeats. The markdown
reports the targets of the issue (not asserted): custom backward no slower than the forward
(fwd+bwd / fwd <= 2) and fwd+bwd at most 3x the hard Viterbi forward.

Every run is appended to results/bench/dp_cpu.json (never overwritten) and the markdown table
results/bench/dp_cpu.md is regenerated from the latest full run.

    python -m regattn_bench dp                 # S = 17, batch 32, T in {20, 50, 100}
    python -m regattn_bench dp --quick         # short sequences, short timings (smoke test)
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from torch.utils.benchmark import Timer

from regattn import dp
from regattn.mappings import backend, sparsemax, torch_reference
from regattn_checkout.paths import BENCH_RESULTS_DIR

from .run_record import append_run, commit_label, environment

DEFAULT_LENGTHS = "20,50,100"
QUICK_LENGTHS = "5,10"


def _paths(device):
    """regattn.dp's implementations on `device`: label -> context manager factory forcing it."""
    paths = {"compiled": lambda: backend("cpu")} if device == "cpu" else {}
    return {**paths, "torch": torch_reference}


def _hard(path):
    return f"hard viterbi (decode, {path})"


def _ours(reg, path):
    return f"regattn.dp.viterbi ({reg}, {path})"


def _autograd(reg):
    return f"autograd through the recursion ({reg})"


def autograd_viterbi(theta: torch.Tensor, reg: str = dp.REFERENCE_REG, gamma: float = 1.0):
    """The smoothed Viterbi recursion in differentiable torch ops (autograd baseline)."""
    v = theta.new_zeros(theta.shape[0], theta.shape[-1])

    def smax(x):
        if reg == dp.REFERENCE_REG:
            return gamma * torch.logsumexp(x / gamma, -1)
        p = sparsemax(x, gamma=gamma)
        return (p * x).sum(-1) - 0.5 * gamma * (p * p).sum(-1)

    for t in range(theta.shape[1]):
        v = smax(theta[:, t] + v[:, None, :])
    return smax(v)


def _on_path(fn, forced):
    """fn run with a dp path forced (a backward runs on the path its forward took)."""

    def call(x):
        with forced():
            return fn(x)

    return call


def _methods(reg, gamma, paths):
    ours = {
        _ours(reg, path): _on_path(lambda x: dp.viterbi(x, reg=reg, gamma=gamma), forced)
        for path, forced in paths.items()
    }
    return {**ours, _autograd(reg): lambda x: autograd_viterbi(x, reg, gamma)}


def _timer(fn, x, backward):
    threads = torch.get_num_threads()
    if not backward:
        return Timer("fn(x)", globals={"fn": fn, "x": x}, num_threads=threads)
    xg = x.clone().requires_grad_()
    return Timer(
        "torch.autograd.grad(fn(xg).sum(), xg)",
        globals={"fn": fn, "xg": xg, "torch": torch},
        num_threads=threads,
    )


def run(lengths, states, batch, gamma, repeats, min_run_time, seed, device):
    results = []
    paths = _paths(device)
    hard_name = _hard(next(iter(paths)))
    for steps in lengths:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(batch, steps, states, states, generator=g).to(device)
        cases = {
            (_hard(path), "fwd"): _timer(_on_path(dp.viterbi_decode, forced), x, False)
            for path, forced in paths.items()
        }
        for reg in dp.REGS:
            for name, fn in _methods(reg, gamma, paths).items():
                for mode in ("fwd", "fwd+bwd"):
                    cases[(name, mode)] = _timer(fn, x, mode == "fwd+bwd")
        blocks = {c: [] for c in cases}
        for _ in range(repeats):  # round-robin over the methods
            for c, timer in cases.items():
                blocks[c].extend(timer.blocked_autorange(min_run_time=min_run_time).times)
        hard = statistics.median(blocks[(hard_name, "fwd")])
        for (name, mode), times in blocks.items():
            med = statistics.median(times)
            results.append(
                {
                    "T": steps,
                    "method": name,
                    "mode": mode,
                    "median_ms": 1e3 * med,
                    "min_ms": 1e3 * min(times),
                    "blocks": len(times),
                    "ratio_to_hard_forward": med / hard,
                }
            )
        print(f"done T={steps}", flush=True)
    return results


def hard_name_of(run_record):
    """The hard Viterbi method the run's ratios are to (its first path's)."""
    return next(r["method"] for r in run_record["results"] if r["method"].startswith("hard"))


def markdown(run_record):
    env = run_record["env"]
    args = run_record["args"]
    load = env.get("loadavg_1_5_15_before_after")
    by_key = {(r["T"], r["method"], r["mode"]): r for r in run_record["results"]}
    rows = list(dict.fromkeys((r["method"], r["mode"]) for r in run_record["results"]))
    lengths = args["lengths"]
    lines = [
        f"# Smoothed Viterbi on {env.get('device', 'CPU')} ({run_record['date']})",
        "",
        f"median ms per batch (ratio to the {hard_name_of(run_record)} forward, same T, same "
        "run); "
        f"S = {args['states']}, batch {args['batch']}, gamma {args['gamma']}, float32. "
        f"commit `{commit_label(env)}`, torch {env['torch']}, {env['cpu_model']}, "
        f"{env['threads']} threads"
        + (f" (load average {load[0][0]:.1f} before the run), " if load else ", ")
        + f"{args['repeats']} repeats x min_run_time {args['min_run_time']} s"
        + (" (--quick)" if args["quick"] else "")
        + ".",
        "",
        "| method | mode | " + " | ".join(f"T={t}" for t in lengths) + " |",
        "|---|---|" + "---|" * len(lengths),
    ]
    for method, mode in rows:
        cells = [method, mode]
        for t in lengths:
            r = by_key[(t, method, mode)]
            cells.append(f"{r['median_ms']:.3g} ({r['ratio_to_hard_forward']:.1f}x)")
        lines.append("| " + " | ".join(cells) + " |")
    paths = [p for p in ("compiled", "torch") if (lengths[0], _hard(p), "fwd") in by_key]
    lines += [
        "",
        "Targets of the issue (reported, not asserted): backward no slower than the forward "
        "(fwd+bwd / fwd <= 2) and fwd+bwd <= 3x the hard Viterbi forward.",
        "",
        "| reg | path | T | fwd+bwd / fwd | "
        + " | ".join(f"fwd+bwd / hard fwd ({p})" for p in paths)
        + " | autograd fwd+bwd / custom fwd+bwd |",
        "|---|---|---|---|" + "---|" * len(paths) + "---|",
    ]
    for reg in dp.REGS:
        for path in paths:
            ours = _ours(reg, path)
            for t in lengths:
                fwd, both = by_key[(t, ours, "fwd")], by_key[(t, ours, "fwd+bwd")]
                hard = [by_key[(t, _hard(p), "fwd")]["median_ms"] for p in paths]
                other = by_key[(t, _autograd(reg), "fwd+bwd")]
                lines.append(
                    f"| {reg} | {path} | {t} | {both['median_ms'] / fwd['median_ms']:.2f} | "
                    + " | ".join(f"{both['median_ms'] / h:.2f}" for h in hard)
                    + f" | {other['median_ms'] / both['median_ms']:.2f} |"
                )
    lines += [
        "",
        "fwd+bwd = torch.autograd.grad of the summed values. "
        f"All runs: `results/bench/{run_record.get('file_stem', 'dp_cpu')}.json`.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--lengths", default=None, help=f"comma-separated T (default {DEFAULT_LENGTHS})"
    )
    parser.add_argument("--states", type=int, default=17)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument(
        "--repeats", type=int, default=3, help="round-robin passes over the methods"
    )
    parser.add_argument(
        "--min-run-time", type=float, default=0.2, help="seconds per blocked_autorange"
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"T in {QUICK_LENGTHS}, 1 repeat, 0.02 s"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=BENCH_RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.min_run_time = 1, 0.02
    lengths = [
        int(t)
        for t in (args.lengths or (QUICK_LENGTHS if args.quick else DEFAULT_LENGTHS)).split(",")
        if t
    ]
    if args.threads:
        torch.set_num_threads(args.threads)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    env = environment()
    results = run(
        lengths,
        args.states,
        args.batch,
        args.gamma,
        args.repeats,
        args.min_run_time,
        args.seed,
        device,
    )
    record = {
        "args": {
            "lengths": lengths,
            "states": args.states,
            "batch": args.batch,
            "gamma": args.gamma,
            "repeats": args.repeats,
            "min_run_time": args.min_run_time,
            "quick": args.quick,
            "seed": args.seed,
        },
        "env": environment(before=env),
        "results": results,
    }
    stem = f"dp_{record['env']['device_kind']}"
    print(append_run(args.out_dir, stem, record, markdown).read_text())


if __name__ == "__main__":
    main()
