"""The package's modules import one another without a circle.

Every import counts: module level, inside functions, and under ``if TYPE_CHECKING:``; a circle
hidden in a function still means neither module can be understood (or moved) without the
other.  Pure ``ast``: nothing is imported, so the test takes milliseconds.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "multiwalk"
ROOT = Path(__file__).resolve().parents[1] / "src" / PACKAGE


def module_names(root: Path = ROOT) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package (a package is its ``__init__``)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = (PACKAGE, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that module ``name`` (file ``path``) imports, anywhere in its body.

    ``from a import b`` names module ``a.b`` when that is a module, else ``a`` (b is an attribute);
    relative imports are resolved against the module's package.
    """
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            # ``import a.b.c`` needs a.b.c's nearest enclosing module that is in the package
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``{module: the package's modules it imports}``."""
    names = module_names(root)
    known = set(names)
    return {name: imported_modules(name, path, known) for name, path in names.items()}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules that ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def shortest_cycle(graph: dict[str, set[str]], start: str, group: set[str]) -> list[str]:
    """The shortest circle ``[start, ..., start]`` through modules of ``group`` (breadth first)."""
    parent: dict[str, str] = {}
    frontier = [start]
    while start not in parent:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt not in parent:
                    parent[nxt] = node
                    following.append(nxt)
        frontier = following
    path = [start]
    while path[-1] != start or len(path) == 1:
        path.append(parent[path[-1]])
    return path[::-1]


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle ``[a, b, ..., a]`` for each group of modules that import one another (a strongly
    connected component), from the group's first module by name; ``[]`` when there is none."""
    reach = {node: reachable(graph, node) for node in graph}
    cycles, seen = [], set()
    for start in sorted(graph):
        if start in seen or start not in reach[start]:
            continue
        group = {node for node in reach[start] if start in reach[node]}
        seen |= group
        cycles.append(shortest_cycle(graph, start, group))
    return cycles


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "modules import each other in a circle: " + "; ".join(" -> ".join(c) for c in cycles)


def test_checker_finds_a_function_level_cycle(tmp_path: Path) -> None:
    """The checker itself: a circle closed by an import inside a function or under TYPE_CHECKING
    is found, and relative imports are resolved."""
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("from .sub import b\n\ndef f():\n    return b.g()\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import C\n\ndef g():\n    return 1\n"
    )
    (pkg / "c.py").write_text("def h():\n    from .a import f\n    return f\n")
    graph = import_graph(pkg)
    assert graph[f"{PACKAGE}.a"] == {f"{PACKAGE}.sub.b"}
    assert find_cycles(graph) == [[f"{PACKAGE}.a", f"{PACKAGE}.sub.b", f"{PACKAGE}.c", f"{PACKAGE}.a"]]
    (pkg / "c.py").write_text("def h():\n    return 2\n")
    assert find_cycles(import_graph(pkg)) == []
