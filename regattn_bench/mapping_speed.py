"""Time every attention mapping on CPU or CUDA, as a ratio to torch.softmax in the same run.

For each (rows x d) shape this times the forward pass alone and forward+backward of every
regattn mapping, of the `entmax` package (sparsemax, entmax15, entmax_bisect) and, when they
import: on CPU, torchsparseattn's Cython prox_tv1d (forward only: its autograd Functions do not
run on current torch); on CUDA, AdaSplash's row-wise Triton kernels (`triton_sparsemax`,
`triton_entmax15`, `triton_entmax` at their defaults). Each other library's output is compared
with regattn's for the same mapping on the timed input, and the largest absolute difference is
recorded beside its time (AdaSplash's default iteration counts are approximate).

Methods are measured round-robin, `--repeats` times each, so that a
shared, noisy machine slows every method alike; the reported time is the median block time
(torch.utils.benchmark.Timer.blocked_autorange) over all repeats.

Every run is appended to results/bench/mappings_cpu.json (never overwritten) and the
markdown table results/bench/mappings_cpu.md is regenerated from the latest full run.

    python -m regattn_bench mappings                  # the three attention shapes of issue #2
    python -m regattn_bench mappings --quick          # small shapes, short timings (smoke test)
    python -m regattn_bench mappings --shapes 2048x64 --repeats 5 --min-run-time 0.5
    python -m regattn_bench mappings --device cuda    # the Triton kernels at fairseq shapes

With --device cuda the default shapes are CUDA_SHAPES and the mappings run their Triton
kernels (torch.utils.benchmark synchronizes around each timed block); without a CUDA device it
exits with a message.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
from pathlib import Path

import torch
from torch.utils.benchmark import Timer

from regattn import mappings
from regattn_checkout.paths import BENCH_RESULTS_DIR

from .bench_configs import bench_config
from .run_record import append_run, commit_label, environment

DEFAULT_SHAPES = "4096x50,16384x30,1024x400"
QUICK_SHAPES = "256x50,128x400"
# --device cuda: rows = batch * heads * queries in {64k, 1M}, d (keys) in {32, 128, 512, 2048}
CUDA_SHAPES = (
    "65536x32,65536x128,65536x512,65536x2048,1048576x32,1048576x128,1048576x512,1048576x2048"
)
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


# the regattn mappings timed, the CPU targets and the other libraries' counterparts
# (configs/bench/mapping_speed.yaml)
_CONFIG = bench_config("mapping_speed")


def regattn_methods():
    """label -> x -> the mapping of x over its last dim, at the label's parameters."""
    return {
        label: functools.partial(getattr(mappings, spec["mapping"]), **spec.get("params", {}))
        for label, spec in _CONFIG["regattn"].items()
    }


# The CPU targets (issue #28): forward+backward at most this multiple of torch.softmax's, at
# every shape of a quiet-machine run.
CPU_TARGETS = _CONFIG["cpu_targets"]


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


def _adasplash_methods():
    try:
        import adasplash
    except ImportError as err:
        return {}, f"AdaSplash not importable ({err})"
    return {
        "adasplash: triton_sparsemax": lambda x: adasplash.triton_sparsemax(x),
        "adasplash: triton_entmax15": lambda x: adasplash.triton_entmax15(x),
        "adasplash: triton_entmax (alpha=1.3)": lambda x: adasplash.triton_entmax(x, alpha=1.3),
    }, (
        f"adasplash: AdaSplash {_version('adasplash')} row-wise Triton kernels at their defaults "
        "(triton_entmax: n_iter=2 with histogram initialisation); `max |diff|` is their largest "
        "deviation from regattn's exact mapping on the timed input"
    )


# each other library's method and the regattn method that computes the same mapping
SAME_MAPPING = _CONFIG["same_mapping"]


def _version(package):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "(version unknown)"


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
    # torchsparseattn's prox works on numpy rows: CPU only; AdaSplash's kernels are Triton's
    extra = _torchsparseattn_methods() if device == "cpu" else _adasplash_methods()
    others = [_entmax_pkg_methods(), extra]
    for extra, note in others:
        methods.update(extra)
        if note:
            notes.append(note)
    forward_only = {"regattn: prox_tv1d (lam=0.1)", "torchsparseattn: prox_tv1d (lam=0.1)"}
    return methods, forward_only, notes


def timer(fn, x, grad_out, backward, xg=None):
    """A Timer of fn(x) (backward=False) or of the gradient of fn at x against grad_out.

    xg, a leaf copy of x that requires grad, may be shared by every backward timer of a shape
    (at 1M x 2048 one copy is 8.6 GB of GPU memory); one is made when it is not given."""
    # Timer runs its statement on one thread unless told otherwise: every method gets the
    # threads torch would use (the count recorded with the run, --threads to change it)
    threads = torch.get_num_threads()
    if not backward:
        return Timer("fn(x)", globals={"fn": fn, "x": x}, num_threads=threads)
    xg = x.clone().requires_grad_() if xg is None else xg
    return Timer(
        "torch.autograd.grad(fn(xg), xg, g)",
        globals={"fn": fn, "xg": xg, "g": grad_out, "torch": torch},
        num_threads=threads,
    )


def run(shapes, repeats, min_run_time, seed, device, only=None):
    methods, forward_only, notes = _methods(device)
    if only:  # torch.softmax, the baseline of every ratio, is always timed
        pattern = re.compile(only)
        methods = {k: f for k, f in methods.items() if k == BASELINE or pattern.search(k)}
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
        xg = x.clone().requires_grad_()
        timers = {c: timer(methods[c[0]], x, grad_out, c[1] == "fwd+bwd", xg) for c in cases}
        deviation = {}
        with torch.no_grad():
            for other, same in SAME_MAPPING.items():
                if other in methods:
                    diff = methods[other](x).float() - methods[same](x).float()
                    deviation[other] = diff.abs().max().item()
        blocks = {c: [] for c in cases}
        failed = {}
        for _ in range(repeats):  # round-robin over the methods
            for c in cases:
                if c in failed:
                    continue
                try:
                    blocks[c].extend(timers[c].blocked_autorange(min_run_time=min_run_time).times)
                except torch.OutOfMemoryError as error:
                    # a method that does not fit at this shape is a result, not a lost run
                    failed[c] = f"out of memory ({str(error).splitlines()[0][:120]})"
                    if device == "cuda":
                        torch.cuda.empty_cache()
        shape_results = []
        for name, mode in cases:
            times = blocks[(name, mode)]
            shape_results.append(
                {
                    "shape": [rows, d],
                    "method": name,
                    "mode": mode,
                    "median_ms": 1e3 * statistics.median(times) if times else None,
                    "min_ms": 1e3 * min(times) if times else None,
                    "blocks": len(times),
                    **({"error": failed[(name, mode)]} if (name, mode) in failed else {}),
                    **({"max_abs_diff": deviation[name]} if name in deviation else {}),
                }
            )
        base = {r["mode"]: r["median_ms"] for r in shape_results if r["method"] == BASELINE}
        for r in shape_results:
            ratio = None if r["median_ms"] is None else r["median_ms"] / base[r["mode"]]
            r["ratio_to_torch_softmax"] = ratio
            # one line per result as it lands: a run cut short still shows what it measured
            print(json.dumps(r), flush=True)
        results += shape_results
        del x, grad_out, xg, timers
        if device == "cuda":
            torch.cuda.empty_cache()  # the next shape's tensors, not this one's cache
        print(f"done {rows}x{d}", flush=True)
    return results, notes


def _shape_label(rows, d):
    return f"{rows // 1024}k x {d}" if rows % 1024 == 0 and rows >= 65536 else f"{rows}x{d}"


def _mode_table(run_record, mode):
    """One markdown table of one mode: a row per method, a column per shape."""
    shapes = [tuple(s) for s in run_record["args"]["shapes"]]
    by_key = {(tuple(r["shape"]), r["method"], r["mode"]): r for r in run_record["results"]}
    methods = list(dict.fromkeys(r["method"] for r in run_record["results"]))
    head = ["method"] + [_shape_label(*shape) for shape in shapes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method in methods:
        cells = [method]
        for shape in shapes:
            r = by_key.get((shape, method, mode))
            if r is None:
                cells.append("—")
            elif r["median_ms"] is None:
                cells.append(r["error"].split(" (")[0])
            else:
                cells.append(f"{r['median_ms']:.3g} ({r['ratio_to_torch_softmax']:.2f}x)")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _target_table(run_record):
    """Each CPU target's verdict in this run: the forward+backward ratio to torch.softmax at
    every shape, met (≤ target) or missed, and whether all were met together."""
    if run_record["env"].get("device_kind") == "gpu":
        return []
    shapes = [tuple(s) for s in run_record["args"]["shapes"]]
    ratios = {
        (r["method"], tuple(r["shape"])): r["ratio_to_torch_softmax"]
        for r in run_record["results"]
        if r["mode"] == "fwd+bwd" and r["method"] in CPU_TARGETS
    }
    head = ["method", "target"] + [_shape_label(*shape) for shape in shapes]
    lines = ["", "Targets (forward + backward, at most the target times `torch.softmax`):", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    verdicts = []
    for method, target in CPU_TARGETS.items():
        cells = [method, f"≤ {target:g}x"]
        for shape in shapes:
            ratio = ratios.get((method, shape))
            if ratio is None:
                cells.append("not timed")
                verdicts.append(False)
                continue
            met = ratio <= target
            verdicts.append(met)
            cells.append(f"{ratio:.2f}x {'met' if met else 'missed'}")
        lines.append("| " + " | ".join(cells) + " |")
    met, total = sum(verdicts), len(verdicts)
    lines += ["", f"{met} of {total} targets met in this run" + (": all." if met == total else ".")]
    return lines


def _deviation_table(run_record):
    """Largest |difference| of each other library's output from regattn's, per shape."""
    shapes = [tuple(s) for s in run_record["args"]["shapes"]]
    rows = {}
    for r in run_record["results"]:
        if r["mode"] == "fwd" and "max_abs_diff" in r:
            rows.setdefault(r["method"], {})[tuple(r["shape"])] = r["max_abs_diff"]
    if not rows:
        return []
    head = ["method (vs regattn, same mapping)"] + [_shape_label(*s) for s in shapes]
    lines = ["", "max |difference| from regattn's output on the timed input (float32):", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, cells in rows.items():
        lines.append(
            "| "
            + " | ".join([method] + [f"{cells[s]:.1e}" if s in cells else "—" for s in shapes])
            + " |"
        )
    return lines


def markdown(run_record):
    env = run_record["env"]
    load = env.get("loadavg_1_5_15_before_after")  # absent from the first recorded run
    gpu = env.get("device_kind") == "gpu"
    where = (
        f"CUDA {env.get('cuda')}, driver {env.get('gpu_driver')}, triton {env.get('triton')}"
        if gpu
        else f"{env['cpu_model']}, {env['threads']} threads"
    )
    lines = [
        f"# Attention mappings on {env.get('device', 'CPU')} ({run_record['date']})",
        "",
        "median ms (ratio to `torch.softmax` in the same mode, same run). "
        f"commit `{commit_label(env)}`, torch {env['torch']}, {where}"
        + (f" (load average {load[0][0]:.1f} before the run), " if load and not gpu else ", ")
        + f"{run_record['args']['repeats']} repeats x min_run_time "
        + f"{run_record['args']['min_run_time']} s"
        + (" (--quick)" if run_record["args"]["quick"] else "")
        + (
            f"; only the methods matching `{run_record['args']['only']}`"
            if run_record["args"].get("only")
            else ""
        )
        + ".",
        "",
        "Forward:",
        "",
        *_mode_table(run_record, "fwd"),
        "",
        "Forward + backward:",
        "",
        *_mode_table(run_record, "fwd+bwd"),
        *_target_table(run_record),
        *_deviation_table(run_record),
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


def main(argv: list[str] | None = None) -> None:
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
    parser.add_argument(
        "--only",
        default=None,
        help="time only the methods whose name matches this regular expression (and the baseline)",
    )
    parser.add_argument("--out-dir", type=Path, default=BENCH_RESULTS_DIR)
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help=f"cuda: the Triton kernels, default shapes {CUDA_SHAPES}",
    )
    args = parser.parse_args(argv)
    require_device(args.device)
    if args.quick:
        args.repeats, args.min_run_time = 1, 0.05
    default = CUDA_SHAPES if args.device == "cuda" else DEFAULT_SHAPES
    shapes = _parse_shapes(args.shapes or (QUICK_SHAPES if args.quick else default))
    if args.threads:
        torch.set_num_threads(args.threads)

    device = args.device
    env = environment()
    results, notes = run(shapes, args.repeats, args.min_run_time, args.seed, device, args.only)
    record = {
        "args": {
            "shapes": shapes,
            "repeats": args.repeats,
            "min_run_time": args.min_run_time,
            "quick": args.quick,
            "seed": args.seed,
            "device": device,
            "only": args.only,
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
