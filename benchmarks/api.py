"""The API benchmark: requests/s and p50/p99 latency of three endpoints under uvicorn, 1 and 2 workers.

The example project (``benchmarks.settings``: its own PostgreSQL database,
``DEBUG`` off) is served by real uvicorn processes; this process is the
client: N concurrent httpx connections (default 16) on one event loop, each
sending its next request as soon as the last one answered, for a fixed time
per figure after a short warm-up. The figures:

- list: ``GET /api/conversations/?limit=20`` for a user with 1,000 conversations;
- read: ``GET /api/conversations/<id>/?limit=50&before=<cursor>``: a conversation
  of 10,000 messages and a page of 50 before a random message;
- append: ``POST /api/conversations/<id>/messages/``, each client on its own
  conversation.

Requests authenticate with a Django session (a cookie) and a CSRF token, as a
browser would: basic authentication would spend most of each request hashing
the password. Only 2xx answers count; any other status is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx
import psycopg
from psycopg import sql

from agent_persistence.testing.network import free_port

from .database import BENCH_DATABASE_ENV, conninfo_for, server_url
from .measure import percentile
from .report import format_facts, format_value, machine_facts

#: This benchmark's own database (created, migrated and seeded here; dropped with --drop).
API_DATABASE = "agent_persistence_bench_api"
ROOT = Path(__file__).resolve().parent.parent
USERNAME = "bench-api"
CONVERSATIONS = 1000
MESSAGES = 10_000
CURSORS = 200
PAGE = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per figure (default 10)")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per figure (default 2)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="uvicorn worker counts (default 1 2)")
    parser.add_argument("--drop", action="store_true", help="drop the benchmark database when done")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the database ------------------------------------------------------------------------------


def maintenance() -> psycopg.Connection:
    return psycopg.connect(server_url(), autocommit=True)


def recreate_database() -> None:
    with maintenance() as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(API_DATABASE)))
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(API_DATABASE)))


def drop_database() -> None:
    with maintenance() as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(API_DATABASE)))


def setup_django() -> None:
    os.environ[BENCH_DATABASE_ENV] = API_DATABASE
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django

    django.setup()


@dataclass
class Seeded:
    """What the clients address: the session, the read conversation and its cursors, one conversation per client."""

    session_key: str
    read_conversation: str
    cursors: list[str]
    append_conversations: list[str] = field(default_factory=list)


def seed(clients: int) -> Seeded:
    """A user, 1,000 conversations, one of 10,000 messages, and one empty conversation per client."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command

    from agent_persistence.scope import Scope
    from agent_persistence.stores import conversation_store

    call_command("migrate", verbosity=0, interactive=False)
    user = get_user_model().objects.create_user(USERNAME, password=secrets.token_hex(8))
    scope = Scope("", str(user.pk))
    store = conversation_store()
    for number in range(CONVERSATIONS - 1):
        store.create(scope, agent="bench", title=f"Conversation {number}")
    read = store.create(scope, agent="bench", title="The long one")
    batch = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"Message {n}. " * 10} for n in range(MESSAGES)]
    ids = [str(message.id) for message in store.merge_messages(scope, read.id, batch)]
    cursors = random.Random(7).sample(ids[PAGE:], CURSORS)
    appends = [str(store.create(scope, agent="bench", title=f"Appends {n}").id) for n in range(clients)]
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    from django.db import connections

    connections.close_all()
    return Seeded(session.session_key or "", str(read.id), cursors, appends)


# -- the server --------------------------------------------------------------------------------



def start_server(workers: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, BENCH_DATABASE_ENV: API_DATABASE, "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    process = subprocess.Popen(
        [
            sys.executable, "-m", "uvicorn", "example_project.asgi:application",
            "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
            "--lifespan", "off", "--log-level", "warning", "--no-access-log",
        ],
        cwd=ROOT,
        env=env,
    )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base_url}/api/schema/", timeout=5)
            return process, base_url
        except httpx.TransportError:
            if process.poll() is not None:
                raise RuntimeError(f"uvicorn exited with {process.returncode}") from None
            time.sleep(0.2)
    process.terminate()
    raise RuntimeError("uvicorn did not answer within 30 s")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=15)


# -- the load ----------------------------------------------------------------------------------

Request = Callable[[httpx.AsyncClient, int], Any]


def figures(seeded: Seeded) -> dict[str, Request]:
    """Each figure's request, given a client and that client's number."""

    def list_conversations(client: httpx.AsyncClient, number: int) -> Any:
        return client.get("/api/conversations/", params={"limit": 20})

    def read_page(client: httpx.AsyncClient, number: int) -> Any:
        cursor = random.choice(seeded.cursors)
        return client.get(f"/api/conversations/{seeded.read_conversation}/", params={"limit": PAGE, "before": cursor})

    def append_message(client: httpx.AsyncClient, number: int) -> Any:
        conversation = seeded.append_conversations[number]
        return client.post(f"/api/conversations/{conversation}/messages/", json={"role": "user", "content": "Hello " * 30})

    return {"list conversations": list_conversations, "read a page of 50": read_page, "append a message": append_message}


@dataclass
class Result:
    requests: int
    seconds: float
    latencies: list[float]
    failures: dict[int, int]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


async def load(base_url: str, seeded: Seeded, request: Request, clients: int, warmup: float, seconds: float) -> Result:
    """``clients`` closed-loop clients; only requests started inside the measured window count."""
    csrf = secrets.token_urlsafe(24)[:32].replace("-", "a").replace("_", "b")
    cookies = {"sessionid": seeded.session_key, "csrftoken": csrf}
    headers = {"X-CSRFToken": csrf, "Accept": "application/json"}
    latencies: list[float] = []
    failures: dict[int, int] = {}
    start = time.monotonic() + warmup
    end = start + seconds

    async def client_loop(number: int) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=base_url, cookies=cookies, headers=headers, limits=limits, timeout=30) as client:
            while True:
                began = time.monotonic()
                if began >= end:
                    return
                response = await request(client, number)
                took = time.monotonic() - began
                if began < start:
                    continue
                if response.is_success:
                    latencies.append(took)
                else:
                    failures[response.status_code] = failures.get(response.status_code, 0) + 1

    await asyncio.gather(*(client_loop(number) for number in range(clients)))
    return Result(len(latencies), seconds, latencies, failures)


def format_results(results: list[tuple[int, str, Result]], clients: int) -> str:
    header = ("workers", "figure", "requests/s", "p50 ms", "p99 ms", "non-2xx")
    cells = [header] + [
        (
            str(workers),
            figure,
            format_value(result.rate),
            format_value(percentile(result.latencies, 0.5) * 1000),
            format_value(percentile(result.latencies, 0.99) * 1000),
            ", ".join(f"{code}: {count}" for code, count in sorted(result.failures.items())) or "0",
        )
        for workers, figure, result in results
    ]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]

    def line(values: tuple[str, ...]) -> str:
        return "| " + " | ".join(v.ljust(w) if c in (1, 5) else v.rjust(w) for c, (v, w) in enumerate(zip(values, widths))) + " |"

    rules = "|" + "|".join("-" * (w + 1) + ("-" if c in (1, 5) else ":") for c, w in enumerate(widths)) + "|"
    return "\n".join([line(cells[0]), rules] + [line(row) for row in cells[1:]])


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    progress(f"Creating {API_DATABASE} and seeding ...")
    recreate_database()
    setup_django()
    seeded = seed(args.clients)
    with psycopg.connect(conninfo_for(API_DATABASE), autocommit=True) as connection:
        facts = machine_facts(connection)
    facts += [
        ("server", "uvicorn " + __import__("uvicorn").__version__ + f", example_project.asgi, workers {args.workers}"),
        ("client", f"{args.clients} concurrent httpx {httpx.__version__} clients in one process on the same machine"),
        ("window", f"{args.warmup:g} s warm-up, then {args.seconds:g} s measured per figure"),
        ("database", f"{API_DATABASE}: {CONVERSATIONS:,} conversations, one of {MESSAGES:,} messages; CONN_MAX_AGE 0"),
        ("auth", "Django session cookie + CSRF token"),
    ]
    results: list[tuple[int, str, Result]] = []
    try:
        for workers in args.workers:
            process, base_url = start_server(workers)
            try:
                for figure, request in figures(seeded).items():
                    progress(f"{workers} worker(s): {figure} ...")
                    result = asyncio.run(load(base_url, seeded, request, args.clients, args.warmup, args.seconds))
                    results.append((workers, figure, result))
            finally:
                stop_server(process)
    finally:
        if args.drop:
            drop_database()
    facts.append(("took", f"{time.monotonic() - started:.0f} s"))
    print(format_facts(facts))
    print()
    print(format_results(results, args.clients))
    return 0 if all(not result.failures and result.requests for _, _, result in results) else 1
