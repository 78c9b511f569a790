"""The whole-thread save benchmark: ``replace_messages`` and ``merge_messages`` against appends, by thread size.

On its own PostgreSQL database (``agent_persistence_bench_transcripts``,
created and migrated here; dropped with ``--drop``), through the conversation
store, one call at a time, for threads of each ``--sizes`` messages:

- first save: ``replace_messages`` of a whole new thread into an empty conversation;
- unchanged save: ``replace_messages`` of the stored thread as it is (every row compared, none written);
- new turn: ``merge_messages`` of two id-less messages (the stored thread stays; two inserts);
- reload: ``merge_messages`` of the last user message (by id) and a new answer: a cutoff drops the old answer;
- two appends: ``append_message`` twice, the same new turn written the per-message way.

Each figure is the median of ``--repeats`` calls, in milliseconds, and counts
the whole call: cleaning the input, the transaction and reading back the saved
transcript the call returns (what dominates for long threads). Every save is
checked (positions 0 .. n - 1) before its figure counts. Figures are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from typing import Any, Callable

import psycopg
from psycopg import sql

from .database import BENCH_DATABASE_ENV, server_url

#: This benchmark's own database.
TRANSCRIPTS_DATABASE = "agent_persistence_bench_transcripts"
MESSAGE_TEXT = "Here is what I found in the documents you shared. " * 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000], help="thread sizes (default 100 1000)")
    parser.add_argument("--repeats", type=int, default=7, help="calls per figure (default 7)")
    parser.add_argument("--drop", action="store_true", help="drop the benchmark database when done")


def maintenance() -> psycopg.Connection:
    return psycopg.connect(server_url(), autocommit=True)


def recreate_database() -> None:
    with maintenance() as connection:
        name = sql.Identifier(TRANSCRIPTS_DATABASE)
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        connection.execute(sql.SQL("CREATE DATABASE {}").format(name))


def drop_database() -> None:
    with maintenance() as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TRANSCRIPTS_DATABASE))
        )


def setup_django() -> None:
    os.environ[BENCH_DATABASE_ENV] = TRANSCRIPTS_DATABASE
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def new_thread(size: int) -> list[dict[str, Any]]:
    roles = ("user", "assistant")
    return [{"id": str(uuid.uuid4()), "role": roles[n % 2], "content": f"{n}. {MESSAGE_TEXT}"} for n in range(size)]


def checked(saved: list[Any]) -> list[Any]:
    positions = [message.position for message in saved]
    if positions != list(range(len(saved))):
        raise AssertionError(f"positions are not 0 .. n - 1: {positions[:10]} ...")
    return saved


def median_ms(call: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def figures_for(size: int, repeats: int) -> list[tuple[str, float]]:
    from agent_persistence.scope import Scope
    from agent_persistence.stores import conversation_store

    store, scope = conversation_store(), Scope("bench-transcripts", "bench")
    turn = [{"role": "user", "content": "And the next one?"}, {"role": "assistant", "content": MESSAGE_TEXT}]
    stored = store.create(scope, agent="bench")
    thread = new_thread(size)
    checked(store.replace_messages(scope, stored.id, thread))

    def reload() -> None:
        last_user = store.list_messages(scope, stored.id, order="desc", limit=2).items[1]
        again = {"id": last_user.id, "role": "user", "content": last_user.content}
        checked(store.merge_messages(scope, stored.id, [again, turn[1]]))

    def two_appends() -> None:
        for message in turn:
            store.append_message(scope, stored.id, **message)

    def first_save() -> None:
        checked(store.replace_messages(scope, store.create(scope).id, new_thread(size)))

    return [
        ("first save", median_ms(first_save, repeats)),
        ("unchanged save", median_ms(lambda: checked(store.replace_messages(scope, stored.id, thread)), repeats)),
        ("new turn (merge)", median_ms(lambda: checked(store.merge_messages(scope, stored.id, turn)), repeats)),
        ("reload (merge, cutoff)", median_ms(reload, repeats)),
        ("two appends", median_ms(two_appends, repeats)),
    ]


def run(args: argparse.Namespace) -> int:
    recreate_database()
    setup_django()
    try:
        rows = [(size, figure, value) for size in args.sizes for figure, value in figures_for(size, args.repeats)]
        print(f"| thread | figure | ms (median of {args.repeats}) |")
        print("|---:|---|---:|")
        for size, figure, value in rows:
            print(f"| {size} | {figure} | {value:.1f} |")
    finally:
        from django.db import connections

        connections.close_all()
        if args.drop:
            drop_database()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
