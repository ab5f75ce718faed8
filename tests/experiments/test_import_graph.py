"""The reproduction suite's and the library's import graphs have no cycle, counting every
import of a module, at its top or inside a function (`make lint` checks the stage layering
itself with lint-imports, pyproject.toml [tool.importlinter])."""

import re

import grimp

SUITE = "regattn_fairseq.experiments"
EXTENSION_IMPORT = re.compile(r"^from regattn import _C$")


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


def cycles_in(graph, package: str) -> list[list[str]]:
    """The import cycles among the modules of `package`."""
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    return [sorted(c) for c in strongly_connected(graph, modules) if len(c) > 1]


def test_the_suite_has_no_import_cycle():
    assert not cycles_in(grimp.build_graph("regattn_fairseq"), SUITE)


def without_extension_imports(graph, package: str):
    """The graph less the imports of `package`'s compiled extension: grimp sees no compiled
    module, so `from regattn import _C` is recorded as an import of the package itself (a
    false cycle: the extension imports nothing)."""
    for importer in set(graph.find_modules_that_directly_import(package)):
        details = graph.get_import_details(importer=importer, imported=package)
        if details and all(EXTENSION_IMPORT.search(d["line_contents"]) for d in details):
            graph.remove_import(importer=importer, imported=package)
    return graph


def test_the_library_has_no_import_cycle():
    graph = without_extension_imports(grimp.build_graph("regattn"), "regattn")
    assert not cycles_in(graph, "regattn")
