"""Idle websockets: what N open sockets cost a server when no turn runs anywhere (CPU, database transactions/s).

One uvicorn process serves ``agent_persistence.realtime`` on the benchmark
database (PostgreSQL) with the Redis channel layer (``REDIS_URL``, default
``redis://127.0.0.1:6379/0``) or, with ``--layer memory``, the in-memory
layer. ``--sockets`` clients (default 500) each open a socket to a
conversation of their own and attach; none starts a turn. They are spread
over users, ``--per-user`` each (default 100, the default
``WEBSOCKET_MAX_PER_USER``, which the server keeps), as sockets of a real
fleet are. After a settling time the benchmark measures, over ``--seconds``:

- the server process's CPU time (``/proc/<pid>/stat``, user + system) as a
  percentage of one core;
- the database's committed transactions per second
  (``pg_stat_database.xact_commit`` of the benchmark database, whose only
  client is the server: the benchmark's own reads are subtracted);
- the server's memory per socket: its resident set (``VmRSS``) once the
  sockets settled, less what it was before the first one opened, divided by
  the sockets.

The benchmark raises its open-file limit (and so the server's, which inherits
it) to the hard limit: each process holds one descriptor per socket.

``--code DIR`` serves the app from another checkout (e.g. ``git worktree add
/tmp/before <commit>``) to compare before and after on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .runtime import ensure_database, format_rows, progress

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

    def resident_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc/<pid>/status")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def redis_application(**overrides: Any) -> Any:
    """``benchmarks.streaming``'s application (Redis layer), the per-user socket cap at its default."""
    from django.test.utils import override_settings

    from . import streaming

    application = streaming.asgi_application()
    if overrides:
        override_settings(**overrides).enable()
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


def users_and_conversations(sockets: int, per_user: int) -> list[tuple[str, Any]]:
    """``sockets`` pairs of (session cookie, conversation), ``per_user`` conversations per benchmark user."""
    from .streaming import login_and_conversations

    pairs: list[tuple[str, Any]] = []
    for number in range(math.ceil(sockets / per_user)):
        cookie, conversations = login_and_conversations(min(per_user, sockets - len(pairs)), username=f"bench-idle-{number}")
        pairs += [(cookie, conversation) for conversation in conversations]
    return pairs


def raise_open_file_limit() -> int:
    """The soft limit of open files raised to the hard one (inherited by the server); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def open_sockets(server: Server, pairs: list[tuple[str, Any]]) -> list[Any]:
    import websockets

    async def one(cookie: str, conversation: Any) -> Any:
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
    for start in range(0, len(pairs), 50):  # in batches, as browsers would trickle in
        opened += await asyncio.gather(*(one(cookie, conversation) for cookie, conversation in pairs[start : start + 50]))
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
    parser.add_argument("--per-user", type=int, default=100,
                        help="sockets per user, at most WEBSOCKET_MAX_PER_USER (default 100, its default)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring window (default 20)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds between the last attach and the window (default 10)")
    parser.add_argument("--layer", choices=("redis", "memory"), default="redis", help="channel layer of the server (default redis)")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout whose agent_persistence the server runs (default this one)")
    parser.add_argument("--cpus", default=None, help="CPUs the server is pinned to (taskset), default none")


def run(args: argparse.Namespace) -> int:
    from .database import FULL_DATABASE
    from .storage import close_django_connections

    if not 1 <= args.per_user <= 100:
        raise SystemExit("--per-user must be between 1 and 100 (WEBSOCKET_MAX_PER_USER, which the server keeps)")
    limit = raise_open_file_limit()
    if limit < args.sockets + 1000:
        # Each end is its own process: this one holds the clients, the server the accepted sockets.
        raise SystemExit(f"{args.sockets} sockets need about {args.sockets + 1000} open files per process; the limit is {limit}")
    ensure_database(FULL_DATABASE)
    progress(f"creating {args.sockets} conversations of {math.ceil(args.sockets / args.per_user)} users")
    pairs = users_and_conversations(args.sockets, args.per_user)
    close_django_connections()
    progress(f"starting the server ({args.layer} layer, code from {args.code})")
    server = Server(FULL_DATABASE, args.code.resolve(), args.layer, args.cpus)
    try:
        async def main() -> tuple[float, float, float]:
            before = server.resident_bytes()
            connections = await open_sockets(server, pairs)
            progress(f"{len(connections)} sockets attached; settling {args.settle:.0f} s")
            reader = asyncio.get_running_loop().create_task(drain(connections))
            await asyncio.sleep(args.settle)
            per_socket = (server.resident_bytes() - before) / len(connections)
            cpu, commits, began = server.cpu_seconds(), committed_transactions(FULL_DATABASE), time.monotonic()
            await asyncio.sleep(args.seconds)
            cpu, commits = server.cpu_seconds() - cpu, committed_transactions(FULL_DATABASE) - commits - 1
            elapsed = time.monotonic() - began
            await asyncio.gather(*(connection.close() for connection in connections), return_exceptions=True)
            reader.cancel()
            return cpu / elapsed * 100, commits / elapsed, per_socket

        cpu_percent, transactions, per_socket = asyncio.run(main())
    finally:
        server.stop()
    print(f"Idle websockets ({args.layer} layer, PostgreSQL, code from {args.code}; {os.cpu_count()} CPUs, "
          f"load average {', '.join(f'{load:.1f}' for load in os.getloadavg())})")
    users = math.ceil(args.sockets / args.per_user)
    print(format_rows(("sockets", "users", "layer", "seconds", "server CPU % of a core", "database transactions/s", "KiB per socket"),
                      [(str(args.sockets), str(users), args.layer, f"{args.seconds:.0f}", f"{cpu_percent:.1f}", f"{transactions:.1f}",
                        f"{per_socket / 1024:.1f}")]))
    return 0
