"""The ORM stores reach PostgreSQL's one-statement paths through the dialect of their connection, never a vendor test.

A store module (``agent_persistence/stores/*.py``) asks :func:`dialect_for`
and calls it; only the PostgreSQL wing (``stores/postgres/``) and the dialect
registry know which database runs. Read with ``ast`` (nothing is imported to
check the modules); the dialects themselves are checked on the test database.
"""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import agent_persistence
from agent_persistence.scope import Scope
from agent_persistence.stores.dialects import Dialect, dialect_for

STORES = Path(agent_persistence.__file__).resolve().parent / "stores"


def vendor_branches(source: str) -> list[str]:
    """Where ``source`` compares a ``.vendor`` (``connection.vendor == "postgresql"``) or calls ``appends.enabled()``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(operand, ast.Attribute) and operand.attr == "vendor" for operand in operands):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "enabled":
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "appends":
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_store_module_tests_the_vendor_or_asks_whether_appends_are_enabled() -> None:
    modules = sorted(STORES.glob("*.py"))
    assert {"conversations.py", "events.py", "turns.py", "checkpoints.py", "fencing.py"} <= {p.name for p in modules}
    offending = {path.name: found for path in modules if (found := vendor_branches(path.read_text()))}
    assert offending == {}


@pytest.mark.parametrize(
    "source",
    [
        'if connection.vendor == "postgresql":\n    pass\n',
        'if db.vendor != "postgresql":\n    pass\n',
        'ok = "postgresql" == connection.vendor\n',
        "if appends.enabled():\n    pass\n",
    ],
)
def test_the_check_sees_each_branch_it_refuses(source: str) -> None:
    assert len(vendor_branches(source)) == 1


def test_the_check_lets_the_dialect_calls_pass() -> None:
    assert vendor_branches("rows = dialect_for().append_events(scope, pk, batch, now)\nd = dialect_for(db.vendor)\n") == []


@pytest.mark.django_db
def test_each_connection_gets_its_vendors_one_dialect() -> None:
    dialect = dialect_for(connection)
    assert dialect is dialect_for() is dialect_for(connection)
    expected = "PostgresDialect" if connection.vendor == "postgresql" else "Dialect"
    assert type(dialect).__name__ == expected
    assert isinstance(dialect, Dialect)


@pytest.mark.django_db
def test_the_general_dialect_does_nothing_itself_so_the_store_takes_its_general_path() -> None:
    """Every one-statement operation of the general dialect is None ("not done here") and runs no statement."""
    general = Dialect()
    scope, pk, now = Scope(tenant="acme", user="alice"), uuid.uuid4(), timezone.now()
    with CaptureQueriesContext(connection) as queries:
        answers = [
            general.append_message(scope, pk, object(), now),
            general.append_events(scope, pk, [], now, stop_reason=None, sets_stop_reason=False),
            general.start_in_new_conversation(scope, pk, agent=""),
            general.start_in_locked_conversation(scope, pk, epoch=1),
            general.read_turn_rows(pk),
            general.save_checkpoint(connection, pk, b"{}", {}),
            general.limit_lock_wait(connection),
        ]
    assert answers == [None] * 7
    assert len(queries) == 0


@pytest.mark.django_db
def test_execute_bound_runs_on_either_dialect() -> None:
    from agent_persistence.stores.dialects import Utf8Text, execute_bound

    assert execute_bound("SELECT %s, %s", [Utf8Text("é".encode()), 2]) == [("é", 2)]
    assert Dialect().execute_bound(connection, "SELECT %s", [Utf8Text(b"x")]) == [("x",)]
