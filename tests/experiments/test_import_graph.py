"""The reproduction suite's import graph has no cycle, counting every import of a module,
at its top or inside a function (`make lint` checks the stage layering itself with
lint-imports, pyproject.toml [tool.importlinter])."""

import grimp

SUITE = "regattn_fairseq.experiments"


def strongly_connected(graph, modules: set[str]) -> list[set[str]]:
    """Tarjan's strongly connected components of the import graph restricted to `modules`."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module) & modules:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            components.append(component)

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return components


def test_the_suite_has_no_import_cycle():
    graph = grimp.build_graph("regattn_fairseq")
    modules = {m for m in graph.modules if m == SUITE or m.startswith(SUITE + ".")}
    cycles = [sorted(c) for c in strongly_connected(graph, modules) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"
