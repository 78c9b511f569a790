"""``useChat``'s request body, read strictly: the conversation, the question or the approvals, what the client holds.

``DefaultChatTransport`` posts ``{id, messages, trigger, messageId, ...body}`` where
``messages`` are the chat's UI messages (``{id, role, parts}``). The body has passed the
app's JSON policy already (:mod:`agent_persistence.api.parsers`); what is checked here is its
shape, each failure a 400 with code ``invalid`` (or ``unsupported_trigger``) and the field.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import Validation
from .chunks import Held

TRIGGERS = frozenset({"submit-message", "regenerate-message"})
#: The namespace of the user message ids made from UI message ids that are no UUIDs (``generateId``'s).
UI_MESSAGE_IDS = uuid.UUID("0c6f2d3a-8e41-5b97-a2d5-6b1e9f4c7a35")
#: The tool part states in which the client holds the call's result.
OUTPUT_STATES = frozenset({"output-available", "output-error", "output-denied"})


@dataclass
class ChatRequest:
    """What one ``POST`` asks: a question to start a turn with, or answers to pending interrupts, on ``conversation_id``."""

    conversation_id: uuid.UUID
    trigger: str
    agent: str | None = None
    question: dict[str, Any] | None = None  # the last message when it is the user's: {id, content}
    assistant: dict[str, Any] | None = None  # the last message when it is the assistant's (approvals, tool outputs)
    approvals: list[dict[str, Any]] = field(default_factory=list)  # [{id, approved, reason?}] of approval-responded parts
    outputs: dict[str, Any] = field(default_factory=dict)  # toolCallId -> output of parts the client completed


def invalid(message: str, where: str) -> Validation:
    return Validation(message, field=where)


def chat_request(data: Any) -> ChatRequest:
    """The body as a :class:`ChatRequest`; 400 otherwise."""
    if not isinstance(data, dict):
        raise invalid("The body is useChat's request: {id, messages, trigger}.", "body")
    raw_id = data.get("id")
    try:
        conversation_id = uuid.UUID(raw_id) if isinstance(raw_id, str) else None
    except ValueError:
        conversation_id = None
    if conversation_id is None:
        raise invalid("id is the chat's id, a UUID: useChat({ id: crypto.randomUUID() }).", "id")
    trigger = data.get("trigger", "submit-message")
    if not isinstance(trigger, str) or trigger not in TRIGGERS:
        raise Validation("trigger is submit-message or regenerate-message.", code="unsupported_trigger", field="trigger")
    agent = data.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise invalid("agent must be a string.", "agent")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages is a non-empty list of UI messages.", "messages")
    last = messages[-1]
    where = f"messages.{len(messages) - 1}"
    if not isinstance(last, dict) or not isinstance(last.get("id"), str) or not isinstance(last.get("parts"), list):
        raise invalid("A UI message is {id, role, parts}.", where)
    if not all(isinstance(part, dict) and isinstance(part.get("type"), str) for part in last["parts"]):
        raise invalid("Each part of a UI message is an object with a string type.", f"{where}.parts")
    request = ChatRequest(conversation_id, trigger, agent)
    role = last.get("role")
    if role == "user":
        request.question = {"id": last["id"], "content": content_of(last["parts"], where)}
    elif role == "assistant":
        request.assistant = last
        read_answers(request, last["parts"], where)
    else:
        raise invalid("The last message is the user's question or the assistant's message with approvals.", f"{where}.role")
    return request


def content_of(parts: list[dict[str, Any]], where: str) -> Any:
    """A user message's content: its text when all its parts are text, else the parts as sent."""
    if not parts:
        raise invalid("The question has no parts.", f"{where}.parts")
    if all(part["type"] == "text" for part in parts):
        texts = [part.get("text") for part in parts]
        if not all(isinstance(text, str) for text in texts):
            raise invalid("A text part's text is a string.", f"{where}.parts")
        return "".join(texts)
    return parts


def is_tool_part(part: dict[str, Any]) -> bool:
    return part["type"].startswith("tool-") or part["type"] == "dynamic-tool"


def read_answers(request: ChatRequest, parts: list[dict[str, Any]], where: str) -> None:
    for index, part in enumerate(parts):
        if not is_tool_part(part):
            continue
        state, approval = part.get("state"), part.get("approval")
        if state == "approval-responded":
            if not isinstance(approval, dict) or not isinstance(approval.get("id"), str) or not isinstance(approval.get("approved"), bool):
                raise invalid("An approval-responded part carries approval {id, approved}.", f"{where}.parts.{index}.approval")
            answer = {"id": approval["id"], "approved": approval["approved"]}
            if isinstance(approval.get("reason"), str):
                answer["reason"] = approval["reason"]
            request.approvals.append(answer)
        elif state == "output-available" and isinstance(part.get("toolCallId"), str):
            request.outputs[part["toolCallId"]] = part.get("output")


def user_message_id(conversation_id: uuid.UUID, message_id: str) -> uuid.UUID:
    """Our id of a UI message: its own when it is a UUID, else one made from it (the same for a retry)."""
    try:
        return uuid.UUID(message_id)
    except ValueError:
        return uuid.uuid5(UI_MESSAGE_IDS, f"{conversation_id}\n{message_id}")


def held_of(message: dict[str, Any] | None, message_id: uuid.UUID, text_length: int) -> Held | None:
    """What the client holds of the turn ``message_id``, from the assistant message it sent back (None: nothing).

    The text is counted from its text parts (capped at ``text_length``, what the turn holds); the
    tool calls from its tool parts.
    """
    if message is None or message.get("id") != str(message_id):
        return None
    offset = sum(len(part["text"]) for part in message["parts"] if part["type"] == "text" and isinstance(part.get("text"), str))
    inputs, outputs = set(), set()
    for part in message["parts"]:
        if is_tool_part(part) and isinstance(part.get("toolCallId"), str):
            inputs.add(part["toolCallId"])
            if part.get("state") in OUTPUT_STATES:
                outputs.add(part["toolCallId"])
    return Held(message_id, min(offset, text_length), frozenset(inputs), frozenset(outputs))
