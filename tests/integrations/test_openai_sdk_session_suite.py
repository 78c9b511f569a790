"""The OpenAI Agents SDK's own session tests, run against ConversationSession on the test database.

The ``openai-agents`` 0.24.0 sdist ships its test suite; its session tests
(``tests/memory/test_session.py`` and ``test_session_limit.py``) are vendored
in ``openai_agents_sdk/`` and written against ``SQLiteSession(session_id,
db_path)``. Each case below runs with that name bound to a factory that makes
a ConversationSession instead (one conversation per ``(db_path, session_id)``,
so the cases' separate databases stay separate), through the SDK's
``Runner.run``, ``run_sync`` and ``run_streamed`` where the case takes a
runner method. Left out: the cases about SQLiteSession's own machinery
(its sqlite3 connections per worker thread, its file lock, rows it corrupts
with raw SQL, its rollback and cancellation plumbing): they name what a
Django store has no equivalent of. ``closed_rejects_empty_add_items`` matches
SQLiteSession's message; its rule is checked here with ours.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from agents import set_tracing_disabled
from asgiref.sync import sync_to_async
from django.db import connections

from agent_persistence.integrations.openai_agents import ConversationSession
from agent_persistence.testing.actors import ALICE
from tests.integrations.openai_agents_sdk import sdk_session, sdk_session_limit

pytestmark = pytest.mark.django_db(transaction=True)

SESSIONS = uuid.UUID("5d1c0c6e-4f55-4a53-9d0b-3c1f8f0b9a11")

CASES: dict[ModuleType, list[str]] = {
    sdk_session: [
        "test_session_memory_basic_functionality_parametrized",
        "test_session_memory_with_explicit_instance_parametrized",
        "test_session_memory_disabled_parametrized",
        "test_session_memory_different_sessions_parametrized",
        "test_sqlite_session_memory_direct",
        "test_sqlite_session_memory_pop_item",
        "test_session_memory_pop_different_sessions",
        "test_sqlite_session_get_items_with_limit",
        "test_session_memory_appends_list_input_by_default",
        "test_session_callback_prepared_input",
        "test_session_callback_repeating_history_does_not_grow_session",
        "test_sqlite_session_unicode_content",
        "test_sqlite_session_special_characters_and_sql_injection",
        "test_sqlite_session_concurrent_access",
        "test_session_add_items_exception_propagates_in_streamed",
        "test_session_settings_default",
        "test_session_settings_constructor",
        "test_session_settings_constructor_normalizes_dictionary",
        "test_session_settings_rejects_unknown_dictionary_fields",
        "test_get_items_uses_session_settings_limit",
        "test_get_items_explicit_limit_overrides_session_settings",
        "test_session_settings_resolve",
        "test_runner_with_session_settings_override",
    ],
    sdk_session_limit: [
        "test_session_limit_parameter",
        "test_session_limit_drops_unmatched_history_function_call_output",
        "test_session_limit_zero",
        "test_session_limit_none_gets_all_history",
        "test_session_limit_larger_than_history",
    ],
}
RUNNER_METHODS = ("run", "run_sync", "run_streamed")


def conversation_session(session_id: str, db_path: Any = ":memory:", *, session_settings: Any = None,
                         **_options: Any) -> ConversationSession:
    """What the SDK's cases build as ``SQLiteSession(session_id, db_path, ...)``."""
    conversation_id = uuid.uuid5(SESSIONS, f"{db_path}|{session_id}")
    return ConversationSession(ALICE, conversation_id, session_settings=session_settings)


def cases() -> list[Any]:
    return [pytest.param(getattr(module, name), id=name) for module, names in CASES.items() for name in names]


def run_case(function: Callable[..., Any], arguments: dict[str, Any]) -> None:
    if not inspect.iscoroutinefunction(function):
        function(**arguments)
        return

    async def main() -> None:
        try:
            await function(**arguments)
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(main())


@pytest.fixture(autouse=True)
def no_trace_export() -> Any:
    """The SDK's own conftest swaps in a test span processor; here the cases' runs just trace nothing."""
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


@pytest.mark.parametrize("function", cases())
def test_sdk_session_case(function: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """One SDK case; one taking a runner method runs with each of them (one test each would flush the tables thrice)."""
    for module in CASES:
        monkeypatch.setattr(module, "SQLiteSession", conversation_session)
    takes_runner = "runner_method" in inspect.signature(function).parameters
    for arguments in ([{"runner_method": method} for method in RUNNER_METHODS] if takes_runner else [{}]):
        run_case(function, arguments)


def test_a_closed_session_refuses_every_call_and_closing_again_does_nothing() -> None:
    """The SDK's sessions are terminal once closed (SQLiteSession, RedisSession...): so is ours, data kept."""

    async def scenario() -> None:
        try:
            session = conversation_session("closing")
            await session.add_items([{"role": "user", "content": "hi"}])
            session.close()  # as SQLiteSession.close() is called
            for call in (session.get_items(), session.add_items([]), session.add_items([{"role": "user", "content": "x"}]),
                         session.pop_item(), session.clear_session()):
                with pytest.raises(RuntimeError, match="ConversationSession is closed"):
                    await call
            await session.close()  # as the SDK's async sessions are awaited; again: nothing
            reopened = conversation_session("closing")
            assert [item["content"] for item in await reopened.get_items()] == ["hi"]
            async with conversation_session("closing") as scoped:
                assert len(await scoped.get_items()) == 1
            assert scoped.closed
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(scenario())
