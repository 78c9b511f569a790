"""ConversationSession: ``session_settings`` as the SDK takes it, and ``get_items(limit)`` reading ``limit`` rows.

The SDK's own sessions (``SQLiteSession``, 0.24) accept a ``SessionSettings``
or a plain dict (coerced; an unknown key or another type is a ``TypeError``);
ours does the same, with the same messages. ``get_items(limit)`` reads the
newest ``limit`` messages (one statement with a SQL ``LIMIT``), not the whole
conversation, proved on the statements themselves.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from agents import SQLiteSession
from agents.memory import SessionSettings
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from agent_persistence.integrations.openai_agents import ConversationSession
from agent_persistence.models import Message
from agent_persistence.stores import conversation_store

pytestmark = pytest.mark.django_db(transaction=True)


def run(coro: Any) -> Any:
    async def main() -> Any:
        try:
            return await coro
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


def user_items(count: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"message {n}"} for n in range(count)]


def test_a_dict_of_session_settings_is_coerced_as_the_sdk_does(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    session = ConversationSession(alice, conversation_id, session_settings={"limit": 2})
    assert isinstance(session.session_settings, SessionSettings) and session.session_settings.limit == 2
    session.add_items_sync(user_items(5))
    assert [item["content"] for item in run(session.get_items())] == ["message 3", "message 4"]
    assert [item["content"] for item in run(session.get_items(limit=3))] == ["message 2", "message 3", "message 4"]
    # The SDK's own session reads the same dict the same way.
    sdk = SQLiteSession("s", session_settings={"limit": 2})
    run(sdk.add_items(user_items(5)))
    assert run(sdk.get_items()) == run(session.get_items())
    assert ConversationSession(alice, conversation_id, session_settings={}).session_settings == SessionSettings()
    assert ConversationSession(alice, conversation_id, session_settings={"limit": None}).get_items_sync() == user_items(5)


@pytest.mark.parametrize("settings", [{"limt": 2}, {"limit": 2, "offset": 1}, 5, "limit=2", ["limit"]])
def test_unknown_session_settings_are_a_type_error_with_the_sdks_message(alice: Any, settings: Any) -> None:
    with pytest.raises(TypeError) as sdk_error:
        SQLiteSession("s", session_settings=settings)
    with pytest.raises(TypeError) as ours:
        ConversationSession(alice, uuid.uuid4(), session_settings=settings)
    assert str(ours.value) == str(sdk_error.value)


def message_reads(queries: list[dict[str, Any]]) -> list[str]:
    table = Message._meta.db_table
    return [query["sql"] for query in queries if query["sql"].lstrip().upper().startswith("SELECT") and table in query["sql"]]


def limits_of(sql: str) -> list[int]:
    return [int(value) for value in re.findall(r"\bLIMIT\s+(\d+)", sql, flags=re.IGNORECASE)]


def test_get_items_with_a_limit_reads_only_that_many_rows(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    session = ConversationSession(alice, conversation_id)
    session.add_items_sync(user_items(300))
    for limit in (1, 3, 40):
        with CaptureQueriesContext(connection) as captured:
            items = session.get_items_sync(limit)
        assert [item["content"] for item in items] == [f"message {n}" for n in range(300 - limit, 300)]
        reads = message_reads(captured.captured_queries)
        assert reads, "the messages were read"
        # Every statement on the messages table is bounded: at most limit + 1 rows (the +1 tells has_more).
        for sql in reads:
            assert limits_of(sql) and max(limits_of(sql)) <= limit + 1, sql
        assert len(reads) == 1
    with CaptureQueriesContext(connection) as captured:
        assert session.get_items_sync(0) == []
    assert message_reads(captured.captured_queries) == []


def test_a_limit_counts_items_when_a_message_stands_for_several_or_for_none(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    store = conversation_store()
    session = ConversationSession(alice, conversation_id)
    session.add_items_sync([{"role": "user", "content": "first"}])
    conversation = store.get(alice, conversation_id)
    # An answer the app wrote with a tool call: three items (the call, its output, the text).
    store.append_message(alice, conversation.pk, role="assistant", content="It is 42.",
                         tool_calls=[{"id": "c1", "name": "lookup", "arguments": {"q": 1}, "result": {"a": 42}}])
    # Empty answers stand for no item: the window reads on past them.
    for _ in range(3):
        store.append_message(alice, conversation.pk, role="assistant", content="")
    everything = session.get_items_sync()
    assert [item.get("type", item.get("role")) for item in everything] == [
        "user", "function_call", "function_call_output", "assistant"]
    for limit in range(1, 6):
        assert session.get_items_sync(limit) == everything[-limit:]
    with CaptureQueriesContext(connection) as captured:
        assert session.get_items_sync(2) == everything[-2:]
    assert all(limits_of(sql) for sql in message_reads(captured.captured_queries))
