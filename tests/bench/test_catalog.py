"""The benchmarks' one command (`python -m regattn_bench`) and their one declaration
(`regattn_bench.catalog`): every benchmark is declared, runnable by name and by make."""

import importlib
import inspect
import re
from pathlib import Path

import pytest

from regattn_bench import __main__ as cli
from regattn_bench import catalog

REPO_ROOT = Path(__file__).resolve().parents[2]


def make_bench_recipes() -> dict[str, str]:
    """Each `bench-*` target of the Makefile and its recipe's first line."""
    lines = (REPO_ROOT / "Makefile").read_text().splitlines()
    recipes = {}
    for line, following in zip(lines, lines[1:], strict=False):
        target = re.match(r"^(bench-[\w-]+):", line)
        if target:
            recipes[target.group(1)] = following.strip()
    return recipes


def test_every_benchmark_module_has_a_main_taking_argv():
    for benchmark in catalog.BENCHMARKS:
        module = importlib.import_module(benchmark.module)
        assert list(inspect.signature(module.main).parameters) == ["argv"], benchmark.name


def test_every_benchmark_module_is_declared():
    declared = {benchmark.module for benchmark in catalog.BENCHMARKS}
    packages = {"regattn_bench": REPO_ROOT / "regattn_bench"}
    packages["regattn_fairseq.benchmarks"] = REPO_ROOT / "regattn_fairseq" / "benchmarks"
    with_main = {
        f"{package}.{path.stem}"
        for package, folder in packages.items()
        for path in folder.glob("*.py")
        if not path.stem.startswith("__")
        and re.search(r"^def main\(", path.read_text(), re.MULTILINE)
    }
    assert with_main == declared


def test_make_runs_each_benchmark_through_the_one_command():
    recipes = make_bench_recipes()
    names = {benchmark.name for benchmark in catalog.BENCHMARKS}
    for target, recipe in recipes.items():
        called = re.search(r"-m regattn_bench ([\w-]+)", recipe)
        assert called and called.group(1) in names, (target, recipe)
    # a GPU-only benchmark's target says so: bench-<name>-cuda
    for benchmark in catalog.BENCHMARKS:
        suffix = "-cuda" if benchmark.needs == "CUDA" else ""
        assert f"bench-{benchmark.name}{suffix}" in recipes, benchmark.name


def test_list_names_every_benchmark_and_what_it_needs(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for benchmark in catalog.BENCHMARKS:
        assert re.search(
            rf"^  {re.escape(benchmark.name)}\s+{re.escape(benchmark.summary)}", out, re.M
        )
    assert "[needs fairseq]" in out and "[needs CUDA]" in out


def test_an_unknown_name_is_refused_with_the_names(capsys):
    assert cli.main(["mapping"]) == 2
    err = capsys.readouterr().err
    assert "no benchmark called 'mapping'" in err and "mappings, scaling" in err


def test_a_benchmark_names_itself_in_its_usage(capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["x"])
    with pytest.raises(SystemExit) as stop:
        cli.main(["dp", "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m regattn_bench dp ")
