"""The storage benchmark: message appends, cursor page reads and event appends, store vs raw SQL.

Every figure is measured twice on the same PostgreSQL database with the same
rows: once through the store (``ConversationStore``, ``EventStore``) and once
with the equivalent hand-written psycopg statements (:mod:`benchmarks.raw`);
the table shows both and their ratio. Store and raw rounds alternate, and
their order flips every repeat, so drifting load on a shared machine falls on
both alike. Each write round checks what it wrote (positions 0..N-1, seqs
1..N) before its figure counts.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Callable

import psycopg

from agent_persistence.scope import Scope

from . import raw
from .appenders import EVENT_DATA, EVENT_TYPE, EVENTS, AppenderPool
from .database import (
    BENCH_DATABASE_ENV,
    FULL_DATABASE,
    QUICK_DATABASE,
    connect,
    create_database,
    database_exists,
    drop_database,
)
from .measure import Round, Rounds, time_each
from .report import Row, format_facts, format_table, machine_facts
from .seed import BENCH_TENANT, BENCH_USER, SeedPlan, Seeded, seed, seeded_as_planned
from .trace import django_pgconn, format_statements, statements_of

#: Reads the seeded conversation.
READER = Scope(BENCH_TENANT, BENCH_USER)
#: The write figures work in their own tenant, whose conversations are deleted after the run.
WRITER = Scope("bench-writes", BENCH_USER)
#: The store, the plain-statements raw baseline, and the one-statement raw baseline of the writes.
KINDS = ("store", "raw", "raw1")
MESSAGE_TEXT = "Here is what I found in the documents you shared. " * 4


@dataclass(frozen=True)
class Sizes:
    """How much work each figure does; FULL is the reported run, QUICK a smoke test of the harness."""

    database: str
    seed: SeedPlan
    message_appends: int
    page_reads: int
    event_appends_alone: int
    event_appends_each: int
    repeats: int
    page_size: int = 100
    concurrency: int = 8
    warmup: int = 20


FULL = Sizes(
    database=FULL_DATABASE,
    seed=SeedPlan(message_rows=1_000_000, target_messages=100_000),
    message_appends=2000,
    page_reads=200,
    event_appends_alone=2000,
    event_appends_each=250,
    repeats=3,
)
QUICK = Sizes(
    database=QUICK_DATABASE,
    seed=SeedPlan(message_rows=100_000, target_messages=10_000),
    message_appends=200,
    page_reads=50,
    event_appends_alone=200,
    event_appends_each=25,
    repeats=2,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a small smoke run (100,000 seeded rows, short rounds)")
    parser.add_argument("--reseed", action="store_true", help="drop and seed the benchmark database again")
    parser.add_argument("--drop", action="store_true", help="drop the benchmark database when done")
    parser.add_argument("--repeats", type=int, help="rounds per measurement (default 3, quick 2)")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the database ------------------------------------------------------------------------------


def setup_django(database: str) -> None:
    os.environ[BENCH_DATABASE_ENV] = database
    # Ours, whatever the shell says: the benchmark must never run against another project's database.
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django

    django.setup()


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def close_django_connections() -> None:
    from django.db import connections

    connections.close_all()


def prepare_database(sizes: Sizes, *, reseed: bool) -> Seeded:
    """The seeded benchmark database: reused when already seeded with this plan, else made afresh."""
    if database_exists(sizes.database) and not reseed:
        seeded = seeded_as_planned(sizes.database, sizes.seed)
        if seeded is not None:
            progress(f"Reusing {sizes.database} (seeded in {seeded.seconds:.0f} s; --reseed seeds it again).")
            migrate()
            return seeded
    progress(f"Creating {sizes.database} and seeding {sizes.seed.message_rows:,} messages ...")
    close_django_connections()
    drop_database(sizes.database)
    create_database(sizes.database)
    migrate()
    seeded = seed(sizes.database, sizes.seed)
    progress(f"Seeded in {seeded.seconds:.0f} s.")
    return seeded


def remove_written_rows(connection: psycopg.Connection) -> None:
    """Delete what the write figures wrote, so the seeded tables keep their planned size."""
    written = "SELECT id FROM agent_persistence_conversation WHERE tenant = %s"
    with connection.transaction():
        for table in ("agent_persistence_event", "agent_persistence_message"):
            connection.execute(f"DELETE FROM {table} WHERE conversation_id IN ({written})", [WRITER.tenant])
        connection.execute("DELETE FROM agent_persistence_conversation WHERE tenant = %s", [WRITER.tenant])


def new_conversation() -> uuid.UUID:
    from agent_persistence.stores import conversation_store

    return conversation_store().create(WRITER, agent="bench").id


def check_positions(connection: psycopg.Connection, conversation_id: uuid.UUID, expected: int) -> None:
    """The appends of a round left positions 0..expected-1, each once, and a matching counter."""
    found = connection.execute(
        "SELECT count(*), count(DISTINCT position), max(position), "
        "(SELECT next_position FROM agent_persistence_conversation WHERE id = %s) "
        "FROM agent_persistence_message WHERE conversation_id = %s",
        [conversation_id, conversation_id],
    ).fetchone()
    if found != (expected, expected, expected - 1, expected):
        raise AssertionError(f"Positions wrong: (count, distinct, max, counter) = {found}, {expected} appended.")


def check_seqs(connection: psycopg.Connection, conversation_id: uuid.UUID, expected: int) -> None:
    """The appends of a round left seqs 1..expected, each once, and a matching counter."""
    found = connection.execute(
        "SELECT count(*), count(DISTINCT seq), min(seq), max(seq), "
        "(SELECT last_event_seq FROM agent_persistence_conversation WHERE id = %s) "
        "FROM agent_persistence_event WHERE conversation_id = %s",
        [conversation_id, conversation_id],
    ).fetchone()
    if found != (expected, expected, 1, expected, expected):
        raise AssertionError(f"Seqs wrong: (count, distinct, min, max, counter) = {found}, {expected} appended.")


def alternating(repeat: int, kinds: tuple[str, ...] = KINDS) -> tuple[str, ...]:
    return kinds if repeat % 2 == 0 else kinds[::-1]


def milliseconds(seconds: float) -> float:
    return seconds * 1000


def latency_row(label: str, store: Rounds, baseline: Rounds, fraction: float) -> Row:
    return Row(label, "ms", milliseconds(store.latency(fraction)), milliseconds(baseline.latency(fraction)))


def latency_rows(store: Rounds, baseline: Rounds) -> list[Row]:
    return [
        latency_row("   p50 latency per append", store, baseline, 0.5),
        latency_row("   p99 latency per append", store, baseline, 0.99),
    ]


ONE_STATEMENT = "   vs one-statement raw (1 round trip, 1 commit):"


def write_rows(label: str, unit: str, results: dict[str, Rounds]) -> list[Row]:
    """A write figure against both raw baselines: the plain statements, then the one statement."""
    store, plain, one = results["store"], results["raw"], results["raw1"]
    return (
        [Row(label, unit, store.median_rate, plain.median_rate)]
        + latency_rows(store, plain)
        + [
            Row(f"{ONE_STATEMENT} {unit}", unit, store.median_rate, one.median_rate),
            latency_row(f"{ONE_STATEMENT} p50", store, one, 0.5),
            latency_row(f"{ONE_STATEMENT} p99", store, one, 0.99),
        ]
    )


# -- figure 1: message appends -----------------------------------------------------------------


def message_appender(kind: str, connection: psycopg.Connection, conversation_id: uuid.UUID) -> Callable[[int], Any]:
    if kind == "store":
        from agent_persistence.stores import conversation_store

        store = conversation_store()

        def append_through_store(index: int) -> None:
            store.append_message(WRITER, conversation_id, role=role_of(index), content=message_content(index))

        return append_through_store

    if kind == "raw1":

        def append_one_statement(index: int) -> None:
            raw.append_message_one_statement(
                connection, WRITER, conversation_id, role=role_of(index), content=message_content(index)
            )

        return append_one_statement

    def append_raw(index: int) -> None:
        raw.append_message(connection, WRITER, conversation_id, role=role_of(index), content=message_content(index))

    return append_raw


def role_of(index: int) -> str:
    return "user" if index % 2 == 0 else "assistant"


def message_content(index: int) -> str:
    return f"{index}: {MESSAGE_TEXT}"


def message_append_round(kind: str, connection: psycopg.Connection, appends: int) -> Round:
    conversation_id = new_conversation()
    round_ = time_each(message_appender(kind, connection, conversation_id), range(appends))
    check_positions(connection, conversation_id, appends)
    return round_


def bench_message_appends(sizes: Sizes, connection: psycopg.Connection) -> list[Row]:
    for kind in KINDS:
        message_append_round(kind, connection, sizes.warmup)
    results = {kind: Rounds() for kind in KINDS}
    for repeat in range(sizes.repeats):
        for kind in alternating(repeat):
            progress(f"  message appends, {kind}, round {repeat + 1}/{sizes.repeats}")
            results[kind].add(message_append_round(kind, connection, sizes.message_appends))
    label = f"1. message append ({sizes.message_appends:,} sequential, 1 conversation)"
    return write_rows(label, "appends/s", results)


# -- figure 2: cursor page reads ---------------------------------------------------------------


def random_cursors(connection: psycopg.Connection, seeded: Seeded, sizes: Sizes) -> list[uuid.UUID]:
    """Ids of messages at random positions of the read conversation, each followed by a full page."""
    chooser = random.Random(20240601)
    positions = [chooser.randrange(seeded.target_messages - sizes.page_size) for _ in range(sizes.page_reads)]
    id_at = dict(
        connection.execute(
            "SELECT position, id FROM agent_persistence_message WHERE conversation_id = %s AND position = ANY(%s)",
            [seeded.target_conversation_id, positions],
        ).fetchall()
    )
    return [id_at[position] for position in positions]


def page_reader(kind: str, connection: psycopg.Connection, seeded: Seeded, limit: int) -> Callable[[uuid.UUID], Any]:
    conversation_id = seeded.target_conversation_id
    if kind == "store":
        from agent_persistence.stores import conversation_store

        store = conversation_store()

        def read_through_store(cursor: uuid.UUID) -> None:
            # Counted, as the raw side is: the uncounted default is measured by `benchmarks pages`.
            page = store.list_messages(READER, conversation_id, after=cursor, limit=limit, with_total=True)
            assert len(page.items) == limit and page.has_more

        return read_through_store
    if kind == "raw":

        def read_counted(cursor: uuid.UUID) -> None:
            total, rows = raw.read_page_counted(connection, READER, conversation_id, cursor, limit)
            assert len(rows) == limit and total > limit

        return read_counted

    def read_keyset(cursor: uuid.UUID) -> None:
        assert len(raw.read_page_keyset(connection, READER, conversation_id, cursor, limit)) == limit + 1

    return read_keyset


def bench_page_reads(sizes: Sizes, seeded: Seeded, connection: psycopg.Connection) -> list[Row]:
    cursors = random_cursors(connection, seeded, sizes)
    kinds = ("store", "raw", "keyset")
    readers = {kind: page_reader(kind, connection, seeded, sizes.page_size) for kind in kinds}
    for kind in kinds:
        time_each(readers[kind], cursors[: sizes.warmup])
    results = {kind: Rounds() for kind in kinds}
    for repeat in range(sizes.repeats):
        for kind in alternating(repeat, ("store", "raw")) + ("keyset",):
            progress(f"  page reads, {kind}, round {repeat + 1}/{sizes.repeats}")
            results[kind].add(time_each(readers[kind], cursors))
    store, counted, keyset = results["store"], results["raw"], results["keyset"]
    label = (
        f"2. page of {sizes.page_size} by cursor ({seeded.target_messages:,} in conversation, "
        f"{seeded.message_rows:,} in table)"
    )
    keyset_label = "   vs raw keyset page, no total (1 statement):"
    return [
        latency_row(f"{label} p50", store, counted, 0.5),
        latency_row("   p99", store, counted, 0.99),
        latency_row(f"{keyset_label} p50", store, keyset, 0.5),
        latency_row(f"{keyset_label} p99", store, keyset, 0.99),
    ]


# -- figure 3: event appends -------------------------------------------------------------------


def event_append_round(kind: str, pool: AppenderPool, connection: psycopg.Connection, appends_each: int) -> Round:
    conversation_id = new_conversation()
    round_ = pool.run(kind, WRITER, conversation_id, appends_each)
    check_seqs(connection, conversation_id, appends_each * pool.size)
    return round_


def event_rounds(sizes: Sizes, connection: psycopg.Connection, appenders: int, appends_each: int) -> dict[str, Rounds]:
    progress(f"  starting {appenders} appender process(es)")
    results = {kind: Rounds() for kind in KINDS}
    with AppenderPool(appenders) as pool:
        for kind in KINDS:
            event_append_round(kind, pool, connection, max(1, sizes.warmup // appenders))
        for repeat in range(sizes.repeats):
            for kind in alternating(repeat):
                progress(f"  event appends, {appenders} appender(s), {kind}, round {repeat + 1}/{sizes.repeats}")
                results[kind].add(event_append_round(kind, pool, connection, appends_each))
    return results


def bench_event_appends(sizes: Sizes, connection: psycopg.Connection) -> list[Row]:
    rows: list[Row] = []
    for appenders, appends_each, who in (
        (1, sizes.event_appends_alone, "1 appender"),
        (sizes.concurrency, sizes.event_appends_each, f"{sizes.concurrency} appender processes"),
    ):
        results = event_rounds(sizes, connection, appenders, appends_each)
        label = f"3. event append, {who} ({appenders * appends_each:,} events, 1 per call)"
        rows += write_rows(label, "events/s", results)
    return rows


# -- the statements of each side -----------------------------------------------------------------


def append_statements(sizes: Sizes) -> str:
    """The statements of one message append and one event append, store and raw, from libpq's trace.

    The raw side runs on a fresh connection, so its statements are parsed
    (and shown) rather than already prepared.
    """
    from agent_persistence.stores import conversation_store, event_store

    conversation_id = new_conversation()
    with connect(sizes.database, autocommit=True) as fresh:
        messages = {
            "store": statements_of(django_pgconn(), lambda: conversation_store().append_message(
                WRITER, conversation_id, role="user", content=message_content(0))),
            "raw": statements_of(fresh.pgconn, lambda: raw.append_message(
                fresh, WRITER, conversation_id, role="user", content=message_content(1))),
            "raw, one statement": statements_of(fresh.pgconn, lambda: raw.append_message_one_statement(
                fresh, WRITER, conversation_id, role="user", content=message_content(2))),
        }
        events = {
            "store": statements_of(django_pgconn(), lambda: event_store().append(WRITER, conversation_id, EVENTS)),
            "raw": statements_of(fresh.pgconn, lambda: raw.append_event(
                fresh, WRITER, conversation_id, type=EVENT_TYPE, data=EVENT_DATA)),
            "raw, one statement": statements_of(fresh.pgconn, lambda: raw.append_event_one_statement(
                fresh, WRITER, conversation_id, type=EVENT_TYPE, data=EVENT_DATA)),
        }
    return "\n\n".join([
        format_statements("statements of one message append (figure 1)", messages),
        format_statements("statements of one event append (figure 3)", events),
    ])


# -- the command -------------------------------------------------------------------------------


def measure(sizes: Sizes, seeded: Seeded, connection: psycopg.Connection) -> tuple[list[Row], str]:
    remove_written_rows(connection)
    try:
        progress("Measuring (store and raw rounds alternate) ...")
        rows = (
            bench_message_appends(sizes, connection)
            + bench_page_reads(sizes, seeded, connection)
            + bench_event_appends(sizes, connection)
        )
        return rows, append_statements(sizes)
    finally:
        remove_written_rows(connection)


def run(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    if args.repeats:
        sizes = replace(sizes, repeats=args.repeats)
    started = time.perf_counter()
    setup_django(sizes.database)
    seeded = prepare_database(sizes, reseed=args.reseed)
    with connect(sizes.database, autocommit=True) as connection:
        facts = machine_facts(connection)
        rows, statements = measure(sizes, seeded, connection)
    facts += [
        ("seeded", f"{seeded.message_rows:,} messages, {seeded.target_messages:,} of them in the read conversation"),
        ("rounds", f"{sizes.repeats} per figure; rates: median of rounds; latencies: percentiles of all calls"),
        ("took", f"{time.perf_counter() - started:.0f} s (seeding included when it ran)"),
    ]
    print(format_facts(facts))
    print()
    print(format_table(rows))
    print("\nstore/raw: below 1 the store is slower for rates (per second), above 1 slower for latencies (ms).")
    print()
    print(statements)
    if args.drop:
        close_django_connections()
        drop_database(sizes.database)
        progress(f"Dropped {sizes.database}.")
    return 0
