"""The direction of the imports of the gRPC and collect layers stays one way.

``collect`` (the agent) sits above ``rpc`` (the agent serves gRPC); both sit above the channel.
Rules they share live in the leaf :mod:`ingest_toolkit.handoff`. Every import statement counts,
wherever it is (module level, ``TYPE_CHECKING`` blocks, inside functions).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import ingest_toolkit

ROOT = Path(ingest_toolkit.__file__).parent
PACKAGES = ("ingest_toolkit.rpc", "ingest_toolkit.collect")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}


def _imports(name: str) -> Iterator[str]:
    """The toolkit modules ``name`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        yield from (t for t in targets if t in MODULES)


def _graph(prefixes: tuple[str, ...]) -> dict[str, set[str]]:
    nodes = {m for m in MODULES if m.startswith(prefixes) or m == "ingest_toolkit.handoff"}
    return {m: {t for t in _imports(m) if t in nodes and t != m} for m in nodes}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a package's ``__init__`` importing its own modules aside)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if node.startswith(target + "."):
                continue  # a module importing its own package's __init__ (which imports it): not an edge
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_import_graph_is_read() -> None:
    graph = _graph(PACKAGES)
    assert "ingest_toolkit.rpc.remote_txn" in graph["ingest_toolkit.rpc.adapter"]
    assert "ingest_toolkit.rpc.adapter" in graph["ingest_toolkit.rpc.client"]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_the_package(package: str) -> None:
    assert _cycle(_graph((package,))) is None


def test_no_import_cycle_between_rpc_collect_and_handoff() -> None:
    assert _cycle(_graph(PACKAGES)) is None


def test_rpc_never_imports_the_collect_stage_above_it() -> None:
    upward = {(m, t) for m in MODULES if m.startswith("ingest_toolkit.rpc")
              for t in _imports(m) if t.startswith("ingest_toolkit.collect")}
    assert not upward


def test_handoff_is_a_leaf() -> None:
    assert set(_imports("ingest_toolkit.handoff")) <= {"ingest_toolkit.errors"}
