"""The in-memory family imports nothing from the ORM store modules: the rules both apply live in ``stores/rules/``.

Read with ``ast`` (nothing is imported to check it): every ``import`` and
``from ... import`` in ``agent_persistence/stores/memory/``, module level or
inside a function, resolved to the module it names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agent_persistence

PACKAGE = Path(agent_persistence.__file__).resolve().parent
STORES = PACKAGE / "stores"
#: The modules of agent_persistence.stores that are not an ORM store: the neutral parts both families share.
NEUTRAL = {"agent_persistence.stores", "agent_persistence.stores.protocols", "agent_persistence.stores.family",
           "agent_persistence.stores.twins"}


def orm_modules() -> set[str]:
    """Every module of agent_persistence.stores that belongs to the ORM family."""
    names = {f"agent_persistence.stores.{path.stem}" for path in STORES.glob("*.py") if path.stem != "__init__"}
    names |= {f"agent_persistence.stores.orm.{path.stem}" for path in (STORES / "orm").glob("*.py")} | {"agent_persistence.stores.orm"}
    names |= {f"agent_persistence.stores.postgres.{path.stem}" for path in (STORES / "postgres").glob("*.py")}
    names |= {"agent_persistence.stores.postgres"}
    return names - NEUTRAL


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """The modules ``path`` imports (``from a import b`` counts ``a`` and ``a.b``, since ``b`` may be a module)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def memory_imports() -> dict[str, set[str]]:
    return {path.name: imported_modules(path) for path in sorted((STORES / "memory").glob("*.py"))}


def test_the_memory_family_imports_no_orm_store_module() -> None:
    orm = orm_modules()
    assert {"agent_persistence.stores.base", "agent_persistence.stores.runs", "agent_persistence.stores.turns",
            "agent_persistence.stores.paging", "agent_persistence.stores.postgres.appends"} <= orm
    offending = {name: sorted(found & orm) for name, found in memory_imports().items() if found & orm}
    assert offending == {}


def test_the_memory_family_takes_its_rules_from_stores_rules() -> None:
    """The check above sees the imports it must refuse: the memory stores do import their rules."""
    rules = {name for found in memory_imports().values() for name in found if name.startswith("agent_persistence.stores.rules.")}
    assert {"agent_persistence.stores.rules.base", "agent_persistence.stores.rules.runs"} <= rules


def test_the_rules_import_no_orm_store_module() -> None:
    orm = orm_modules()
    offending = {path.name: sorted(imported_modules(path) & orm) for path in sorted((STORES / "rules").glob("*.py"))}
    assert {name: found for name, found in offending.items() if found} == {}
