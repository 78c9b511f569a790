"""The cursor page benchmark: a page of 100 messages by cursor, uncounted and counted, store vs raw SQL.

On the storage benchmark's database (:mod:`benchmarks.storage`: a conversation
of 100,000 messages in a table of 1,000,000, seeded once and kept), the same
200 random cursors are read, each followed by a full page:

- ``ConversationStore.list_messages(after=cursor, limit=100)``, the default of a
  cursor read (no total: one statement), against the raw keyset page (one
  statement with the access check and the cursor as subqueries, 101 rows);
- the same with ``with_total=True`` against the four raw statements of a
  counted page (access check, cursor, ``count(*)``, page).

The four sides alternate, their order flipping every repeat; latencies are
percentiles over every read of every round.
"""

from __future__ import annotations

import argparse
import time
import uuid
from dataclasses import replace
from typing import Any, Callable

import psycopg

from . import raw
from .database import connect
from .measure import Rounds, time_each
from .report import Row, format_facts, format_table, machine_facts
from .seed import Seeded
from .storage import FULL, QUICK, READER, Sizes, latency_row, prepare_database, progress, random_cursors, setup_django

SIDES = ("store", "raw keyset", "store, with_total", "raw, counted")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="the storage benchmark's small database (100,000 rows)")
    parser.add_argument("--reseed", action="store_true", help="drop and seed the benchmark database again")
    parser.add_argument("--repeats", type=int, help="rounds per side (default 3, quick 2)")


def page_reader(side: str, connection: psycopg.Connection, seeded: Seeded, limit: int) -> Callable[[uuid.UUID], Any]:
    conversation_id = seeded.target_conversation_id
    from agent_persistence.stores import conversation_store

    store = conversation_store()

    def store_page(cursor: uuid.UUID) -> None:
        page = store.list_messages(READER, conversation_id, after=cursor, limit=limit)
        assert len(page.items) == limit and page.has_more and page.total is None

    def counted_store_page(cursor: uuid.UUID) -> None:
        page = store.list_messages(READER, conversation_id, after=cursor, limit=limit, with_total=True)
        assert len(page.items) == limit and page.total > limit

    def keyset_page(cursor: uuid.UUID) -> None:
        assert len(raw.read_page_keyset(connection, READER, conversation_id, cursor, limit)) == limit + 1

    def counted_page(cursor: uuid.UUID) -> None:
        total, rows = raw.read_page_counted(connection, READER, conversation_id, cursor, limit)
        assert len(rows) == limit and total > limit

    return {"store": store_page, "raw keyset": keyset_page, "store, with_total": counted_store_page, "raw, counted": counted_page}[side]


def measure(sizes: Sizes, seeded: Seeded, connection: psycopg.Connection) -> list[Row]:
    cursors = random_cursors(connection, seeded, sizes)
    readers = {side: page_reader(side, connection, seeded, sizes.page_size) for side in SIDES}
    for side in SIDES:
        time_each(readers[side], cursors[: sizes.warmup])
    results = {side: Rounds() for side in SIDES}
    for repeat in range(sizes.repeats):
        for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
            progress(f"  page reads, {side}, round {repeat + 1}/{sizes.repeats}")
            results[side].add(time_each(readers[side], cursors))
    where = f"{seeded.target_messages:,} in conversation, {seeded.message_rows:,} in table"
    uncounted = f"page of {sizes.page_size} by cursor, no total ({where}) vs raw keyset (1 statement each)"
    counted = "with_total=True vs the raw counted page (4 statements each)"
    return [
        latency_row(f"{uncounted} p50", results["store"], results["raw keyset"], 0.5),
        latency_row("   p99", results["store"], results["raw keyset"], 0.99),
        latency_row(f"{counted} p50", results["store, with_total"], results["raw, counted"], 0.5),
        latency_row("   p99", results["store, with_total"], results["raw, counted"], 0.99),
    ]


def run(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    if args.repeats:
        sizes = replace(sizes, repeats=args.repeats)
    started = time.perf_counter()
    setup_django(sizes.database)
    seeded = prepare_database(sizes, reseed=args.reseed)
    with connect(sizes.database, autocommit=True) as connection:
        facts = machine_facts(connection)
        progress("Measuring (the four sides alternate) ...")
        rows = measure(sizes, seeded, connection)
    facts += [
        ("seeded", f"{seeded.message_rows:,} messages, {seeded.target_messages:,} of them in the read conversation"),
        ("rounds", f"{sizes.repeats} per side, {sizes.page_reads} cursors each; latencies: percentiles of all reads"),
        ("took", f"{time.perf_counter() - started:.0f} s (seeding included when it ran)"),
    ]
    print(format_facts(facts))
    print()
    print(format_table(rows))
    print("\nstore/raw above 1: the store is slower.")
    return 0
