"""Fixtures shared by the test suite, and its three tiers.

Every test is marked with exactly one tier when it is collected:

- ``e2e``: starts something outside the test process (server processes, a
  producer process, private PostgreSQL or Redis servers, Chromium, Node, a
  fresh virtualenv) or fuzzes the whole API (schemathesis). Found by folder
  (``E2E_PATHS``), by the helpers a test or any of its fixtures calls
  (``PROCESS_HELPERS``), or by an explicit ``@pytest.mark.e2e``;
- ``integration``: any other test that uses the database;
- ``unit``: the rest (pure rules, the memory family, parsers, settings).

``make test`` runs all three, ``make test-fast`` runs ``-m "not e2e"``.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from agent_persistence.scope import Scope
from agent_persistence.testing.actors import ALICE, BOB, MALLORY


TIERS = ("unit", "integration", "e2e")

TESTS = Path(__file__).resolve().parent

#: Folders and files whose every test is end-to-end.
E2E_PATHS = (
    "browser",
    "clients",
    "faults",
    "newcomer/test_fresh_project.py",
    "newcomer/test_make_demo.py",
    "newcomer/test_crash_test_errors.py",
    "realtime/test_end_to_end.py",
    "realtime/test_outage.py",
    "realtime/test_tickets_replicas.py",
    "integrations/test_bridges_crash.py",
    "test_crash.py",
    "test_crash_command.py",
)

#: Names whose use (by a test, its fixtures, or the code they define) means another process.
PROCESS_HELPERS = frozenset({
    "start_servers",  # tests.realtime.servers
    "running_servers",  # tests.realtime.servers
    "live_server",  # tests.api.live (pytest-django's fixture of that name serves in a thread of this process, and is not one)
    "example_server",  # tests.browser.servers
    "copy_example_db",  # tests.example_db (its first use runs manage.py)
    "RedisServer",  # tests.realtime.redis_server
    "Chromium",  # tests.browser.cdp
    "ServerProcess",  # tests.clients.serve
    "new_virtualenv",  # tests.newcomer.fresh
    "tests.turn_process",  # a producer process
    "schemathesis",
})

DATABASE_FIXTURES = frozenset({"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"})


def _names(code: types.CodeType) -> Iterator[str]:
    """The global names, attributes, imports and string constants of ``code`` and the code nested in it."""
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, str):
            yield constant
        elif isinstance(constant, types.CodeType):
            yield from _names(constant)


def _starts_processes(item: pytest.Function) -> bool:
    functions: list[Any] = [item.function]
    for definitions in item._fixtureinfo.name2fixturedefs.values():
        # Only the suite's own fixtures: plugins' (pytest-django's _live_server_helper) name helpers they do not call.
        functions.extend(definition.func for definition in definitions if definition.func.__module__.startswith("tests."))
    for function in functions:
        code = getattr(function, "__code__", None)
        if code is not None and not PROCESS_HELPERS.isdisjoint(_names(code)):
            return True
    return False


def tier_of(item: pytest.Item) -> str:
    if item.get_closest_marker("e2e") is not None:
        return "e2e"
    relative = Path(str(item.path)).resolve().relative_to(TESTS).as_posix()
    if any(relative == path or relative.startswith(f"{path}/") for path in E2E_PATHS):
        return "e2e"
    if isinstance(item, pytest.Function) and _starts_processes(item):
        return "e2e"
    if item.get_closest_marker("django_db") is not None or not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())):
        return "integration"
    return "unit"


def without_database(item: pytest.Item) -> None:
    """Drop the ``django_db`` marks of a test that blocks the database (an in-memory family's contract run).

    A contract suite marks its race tests ``django_db(transaction=True)`` for the ORM families; run on
    the in-memory family (whose ``no_database`` fixture blocks every query) the marks would only set up,
    and flush, a database the test may not touch.
    """
    if isinstance(item, pytest.Function) and "no_database" in item.fixturenames:
        for node in item.listchain():
            if node is item or isinstance(node, pytest.Class):  # the class's fixture blocks all its tests
                node.own_markers[:] = [mark for mark in node.own_markers if mark.name != "django_db"]
            elif any(mark.name == "django_db" for mark in node.own_markers):
                raise pytest.UsageError(f"{item.nodeid} blocks the database but {node.nodeid} marks it django_db.")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        without_database(item)
        tier = tier_of(item)
        for other in TIERS:
            if other != tier and item.get_closest_marker(other) is not None:
                raise pytest.UsageError(f"{item.nodeid} is marked {other} but is a {tier} test.")
        item.add_marker(tier)


def pytest_report_header(config: pytest.Config) -> str:
    from django.conf import settings

    return f"agent_persistence database: {settings.DATABASES['default']['ENGINE']}"


@pytest.fixture
def alice() -> Scope:
    return ALICE


@pytest.fixture
def bob() -> Scope:
    """Another user of alice's tenant."""
    return BOB


@pytest.fixture
def mallory() -> Scope:
    """A user of another tenant, with alice's user id."""
    return MALLORY


@pytest.fixture
def is_postgres() -> bool:
    return connection.vendor == "postgresql"
