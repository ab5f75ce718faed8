"""Each compiled kernel is declared five times, and the five declarations agree: its pybind
function and its TORCH_LIBRARY schema and CPU implementation (csrc/regattn_cpu.cpp), and in
mappings/_kernels.py its name in KERNEL_OPS and its fake implementation, whose arguments are the
schema's. A kernel added to one list and forgotten in another fails here, not at import time
on a machine that built the extension."""

import inspect
import re
from pathlib import Path

from regattn.mappings import _kernels

SOURCE = (Path(_kernels.__file__).parents[1] / "csrc" / "regattn_cpu.cpp").read_text()
# pybind functions that are not kernels: a switch of the extension, and softmax's host-side
# one-pass check of the scores (it returns a bool to Python, so it is no torch operator)
SWITCHES = {"use_vector_isa", "range_within"}


def block(opening: str) -> str:
    """The body of the C++ block that starts with `opening` (up to its closing brace)."""
    start = SOURCE.index(opening)
    depth = 0
    for index in range(SOURCE.index("{", start), len(SOURCE)):
        depth += {"{": 1, "}": -1}.get(SOURCE[index], 0)
        if depth == 0:
            return SOURCE[start:index]
    raise AssertionError(f"unbalanced block {opening}")


def pybind_functions() -> set[str]:
    return set(re.findall(r'm\.def\(\s*"(\w+)"', block("PYBIND11_MODULE"))) - SWITCHES


def schemas() -> dict[str, list[str]]:
    """Operator name -> its argument names, from the TORCH_LIBRARY schemas."""
    found = re.findall(r'm\.def\("(\w+)\(([^)]*)\)', block("TORCH_LIBRARY(regattn"))
    return {name: [arg.split()[-1] for arg in args.split(",")] for name, args in found}


def cpu_implementations() -> set[str]:
    return set(re.findall(r'm\.impl\(\s*"(\w+)"', block("TORCH_LIBRARY_IMPL(regattn, CPU")))


def test_the_five_kernel_lists_name_the_same_kernels():
    names = set(_kernels.KERNEL_OPS)
    assert len(names) == len(_kernels.KERNEL_OPS), "KERNEL_OPS names a kernel twice"
    assert pybind_functions() == names
    assert set(schemas()) == names
    assert cpu_implementations() == names
    assert set(_kernels._FAKES) == names


def test_each_fake_takes_its_schemas_arguments():
    """As many as the schema, or a shared fake's leading ones and ``*params`` for the rest."""
    for name, arguments in schemas().items():
        parameters = list(inspect.signature(_kernels._FAKES[name]).parameters.values())
        named = [p for p in parameters if p.kind is not p.VAR_POSITIONAL]
        variadic = len(named) < len(parameters)
        assert len(named) == len(arguments) or (variadic and len(named) < len(arguments)), (
            name,
            [p.name for p in parameters],
            arguments,
        )
