"""AG-UI event ids: where a client is in a turn, so a reconnect (to any replica) resumes exactly.

Every event of a stream carries the position reached once the client has it,
as ``<message_id>:<index>:<offset>:<results>:<args>``:

- ``message_id``: the turn (the assistant message);
- ``index``: the last recording index applied (the websocket's ``last_index``);
- ``offset``: the length of the answer's text the client holds;
- ``results``: how many tool calls the client has whole, result included;
- ``args``: 1 when it also has the arguments of the next tool call, else 0.

A ``Last-Event-ID`` is parsed strictly: anything else (garbage, signs, more
than 18 digits, more than :data:`MAX_LENGTH` characters) is 400
``invalid_last_event_id``; a position the turn cannot have reached is 400
too, and one of a turn that is no longer the conversation's is 410
``turn_superseded`` (see :func:`check_position`).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, replace
from typing import Any

from ..exceptions import Gone, Validation
from ..stores.protocols import TurnView

#: The longest ``Last-Event-ID`` read (a position is at most about 100 characters).
MAX_LENGTH = 200
HEADER = "Last-Event-ID"
_POSITION = re.compile(
    r"(?P<message_id>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r":(?P<index>\d{1,18}):(?P<offset>\d{1,18}):(?P<results>\d{1,9}):(?P<args>[01])"
)


@dataclass(frozen=True, slots=True)
class Position:
    """What a client holds of the turn ``message_id`` (see the module docstring)."""

    message_id: uuid.UUID
    index: int = 0
    offset: int = 0
    results: int = 0
    args: bool = False

    def __str__(self) -> str:
        return f"{self.message_id}:{self.index}:{self.offset}:{self.results}:{int(self.args)}"

    def advanced(self, **changes: Any) -> Position:
        return replace(self, **changes)


def invalid(message: str) -> Validation:
    return Validation(message, code="invalid_last_event_id", field=HEADER)


def parse_position(text: str | None) -> Position | None:
    """The position named by a ``Last-Event-ID`` value; None when absent or empty."""
    if text is None or text == "":
        return None
    if len(text) > MAX_LENGTH or _POSITION.fullmatch(text) is None:
        raise invalid(f"{HEADER} is not an event id of this stream: <message_id>:<index>:<offset>:<results>:<args>.")
    match = _POSITION.fullmatch(text)
    assert match is not None
    return Position(
        uuid.UUID(match["message_id"]), int(match["index"]), int(match["offset"]), int(match["results"]), match["args"] == "1"
    )


def check_position(position: Position, turn: TurnView) -> Position:
    """The position a stream of ``turn`` resumes from; refuses one the turn cannot have reached.

    - another turn holds the conversation: 410 ``turn_superseded`` (read the transcript);
    - the turn is not alive and the position is past what it holds (text, tool calls,
      recording index): 400 ``invalid_last_event_id``. While a producer is alive the
      recording lags live delivery, so a position ahead of it is taken as given.

    The index is capped at the recording's when the producer is not alive: nothing
    newer can arrive, and the follower would otherwise start over.
    """
    if turn.message_id != position.message_id:
        raise Gone(
            "The turn of this event id is over and another turn holds the conversation; read the transcript.",
            code="turn_superseded", field=HEADER,
        )
    if turn.state in ("alive", "queued"):  # queued: a worker takes it and streams on (TURN_RUNNER "tasks")
        return position
    message = (turn.final or {}).get("message") or (turn.record or {}).get("message") or {}
    text, calls = message.get("content") or "", message.get("tool_calls") or []
    if position.offset > len(text) or position.results > len(calls) or (position.args and position.results >= len(calls)):
        raise invalid(f"{HEADER} is past what the turn holds ({len(text)} characters, {len(calls)} tool calls).")
    known = turn.record["index"] if turn.record else 0
    if turn.record and position.index > known:
        raise invalid(f"{HEADER} is past the turn's last index {known}.")
    return position.advanced(index=min(position.index, known))
