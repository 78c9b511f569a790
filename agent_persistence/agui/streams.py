"""One AG-UI response: the turn as AG-UI events over server-sent events, resumable from a ``Last-Event-ID``.

The loop (the follower, keep-alives, the per-user cap, the access sweep, the release of
everything on every exit) is :mod:`agent_persistence.realtime.sse`'s, shared with the AI
SDK's stream; this module says where a client resumes (its :class:`~.positions.Position`)
and how events are written: each with the ``ag-ui-protocol`` package's ``EventEncoder``
behind an ``id:`` line (its position). A failure ends the run with ``RUN_ERROR``
``internal_error``, a user who may no longer read the conversation with ``RUN_ERROR``
``not_found``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, AsyncIterator

from ag_ui.encoder import EventEncoder

from ..realtime.sse import TurnStream
from ..scope import Scope
from .events import Emitted, Translator
from .positions import Position

CONTENT_TYPE = EventEncoder().get_content_type()


def encode(event_id: str, event: Any, encoder: EventEncoder) -> str:
    """One event as SSE: ``id: <position>`` then the encoder's ``data:`` line."""
    return (f"id: {event_id}\n" if event_id else "") + encoder.encode(event)


class AgUiStream(TurnStream[Emitted]):
    """One AG-UI run of the conversation's turn, from ``start`` (None: the beginning), until the run ends."""

    name = "AG-UI"
    logger = logging.getLogger(__name__)

    def __init__(self, scope: Scope, conversation_id: uuid.UUID, *, start: Position | None, run_id: str | None) -> None:
        super().__init__(
            scope, conversation_id, Translator(conversation_id, run_id=run_id, start=start),
            last_index=start.index if start else None, offset=start.offset if start else None,
            message_id=start.message_id if start else None,
        )
        self.encoder = EventEncoder()

    def encode(self, emitted: list[Emitted]) -> str:
        return "".join(encode(event_id, event, self.encoder) for event_id, event in emitted)


def event_stream(scope: Scope, conversation_id: uuid.UUID, *, start: Position | None, run_id: str | None,
                 use_relay: bool = True) -> AsyncIterator[str]:
    """The SSE text of one AG-UI run of the conversation's turn, from ``start``, until the run ends (see
    :meth:`~agent_persistence.realtime.sse.TurnStream.events` for ``use_relay``)."""
    return AgUiStream(scope, conversation_id, start=start, run_id=run_id).events(use_relay=use_relay)
