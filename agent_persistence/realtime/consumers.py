"""The websocket consumer: one socket follows, and can drive, one conversation.

Thin by design: the protocol is in :mod:`.protocol`, following in
:mod:`.follower`, the per-user cap and the access sweep in :mod:`.sockets`;
turn entry points run on the process's producer loop
(:func:`agent_persistence.runtime.loop.run_async`) so a turn never dies with
the socket that started it. A socket to an id no conversation has is
admitted idle, and its first ``start`` creates the conversation
(:mod:`.admission`).

Two rules keep a socket from ever stranding work:

- No frame ends the consumer: whatever parsing or handling a frame raises
  becomes an ``error`` frame with a stable code (``internal_error`` for the
  unforeseen, logged with its traceback) and the socket stays usable.
- Every exit releases what the socket holds (its follower's task, reads and
  hub subscription, its relay count, its place in the per-user count):
  :meth:`ConversationConsumer.release` runs on disconnect, on a close by the
  server and, from ``__call__``'s ``finally``, on any other way out.

A socket has no channel of its own on the layer (the process's relay
receives for every socket), so a channel layer that fails (Redis stopped)
never drops a socket or refuses a new one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.utils import await_many_dispatch

from ..conf import app_settings
from ..exceptions import AgentPersistenceError, NotFound, Validation
from ..runtime.loop import run_async
from ..runtime.lifecycle import cancel_turn, continue_turn, resume_turn, start_turn
from ..scope import Scope
from . import protocol, tickets
from .admission import conversation_to_open
from .delivery import hub, layer_spans_processes, relay
from .follower import AccessLost, Follower
from .sockets import sockets

logger = logging.getLogger(__name__)


def resolve_scope(channels_scope: dict[str, Any]) -> Scope | None:
    """The socket's scope: its ``?ticket=``'s (spent now; TicketRefused) when it has one, else SCOPE_RESOLVER's."""
    ticket = tickets.ticket_in(channels_scope)
    if ticket is not None:
        return tickets.redeem_ticket(ticket, channels_scope["url_route"]["kwargs"]["conversation_id"])
    return app_settings.SCOPE_RESOLVER(channels_scope)


class ConversationConsumer(AsyncJsonWebsocketConsumer):
    """``ws/conversations/<conversation_id>/``: see ``docs/reference/websocket.md``."""

    follower: Follower | None = None
    user_scope: Scope | None = None
    #: The conversation followed (None until it exists: the access sweep checks only followed ones).
    conversation_id: uuid.UUID | None = None
    #: The route's conversation, once admitted: followed, or a new id its first start creates.
    requested_id: uuid.UUID | None = None
    #: A new id's hub subscription while the socket waits for its conversation (:meth:`await_creation`).
    awaiting: Any = None
    waking: asyncio.Task[None] | None = None
    admitted = False
    relayed = False
    released = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Channels' dispatch loop, without a channel of the socket's own, releasing on every exit."""
        self.scope = scope
        self.channel_layer = None
        self.base_send = send
        try:
            await await_many_dispatch([receive], self.dispatch)
        except StopConsumer:
            pass
        finally:
            await self.release()

    async def connect(self) -> None:
        # Accept first, so a refusal reaches the client as a close code rather than a bare HTTP 403.
        await self.accept()
        try:
            await self.admit()
        except Exception:  # noqa: BLE001 - e.g. the database is down: refuse this socket, keep the server
            logger.exception("Could not open a websocket to conversation %s.", self.scope.get("url_route", {}).get("kwargs"))
            await self.close_quietly(protocol.CLOSE_INTERNAL_ERROR)
            await self.release()

    async def admit(self) -> None:
        try:
            self.user_scope = await database_sync_to_async(resolve_scope)(self.scope)
        except tickets.TicketRefused:
            await self.close(code=protocol.CLOSE_TICKET_REFUSED)
            return
        if self.user_scope is None:
            await self.close(code=protocol.CLOSE_UNAUTHENTICATED)
            return
        # The cap before any query: a user over it costs the server nothing more.
        if not sockets().admit(self.user_scope, self):
            await self.close(code=protocol.CLOSE_TOO_MANY_SOCKETS)
            return
        self.admitted = True
        try:
            self.requested_id, exists = await database_sync_to_async(conversation_to_open)(
                self.user_scope, self.scope["url_route"]["kwargs"]["conversation_id"]
            )
        except (NotFound, Validation):
            # Another's and no UUID at all look alike: the socket says nothing of whose it is.
            await self.close(code=protocol.CLOSE_NOT_FOUND)
            await self.release()
            return
        if exists:
            self.follow_conversation()
        # Else a new id: the socket is idle until its start creates the conversation (see .admission).

    def follow_conversation(self) -> None:
        """Follow the (existing, readable) conversation: a follower, the relay, the access sweep; idempotent."""
        if self.follower is not None:
            return
        self.conversation_id = self.requested_id
        spans = layer_spans_processes()
        self.follower = Follower(
            self.user_scope, self.conversation_id, self.send_json, on_access_lost=self.lose_access, relay=relay() if spans else None
        )
        if spans and not self.relayed:
            relay().follow(self.conversation_id)
            self.relayed = True
        sockets().watch(self)
        self.stop_awaiting()

    def await_creation(self) -> None:
        """On a socket to a new id that attached: wake when a turn of the id starts (another tab's start)."""
        if self.awaiting is not None or self.follower is not None:
            return
        self.awaiting = hub.subscribe(self.requested_id, lambda payload: self.wake())
        if layer_spans_processes() and not self.relayed:
            relay().follow(self.requested_id)  # the id's updates from other processes reach the hub too
            self.relayed = True

    def stop_awaiting(self) -> None:
        if self.awaiting is not None:
            hub.unsubscribe(self.awaiting)
            self.awaiting = None
        if self.waking is not None and self.waking is not asyncio.current_task():
            self.waking.cancel()

    def wake(self) -> None:
        if self.waking is None or self.waking.done():
            self.waking = asyncio.get_running_loop().create_task(self.attach_once_created())

    async def attach_once_created(self) -> None:
        try:
            await self.follow_if_created()
            if self.follower is not None and self.follower.task is None and not self.released:
                await self.follower.attach(last_index=None, offset=None, message_id=None)
        except AccessLost:
            await self.lose_access()
        except Exception:  # noqa: BLE001 - the next update, or the client's next attach, tries again
            logger.warning("A websocket to new conversation %s could not follow it.", self.requested_id, exc_info=True)

    async def follow_if_created(self) -> None:
        """On a socket to a new id: follow the conversation once it exists (another tab, or a start, made it).

        AccessLost when a conversation of someone else's now holds the id.
        """
        if self.follower is not None:
            return
        try:
            _, exists = await database_sync_to_async(conversation_to_open)(self.user_scope, self.requested_id)
        except NotFound:
            raise AccessLost from None
        if exists:
            self.follow_conversation()

    async def disconnect(self, code: int) -> None:
        # A disconnect never stops a turn: only the follower goes.
        await self.release()

    async def release(self) -> None:
        """Let go of everything this socket holds; idempotent."""
        if self.released:
            return
        self.released = True
        self.stop_awaiting()
        try:
            if self.follower is not None:
                await self.follower.close()
        finally:
            if self.relayed:
                relay().unfollow(self.requested_id)
            if self.admitted:
                sockets().remove(self.user_scope, self)

    async def lose_access(self) -> None:
        """The user may no longer read the conversation: close with 4404 (as at connect) and release."""
        if self.released:
            return
        logger.info("Closing a websocket of %s: conversation %s is no longer readable.", self.user_scope, self.conversation_id)
        await self.close_quietly(protocol.CLOSE_NOT_FOUND)
        await self.release()

    async def close_quietly(self, code: int) -> None:
        try:
            await self.close(code=code)
        except Exception:  # noqa: BLE001 - the client is already gone
            logger.debug("Could not close a websocket (already closed).", exc_info=True)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        if self.requested_id is None or self.released:
            return
        try:
            frame = protocol.parse_frame(text_data, bytes_data)
            await self.follow_if_created()
            if self.follower is None:
                await getattr(self, f"on_new_{frame['type']}", self.on_new_other)(frame)
            else:
                await getattr(self, f"on_{frame['type']}")(frame)
        except AccessLost:
            await self.lose_access()
        except Exception as exc:  # noqa: BLE001 - no frame may end the consumer
            await self.refuse(exc)

    async def refuse(self, exc: Exception) -> None:
        """Answer a failed frame with an error frame; the socket stays open."""
        try:
            if isinstance(exc, protocol.ProtocolError):
                frame = protocol.error(exc.code, str(exc), exc.field)
            elif isinstance(exc, AgentPersistenceError):
                details = _details(exc)
                field = details.pop("field", None)
                frame = protocol.error(exc.code, exc.message, field if isinstance(field, str) else None, details)
            else:
                raise exc
            await self.send_json(frame)
            return
        except Exception:  # noqa: BLE001 - unforeseen (or an error frame that would not encode)
            logger.exception("A websocket frame failed on conversation %s for %s.", self.conversation_id, self.user_scope)
        try:
            await self.send_json(protocol.error("internal_error", "The server could not handle this frame."))
        except Exception:  # noqa: BLE001 - the client is gone
            logger.debug("Could not send an error frame.", exc_info=True)

    # -- client frames ------------------------------------------------------------------------------

    async def on_attach(self, frame: dict[str, Any]) -> None:
        await self.follower.attach(last_index=frame.get("last_index"), offset=frame.get("offset"), message_id=frame.get("message_id"))

    async def on_start(self, frame: dict[str, Any]) -> None:
        if self.follower.task is None:
            await self.follower.attach(last_index=None, offset=None, message_id=None)
        handle = await run_async(start_turn(
            self.user_scope, self.conversation_id, content=frame["content"], agent=frame.get("agent"), message_id=frame.get("message_id"),
        ))
        self.read_if_queued(handle)
        await self.send_json({"type": "started", **_handle(handle)})

    def read_if_queued(self, handle: Any) -> None:
        """A run enqueued for a worker (``TURN_RUNNER = "tasks"``) publishes nothing until a worker takes it: read the
        turn now, so this client sees it ``queued``."""
        if handle is not None and handle.queued and self.follower is not None:
            self.follower.refresh()

    async def on_stop(self, frame: dict[str, Any]) -> None:
        run = await run_async(cancel_turn(self.user_scope, self.conversation_id))
        await self.send_json({"type": "stop_requested", "message_id": str(run.message_id), "run_id": str(run.pk)})

    async def on_answer(self, frame: dict[str, Any]) -> None:
        resolved, handle = await run_async(continue_turn(self.user_scope, self.conversation_id, frame["answers"]))
        self.read_if_queued(handle)
        reply: dict[str, Any] = {"type": "answered", "interrupts": [str(interrupt.pk) for interrupt in resolved], "continued": handle is not None}
        if handle is not None:
            reply.update(_handle(handle))
        await self.send_json(reply)

    async def on_resume(self, frame: dict[str, Any]) -> None:
        handle = await run_async(resume_turn(self.user_scope, self.conversation_id, message_id=frame.get("message_id")))
        self.read_if_queued(handle)
        await self.send_json({"type": "resumed", **_handle(handle)})

    # -- client frames on a new id (no conversation yet) -------------------------------------------

    async def on_new_attach(self, frame: dict[str, Any]) -> None:
        self.await_creation()
        await self.follow_if_created()  # made between the check of receive() and the subscription
        if self.follower is not None:
            await self.on_attach(frame)
            return
        # What an attach to a conversation without a turn reports.
        await self.send_json({"type": "status", "state": "idle", "message_id": None, "run_id": None, "epoch": 0, "index": 0})

    async def on_new_start(self, frame: dict[str, Any]) -> None:
        """Start the first turn: the turn store creates the conversation, the caller's, with the turn (one transaction)."""
        self.stop_awaiting()  # this socket attaches itself once its start has made the conversation
        try:
            handle = await run_async(start_turn(
                self.user_scope, self.requested_id, content=frame["content"], agent=frame.get("agent"),
                message_id=frame.get("message_id"),
            ))
        except Exception:
            # Another socket may have made the conversation meanwhile: follow it when it is the user's
            # (the refusal, e.g. conversation_busy, goes out as an error frame), close with 4404 when not.
            await self.follow_if_created()
            if self.follower is not None and self.follower.task is None:
                await self.follower.attach(last_index=None, offset=None, message_id=None)
            raise
        self.follow_conversation()
        if self.follower.task is None:
            await self.follower.attach(last_index=None, offset=None, message_id=None)
        await self.send_json({"type": "started", **_handle(handle)})

    async def on_new_other(self, frame: dict[str, Any]) -> None:
        """stop, answer, resume: there is no conversation (nor turn) yet."""
        raise NotFound("No such conversation: start a turn to create it.")


def _handle(handle: Any) -> dict[str, Any]:
    return {"message_id": str(handle.message_id), "run_id": str(handle.run_id), "epoch": handle.epoch, "resumed": handle.resumed}


def _details(exc: AgentPersistenceError) -> dict[str, Any]:
    """The error's details as JSON (ids as strings)."""
    return json.loads(json.dumps(exc.details, default=str)) if exc.details else {}
