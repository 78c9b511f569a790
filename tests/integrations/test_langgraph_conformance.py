"""LangGraph's official checkpointer conformance suite against DjangoCheckpointSaver, on the test database.

``langgraph-checkpoint-conformance`` (LangGraph's own package, MIT) registers a
saver factory with ``checkpointer_test`` and ``validate`` runs its capability
suites through the saver's async API: the base ones (put, put_writes,
get_tuple, list, delete_thread) and the extended ones it detects by the
methods a saver overrides (delete_for_runs, copy_thread, prune). Each
capability is one test here, so a failure names its capability and the suite's
own failing cases; every capability must be detected (none may be skipped as
not implemented) and pass, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, Capability, DetectedCapabilities

from agent_persistence.integrations.langgraph_store import DjangoCheckpointSaver

#: The saver's async API queries from Django's sync thread, which commits its own rows.
pytestmark = pytest.mark.django_db(transaction=True)


@checkpointer_test(name="DjangoCheckpointSaver")
async def django_saver() -> AsyncIterator[DjangoCheckpointSaver]:
    yield DjangoCheckpointSaver()


def run_capability(capability: Capability) -> tuple[bool, bool | None, list[str], int]:
    async def main() -> tuple[bool, bool | None, list[str], int]:
        try:
            report = await validate(django_saver, capabilities={capability.value})
        finally:
            await sync_to_async(connections.close_all)()
        result = report.results[capability.value]
        return result.detected, result.passed, result.failures, result.tests_passed

    return asyncio.run(main())


def test_every_capability_is_implemented() -> None:
    assert DetectedCapabilities.from_instance(DjangoCheckpointSaver()).missing == frozenset()


@pytest.mark.parametrize("capability", sorted(ALL_CAPABILITIES, key=lambda capability: capability.value),
                         ids=lambda capability: capability.value)
def test_conformance(capability: Capability) -> None:
    detected, passed, failures, tests_passed = run_capability(capability)
    assert detected, f"{capability.value} is not implemented"
    assert failures == []
    assert passed is True
    assert tests_passed > 0
