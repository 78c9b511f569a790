"""A conversation as Pydantic AI ModelMessages and back, through the conversation store, on the test database.

Both round trips, with every part kind the columns hold (system prompt, user
prompt with image URL, document URL and binary content, thinking with its
signature, text, tool call, tool return, a retried tool call, retry feedback,
file, usage with details) and some they do not (a native tool call and
return, instructions, model and provider names, part ids):
ModelMessages -> stored -> ModelMessages gives the same dump, also for one
message of each part kind Pydantic AI's request and response unions hold
(speech, compaction, capability and settings deltas...); stored ->
ModelMessages -> stored gives the same rows (ids, times, every field). Then an
edited message exports what it says now, the export feeds a real Pydantic AI
run, and the store's scoping holds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import typing
import uuid
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import (
    BinaryContent,
    DocumentUrl,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RequestUsage,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai import messages as pai
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_persistence.exceptions import Conflict, ConversationNotOwned, NotFound
from agent_persistence.integrations.pydantic_ai_messages import (
    aexport_model_messages,
    export_model_messages,
    import_model_messages,
)
from agent_persistence.stores import conversation_store

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def pydantic_history() -> list[ModelMessage]:
    """A history with every part kind, as a Pydantic AI run (and a provider) would leave it."""
    return [
        ModelRequest(parts=[
            SystemPromptPart(content="Be brief.", timestamp=at(0)),
            UserPromptPart(content=["What is on these?", ImageUrl(url="https://example.com/cat.png"),
                                    DocumentUrl(url="https://example.com/order.pdf"),
                                    BinaryContent(data=PNG, media_type="image/png")], timestamp=at(0)),
        ], timestamp=at(0), instructions="Help with orders."),
        ModelResponse(parts=[
            ThinkingPart(content="The user wants the order.", signature="sig-1", id="th-1", provider_name="test"),
            TextPart(content="Let me look.", id="tx-1"),
            ToolCallPart(tool_name="lookup", args={"order": "42"}, tool_call_id="call-1"),
            ToolCallPart(tool_name="refund", args='{"order": "42"}', tool_call_id="call-2"),
            NativeToolCallPart(tool_name="web_search", args={"query": "order 42"}, tool_call_id="native-1", provider_name="test"),
            NativeToolReturnPart(tool_name="web_search", content={"hits": 3}, tool_call_id="native-1", provider_name="test"),
        ], usage=RequestUsage(input_tokens=120, output_tokens=30, cache_read_tokens=7, details={"reasoning_tokens": 11}),
            model_name="test-model", provider_name="test", timestamp=at(1), finish_reason="tool_call"),
        ModelRequest(parts=[
            ToolReturnPart(tool_name="lookup", content={"status": "shipped", "eta": [2026, 1, 3]}, tool_call_id="call-1", timestamp=at(2)),
            ToolReturnPart(tool_name="refund", content="order must be an integer", tool_call_id="call-2", outcome="retried",
                           retry=RetryInfo("validation_error", attempt=1, max_retries=2), timestamp=at(2)),
        ], timestamp=at(2)),
        ModelResponse(parts=[
            TextPart(content="It shipped; here is the label."),
            FilePart(content=BinaryContent(data=PNG, media_type="image/png")),
        ], usage=RequestUsage(input_tokens=200, output_tokens=12), model_name="test-model", timestamp=at(3)),
        ModelRequest(parts=[RetryFeedbackPart(content="Please answer in one sentence.", retry=RetryInfo("model_retry"),
                                              timestamp=at(4))], timestamp=at(4)),
        ModelResponse(parts=[TextPart(content="It ships tomorrow.")], timestamp=at(5)),
        ModelRequest(parts=[UserPromptPart(content="Thanks!", timestamp=at(6))], timestamp=at(6)),
    ]


def dumped(messages: list[ModelMessage]) -> list[Any]:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def test_model_messages_to_the_store_and_back_are_the_same_messages(alice: Any) -> None:
    history = pydantic_history()
    conversation_id = uuid.uuid4()
    import_model_messages(alice, conversation_id, history, create=True)

    assert dumped(export_model_messages(alice, conversation_id)) == dumped(history)
    # The stored transcript says it in the app's own terms, for the API, the admin and the bridges.
    stored = conversation_store().list_messages(alice, conversation_id).items
    assert [m.role for m in stored] == ["system", "user", "assistant", "tool", "tool", "assistant", "user", "assistant", "user"]
    system, user, asked, returned, retried, labelled, nudged, answered, thanks = stored
    assert system.content == "Be brief."
    assert user.content == "What is on these?"
    assert [f["kind"] for f in user.files] == ["image-url", "document-url", "binary"]
    assert asked.content == "Let me look."
    assert asked.metadata["thinking"] == [{"content": "The user wants the order.", "signature": "sig-1"}]
    assert asked.tool_calls == [{"id": "call-1", "name": "lookup", "arguments": {"order": "42"}},
                                {"id": "call-2", "name": "refund", "arguments": {"order": "42"}}]
    assert asked.usage == {"input_tokens": 120, "output_tokens": 30, "cache_read_tokens": 7, "details": {"reasoning_tokens": 11}}
    assert (returned.name, returned.tool_call_id, returned.content) == ("lookup", "call-1", {"status": "shipped", "eta": [2026, 1, 3]})
    assert (retried.name, retried.tool_call_id, retried.content) == ("refund", "call-2", "order must be an integer")
    assert labelled.files[0]["media_type"] == "image/png" and labelled.usage == {"input_tokens": 200, "output_tokens": 12}
    assert (nudged.role, nudged.content) == ("user", "Please answer in one sentence.")
    assert (answered.content, thanks.content) == ("It ships tomorrow.", "Thanks!")
    assert asked.created_at == at(1) and thanks.created_at == at(6)


# -- one message of every part kind Pydantic AI's unions hold ------------------------------------------------

CANDIDATES: dict[str, list[Any]] = {
    "retry": [pai.RetryInfo("model_retry")], "speaker": ["user", "assistant"], "settings": [{"temperature": 0.1}],
    "instructions": ["Be kind.", []], "id": ["part-1"],
}
PLAIN = ["text", [], {"k": 1}]


def union_members(union: Any) -> list[type]:
    found: list[type] = []
    for member in typing.get_args(typing.get_args(union)[0]):
        part = typing.get_args(member)[0]
        if part not in found and part is not pai.RetryPromptPart:  # deprecated: validated into its successors
            found.append(part)
    return found


def round_trips(message: Any) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            dumped = pai.ModelMessagesTypeAdapter.dump_python([message], mode="json")
            again = pai.ModelMessagesTypeAdapter.dump_python(pai.ModelMessagesTypeAdapter.validate_python(dumped), mode="json")
        except Exception:
            return False
    return dumped == again


def one_of_each(union: Any, wrap: Any) -> list[Any]:
    """A message per part kind (its first plain values that build it) that Pydantic AI's own dump and load give back unchanged."""
    messages = []
    for part_type in union_members(union):
        required = [f.name for f in dataclasses.fields(part_type)
                    if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        for values in itertools.product(*[CANDIDATES.get(name, PLAIN) for name in required]):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    message = wrap(part_type(**dict(zip(required, values, strict=True))))
            except Exception:
                continue
            if round_trips(message):
                messages.append(message)
                break
    return messages


def test_every_part_kind_of_pydantic_ai_comes_back_as_it_went_in(alice: Any) -> None:
    requests = one_of_each(pai.ModelRequestPart, lambda part: ModelRequest(parts=[part], timestamp=at(0)))
    responses = one_of_each(pai.ModelResponsePart, lambda part: ModelResponse(parts=[part], timestamp=at(1)))
    # Built here: 11 of the 13 request kinds, 10 of the 12 response kinds (FilePart is in pydantic_history).
    assert len(requests) >= 11 and len(responses) >= 10
    history = [message for pair in itertools.zip_longest(requests, responses) for message in pair if message is not None]
    conversation_id = uuid.uuid4()
    import_model_messages(alice, conversation_id, history, create=True)
    assert dumped(export_model_messages(alice, conversation_id)) == dumped(history)


def app_transcript(alice: Any, conversation_id: uuid.UUID) -> list[Any]:
    """A transcript as the app writes it: a turn's answer keeps its tool calls with their results."""
    store = conversation_store()
    rows = [
        {"role": "system", "content": "You are the order desk."},
        {"role": "user", "content": "Refund order 42, receipt attached.",
         "files": [{"kind": "image-url", "url": "https://example.com/receipt.png"}, {"id": "file-7", "name": "receipt.pdf"}]},
        {"role": "assistant", "content": "Refunded: 12 EUR.", "metadata": {"thinking": [{"content": "Check first."}], "pinned": True},
         "tool_calls": [{"id": "call-1", "name": "lookup", "arguments": {"order": "42"}, "result": {"total": 12}},
                        {"id": "call-2", "name": "refund", "arguments": {"order": "42"}, "result": "done"}],
         "usage": {"input_tokens": 50, "output_tokens": 9, "requests": 2}},
        {"role": "tool", "content": {"ok": True}, "name": "audit", "tool_call_id": "call-9"},
        {"role": "assistant", "content": {"structured": [1, 2]}},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call-3", "name": "ask_manager", "arguments": {}}]},
        {"role": "user", "content": "Thanks."},
    ]
    for index, row in enumerate(rows):
        store.merge_messages(alice, conversation_id, [{**row, "id": str(uuid.uuid4()), "created_at": at(index).isoformat()}], create=True)
    return store.list_messages(alice, conversation_id).items


def row_fields(message: Any) -> dict[str, Any]:
    return {name: getattr(message, name) for name in (
        "id", "role", "content", "name", "tool_call_id", "tool_calls", "files", "metadata", "usage", "created_at")}


def test_the_store_to_model_messages_and_back_are_the_same_rows(alice: Any) -> None:
    source = uuid.uuid4()
    original = app_transcript(alice, source)
    exported = export_model_messages(alice, source)

    parts = [type(part) for message in exported for part in message.parts]
    for kind in (SystemPromptPart, UserPromptPart, ThinkingPart, TextPart, ToolCallPart, ToolReturnPart):
        assert kind in parts
    # The turn's answer: its calls, their recorded returns, then its text, as the model saw them.
    turn = [m for m in exported if m.metadata["agent_persistence"]["message_id"] == str(original[2].id)]
    assert [type(m) for m in turn] == [ModelResponse, ModelRequest, ModelResponse]
    assert [p.content for p in turn[1].parts] == [{"total": 12}, "done"]
    user_prompt = exported[1].parts[0]
    assert user_prompt.content[0] == "Refund order 42, receipt attached." and isinstance(user_prompt.content[1], ImageUrl)

    conversation_store().replace_messages(alice, source, [])
    assert conversation_store().list_messages(alice, source).items == []
    import_model_messages(alice, source, exported, replace=True)
    assert [row_fields(m) for m in conversation_store().list_messages(alice, source).items] == [row_fields(m) for m in original]

    copy = uuid.uuid4()  # into another conversation: the same rows under new ids
    with pytest.raises(Conflict):
        import_model_messages(alice, copy, exported, create=True)
    import_model_messages(alice, copy, exported, create=True, keep_ids=False)
    copied = conversation_store().list_messages(alice, copy).items
    assert [{**row_fields(m), "id": None} for m in copied] == [{**row_fields(m), "id": None} for m in original]


def test_an_edited_message_exports_what_it_says_now(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    history = pydantic_history()
    import_model_messages(alice, conversation_id, history, create=True)
    answered = conversation_store().list_messages(alice, conversation_id).items[7]
    conversation_store().update_message(alice, conversation_id, answered.id, content="It ships on Monday.")
    exported = export_model_messages(alice, conversation_id)
    assert dumped(exported[:5]) == dumped(history[:5])
    texts = [part.content for part in exported[5].parts if isinstance(part, TextPart)]
    assert texts == ["It ships on Monday."]


@pytest.mark.django_db(transaction=True)  # the async export reads from Django's sync thread
def test_an_export_is_a_history_pydantic_ai_runs_on(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    app_transcript(alice, conversation_id)
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart("You are welcome.")])

    async def export_and_run() -> Any:
        try:
            history = await aexport_model_messages(alice, conversation_id)
            # agent.run, not run_sync: run_sync leaves its event loop open, for another test to trip on.
            return await PydanticAgent(FunctionModel(respond)).run("Anything else?", message_history=history)
        finally:
            await sync_to_async(connections.close_all)()

    result = asyncio.run(export_and_run())
    assert result.output == "You are welcome."
    sent = [part for message in seen[0] for part in message.parts]
    assert any(isinstance(p, ToolReturnPart) and p.content == {"total": 12} for p in sent)
    assert isinstance(sent[0], SystemPromptPart) and sent[0].content == "You are the order desk."

    import_model_messages(alice, conversation_id, result.new_messages())  # the run's new exchange, appended
    roles = [m.role for m in conversation_store().list_messages(alice, conversation_id).items]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "assistant", "user", "user", "assistant"]

    # all_messages() is the history as Pydantic AI repaired it (adjacent messages merged, an orphaned tool
    # result dropped): what no longer matches its stored message comes in as new messages, never over another.
    before = {m.id: row_fields(m) for m in conversation_store().list_messages(alice, conversation_id).items}
    import_model_messages(alice, conversation_id, result.all_messages())
    after = {m.id: row_fields(m) for m in conversation_store().list_messages(alice, conversation_id).items}
    assert all(after[message_id] == fields for message_id, fields in before.items() if message_id in after)


def test_scoping_holds_both_ways(alice: Any, bob: Any, mallory: Any) -> None:
    conversation_id = uuid.uuid4()
    import_model_messages(alice, conversation_id, pydantic_history(), create=True)
    with pytest.raises(NotFound):
        export_model_messages(bob, conversation_id)
    with pytest.raises(NotFound):
        export_model_messages(mallory, conversation_id)
    with pytest.raises(NotFound):
        import_model_messages(bob, conversation_id, pydantic_history())
    conversation_store().share(alice, conversation_id)
    assert len(export_model_messages(bob, conversation_id)) == 7  # shared: readable in the tenant
    with pytest.raises(ConversationNotOwned):
        import_model_messages(bob, conversation_id, pydantic_history())  # and still written by its owner only
    with pytest.raises(NotFound):
        export_model_messages(mallory, conversation_id)
    assert len(conversation_store().list_messages(alice, conversation_id).items) == 9


@pytest.mark.django_db
def test_the_howtos_block_runs_as_pasted_into_a_shell(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/howto/pydantic-ai.md's export/import block, run as it stands: out, a run on it, in, archived and copied."""
    import re
    from pathlib import Path

    howto = (Path(__file__).resolve().parents[2] / "docs/howto/pydantic-ai.md").read_text()
    block = re.search(r"<!-- docs test: tests/integrations/test_pydantic_ai_messages.py -->\n```python\n(.*?)```", howto, re.DOTALL)
    assert block, "the how-to's marked block is gone"
    exec(compile(block.group(1), "docs/howto/pydantic-ai.md", "exec"), {"__name__": "__main__"})
    copied = int(capsys.readouterr().out.split()[0])
    assert copied == 4  # two runs: a request and a response each
