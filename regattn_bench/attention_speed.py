"""Time the fused sparse attention (regattn.attention) on a GPU against the row-wise path,
torch's scaled_dot_product_attention (flash) and AdaSplash, with peak memory and each
method's deviation from the exact output.

For each sequence length L (1k to 16k tokens by default) and head dim D (64, 128), bf16
q, k, v of shape (1, HEADS, L, D) (HEADS = 16 at D = 64, 8 at D = 128: the same model width),
non-causal and causal, this times the forward pass and forward + backward of:

* regattn fused: sparsemax, 1.5-entmax, alpha-entmax at alpha = 1.3 (a number), and a learned
  alpha (a tensor per head that requires grad: the backward computes d alpha too);
* regattn row-wise: 1.5-entmax by `impl="reference"` (the (L x L) scores, the mapping's Triton
  row kernels, P v), up to L = 4096 (the row kernels' limit);
* sdpa (flash): `torch.nn.functional.scaled_dot_product_attention` with the flash backend
  (softmax attention, the speed to match);
* AdaSplash v1 (`adasplash.adasplash`, block-masked Triton alpha-entmax attention, at its
  default niter = 10) at alpha = 1.3 and 1.5, when `adasplash` imports (it is not a
  dependency: `pip install adasplash`); else the reason is recorded.

Peak memory is torch.cuda.max_memory_allocated over one call, above what the inputs hold.
Deviation: the largest absolute difference from the exact output in float64 (the row-wise
reference on float64 copies of the bf16 inputs; softmax attention for sdpa), over the first
EXACT_ROWS query rows (rows are independent, so a slice is exact and cheap at 16k). The
row-wise path's time at the longest lengths may be an out-of-memory error, which is recorded.

Every run is appended to results/bench/attention_gpu.json (never overwritten) and
results/bench/attention_gpu.md is regenerated from the latest full run. Shapes run shortest
first; `--budget-s` starts no shape after that many seconds (the device script's limit), and
the record names the shapes left out.

    python -m regattn_bench attention                  # the default lengths and head dims
    python -m regattn_bench attention --quick          # 1k and 2k, D = 64, one repeat
    python -m regattn_bench attention --lengths 4096 --head-dims 128 --only "fused|sdpa"

It needs a CUDA device (the fused kernels' speed is measured on GPUs only) and exits with a
message without one.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from regattn.attention import sparse_attention
from regattn.attention.reference import dense_reference
from regattn_checkout.paths import BENCH_RESULTS_DIR

from .mapping_speed import require_device
from .run_record import append_run, commit_label, environment

DEFAULT_LENGTHS = "1024,2048,4096,8192,16384"
DEFAULT_HEAD_DIMS = "64,128"
QUICK_LENGTHS = "1024,2048"
WIDTH = 1024  # heads * head dim
EXACT_ROWS = 128
BASELINE = "sdpa (flash)"
ROW_WISE = "regattn row-wise: 1.5-entmax"
ROW_WISE_MAX = 4096  # the mappings' Triton row kernels take rows up to 4096 keys


def _adasplash():
    """(adasplash's attention function, note): the function is None with the reason."""
    try:
        import adasplash
    except ImportError as err:
        return None, f"AdaSplash not importable ({err}); `pip install adasplash` to compare"
    fn = getattr(adasplash, "adasplash", None)
    if fn is None:
        return None, f"adasplash {_version('adasplash')} has no `adasplash` attention function"
    return (
        fn,
        f"adasplash {_version('adasplash')}: `adasplash(q, k, v, alpha, is_causal)`, niter=10",
    )


def _version(package):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def methods(heads: int, device):
    """{name: (fn(q, k, v, causal), the alpha of the alpha-entmax it computes (1: softmax))},
    and notes."""
    learned = torch.full((heads,), 1.5, device=device, requires_grad=True)
    table = {
        "regattn fused: sparsemax": (
            lambda q, k, v, c: sparse_attention(q, k, v, alpha=2.0, causal=c, impl="fused"),
            2.0,
        ),
        "regattn fused: 1.5-entmax": (
            lambda q, k, v, c: sparse_attention(q, k, v, alpha=1.5, causal=c, impl="fused"),
            1.5,
        ),
        "regattn fused: entmax alpha=1.3": (
            lambda q, k, v, c: sparse_attention(q, k, v, alpha=1.3, causal=c, impl="fused"),
            1.3,
        ),
        "regattn fused: learned alpha (with d alpha)": (
            lambda q, k, v, c: sparse_attention(q, k, v, alpha=learned, causal=c, impl="fused"),
            1.5,
        ),
        ROW_WISE: (
            lambda q, k, v, c: sparse_attention(q, k, v, alpha=1.5, causal=c, impl="reference"),
            1.5,
        ),
        BASELINE: (_sdpa_flash, 1.0),
    }
    ada, note = _adasplash()
    if ada is not None:
        for alpha in (1.3, 1.5):
            table[f"adasplash v1: alpha={alpha}"] = (
                lambda q, k, v, c, a=alpha: ada(q, k, v, alpha=a, is_causal=c),
                alpha,
            )
    return table, [note]


def _sdpa_flash(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def exact(q, k, v, alpha, causal):
    """The exact output of the first EXACT_ROWS queries, in float64, of alpha-entmax attention
    (alpha = 1: softmax's)."""
    q64, k64, v64 = (x.detach().double() for x in (q[:, :, :EXACT_ROWS], k, v))
    scale = 1.0 / math.sqrt(q.shape[-1])
    if alpha == 1:
        scores = q64 @ k64.transpose(-1, -2) * scale
        if causal:
            rows, keys = scores.shape[-2:]
            scores = scores.masked_fill(
                ~torch.ones(rows, keys, dtype=torch.bool, device=q.device).tril(), float("-inf")
            )
        return torch.softmax(scores, -1) @ v64
    return dense_reference(q64, k64, v64, alpha, None, causal, scale)


def _timer(fn, q, k, v, causal, grad, backward):
    if not backward:
        return Timer("fn(q, k, v, c)", globals={"fn": fn, "q": q, "k": k, "v": v, "c": causal})
    return Timer(
        "torch.autograd.grad(fn(q, k, v, c), (q, k, v), g)",
        globals={"fn": fn, "q": q, "k": k, "v": v, "c": causal, "g": grad, "torch": torch},
    )


def _peak_mib(fn, q, k, v, causal, grad, backward):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(q, k, v, causal)
    if backward:
        torch.autograd.grad(out, (q, k, v), grad)
    del out
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def run(lengths, head_dims, causals, repeats, min_run_time, seed, only=None, budget_s=None):
    """The rows of every (L, D, causal), shortest L first; with budget_s, no shape is started
    after that many seconds (the record then says which shapes were left out).
    """
    results, notes, skipped = [], [], []
    start = time.monotonic()
    for n in lengths:
        for d in head_dims:
            heads = WIDTH // d
            table, notes = methods(heads, torch.device("cuda"))
            if only:
                pattern = re.compile(only)
                table = {k: m for k, m in table.items() if k == BASELINE or pattern.search(k)}
            if n > ROW_WISE_MAX:
                table.pop(ROW_WISE, None)
            for causal in causals:
                if budget_s is not None and time.monotonic() - start > budget_s:
                    skipped.append(f"L={n} D={d} causal={causal}")
                    continue
                results += _one_shape(table, n, d, heads, causal, repeats, min_run_time, seed)
    if any(n > ROW_WISE_MAX for n in lengths):
        notes.append(
            f"{ROW_WISE}: timed up to L = {ROW_WISE_MAX} only (longer rows leave the mappings' "
            "Triton row kernels for their torch reference path, and its (L x L) scores)"
        )
    if skipped:
        notes.append(f"not run (the --budget-s of {budget_s} s was spent): {', '.join(skipped)}")
    return results, notes


def _one_shape(table, n, d, heads, causal, repeats, min_run_time, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, grad = (
        torch.randn(1, heads, n, d, generator=g, device="cuda", dtype=torch.bfloat16)
        for _ in range(4)
    )
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    cases = [(name, mode) for mode in ("fwd", "fwd+bwd") for name in table]
    timers, blocks, failed, extra = {}, {c: [] for c in cases}, {}, {}
    exact_cache = {}
    for name, (fn, alpha) in table.items():
        try:
            with torch.no_grad():
                out = fn(q, k, v, causal)[:, :, :EXACT_ROWS].double()
            if alpha not in exact_cache:
                exact_cache[alpha] = exact(q, k, v, alpha, causal)
            extra[name] = {"max_abs_diff_vs_exact": (out - exact_cache[alpha]).abs().max().item()}
            for mode in ("fwd", "fwd+bwd"):
                extra[(name, mode)] = _peak_mib(fn, q, k, v, causal, grad, mode == "fwd+bwd")
        except (torch.OutOfMemoryError, RuntimeError, ValueError, TypeError) as error:
            for mode in ("fwd", "fwd+bwd"):
                failed[(name, mode)] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
            torch.cuda.empty_cache()
    for c in cases:
        if c not in failed:
            timers[c] = _timer(table[c[0]][0], q, k, v, causal, grad, c[1] == "fwd+bwd")
    for _ in range(repeats):  # round-robin over the methods
        for c in cases:
            if c in failed:
                continue
            try:
                blocks[c].extend(timers[c].blocked_autorange(min_run_time=min_run_time).times)
            except torch.OutOfMemoryError as error:
                failed[c] = f"out of memory ({str(error).splitlines()[0][:120]})"
                torch.cuda.empty_cache()
    rows = []
    for name, mode in cases:
        times = blocks[(name, mode)]
        rows.append(
            {
                "length": n,
                "head_dim": d,
                "heads": heads,
                "causal": causal,
                "method": name,
                "mode": mode,
                "median_ms": 1e3 * statistics.median(times) if times else None,
                "blocks": len(times),
                "peak_mib": extra.get((name, mode)),
                **extra.get(name, {}),
                **({"error": failed[(name, mode)]} if (name, mode) in failed else {}),
            }
        )
    base = {r["mode"]: r["median_ms"] for r in rows if r["method"] == BASELINE}
    for r in rows:
        ok = r["median_ms"] is not None and base.get(r["mode"])
        r["ratio_to_sdpa_flash"] = r["median_ms"] / base[r["mode"]] if ok else None
        print(json.dumps(r), flush=True)
    del q, k, v, grad, timers
    torch.cuda.empty_cache()
    return rows


def markdown(record) -> str:
    env = record["env"]
    lines = [
        "# Fused sparse attention on a GPU (python -m regattn_bench attention)",
        "",
        f"{env['device']}, torch {env['torch']}, triton {env.get('triton')}, commit "
        f"{commit_label(env)}, {env['date']}. bf16 q, k, v of (1, heads, L, D), heads x D = "
        f"{WIDTH}. Median ms (ratio to sdpa flash), peak MiB above the inputs, and the largest "
        f"absolute deviation from the exact float64 output over the first {EXACT_ROWS} queries.",
        "",
    ]
    lines += [f"- {note}" for note in record["notes"] if note]
    lines.append("")
    for mode in ("fwd", "fwd+bwd"):
        header = "| L | D | causal | method | ms | x sdpa | peak MiB | max dev |"
        lines += [f"## {mode}", "", header, "|---|---|---|---|---|---|---|---|"]
        for r in record["results"]:
            if r["mode"] != mode:
                continue
            ms = "—" if r["median_ms"] is None else f"{r['median_ms']:.3f}"
            ratio = "" if r["ratio_to_sdpa_flash"] is None else f"{r['ratio_to_sdpa_flash']:.2f}"
            peak = "" if r["peak_mib"] is None else f"{r['peak_mib']:.0f}"
            dev = r.get("max_abs_diff_vs_exact")
            dev = "" if dev is None else f"{dev:.1e}"
            name = r["method"] + (f" ({r['error']})" if "error" in r else "")
            lines.append(
                f"| {r['length']} | {r['head_dim']} | {r['causal']} | {name} | {ms} | {ratio} "
                f"| {peak} | {dev} |"
            )
        lines.append("")
    return "\n".join(lines)


def _ints(text):
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default=DEFAULT_LENGTHS, help="comma-separated L")
    parser.add_argument("--head-dims", default=DEFAULT_HEAD_DIMS, help="comma-separated D")
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--repeats", type=int, default=2, help="round-robin passes")
    parser.add_argument("--min-run-time", type=float, default=0.1, help="s per autorange")
    parser.add_argument("--quick", action="store_true", help=f"L {QUICK_LENGTHS}, D 64, 1 pass")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="regular expression of methods to time")
    parser.add_argument(
        "--budget-s", type=float, default=None, help="start no shape after this many seconds"
    )
    parser.add_argument("--out-dir", type=Path, default=BENCH_RESULTS_DIR)
    args = parser.parse_args(argv)
    require_device("cuda")
    lengths, head_dims = _ints(args.lengths), _ints(args.head_dims)
    if args.quick:
        lengths, head_dims, args.repeats = _ints(QUICK_LENGTHS), [64], 1
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    env = environment()
    results, notes = run(
        lengths,
        head_dims,
        causals,
        args.repeats,
        args.min_run_time,
        args.seed,
        args.only,
        args.budget_s,
    )
    record = {
        "args": {
            "lengths": lengths,
            "head_dims": head_dims,
            "causal": args.causal,
            "repeats": args.repeats,
            "min_run_time": args.min_run_time,
            "quick": args.quick,
            "seed": args.seed,
            "only": args.only,
            "budget_s": args.budget_s,
        },
        "env": environment(before=env),
        "notes": notes,
        "results": results,
    }
    print(append_run(args.out_dir, "attention_gpu", record, markdown).read_text())


if __name__ == "__main__":
    main()
