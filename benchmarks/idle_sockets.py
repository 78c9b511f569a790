"""Idle websockets: what N open sockets cost a server when no turn runs anywhere (CPU, database transactions/s).

One uvicorn process serves ``agent_persistence.realtime`` on the benchmark
database (PostgreSQL) with the Redis channel layer (``REDIS_URL``, default
``redis://127.0.0.1:6379/0``) or, with ``--layer memory``, the in-memory
layer. ``--sockets`` clients (default 500) each open a socket to a
conversation of their own and attach; none starts a turn. They are one
user's, so the server lifts ``WEBSOCKET_MAX_PER_USER``. After a settling
time the benchmark measures, over ``--seconds``:

- the server process's CPU time (``/proc/<pid>/stat``, user + system) as a
  percentage of one core;
- the database's committed transactions per second
  (``pg_stat_database.xact_commit`` of the benchmark database, whose only
  client is the server: the benchmark's own reads are subtracted).

``--code DIR`` serves the app from another checkout (e.g. ``git worktree add
/tmp/before <commit>``) to compare before and after on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .runtime import ensure_database, format_rows, progress
from .streaming import login_and_conversations

ROOT = Path(__file__).resolve().parent.parent


class Server:
    """One uvicorn process on the benchmark database, serving the code in ``code``."""

    def __init__(self, database: str, code: Path, layer: str, cpus: str | None) -> None:
        from .database import BENCH_DATABASE_ENV

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        command = [sys.executable, "-m", "uvicorn", "--factory", f"benchmarks.idle_sockets:{layer}_application", "--host", "127.0.0.1",
                   "--port", str(self.port), "--log-level", "warning", "--ws", "websockets-sansio", "--lifespan", "off"]
        if cpus:
            command = ["taskset", "-c", cpus, *command]
        env = {**os.environ, BENCH_DATABASE_ENV: database}
        self.process = subprocess.Popen(command, cwd=code, env=env)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("the benchmark server did not start") from None
                time.sleep(0.1)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def redis_application(**overrides: Any) -> Any:
    """``benchmarks.streaming``'s application (Redis layer), with no cap on sockets per user: one user holds them all."""
    from django.conf import settings
    from django.test.utils import override_settings

    from . import streaming

    application = streaming.asgi_application()
    override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, "WEBSOCKET_MAX_PER_USER": None}, **overrides).enable()
    return application


def memory_application() -> Any:
    """The same, with the in-memory channel layer."""
    return redis_application(CHANNEL_LAYERS={"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}})


def committed_transactions(database: str) -> int:
    """``xact_commit`` of ``database`` as the statistics collector holds it now (read on a fresh connection)."""
    import psycopg

    from .database import server_url

    with psycopg.connect(server_url(), autocommit=True) as connection:
        row = connection.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)).fetchone()
    return int(row[0])


async def open_sockets(server: Server, cookie: str, conversations: list[Any]) -> list[Any]:
    import websockets

    async def one(conversation: Any) -> Any:
        connection = await websockets.connect(
            f"ws://127.0.0.1:{server.port}/ws/conversations/{conversation}/",
            additional_headers={"Cookie": f"sessionid={cookie}"}, max_size=None, open_timeout=60,
        )
        await connection.send(json.dumps({"type": "attach"}))
        frame = json.loads(await asyncio.wait_for(connection.recv(), 60))
        if frame.get("type") != "status":
            raise RuntimeError(f"unexpected first frame {frame}")
        return connection

    opened = []
    for start in range(0, len(conversations), 50):  # in batches, as browsers would trickle in
        opened += await asyncio.gather(*(one(conversation) for conversation in conversations[start : start + 50]))
    return opened


async def drain(connections: list[Any]) -> None:
    """Read (and drop) whatever the server sends, so its sends never block."""

    async def read(connection: Any) -> None:
        try:
            async for _ in connection:
                pass
        except Exception:  # noqa: BLE001 - closed at the end
            pass

    await asyncio.gather(*(read(connection) for connection in connections))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sockets", type=int, default=500, help="idle sockets, one conversation each (default 500)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring window (default 20)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds between the last attach and the window (default 10)")
    parser.add_argument("--layer", choices=("redis", "memory"), default="redis", help="channel layer of the server (default redis)")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout whose agent_persistence the server runs (default this one)")
    parser.add_argument("--cpus", default=None, help="CPUs the server is pinned to (taskset), default none")


def run(args: argparse.Namespace) -> int:
    from .database import FULL_DATABASE
    from .storage import close_django_connections

    ensure_database(FULL_DATABASE)
    cookie, conversations = login_and_conversations(args.sockets)
    close_django_connections()
    progress(f"starting the server ({args.layer} layer, code from {args.code})")
    server = Server(FULL_DATABASE, args.code.resolve(), args.layer, args.cpus)
    try:
        async def main() -> tuple[float, float]:
            connections = await open_sockets(server, cookie, conversations)
            progress(f"{len(connections)} sockets attached; settling {args.settle:.0f} s")
            reader = asyncio.get_running_loop().create_task(drain(connections))
            await asyncio.sleep(args.settle)
            cpu, commits, began = server.cpu_seconds(), committed_transactions(FULL_DATABASE), time.monotonic()
            await asyncio.sleep(args.seconds)
            cpu, commits = server.cpu_seconds() - cpu, committed_transactions(FULL_DATABASE) - commits - 1
            elapsed = time.monotonic() - began
            await asyncio.gather(*(connection.close() for connection in connections), return_exceptions=True)
            reader.cancel()
            return cpu / elapsed * 100, commits / elapsed

        cpu_percent, transactions = asyncio.run(main())
    finally:
        server.stop()
    print(f"Idle websockets ({args.layer} layer, PostgreSQL, code from {args.code}; {os.cpu_count()} CPUs, "
          f"load average {', '.join(f'{load:.1f}' for load in os.getloadavg())})")
    print(format_rows(("sockets", "layer", "seconds", "server CPU % of a core", "database transactions/s"),
                      [(str(args.sockets), args.layer, f"{args.seconds:.0f}", f"{cpu_percent:.1f}", f"{transactions:.1f}")]))
    return 0
