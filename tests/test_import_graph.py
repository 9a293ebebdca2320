"""The direction of the imports between the toolkit's modules: no cycles, layers pointing one way.

The graph is read from the source with :mod:`ast` (nothing is imported). An edge ``a -> b`` is a
module-level import in ``a`` of a module ``b`` of ``ingest_toolkit`` or ``dagster_defs``:
``import b``, ``from b import name``, ``from . import b`` (``from p import m`` names the
submodule ``p.m`` when it is one, else ``p``). Class bodies and ``try``/``if`` blocks at module
level count (they run at import); function bodies and ``if TYPE_CHECKING:`` blocks do not. The
implicit import of a parent package (``import p.m`` runs ``p/__init__``) is not an edge: every
package whose ``__init__`` re-exports its modules would otherwise be a cycle.

A cycle is a strongly connected component of that graph with more than one module: modules none
of which can be understood, tested or loaded without the others. Three allowlists, each of which
must only shrink (a test fails on anything new, and on an entry the code no longer has):

* :data:`KNOWN_CYCLES`: cycles of module-level imports;
* :data:`KNOWN_TYPE_CYCLES`: cycles closed only by imports under ``TYPE_CHECKING`` (no import
  fails at run time, but the modules still cannot be read apart);
* :data:`KNOWN_STAGE_CYCLES`: cycles between the packages of the stages (channel, collect, rpc,
  land, ...), which module cycles do not show (an arrow up the layers);
* :data:`LAZY_BACK_EDGES`: imports inside functions kept there only because a module-level
  import would close a cycle - each is a cycle the graph does not see.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ingest_toolkit", "dagster_defs")

# Cycles of module-level imports still present, each the set of modules of one strongly
# connected component. This list must only shrink: a new cycle fails the test, and so does an
# entry that no longer matches a cycle in the code (remove it when its cycle is gone, or update
# it when it got smaller).
KNOWN_CYCLES: list[frozenset[str]] = []

# Cycles that exist only through imports under ``if TYPE_CHECKING:``, as above; must only shrink.
KNOWN_TYPE_CYCLES: list[frozenset[str]] = []

# Cycles between stages: the packages directly below ``ingest_toolkit`` (a top-level module counts
# as its own) and ``dagster_defs``, joined by the module-level edges of their modules
# (``__main__`` modules left out: nothing imports a program). Must only shrink.
KNOWN_STAGE_CYCLES: list[frozenset[str]] = []

# Function-level imports ``(importer, imported)`` that would close a cycle if written at module
# level: each is a cycle kept lazy on purpose. Must only shrink.
LAZY_BACK_EDGES: list[tuple[str, str]] = []


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    line: int
    lazy: bool  # inside a function body
    type_only: bool  # under ``if TYPE_CHECKING:``


def module_files() -> dict[str, Path]:
    """Dotted name -> source file, for every module of the toolkit's packages."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(body: list[ast.stmt], *, lazy: bool = False,
             type_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement below ``body``, with whether it runs in a function / only for typing."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, lazy, type_only
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _imports(node.body, lazy=True, type_only=type_only)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.body, lazy=lazy, type_only=True)
            yield from _imports(node.orelse, lazy=lazy, type_only=type_only)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(node, field, []):
                    inner = child.body if isinstance(child, ast.ExceptHandler | ast.match_case) else [child]
                    yield from _imports(inner, lazy=lazy, type_only=type_only)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` is, or the innermost module containing it; None outside the toolkit."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def edges_of(module: str, path: Path, modules: dict[str, Path]) -> list[Edge]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Edge] = []
    for node, lazy, type_only in _imports(ast.parse(path.read_text(), str(path)).body):
        targets: list[str | None]
        if isinstance(node, ast.Import):
            targets = [_resolve(alias.name, modules) for alias in node.names]
        else:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            origin = ".".join([*base, *([node.module] if node.module else [])])
            targets = [_resolve(f"{origin}.{alias.name}", modules) for alias in node.names]
        found += [Edge(module, target, node.lineno, lazy, type_only)
                  for target in sorted({t for t in targets if t is not None and t != module})]
    return found


def import_graph(*, type_only: bool = False) -> tuple[dict[str, set[str]], list[Edge]]:
    """Module-level edges as adjacency sets (``type_only``: with the TYPE_CHECKING imports), and
    every edge (lazy and type-only ones too)."""
    modules = module_files()
    every = [edge for module, path in modules.items() for edge in edges_of(module, path, modules)]
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for edge in every:
        if not edge.lazy and (type_only or not edge.type_only):
            graph[edge.source].add(edge.target)
    return graph, every


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components with a cycle in them (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def reaches(graph: dict[str, set[str]], source: str, target: str) -> bool:
    seen, pending = {source}, [source]
    while pending:
        for child in graph[pending.pop()]:
            if child == target:
                return True
            if child not in seen:
                seen.add(child)
                pending.append(child)
    return False


def _show(component: frozenset[str]) -> str:
    return "{" + ", ".join(sorted(component)) + "}"


def _compare(present: set[frozenset[str]], known: list[frozenset[str]], name: str) -> None:
    new = sorted(_show(c) for c in present - set(known))
    gone = sorted(_show(c) for c in set(known) - present)
    assert not new, (f"import cycles between the toolkit's modules: {new}; give each import a direction "
                     "(a leaf module for the shared types, or a small protocol)")
    assert not gone, (f"{name} lists cycles the code no longer has: {gone}; remove them (or shrink them to the "
                      "cycle that remains) so the list stays honest")


def test_no_import_cycles_but_the_known_ones() -> None:
    _compare(cycles(import_graph()[0]), KNOWN_CYCLES, "KNOWN_CYCLES")


def test_no_cycles_through_type_checking_imports_but_the_known_ones() -> None:
    runtime = cycles(import_graph()[0])
    _compare(cycles(import_graph(type_only=True)[0]) - runtime, KNOWN_TYPE_CYCLES, "KNOWN_TYPE_CYCLES")


def stage_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "ingest_toolkit" and len(parts) > 1 else parts[0]


def test_no_cycles_between_stages_but_the_known_ones() -> None:
    graph, _edges = import_graph()
    stages: dict[str, set[str]] = {stage_of(module): set() for module in graph}
    for module, targets in graph.items():
        if not module.endswith(".__main__"):
            stages[stage_of(module)] |= {stage_of(t) for t in targets} - {stage_of(module)}
    _compare(cycles(stages), KNOWN_STAGE_CYCLES, "KNOWN_STAGE_CYCLES")


def test_lazy_back_edges_are_listed() -> None:
    """A function-level import closing a cycle is a cycle hidden from the graph: it is listed."""
    graph, edges = import_graph()
    back = {(e.source, e.target) for e in edges
            if e.lazy and not e.type_only and e.source != e.target and reaches(graph, e.target, e.source)}
    assert back == set(LAZY_BACK_EDGES), (
        f"unlisted: {sorted(back - set(LAZY_BACK_EDGES))}; no longer a back edge: "
        f"{sorted(set(LAZY_BACK_EDGES) - back)}")


def _any_import(edges: list[Edge], source_prefix: str, target_prefixes: tuple[str, ...]) -> list[str]:
    def inside(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    return sorted(f"{e.source}:{e.line} -> {e.target}" for e in edges
                  if inside(e.source, source_prefix) and any(inside(e.target, p) for p in target_prefixes))


def test_the_channel_depends_on_no_later_stage() -> None:
    """The channel is the bottom layer: collect, rpc, land and the Dagster definitions use it,
    never the reverse (lazy imports included: a dependency is one wherever it is written)."""
    _graph, edges = import_graph()
    later = ("ingest_toolkit.collect", "ingest_toolkit.rpc", "ingest_toolkit.land", "dagster_defs")
    assert _any_import(edges, "ingest_toolkit.channel", later) == []


def test_the_library_never_imports_the_dagster_definitions() -> None:
    """``dagster_defs`` depends on ``ingest_toolkit``, never the reverse: the library is usable
    and testable without Dagster."""
    _graph, edges = import_graph()
    assert _any_import(edges, "ingest_toolkit", ("dagster_defs",)) == []


def test_only_the_dagster_layer_imports_it() -> None:
    """``ingest_toolkit.dagster`` (the ``[dagster]`` extra) is a leaf of the library: no other
    module of it imports the Dagster layer, lazily or not, so the core never needs Dagster."""
    _graph, edges = import_graph()
    outside = [e for e in edges if e.source.startswith("ingest_toolkit.") and
               not (e.source == "ingest_toolkit.dagster" or e.source.startswith("ingest_toolkit.dagster."))]
    assert _any_import(outside, "ingest_toolkit", ("ingest_toolkit.dagster",)) == []


# -- the graph reader itself ------------------------------------------------------------------

def _graph_of(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    modules: dict[str, Path] = {}
    for path in sorted(tmp_path.rglob("*.py")):
        parts = list(path.relative_to(tmp_path).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for edge in edges_of(module, path, modules):
            if not edge.lazy and not edge.type_only:
                graph[module].add(edge.target)
    return graph


@pytest.mark.parametrize(("b_imports_a", "cycle"), [
    ("from . import a", True),
    ("from .a import X", True),
    ("import p.a", True),
    ("from p import a as alias", True),
    ("class C:\n    from .a import X", True),
    ("try:\n    from .a import X\nexcept ImportError:\n    X = None", True),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X", False),
    ("import typing\nif typing.TYPE_CHECKING:\n    from . import a", False),
    ("def f():\n    from .a import X", False),
    ("from . import c", False),
])
def test_the_reader_sees_module_level_imports_only(tmp_path: Path, b_imports_a: str, cycle: bool) -> None:
    graph = _graph_of(tmp_path, {"p/__init__.py": "", "p/a.py": "from .b import Y\n", "p/b.py": b_imports_a + "\n",
                                 "p/c.py": ""})
    assert (frozenset({"p.a", "p.b"}) in cycles(graph)) is cycle


def test_the_reader_finds_long_cycles_across_packages(tmp_path: Path) -> None:
    graph = _graph_of(tmp_path, {"p/__init__.py": "from . import a\n", "p/a.py": "from . import b\n",
                                 "p/b.py": "from .sub import c\n", "p/sub/__init__.py": "",
                                 "p/sub/c.py": "from ..a import X\n", "p/d.py": "from p.a import X\n"})
    assert cycles(graph) == {frozenset({"p.a", "p.b", "p.sub.c"})}
