"""Concurrent live turns in one process: heartbeat age and database writes, beside raw psycopg ticks.

N turns are started with ``agent_persistence.runtime.lifecycle.start_turn`` on one
event loop, each driven by :class:`StreamingAgent` (a chunk every 100 ms), at
the default intervals (heartbeat 1 s, dead after 3 s, recording flush 0.5 s,
checkpoint 5 s). A separate thread, on its own psycopg connection, reads the
supervision rows every 250 ms: the oldest heartbeat of a running turn, and
whether any is older than DEAD_AFTER (a false dead verdict: every producer is
alive). Statements are counted in Python (an ``execute_wrapper`` on every
Django connection) and commits from ``pg_stat_database``. Then, on the same
rows, raw psycopg issues what one process's supervisor needs per tick: one
batched ``UPDATE ... RETURNING`` of the heartbeats every second and one
batched upsert of the recordings every half second.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from agent_persistence.runtime.agents import Agent

from .database import FULL_DATABASE, conninfo_for, create_database, database_exists
from .measure import percentile

AGENT_NAME = "bench-stream"
CHUNK = "tok "
CHUNK_EVERY = 0.1
#: A turn streams until the benchmark abandons it, never longer than this.
MAX_STREAM_SECONDS = 240.0
TENANT_PREFIX = "bench-turns-"
DEAD_AFTER = 3.0


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class StreamingAgent(Agent):
    """A long-running answer: one chunk every 100 ms, its count kept in the checkpointed state."""

    async def run(self, turn: Any) -> None:
        started = time.monotonic()
        index = turn.state.get("next", 0)
        while time.monotonic() - started < MAX_STREAM_SECONDS:
            turn.stream(CHUNK)
            index += 1
            turn.state["next"] = index
            await asyncio.sleep(CHUNK_EVERY)


class WaitingAgent(Agent):
    """A turn that starts and then waits (as for a model's first token) until the benchmark abandons it."""

    async def run(self, turn: Any) -> None:
        await asyncio.sleep(MAX_STREAM_SECONDS)


def ensure_database(database: str) -> None:
    """Create the benchmark database if needed, set Django up on it and migrate (no seeding)."""
    from .storage import migrate, setup_django

    if not database_exists(database):
        create_database(database)
    setup_django(database)
    migrate()


def format_rows(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A fixed-width Markdown table: the first two columns left-aligned, the rest right-aligned."""
    cells = [header] + rows
    widths = [max(len(line[column]) for line in cells) for column in range(len(header))]

    def line(values: tuple[str, ...]) -> str:
        return "| " + " | ".join(
            value.ljust(width) if column < 2 else value.rjust(width)
            for column, (value, width) in enumerate(zip(values, widths))
        ) + " |"

    rules = ["-" * (width + 1) + (":" if column >= 2 else "-") for column, width in enumerate(widths)]
    return "\n".join([line(header), "|" + "|".join(rules) + "|"] + [line(values) for values in rows])


def number(value: float) -> str:
    from .report import format_value

    return format_value(value)


# -- counting statements -------------------------------------------------------------------------


class StatementCounter:
    """An execute_wrapper: counts write statements and times the supervisor's batched statements."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.writes = 0
            self.reads = 0
            self.heartbeats: list[float] = []
            self.upserts: list[float] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            elapsed = time.perf_counter() - started
            head = sql.lstrip()[:6].upper()
            with self.lock:
                if head in ("INSERT", "UPDATE", "DELETE"):
                    self.writes += 1
                else:
                    self.reads += 1
                if head == "UPDATE" and '"agent_persistence_turnsupervision" SET "heartbeat_at"' in sql and "IN (VALUES" in sql:
                    self.heartbeats.append(elapsed)
                elif head == "INSERT" and '"agent_persistence_streamrecording"' in sql:
                    self.upserts.append(elapsed)


COUNTER = StatementCounter()


def install_counter() -> None:
    from django.db import connections
    from django.db.backends.signals import connection_created

    def add(connection: Any) -> None:
        if COUNTER not in connection.execute_wrappers:
            connection.execute_wrappers.append(COUNTER)

    connection_created.connect(lambda sender, connection, **kwargs: add(connection), weak=False)
    for connection in connections.all():
        add(connection)


# -- watching heartbeats ---------------------------------------------------------------------------

WATCH = """
SELECT count(*), coalesce(extract(epoch FROM max(now() - s.heartbeat_at)), 0)::float8,
       count(*) FILTER (WHERE s.heartbeat_at < now() - make_interval(secs => %s))
FROM agent_persistence_turnsupervision s JOIN agent_persistence_conversation c ON c.id = s.conversation_id
WHERE s.status = 'running' AND c.tenant = %s
"""


@dataclass
class Watch:
    running: int = 0
    max_age: float = 0.0
    dead_polls: int = 0
    max_dead: int = 0
    polls: int = 0

    def add(self, running: int, age: float, dead: int) -> None:
        self.running = running
        self.polls += 1
        self.max_age = max(self.max_age, age)
        if dead:
            self.dead_polls += 1
            self.max_dead = max(self.max_dead, dead)


class Poller(threading.Thread):
    """Reads the supervision rows of one tenant every 250 ms, on its own connection."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="bench-heartbeat-poller")
        import psycopg

        self.connection = psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True)
        self.tenant: str | None = None
        self.phase: str | None = None
        self.watches: dict[str, Watch] = {}
        self.stopping = threading.Event()

    def watch(self, tenant: str | None, phase: str | None) -> None:
        self.tenant, self.phase = tenant, phase
        if phase is not None:
            self.watches.setdefault(phase, Watch())

    def run(self) -> None:
        while not self.stopping.wait(0.25):
            tenant, phase = self.tenant, self.phase
            if tenant is None or phase is None:
                continue
            running, age, dead = self.connection.execute(WATCH, [DEAD_AFTER, tenant]).fetchone()
            self.watches[phase].add(running, age, dead)


def commits() -> int:
    import psycopg

    with psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True) as connection:
        return connection.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()[0]


# -- the store side ----------------------------------------------------------------------------------


@dataclass
class StoreResult:
    n: int
    ramp_seconds: float
    steady: Watch
    ramp: Watch
    writes_per_second: float
    statements_per_second: float
    commits_per_second: float
    heartbeat_latencies: list[float]
    upsert_latencies: list[float]
    answer_bytes: float
    outcomes: dict[str, int] = field(default_factory=dict)
    pairs: list[tuple[uuid.UUID, int, uuid.UUID]] = field(default_factory=list)

    @property
    def false_dead(self) -> bool:
        return self.steady.dead_polls > 0 or self.ramp.dead_polls > 0


async def store_side(n: int, window: float, poller: Poller) -> StoreResult:
    from agent_persistence.runtime.producer import Outcome, Supervisor
    from agent_persistence.runtime.lifecycle import start_turn
    from agent_persistence.scope import Scope

    tenant = f"{TENANT_PREFIX}{n}"
    scope = Scope(tenant, "bench-user")
    poller.watches.clear()
    poller.watch(tenant, "ramp")
    handles = []
    started = time.monotonic()
    for _ in range(n):
        handles.append(await start_turn(scope, uuid.uuid4(), content="Tell me a long story.", agent=AGENT_NAME))
    ramp_seconds = time.monotonic() - started
    progress(f"  N={n}: {n} turns started in {ramp_seconds:.1f} s; measuring {window:.0f} s")
    COUNTER.reset()
    poller.watch(tenant, "steady")
    commits_before, window_started = commits(), time.monotonic()
    await asyncio.sleep(window)
    elapsed = time.monotonic() - window_started
    commits_after = commits()
    poller.watch(None, None)
    with COUNTER.lock:
        writes, reads = COUNTER.writes, COUNTER.reads
        heartbeats, upserts = list(COUNTER.heartbeats), list(COUNTER.upserts)
    supervisor = Supervisor.current()
    producers = list(supervisor.producers.values())
    answer_bytes = sum(len(p.turn.message().get("content", "")) for p in producers) / max(1, len(producers))
    pairs = [(p.conversation_id, p.epoch, p.plan.message_id) for p in producers]
    # Abandon (as a process shutting down does): nothing more is written, the rows stay 'running'.
    for producer in producers:
        producer.stop(Outcome.ABANDONED)
    outcomes: dict[str, int] = {}
    for result in await asyncio.gather(*(handle.task for handle in handles), return_exceptions=True):
        key = result.value if isinstance(result, Outcome) else type(result).__name__
        outcomes[key] = outcomes.get(key, 0) + 1
    return StoreResult(
        n=n,
        ramp_seconds=ramp_seconds,
        steady=poller.watches["steady"],
        ramp=poller.watches["ramp"],
        writes_per_second=writes / elapsed,
        statements_per_second=(writes + reads) / elapsed,
        commits_per_second=(commits_after - commits_before) / elapsed,
        heartbeat_latencies=heartbeats,
        upsert_latencies=upserts,
        answer_bytes=answer_bytes,
        outcomes=outcomes,
        pairs=pairs,
    )


# -- the raw side ------------------------------------------------------------------------------------


@dataclass
class RawResult:
    writes_per_second: float
    heartbeat_latencies: list[float]
    upsert_latencies: list[float]
    stamped: int


def raw_side(pairs: list[tuple[uuid.UUID, int, uuid.UUID]], answer_bytes: float, window: float) -> RawResult:
    """One supervisor's ticks in hand-written SQL: heartbeats every 1 s, recordings every 0.5 s."""
    import psycopg
    from psycopg.types.json import Jsonb

    n = len(pairs)
    heartbeat_sql = (
        "UPDATE agent_persistence_turnsupervision SET heartbeat_at = now() WHERE status = 'running' "
        "AND (conversation_id, epoch) IN (VALUES " + ", ".join(["(%s::uuid, %s::bigint)"] * n) + ") "
        "RETURNING conversation_id"
    )
    upsert_sql = (
        'INSERT INTO agent_persistence_streamrecording (conversation_id, message_id, "index", message, epoch, updated_at) '
        "VALUES " + ", ".join(["(%s, %s, %s, %s, %s, now())"] * n) + " "
        'ON CONFLICT (conversation_id) DO UPDATE SET message_id = excluded.message_id, "index" = excluded."index", '
        "message = excluded.message, epoch = excluded.epoch, updated_at = excluded.updated_at "
        "WHERE agent_persistence_streamrecording.epoch <= excluded.epoch RETURNING conversation_id"
    )
    heartbeat_params = [value for cid, epoch, _ in pairs for value in (cid, epoch)]
    text = CHUNK * max(1, int(answer_bytes / len(CHUNK)))
    heartbeats: list[float] = []
    upserts: list[float] = []
    stamped = 0
    statements = 0
    with psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True) as connection:
        started = time.monotonic()
        tick = 0
        index = 10_000
        while time.monotonic() - started < window:
            tick += 1
            index += 5
            params: list[Any] = []
            for cid, epoch, message_id in pairs:
                params += [cid, message_id, index, Jsonb({"role": "assistant", "content": text}), epoch]
            call = time.perf_counter()
            connection.execute(upsert_sql, params).fetchall()
            upserts.append(time.perf_counter() - call)
            statements += 1
            if tick % 2 == 0:
                call = time.perf_counter()
                stamped = len(connection.execute(heartbeat_sql, heartbeat_params).fetchall())
                heartbeats.append(time.perf_counter() - call)
                statements += 1
            next_tick = started + tick * 0.5
            time.sleep(max(0.0, next_tick - time.monotonic()))
        elapsed = time.monotonic() - started
    return RawResult(statements / elapsed, heartbeats, upserts, stamped)


# -- turn starts ---------------------------------------------------------------------------------------

WAITING_AGENT = "bench-wait"
STARTS_TENANT = f"{TENANT_PREFIX}starts"


def raw_start_sql() -> str:
    """The start transaction's writes for a new conversation, as plain statements (one per table)."""
    from agent_persistence.stores.appends import CONVERSATION, EVENT, MESSAGE, RUN, SUPERVISION

    return ";".join([
        f"SELECT conversation_id FROM {SUPERVISION} WHERE conversation_id = %s FOR UPDATE",
        f"INSERT INTO {CONVERSATION} (id, tenant, owner, agent, title, metadata, state, version, last_turn_status, "
        "action_due_at, shared, pinned, epoch, next_position, last_event_seq, event_stop_reason, created_at, updated_at) "
        "VALUES (%s, %s, %s, %s, NULL, '{}', '{}', 0, 'running', NULL, false, false, 1, 1, 1, NULL, now(), now())",
        f"INSERT INTO {SUPERVISION} (conversation_id, status, heartbeat_at, message_id, run_id, epoch, replica, claimed_at) "
        "VALUES (%s, 'running', now(), %s, %s, 1, %s, now())",
        f"INSERT INTO {MESSAGE} (id, conversation_id, position, role, content, name, tool_call_id, tool_calls, files, "
        "metadata, usage, run_id, created_at, updated_at) "
        "VALUES (%s, %s, 0, 'user', %s, NULL, NULL, NULL, NULL, '{}', NULL, NULL, now(), now())",
        f"INSERT INTO {RUN} (id, conversation_id, message_id, parent_id, name, status, started_at, finished_at, usage, "
        "error, detached_since, cancel_requested, epoch, transcript) "
        "VALUES (%s, %s, %s, NULL, %s, 'running', now(), NULL, '{}', NULL, NULL, false, 1, '[]')",
        f"INSERT INTO {EVENT} (conversation_id, seq, type, data, run_id, created_at) "
        "VALUES (%s, 1, 'status_running', %s, %s, now())",
    ])


def raw_starts(count: int, content: str) -> float:
    """``count`` start transactions for new conversations, one after another, with psycopg; the seconds taken."""
    import psycopg
    from psycopg.types.json import Jsonb

    from agent_persistence.ids import uuid7

    statements = raw_start_sql().split(";")
    with psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True) as connection:
        started = time.perf_counter()
        for _ in range(count):
            pk, message_id, run_id, user_message_id = uuid.uuid4(), uuid.uuid4(), uuid7(), uuid7()
            data = Jsonb({"message_id": str(message_id), "run_id": str(run_id), "epoch": 1})
            with connection.transaction():
                parameters: list[list[Any]] = [
                    [pk],
                    [pk, STARTS_TENANT, "bench-user", WAITING_AGENT],
                    [pk, message_id, run_id, "bench"],
                    [user_message_id, pk, Jsonb(content)],
                    [run_id, pk, message_id, WAITING_AGENT],
                    [pk, data, run_id],
                ]
                for sql, params in zip(statements, parameters):
                    connection.execute(sql, params)
        return time.perf_counter() - started


async def store_starts(count: int, content: str) -> tuple[float, dict[str, int]]:
    """``count`` ``start_turn`` calls for new conversations, one after another; the seconds taken, the outcomes."""
    from agent_persistence.runtime.producer import Outcome, Supervisor
    from agent_persistence.runtime.lifecycle import start_turn
    from agent_persistence.scope import Scope

    scope = Scope(STARTS_TENANT, "bench-user")
    handles = []
    started = time.perf_counter()
    for _ in range(count):
        handles.append(await start_turn(scope, uuid.uuid4(), content=content, agent=WAITING_AGENT))
    elapsed = time.perf_counter() - started
    for producer in list(Supervisor.current().producers.values()):
        producer.stop(Outcome.ABANDONED)
    outcomes: dict[str, int] = {}
    for result in await asyncio.gather(*(handle.task for handle in handles), return_exceptions=True):
        key = result.value if isinstance(result, Outcome) else type(result).__name__
        outcomes[key] = outcomes.get(key, 0) + 1
    return elapsed, outcomes


def start_statements(content: str) -> dict[str, list[str]]:
    """The statements of one ``TurnStore.begin`` in a new conversation and of the raw start, from libpq's trace."""
    import psycopg

    from agent_persistence.runtime.lifecycle import begin_turn
    from agent_persistence.scope import Scope

    from .trace import django_pgconn, statements_of

    scope = Scope(STARTS_TENANT, "bench-user")
    store = statements_of(django_pgconn(), lambda: begin_turn(scope, uuid.uuid4(), content=content, agent=WAITING_AGENT))
    with psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True) as connection:
        raw = statements_of(connection.pgconn, lambda: raw_starts_on(connection, content))
    return {"store (TurnStore.begin)": store, "raw": raw}


def raw_starts_on(connection: Any, content: str) -> None:
    from psycopg.types.json import Jsonb

    from agent_persistence.ids import uuid7

    pk, message_id, run_id = uuid.uuid4(), uuid.uuid4(), uuid7()
    data = Jsonb({"message_id": str(message_id), "run_id": str(run_id), "epoch": 1})
    parameters = [[pk], [pk, STARTS_TENANT, "bench-user", WAITING_AGENT], [pk, message_id, run_id, "bench"],
                  [uuid7(), pk, Jsonb(content)], [run_id, pk, message_id, WAITING_AGENT], [pk, data, run_id]]
    with connection.transaction():
        for sql, params in zip(raw_start_sql().split(";"), parameters):
            connection.execute(sql, params)


def run_starts(args: argparse.Namespace) -> int:
    """``turns --starts``: turn starts per second in one process, against the raw start transaction."""
    from asgiref.sync import sync_to_async

    from .report import format_facts, machine_facts
    from .trace import format_statements

    import psycopg

    began = time.monotonic()
    content = "Tell me a long story."
    with psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True) as connection:
        facts = machine_facts(connection)
    cleanup()
    statements = start_statements(content)
    cleanup()
    rounds: dict[str, list[float]] = {"store": [], "raw": []}
    outcomes: dict[str, int] = {}
    raw_starts(20, content)
    asyncio.run(store_starts(20, content))
    cleanup()
    for repeat in range(args.rounds):
        for kind in ("store", "raw") if repeat % 2 == 0 else ("raw", "store"):
            progress(f"  {args.starts} starts, {kind}, round {repeat + 1}/{args.rounds}")
            if kind == "raw":
                seconds = raw_starts(args.starts, content)
            else:
                seconds, round_outcomes = asyncio.run(store_starts(args.starts, content))
                for key, value in round_outcomes.items():
                    outcomes[key] = outcomes.get(key, 0) + value
            rounds[kind].append(args.starts / seconds)
            asyncio.run(sync_to_async(cleanup)())
    facts += [
        ("agent", "waits until abandoned (no chunk): the start is all that is measured; one process, one event loop"),
        ("rounds", f"{args.rounds} per side, {args.starts} starts each, new conversations, sides alternating"),
        ("took", f"{time.monotonic() - began:.0f} s"),
    ]
    print(format_facts(facts))
    print()
    store, raw = sorted(rounds["store"])[len(rounds["store"]) // 2], sorted(rounds["raw"])[len(rounds["raw"]) // 2]
    header = ("side", "figure", "starts/s (median)", "rounds")
    print(format_rows(header, [
        ("store", "start_turn (runtime.turns), one after another", number(store),
         ", ".join(number(rate) for rate in rounds["store"])),
        ("raw", "the start transaction's statements, psycopg", number(raw), ", ".join(number(rate) for rate in rounds["raw"])),
        ("store/raw", "", f"{store / raw:.2f}", ""),
    ]))
    print(f"\noutcomes of the store's turns (abandoned after each round): {outcomes}")
    print()
    print(format_statements("statements of one start in a new conversation", statements))
    return 0


# -- the run -------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--series", default="50,100,200,400,800,1000", help="turn counts N (default 50,...,1000)")
    parser.add_argument("--window", type=float, default=10.0, help="seconds measured once all N turns run (default 10)")
    parser.add_argument("--raw-window", type=float, default=5.0, help="seconds of raw psycopg ticks per N (default 5)")
    parser.add_argument("--starts", type=int, nargs="?", const=1000, default=None,
                        help="measure turn starts instead: this many per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side with --starts (default 3)")


def cleanup(tenant_prefix: str = TENANT_PREFIX) -> None:
    from agent_persistence.models import Conversation

    Conversation.objects.filter(tenant__startswith=tenant_prefix).delete()


def ms(samples: list[float], fraction: float) -> float:
    return percentile(samples, fraction) * 1000 if samples else float("nan")


async def measure(series: list[int], window: float, raw_window: float) -> list[tuple[StoreResult, RawResult]]:
    from asgiref.sync import sync_to_async

    poller = Poller()
    poller.start()
    results = []
    try:
        for n in series:
            progress(f"N={n}: starting turns")
            store = await store_side(n, window, poller)
            progress(
                f"  N={n}: max heartbeat age {store.steady.max_age:.2f} s (ramp {store.ramp.max_age:.2f} s), "
                f"dead polls {store.steady.dead_polls}+{store.ramp.dead_polls}, outcomes {store.outcomes}; raw ticks"
            )
            raw = await asyncio.to_thread(raw_side, store.pairs, store.answer_bytes, raw_window)
            await sync_to_async(cleanup)()
            results.append((store, raw))
    finally:
        poller.stopping.set()
        poller.join(timeout=5)
        poller.connection.close()
    return results


def run(args: argparse.Namespace) -> int:
    import psycopg

    from .report import format_facts, machine_facts

    started = time.monotonic()
    ensure_database(FULL_DATABASE)
    from django.conf import settings
    from django.test.utils import override_settings

    from agent_persistence.conf import app_settings

    agents = {AGENT_NAME: f"{__name__}.StreamingAgent", WAITING_AGENT: f"{__name__}.WaitingAgent"}
    override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, "AGENTS": agents}).enable()
    if args.starts:
        return run_starts(args)
    install_counter()
    cleanup()
    with psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True) as connection:
        facts = machine_facts(connection)
    intervals = (
        f"HEARTBEAT_INTERVAL {app_settings.HEARTBEAT_INTERVAL} s, DEAD_AFTER {app_settings.DEAD_AFTER} s, "
        f"RECORDING_FLUSH_INTERVAL {app_settings.RECORDING_FLUSH_INTERVAL} s, "
        f"CHECKPOINT_INTERVAL {app_settings.CHECKPOINT_INTERVAL} s"
    )
    series = [int(value) for value in args.series.split(",")]
    results = asyncio.run(measure(series, args.window, args.raw_window))
    facts += [
        ("intervals", intervals),
        ("agent", f"{CHUNK!r} every {CHUNK_EVERY * 1000:.0f} ms until abandoned; one process, one event loop"),
        ("windows", f"{args.window:.0f} s measured per N after all turns started; raw ticks {args.raw_window:.0f} s"),
        ("took", f"{time.monotonic() - started:.0f} s"),
    ]
    print(format_facts(facts))
    print()
    header = ("N", "figure", "ours", "raw", "ours/raw")
    rows: list[tuple[str, ...]] = []
    for store, raw in results:
        n = str(store.n)
        rows += [
            (n, "start ramp (s) / max heartbeat age during ramp (s)", number(store.ramp_seconds), number(store.ramp.max_age), ""),
            (n, "max heartbeat age, steady (s); false dead polls", number(store.steady.max_age),
             f"{store.steady.dead_polls + store.ramp.dead_polls} of {store.steady.polls + store.ramp.polls}", ""),
            (n, "write statements/s (raw: the same ticks)", number(store.writes_per_second), number(raw.writes_per_second),
             f"{store.writes_per_second / raw.writes_per_second:.2f}"),
            (n, "all statements/s (reads included)", number(store.statements_per_second), "", ""),
            (n, "heartbeat UPDATE ... RETURNING p50 (ms)", number(ms(store.heartbeat_latencies, 0.5)),
             number(ms(raw.heartbeat_latencies, 0.5)),
             f"{ms(store.heartbeat_latencies, 0.5) / ms(raw.heartbeat_latencies, 0.5):.2f}"),
            (n, "recording upsert p50 (ms)", number(ms(store.upsert_latencies, 0.5)), number(ms(raw.upsert_latencies, 0.5)),
             f"{ms(store.upsert_latencies, 0.5) / ms(raw.upsert_latencies, 0.5):.2f}"),
            (n, "recording upsert p99 (ms)", number(ms(store.upsert_latencies, 0.99)), number(ms(raw.upsert_latencies, 0.99)),
             f"{ms(store.upsert_latencies, 0.99) / ms(raw.upsert_latencies, 0.99):.2f}"),
        ]
    print(format_rows(header, rows))
    print()
    sustained = [store.n for store, _ in results if not store.false_dead and store.outcomes.get("abandoned") == store.n]
    print(f"largest N sustained with no false dead verdict: {max(sustained) if sustained else 'none'}")
    for store, _ in results:
        print(f"N={store.n}: answer {store.answer_bytes:,.0f} bytes at the end of the window; outcomes {store.outcomes}")
    return 0
