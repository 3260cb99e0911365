"""memstore's modules import each other without circles, imports inside functions included
(``TYPE_CHECKING`` blocks left out): a circle means two modules that cannot be read, tested or
changed apart, and a lazy import hides it until the first call."""

from __future__ import annotations

import ast
from pathlib import Path

import memstore

ROOT = Path(memstore.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, name: str, modules: set[str]) -> set[str]:
    """The memstore modules ``path`` (module ``name``) imports, at any depth of its code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hidden = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(c for c in candidates if c in modules and c != name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in ROOT.rglob("*.py")}
    modules = set(paths)
    return {name: imported(path, name, modules) for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_scan_sees_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_scan_sees_lazy_imports() -> None:
    graph = import_graph()
    assert "memstore.sql.aio" in graph["memstore.adapters._history"]  # inside a function


def test_no_import_circle_among_memstore_modules() -> None:
    assert circles(import_graph()) == []


LAYERS: tuple[tuple[str, ...], ...] = (
    # shared leaves and the pure core: plain data, decisions, no I/O
    (
        "memstore.core",
        "memstore.messages",
        "memstore.errors",
        "memstore.extras",
        "memstore.config",
        "memstore.metrics",
        "memstore.reports",
        "memstore._version",
        "memstore.seams",
    ),
    ("memstore.sql", "memstore.cache", "memstore.formats"),  # I/O, conversion at the edge
    (),  # the store and everything not named elsewhere: store*, aio, collector, guard...
    (
        "memstore.adapters",
        "memstore.cli",
        "memstore.demo",
        "memstore.importers",
        "memstore.__main__",
    ),
)
"""The layers of docs/contributing.md, lowest first; a module imports its own layer or lower."""

STORE_LAYER = 2


def layer(module: str) -> int:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return rank
    return STORE_LAYER


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer(target) > layer(module)
    )


def test_the_layer_scan_sees_an_upward_import() -> None:
    graph = {"memstore.core.window": {"memstore.cache.base"}, "memstore.store": {"memstore.sql"}}
    assert upward_imports(graph) == ["memstore.core.window -> memstore.cache.base"]


def test_every_import_points_down_the_layers() -> None:
    """core → sql/cache/formats → store → adapters/CLI, imports inside functions included."""
    assert upward_imports(import_graph()) == []
