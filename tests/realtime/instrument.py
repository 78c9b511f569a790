"""What the websocket tests measure inside a server: follower tasks, hub subscriptions, relay state, queries.

Used in this process (the consumer tests) and served by the end-to-end
servers at ``/_realtime/stats`` (``tests/realtime/asgi.py``), so a test can
prove that sockets which left hold nothing and cost no database query.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from django.db.backends.signals import connection_created


class QueryCounter:
    """Counts every SQL statement run on any database connection opened after :meth:`install`.

    Followers read in worker threads that open a connection per read
    (``close_old_connections``), so hooking each new connection sees them all.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        with self.lock:
            self.count += 1
        return execute(sql, params, many, context)

    def hook(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if self not in connection.execute_wrappers:
            connection.execute_wrappers.append(self)

    def install(self) -> QueryCounter:
        connection_created.connect(self.hook, weak=False, dispatch_uid=f"tests.realtime.queries.{id(self)}")
        return self

    def uninstall(self) -> None:
        connection_created.disconnect(dispatch_uid=f"tests.realtime.queries.{id(self)}")


def follower_tasks(loop: asyncio.AbstractEventLoop | None = None) -> int:
    """Follower tasks alive on ``loop`` (the running loop by default)."""
    loop = loop or asyncio.get_running_loop()
    return sum(1 for task in asyncio.all_tasks(loop) if task.get_name().startswith("agent_persistence.follower") and not task.done())


def stats(queries: QueryCounter | None = None) -> dict[str, Any]:
    """The realtime state of this process, read on the server's loop."""
    from agent_persistence.realtime.delivery import _relays, hub
    from agent_persistence.realtime.sockets import sockets

    loop = asyncio.get_running_loop()
    relay = _relays.get(loop)
    return {
        "follower_tasks": follower_tasks(loop),
        "hub_subscriptions": hub.count(),
        "sockets": sockets().count(),
        "relay_followers": sum(relay.followers.values()) if relay else 0,
        "relay_joined": int(relay.joined) if relay else 0,  # in the relays group
        "relay_healthy": bool(relay and relay.healthy),
        "queries": queries.count if queries else None,
    }
