"""One UI message stream response: follow the turn, translate, encode as server-sent events, release on every exit.

The delivery is the websocket's and AG-UI's (:class:`~agent_persistence.realtime.follower.Follower`,
through the process's relay when the channel layer spans processes), and so are the per-user
cap (``SSE_MAX_PER_USER``, shared with AG-UI streams) and the access sweep: this module reuses
:mod:`agent_persistence.agui.streams` for them and differs only in what it writes. Each chunk
is one ``data: <json>`` event, as the AI SDK's ``JsonToSseTransformStream`` writes it, and
the stream ends with ``data: [DONE]``. An SSE comment goes out every
:data:`~agent_persistence.agui.streams.KEEP_ALIVE` seconds of silence.

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

from ..agui.streams import KEEP_ALIVE, OpenStream, unwatch, watched
from ..exceptions import Conflict, ConversationNotOwned, Gone, NotFound
from ..realtime.delivery import layer_spans_processes, relay
from ..realtime.follower import AccessLost, Follower
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


async def chunk_stream(scope: Scope, conversation_id: uuid.UUID, *, held: Held | None,
                       use_relay: bool = True) -> AsyncIterator[str]:
    """The SSE text of the conversation's turn as one UI message, from what ``held`` says the client has, to its end."""
    frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def send(frame: dict[str, Any]) -> None:
        frames.put_nowait(frame)

    async def access_lost() -> None:
        frames.put_nowait({"type": "access_lost"})

    spans = use_relay and layer_spans_processes()
    follower = Follower(scope, conversation_id, send, on_access_lost=access_lost, relay=relay() if spans else None)
    translator = Translator(conversation_id, held=held)
    relayed = False
    takeovers: set[asyncio.Task[None]] = set()
    watch, registry = OpenStream(scope), watched()
    watch.conversation_id, watch.frames = conversation_id, frames
    registry.admit(scope, watch)
    registry.watch(watch)
    try:
        if spans:
            relay().follow(conversation_id)
            relayed = True
        try:
            await follower.attach(last_index=None, offset=held.offset if held else None,
                                  message_id=held.message_id if held else None)
            frames.put_nowait({"type": "attached"})
        except AccessLost:
            frames.put_nowait({"type": "access_lost"})
        while not translator.finished:
            try:
                async with asyncio.timeout(KEEP_ALIVE):  # not wait_for: see Follower.follow
                    frame = await frames.get()
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            emitted = translator.translate(frame)
            translator.out = []
            if frame.get("type") == "status" and frame.get("state") == "dead" and frame.get("message_id"):
                task = asyncio.get_running_loop().create_task(take_over(scope, conversation_id, uuid.UUID(frame["message_id"])))
                takeovers.add(task)
                task.add_done_callback(takeovers.discard)
            chunk = "".join(encode(item) for item in emitted)
            if chunk:
                yield chunk
        yield DONE
    except Exception:  # noqa: BLE001 - the client gets an error chunk, the log the traceback
        logger.exception("The AI SDK stream of conversation %s failed.", conversation_id)
        translator.fail("internal_error", "The server could not go on streaming this turn.")
        yield "".join(encode(item) for item in translator.out) + DONE
    finally:
        unwatch(registry, watch)
        try:
            await follower.close()
            if takeovers:  # a takeover runs on the producer loop: let it land rather than leave it half done
                await asyncio.wait(takeovers, timeout=10)
        finally:
            if relayed:
                relay().unfollow(conversation_id)
