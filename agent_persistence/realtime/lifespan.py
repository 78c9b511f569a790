"""The ASGI lifespan of a server process: start the reaper with it, hand its turns off when it stops.

uvicorn (and hypercorn) send the lifespan ``shutdown`` event on SIGTERM once they have stopped
accepting connections; this app then runs :func:`agent_persistence.runtime.shutdown.drain`
(``SHUTDOWN_GRACE``, then hand-offs) before it answers ``shutdown.complete``, so the server exits
only once every turn of the process has ended or been handed off. Route it in the host's
``asgi.py``::

    from agent_persistence.realtime.lifespan import lifespan

    application = ProtocolTypeRouter({
        "http": django_asgi_app,
        "websocket": AuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
        "lifespan": lifespan,
    })

or wrap any ASGI application (plain Django, or the router itself): ``application =
with_lifespan(app)``. Run uvicorn with ``--lifespan on`` (``auto``, its default, works too).

Daphne sends no lifespan events: when the app is ready in a process where daphne installed its
Twisted reactor, it adds a "before shutdown" trigger that runs the same drain, and Twisted waits
for it before the reactor stops (SIGTERM, SIGINT). Nothing to configure.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Awaitable, Callable

from ..runtime.lifecycle import ensure_reaper
from ..runtime.shutdown import drain

logger = logging.getLogger(__name__)

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
                   Awaitable[None]]


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI application of the ``lifespan`` scope: the reaper on startup, the drain on shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                ensure_reaper()  # REAPER_ENABLED: this replica reaps (and claims hand-offs) before its first request
            except Exception:  # noqa: BLE001 - a server never fails to start for the reaper; a request tries again
                logger.exception("Could not start the reaper with the server.")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            try:
                await drain()
            except Exception:  # noqa: BLE001 - the turns left read dead after DEAD_AFTER and are taken over
                logger.exception("Draining the turns of this process failed.")
            await send({"type": "lifespan.shutdown.complete"})
            return


_daphne_trigger_added = False


def drain_before_twisted_shutdown() -> bool:
    """Under daphne (Twisted's asyncio reactor installed): drain this process before the reactor stops; once.

    Returns whether the trigger is in place. Called when the app is ready (daphne installs its
    reactor before it loads the ASGI application) and by :func:`with_lifespan`; a no-op in a
    process without a Twisted reactor.
    """
    global _daphne_trigger_added
    if _daphne_trigger_added:
        return True
    reactor = sys.modules.get("twisted.internet.reactor")
    if reactor is None or type(reactor).__name__ != "AsyncioSelectorReactor":
        return False
    import asyncio

    from twisted.internet import defer

    def before_shutdown() -> Any:
        return defer.Deferred.fromFuture(asyncio.ensure_future(drain(), loop=reactor._asyncioEventloop))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
    _daphne_trigger_added = True
    return True


def with_lifespan(application: ASGIApp) -> ASGIApp:
    """``application`` with the ``lifespan`` scope served by :func:`lifespan` (and daphne's shutdown drained)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(scope, receive, send)
            return
        if not _daphne_trigger_added:
            drain_before_twisted_shutdown()
        await application(scope, receive, send)

    return app
