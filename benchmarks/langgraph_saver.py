"""LangGraph checkpointer put/get: DjangoCheckpointSaver beside langgraph-checkpoint-postgres's PostgresSaver.

For channel values of 1 KB, 100 KB and 1 MB: ``put`` (a new checkpoint, the
value as its one channel at a new version) and ``get_tuple`` (the thread's
latest) of ``agent_persistence.integrations.langgraph_store.DjangoCheckpointSaver``
against ``PostgresSaver`` on the same database in the same run. Ours is
measured twice: unbound (the same job as PostgresSaver's) and bound to a
claimed turn (each put is fenced by the epoch and saves the turn's checkpoint
in the same transaction, as inside a durable turn). p50/p99 over every call;
sides alternate per round.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

from .checkpoints import LangGraph, blob, claimed_conversation, timed
from .database import FULL_DATABASE, conninfo_for
from .measure import percentile
from .report import Row, format_facts, format_value, machine_facts
from .runtime import ensure_database, format_rows, progress

SIZES = {"1 KB": 1_000, "100 KB": 100_000, "1 MB": 1_000_000}
THREAD_PREFIX = "bench-langgraph-saver-"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ops", type=int, default=100, help="puts and gets per size and side (default 100)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per size (default 2)")


class Ours:
    """DjangoCheckpointSaver on one thread; ``bound``: fenced by a claimed turn's epoch."""

    def __init__(self, bound: bool) -> None:
        from agent_persistence.integrations.langgraph_store import DjangoCheckpointSaver

        self.saver = DjangoCheckpointSaver()
        thread_id = f"{THREAD_PREFIX}{uuid.uuid4()}"
        if bound:
            conversation_id, epoch, message_id = claimed_conversation()
            thread_id = str(conversation_id)
            snapshot = {"message_id": str(message_id), "agent": {"langgraph": {"streamed": {"agent#0": 120}}},
                        "text": "x" * 120, "tool_calls": [], "tool_results": {}}
            self.saver.conversation_id, self.saver.epoch, self.saver.message_id = conversation_id, epoch, message_id
            self.saver.turn_snapshot = lambda: snapshot
        self.thread_id = thread_id
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        self.version: Any = None

    def save(self, state: dict[str, Any]) -> None:
        from langgraph.checkpoint.base import empty_checkpoint

        from agent_persistence.ids import uuid7

        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid7())
        self.version = self.saver.get_next_version(self.version, None)
        checkpoint["channel_values"] = {"state": state}
        checkpoint["channel_versions"] = {"state": self.version}
        self.config = self.saver.put(self.config, checkpoint, {"source": "loop", "step": 1}, {"state": self.version})

    def load(self) -> dict[str, Any]:
        found = self.saver.get_tuple({"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ""}})
        return found.checkpoint["channel_values"]["state"]


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    ensure_database(FULL_DATABASE)
    import importlib.metadata

    import psycopg
    from psycopg.rows import dict_row

    facts_connection = psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True)
    facts = machine_facts(facts_connection)
    lg_connection = psycopg.connect(conninfo_for(FULL_DATABASE), autocommit=True, prepare_threshold=0, row_factory=dict_row)
    facts.append(("langgraph", f"langgraph-checkpoint-postgres {importlib.metadata.version('langgraph-checkpoint-postgres')}, "
                               f"langgraph-checkpoint {importlib.metadata.version('langgraph-checkpoint')}"))
    rows: list[Row] = []
    bound_rows: list[tuple[str, str, str]] = []
    try:
        for label, size in SIZES.items():
            state = blob(size)
            sides = {"ours": Ours(bound=False), "bound": Ours(bound=True), "theirs": LangGraph(lg_connection)}
            for name, side in sides.items():  # warm-up, and each side gives back what it saved
                for _ in range(3):
                    side.save(state)
                if side.load() != state:
                    raise RuntimeError(f"{name} did not load back the {label} value.")
            samples: dict[tuple[str, str], list[float]] = {}
            order = list(sides.items())
            for repeat in range(args.rounds):
                for name, side in order if repeat % 2 == 0 else order[::-1]:
                    progress(f"{label}: {name} round {repeat + 1}")
                    samples.setdefault((name, "put"), []).extend(timed(lambda: side.save(state), args.ops))
                    samples.setdefault((name, "get"), []).extend(timed(side.load, args.ops))
            for operation in ("put", "get"):
                for fraction, tag in ((0.5, "p50"), (0.99, "p99")):
                    figure = f"{operation} {label} ({args.ops * args.rounds} ops) {tag}"
                    rows.append(Row(figure, "ms", percentile(samples[("ours", operation)], fraction) * 1000,
                                    percentile(samples[("theirs", operation)], fraction) * 1000))
                    bound_rows.append((figure, "ms", format_value(percentile(samples[("bound", operation)], fraction) * 1000)))
    finally:
        cleanup(lg_connection)
        lg_connection.close()
        facts_connection.close()
    facts.append(("took", f"{time.monotonic() - started:.0f} s"))
    print(format_facts(facts))
    print()
    table = [
        (row.figure, row.unit, format_value(row.store), bound[2], format_value(row.raw), f"{row.ratio:.2f}")
        for row, bound in zip(rows, bound_rows)
    ]
    print(format_rows(("figure", "unit", "ours", "ours in a turn", "PostgresSaver", "ours/PostgresSaver"), table))
    print()
    print("ratio = ours (unbound) / PostgresSaver: above 1 ours is slower. 'in a turn': fenced, with the turn checkpoint.")
    return 0


def cleanup(lg_connection: Any) -> None:
    from agent_persistence.models import Conversation, GraphBlob, GraphCheckpoint, GraphWrite

    from .checkpoints import SCOPE

    for model in (GraphWrite, GraphBlob, GraphCheckpoint):
        model.objects.filter(thread_id__startswith=THREAD_PREFIX).delete()
    Conversation.objects.filter(tenant=SCOPE.tenant).delete()  # the bound sides' threads go with them
    for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
        lg_connection.execute(f"DELETE FROM {table} WHERE thread_id LIKE %s", ["bench-checkpoints-%"])
