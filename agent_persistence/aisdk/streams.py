"""One UI message stream response: follow the turn, translate, encode as server-sent events, release on every exit.

The loop (the follower, keep-alives, the per-user cap ``SSE_MAX_PER_USER`` shared with AG-UI
streams, the access sweep, the release of everything on every exit) is
:mod:`agent_persistence.realtime.sse`'s, shared with AG-UI's stream; this module differs only
in what it writes and where a client resumes (what it holds: :class:`~.chunks.Held`). Each chunk
is one ``data: <json>`` event, as the AI SDK's ``JsonToSseTransformStream`` writes it, and
the stream ends with ``data: [DONE]``. An SSE comment goes out every
:data:`~agent_persistence.realtime.sse.KEEP_ALIVE` seconds of silence.

A stream that sees its turn's producer die (a ``dead`` status) takes the turn over on the
producer loop of this process when its user owns the conversation, as the websocket's
``resume`` frame does: ``useChat`` has no way to ask for that, and a reader's stream waits
for the owner's or the reaper's takeover.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any, AsyncIterator

from ..exceptions import Conflict, ConversationNotOwned, Gone, NotFound
from ..realtime.sse import TurnStream
from ..runtime import loop
from ..runtime.lifecycle import resume_turn
from ..scope import Scope
from .chunks import Chunk, Held, Translator

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/event-stream"
#: The headers of a UI message stream response (the SDK's ``UI_MESSAGE_STREAM_HEADERS``).
HEADERS = {
    "Cache-Control": "no-cache",
    "X-Vercel-AI-UI-Message-Stream": "v1",
    "X-Accel-Buffering": "no",  # nginx: pass each event on at once
}
DONE = "data: [DONE]\n\n"


def encode(chunk: Chunk) -> str:
    return f"data: {json.dumps(chunk, ensure_ascii=False, separators=(',', ':'), default=str)}\n\n"


async def take_over(scope: Scope, conversation_id: uuid.UUID, message_id: uuid.UUID) -> None:
    """Resume the dead turn ``message_id`` here (epoch + 1); someone else's takeover, or a reader's scope, does nothing."""
    try:
        await loop.run_async(resume_turn(scope, conversation_id, message_id=message_id))
    except (Conflict, Gone, ConversationNotOwned, NotFound):
        pass
    except Exception:  # noqa: BLE001 - the stream goes on; the reaper may still take the turn over
        logger.warning("Taking over the dead turn %s of conversation %s failed.", message_id, conversation_id, exc_info=True)


class AiSdkStream(TurnStream[Chunk]):
    """The conversation's turn as one UI message, from what ``held`` says the client has (None: its beginning), to its end.

    A ``dead`` status takes the turn over (:func:`take_over`); the stream lets a takeover land before it releases.
    """

    name = "AI SDK"
    logger = logger
    done = DONE

    def __init__(self, scope: Scope, conversation_id: uuid.UUID, *, held: Held | None) -> None:
        super().__init__(scope, conversation_id, Translator(conversation_id, held=held),
                         offset=held.offset if held else None, message_id=held.message_id if held else None)
        self.takeovers: set[asyncio.Task[None]] = set()

    def encode(self, emitted: list[Chunk]) -> str:
        return "".join(encode(chunk) for chunk in emitted)

    def observe(self, frame: dict[str, Any]) -> None:
        if frame.get("type") == "status" and frame.get("state") == "dead" and frame.get("message_id"):
            dead = uuid.UUID(frame["message_id"])
            task = asyncio.get_running_loop().create_task(take_over(self.scope, self.conversation_id, dead))
            self.takeovers.add(task)
            task.add_done_callback(self.takeovers.discard)

    async def settle(self) -> None:
        if self.takeovers:  # a takeover runs on the producer loop: let it land rather than leave it half done
            await asyncio.wait(self.takeovers, timeout=10)


def chunk_stream(scope: Scope, conversation_id: uuid.UUID, *, held: Held | None,
                 use_relay: bool = True) -> AsyncIterator[str]:
    """The SSE text of the conversation's turn as one UI message, from what ``held`` says the client has, to its end."""
    return AiSdkStream(scope, conversation_id, held=held).events(use_relay=use_relay)
