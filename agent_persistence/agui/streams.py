"""One AG-UI response: follow the turn, translate, encode as server-sent events, release on every exit.

The delivery is the websocket's (:class:`~agent_persistence.realtime.follower.Follower`):
the in-process hub, the channel layer through the process's relay when it spans
processes, the recording otherwise. Each event is written with the
``ag-ui-protocol`` package's ``EventEncoder`` behind an ``id:`` line (its
position, :mod:`.positions`). An SSE comment goes out every :data:`KEEP_ALIVE`
seconds of silence, so proxies keep the connection and a WSGI server notices a
client that left.

:func:`event_stream` is for ASGI servers (the response's async iterator: a
client that disconnects cancels it, and its ``finally`` releases the follower's
task, its hub subscription and its relay count); :func:`blocking_event_stream`
drives the same generator on an event loop of its own, for WSGI servers and
Django's test client.

What a stream holds, as the websocket's sockets (:mod:`agent_persistence.realtime.sockets`):
a place under ``SSE_MAX_PER_USER`` in this process (:func:`admit_stream`, taken by the view
before any query and given back when the server closes the response), and a place in its
loop's access sweep (:func:`watched`), which ends it with ``RUN_ERROR not_found`` within
``WEBSOCKET_ACCESS_CHECK_INTERVAL`` once its user may no longer read the conversation. It
holds no database connection: each read takes one and gives it back.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
import weakref
from typing import Any, AsyncIterator, Iterator

from ag_ui.encoder import EventEncoder

from ..realtime.delivery import layer_spans_processes, relay
from ..realtime.follower import AccessLost, Follower
from ..realtime.sockets import Sockets
from ..scope import Scope
from .events import Translator
from .positions import Position

logger = logging.getLogger(__name__)

#: Seconds of silence before a keep-alive comment.
KEEP_ALIVE = 15.0
CONTENT_TYPE = EventEncoder().get_content_type()


class OpenStream:
    """One AG-UI stream, as the per-user cap and the access sweep of :mod:`..realtime.sockets` count and check it.

    ``conversation_id`` is set once the stream follows its conversation (the sweep checks only then);
    :meth:`lose_access` ends the stream with ``RUN_ERROR not_found``.
    """

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.conversation_id: uuid.UUID | None = None
        self.frames: asyncio.Queue[dict[str, Any]] | None = None

    async def lose_access(self) -> None:
        if self.frames is not None:
            self.frames.put_nowait({"type": "access_lost"})


#: The streams open in this process, by user, under ``SSE_MAX_PER_USER`` (the view admits from its
#: request's thread, so the count is the process's, behind a lock).
_capped = Sockets(limit="SSE_MAX_PER_USER")
_capped_lock = threading.Lock()


def admit_stream(scope: Scope) -> OpenStream | None:
    """A stream counted for ``scope``; None (nothing counted) when the user holds ``SSE_MAX_PER_USER`` already."""
    stream = OpenStream(scope)
    with _capped_lock:
        return stream if _capped.admit(scope, stream) else None


def release_stream(stream: OpenStream) -> None:
    """Stop counting ``stream``; idempotent."""
    with _capped_lock:
        _capped.remove(stream.scope, stream)


def open_streams(scope: Scope | None = None) -> int:
    """Streams of ``scope`` (of everyone when None) open in this process."""
    with _capped_lock:
        return _capped.count(scope)


def release_with(response: Any, stream: OpenStream) -> None:
    """Release ``stream`` when ``response`` is closed (the server does, also after a disconnect) or collected."""
    response._resource_closers.append(lambda: release_stream(stream))
    weakref.finalize(response, release_stream, stream)


#: Per event loop, the streams it runs, for the access sweep (no cap: that is :data:`_capped`).
_watched: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Sockets] = weakref.WeakKeyDictionary()


def watched() -> Sockets:
    """The running loop's streams: one query per ``WEBSOCKET_ACCESS_CHECK_INTERVAL`` checks them all."""
    loop = asyncio.get_running_loop()
    current = _watched.get(loop)
    if current is None:
        current = _watched[loop] = Sockets(limit=None)
    return current


def unwatch(registry: Sockets, stream: OpenStream) -> None:
    registry.remove(stream.scope, stream)
    if not registry.by_user and registry.sweeper is not None:
        registry.sweeper.cancel()  # nothing left to check (and a WSGI stream's loop closes next)
        registry.sweeper = None


def encode(event_id: str, event: Any, encoder: EventEncoder) -> str:
    """One event as SSE: ``id: <position>`` then the encoder's ``data:`` line."""
    return (f"id: {event_id}\n" if event_id else "") + encoder.encode(event)


async def event_stream(scope: Scope, conversation_id: uuid.UUID, *, start: Position | None, run_id: str | None,
                       use_relay: bool = True) -> AsyncIterator[str]:
    """The SSE text of one AG-UI run of the conversation's turn, from ``start``, until the run ends.

    ``use_relay``: take other processes' updates from the channel layer (through the
    loop's relay) when it spans processes; without it, the recording brings them.
    """
    frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def send(frame: dict[str, Any]) -> None:
        frames.put_nowait(frame)

    async def access_lost() -> None:
        frames.put_nowait({"type": "access_lost"})

    spans = use_relay and layer_spans_processes()
    follower = Follower(scope, conversation_id, send, on_access_lost=access_lost, relay=relay() if spans else None)
    translator = Translator(conversation_id, run_id=run_id, start=start)
    encoder = EventEncoder()
    relayed = False
    # The websocket's access sweep: a user who may no longer read the conversation gets RUN_ERROR not_found.
    watch, registry = OpenStream(scope), watched()
    watch.conversation_id, watch.frames = conversation_id, frames
    registry.admit(scope, watch)
    registry.watch(watch)
    try:
        if spans:
            relay().follow(conversation_id)
            relayed = True
        try:
            await follower.attach(
                last_index=start.index if start else None, offset=start.offset if start else None,
                message_id=start.message_id if start else None,
            )
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
            translator.out = []  # sent: after a failure only what the failed translation emitted is left to send
            chunk = "".join(encode(event_id, event, encoder) for event_id, event in emitted)
            if chunk:
                yield chunk
    except Exception:  # noqa: BLE001 - the client gets a RUN_ERROR, the log the traceback
        logger.exception("The AG-UI stream of conversation %s failed.", conversation_id)
        # What the failed translation emitted before it raised stays: the translator's state includes it.
        translator.fail("internal_error", "The server could not go on streaming this turn.")
        yield "".join(encode(event_id, event, encoder) for event_id, event in translator.out)
    finally:
        unwatch(registry, watch)
        try:
            await follower.close()
        finally:
            if relayed:
                relay().unfollow(conversation_id)


def blocking_event_stream(stream: AsyncIterator[str]) -> Iterator[str]:
    """``stream`` for a synchronous server: each part is awaited on a loop of this generator's own.

    Make ``stream`` with ``use_relay=False``: a relay lives as long as its loop, and this one
    lives as long as the response.

    Closing the generator (the server does when the client is gone or the
    response ends) closes ``stream`` on that loop, so its ``finally`` runs.
    """
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(anext(stream))
            except StopAsyncIteration:
                return
    finally:
        try:
            loop.run_until_complete(stream.aclose())
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
