"""The API benchmark: requests/s and p50/p99 latency of the read endpoints, each beside a plain Django view.

The example project (``benchmarks.settings``: its own PostgreSQL database,
``DEBUG`` off) is served by real uvicorn processes, 1 and then 2 workers; this
process is the client: N concurrent httpx connections (default 16) on one
event loop, each sending its next request as soon as the last one answered,
for a fixed time per figure after a short warm-up. Every read endpoint is
measured twice in the same server: through the API, and through the baseline
(:mod:`benchmarks.baseline`: ``values()`` and ``JsonResponse``, the same rows
and the same JSON, checked equal before measuring), so the ratio says what the
API's layers cost. The figures are in :func:`figures`; the write figure
(``POST /api/conversations/<id>/messages/``, each client on its own
conversation) has no baseline.

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
RUNS = 50
INTERRUPTS = 20
FILES = 30
TASKS = 200
EVENTS = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per round, figure and side (default 3)")
    parser.add_argument("--warmup", type=float, default=0.5, help="warm-up seconds per round, figure and side (default 0.5)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure; API and baseline alternate (default 3)")
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
    """A user, 1,000 conversations, one of 10,000 messages, and one empty conversation per client.

    The long conversation also holds 1,000 events, 50 runs, 20 pending interrupts and 30 files; the
    user has 200 tasks.
    """
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command

    from agent_persistence.ids import uuid7
    from agent_persistence.scope import Scope
    from agent_persistence.stores import conversation_store, event_store, file_store, interrupt_store, run_store, task_store

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
    for start in range(0, EVENTS, 500):
        event_store().append(scope, read.id, [{"type": "note", "data": {"n": n}} for n in range(start, start + 500)])
    runs = [run_store().create_or_resume(scope, read.id, id=uuid7(), message_id=ids[n], name=f"run {n}") for n in range(RUNS)]
    for number in range(INTERRUPTS):
        interrupt_store().create(scope, read.id, id=uuid7(), run_id=runs[0].id, kind="generic", payload={"question": number})
    for number in range(FILES):
        file_store().save(scope, conversation_id=read.id, content=b"some bytes", name=f"file-{number}.txt", content_type="text/plain")
    for number in range(TASKS):
        task_store().create(scope, title=f"Task {number}", conversation_id=read.id, metadata={"n": number})
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

#: A figure's request: the path under /api/ (and /baseline/) and its query, drawn afresh for each request.
Target = Callable[[], tuple[str, dict[str, Any]]]
#: A client's request, given the client and its number.
Request = Callable[[httpx.AsyncClient, int], Any]


def figures(seeded: Seeded) -> dict[str, Target]:
    """Each read figure's request; the API serves it under /api/, the baseline under /baseline/."""
    read = seeded.read_conversation
    return {
        "list conversations (20 of 1,000)": lambda: ("conversations/", {"limit": 20}),
        "conversation + 50 messages before a cursor": lambda: (
            f"conversations/{read}/",
            {"limit": PAGE, "before": random.choice(seeded.cursors), "order": "desc"},
        ),
        "50 messages after a cursor": lambda: (f"conversations/{read}/messages/", {"limit": PAGE, "after": random.choice(seeded.cursors)}),
        "50 events after a seq": lambda: (f"conversations/{read}/events/", {"limit": PAGE, "after": random.randrange(EVENTS - PAGE)}),
        f"list runs (20 of {RUNS})": lambda: (f"conversations/{read}/runs/", {"limit": 20}),
        f"list interrupts ({INTERRUPTS} pending)": lambda: (f"conversations/{read}/interrupts/", {}),
        f"list files (20 of {FILES})": lambda: (f"conversations/{read}/files/", {"limit": 20}),
        f"list tasks (20 of {TASKS})": lambda: ("tasks/", {"limit": 20}),
    }


def read_request(prefix: str, target: Target) -> Request:
    def request(client: httpx.AsyncClient, number: int) -> Any:
        path, query = target()
        return client.get(f"/{prefix}/{path}", params=query)

    return request


def append_request(seeded: Seeded) -> Request:
    def append_message(client: httpx.AsyncClient, number: int) -> Any:
        conversation = seeded.append_conversations[number]
        return client.post(f"/api/conversations/{conversation}/messages/", json={"role": "user", "content": "Hello " * 30})

    return append_message


def check_bodies(base_url: str, seeded: Seeded) -> list[str]:
    """The figures whose API and baseline bodies differ for the same request (none, or the measure is void)."""
    cookies, headers = session_credentials(seeded)
    differ = []
    with httpx.Client(base_url=base_url, cookies=cookies, headers=headers, timeout=30) as client:
        for figure, target in figures(seeded).items():
            path, query = target()
            ours, theirs = (client.get(f"/{prefix}/{path}", params=query) for prefix in ("api", "baseline"))
            if ours.status_code != 200 or theirs.status_code != 200 or ours.json() != theirs.json():
                differ.append(figure)
    return differ


@dataclass
class Result:
    requests: int
    seconds: float
    latencies: list[float]
    failures: dict[int, int]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def __add__(self, other: Result) -> Result:
        failures = dict(self.failures)
        for code, count in other.failures.items():
            failures[code] = failures.get(code, 0) + count
        return Result(self.requests + other.requests, self.seconds + other.seconds, self.latencies + other.latencies, failures)


def session_credentials(seeded: Seeded) -> tuple[dict[str, str], dict[str, str]]:
    """The cookies and headers of the seeded user's session, with a CSRF token."""
    csrf = secrets.token_urlsafe(24)[:32].replace("-", "a").replace("_", "b")
    return {"sessionid": seeded.session_key, "csrftoken": csrf}, {"X-CSRFToken": csrf, "Accept": "application/json"}


async def load(base_url: str, seeded: Seeded, request: Request, clients: int, warmup: float, seconds: float) -> Result:
    """``clients`` closed-loop clients; only requests started inside the measured window count."""
    cookies, headers = session_credentials(seeded)
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


#: One line of the result: workers, figure, the API's result, the baseline's (None for a write).
Line = tuple[int, str, Result, "Result | None"]


def format_results(lines: list[Line]) -> str:
    header = (
        "workers", "figure", "API req/s", "baseline req/s", "API/baseline",
        "API p50 ms", "API p99 ms", "baseline p50 ms", "baseline p99 ms", "non-2xx",
    )
    text_columns = (1, 9)

    def failures(*results: Result | None) -> str:
        counts: dict[int, int] = {}
        for result in results:
            for code, count in (result.failures if result else {}).items():
                counts[code] = counts.get(code, 0) + count
        return ", ".join(f"{code}: {count}" for code, count in sorted(counts.items())) or "0"

    def latency(result: Result | None, rank: float) -> str:
        return format_value(percentile(result.latencies, rank) * 1000) if result and result.latencies else ""

    cells = [header] + [
        (
            str(workers),
            figure,
            format_value(ours.rate),
            format_value(baseline.rate) if baseline else "",
            f"{ours.rate / baseline.rate:.2f}" if baseline and baseline.rate else "",
            latency(ours, 0.5),
            latency(ours, 0.99),
            latency(baseline, 0.5),
            latency(baseline, 0.99),
            failures(ours, baseline),
        )
        for workers, figure, ours, baseline in lines
    ]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]

    def line(values: tuple[str, ...]) -> str:
        return "| " + " | ".join(v.ljust(w) if c in text_columns else v.rjust(w) for c, (v, w) in enumerate(zip(values, widths))) + " |"

    rules = "|" + "|".join("-" * (w + 1) + ("-" if c in text_columns else ":") for c, w in enumerate(widths)) + "|"
    return "\n".join([line(cells[0]), rules] + [line(row) for row in cells[1:]])


def measure(base_url: str, seeded: Seeded, args: argparse.Namespace, workers: int) -> list[Line]:
    """Every read figure through the API and the baseline, then the append.

    A figure is ``--rounds`` short rounds per side, the sides taking turns and
    the first of each round alternating, so load that drifts on a shared
    machine falls on both; a side's figure sums its rounds.
    """
    lines: list[Line] = []
    for figure, target in figures(seeded).items():
        results: dict[str, Result] = {}
        for round_number in range(args.rounds):
            for side in ("api", "baseline") if round_number % 2 == 0 else ("baseline", "api"):
                progress(f"{workers} worker(s): {figure}, {side}, round {round_number + 1}/{args.rounds} ...")
                request = read_request(side, target)
                result = asyncio.run(load(base_url, seeded, request, args.clients, args.warmup, args.seconds))
                results[side] = results[side] + result if side in results else result
        lines.append((workers, figure, results["api"], results["baseline"]))
    progress(f"{workers} worker(s): append a message ...")
    appended = asyncio.run(load(base_url, seeded, append_request(seeded), args.clients, args.warmup, args.seconds * args.rounds))
    lines.append((workers, "append a message (no baseline)", appended, None))
    return lines


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
        (
            "window",
            f"{args.rounds} rounds per figure and side, API and baseline taking turns; "
            f"each {args.warmup:g} s warm-up, then {args.seconds:g} s measured",
        ),
        (
            "database",
            f"{API_DATABASE}: {CONVERSATIONS:,} conversations, one of {MESSAGES:,} messages, {EVENTS:,} events, "
            f"{RUNS} runs, {INTERRUPTS} interrupts, {FILES} files; {TASKS} tasks; CONN_MAX_AGE 0"
            + ("" if os.environ.get("AP_BENCH_NO_POOL") else ", psycopg pool"),
        ),
        ("auth", "Django session cookie + CSRF token"),
    ]
    lines: list[Line] = []
    differ: list[str] = []
    try:
        for workers in args.workers:
            process, base_url = start_server(workers)
            try:
                differ += [f"{figure} ({workers} worker(s))" for figure in check_bodies(base_url, seeded)]
                lines += measure(base_url, seeded, args, workers)
            finally:
                stop_server(process)
    finally:
        if args.drop:
            drop_database()
    facts.append(("bodies", "API and baseline differ: " + "; ".join(differ) if differ else "API and baseline equal for every figure"))
    facts.append(("took", f"{time.monotonic() - started:.0f} s"))
    print(format_facts(facts))
    print()
    print(format_results(lines))
    print()
    print("API/baseline: requests/s of the API over the plain Django view's, same rows, same JSON, same server.")
    complete = all(not ours.failures and ours.requests and (not baseline or not baseline.failures) for _, _, ours, baseline in lines)
    return 0 if complete and not differ else 1
