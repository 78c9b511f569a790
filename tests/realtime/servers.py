"""Real ASGI server processes (uvicorn) on the test database, and a real websocket client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest
import websockets

from agent_persistence.testing.network import free_port
from tests.realtime.client import StreamClient

ROOT = Path(__file__).resolve().parent.parent.parent



class Server:
    """One uvicorn (or, with ``program="daphne"``, daphne) process serving ``tests.realtime.asgi``.

    ``lifespan`` is uvicorn's ``--lifespan`` (daphne has none).
    """

    def __init__(self, env: dict[str, str], name: str, lifespan: str = "off", program: str = "uvicorn") -> None:
        self.port = free_port()
        self.name = name
        self.redis = "REDIS_URL" in env
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"agent_persistence_ws_{os.getpid()}_{name}.log"
        self.log = self.log_path.open("w")
        command = [sys.executable, "-m", "uvicorn", "tests.realtime.asgi:application", "--host", "127.0.0.1",
                   "--port", str(self.port), "--log-level", "warning", "--ws", "websockets-sansio", "--lifespan", lifespan]
        if program == "daphne":
            command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "-v", "0",
                       "tests.realtime.asgi:application"]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self.log, text=True,
        )

    def wait_ready(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server {self.name} exited: {self.output()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"server {self.name} did not start")

    def url(self, conversation_id: Any) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/conversations/{conversation_id}/"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=10)
        self.log.close()

    def terminate(self) -> None:
        """SIGTERM, without waiting (a graceful shutdown: see :meth:`wait`)."""
        self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 30) -> int:
        """The exit status, once the process has exited (within ``timeout``)."""
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.communicate()
        self.log.close()
        self.log_path.unlink(missing_ok=True)

    def output(self) -> str:
        return self.log_path.read_text()[-5000:]


def start_servers(env: dict[str, str], count: int = 2, lifespan: str = "off", program: str = "uvicorn") -> list[Server]:
    servers = [Server(env, f"server-{chr(ord('a') + i)}", lifespan, program) for i in range(count)]
    for server in servers:
        server.wait_ready()
    return servers


@asynccontextmanager
async def socket_to(server: Server, conversation_id: Any, session_key: str, close_timeout: float = 10) -> AsyncIterator[Any]:
    """A websocket to ``server``; ``close_timeout`` bounds the closing handshake (short for a server the test kills)."""
    async with websockets.connect(server.url(conversation_id), additional_headers={"Cookie": f"sessionid={session_key}"},
                                  max_size=None, open_timeout=10, close_timeout=close_timeout) as connection:
        yield connection


async def send(connection: Any, frame: dict[str, Any]) -> None:
    await connection.send(json.dumps(frame))


async def receive(connection: Any, client: StreamClient, until: str = "final", timeout: float = 30,
                  min_text: int | None = None) -> StreamClient:
    """Apply frames until one of type ``until`` (or until the client holds ``min_text`` characters)."""
    deadline = time.monotonic() + timeout
    while True:
        if min_text is not None and len(client.text) >= min_text:
            return client
        frame = json.loads(await asyncio.wait_for(connection.recv(), max(0.01, deadline - time.monotonic())))
        client.apply(frame)
        if frame["type"] == until:
            return client


def logged_in_session(username: str) -> tuple[str, Any, Any]:
    """A session key logged in as a new user ``username``, the user, and a conversation of theirs (agent "scripted")."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from agent_persistence.scope import Scope
    from agent_persistence.stores import conversation_store

    user = get_user_model().objects.create_user(username)
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    conversation = conversation_store().create(Scope(tenant="", user=str(user.pk)), agent="scripted")
    return store.session_key, user, conversation.pk


def server_env(database_name: str, redis: bool, redis_url: str | None = None) -> dict[str, str]:
    """The environment of a server process; Redis at ``redis_url`` (else ``REDIS_URL``) when ``redis``."""
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env.update({
        "AP_TEST_DB_NAME": database_name,
        "AP_FAST_TIMINGS": "1",
        "AP_CHUNK_DELAY": "0.04",
        "DJANGO_SETTINGS_MODULE": "tests.realtime.server_settings",
        "PYTHONPATH": str(ROOT),
    })
    if redis:
        env["REDIS_URL"] = redis_url or os.environ["REDIS_URL"]
    return env


def server_stats(server: Server) -> dict[str, Any]:
    """The server's realtime state and SQL statement count (``/_realtime/stats``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/_realtime/stats", timeout=10) as response:
        return json.loads(response.read())


#: The channel layers a multi-server test runs on: the in-memory one (a follower on another server reads
#: the recording) and Redis. Without ``REDIS_URL`` the Redis variant is skipped, except under CI, where
#: :func:`running_servers` fails it: there it must run.
LAYERS = ["recording", pytest.param("redis", marks=pytest.mark.skipif(
    not os.environ.get("REDIS_URL") and not os.environ.get("CI"), reason="REDIS_URL is not set"))]


@contextmanager
def running_servers(layer: str, lifespan: str = "off", program: str = "uvicorn", **env: str) -> Iterator[list[Server]]:
    """Two servers on the test database and ``layer`` (one of :data:`LAYERS`), ``env`` added; stopped after."""
    from django.db import connection

    if layer == "redis" and not os.environ.get("REDIS_URL"):
        pytest.fail("CI is set but REDIS_URL is not: the Redis variant must run in CI.")
    running = start_servers({**server_env(str(connection.settings_dict["NAME"]), redis=layer == "redis"), **env},
                            lifespan=lifespan, program=program)
    try:
        yield running
    finally:
        for server in running:
            server.stop()
