"""The open sockets of one server process: the per-user cap and the periodic access re-check.

One :class:`Sockets` per event loop (the server's), like the relay:

- **The cap.** ``WEBSOCKET_MAX_PER_USER`` open sockets per scope (tenant,
  user) *in this process*; the next one is refused and closed with 4429. The
  count is per process, not across replicas: N replicas behind a balancer let
  a user hold up to N times the cap. It bounds what one user's sockets cost a
  process (followers, relay memberships), which is what a process can protect.
- **The access sweep.** While sockets are open, every
  ``WEBSOCKET_ACCESS_CHECK_INTERVAL`` seconds one task reads, for every
  conversation followed here, whether its sockets' users may still read it
  (:func:`readable_pairs`, the conversation store's ``readable_ids``: each
  conversation read once, whatever the number of sockets or users) and
  closes with 4404 the sockets that may not, so unsharing or deleting a conversation ends its readers' sockets within
  one interval, including idle sockets that never read the turn.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from collections.abc import Awaitable, Iterable
from typing import Protocol

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from ..conf import app_settings
from ..scope import Scope
from ..stores import conversation_store

logger = logging.getLogger(__name__)


class OpenSocket(Protocol):
    """What the registry needs of a consumer."""

    conversation_id: uuid.UUID

    def lose_access(self) -> Awaitable[None]: ...


class Sockets:
    """The sockets open on one event loop, by user.

    ``limit`` names the setting of the per-user cap (None: no cap); the AG-UI streams
    (:mod:`agent_persistence.realtime.sse`) count theirs under ``SSE_MAX_PER_USER``.
    """

    def __init__(self, limit: str | None = "WEBSOCKET_MAX_PER_USER") -> None:
        self.limit = limit
        self.by_user: dict[Scope, set[OpenSocket]] = {}
        self.sweeper: asyncio.Task[None] | None = None

    def admit(self, scope: Scope, socket: OpenSocket) -> bool:
        """Count ``socket`` for ``scope``; False (nothing counted) when the user is at the cap."""
        limit = getattr(app_settings, self.limit) if self.limit else None
        held = self.by_user.get(scope, set())
        if limit is not None and len(held) >= limit:
            return False
        self.by_user.setdefault(scope, held).add(socket)
        return True

    def watch(self, socket: OpenSocket) -> None:
        """Re-check the access of ``socket`` (admitted, its conversation known) at every sweep."""
        if self.sweeper is None or self.sweeper.done():
            self.sweeper = asyncio.get_running_loop().create_task(self._sweep_forever(), name="agent_persistence.access_sweep")

    def remove(self, scope: Scope, socket: OpenSocket) -> None:
        held = self.by_user.get(scope)
        if held is None:
            return
        held.discard(socket)
        if not held:
            del self.by_user[scope]

    def count(self, scope: Scope | None = None) -> int:
        """Open sockets of ``scope`` (of everyone when None) on this loop."""
        if scope is not None:
            return len(self.by_user.get(scope, ()))
        return sum(len(held) for held in self.by_user.values())

    async def sweep(self) -> int:
        """Check every watched socket's access now; the number of sockets closed."""
        followed = [
            (scope, socket) for scope, held in self.by_user.items() for socket in held
            if getattr(socket, "conversation_id", None) is not None
        ]
        if not followed:
            return 0
        pairs = {(scope, socket.conversation_id) for scope, socket in followed}
        readable = await sync_to_async(_readable_pairs_closing, thread_sensitive=False)(pairs)
        lost = [socket for scope, socket in followed if (scope, socket.conversation_id) not in readable]
        for socket in lost:
            await socket.lose_access()
        return len(lost)

    async def _sweep_forever(self) -> None:
        while self.by_user:
            await asyncio.sleep(app_settings.WEBSOCKET_ACCESS_CHECK_INTERVAL)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - e.g. the database is down: the next sweep tries again
                logger.warning("The websocket access check failed; retrying.", exc_info=True)


def readable_pairs(pairs: Iterable[tuple[Scope, uuid.UUID]]) -> set[tuple[Scope, uuid.UUID]]:
    """The ``(scope, conversation id)`` pairs whose scope may read the conversation now.

    The configured family's :meth:`readable_ids
    <agent_persistence.stores.protocols.ConversationStoreProtocol.readable_ids>`:
    each conversation read once (the ORM store: one query per 500), the stores'
    read rule applied to every pair.
    """
    return conversation_store().readable_ids(pairs)


def _readable_pairs_closing(pairs: Iterable[tuple[Scope, uuid.UUID]]) -> set[tuple[Scope, uuid.UUID]]:
    close_old_connections()
    try:
        return readable_pairs(pairs)
    finally:
        close_old_connections()


_registries: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Sockets] = weakref.WeakKeyDictionary()


def sockets() -> Sockets:
    """The registry of the running loop (the server's)."""
    loop = asyncio.get_running_loop()
    current = _registries.get(loop)
    if current is None:
        current = _registries[loop] = Sockets()
    return current
