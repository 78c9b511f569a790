"""ConversationSession: the OpenAI Agents SDK's Session protocol on the conversation store.

The protocol's contract (get_items with and without limit, add_items in order,
pop_item of the latest, clear_session), the mapping to and from the app's own
messages, use by the SDK's Runner, and races: concurrent add_items batches
stay whole and in order, concurrent pops never return one item twice.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from agents import RunConfig, Runner
from agents.memory import Session, SessionSettings
from asgiref.sync import sync_to_async
from django.db import connections

from agent_persistence.exceptions import ConversationNotOwned, NotFound
from agent_persistence.integrations.openai_agents import ConversationSession
from agent_persistence.models import Message
from agent_persistence.stores import conversation_store
from agent_persistence.testing.concurrency import run_in_threads
from tests.integrations.script import PART2
from tests.integrations.scripted_openai_agents import sdk_agent

pytestmark = pytest.mark.django_db(transaction=True)

ITEMS = [
    {"role": "user", "content": "What is q1?"},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"query": "q1"}'},
    {"type": "function_call_output", "call_id": "c1", "output": '{"answer": "result of q1"}'},
    {"type": "message", "role": "assistant", "id": "m1", "status": "completed",
     "content": [{"type": "output_text", "text": "It is 42.", "annotations": []}]},
]


def run(coro: Any) -> Any:
    async def main() -> Any:
        try:
            return await coro
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


def test_it_is_a_session_and_an_empty_conversation_has_no_items(alice: Any) -> None:
    session = ConversationSession(alice, uuid.uuid4())
    assert isinstance(session, Session)
    assert run(session.get_items()) == []
    assert run(session.pop_item()) is None
    run(session.clear_session())


def test_items_round_trip_in_order_with_limits_and_read_as_messages(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    session = ConversationSession(alice, conversation_id, agent="support")
    run(session.add_items(ITEMS[:2]))
    run(session.add_items(ITEMS[2:]))
    assert run(session.get_items()) == ITEMS
    assert run(session.get_items(limit=2)) == ITEMS[2:]
    assert run(session.get_items(limit=0)) == []
    assert run(ConversationSession(alice, conversation_id, session_settings=SessionSettings(limit=1)).get_items()) == ITEMS[3:]
    # The app shows them as messages: roles, text, the tool call and its output.
    messages = list(Message.objects.filter(conversation_id=conversation_id).order_by("position"))
    assert [(m.role, m.content) for m in messages] == [
        ("user", "What is q1?"), ("assistant", ""), ("tool", '{"answer": "result of q1"}'), ("assistant", "It is 42."),
    ]
    assert messages[1].tool_calls == [{"id": "c1", "name": "lookup", "arguments": {"query": "q1"}}]
    assert messages[2].tool_call_id == "c1"
    assert conversation_store().get(alice, conversation_id).agent == "support"


def test_pop_item_removes_the_latest_and_clear_session_removes_all(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    session = ConversationSession(alice, conversation_id)
    run(session.add_items(ITEMS))
    assert run(session.pop_item()) == ITEMS[3]
    assert run(session.pop_item()) == ITEMS[2]
    assert run(session.get_items()) == ITEMS[:2]
    run(session.clear_session())
    assert run(session.get_items()) == []
    assert conversation_store().get(alice, conversation_id)  # the conversation itself stays


def test_messages_the_app_wrote_read_back_as_sdk_items(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    store = conversation_store()
    store.append_message(alice, conversation_id, role="user", content="hello", create=True)
    store.append_message(
        alice, conversation_id, role="assistant", content="done",
        tool_calls=[{"id": "call-1", "name": "lookup", "arguments": {"query": "q1"}, "result": {"answer": "a"}}],
    )
    session = ConversationSession(alice, conversation_id)
    assert run(session.get_items()) == [
        {"role": "user", "content": "hello"},
        {"type": "function_call", "call_id": "call-1", "name": "lookup", "arguments": '{"query": "q1"}'},
        {"type": "function_call_output", "call_id": "call-1", "output": '{"answer": "a"}'},
        {"role": "assistant", "content": "done"},
    ]
    # Popping the answer returns its last item and keeps the ones before it.
    assert run(session.pop_item()) == {"role": "assistant", "content": "done"}
    assert len(run(session.get_items())) == 3


def test_the_sdk_runner_keeps_its_history_in_the_conversation(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    session = ConversationSession(alice, conversation_id)
    agent = sdk_agent(approval=False)

    async def two_runs() -> list[Any]:
        first = await Runner.run(agent, "hello", session=session, run_config=RunConfig(tracing_disabled=True))
        second = await Runner.run(agent, "again", session=session, run_config=RunConfig(tracing_disabled=True))
        return [first.final_output, second.final_output]

    outputs = run(two_runs())
    assert outputs == [PART2, PART2]  # the second run saw the first one's tool output in its history
    items = run(session.get_items())
    assert items[0] == {"content": "hello", "role": "user"}
    assert [item.get("type") for item in items].count("function_call_output") == 1
    assert [item.get("content") for item in items if item.get("role") == "user"] == ["hello", "again"]
    assert Message.objects.filter(conversation_id=conversation_id, role="user").count() == 2


def test_another_user_cannot_write_or_read_the_session(alice: Any, mallory: Any) -> None:
    conversation_id = uuid.uuid4()
    run(ConversationSession(alice, conversation_id).add_items(ITEMS[:1]))
    intruder = ConversationSession(mallory, conversation_id)
    assert run(intruder.get_items()) == []
    assert run(intruder.pop_item()) is None
    with pytest.raises((NotFound, ConversationNotOwned)):
        run(intruder.add_items(ITEMS[1:2]))
    assert run(ConversationSession(alice, conversation_id).get_items()) == ITEMS[:1]


def test_concurrent_add_items_batches_stay_whole_and_in_order(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    ConversationSession(alice, conversation_id).add_items_sync([{"role": "user", "content": "start"}])

    def writer(index: int) -> None:
        batch = [{"role": "user", "content": f"w{index}-{n}"} for n in range(5)]
        ConversationSession(alice, conversation_id).add_items_sync(batch)

    assert [o for o in run_in_threads(6, writer) if isinstance(o, BaseException)] == []
    contents = [item["content"] for item in ConversationSession(alice, conversation_id).get_items_sync()][1:]
    assert len(contents) == 30
    for start in range(0, 30, 5):
        writer_id = contents[start].split("-")[0]
        assert contents[start:start + 5] == [f"{writer_id}-{n}" for n in range(5)]


def test_concurrent_pops_never_return_one_item_twice(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    items = [{"role": "user", "content": f"item {n}"} for n in range(12)]
    ConversationSession(alice, conversation_id).add_items_sync(items)

    def popper(index: int) -> list[Any]:
        session = ConversationSession(alice, conversation_id)
        popped = []
        while (item := session.pop_item_sync()) is not None:
            popped.append(item["content"])
        return popped

    results = run_in_threads(4, popper)
    assert [o for o in results if isinstance(o, BaseException)] == []
    popped = [content for result in results for content in result]
    assert sorted(popped) == sorted(item["content"] for item in items)
    assert ConversationSession(alice, conversation_id).get_items_sync() == []
