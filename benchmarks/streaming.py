"""Websocket streaming: delivery latency, fan-out, reattach time and concurrent streaming turns.

Two uvicorn processes serve ``agent_persistence.realtime`` on the benchmark
database (PostgreSQL) with the Redis channel layer (``REDIS_URL``, default
``redis://127.0.0.1:6379/0``). :class:`TimedAgent` streams chunks that carry
the wall-clock time they were emitted (``<time>;``); real ``websockets``
clients in this process note when each chunk arrives. Delivery latency is
arrival minus emission for every chunk (same machine, same clock).

1. latency to a follower on the producing server (in-process hub) and on the
   other server (through Redis), one turn, both at once;
2. fan-out: 100 followers of one turn, half on each server;
3. reattach: connect and attach mid-turn, time to the first catch-up frame;
4. capacity: N concurrent turns on one server, each followed by the socket
   that started it; N grows until p99 delivery exceeds 250 ms.
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
import uuid
from pathlib import Path
from typing import Any

from agent_persistence.runtime.agents import Agent

from .measure import percentile
from .runtime import ensure_database, format_rows, progress

ROOT = Path(__file__).resolve().parent.parent
AGENT_NAME = "bench-ws"
P99_BUDGET = 0.250


class TimedAgent(Agent):
    """Streams ``chunks`` chunks ``every`` seconds apart (from the user message), each stamped with time.time()."""

    async def run(self, turn: Any) -> None:
        plan = json.loads(turn.user_message.content)
        for _ in range(plan["chunks"]):
            turn.stream(f"{time.time():.6f};")
            await asyncio.sleep(plan["every"])


def asgi_application() -> Any:
    """The servers' application (``uvicorn --factory benchmarks.streaming:asgi_application``)."""
    from . import settings as bench_settings

    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    bench_settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # Above channels-redis's 5 s blocking receive (redis-py 8 defaults to 5 s).
            # max_connections: redis-py 8 caps a pool at 100 connections, fewer than the layer's calls
            # in flight with hundreds of streaming turns (MaxConnectionsError, the layer judged down).
            "CONFIG": {"hosts": [{"address": redis_url, "socket_timeout": 30, "max_connections": 1000}], "capacity": 1000},
        }
    }
    bench_settings.AGENT_PERSISTENCE = {
        **bench_settings.AGENT_PERSISTENCE,
        "AGENTS": {AGENT_NAME: "benchmarks.streaming.TimedAgent"},
        # Every socket of the benchmark is one user's: the per-user cap would refuse the capacity steps.
        "WEBSOCKET_MAX_PER_USER": 10_000,
    }
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    from django.core.asgi import get_asgi_application

    get_asgi_application()
    from channels.auth import AuthMiddlewareStack
    from channels.routing import ProtocolTypeRouter, URLRouter

    from agent_persistence.realtime.routing import websocket_urlpatterns

    return ProtocolTypeRouter({"websocket": AuthMiddlewareStack(URLRouter(websocket_urlpatterns))})


class Server:
    def __init__(self, database: str, cpus: str | None, profile: str | None = None, deflate: bool = True) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        command = [sys.executable, "-m", "uvicorn", "--factory", "benchmarks.streaming:asgi_application", "--host", "127.0.0.1",
                   "--port", str(self.port), "--log-level", "warning", "--ws", "websockets-sansio", "--lifespan", "off",
                   "--ws-per-message-deflate", "true" if deflate else "false"]
        if cpus:
            command = ["taskset", "-c", cpus, *command]
        from .database import BENCH_DATABASE_ENV

        self.profiler: subprocess.Popen[bytes] | None = None
        self.process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, BENCH_DATABASE_ENV: database})
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("a benchmark server did not start")
                time.sleep(0.1)
        if profile:
            # py-spy samples the server from outside (taskset execs uvicorn, so the pid is the server's).
            self.profiler = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--format", "raw",
                                              "--rate", "100", "--pid", str(self.process.pid), "--output", profile])

    def url(self, conversation_id: uuid.UUID) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/conversations/{conversation_id}/"

    def stop(self) -> None:
        if self.profiler is not None:
            self.profiler.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
            self.profiler.wait(60)
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def login_and_conversations(count: int, username: str = "bench-ws") -> tuple[str, list[uuid.UUID]]:
    """A session cookie of the benchmark user ``username``, and ``count`` fresh conversations of theirs."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from agent_persistence.scope import Scope
    from agent_persistence.stores import conversation_store

    user, _ = get_user_model().objects.get_or_create(username=username)
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    scope = Scope(tenant="", user=str(user.pk))
    return store.session_key, [conversation_store().create(scope, agent=AGENT_NAME).pk for _ in range(count)]


class Follower:
    """A websocket client that records the delivery latency of every chunk it receives."""

    def __init__(self, url: str, cookie: str) -> None:
        self.url, self.cookie = url, cookie
        self.latencies: list[float] = []
        self.connection: Any = None
        self.done = asyncio.Event()
        self.first_catch_up: float | None = None
        self.task: asyncio.Task[None] | None = None

    async def open(self, attach: bool = True) -> None:
        import websockets

        self.connection = await websockets.connect(self.url, additional_headers={"Cookie": f"sessionid={self.cookie}"}, max_size=None)
        if attach:
            await self.connection.send(json.dumps({"type": "attach"}))
        self.task = asyncio.get_running_loop().create_task(self.read())

    async def read(self) -> None:
        async for raw in self.connection:
            now = time.time()
            frame = json.loads(raw)
            if frame["type"] == "delta":
                if self.first_catch_up is None:
                    self.first_catch_up = time.perf_counter()
                self.latencies.extend(now - float(stamp) for stamp in frame["text"].split(";") if stamp)
            elif frame["type"] == "final":
                self.done.set()

    async def close(self) -> None:
        await self.connection.close()
        if self.task is not None:
            self.task.cancel()


async def start(follower: Follower, chunks: int, every: float) -> None:
    await follower.connection.send(json.dumps({"type": "start", "content": json.dumps({"chunks": chunks, "every": every})}))


def summary(latencies: list[float]) -> tuple[str, str, str]:
    return f"{len(latencies)}", f"{percentile(latencies, 0.5) * 1000:.1f}", f"{percentile(latencies, 0.99) * 1000:.1f}"


async def measure_latency(a: Server, b: Server, cookie: str, conversation: uuid.UUID, chunks: int) -> list[tuple[str, ...]]:
    local, remote = Follower(a.url(conversation), cookie), Follower(b.url(conversation), cookie)
    await remote.open()
    await local.open(attach=False)
    await asyncio.sleep(0.3)
    await start(local, chunks, 0.02)
    await asyncio.wait_for(asyncio.gather(local.done.wait(), remote.done.wait()), 120)
    await local.close()
    await remote.close()
    return [("same server (hub)", *summary(local.latencies)), ("other server (Redis)", *summary(remote.latencies))]


async def measure_fan_out(a: Server, b: Server, cookie: str, conversation: uuid.UUID, followers: int, chunks: int) -> list[tuple[str, ...]]:
    clients = [Follower((a if i % 2 else b).url(conversation), cookie) for i in range(followers)]
    await asyncio.gather(*(client.open() for client in clients))
    starter = Follower(a.url(conversation), cookie)
    await starter.open(attach=False)
    await asyncio.sleep(0.5)
    await start(starter, chunks, 0.05)
    await asyncio.wait_for(asyncio.gather(*(client.done.wait() for client in clients)), 180)
    same = [latency for i, client in enumerate(clients) if i % 2 for latency in client.latencies]
    other = [latency for i, client in enumerate(clients) if not i % 2 for latency in client.latencies]
    for client in [*clients, starter]:
        await client.close()
    return [(f"{followers // 2} followers, same server", *summary(same)), (f"{followers - followers // 2} followers, other server", *summary(other))]


async def measure_reattach(a: Server, b: Server, cookie: str, conversation: uuid.UUID, attempts: int) -> list[tuple[str, ...]]:
    starter = Follower(a.url(conversation), cookie)
    await starter.open(attach=False)
    await start(starter, 4000, 0.005)
    await asyncio.sleep(1.0)
    rows = []
    for server, name in ((a, "same server"), (b, "other server")):
        times = []
        for _ in range(attempts):
            client = Follower(server.url(conversation), cookie)
            began = time.perf_counter()
            await client.open()
            while client.first_catch_up is None:
                await asyncio.sleep(0.0005)
            times.append(client.first_catch_up - began)
            await client.close()
        rows.append((f"reattach, {name}", *summary(times)))
    await starter.connection.send(json.dumps({"type": "stop"}))
    await asyncio.wait_for(starter.done.wait(), 30)
    await starter.close()
    return rows


async def measure_capacity(a: Server, cookie: str, conversations: list[uuid.UUID], steps: list[int], seconds: float) -> list[tuple[str, ...]]:
    """Rows per step; a step holds when every chunk of every turn arrived and p99 is within budget."""
    rows = []
    used = 0
    every = 0.1
    chunks = int(seconds / every)
    for turns in steps:
        batch = conversations[used : used + turns]
        used += turns
        clients = [Follower(a.url(conversation), cookie) for conversation in batch]
        try:
            await asyncio.gather(*(client.open(attach=False) for client in clients))
            await asyncio.gather(*(start(client, chunks, every) for client in clients))
            await asyncio.wait_for(asyncio.gather(*(client.done.wait() for client in clients)), seconds * 3 + 30)
            complete = True
        except (asyncio.TimeoutError, OSError) as exc:
            opened = sum(client.connection is not None for client in clients)
            finished = sum(client.done.is_set() for client in clients)
            progress(
                f"{turns} turns: {type(exc).__name__}: not every turn was opened, started or finished in time "
                f"({opened} opened, {finished} finished)"
            )
            complete = False
        latencies = [latency for client in clients for latency in client.latencies]
        await asyncio.gather(*(client.close() for client in clients if client.connection is not None), return_exceptions=True)
        holds = complete and len(latencies) == turns * chunks and percentile(latencies, 0.99) <= P99_BUDGET
        figures = summary(latencies) if latencies else ("0", "-", "-")
        rows.append((f"{turns} turns, 1 follower each{'' if holds else ' (fails)'}", *figures))
        progress(f"capacity: {rows[-1]}")
        if not holds:
            break
        await asyncio.sleep(2.0)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="fewer chunks, followers and capacity steps")
    parser.add_argument("--cpus", default="0,1", help="CPUs the servers are pinned to (taskset), default 0,1")
    parser.add_argument("--turns", type=int, nargs="+", help="capacity steps (concurrent turns), default 10 50 100 200 300 400 600 800")
    parser.add_argument("--capacity-only", action="store_true", help="measure only the concurrent turns (the capacity steps)")
    parser.add_argument("--profile", metavar="FILE",
                        help="run server A under py-spy (pip install py-spy) and write its collapsed stacks to FILE")
    parser.add_argument("--no-deflate", action="store_true",
                        help="serve without permessage-deflate (uvicorn --ws-per-message-deflate false)")


def run(args: argparse.Namespace) -> int:
    from .database import FULL_DATABASE

    ensure_database(FULL_DATABASE)
    steps = args.turns or ([10, 50, 100] if args.quick else [10, 50, 100, 200, 300, 400, 600, 800])
    cookie, conversations = login_and_conversations(3 + sum(steps))
    from .storage import close_django_connections

    close_django_connections()
    progress("starting two servers")
    deflate = not args.no_deflate
    a, b = Server(FULL_DATABASE, args.cpus, args.profile, deflate), Server(FULL_DATABASE, args.cpus, deflate=deflate)
    try:
        async def main() -> list[tuple[str, ...]]:
            rows: list[tuple[str, ...]] = []
            if not args.capacity_only:
                rows += await measure_latency(a, b, cookie, conversations[0], 100 if args.quick else 500)
                progress("latency done")
                rows += await measure_fan_out(a, b, cookie, conversations[1], 100, 40 if args.quick else 100)
                progress("fan-out done")
                rows += await measure_reattach(a, b, cookie, conversations[2], 20 if args.quick else 100)
                progress("reattach done")
            rows += await measure_capacity(a, cookie, conversations[3:], steps, 5.0 if args.quick else 10.0)
            return rows

        rows = asyncio.run(main())
    finally:
        a.stop()
        b.stop()
    print(f"Websocket streaming (PostgreSQL + Redis, two uvicorn servers pinned to CPUs {args.cpus}, {os.cpu_count()} CPUs in all, "
          f"permessage-deflate {'on' if deflate else 'off'}, "
          f"load average {', '.join(f'{load:.1f}' for load in os.getloadavg())})")
    print(format_rows(("figure", "samples", "p50 ms", "p99 ms"), rows))
    return 0
