"""The websocket follower's frames as chunks of the AI SDK's UI message stream (``ai`` 6 and 7).

One stream is one assistant message: the turn's (its ``messageId`` is the turn's message id,
so the client's message and the transcript's share an id). The mapping, frame by frame:

===================  ==========================================================================
frame                chunks
===================  ==========================================================================
first ``status``     ``start`` (``messageId``, ``messageMetadata``: our ids and the turn's state)
``status``           ``message-metadata`` when the state, run or epoch changed; ``done`` /
                     ``errored`` with no final answer stored: ``finish`` / ``error``
``delta``            ``text-start`` (when no text part is open), ``text-delta`` (the new text);
                     per new tool call ``tool-input-available``, and once it has a result
                     ``tool-output-available`` (``tool-output-denied`` for a denied approval)
``final``            the text and tool calls not sent yet, ``text-end``, then ``finish``
                     (``finishReason`` stop), ``abort`` (a stop: ``reason`` "cancelled") or
                     ``message-metadata`` with the error and ``error`` (errored)
``interrupt``        ``tool_approval``: ``tool-input-available`` + ``tool-approval-request``
                     (``approvalId`` = the interrupt's id); ``client_tool``: ``tool-input-available``
                     (the client answers with ``addToolOutput``); ``generic``: a ``data-interrupt``
                     part; then ``finish`` (``finishReason`` tool-calls, or other)
``error``            ``message-metadata`` with the error, then ``error`` (``errorText``)
===================  ==========================================================================

Text goes in one text part at a time; a tool call closes it, so the message's parts read in
the order they happened (text, tool, text). A stream that continues a message the client
holds (after an approval) starts from what the client sent back (:class:`Held`): only what
it lacks is sent, in new parts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ..realtime.sse import FrameTranslator

Chunk = dict[str, Any]

#: The keys of the result :meth:`agent_persistence.runtime.turn.Turn.tool` records for a denied approval.
DENIED_KEYS = frozenset({"denied", "reason", "cancelled"})


@dataclass(frozen=True)
class Held:
    """What a client holds of the turn ``message_id``: ``offset`` characters of text and some tool calls.

    ``inputs``: the ids of the tool calls it shows; ``outputs``: those of them it has a result for.
    """

    message_id: uuid.UUID
    offset: int = 0
    inputs: frozenset[str] = field(default_factory=frozenset)
    outputs: frozenset[str] = field(default_factory=frozenset)


def denied(result: Any) -> bool:
    """Whether a recorded result is the runtime's answer to a denied (or cancelled) approval."""
    return isinstance(result, dict) and result.get("denied") is True and set(result) <= DENIED_KEYS


class Translator(FrameTranslator[Chunk]):
    """Turns the frames of one turn into UI message stream chunks.

    ``held`` is what the client already holds (None: the message from its beginning, as a
    resumed stream replays it). ``finished`` is true once the message ended (``finish``,
    ``abort`` or ``error``): the stream ends. The dispatch and the ``attached``, ``error`` and
    ``access_lost`` frames are :class:`~agent_persistence.realtime.sse.FrameTranslator`'s, shared with AG-UI's events.
    """

    def __init__(self, conversation_id: uuid.UUID, *, held: Held | None = None) -> None:
        super().__init__()
        self.conversation_id = str(conversation_id)
        self.held = held
        self.message_id: uuid.UUID | None = held.message_id if held else None
        self.offset = held.offset if held else 0
        self.inputs: set[str] = set(held.inputs) if held else set()
        self.outputs: set[str] = set(held.outputs) if held else set()
        self.started = False
        self.text_id: str | None = None
        self.text_parts = 0
        self.turn: dict[str, Any] = {}

    # -- emitting ---------------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        """The message metadata: our ids (conversation, message, run), the producer epoch and the turn's state."""
        return {"conversationId": self.conversation_id, "messageId": str(self.message_id), **self.turn}

    def open_message(self, message_id: uuid.UUID) -> None:
        self.message_id = message_id
        self.started = True
        self.out.append({"type": "start", "messageId": str(message_id), "messageMetadata": self.metadata()})

    def close_text(self) -> None:
        if self.text_id is not None:
            self.out.append({"type": "text-end", "id": self.text_id})
            self.text_id = None

    def text(self, text: str) -> None:
        if not text:
            return
        if self.text_id is None:
            self.text_parts += 1
            self.text_id = f"{self.message_id}-text-{self.offset}-{self.text_parts}"
            self.out.append({"type": "text-start", "id": self.text_id})
        self.offset += len(text)
        self.out.append({"type": "text-delta", "id": self.text_id, "delta": text})

    def tool_input(self, call_id: str, name: str, arguments: Any) -> None:
        if call_id not in self.inputs:
            self.close_text()
            self.inputs.add(call_id)
            self.out.append({"type": "tool-input-available", "toolCallId": call_id, "toolName": name, "input": arguments})

    def tool_calls(self, calls: list[dict[str, Any]] | None) -> None:
        """Every tool call the client lacks (its input, then its result once recorded), in order."""
        for call in calls or []:
            if not isinstance(call, dict) or call.get("id") is None:
                continue
            call_id = str(call["id"])
            self.tool_input(call_id, str(call.get("name")), call.get("arguments", {}))
            if "result" in call and call_id not in self.outputs:
                self.outputs.add(call_id)
                result = call["result"]
                if denied(result):
                    self.out.append({"type": "tool-output-denied", "toolCallId": call_id})
                else:
                    self.out.append({"type": "tool-output-available", "toolCallId": call_id, "output": result})

    def finish(self, chunk: Chunk) -> None:
        self.close_text()
        self.finished = True
        self.out.append(chunk)

    def fail(self, code: str, message: str) -> None:
        if self.finished:
            return
        if not self.started:
            self.out.append({"type": "start", "messageMetadata": {"conversationId": self.conversation_id}})
            self.started = True
        self.close_text()
        self.out.append({"type": "message-metadata", "messageMetadata": {"error": {"code": code, "message": message}}})
        self.finish({"type": "error", "errorText": message})

    def set_turn(self, state: str, run_id: Any, epoch: Any) -> None:
        turn = {"runId": run_id, "epoch": epoch, "state": state}
        if turn != self.turn:
            self.turn = turn
            if self.started:
                self.out.append({"type": "message-metadata", "messageMetadata": self.metadata()})

    # -- frames -----------------------------------------------------------------------------------

    def on_status(self, frame: dict[str, Any]) -> None:
        if frame["message_id"] is None:
            if self.started:  # the turn's rows went away: the conversation was deleted
                self.fail("not_found", "The conversation is gone.")
            return  # no turn yet (the view answers 204 for that; a race): wait for one
        message_id = uuid.UUID(frame["message_id"])
        if self.held is not None and message_id != self.held.message_id:
            self.fail("turn_superseded", "Another turn holds the conversation now; read the transcript for the end of this one.")
            return
        if self.started and message_id != self.message_id:
            self.fail("turn_superseded", "Another turn holds the conversation now; read the transcript for the end of this one.")
            return
        self.set_turn(frame["state"], frame["run_id"], frame["epoch"])
        if not self.started:
            self.open_message(message_id)
        if self.attached:
            self.end_without_answer()

    def end_without_answer(self) -> None:
        """A turn that ended with no answer stored (and no interrupt pending) ends the message as it is."""
        if self.finished or not self.started:
            return
        state = self.turn.get("state")
        if state == "errored":
            self.fail("errored", "The turn ended with an error.")
        elif state == "done":
            self.finish({"type": "finish", "finishReason": "stop", "messageMetadata": self.metadata()})

    def current(self, frame: dict[str, Any]) -> bool:
        return self.started and uuid.UUID(frame["message_id"]) == self.message_id

    def on_delta(self, frame: dict[str, Any]) -> None:
        if not self.current(frame):
            return
        self.text(frame["text"])
        if "tool_calls" in frame:
            self.tool_calls(frame["tool_calls"])

    def on_final(self, frame: dict[str, Any]) -> None:
        if not self.current(frame):
            return
        message = frame["message"]
        content = message.get("content") or ""
        # The stored answer is the authority; the client holds its first `offset` characters already.
        self.text(content[self.offset:] if isinstance(content, str) else "")
        self.tool_calls(message.get("tool_calls"))
        error = frame.get("error")
        self.turn = {**self.turn, "state": "errored" if error else "done"}
        if error:
            self.fail(str(error.get("code") or "errored"), str(error.get("message") or "The turn failed."))
        elif frame.get("stop_reason") == "cancelled":
            self.out.append({"type": "message-metadata", "messageMetadata": self.metadata()})
            self.finish({"type": "abort", "reason": "cancelled"})
        else:
            self.finish({"type": "finish", "finishReason": "stop", "messageMetadata": self.metadata()})

    def on_interrupt(self, frame: dict[str, Any]) -> None:
        if not self.current(frame):
            return
        tools = False
        for pending in frame["interrupts"]:
            payload = pending.get("payload") or {}
            call_id = payload.get("tool_call_id") if isinstance(payload, dict) else None
            kind = pending.get("kind")
            if kind in ("tool_approval", "client_tool") and isinstance(call_id, str):
                tools = True
                self.tool_input(call_id, str(payload.get("name")), payload.get("arguments", {}))
                if kind == "tool_approval":
                    self.out.append({"type": "tool-approval-request", "approvalId": str(pending["id"]), "toolCallId": call_id})
            else:
                self.close_text()
                self.out.append({
                    "type": "data-interrupt", "id": str(pending["id"]),
                    "data": {"id": str(pending["id"]), "kind": kind, "payload": payload, "expiresAt": pending.get("expires_at")},
                })
        self.turn = {**self.turn, "state": "interrupted"}
        self.finish({"type": "finish", "finishReason": "tool-calls" if tools else "other", "messageMetadata": {
            **self.metadata(), "interrupts": [str(pending["id"]) for pending in frame["interrupts"]],
        }})
