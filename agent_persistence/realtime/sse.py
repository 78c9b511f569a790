"""One turn over server-sent events: the loop the AG-UI and AI SDK streams share, their cap and their access sweep.

The delivery is the websocket's (:class:`~agent_persistence.realtime.follower.Follower`):
the in-process hub, the channel layer through the process's relay when it spans
processes, the recording otherwise. :meth:`TurnStream.events` follows the turn and
hands each follower frame to a protocol's :class:`FrameTranslator`; the protocol's
subclass of :class:`TurnStream` (:mod:`agent_persistence.agui.streams`,
:mod:`agent_persistence.aisdk.streams`) says where its client resumes and how what the
translator emits is written. An SSE comment goes out every :data:`KEEP_ALIVE` seconds of
silence, so proxies keep the connection and a WSGI server notices a client that left.

:meth:`TurnStream.events` is for ASGI servers (the response's async iterator: a client that
disconnects cancels it, and its ``finally`` releases the follower's task, its hub
subscription and its relay count); :func:`blocking_event_stream` drives the same generator
on an event loop of its own, for WSGI servers and Django's test client.

What a stream holds, as the websocket's sockets (:mod:`agent_persistence.realtime.sockets`):
a place under ``SSE_MAX_PER_USER`` in this process (:func:`admit_stream`, taken by the view
before any query and given back when the server closes the response; AG-UI and AI SDK streams
count together), and a place in its loop's access sweep (:func:`watched`), which ends it as
the translator's ``access_lost`` frame says within ``WEBSOCKET_ACCESS_CHECK_INTERVAL`` once
its user may no longer read the conversation. It holds no database connection: each read
takes one and gives it back.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
import weakref
from typing import Any, AsyncIterator, Generic, Iterator, TypeVar

from ..scope import Scope
from .delivery import layer_spans_processes, relay
from .follower import AccessLost, Follower
from .sockets import Sockets

#: Seconds of silence before a keep-alive comment.
KEEP_ALIVE = 15.0
KEEP_ALIVE_COMMENT = ": keep-alive\n\n"

#: What a translator emits: an AG-UI event with its id, a UI message chunk.
Out = TypeVar("Out")


class OpenStream:
    """One stream, as the per-user cap and the access sweep of :mod:`.sockets` count and check it.

    ``conversation_id`` is set once the stream follows its conversation (the sweep checks only then);
    :meth:`lose_access` ends the stream through its translator's ``access_lost`` frame.
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


class FrameTranslator(Generic[Out]):
    """Turns the follower frames of one turn into a protocol's messages: what :meth:`TurnStream.events` drives.

    :meth:`translate` hands a frame to ``on_<type>`` and returns what it emitted (kept in
    ``out`` until the stream has sent it). ``finished`` is true once the protocol's run or
    message ended: the stream ends. A subclass says how it fails (:meth:`fail`) and how a
    turn that ended with no answer stored ends (:meth:`end_without_answer`).
    """

    def __init__(self) -> None:
        self.finished = False
        self.attached = False
        self.out: list[Out] = []

    def translate(self, frame: dict[str, Any]) -> list[Out]:
        """What one follower frame emits (nothing for frames the protocol has no use for)."""
        self.out = []
        if not self.finished:
            handler = getattr(self, f"on_{frame.get('type')}", None)
            if handler is not None:
                handler(frame)
        return self.out

    def fail(self, code: str, message: str) -> None:
        """End the run or message with the error ``code`` (nothing once finished)."""
        raise NotImplementedError

    def end_without_answer(self) -> None:
        """A turn that ended with no answer stored (and no interrupt pending) ends the run or message as it is."""
        raise NotImplementedError

    def on_attached(self, frame: dict[str, Any]) -> None:
        """The follower sent all it read at attach (a final answer comes before the status that follows it)."""
        self.attached = True
        self.end_without_answer()

    def on_error(self, frame: dict[str, Any]) -> None:
        self.fail(str(frame.get("code") or "error"), str(frame.get("message") or "The stream failed."))

    def on_access_lost(self, frame: dict[str, Any]) -> None:
        self.fail("not_found", "The conversation is no longer readable.")


class TurnStream(Generic[Out]):
    """One SSE response that follows a conversation's turn until its translator finishes.

    A protocol's subclass names itself in the log (``name``, ``logger``), writes what its
    translator emits (:meth:`encode`, then ``done`` once the stream ends), and may act on a
    frame (:meth:`observe`) and let that land before the stream releases (:meth:`settle`).
    ``last_index``, ``offset`` and ``message_id`` are where its client resumes (None: from the
    turn's beginning), as :meth:`Follower.attach <agent_persistence.realtime.follower.Follower.attach>` takes them.
    """

    name = "SSE"
    logger = logging.getLogger(__name__)
    #: Written after the last event, also after a failure.
    done = ""

    def __init__(self, scope: Scope, conversation_id: uuid.UUID, translator: FrameTranslator[Out], *,
                 last_index: int | None = None, offset: int | None = None, message_id: uuid.UUID | None = None) -> None:
        self.scope = scope
        self.conversation_id = conversation_id
        self.translator = translator
        self.resume_at = {"last_index": last_index, "offset": offset, "message_id": message_id}

    def encode(self, emitted: list[Out]) -> str:
        """The SSE text of what one translation emitted ("" for nothing)."""
        raise NotImplementedError

    def observe(self, frame: dict[str, Any]) -> None:
        """Act on a frame once it is translated (before what it emitted is sent)."""

    async def settle(self) -> None:
        """Wait for what :meth:`observe` started, once the follower is closed."""

    async def events(self, *, use_relay: bool = True) -> AsyncIterator[str]:
        """The SSE text of the turn, from where the client resumes, until the translator finishes.

        ``use_relay``: take other processes' updates from the channel layer (through the
        loop's relay) when it spans processes; without it, the recording brings them.
        """
        conversation_id, translator = self.conversation_id, self.translator
        frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def send(frame: dict[str, Any]) -> None:
            frames.put_nowait(frame)

        async def access_lost() -> None:
            frames.put_nowait({"type": "access_lost"})

        spans = use_relay and layer_spans_processes()
        follower = Follower(self.scope, conversation_id, send, on_access_lost=access_lost, relay=relay() if spans else None)
        relayed = False
        # The websocket's access sweep: a user who may no longer read the conversation gets the translator's access_lost.
        watch, registry = OpenStream(self.scope), watched()
        watch.conversation_id, watch.frames = conversation_id, frames
        registry.admit(self.scope, watch)
        registry.watch(watch)
        try:
            if spans:
                relay().follow(conversation_id)
                relayed = True
            try:
                await follower.attach(**self.resume_at)
                frames.put_nowait({"type": "attached"})
            except AccessLost:
                frames.put_nowait({"type": "access_lost"})
            while not translator.finished:
                try:
                    async with asyncio.timeout(KEEP_ALIVE):  # not wait_for: see Follower.follow
                        frame = await frames.get()
                except TimeoutError:
                    yield KEEP_ALIVE_COMMENT
                    continue
                emitted = translator.translate(frame)
                translator.out = []  # sent: after a failure only what the failed translation emitted is left to send
                self.observe(frame)
                chunk = self.encode(emitted)
                if chunk:
                    yield chunk
            if self.done:
                yield self.done
        except Exception:  # noqa: BLE001 - the client gets the protocol's error, the log the traceback
            self.logger.exception("The %s stream of conversation %s failed.", self.name, conversation_id)
            # What the failed translation emitted before it raised stays: the translator's state includes it.
            translator.fail("internal_error", "The server could not go on streaming this turn.")
            yield self.encode(translator.out) + self.done
        finally:
            unwatch(registry, watch)
            try:
                await follower.close()
                await self.settle()
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
