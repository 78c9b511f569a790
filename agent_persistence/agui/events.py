"""The websocket follower's frames as AG-UI events (the ``ag-ui-protocol`` package's models).

One stream is one AG-UI run of one turn: ``threadId`` is the conversation,
``runId`` the request's ``RunAgentInput.runId`` when it sent one, else the
turn's message id; the text message is the turn's assistant message (its id
is the turn's message id). The mapping, frame by frame:

===================  ==========================================================================
frame                events
===================  ==========================================================================
first ``status``     ``RUN_STARTED`` (``protocolVersion`` 1.0), then as any status
``status``           ``STATE_SNAPSHOT`` ``{"turn": {state, messageId, runId, epoch}}`` when it changed;
                     ``done`` / ``errored`` with no final answer stored: ``RUN_FINISHED`` / ``RUN_ERROR``
``delta``            ``TEXT_MESSAGE_START`` (once), ``TEXT_MESSAGE_CONTENT`` (the new text);
                     per new tool call ``TOOL_CALL_START``, ``_ARGS``, ``_END``, ``_RESULT``
``final``            the text and tool calls not sent yet, ``TEXT_MESSAGE_END``, then
                     ``RUN_FINISHED`` (outcome success, or cancelled) or ``RUN_ERROR`` (errored)
``interrupt``        ``ACTIVITY_SNAPSHOT`` per interrupt (``activityType`` "interrupt"),
                     ``TEXT_MESSAGE_END``, ``RUN_FINISHED`` with outcome ``interrupt``
``error``            ``RUN_ERROR`` with the frame's code
===================  ==========================================================================

A resumed stream starts with ``RUN_STARTED`` again and reopens what the client
had open (``TEXT_MESSAGE_START`` of the same message, ``TOOL_CALL_START`` of a
call whose arguments it has): AG-UI clients keep messages and tool calls by
id, so reopening adds nothing, and only what the client lacks is sent.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    ActivitySnapshotEvent,
    BaseEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from ..realtime.sse import FrameTranslator
from .positions import Position

#: Names the tool messages minted by ``TOOL_CALL_RESULT`` (uuid5 of the turn and the call).
TOOL_RESULT_NAMESPACE = uuid.UUID("8b0f7e0a-5d1c-4f6e-9a53-2c7d1e4b6a90")

Emitted = tuple[str, BaseEvent]


def tool_result_message_id(message_id: uuid.UUID, call_id: str) -> str:
    """The id of the tool message holding a call's result: the same on every replica and every reconnect."""
    return str(uuid.uuid5(TOOL_RESULT_NAMESPACE, f"{message_id}:{call_id}"))


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


class Translator(FrameTranslator[Emitted]):
    """Turns the frames of one turn into AG-UI events, each with the event id of the position it reaches.

    ``start`` is the position of a ``Last-Event-ID`` (None: from the beginning).
    ``finished`` is true once the run ended (``RUN_FINISHED`` or ``RUN_ERROR``): the stream ends.
    The dispatch and the ``attached``, ``error`` and ``access_lost`` frames are
    :class:`~agent_persistence.realtime.sse.FrameTranslator`'s, shared with the AI SDK's chunks.
    """

    def __init__(self, conversation_id: uuid.UUID, *, run_id: str | None = None, start: Position | None = None) -> None:
        super().__init__()
        self.thread_id = str(conversation_id)
        self.run_id = run_id
        self.position = start
        self.resuming = start is not None
        self.started = False
        self.text_open = False
        self.turn_status: dict[str, Any] | None = None

    # -- emitting ---------------------------------------------------------------------------------

    def emit(self, event: BaseEvent) -> None:
        self.out.append((str(self.position) if self.position is not None else "", event))

    def open_run(self, message_id: uuid.UUID) -> None:
        if self.position is None:
            self.position = Position(message_id)
        self.started = True
        self.emit(RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id or str(message_id), protocol_version=PROTOCOL_VERSION))
        if self.resuming and self.position.offset > 0:
            self.open_text()

    def open_text(self) -> None:
        if not self.text_open:
            self.text_open = True
            self.emit(TextMessageStartEvent(message_id=str(self.position.message_id), role="assistant"))

    def close_text(self) -> None:
        if self.text_open:
            self.text_open = False
            self.emit(TextMessageEndEvent(message_id=str(self.position.message_id)))

    def finish(self, event: BaseEvent) -> None:
        self.close_text()
        self.finished = True
        self.emit(event)

    def fail(self, code: str, message: str) -> None:
        if not self.finished:
            self.finish(RunErrorEvent(message=message, code=code))

    def text(self, text: str) -> None:
        if text:
            self.open_text()
            self.position = self.position.advanced(offset=self.position.offset + len(text))
            self.emit(TextMessageContentEvent(message_id=str(self.position.message_id), delta=text))

    def tool_calls(self, calls: list[dict[str, Any]] | None) -> None:
        """Every tool call with a result past the ones the client has whole, in order."""
        for call in (calls or [])[self.position.results:]:
            if not isinstance(call, dict) or "result" not in call:
                return  # a call still running: it is sent whole once its result is recorded
            message_id = self.position.message_id
            call_id = str(call.get("id"))
            self.emit(ToolCallStartEvent(tool_call_id=call_id, tool_call_name=str(call.get("name")), parent_message_id=str(message_id)))
            if not self.position.args:
                self.position = self.position.advanced(args=True)
                self.emit(ToolCallArgsEvent(tool_call_id=call_id, delta=as_json(call.get("arguments", {}))))
            self.emit(ToolCallEndEvent(tool_call_id=call_id))
            self.position = self.position.advanced(results=self.position.results + 1, args=False)
            self.emit(ToolCallResultEvent(
                message_id=tool_result_message_id(message_id, call_id), tool_call_id=call_id, content=as_json(call["result"]), role="tool",
            ))

    # -- frames -----------------------------------------------------------------------------------

    def on_status(self, frame: dict[str, Any]) -> None:
        if frame["message_id"] is None:
            if self.started:  # the turn's rows went away: the conversation was deleted
                self.fail("not_found", "The conversation is gone.")
            return  # no turn yet (the view refuses that; a race): wait for one
        message_id = uuid.UUID(frame["message_id"])
        if self.position is not None and message_id != self.position.message_id:
            if not self.started:
                self.open_run(self.position.message_id)
            self.fail("turn_superseded", "Another turn holds the conversation now; read the transcript for the end of this one.")
            return
        if not self.started:
            self.open_run(message_id)
        self.snapshot({"state": frame["state"], "messageId": frame["message_id"], "runId": frame["run_id"], "epoch": frame["epoch"]})
        if self.attached:
            self.end_without_answer()

    def end_without_answer(self) -> None:
        """A turn that ended with no answer stored (and no interrupt pending) ends the run as it is."""
        state = (self.turn_status or {}).get("state")
        if self.finished or not self.started:
            return
        if state == "errored":
            self.fail("errored", "The turn ended with an error.")
        elif state == "done":
            self.finish(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id or str(self.position.message_id)))

    def snapshot(self, status: dict[str, Any]) -> None:
        if status != self.turn_status:
            self.turn_status = status
            self.emit(StateSnapshotEvent(snapshot={"turn": status}))

    def on_delta(self, frame: dict[str, Any]) -> None:
        if not self.started or uuid.UUID(frame["message_id"]) != self.position.message_id:
            return
        self.position = self.position.advanced(index=max(self.position.index, frame["index"]))
        self.text(frame["text"])
        if "tool_calls" in frame:
            self.tool_calls(frame["tool_calls"])

    def on_final(self, frame: dict[str, Any]) -> None:
        if not self.started or uuid.UUID(frame["message_id"]) != self.position.message_id:
            return
        message = frame["message"]
        content = message.get("content") or ""
        self.position = self.position.advanced(index=max(self.position.index, frame["index"]))
        # The stored answer is the authority; the client holds its first `offset` characters already.
        self.text(content[self.position.offset:] if isinstance(content, str) else "")
        self.tool_calls(message.get("tool_calls"))
        error = frame.get("error")
        # The status frame that follows a final one comes after the stream has ended: say it here.
        self.snapshot({**(self.turn_status or {"messageId": frame["message_id"], "runId": None, "epoch": 0}),
                       "state": "errored" if error else "done"})
        if error:
            self.fail(str(error.get("code") or "errored"), str(error.get("message") or "The turn failed."))
            return
        outcome = RunFinishedCancelledOutcome() if frame.get("stop_reason") == "cancelled" else RunFinishedSuccessOutcome()
        self.finish(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id or str(self.position.message_id), outcome=outcome))

    def on_interrupt(self, frame: dict[str, Any]) -> None:
        if not self.started or uuid.UUID(frame["message_id"]) != self.position.message_id:
            return
        interrupts = []
        for pending in frame["interrupts"]:
            payload = pending.get("payload") or {}
            tool_call_id = payload.get("tool_call_id") if isinstance(payload, dict) else None
            self.emit(ActivitySnapshotEvent(
                message_id=str(pending["id"]), activity_type="interrupt",
                content={"id": pending["id"], "kind": pending["kind"], "payload": payload, "expiresAt": pending.get("expires_at")},
            ))
            interrupts.append(Interrupt(
                id=str(pending["id"]), reason=str(pending["kind"]), tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
                expires_at=pending.get("expires_at"), metadata={"payload": payload},
            ))
        self.finish(RunFinishedEvent(
            thread_id=self.thread_id, run_id=self.run_id or str(self.position.message_id),
            outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
        ))
