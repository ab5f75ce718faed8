"""One declaration per mapping (issue #47): a mapping's name, written as a string, is in at most
3 non-test modules, the first its declaration in regattn/mappings. Anything else that knows a
mapping (a fact of it, the reference role of softmax, a benchmark's list of mappings) reads
the declarations, `mappings.REFERENCE_MAPPING` or a config file.

The names are the registry's (every declared mapping and control, and each of their attention
configs), not a hand list; the strings are string literals found by `ast`, so comments and
docstrings do not count, nor `__all__` (whose entries name Python objects, as `def` does).
"""

import ast
import subprocess
from collections import defaultdict
from pathlib import Path

from regattn import continuous, dp, mappings

REPO = Path(__file__).resolve().parents[1]
MAX_MODULES = 3


def declared_names() -> set[str]:
    """Every declared mapping and control, and every attention config of theirs."""
    return set(mappings.DECLARATIONS) | set(mappings.attention_configs())


# the other declared names: continuous attention's densities and the DP's regularisers, each
# declared in its own module
OTHER_DECLARATIONS = {
    "regattn/continuous.py": set(continuous.DENSITIES),
    "regattn/dp.py": set(dp.REGS),
}


def non_test_modules() -> list[str]:
    """The repository's Python files (tracked, or new and not ignored) outside tests/."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted(
        path
        for path in set(filter(None, listed.split("\0")))
        if not path.startswith("tests/") and (REPO / path).is_file()
    )


def _documentation(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are documentation: docstrings (any string
    statement) and the entries of `__all__`."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.add(id(node.value))
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            skipped.update(id(n) for n in ast.walk(node.value) if isinstance(n, ast.Constant))
    return skipped


def string_literals(source: str) -> set[str]:
    """The string literals of a module's code (not its docstrings or `__all__`)."""
    tree = ast.parse(source)
    skipped = _documentation(tree)
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in skipped
    }


def modules_naming(names: set[str], paths: list[str]) -> dict[str, list[str]]:
    """name -> the modules (of `paths`, relative to the repository) whose code holds it as a
    string literal."""
    found = defaultdict(list)
    for path in paths:
        for name in string_literals((REPO / path).read_text(encoding="utf-8")) & names:
            found[name].append(path)
    return found


def test_a_mapping_name_is_a_string_in_at_most_three_modules():
    names = declared_names().union(*OTHER_DECLARATIONS.values())
    found = modules_naming(names, non_test_modules())
    over = {name: paths for name, paths in found.items() if len(paths) > MAX_MODULES}
    assert not over, "\n".join(
        f"{name!r} is a string in {len(paths)} non-test modules (at most {MAX_MODULES}): "
        + ", ".join(paths)
        for name, paths in sorted(over.items())
    )


def test_each_name_is_found_in_its_declaration():
    """The count can fail: it finds every name in its declaration."""
    found = modules_naming(declared_names().union(*OTHER_DECLARATIONS.values()), non_test_modules())
    assert {
        name for name, paths in found.items() if "regattn/mappings/__init__.py" in paths
    } == declared_names()
    for declaration, names in OTHER_DECLARATIONS.items():
        assert {n for n, paths in found.items() if declaration in paths} >= names


def test_densities_and_regularisers_are_in_their_declarations_only():
    """A density or a DP regulariser is a string only in the module that declares it: the
    options, the NER criterion and decoder, the export, the figures and the benchmarks read
    the declaration."""
    paths = non_test_modules()
    for declaration, names in OTHER_DECLARATIONS.items():
        found = modules_naming(names, paths)
        assert {n: p for n, p in found.items() if p != [declaration]} == {}


def test_comments_docstrings_and_all_do_not_count():
    source = '''
"""softmax in a docstring"""
__all__ = ["softmax"]
# "sparsemax" in a comment
def f(mapping="entmax"):
    """fusedmax in a function's docstring"""
    return mapping == f"x{mapping}oscarmax"
'''
    assert string_literals(source) == {"entmax", "x", "oscarmax"}
