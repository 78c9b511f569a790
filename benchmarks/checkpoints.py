"""Checkpoint saves and loads: CheckpointStore beside langgraph-checkpoint-postgres's PostgresSaver.

For JSON blobs of 1 KB, 100 KB and 1 MB: ``CheckpointStore.save`` (fenced by
the epoch of a claimed turn) and ``CheckpointStore.load`` on one conversation,
against ``PostgresSaver.put`` (the same blob as a channel value) and
``PostgresSaver.get_tuple`` on one thread, on the same database. p50/p99 over
every call; store and langgraph take turns every call.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any, Callable

from agent_persistence.scope import Scope

from .database import FULL_DATABASE, conninfo_for
from .measure import percentile
from .report import Row, format_facts, format_value, machine_facts
from .runtime import ensure_database, format_rows, progress

SCOPE = Scope("bench-checkpoints", "bench-user")
SIZES = {"1 KB": 1_000, "100 KB": 100_000, "1 MB": 1_000_000}
THREAD_PREFIX = "bench-checkpoints-"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ops", type=int, default=100, help="saves and loads per size and side (default 100)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per size (default 2)")
    parser.add_argument("--prepare-threshold", type=int, default=None, metavar="N",
                        help="the store's connection prepares statements by name after N runs, as psycopg's "
                             "prepare_threshold (default: Django's, nothing prepared; langgraph's connection uses 0)")
    parser.add_argument("--paths", action="store_true",
                        help="instead: the save's statements on a raw connection, nothing prepared (the one "
                             "statement, the save function, a no-op commit) and a heartbeat stamp with and "
                             "without heartbeat_at indexed (calls: 5 x ops x rounds each)")


def blob(size: int) -> dict[str, Any]:
    """A JSON object of about ``size`` bytes: a transcript-like list of 1 KB items."""
    item = {"role": "assistant", "content": "x" * 940, "n": 0}
    count = max(1, size // 1000)
    return {"messages": [dict(item, n=index) for index in range(count)]}


def claimed_conversation() -> tuple[uuid.UUID, int, uuid.UUID]:
    from agent_persistence.stores import conversation_store, supervision_store

    conversation = conversation_store().create(SCOPE)
    message_id = uuid.uuid4()
    claim = supervision_store().claim(SCOPE, conversation.pk, message_id=message_id, replica="bench")
    return conversation.pk, claim.epoch, message_id


def timed(operation: Callable[[], Any], count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        operation()
        latencies.append(time.perf_counter() - started)
    return latencies


class Ours:
    def __init__(self) -> None:
        from agent_persistence.stores import checkpoint_store

        self.store = checkpoint_store()
        self.conversation_id, self.epoch, self.message_id = claimed_conversation()

    def save(self, state: dict[str, Any]) -> None:
        self.store.save(self.conversation_id, state, epoch=self.epoch, message_id=self.message_id)

    def load(self) -> dict[str, Any]:
        return self.store.load(self.conversation_id)


class LangGraph:
    def __init__(self, connection: Any) -> None:
        from langgraph.checkpoint.postgres import PostgresSaver

        self.saver = PostgresSaver(connection)
        self.saver.setup()
        self.config = {"configurable": {"thread_id": f"{THREAD_PREFIX}{uuid.uuid4()}", "checkpoint_ns": ""}}
        self.version: Any = None

    def save(self, state: dict[str, Any]) -> None:
        from langgraph.checkpoint.base import empty_checkpoint

        from agent_persistence.ids import uuid7

        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid7())  # rising, as langgraph's own uuid6 ids are
        self.version = self.saver.get_next_version(self.version, None)
        checkpoint["channel_values"] = {"state": state}
        checkpoint["channel_versions"] = {"state": self.version}
        self.config = self.saver.put(self.config, checkpoint, {"source": "loop", "step": 1}, {"state": self.version})

    def load(self) -> dict[str, Any]:
        config = {"configurable": {k: v for k, v in self.config["configurable"].items() if k != "checkpoint_id"}}
        found = self.saver.get_tuple(config)
        return found.checkpoint["channel_values"]["state"]


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    ensure_database(FULL_DATABASE)
    if args.paths:
        return run_paths(args, started)
    if args.prepare_threshold is not None:
        from django.db import connection

        connection.close()
        if getattr(connection, "pool", None) is not None:
            connection.close_pool()  # Django's pool keeps the options it was made with
        connection.settings_dict.setdefault("OPTIONS", {})["prepare_threshold"] = args.prepare_threshold
    import psycopg
    from psycopg.rows import dict_row

    facts_connection = psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True)
    facts = machine_facts(facts_connection)
    # What langgraph's own from_conn_string opens: autocommit, prepared statements off, dict rows.
    lg_connection = psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True, prepare_threshold=0, row_factory=dict_row)
    import importlib.metadata

    facts.append(("langgraph", f"langgraph-checkpoint-postgres {importlib.metadata.version('langgraph-checkpoint-postgres')}, "
                               f"langgraph-checkpoint {importlib.metadata.version('langgraph-checkpoint')}"))
    rows: list[Row] = []
    try:
        for label, size in SIZES.items():
            state = blob(size)
            ours, theirs = Ours(), LangGraph(lg_connection)
            # Warm-up (and check that each side gives back what it saved).
            for side in (ours, theirs):
                for _ in range(3):
                    side.save(state)
                if side.load() != state:
                    raise RuntimeError(f"{type(side).__name__} did not load back the {label} blob.")
            samples: dict[tuple[str, str], list[float]] = {}
            for repeat in range(args.rounds):
                progress(f"{label}: round {repeat + 1}")
                for operation in ("save", "load"):
                    # The sides take turns every operation (who goes first alternating), so a load swing on
                    # this shared machine falls on both alike instead of on one side's block of calls.
                    for index in range(args.ops):
                        order = (("ours", ours), ("theirs", theirs))
                        for name, side in order if index % 2 == 0 else order[::-1]:
                            call = (lambda: side.save(state)) if operation == "save" else side.load
                            samples.setdefault((name, operation), []).extend(timed(call, 1))
            for operation in ("save", "load"):
                for fraction, tag in ((0.5, "p50"), (0.99, "p99")):
                    rows.append(Row(
                        f"{operation} {label} JSON ({args.ops * args.rounds} ops) {tag}", "ms",
                        percentile(samples[("ours", operation)], fraction) * 1000,
                        percentile(samples[("theirs", operation)], fraction) * 1000,
                    ))
    finally:
        cleanup(lg_connection)
        lg_connection.close()
    from django.db import connection

    threshold = connection.connection.prepare_threshold  # the store's connection, as it ran
    facts.append(("prepared statements", f"the store's by name after {threshold} runs" if threshold is not None
                  else "the store's never (Django's default); langgraph's after 0 runs"))
    facts.append(("took", f"{time.monotonic() - started:.0f} s"))
    print(format_facts(facts))
    print()
    table = [(row.figure, row.unit, format_value(row.store), format_value(row.raw), f"{row.ratio:.2f}") for row in rows]
    print(format_rows(("figure", "unit", "ours", "langgraph", "ours/langgraph"), table))
    print()
    print("ratio = ours / langgraph PostgresSaver: above 1 ours is slower.")
    return 0


def cleanup(lg_connection: Any) -> None:
    cleanup_conversations()
    for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
        lg_connection.execute(f"DELETE FROM {table} WHERE thread_id LIKE %s", [THREAD_PREFIX + "%"])


#: The two copies of the supervision table of ``--paths``: the index of migration 0012, and the one it replaced.
STAMP_TABLES = {
    "heartbeat stamp, running rows indexed by conversation (HOT)": ("bench_stamp_hot", "conversation_id"),
    "heartbeat stamp, heartbeat_at indexed (before 0012)": ("bench_stamp_indexed", "heartbeat_at"),
}


def run_paths(args: argparse.Namespace, started: float) -> int:
    """Server-side cost of the save's paths, each call alternating in a shuffled order, one raw connection."""
    import datetime
    import json
    import random

    import psycopg

    from agent_persistence.stores.checkpoints import _CALL_SQL, _save_sql

    facts_connection = psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True)
    facts = machine_facts(facts_connection)
    facts_connection.close()
    raw = psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True, prepare_threshold=None)  # as Django's
    conversation_id, epoch, _ = claimed_conversation()
    text = json.dumps(blob(SIZES["1 KB"]))
    try:
        for table, column in STAMP_TABLES.values():
            raw.execute(f"DROP TABLE IF EXISTS {table}")
            raw.execute(f"CREATE TABLE {table} (LIKE agent_persistence_turnsupervision INCLUDING DEFAULTS)")
            raw.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (conversation_id)")
            raw.execute(f"CREATE INDEX ON {table} ({column}) WHERE status = 'running'")
            raw.execute(f"INSERT INTO {table} SELECT * FROM agent_persistence_turnsupervision WHERE conversation_id = %s",
                        [conversation_id])

        def now() -> datetime.datetime:
            return datetime.datetime.now(datetime.timezone.utc)

        calls: dict[str, tuple[str, Callable[[], list[Any]]]] = {
            "save, the one statement (without the function)": (_save_sql(), lambda: [
                "5000", now(), conversation_id, epoch, "running", conversation_id, text, len(text), None, epoch, now()]),
            "save, the function of migration 0011": (_CALL_SQL, lambda: [
                "5000", conversation_id, epoch, text, len(text), None, now()]),
            "a no-op single-row UPDATE (the commit alone)": (
                "UPDATE agent_persistence_turnsupervision SET replica = replica WHERE conversation_id = %s",
                lambda: [conversation_id]),
        }
        for label, (table, _) in STAMP_TABLES.items():
            calls[label] = (f"UPDATE {table} SET heartbeat_at = %s WHERE conversation_id = %s",
                            lambda: [now(), conversation_id])
        samples: dict[str, list[float]] = {label: [] for label in calls}
        order = list(calls.items())
        count = args.ops * args.rounds * 5
        progress(f"{count} calls of each, shuffled")
        for _ in range(count):
            random.shuffle(order)
            for label, (sql, params) in order:
                values = params()
                begun = time.perf_counter()
                raw.execute(sql, values)
                samples[label].append(time.perf_counter() - begun)
    finally:
        for table, _ in STAMP_TABLES.values():
            raw.execute(f"DROP TABLE IF EXISTS {table}")
        raw.close()
        cleanup_conversations()
    facts.append(("took", f"{time.monotonic() - started:.0f} s"))
    print(format_facts(facts))
    print()
    table_rows = [(label, "ms", format_value(percentile(values, 0.5) * 1000), format_value(percentile(values, 0.99) * 1000))
                  for label, values in samples.items()]
    print(format_rows(("statement (1 KB state, autocommit, nothing prepared)", "unit", "p50", "p99"), table_rows))
    return 0


def cleanup_conversations() -> None:
    from agent_persistence.models import Conversation

    Conversation.objects.filter(tenant=SCOPE.tenant).delete()
