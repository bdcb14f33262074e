"""The import graph of protocol/, daemons/ and orchestrator/ has no circles and keeps
its layers: protocol/ knows nothing of the other two, daemons/ nothing of orchestrator/.

Every import counts, wherever it is written: at module level, inside a function, or
under ``if TYPE_CHECKING:``. A circle closed only for the type checker still means
two modules that each need the other to be understood, which is the knot this test
keeps untied (issue 16). The graph is built from the source with ``ast``, so nothing
is imported to check it.

Edges follow what Python loads: ``from a.b import c`` is an edge to the module
``a.b.c`` when that is a module of ours, else to ``a.b`` (whose ``__init__`` defines
``c``). A submodule does not depend on its package's ``__init__`` merely by living in
it (as import-linter and grimp count it too); otherwise every package whose
``__init__`` re-exports its submodules would be a circle by construction.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGES = ("protocol", "daemons", "orchestrator")
ROOT = Path(__file__).resolve().parent.parent

# Which packages each package may import (besides itself): the layers, lowest first.
ALLOWED = {
    "protocol": set[str](),
    "daemons": {"protocol"},
    "orchestrator": {"protocol", "daemons"},
}

Graph = dict[str, set[str]]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
              modules: set[str]) -> Iterator[str]:
    """The modules of ours that one import statement loads."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    if node.level:  # relative: resolve against the importing module's package
        package = module.split(".")
        if not is_package:
            package.pop()
        if node.level > 1:
            package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        yield candidate if candidate in modules else base


def import_graph() -> Graph:
    """Module -> the modules of ours it imports, anywhere in its source."""
    paths = {_module_name(path): path for package in PACKAGES
             for path in sorted((ROOT / package).rglob("*.py"))}
    modules = set(paths)
    graph: Graph = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                is_package = path.name == "__init__.py"
                targets.update(name for name in _imported(node, module, is_package, modules)
                               if name in modules and name != module)
        graph[module] = targets
    return graph


def strongly_connected(graph: Graph) -> list[list[str]]:
    """The components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def cycle_path(graph: Graph, component: list[str]) -> list[str]:
    """One circle through ``component``'s first module, as a path that returns to it."""
    start = component[0]
    members = set(component)
    # Breadth-first from start's successors back to start, inside the component.
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    back = [node]
                    while back[-1] != start:
                        back.append(parents[back[-1]])
                    return [*reversed(back), start]
                if target not in parents:
                    parents[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{component} is not a strongly connected component")


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = [" -> ".join(cycle_path(graph, component))
              for component in strongly_connected(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_packages_keep_their_layers() -> None:
    wrong = [f"{module} imports {target}"
             for module, targets in sorted(import_graph().items())
             for target in sorted(targets)
             if (package := module.split(".")[0]) != (other := target.split(".")[0])
             and other not in ALLOWED[package]]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_only_the_api_knows_http() -> None:
    """starlette belongs to orchestrator/api/ and the app that assembles it: the core
    takes plain values and yields events, whatever carries them."""
    allowed = ("orchestrator.api", "orchestrator.app")
    wrong = [f"{module} imports {name}" for module, name in sorted(_external_imports())
             if name.split(".")[0] == "starlette"
             and not any(module == a or module.startswith(f"{a}.") for a in allowed)]
    assert not wrong, "HTTP outside orchestrator/api/:\n" + "\n".join(wrong)


def _external_imports() -> set[tuple[str, str]]:
    """(module of ours, absolute module it imports) for every import, anywhere."""
    found: set[tuple[str, str]] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    found.update((_module_name(path), alias.name) for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add((_module_name(path), node.module))
    return found


def test_the_graph_sees_every_kind_of_import() -> None:
    """Guards the walker: a cycle hidden behind TYPE_CHECKING or a function is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert cycle_path(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    tree = ast.parse("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from orchestrator.models import ServedModel\n"
                     "def f() -> None:\n    from . import tools\n")
    modules = {"orchestrator.models", "orchestrator.tools", "orchestrator"}
    found = {name for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
             for name in _imported(node, "orchestrator.generation", False, modules)}
    assert {"orchestrator.models", "orchestrator.tools"} <= found
