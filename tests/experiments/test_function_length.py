"""No function of the reproduction suite is longer than 80 lines (issue #47): a longer one
holds more than one step, and is split into named ones."""

import ast
from pathlib import Path

import regattn_fairseq.experiments as suite

MAX_LINES = 80


def long_functions(package: Path, max_lines: int = MAX_LINES) -> list[str]:
    """``"<file>:<line> <name> (<n> lines)"`` for each function or method under `package`
    longer than `max_lines`, its decorators and docstring included."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = node.end_lineno - start + 1
                if lines > max_lines:
                    found.append(f"{path.relative_to(package)}:{start} {node.name} ({lines} lines)")
    return found


def test_no_function_of_the_suite_is_over_80_lines():
    assert long_functions(Path(suite.__file__).parent) == []


def test_long_functions_finds_a_long_one(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path) == ["m.py:5 long (81 lines)"]
