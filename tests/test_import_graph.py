"""The package's import graph, read from the source with ``ast``: dependencies point one way.

Every import is recorded with where it stands: at **module** level (class bodies and
``if TYPE_CHECKING:`` blocks included: a type-only cycle is still two modules that each need
the other) or inside a **function** (a deferred import, the usual way a cycle is hidden). Both
are reported when a check fails; the checks are:

- no cycle among the ``agent_persistence.runtime`` modules through module-level imports, nor
  through module-level and function-level imports together;
- no import of ``agent_persistence.runtime`` from ``agent_persistence.stores`` at any level
  (models <- stores <- runtime: a store never reaches up into what drives it).

And the names the runtime's modules hand on to others stay importable from where the docs
named them.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agent_persistence"

MODULE = "module"
FUNCTION = "function"


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    level: str  # MODULE or FUNCTION

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}, {self.level} level)"


def module_names(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package is its ``__init__``)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def resolve(source: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: Iterable[str]) -> list[str]:
    """The package's modules ``node`` imports (``from x import y`` is ``x.y`` when that is a module, else ``x``)."""
    known = set(modules)
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if node.level:
        base = source.split(".") if is_package else source.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    targets = []
    for alias in node.names:
        candidate = f"{origin}.{alias.name}"
        if candidate in known:
            targets.append(candidate)
        elif origin in known:
            targets.append(origin)
    return sorted(set(targets))


class _Collector(ast.NodeVisitor):
    def __init__(self, source: str, is_package: bool, modules: Iterable[str]) -> None:
        self.source = source
        self.is_package = is_package
        self.modules = list(modules)
        self.depth = 0
        self.found: list[Import] = []

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        level = FUNCTION if self.depth else MODULE
        for target in resolve(self.source, self.is_package, node, self.modules):
            if target != self.source:
                self.found.append(Import(self.source, target, node.lineno, level))

    visit_Import = visit_ImportFrom = _import


def import_graph(package: Path) -> list[Import]:
    """Every import between the package's modules, module level and function level."""
    modules = module_names(package)
    found: list[Import] = []
    for name, path in modules.items():
        collector = _Collector(name, path.name == "__init__.py", modules)
        collector.visit(ast.parse(path.read_text(), filename=str(path)))
        found.extend(collector.found)
    return found


def cycles(edges: Iterable[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (each holds at least one cycle)."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph is small, recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def report(components: list[list[str]], edges: list[Import]) -> str:
    lines = []
    for component in components:
        lines.append("cycle among " + ", ".join(component) + ":")
        lines.extend(f"  {edge}" for edge in edges if edge.source in component and edge.target in component)
    return "\n".join(lines)


def within(edges: Iterable[Import], prefix: str) -> list[Import]:
    return [e for e in edges if e.source.startswith(prefix) and e.target.startswith(prefix)]


RUNTIME = "agent_persistence.runtime"


def test_the_runtime_modules_import_each_other_without_a_cycle_at_module_level() -> None:
    edges = within(import_graph(PACKAGE), RUNTIME)
    module_level = [edge for edge in edges if edge.level == MODULE]
    assert not cycles(module_level), report(cycles(module_level), edges)


def test_the_runtime_modules_have_no_cycle_hidden_in_deferred_imports() -> None:
    edges = within(import_graph(PACKAGE), RUNTIME)
    assert not cycles(edges), report(cycles(edges), edges)


def test_the_stores_never_import_the_runtime_at_any_level() -> None:
    upward = [
        edge for edge in import_graph(PACKAGE)
        if edge.source.startswith("agent_persistence.stores") and edge.target.startswith(RUNTIME)
    ]
    assert not upward, "\n".join(map(str, upward))


def test_the_graph_sees_module_and_function_level_imports_and_their_cycles(tmp_path: Path) -> None:
    """The checker itself: a cycle closed by a deferred or a type-only import is found, a one-way graph is not."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import c\n")
    (package / "a.py").write_text("from . import b\nfrom .sub.c import name\n")
    (package / "b.py").write_text("def later():\n    from .a import x\n")
    (package / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\nimport pkg.b\n"
    )
    edges = import_graph(package)
    assert {(e.source, e.target, e.level) for e in edges} == {
        ("pkg.a", "pkg.b", MODULE),
        ("pkg.a", "pkg.sub.c", MODULE),
        ("pkg.b", "pkg.a", FUNCTION),
        ("pkg.sub", "pkg.sub.c", MODULE),
        ("pkg.sub.c", "pkg.a", MODULE),
        ("pkg.sub.c", "pkg.b", MODULE),
    }
    assert cycles([e for e in edges if e.level == MODULE]) == [["pkg.a", "pkg.sub.c"]]
    assert cycles(edges) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    assert cycles([e for e in edges if e.source != "pkg.sub.c" and e.level == MODULE]) == []


def test_the_names_the_runtime_moved_are_still_importable_from_where_the_docs_named_them() -> None:
    from agent_persistence import signals
    from agent_persistence.runtime import hooks, lifecycle, outcomes, producer, turn

    assert producer.Outcome is outcomes.Outcome and producer.SEALS is outcomes.SEALS
    assert turn.TurnSuspended is outcomes.TurnSuspended
    assert turn.InterruptCancelled is outcomes.InterruptCancelled
    assert turn.CANCELLED_ANSWER is outcomes.CANCELLED_ANSWER
    assert hooks.sealed_view is signals.sealed_view and hooks.sealing is signals.sealing
    assert lifecycle.start_turn.__module__ == "agent_persistence.runtime.lifecycle"


def test_the_old_entry_points_module_warns_and_gives_the_lifecycle_modules_names() -> None:
    from agent_persistence.runtime import lifecycle

    sys.modules.pop("agent_persistence.runtime.turns", None)  # imported afresh, so its warning is seen here
    with pytest.warns(DeprecationWarning, match="import the entry points from agent_persistence.runtime.lifecycle"):
        from agent_persistence.runtime.turns import start_turn  # the import users wrote
    old = sys.modules["agent_persistence.runtime.turns"]
    assert start_turn is lifecycle.start_turn
    for name in ("continue_turn", "resume_turn", "cancel_turn", "begin_turn", "launch", "supervisor",
                 "close_out_dead_turn", "reap_dead_turns", "ensure_reaper", "TurnHandle", "PRODUCER_LOST"):
        assert getattr(old, name) is getattr(lifecycle, name), name
