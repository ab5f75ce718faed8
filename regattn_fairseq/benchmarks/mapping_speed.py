"""Time every attention mapping on CPU, as a ratio to torch.softmax in the same run.

For each (rows x d) shape this times the forward pass alone and forward+backward of every
regattn mapping, of the `entmax` package (sparsemax, entmax15, entmax_bisect) and, when it
imports, of torchsparseattn's Cython prox_tv1d (forward only: its autograd Functions do not
run on current torch). Methods are measured round-robin, `--repeats` times each, so that a
shared, noisy machine slows every method alike; the reported time is the median block time
(torch.utils.benchmark.Timer.blocked_autorange) over all repeats.

Every run is appended to results/bench/mappings_cpu.json (never overwritten) and the
markdown table results/bench/mappings_cpu.md is regenerated from the latest full run.

    python bench/bench_mappings.py                  # the three attention shapes of issue #2
    python bench/bench_mappings.py --quick          # small shapes, short timings (smoke test)
    python bench/bench_mappings.py --shapes 2048x64 --repeats 5 --min-run-time 0.5
    python bench/bench_mappings.py --device cuda    # the Triton kernels at fairseq shapes

With --device cuda the default shapes are CUDA_SHAPES and the mappings run their Triton
kernels (torch.utils.benchmark synchronizes around each timed block); without a CUDA device it
exits with a message.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from torch.utils.benchmark import Timer

from regattn import mappings
from regattn_fairseq.experiments.core.paths import BENCH_RESULTS_DIR

from .run_record import append_run, commit_label, environment

DEFAULT_SHAPES = "4096x50,16384x30,1024x400"
QUICK_SHAPES = "256x50,128x400"
# --device cuda: fairseq shapes, rows = batch * heads * queries in {64k, 1M}, d in {32, 128, 512}
CUDA_SHAPES = "65536x32,65536x128,65536x512,1048576x32,1048576x128,1048576x512"
BASELINE = "torch.softmax"


def require_device(device: str) -> torch.device:
    """torch.device(device), or SystemExit with a clear message if it is "cuda" and no CUDA
    device is usable (these benchmarks cannot run their GPU shapes on a CPU)."""
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "--device cuda: no CUDA device is available (torch.cuda.is_available() is False; "
            f"torch {torch.__version__}, CUDA build: {torch.version.cuda}); run on a GPU "
            "machine or use --device cpu"
        )
    return torch.device(device)


def regattn_methods():
    m = mappings
    return {
        "softmax": lambda x: m.softmax(x),
        "sparsemax": lambda x: m.sparsemax(x),
        "sq_pnorm_max (p=1.5)": lambda x: m.sq_pnorm_max(x, p=1.5),
        "fusedmax (lam=0.1)": lambda x: m.fusedmax(x, lam=0.1),
        "oscarmax (lam=0.01)": lambda x: m.oscarmax(x, lam=0.01),
        "entmax (alpha=1.5)": lambda x: m.entmax(x, alpha=1.5),
        "entmax (alpha=1.3)": lambda x: m.entmax(x, alpha=1.3),
    }


def _entmax_pkg_methods():
    try:
        import entmax
    except ImportError as err:
        return {}, f"`entmax` package not importable ({err})"
    return {
        "entmax pkg: sparsemax": lambda x: entmax.sparsemax(x, -1),
        "entmax pkg: entmax15": lambda x: entmax.entmax15(x, -1),
        "entmax pkg: entmax_bisect (alpha=1.3)": lambda x: entmax.entmax_bisect(x, 1.3, -1),
    }, "entmax pkg: `entmax` package, entmax_bisect with its default n_iter=50"


def _torchsparseattn_methods():
    """torchsparseattn's prox_tv1d (Cython, in place on one numpy row), looped over rows the
    way its FusedProxFunction.forward does. Its autograd Functions are legacy (non-static
    forward), which current torch refuses to run, so only this forward can be timed."""
    try:
        from torchsparseattn._fused import prox_tv1d
    except ImportError as err:
        return {}, f"torchsparseattn not importable ({err.__class__.__name__}: {err})"

    def rows_prox(x):
        out = x.detach().numpy().copy()
        for row in out:
            prox_tv1d(row, 0.1)
        return out

    note = (
        "torchsparseattn 0.2 builds only with `pip install --no-build-isolation` (its setup.py "
        'imports numpy) and its autograd Functions fail on torch>=2 ("Legacy autograd function '
        'with non-static forward method"), so only its Cython prox_tv1d forward is timed (a Python '
        "loop over numpy rows, as in its own FusedProxFunction), against regattn's prox_tv1d"
    )
    return {"torchsparseattn: prox_tv1d (lam=0.1)": rows_prox}, note


def _methods(device):
    methods = {BASELINE: lambda x: torch.softmax(x, -1)}
    methods.update(regattn_methods())
    methods["regattn: prox_tv1d (lam=0.1)"] = lambda x: mappings.prox_tv1d(x, lam=0.1)
    notes = []
    # torchsparseattn's prox works on numpy rows: CPU only
    others = [_entmax_pkg_methods()] + ([_torchsparseattn_methods()] if device == "cpu" else [])
    for extra, note in others:
        methods.update(extra)
        if note:
            notes.append(note)
    forward_only = {"regattn: prox_tv1d (lam=0.1)", "torchsparseattn: prox_tv1d (lam=0.1)"}
    return methods, forward_only, notes


def timer(fn, x, grad_out, backward):
    # Timer runs its statement on one thread unless told otherwise: every method gets the
    # threads torch would use (the count recorded with the run, --threads to change it)
    threads = torch.get_num_threads()
    if not backward:
        return Timer("fn(x)", globals={"fn": fn, "x": x}, num_threads=threads)
    xg = x.clone().requires_grad_()
    return Timer(
        "torch.autograd.grad(fn(xg), xg, g)",
        globals={"fn": fn, "xg": xg, "g": grad_out, "torch": torch},
        num_threads=threads,
    )


def run(shapes, repeats, min_run_time, seed, device):
    methods, forward_only, notes = _methods(device)
    results = []
    for rows, d in shapes:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(rows, d, generator=g).to(device)
        grad_out = torch.randn(rows, d, generator=g).to(device)
        cases = [
            (name, mode)
            for mode in ("fwd", "fwd+bwd")
            for name in methods
            if not (mode == "fwd+bwd" and name in forward_only)
        ]
        timers = {c: timer(methods[c[0]], x, grad_out, c[1] == "fwd+bwd") for c in cases}
        blocks = {c: [] for c in cases}
        for _ in range(repeats):  # round-robin over the methods
            for c in cases:
                m = timers[c].blocked_autorange(min_run_time=min_run_time)
                blocks[c].extend(m.times)
        for name, mode in cases:
            results.append(
                {
                    "shape": [rows, d],
                    "method": name,
                    "mode": mode,
                    "median_ms": 1e3 * statistics.median(blocks[(name, mode)]),
                    "min_ms": 1e3 * min(blocks[(name, mode)]),
                    "blocks": len(blocks[(name, mode)]),
                }
            )
        base = {
            r["mode"]: r["median_ms"]
            for r in results
            if r["shape"] == [rows, d] and r["method"] == BASELINE
        }
        for r in results:
            if r["shape"] == [rows, d]:
                r["ratio_to_torch_softmax"] = r["median_ms"] / base[r["mode"]]
        print(f"done {rows}x{d}", flush=True)
    return results, notes


def markdown(run_record):
    env = run_record["env"]
    load = env.get("loadavg_1_5_15_before_after")  # absent from the first recorded run
    shapes = [tuple(s) for s in run_record["args"]["shapes"]]
    by_key = {(tuple(r["shape"]), r["method"], r["mode"]): r for r in run_record["results"]}
    methods = list(dict.fromkeys(r["method"] for r in run_record["results"]))
    head = ["method"] + [f"{r}x{d} {mode}" for r, d in shapes for mode in ("fwd", "fwd+bwd")]
    lines = [
        f"# Attention mappings on {env.get('device', 'CPU')} ({run_record['date']})",
        "",
        "median ms (ratio to `torch.softmax` in the same mode, same run). "
        f"commit `{commit_label(env)}`, "
        f"torch {env['torch']}, {env['cpu_model']}, {env['threads']} threads"
        + (f" (load average {load[0][0]:.1f} before the run), " if load else ", ")
        + f"{run_record['args']['repeats']} repeats x min_run_time "
        + f"{run_record['args']['min_run_time']} s"
        + (" (--quick)" if run_record["args"]["quick"] else "")
        + ".",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for method in methods:
        cells = [method]
        for shape in shapes:
            for mode in ("fwd", "fwd+bwd"):
                r = by_key.get((shape, method, mode))
                cells.append(
                    "—"
                    if r is None
                    else f"{r['median_ms']:.3g} ({r['ratio_to_torch_softmax']:.1f}x)"
                )
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "float32, rows x d = (batch·heads·queries) x keys, softmax over d; "
        "fwd+bwd = torch.autograd.grad of the output against a fixed random cotangent; "
        "— = forward only.",
    ]
    lines += [f"- {n}" for n in run_record["notes"]]
    lines += [
        "",
        "All runs (raw block counts, environment): "
        f"`results/bench/{run_record.get('file_stem', 'mappings_cpu')}.json`.",
    ]
    return "\n".join(lines) + "\n"


def _parse_shapes(text):
    return [tuple(int(v) for v in s.lower().split("x")) for s in text.split(",") if s]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes", default=None, help=f"comma-separated ROWSxD (default {DEFAULT_SHAPES})"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="round-robin passes over the methods"
    )
    parser.add_argument(
        "--min-run-time", type=float, default=0.2, help="seconds per blocked_autorange"
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"shapes {QUICK_SHAPES}, 1 repeat, 0.05 s"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=BENCH_RESULTS_DIR)
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help=f"cuda: the Triton kernels, default shapes {CUDA_SHAPES}",
    )
    args = parser.parse_args()
    require_device(args.device)
    if args.quick:
        args.repeats, args.min_run_time = 1, 0.05
    default = CUDA_SHAPES if args.device == "cuda" else DEFAULT_SHAPES
    shapes = _parse_shapes(args.shapes or (QUICK_SHAPES if args.quick else default))
    if args.threads:
        torch.set_num_threads(args.threads)

    device = args.device
    env = environment()
    results, notes = run(shapes, args.repeats, args.min_run_time, args.seed, device)
    record = {
        "args": {
            "shapes": shapes,
            "repeats": args.repeats,
            "min_run_time": args.min_run_time,
            "quick": args.quick,
            "seed": args.seed,
            "device": device,
        },
        "env": environment(before=env),
        "notes": notes,
        "results": results,
    }
    print(
        append_run(
            args.out_dir, f"mappings_{record['env']['device_kind']}", record, markdown
        ).read_text()
    )


if __name__ == "__main__":
    main()
