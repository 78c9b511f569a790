"""Activity rows, metadata values and reconstruct-for-reload on PostgreSQL: p50/p99 per call.

``ActivityStore.save`` (a full overwrite) of 1, 10 and 100 rows, ``put`` of one
row fenced by a claimed turn's epoch, ``list``; ``MetadataStore.set`` / ``get``
of a 1 KB value; ``reconstruct`` of a conversation of 100 messages with 10
activity rows and a subagent. Figures to read, never asserted.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any, Callable

from agent_persistence.scope import Scope

from .database import FULL_DATABASE, conninfo_for
from .measure import percentile
from .report import format_facts, machine_facts
from .runtime import ensure_database, format_rows, progress

SCOPE = Scope("bench-activities", "bench-user")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ops", type=int, default=200, help="calls per figure (default 200)")


def timed(operation: Callable[[], Any], count: int) -> list[float]:
    operation()  # warm-up
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        operation()
        latencies.append(time.perf_counter() - started)
    return latencies


def rows_of(count: int) -> list[dict[str, Any]]:
    return [{"id": uuid.UUID(int=index + 1), "activity_type": "web_search", "content": {"query": "django", "found": index}}
            for index in range(count)]


def run(args: argparse.Namespace) -> int:
    ensure_database(FULL_DATABASE)
    import psycopg

    from agent_persistence.ids import uuid7
    from agent_persistence.stores import activity_store, conversation_store, metadata_store, run_store, supervision_store
    from agent_persistence.stores.reconstruct import reconstruct

    with psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True) as connection:
        facts = machine_facts(connection)
    activities, metadata, conversations = activity_store(), metadata_store(), conversation_store()
    conversation = conversations.create(SCOPE)
    samples: dict[str, list[float]] = {}
    try:
        for count in (1, 10, 100):
            progress(f"save {count}")
            rows = rows_of(count)
            samples[f"activities save ({count} rows)"] = timed(lambda: activities.save(SCOPE, conversation.pk, rows), args.ops)
        progress("put, list")
        claim = supervision_store().claim(SCOPE, conversation.pk, message_id=uuid.uuid4(), replica="bench")
        card = {"id": uuid.UUID(int=1), "activity_type": "web_search", "content": {"found": 1}}
        samples["activities put (fenced, one row of 100)"] = timed(
            lambda: activities.put(SCOPE, conversation.pk, card, epoch=claim.epoch), args.ops
        )
        samples["activities list (100 rows)"] = timed(lambda: activities.list(SCOPE, conversation.pk), args.ops)
        progress("metadata")
        value = {"summary": "x" * 1000}
        samples["metadata set (1 KB)"] = timed(lambda: metadata.set(SCOPE, "bench", "key", value), args.ops)
        samples["metadata get (1 KB)"] = timed(lambda: metadata.get(SCOPE, "bench", "key"), args.ops)
        progress("reconstruct")
        reloaded = conversations.create(SCOPE)
        turn = uuid7()
        parent = run_store().create_or_resume(SCOPE, reloaded.pk, id=uuid7(), message_id=turn)
        child = run_store().create_or_resume(SCOPE, reloaded.pk, id=uuid7(), message_id=turn, parent_id=parent.pk, name="sub")
        for index in range(98):
            conversations.append_message(SCOPE, reloaded.pk, role="user" if index % 2 == 0 else "assistant", content=f"m{index}")
        conversations.append_message(SCOPE, reloaded.pk, role="assistant", content="child", run_id=child.pk)
        conversations.append_message(SCOPE, reloaded.pk, id=turn, role="assistant", content="answer", run_id=parent.pk)
        # The subagent's own transcript, as turn.subagent writes it: a brief, a tool call and its result, its text.
        run_store().finish(SCOPE, child.pk, "completed", transcript=[
            {"role": "user", "content": "find it"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "search", "arguments": {"q": "x"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "search", "content": {"found": "x" * 200}},
            {"role": "assistant", "content": "child " * 50},
        ])
        activities.save(SCOPE, reloaded.pk, rows_of(10))
        samples["reconstruct (100 messages, 10 activities, 1 subagent with a 4-message transcript)"] = timed(
            lambda: reconstruct(SCOPE, reloaded.pk), max(20, args.ops // 4)
        )
    finally:
        for listed in conversations.list(SCOPE, limit=1000).items:
            conversations.delete(SCOPE, listed.pk)
        metadata.delete(SCOPE, "bench", "key")
    table = [(name, str(len(values)), f"{percentile(values, 0.5) * 1000:.2f}", f"{percentile(values, 0.99) * 1000:.2f}")
             for name, values in samples.items()]
    print(format_facts(facts))
    print()
    print(format_rows(("call", "calls", "p50 ms", "p99 ms"), table))
    return 0
