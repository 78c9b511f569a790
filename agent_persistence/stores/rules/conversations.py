"""The backend-neutral rules of the conversations concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.conversations`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, NamedTuple

from ...conf import app_settings
from ...exceptions import Conflict, PreconditionFailed, StorageLimit, Validation
from ...ids import uuid7
from ...models import Conversation, LastTurnStatus, Message, Role
from .base import UNSET, can_read, check_scope, clean_datetime, clean_json, clean_object, clean_text, json_size, lookup_id, parse_id
from .times import clean_caller_time

#: The keys a message dict given to :meth:`ConversationStore.merge_messages` (or ``replace_messages``) may carry.
MESSAGE_KEYS = frozenset(
    {"id", "role", "content", "name", "tool_call_id", "tool_calls", "files", "metadata", "usage", "run_id", "created_at"}
)


MAX_VERSION = 2**63 - 1  # the largest value a PositiveBigIntegerField holds on every backend


def _max_length(model: type[Any], field_name: str) -> int:
    return model._meta.get_field(field_name).max_length


def clean_flag(value: Any, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise Validation(f"{field_name} must be true or false.", field=field_name)
    return value


def clean_last_turn_status(value: Any) -> str | None:
    if value is not None and value not in LastTurnStatus.values:
        raise Validation(
            f"last_turn_status must be one of {', '.join(LastTurnStatus.values)}, or null.", field="last_turn_status"
        )
    return value


def clean_state(value: Any) -> dict[str, Any]:
    state = clean_object(value, "state")
    limit = app_settings.MAX_STATE_BYTES
    if json_size(state) > limit:
        raise StorageLimit(f"state is larger than {limit} bytes.", field="state", limit=limit)
    return state


def clean_version(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VERSION:
        raise Validation("version must be a whole number, 0 or more.", field="version")
    return value


def is_pinned(metadata: dict[str, Any]) -> bool:
    return metadata.get("pinned") is True


def clean_conversation_changes(
    *,
    title: Any = UNSET,
    metadata: Any = UNSET,
    state: Any = UNSET,
    agent: Any = UNSET,
    shared: Any = UNSET,
    action_due_at: Any = UNSET,
    last_turn_status: Any = UNSET,
) -> dict[str, Any]:
    """The column values for the arguments that were given; ``pinned`` follows ``metadata``."""
    changes: dict[str, Any] = {}
    if title is not UNSET:
        changes["title"] = clean_text(title, "title", max_length=_max_length(Conversation, "title"), null=True)
    if metadata is not UNSET:
        changes["metadata"] = clean_object(metadata, "metadata")
        changes["pinned"] = is_pinned(changes["metadata"])
    if state is not UNSET:
        changes["state"] = clean_state(state)
    if agent is not UNSET:
        changes["agent"] = clean_agent(agent)
    if shared is not UNSET:
        changes["shared"] = clean_flag(shared, "shared")
    if action_due_at is not UNSET:
        changes["action_due_at"] = clean_datetime(action_due_at, "action_due_at")
    if last_turn_status is not UNSET:
        changes["last_turn_status"] = clean_last_turn_status(last_turn_status)
    return changes


def clean_agent(value: Any) -> str:
    return clean_text(value, "agent", max_length=_max_length(Conversation, "agent")) or ""


@dataclass(frozen=True)
class MessageInput:
    """A cleaned message, ready to be written: its id, its run and its column values.

    ``created_at`` is a time the caller gave (an import); None lets the store stamp it.
    """

    id: uuid.UUID
    run_id: uuid.UUID | None
    fields: dict[str, Any]
    created_at: datetime | None = None


def clean_role(value: Any) -> str:
    if value not in Role.values:
        raise Validation(f"role must be one of {', '.join(Role.values)}.", field="role")
    return value


def clean_optional_list(value: Any, field_name: str) -> list[Any] | None:
    """A JSON array, or None; an empty array reads as absent, as if it had not been given."""
    if value is None:
        return None
    cleaned = clean_json(value, field_name)
    if not isinstance(cleaned, list):
        raise Validation(f"{field_name} must be a JSON array.", field=field_name)
    return cleaned or None


def clean_optional_object(value: Any, field_name: str) -> dict[str, Any] | None:
    if value is None:
        return None
    return clean_object(value, field_name)


def check_message_size(content: Any, tool_calls: Any) -> None:
    limit = app_settings.MAX_MESSAGE_BYTES
    size = json_size(content) + (0 if tool_calls is None else json_size(tool_calls))
    if size > limit:
        raise StorageLimit(f"The message is larger than {limit} bytes.", field="content", limit=limit)


def clean_message(
    *,
    role: Any,
    content: Any,
    id: Any = None,
    name: Any = None,
    tool_call_id: Any = None,
    tool_calls: Any = None,
    files: Any = None,
    metadata: Any = None,
    usage: Any = None,
    run_id: Any = None,
    created_at: Any = None,
) -> MessageInput:
    text_length = _max_length(Message, "name")
    fields = {
        "role": clean_role(role),
        "content": clean_json(content, "content"),
        "name": clean_text(name, "name", max_length=text_length, null=True),
        "tool_call_id": clean_text(tool_call_id, "tool_call_id", max_length=text_length, null=True),
        "tool_calls": clean_optional_list(tool_calls, "tool_calls"),
        "files": clean_optional_list(files, "files"),
        "metadata": clean_object(metadata, "metadata"),
        "usage": clean_optional_object(usage, "usage"),
    }
    check_message_size(fields["content"], fields["tool_calls"])
    return MessageInput(
        id=uuid7() if id is None else parse_id(id, "id"),
        run_id=None if run_id is None else parse_id(run_id, "run_id"),
        fields=fields,
        created_at=clean_caller_time(created_at, field="created_at"),
    )


def clean_incoming_messages(messages: Any) -> list[MessageInput]:
    """The messages of a merge, each cleaned; an id may appear only once."""
    if not isinstance(messages, (list, tuple)):
        raise Validation("messages must be a list of message objects.", field="messages")
    cleaned: list[MessageInput] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise Validation(f"messages[{index}] must be an object.", field="messages")
        unknown = set(message) - MESSAGE_KEYS
        if unknown:
            names = ", ".join(sorted(map(str, unknown)))
            raise Validation(f"messages[{index}] has unknown keys: {names}.", field="messages")
        if "role" not in message:
            raise Validation(f"messages[{index}] has no role.", field="messages")
        fields = {key: value for key, value in message.items() if key != "content"}
        cleaned.append(clean_message(content=message.get("content"), **fields))
    ids = [message.id for message in cleaned]
    if len(set(ids)) != len(ids):
        raise Validation("messages may not repeat an id.", field="messages")
    return cleaned


def conversation_pk(conversation_id: Any, *, create: bool) -> uuid.UUID:
    # An id that may be created must be a well-formed one; an id only looked up names nothing.
    return parse_id(conversation_id, "conversation_id") if create else lookup_id(conversation_id)


#: The one answer to a client-chosen id that is taken, whoever holds it: the caller, another owner or
#: another tenant. Ids are global (a conversation or message is addressed by its id alone), so a taken
#: id cannot be given out again; the answer tells only that, never who holds it or whether the caller
#: may read it, and carries no details.
ID_TAKEN_MESSAGE = "This id is already taken; choose another."


#: One entry of a thread to save: an incoming message, or the id of a stored message kept as it is.
ThreadEntry = MessageInput | uuid.UUID


JSON_COLUMNS = frozenset({"content", "tool_calls", "files", "metadata", "usage"})


def merged_thread(stored_ids: list[uuid.UUID], incoming: list[MessageInput]) -> list[ThreadEntry]:
    """The thread the merge-by-id rule makes of the stored transcript (its ids, in order) and an incoming list.

    The last incoming id already stored is the cutoff: stored messages after it
    are dropped (a reload replaces the old answer). No incoming id stored: every
    stored message stays (a new turn). A kept id that comes in again is replaced
    by the incoming message in its place (incoming wins); the other incoming
    messages (new ids, no id, ids past the cutoff) follow, in their order.
    """
    stored = set(stored_ids)
    cutoff = next((message.id for message in reversed(incoming) if message.id in stored), None)
    kept = stored_ids if cutoff is None else stored_ids[: stored_ids.index(cutoff) + 1]
    kept_ids = set(kept)
    replacing = {message.id: message for message in incoming if message.id in kept_ids}
    return [replacing.get(message_id, message_id) for message_id in kept] + [
        message for message in incoming if message.id not in kept_ids
    ]


def turn_running(message_id: uuid.UUID) -> Conflict:
    """409 ``turn_running``: a whole-thread save while a turn of the conversation is running (or dead, not closed out).

    The running turn owns the end of the thread (its question, and the answer
    its seal appends under ``message_id``): a save would delete the question,
    store a client's partial answer under the turn's id (the seal then fails and
    the run stays running) or put messages between the question and the answer.
    """
    return Conflict(
        "A turn is running in this conversation; save the thread once it has ended.",
        code="turn_running",
        message_id=str(message_id),
    )


def clean_thread_tag(value: Any) -> int | str | None:
    """A save's precondition: None, a conversation version (int) or a thread tag (:func:`thread_tag`, text)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    if isinstance(value, str) and 0 < len(value) <= 64:
        return value.strip()
    raise Validation("if_match must be a conversation version or a thread tag.", field="if_match")


def thread_tag(conversation: Any) -> str:
    """The thread's entity tag, ``"<version>.<next_position>.<updated_at in µs>.<thread_revision>"``.

    An append, a seal and a thread save stamp the conversation's ``updated_at``
    (and an append or a seal moves ``next_position``); ``update_message`` and
    ``delete_message`` leave ``updated_at`` alone (an edit is not news of the
    conversation) and move ``thread_revision``. So the tag changes with every
    one of them, and every conversation update.
    """
    updated = conversation.updated_at
    return (
        f'"{conversation.version}.{conversation.next_position}.{int(updated.timestamp() * 1_000_000)}'
        f'.{conversation.thread_revision}"'
    )


def check_thread_tag(expected: int | str | None, conversation: Any) -> None:
    """PreconditionFailed ``version_mismatch`` unless the stored conversation is at ``expected``."""
    if expected is None:
        return
    if expected == (conversation.version if isinstance(expected, int) else thread_tag(conversation)):
        return
    raise PreconditionFailed(
        "The thread changed since you read it.",
        current_version=conversation.version,
        current_tag=thread_tag(conversation),
    )


class SavedThread(list):  # type: ignore[type-arg]
    """What a thread save returns: the saved transcript (a ``list[Message]``, oldest first) and its ``tag``.

    ``tag`` is :func:`thread_tag` of the conversation as the save left it, read
    under the save's lock, so it names exactly this transcript: a write
    committed after the save moves the stored tag away from it.
    """

    def __init__(self, messages: Iterable[Message], tag: str) -> None:
        super().__init__(messages)
        self.tag = tag


def same_value(column: str, stored: Any, wanted: Any) -> bool:
    # JSON compares as text: in Python 1 == 1.0 == True, but they are three different JSON values.
    if column in JSON_COLUMNS:
        return stored is wanted or json.dumps(stored, sort_keys=True) == json.dumps(wanted, sort_keys=True)
    return stored == wanted


def message_changes(stored: dict[str, Any], message: MessageInput) -> dict[str, Any]:
    """The columns in which ``message`` differs from the stored row of its id; empty when it is the same message."""
    wanted = {**message.fields, "run_id": message.run_id}
    if message.created_at is not None:
        wanted["created_at"] = message.created_at
    return {column: value for column, value in wanted.items() if not same_value(column, stored[column], value)}


#: Conversations an ORM store reads in one query of ``readable_ids``.
READABLE_CHUNK = 500


def clean_pairs(pairs: Iterable[tuple[Any, Any]]) -> set[tuple[Any, uuid.UUID]]:
    """The ``(scope, conversation id)`` pairs of ``readable_ids``, each scope checked, ids parsed.

    A pair whose id is no UUID names no conversation: it is left out (it is readable by no one).
    """
    cleaned = set()
    for scope, conversation_id in pairs:
        check_scope(scope)
        try:
            cleaned.add((scope, parse_id(conversation_id, "conversation")))
        except Validation:
            continue
    return cleaned


class ConversationAccess(NamedTuple):
    """The columns the read rule (:func:`~.base.can_read`) looks at, without the rest of the row."""

    tenant: str
    owner: str
    shared: bool


def readable_among(pairs: set[tuple[Any, uuid.UUID]], conversations: dict[uuid.UUID, Any]) -> set[tuple[Any, uuid.UUID]]:
    """The pairs whose scope may read its conversation, among the loaded ``conversations`` (by id)."""
    return {(scope, pk) for scope, pk in pairs if pk in conversations and can_read(scope, conversations[pk])}
