"""The websocket consumer: one socket follows, and can drive, one conversation.

Thin by design: the protocol is in :mod:`.protocol`, following in
:mod:`.follower`, turn entry points run on the process's producer loop
(:func:`agent_persistence.runtime.loop.run_async`) so a turn never dies with
the socket that started it.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from ..conf import app_settings
from ..exceptions import AgentPersistenceError, NotFound, Validation
from ..runtime.loop import run_async
from ..runtime.turns import cancel_turn, continue_turn, resume_turn, start_turn
from ..scope import Scope
from ..stores.base import readable_conversation
from . import protocol
from .delivery import layer_spans_processes, relay
from .follower import Follower

logger = logging.getLogger(__name__)


def resolve_scope(channels_scope: dict[str, Any]) -> Scope | None:
    return app_settings.SCOPE_RESOLVER(channels_scope)


class ConversationConsumer(AsyncJsonWebsocketConsumer):
    """``ws/conversations/<conversation_id>/``: see ``docs/reference/websocket.md``."""

    follower: Follower | None = None
    relayed = False

    async def connect(self) -> None:
        # Accept first, so a refusal reaches the client as a close code rather than a bare HTTP 403.
        await self.accept()
        self.user_scope = await database_sync_to_async(resolve_scope)(self.scope)
        if self.user_scope is None:
            await self.close(code=protocol.CLOSE_UNAUTHENTICATED)
            return
        try:
            conversation = await database_sync_to_async(readable_conversation)(
                self.user_scope, self.scope["url_route"]["kwargs"]["conversation_id"]
            )
        except (NotFound, Validation):
            # Absent and not readable look alike, so a socket never reveals that a conversation exists.
            await self.close(code=protocol.CLOSE_NOT_FOUND)
            return
        self.conversation_id: uuid.UUID = conversation.pk
        self.follower = Follower(self.user_scope, self.conversation_id, self.send_json)
        if layer_spans_processes(self.channel_layer):
            self.relayed = True
            await relay().follow(self.conversation_id)

    async def disconnect(self, code: int) -> None:
        # A disconnect never stops a turn: only the follower goes.
        if self.follower is not None:
            await self.follower.close()
        if self.relayed:
            await relay().unfollow(self.conversation_id)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        if self.follower is None:
            return
        try:
            frame = protocol.parse_frame(text_data, bytes_data)
            await getattr(self, f"on_{frame['type']}")(frame)
        except protocol.ProtocolError as exc:
            await self.send_json(protocol.error(exc.code, str(exc), exc.field))
        except AgentPersistenceError as exc:
            await self.send_json(protocol.error(exc.code, str(exc), **_details(exc)))

    # -- client frames ------------------------------------------------------------------------------

    async def on_attach(self, frame: dict[str, Any]) -> None:
        await self.follower.attach(last_index=frame.get("last_index"), offset=frame.get("offset"), message_id=frame.get("message_id"))

    async def on_start(self, frame: dict[str, Any]) -> None:
        if self.follower.task is None:
            await self.follower.attach(last_index=None, offset=None, message_id=None)
        handle = await run_async(start_turn(
            self.user_scope, self.conversation_id, content=frame["content"], agent=frame.get("agent"), message_id=frame.get("message_id"),
        ))
        await self.send_json({"type": "started", **_handle(handle)})

    async def on_stop(self, frame: dict[str, Any]) -> None:
        run = await run_async(cancel_turn(self.user_scope, self.conversation_id))
        await self.send_json({"type": "stop_requested", "message_id": str(run.message_id), "run_id": str(run.pk)})

    async def on_answer(self, frame: dict[str, Any]) -> None:
        resolved, handle = await run_async(continue_turn(self.user_scope, self.conversation_id, frame["answers"]))
        reply: dict[str, Any] = {"type": "answered", "interrupts": [str(interrupt.pk) for interrupt in resolved], "continued": handle is not None}
        if handle is not None:
            reply.update(_handle(handle))
        await self.send_json(reply)

    async def on_resume(self, frame: dict[str, Any]) -> None:
        handle = await run_async(resume_turn(self.user_scope, self.conversation_id, message_id=frame.get("message_id")))
        await self.send_json({"type": "resumed", **_handle(handle)})


def _handle(handle: Any) -> dict[str, Any]:
    return {"message_id": str(handle.message_id), "run_id": str(handle.run_id), "epoch": handle.epoch, "resumed": handle.resumed}


def _details(exc: AgentPersistenceError) -> dict[str, Any]:
    """The error's details as JSON (ids as strings)."""
    return json.loads(json.dumps(exc.details, default=str)) if exc.details else {}
