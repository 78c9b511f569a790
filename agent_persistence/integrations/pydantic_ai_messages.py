"""A conversation as Pydantic AI ``ModelMessage``s and back: move a history out of the app or into it.

Install with ``pip install agent-persistence[pydantic-ai-slim]``::

    from agent_persistence.integrations.pydantic_ai_messages import export_model_messages, import_model_messages

    history = export_model_messages(scope, conversation_id)      # list[ModelMessage], for agent.run(message_history=...)
    import_model_messages(scope, conversation_id, result.all_messages(), create=True)

Two directions, each lossless for what it starts from:

- **A stored message to ModelMessages.** ``system`` becomes a request with a
  ``SystemPromptPart``, ``user`` a ``UserPromptPart`` (its ``files`` that are
  Pydantic AI user content, an image URL or binary content say, beside the
  text), ``tool`` a ``ToolReturnPart``; ``assistant`` a response with its
  thinking (``metadata["thinking"]``), text, tool calls, files (``FilePart``)
  and usage (``RequestUsage``), and when its tool calls carry results (as a
  turn records them), a request with their returns and a response with the
  text. Every ModelMessage made from a stored message carries
  ``metadata["agent_persistence"]`` (the message id, and the fields its parts
  cannot say), so importing them again gives back the same stored message.
- **ModelMessages to stored messages.** A response becomes one ``assistant``
  message; a request one message per part (system, user, tool; a retry prompt
  of a tool call is a ``tool`` message, feedback on no call a ``user`` one). The
  ModelMessage itself, dumped as Pydantic AI dumps it, is kept in the first
  one's ``metadata["pydantic_ai"]``: exported again while the stored messages
  still say what it says, it is returned exactly as it came (timestamps, part
  ids, signatures, provider details, part kinds the columns have no place for);
  once a message is edited, the export is built from the stored fields.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from pydantic import TypeAdapter, ValidationError
from pydantic_ai.messages import (
    FilePart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RequestUsage,
    RetryFeedbackPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_core import to_jsonable_python

from ..stores import conversation_store

if TYPE_CHECKING:
    from ..models import Message
    from ..scope import Scope

#: Where a ModelMessage made from a stored message says which one (and what its parts cannot).
MARKER = "agent_persistence"
#: Where a stored message made from a foreign ModelMessage keeps it.
KEPT = "pydantic_ai"
#: The stored fields a conversion carries (``id`` and ``created_at`` besides).
FIELDS = ("role", "content", "name", "tool_call_id", "tool_calls", "files", "metadata", "usage")
USAGE_COUNTERS = tuple(
    field.name for field in dataclass_fields(RequestUsage) if field.name not in ("details", "cost")
)

_user_content: TypeAdapter[Any] = TypeAdapter(UserContent)


def _json(value: Any) -> Any:
    return to_jsonable_python(value, fallback=repr)


def _dump(message: ModelMessage) -> dict[str, Any]:
    return ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]


def _load(data: Any) -> ModelMessage:
    (message,) = ModelMessagesTypeAdapter.validate_python([data])
    return message


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content)


def _usage_of(usage: RequestUsage) -> dict[str, Any] | None:
    counters: dict[str, Any] = {name: getattr(usage, name) for name in USAGE_COUNTERS if getattr(usage, name)}
    if usage.details:
        counters["details"] = dict(usage.details)
    return counters or None


def _request_usage(usage: Any) -> RequestUsage:
    if not isinstance(usage, dict):
        return RequestUsage()
    counters = {name: usage[name] for name in USAGE_COUNTERS if isinstance(usage.get(name), int) and not isinstance(usage[name], bool)}
    details = usage.get("details")
    if isinstance(details, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in details.values()):
        counters["details"] = dict(details)
    return RequestUsage(**counters)


def _file_content(entry: Any) -> Any | None:
    """The Pydantic AI user content a stored ``files`` entry is (its dump), or None for another kind of entry."""
    if not isinstance(entry, dict) or "kind" not in entry:
        return None
    try:
        return _user_content.validate_python(entry)
    except ValidationError:
        return None


def _message(role: str, **values: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": "", "name": None, "tool_call_id": None, "tool_calls": None,
                               "files": None, "metadata": {}, "usage": None}
    message.update(values)
    return message


# -- ModelMessages -> stored messages -------------------------------------------------------------------------


def _messages_of_request(request: ModelRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for part in request.parts:
        if isinstance(part, SystemPromptPart):
            messages.append(_message("system", content=part.content))
        elif isinstance(part, UserPromptPart):
            if isinstance(part.content, str):
                messages.append(_message("user", content=part.content))
            else:
                texts = [item for item in part.content if isinstance(item, str)]
                files = [_json(item) for item in part.content if not isinstance(item, str)]
                messages.append(_message("user", content="\n".join(texts), files=files or None))
        elif isinstance(part, ToolReturnPart):
            messages.append(_message("tool", content=_json(part.content), name=part.tool_name, tool_call_id=part.tool_call_id))
        elif isinstance(part, RetryFeedbackPart):
            messages.append(_message("user", content=_json(part.content)))
    return messages or [_message("system")]  # a request of part kinds the columns have no place for


def _message_of_response(response: ModelResponse) -> dict[str, Any]:
    thinking = [{"content": part.content, **({"signature": part.signature} if part.signature else {})}
                for part in response.parts if isinstance(part, ThinkingPart)]
    calls = [{"id": part.tool_call_id, "name": part.tool_name, "arguments": _json(part.args_as_dict())}
             for part in response.parts if isinstance(part, ToolCallPart)]
    files = [_json(part.content) for part in response.parts if isinstance(part, FilePart)]
    return _message(
        "assistant",
        content="".join(part.content for part in response.parts if isinstance(part, TextPart)),
        tool_calls=calls or None, files=files or None, usage=_usage_of(response.usage),
        metadata={"thinking": thinking} if thinking else {},
    )


def _message_of_group(group: list[ModelMessage]) -> dict[str, Any]:
    """The stored message a run of ModelMessages made from one stored message stands for."""
    marker = group[0].metadata[MARKER]  # type: ignore[index]
    requests = [m for m in group if isinstance(m, ModelRequest)]
    responses = [m for m in group if isinstance(m, ModelResponse)]
    if marker.get("role") == "assistant":
        merged = ModelResponse(parts=[part for response in responses for part in response.parts])
        message = _message_of_response(merged)
        results = {part.tool_call_id: _json(part.content) for request in requests for part in request.parts
                   if isinstance(part, ToolReturnPart)}
        for call in message["tool_calls"] or []:
            if call["id"] in results:
                call["result"] = results[call["id"]]
        usage: dict[str, Any] = {}
        for response in responses:
            for name, value in (_usage_of(response.usage) or {}).items():
                usage[name] = value if name == "details" else usage.get(name, 0) + value
        message["usage"] = usage or None
    else:
        (message,) = _messages_of_request(requests[0]) if requests else [_message(str(marker.get("role")))]
    message.update(marker.get("fields") or {})
    message["id"] = marker["message_id"]
    message["created_at"] = group[0].timestamp.isoformat()
    return message


def _marker_id(message: ModelMessage) -> str | None:
    marker = (message.metadata or {}).get(MARKER)
    return marker.get("message_id") if isinstance(marker, dict) else None


def _part_kinds(model_messages: list[ModelMessage]) -> list[str]:
    return [part.part_kind for model_message in model_messages for part in model_message.parts]


def _foreign(model_message: ModelMessage) -> list[dict[str, Any]]:
    """The stored messages of a ModelMessage this app did not make, the first keeping it whole."""
    made = (_messages_of_request(model_message) if isinstance(model_message, ModelRequest)
            else [_message_of_response(model_message)])
    dump = _dump(model_message)
    (dump.get("metadata") or {}).pop(MARKER, None)
    made[0]["metadata"] = {**made[0]["metadata"], KEPT: dump}
    for follower in made[1:]:
        follower["metadata"] = {**follower["metadata"], KEPT: {"part_of": True}}
    for message in made:
        message["created_at"] = model_message.timestamp.isoformat()
    return made


def from_model_messages(model_messages: Sequence[ModelMessage], *, keep_ids: bool = True) -> list[dict[str, Any]]:
    """Stored messages (dicts of ``append_message`` / ``merge_messages`` fields) for ``model_messages``, in order.

    ModelMessages made by :func:`to_model_messages` give back the stored
    messages they were made from (same ids; fresh ones without ``keep_ids``,
    for a copy into another conversation, as message ids are unique across
    conversations); any other ModelMessage is kept in the first stored message
    made from it (``metadata["pydantic_ai"]``).
    """
    stored: list[dict[str, Any]] = []
    index = 0
    while index < len(model_messages):
        model_message = model_messages[index]
        message_id = _marker_id(model_message)
        if message_id is not None:
            end = index + 1
            while end < len(model_messages) and _marker_id(model_messages[end]) == message_id:
                end += 1
            group = list(model_messages[index:end])
            message = _message_of_group(group)
            if _part_kinds(_built_from_fields(message)) == _part_kinds(group):
                stored.append(message)
                index = end
                continue
            # Changed since the export (Pydantic AI merges adjacent messages and repairs tool pairing in a
            # run's history): imported as new messages, so it never overwrites the stored one it names.
            for model_message in group:
                stored.extend(_foreign(model_message))
            index = end
            continue
        stored.extend(_foreign(model_message))
        index += 1
    if not keep_ids:
        for message in stored:
            message.pop("id", None)
    return stored


# -- stored messages -> ModelMessages -------------------------------------------------------------------------


def _fields_of(message: Message | dict[str, Any]) -> dict[str, Any]:
    if isinstance(message, dict):
        values = {name: message.get(name) for name in FIELDS}
        values["id"], values["created_at"] = message.get("id"), message.get("created_at")
    else:
        values = {name: getattr(message, name) for name in FIELDS}
        values["id"], values["created_at"] = message.id, message.created_at
    values["metadata"] = dict(values["metadata"] or {})
    values["content"] = "" if values["content"] is None else values["content"]
    return values


def _timestamp(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def _built_from_fields(message: dict[str, Any]) -> list[ModelMessage]:
    """The ModelMessages a stored message's fields say, without its marker."""
    role, content = message["role"], message["content"]
    if role == "system":
        return [ModelRequest(parts=[SystemPromptPart(content=_text(content))])]
    if role == "tool":
        return [ModelRequest(parts=[ToolReturnPart(tool_name=message["name"] or "", content=content,
                                                   tool_call_id=message["tool_call_id"] or "")])]
    files = [found for found in (_file_content(entry) for entry in message["files"] or []) if found is not None]
    if role == "user":
        text = _text(content)
        return [ModelRequest(parts=[UserPromptPart(content=([text] if text else []) + files if files else text)])]
    thinking = [ThinkingPart(content=str(item.get("content", "")), signature=item.get("signature"))
                for item in message["metadata"].get("thinking") or [] if isinstance(item, dict)]
    calls = [call for call in message["tool_calls"] or [] if isinstance(call, dict)]
    call_parts = [ToolCallPart(tool_name=str(call.get("name", "")), args=call.get("arguments") or {},
                               tool_call_id=str(call.get("id", ""))) for call in calls]
    file_parts = [FilePart(content=found) for found in files if hasattr(found, "data")]  # binary content only
    usage = _request_usage(message["usage"])
    text_parts = [TextPart(content=_text(content))] if content != "" else []
    returns = [ToolReturnPart(tool_name=str(call.get("name", "")), content=call["result"], tool_call_id=str(call.get("id", "")))
               for call in calls if "result" in call]
    if not returns:
        return [ModelResponse(parts=[*thinking, *text_parts, *call_parts, *file_parts], usage=usage)]
    # A turn's message: the calls, their recorded returns, then the answer's text, as the model saw them.
    exchange: list[ModelMessage] = [ModelResponse(parts=[*thinking, *call_parts]), ModelRequest(parts=returns)]
    if text_parts or file_parts:
        exchange.append(ModelResponse(parts=[*text_parts, *file_parts], usage=usage))
    else:
        exchange[0].usage = usage  # type: ignore[union-attr]
    return exchange


def _comparable(message: dict[str, Any]) -> dict[str, Any]:
    values = {name: message.get(name) for name in FIELDS}
    values["metadata"] = {key: value for key, value in (values["metadata"] or {}).items() if key != KEPT}
    values["content"] = "" if values["content"] is None else values["content"]
    return json.loads(json.dumps(values, default=str))


def _marked(message: dict[str, Any]) -> list[ModelMessage]:
    built = _built_from_fields(message)
    for model_message in built:
        model_message.metadata = {MARKER: {"message_id": str(message["id"]), "role": message["role"]}}
        if (stamp := _timestamp(message["created_at"])) is not None:
            model_message.timestamp = stamp
    said = _comparable(_message_of_group(built))
    wanted = _comparable(message)
    extra = {name: wanted[name] for name in FIELDS if said[name] != wanted[name]}
    if extra:
        for model_message in built:
            model_message.metadata[MARKER]["fields"] = extra  # type: ignore[index]
    return built


def to_model_messages(messages: Iterable[Message | dict[str, Any]]) -> list[ModelMessage]:
    """Pydantic AI ModelMessages for stored messages (rows or dicts of their fields), in order.

    A ModelMessage kept by :func:`from_model_messages` comes back as it was
    while the stored messages made from it are unchanged; any other stored
    message is built from its fields and marked so it imports back the same.
    """
    stored = [_fields_of(message) for message in messages]
    result: list[ModelMessage] = []
    index = 0
    while index < len(stored):
        message = stored[index]
        kept = message["metadata"].get(KEPT)
        if isinstance(kept, dict) and "kind" in kept:
            try:
                original = _load(kept)
            except ValidationError:
                original = None
            if original is not None:
                made = from_model_messages([original])
                group = stored[index:index + len(made)]
                if len(group) == len(made) and all(
                    _comparable(a) == _comparable(b) for a, b in zip(made, group, strict=True)
                ):
                    result.append(original)
                    index += len(made)
                    continue
        result.extend(_marked(message))
        index += 1
    return result


# -- a conversation in and out of the store -------------------------------------------------------------------


def export_model_messages(scope: Scope, conversation_id: Any) -> list[ModelMessage]:
    """The conversation's transcript as ModelMessages (read access: the owner, or anyone in the tenant if shared)."""
    store = conversation_store()
    messages: list[Message] = []
    after = None
    while True:
        page = store.list_messages(scope, conversation_id, limit=100, after=after)
        messages.extend(page.items)
        if not page.has_more or not page.items:
            return to_model_messages(messages)
        after = page.items[-1].id


def import_model_messages(
    scope: Scope, conversation_id: Any, model_messages: Sequence[ModelMessage], *, create: bool = False,
    replace: bool = False, agent: str = "", keep_ids: bool = True,
) -> list[Message]:
    """Save ModelMessages into the conversation (owner only); the resulting transcript.

    By default they are merged by id (``merge_messages``: ModelMessages this
    app exported keep their ids, so importing a history it gave out again
    changes what changed and appends the rest); with ``replace`` the transcript
    becomes exactly them (``replace_messages``). ``create`` makes the
    conversation, owned by the scope's user, if it is absent. ModelMessages
    exported from another conversation need ``keep_ids=False`` (a message id
    belongs to one conversation: keeping it is a ``Conflict``).
    """
    store = conversation_store()
    messages = from_model_messages(model_messages, keep_ids=keep_ids)
    save = store.replace_messages if replace else store.merge_messages
    return list(save(scope, conversation_id, messages, create=create, agent=agent))


aexport_model_messages = sync_to_async(export_model_messages)
aimport_model_messages = sync_to_async(import_model_messages)
