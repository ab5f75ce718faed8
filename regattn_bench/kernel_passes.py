"""The row kernels' pass table: per Triton kernel, the global reads and writes per row, the
reductions over the row and the threshold search's steps, counted in Triton's interpreter on
the tests' own inputs. No timing: the counts are properties of the algorithms, the same on a
GPU (where the bench's ncu pass relates them to time).

How the counting works (`count_kernel_passes`): under TRITON_INTERPRET=1 every program of a
launch runs in Python, and this patches, for the duration of a `with` block,

- the interpreter's memory operations (`interpreter_builder.create_masked_load` and
  `create_masked_store`; the unmasked ones go through them): the elements read and written,
  counting only the lanes whose mask is on, i.e. the global memory a compiled program touches
  (the scores, the mask, per-row scalars, and scratch kept in the outputs);
- its reductions and scans (`ReduceScanOpInterface.apply`) along the last axis, the row's
  positions, of at least 16 lanes: a pass over the on-chip row (reductions across a
  program's rows and the compare-and-swap stages of `tl.sort`, over axes of 2, do not count);
- `regattn.mappings._triton._search_step`, the no-op each threshold search calls once per
  step (with the rows whose step was a bisection): the steps and the bisection steps;

each per program (`set_grid_idx` starts one), grouped by launch (`GridExecutor.__call__`
starts one, named after the kernel).

Entry point: `python -m regattn_bench kernel-passes` (`make bench-kernel-passes`) writes
results/bench/row_kernel_passes.md and appends the run, with the commit and versions, to
results/bench/row_kernel_passes.json.

    TRITON_INTERPRET=1 python -m regattn_bench kernel-passes --label before
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from regattn_checkout.paths import BENCH_RESULTS_DIR, REPO_ROOT

from .bench_configs import bench_config
from .run_record import _version, append_run, commit_label, environment

# a reduction or scan is a pass over the row when it runs along the last axis (the row's
# positions) of at least this many lanes: not over a program's rows, nor over tl.sort's pairs
ROW_AXIS_MIN = 16


@dataclass
class ProgramCounts:
    """What one program (one block of rows) did."""

    reads: int = 0  # elements loaded from global memory
    writes: int = 0  # elements stored to global memory
    reductions: int = 0  # reductions and scans over a row axis
    steps: int = 0  # threshold-search steps (calls of _search_step)
    bisections: int = 0  # those of them that bisected a row of the program


@dataclass
class Launch:
    """One kernel launch: its kernel's name and its programs' counts, in launch order."""

    kernel: str
    programs: list[ProgramCounts] = field(default_factory=list)

    def total(self, what: str) -> int:
        return sum(getattr(p, what) for p in self.programs)


@contextlib.contextmanager
def count_kernel_passes():
    """Counts what every Triton kernel launched within the block does (see the module's
    docstring). Needs TRITON_INTERPRET=1 (set before triton was imported).

    Returns
    -------
    object
        A context manager yielding the list of `Launch`es, filled as kernels run.

    Raises
    ------
    RuntimeError
        Triton is not running in its interpreter: a compiled kernel cannot be counted.
    """
    from triton.runtime import interpreter

    from regattn.mappings import _kernels, _triton

    if not _kernels.triton_interpreting():
        raise RuntimeError(
            "counting kernel passes needs Triton's interpreter: set TRITON_INTERPRET=1 before "
            "triton is imported"
        )
    launches: list[Launch] = []
    builder = interpreter.interpreter_builder

    def program() -> ProgramCounts:
        return launches[-1].programs[-1]

    def masked_load(ptrs, mask, *args, **kwargs):
        program().reads += int(np.count_nonzero(mask.data))
        return original_load(ptrs, mask, *args, **kwargs)

    def masked_store(ptrs, value, mask, *args, **kwargs):
        program().writes += int(np.count_nonzero(mask.data))
        return original_store(ptrs, value, mask, *args, **kwargs)

    def set_grid_idx(x, y, z):
        launches[-1].programs.append(ProgramCounts())
        return original_grid_idx(x, y, z)

    def apply(self, input):
        # a single tensor comes back here as a 1-tuple: count that call
        shape = list(input[0].shape) if isinstance(input, tuple) else []
        along_rows = self.axis is None or self.axis in (len(shape) - 1, -1)
        if shape and along_rows and shape[-1] >= ROW_AXIS_MIN:
            program().reductions += 1
        return original_apply(self, input)

    def launch(self, *args, **kwargs):
        launches.append(Launch(self.fn.__name__))
        return original_call(self, *args, **kwargs)

    def search_step(bisected):
        counts = program()
        counts.steps += 1
        data = bisected.handle.data if hasattr(bisected, "handle") else np.asarray(bisected)
        counts.bisections += int(bool(np.any(data)))

    original_load, original_store = builder.create_masked_load, builder.create_masked_store
    original_grid_idx = builder.set_grid_idx
    original_apply = interpreter.ReduceScanOpInterface.apply
    original_call = interpreter.GridExecutor.__call__
    original_step = _triton._search_step
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.set_grid_idx = set_grid_idx
    interpreter.ReduceScanOpInterface.apply = apply
    interpreter.GridExecutor.__call__ = launch
    _triton._search_step = search_step
    try:
        yield launches
    finally:
        del builder.create_masked_load, builder.create_masked_store, builder.set_grid_idx
        interpreter.ReduceScanOpInterface.apply = original_apply
        interpreter.GridExecutor.__call__ = original_call
        _triton._search_step = original_step


# --- the inputs: the tests' own (tests/mappings/mapping_helpers.py, test_triton_kernels.py)


def _test_inputs():
    """{label: [(x, mask), ...]}: the inputs the interpreter tests give the row kernels."""
    path = REPO_ROOT / "tests" / "mappings" / "mapping_helpers.py"
    spec = importlib.util.spec_from_file_location("mapping_helpers", path)
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)

    def case(seed, rows=4, d=13):  # test_triton_kernels.case
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(rows, d, generator=g, dtype=torch.float64).mul(2)
        mask = torch.rand(rows, d, generator=g) > 0.3
        mask[:, 0] = True
        return x, mask

    tests = []
    for kind in ("random", "ties"):  # test_triton_oracle
        scores, mask = helpers.oracle_problem(kind)
        tests.append((torch.from_numpy(scores), torch.from_numpy(mask)))
    for seed in range(28):  # test_triton_kernels: seeds key * 4 + masked
        x, mask = case(seed)
        tests.append((x, mask if seed % 2 else None))
    x, mask = case(11, rows=2, d=300)  # the long row with ties
    x[1] = x[1].round()
    tests.append((x, mask))
    return tests


def _wide_inputs(d_values):
    """Random rows (N(0, 4), no mask) at the benchmark's row lengths and the longest a
    kernel takes, 2 rows each."""
    g = torch.Generator().manual_seed(48)
    return [(torch.randn(2, d, generator=g, dtype=torch.float64).mul(2), None) for d in d_values]


# (label, mapping, params), params["alpha"] "per-row" for an alpha per row
# (configs/bench/kernel_passes.yaml)
MAPPINGS = tuple(
    (label, spec["mapping"], spec["params"])
    for label, spec in bench_config("kernel_passes")["mappings"].items()
)


def _params(params, rows, dtype):
    if params.get("alpha") != "per-row":
        return params
    alphas = torch.tensor([1.2, 1.5, 1.8, 2.5], dtype=dtype)  # test_triton_tensor_alpha_...
    return {"alpha": alphas.repeat(rows // 4 + 1)[:rows].view(rows, 1)}


def count_mapping(name, params, inputs, dtype=torch.float32):
    """The launches of `name`'s forward and backward on each (x, mask) of `inputs` (x cast to
    `dtype`), as [(rows, d, [Launch, ...]), ...]."""
    from regattn import mappings

    out = []
    for x, mask in inputs:
        x = x.to(dtype).clone().requires_grad_()
        grad = torch.ones_like(x).cumsum(-1).remainder(3) - 1  # a fixed, varied cotangent
        with mappings.backend("triton"), count_kernel_passes() as launches:
            y = getattr(mappings, name)(x, mask=mask, **_params(params, x.shape[0], dtype))
            y.backward(grad)
        out.append((x.shape[0], x.shape[1], launches))
    return out


def summarize(runs) -> dict:
    """Per kernel (in launch order): median and worst over programs of the reads and writes
    per row (in units of the row length d), reductions, steps and bisection steps per program,
    and the rows per program."""
    table: dict = {}
    for rows, d, launches in runs:
        for launch in launches:
            entry = table.setdefault(launch.kernel, {k: [] for k in _COLUMNS})
            per_program = -(-rows // len(launch.programs))
            entry["rows_per_program"].append(per_program)
            for p in launch.programs:
                entry["reads_per_row_d"].append(p.reads / per_program / d)
                entry["writes_per_row_d"].append(p.writes / per_program / d)
                entry["reductions"].append(p.reductions)
                entry["steps"].append(p.steps)
                entry["bisections"].append(p.bisections)
    return {
        kernel: {k: {"median": statistics.median(v), "worst": max(v)} for k, v in columns.items()}
        for kernel, columns in table.items()
    }


_COLUMNS = (
    "rows_per_program",
    "reads_per_row_d",
    "writes_per_row_d",
    "reductions",
    "steps",
    "bisections",
)


def measure(wide_d=(32, 128, 512, 2048, 4096), grouped_wide_d=(32, 128)) -> dict:
    """The pass table's data: {mapping label: {"tests": summary, "wide": summary}}, float32.
    The grouped mappings' (those whose regularizer ties positions, `Declaration.ties`) prox
    loops are slow in the interpreter, hence their shorter wide rows."""
    from regattn import mappings

    data = {}
    for label, name, params in MAPPINGS:
        grouped = mappings.declaration(name).ties is not None
        wide = _wide_inputs(grouped_wide_d if grouped else wide_d)
        data[label] = {
            "tests": summarize(count_mapping(name, params, _test_inputs())),
            "wide": summarize(count_mapping(name, params, wide)),
        }
    return data


def _cell(stat, digits=0):
    return f"{stat['median']:.{digits}f} / {stat['worst']:.{digits}f}"


def markdown(record: dict, before: dict | None = None) -> str:
    """The pass table of a run (and of the `before` run, when given) as markdown."""
    lines = [
        "# Row kernels: passes over memory and threshold-search steps",
        "",
        "Counted in Triton's interpreter (`regattn_bench.kernel_passes`; no timing), float32,",
        "forward and backward of each mapping on the Triton backend. Cells are "
        "median / worst over programs.",
        "",
        "- *reads*, *writes*: elements of global memory per row, in units of the row length d "
        "(scores, mask bytes, per-row scalars and scratch in the outputs all count one per "
        "element);",
        "- *reductions*: reductions and scans over a row axis, per program (a program holds "
        "*rows/prog* rows);",
        "- *steps*: threshold-search steps per program (bisection, Newton/Halley and exact "
        "finishing steps), *bisect*: those that bisected.",
        "",
        "Inputs: *tests*: the interpreter tests' rows (test_triton_oracle's random and tied "
        "4 x 7, test_triton_kernels' 4 x 13 cases with and without a mask, its 2 x 300 row "
        "with ties); *wide*: 2 random rows N(0, 4) at d = 32, 128, 512, 2048, 4096 (fusedmax, "
        "oscarmax: 32, 128). For fusedmax and oscarmax, *steps* are the simplex projection's; "
        "the prox's sequential scalar loops are not steps of a search (their loads and stores "
        "count). Torch ops around the kernels are not counted: softmax's backward (torch's own) "
        "and, before #48, the grouped mappings' group means (index_add_).",
        "",
    ]
    runs = (
        [("before", before), (record.get("label", "run"), record)]
        if before
        else [(record.get("label", "run"), record)]
    )
    for run_label, run in runs:
        e = run["env"]
        lines += [
            f"## {run_label}: commit {commit_label(e)} ({e['date']}; torch {e['torch']}, "
            f"triton {run.get('triton')})",
            "",
            "| mapping | inputs | kernel | rows/prog | reads (×d) | writes (×d) | reductions "
            "| steps | bisect |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for label, groups in run["data"].items():
            for inputs, kernels in groups.items():
                for kernel, stats in kernels.items():
                    lines.append(
                        f"| {label} | {inputs} | `{kernel}` | "
                        f"{_cell(stats['rows_per_program'], 0)} | "
                        f"{_cell(stats['reads_per_row_d'], 2)} | "
                        f"{_cell(stats['writes_per_row_d'], 2)} | "
                        f"{_cell(stats['reductions'], 0)} | {_cell(stats['steps'], 0)} | "
                        f"{_cell(stats['bisections'], 0)} |"
                    )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Counts the row kernels' passes and writes the table (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="run", help="the run's name in the table")
    parser.add_argument("--out-dir", type=Path, default=BENCH_RESULTS_DIR)
    args = parser.parse_args(argv)
    env = environment()
    with np.errstate(all="ignore"):  # the interpreter evaluates both sides of tl.where
        data = measure()
    record = {
        "args": {"label": args.label},
        "label": args.label,
        "triton": _version("triton"),
        "env": environment(before=env),
        "data": data,
    }
    stem = "row_kernel_passes"
    json_path = args.out_dir / f"{stem}.json"
    before = None
    if args.label != "before" and json_path.exists():
        earlier = [r for r in json.loads(json_path.read_text())["runs"] if r["label"] == "before"]
        before = earlier[-1] if earlier else None
    print(append_run(args.out_dir, stem, record, lambda r: markdown(r, before)).read_text())
