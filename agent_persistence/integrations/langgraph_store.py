"""A LangGraph checkpointer on the Django ORM: ``DjangoCheckpointSaver`` (sync and async).

Works on any database Django supports (tested on SQLite and PostgreSQL) with
the rows of :mod:`agent_persistence.models.langgraph`::

    from agent_persistence.integrations.langgraph_store import DjangoCheckpointSaver
    graph = builder.compile(checkpointer=DjangoCheckpointSaver())
    graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})

Inside a durable turn, :meth:`DjangoCheckpointSaver.for_turn` binds the saver
to the turn: the thread is the conversation, every write is fenced by the
turn's epoch (a producer that lost the conversation writes nothing, ``Fenced``)
and saves the turn's own checkpoint in the same transaction, so the text the
answer holds and the graph's progress can never disagree after a crash.

Semantics follow LangGraph's savers: ``put`` upserts a checkpoint and stores
each new channel version once; ``put_writes`` keeps the first write of a
(task, index) and replaces special writes (errors, interrupts); ``list``
returns newest first with ``filter`` (metadata equality), ``before`` and
``limit``; ``delete_thread`` removes a thread's checkpoints, blobs and writes;
``prune`` keeps each namespace's latest checkpoint (as LangGraph's
``PostgresSaver`` does), ``copy_thread`` copies a thread to an empty one and
``delete_for_runs`` deletes the checkpoints of given runs. LangGraph's
conformance suite (``langgraph-checkpoint-conformance``) passes, base and
extended capabilities, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import random
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..exceptions import Validation
from ..models import GraphBlob, GraphCheckpoint, GraphWrite
from ..stores.base import execute_bound
from .base import turn_epoch

if TYPE_CHECKING:
    from ..runtime.turn import Turn

def _bytes(value: Any) -> bytes:
    return b"" if value is None else bytes(value)


#: Where a sync call made from a thread running an event loop does its database work (Django refuses it there).
_LOOP_OFFLOAD = ThreadPoolExecutor(max_workers=4, thread_name_prefix="langgraph-saver")


def _in_running_loop() -> bool:
    """Whether this thread runs an event loop, where Django refuses sync database access."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return not os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")


def _call_releasing(method: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    try:
        return method(*args, **kwargs)
    finally:
        if threading.current_thread() is not threading.main_thread():
            for worker_connection in connections.all(initialized_only=True):
                if not worker_connection.in_atomic_block:
                    worker_connection.close()


def _releases_worker_connection(method: Callable[..., Any]) -> Callable[..., Any]:
    """A sync method callable from any thread, an event loop's included.

    LangGraph's sync API calls savers from its own short-lived executor threads;
    a connection Django opened there would outlive the thread, so it is closed
    after the call (the main thread and an open transaction keep theirs; the
    async twins call the unwrapped methods in Django's sync thread). Called from
    a thread that runs an event loop (``graph.invoke()`` inside ``async def``),
    where Django raises ``SynchronousOnlyOperation``, the call runs in a worker
    thread and the caller waits for it, as with LangGraph's own sync savers.
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _in_running_loop():
            return _LOOP_OFFLOAD.submit(_call_releasing, method, args, kwargs).result()
        return _call_releasing(method, args, kwargs)

    return wrapper


INT64 = range(-(2**63), 2**63)


def _filter_by_metadata(rows: QuerySet[Any], key: str, value: Any) -> QuerySet[Any]:
    """Narrow ``rows`` to those whose metadata may have ``key`` equal to ``value``, the key as data.

    Never an ORM lookup (``metadata__<key>`` reads ``__`` as a lookup and a
    number as an array index): a bound parameter compared with the stored
    object's own keys. The narrowing is loose where Python's ``==`` is (``1`` is
    ``True``, ``5`` is ``5.0``); the caller checks every row exactly.
    """
    vendor = connection.vendor
    if vendor not in ("postgresql", "sqlite"):
        return rows  # checked in Python only
    column = f"{connection.ops.quote_name(GraphCheckpoint._meta.db_table)}.{connection.ops.quote_name('metadata')}"
    if value is None:
        return rows  # a missing key matches None too (as LangGraph's in-memory saver)
    if vendor == "postgresql" and ("\x00" in key or (isinstance(value, str) and "\x00" in value)):
        return rows.none()  # jsonb holds no NUL: nothing stored can match (and the driver refuses the parameter)
    if isinstance(value, str):
        candidates: list[Any] | None = [value]
    elif isinstance(value, (bool, int, float)) and not (isinstance(value, float) and not math.isfinite(value)):
        if isinstance(value, int) and not isinstance(value, bool) and value not in INT64:
            candidates = None  # beyond the drivers' integers: the key's presence only
        else:
            candidates = [value if not isinstance(value, bool) else int(value)]
    else:
        candidates = None  # a list, an object: the key's presence only
    if vendor == "postgresql":
        if candidates is None:
            sql, params = f"jsonb_exists({column}, %s::text)", [key]
        elif isinstance(value, str):
            sql, params = f"({column} -> %s::text) = %s::jsonb", [key, json.dumps(value)]
        else:
            # A number or a bool, equal in Python to 1 and True alike: the number or its bool.
            texts = [json.dumps(candidates[0])]
            if candidates[0] in (0, 1):
                texts.append("true" if candidates[0] == 1 else "false")
            sql = f"({column} -> %s::text) IN ({', '.join(['%s::jsonb'] * len(texts))})"
            params = [key, *texts]
    else:
        exists = f"EXISTS (SELECT 1 FROM json_each({column}) AS entry WHERE entry.key = %s"
        if candidates is None:
            sql, params = exists + ")", [key]
        elif isinstance(value, str):
            sql, params = exists + " AND entry.type = 'text' AND entry.atom = %s)", [key, value]
        else:
            number = candidates[0]
            sql = exists + (" AND ((entry.type IN ('integer', 'real') AND entry.atom = %s)"
                            " OR (entry.type = 'true' AND %s = 1) OR (entry.type = 'false' AND %s = 0)))")
            params = [key, number, number, number]
    return rows.filter(RawSQL(sql, params, output_field=BooleanField()))


CHECKPOINT_UPDATE_FIELDS = ["parent_checkpoint_id", "checkpoint_type", "checkpoint", "metadata", "epoch", "message_id"]
BLOB_COLUMNS = ["thread_id", "checkpoint_ns", "channel", "version", "value_type", "value", "conversation_id"]
CHECKPOINT_COLUMNS = [
    "thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "checkpoint_type", "checkpoint", "metadata",
    "conversation_id", "epoch", "message_id", "created_at",
]


def _insert_in_one_statement(blobs: list[GraphBlob], row: GraphCheckpoint) -> None:
    """PostgreSQL: the new channel blobs and the checkpoint in one statement (a data-modifying CTE).

    The same writes as the two ``bulk_create`` calls of the portable path, in one round trip.
    """
    params: list[Any] = []
    sql = ""
    if blobs:
        rows = ", ".join(["(" + ", ".join(["%s"] * len(BLOB_COLUMNS)) + ")"] * len(blobs))
        sql = (
            f"WITH new_blobs AS (INSERT INTO {GraphBlob._meta.db_table} ({', '.join(BLOB_COLUMNS)}) VALUES {rows} "
            "ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING) "
        )
        for blob in blobs:
            params += [getattr(blob, column) for column in BLOB_COLUMNS]
    placeholders = ", ".join("%s::jsonb" if column == "metadata" else "%s" for column in CHECKPOINT_COLUMNS)
    updates = ", ".join(f"{field} = EXCLUDED.{field}" for field in CHECKPOINT_UPDATE_FIELDS)
    sql += (
        f"INSERT INTO {GraphCheckpoint._meta.db_table} ({', '.join(CHECKPOINT_COLUMNS)}) VALUES ({placeholders}) "
        f"ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET {updates}"
    )
    params += [json.dumps(row.metadata) if column == "metadata" else getattr(row, column) for column in CHECKPOINT_COLUMNS]
    execute_bound(sql, params)  # bound server-side: Django's cursor would inline a 1 MB blob as hex text


PRUNE_STRATEGIES = ("keep_latest", "delete")
#: Ids per ``IN (...)`` and rows per bulk insert (below SQLite's bound-parameter limit with room to spare).
ID_BATCH = 500
#: What ``copy_thread`` copies of each row (the thread id and the owner fields are the target's).
COPIED_FIELDS: dict[type[Any], list[str]] = {
    GraphCheckpoint: ["checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "checkpoint_type", "checkpoint", "metadata",
                      "created_at"],
    GraphBlob: ["checkpoint_ns", "channel", "version", "value_type", "value"],
    GraphWrite: ["checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx", "channel", "value_type", "value"],
}
#: Metadata keys a ``DeltaChannel`` leaves in a thread's checkpoints (Python's update counters, LangGraph.js's marker).
DELTA_METADATA_KEYS = ("counters_since_delta_snapshot", "delta_writes_versioned")


def _uses_delta_channel(thread_id: str) -> bool:
    """Whether a checkpoint of the thread carries a ``DeltaChannel``'s metadata (then its latest value needs older rows)."""
    rows = GraphCheckpoint.objects.filter(thread_id=thread_id)
    for key in DELTA_METADATA_KEYS:
        # The key's presence in SQL where the vendor allows it (a list value: presence only), checked exactly here.
        for metadata in _filter_by_metadata(rows, key, []).values_list("metadata", flat=True).iterator(chunk_size=100):
            if isinstance(metadata, dict) and key in metadata:
                return True
    return False


def _thread_config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}}


class DjangoCheckpointSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints, channel blobs and pending writes in the app's database.

    Unbound (``DjangoCheckpointSaver()``) it serves any thread id. Bound to a
    turn (:meth:`for_turn`) it serves only the turn's conversation, fences every
    write by the turn's epoch and saves the turn's checkpoint with it.
    """

    def __init__(self, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.conversation_id: uuid.UUID | None = None
        self.epoch: int | None = None
        self.message_id: uuid.UUID | None = None
        self.turn_snapshot: Callable[[], dict[str, Any]] | None = None

    @classmethod
    def for_turn(cls, turn: Turn, *, serde: SerializerProtocol | None = None) -> DjangoCheckpointSaver:
        """A saver whose thread is ``turn``'s conversation and whose writes are fenced by its epoch."""
        saver = cls(serde=serde)
        saver.conversation_id = turn.conversation_id
        saver.epoch = turn_epoch(turn)
        saver.message_id = turn.message_id
        saver.turn_snapshot = turn.snapshot
        return saver

    @property
    def bound(self) -> bool:
        return self.conversation_id is not None

    # -- reading --------------------------------------------------------------------------------

    def _tuple(self, row: GraphCheckpoint) -> CheckpointTuple:
        return self._tuple_of(
            row.thread_id, row.checkpoint_ns, row.checkpoint_id, row.parent_checkpoint_id, row.checkpoint_type,
            row.checkpoint, row.metadata,
        )

    def _tuple_of(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, parent_id: str | None,
                  checkpoint_type: str, checkpoint_bytes: Any, metadata: Any) -> CheckpointTuple:
        checkpoint: Checkpoint = self.serde.loads_typed((checkpoint_type, _bytes(checkpoint_bytes)))
        versions = checkpoint.get("channel_versions") or {}
        # The channel blobs and the pending writes in one round trip (UNION ALL), in plain SQL:
        # the ORM's own cost per query is most of a small read's time.
        blob_table, write_table = GraphBlob._meta.db_table, GraphWrite._meta.db_table
        sql = (
            f"SELECT 1, task_id, channel, task_path, idx, value_type, value FROM {write_table} "
            "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
        )
        params: list[Any] = [thread_id, checkpoint_ns, checkpoint_id]
        if versions:
            wanted = " OR ".join(["(channel = %s AND version = %s)"] * len(versions))
            sql = (
                f"SELECT 0, channel, version, version, 0, value_type, value FROM {blob_table} "
                f"WHERE thread_id = %s AND checkpoint_ns = %s AND ({wanted}) UNION ALL " + sql
            )
            blob_params: list[Any] = [thread_id, checkpoint_ns]
            for channel, version in versions.items():
                blob_params += [channel, str(version)]
            params = blob_params + params
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            found = cursor.fetchall()
        values: dict[str, Any] = {}
        pending_rows = []
        for part, name, channel, task_path, idx, value_type, value in found:
            if part == 0:
                if value_type != "empty":
                    values[name] = self.serde.loads_typed((value_type, _bytes(value)))
            else:
                pending_rows.append((task_path, name, idx, channel, value_type, value))
        pending_rows.sort(key=lambda write: write[:3])  # writes_sort_key: (task_path, task_id, idx)
        pending = [
            (task_id, channel, self.serde.loads_typed((value_type, _bytes(value))))
            for _path, task_id, _idx, channel, value_type, value in pending_rows
        ]
        return CheckpointTuple(
            config=_thread_config(thread_id, checkpoint_ns, checkpoint_id),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=json.loads(metadata) if isinstance(metadata, (str, bytes)) else metadata,
            parent_config=_thread_config(thread_id, checkpoint_ns, parent_id) if parent_id else None,
            pending_writes=pending,
        )

    @_releases_worker_connection
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (its ``checkpoint_id``, else the thread's latest), or None."""
        return self._get_tuple(config)

    def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id, checkpoint_ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        sql = (
            "SELECT checkpoint_id, parent_checkpoint_id, checkpoint_type, checkpoint, metadata "
            f"FROM {GraphCheckpoint._meta.db_table} WHERE thread_id = %s AND checkpoint_ns = %s"
        )
        params = [thread_id, checkpoint_ns]
        if checkpoint_id:
            sql += " AND checkpoint_id = %s"
            params.append(checkpoint_id)
        with connection.cursor() as cursor:
            cursor.execute(sql + " ORDER BY checkpoint_id DESC LIMIT 1", params)
            row = cursor.fetchone()
        return None if row is None else self._tuple_of(thread_id, checkpoint_ns, *row)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, and id) or of all threads."""
        return iter(_releases_worker_connection(self._list)(config, filter=filter, before=before, limit=limit))

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> list[CheckpointTuple]:
        found: list[CheckpointTuple] = []
        rows = GraphCheckpoint.objects.all()
        if config is not None:
            configurable = config["configurable"]
            rows = rows.filter(thread_id=str(configurable["thread_id"]))
            if configurable.get("checkpoint_ns") is not None:
                rows = rows.filter(checkpoint_ns=configurable["checkpoint_ns"])
            if checkpoint_id := get_checkpoint_id(config):
                rows = rows.filter(checkpoint_id=checkpoint_id)
        if before is not None and (before_id := get_checkpoint_id(before)):
            rows = rows.filter(checkpoint_id__lt=before_id)
        exact: dict[str, Any] = {}
        for key, value in (filter or {}).items():
            if isinstance(key, str):  # stored keys are strings: another key is checked in Python only
                rows = _filter_by_metadata(rows, key, value)  # the key is data, never a lookup
            exact[key] = value  # every row checked exactly below (Python's ==, as LangGraph's in-memory saver)
        rows = rows.order_by("-checkpoint_id", "thread_id", "checkpoint_ns")
        if not exact and limit is not None:
            rows = rows[: max(limit, 0)]
        remaining = limit
        for row in rows.iterator(chunk_size=100):
            if exact and not all(row.metadata.get(key) == value for key, value in exact.items()):
                continue
            if remaining is not None:
                if remaining <= 0:
                    break
                remaining -= 1
            found.append(self._tuple(row))
        return found

    # -- writing --------------------------------------------------------------------------------

    def _check_thread(self, thread_id: str) -> None:
        if self.bound and thread_id != str(self.conversation_id):
            raise Validation(
                "A saver bound to a turn writes only its conversation's thread.", code="wrong_thread", field="thread_id"
            )

    def _fence_and_save_turn(self, snapshot: dict[str, Any] | None) -> None:
        """Inside the write's transaction: prove the epoch holds (Fenced otherwise) and save the turn's checkpoint."""
        if not self.bound:
            return
        from ..stores import checkpoint_store

        state = snapshot if snapshot is not None else self.turn_snapshot()  # type: ignore[misc]
        # The checkpoint store's save is fenced by the epoch: it proves the lease and keeps it
        # locked until this transaction commits the graph's rows with the turn's checkpoint.
        checkpoint_store().save(self.conversation_id, state, epoch=self.epoch, message_id=self.message_id)

    def _owner_fields(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id} if self.bound else {}

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        snapshot: dict[str, Any] | None,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        self._check_thread(thread_id)
        stored = dict(checkpoint)
        values: dict[str, Any] = stored.pop("channel_values", {})  # type: ignore[misc]
        owner = self._owner_fields()
        blobs = []
        for channel, version in new_versions.items():
            value_type, value = self.serde.dumps_typed(values[channel]) if channel in values else ("empty", None)
            blobs.append(
                GraphBlob(
                    thread_id=thread_id, checkpoint_ns=checkpoint_ns, channel=channel, version=str(version),
                    value_type=value_type, value=value, **owner,
                )
            )
        checkpoint_type, checkpoint_bytes = self.serde.dumps_typed(stored)
        row = GraphCheckpoint(
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint["id"],
            parent_checkpoint_id=configurable.get("checkpoint_id"),
            checkpoint_type=checkpoint_type,
            checkpoint=checkpoint_bytes,
            metadata=get_serializable_checkpoint_metadata(config, metadata),
            epoch=self.epoch,
            message_id=self.message_id,
            **owner,
        )
        if not self.bound and connection.vendor == "postgresql":
            _insert_in_one_statement(blobs, row)  # autocommit: one round trip
        else:
            with transaction.atomic():
                self._fence_and_save_turn(snapshot)
                if connection.vendor == "postgresql":
                    _insert_in_one_statement(blobs, row)
                else:
                    if blobs:
                        # A (channel, version) is immutable: the first write stands.
                        GraphBlob.objects.bulk_create(blobs, ignore_conflicts=True)
                    GraphCheckpoint.objects.bulk_create(
                        [row],
                        update_conflicts=True,
                        unique_fields=["thread_id", "checkpoint_ns", "checkpoint_id"],
                        update_fields=CHECKPOINT_UPDATE_FIELDS,
                    )
        return _thread_config(thread_id, checkpoint_ns, checkpoint["id"])

    def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str,
        snapshot: dict[str, Any] | None,
    ) -> None:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        self._check_thread(thread_id)
        owner = self._owner_fields()
        rows = []
        for index, (channel, value) in enumerate(writes):
            value_type, data = self.serde.dumps_typed(value)
            rows.append(
                GraphWrite(
                    thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=configurable["checkpoint_id"],
                    task_id=task_id, task_path=task_path, idx=WRITES_IDX_MAP.get(channel, index), channel=channel,
                    value_type=value_type, value=data, **owner,
                )
            )
        special = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        with transaction.atomic():
            self._fence_and_save_turn(snapshot)
            if not rows:
                return
            if special:
                # Errors, interrupts and resumes replace the task's previous one.
                GraphWrite.objects.bulk_create(
                    rows,
                    update_conflicts=True,
                    unique_fields=["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                    update_fields=["channel", "value_type", "value", "task_path"],
                )
            else:
                # A task's regular writes are written once: a retried task cannot change them.
                GraphWrite.objects.bulk_create(rows, ignore_conflicts=True)

    @_releases_worker_connection
    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        """Store a checkpoint and its new channel versions; the config that names it."""
        return self._put(config, checkpoint, metadata, new_versions, None)

    @_releases_worker_connection
    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        """Store a task's writes against the checkpoint of ``config``."""
        self._put_writes(config, writes, task_id, task_path, None)

    @_releases_worker_connection
    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, blob and write of the thread, in one transaction."""
        self._delete_thread(thread_id)

    def _delete_thread(self, thread_id: str) -> None:
        thread_id = str(thread_id)
        with transaction.atomic():
            GraphWrite.objects.filter(thread_id=thread_id).delete()
            GraphBlob.objects.filter(thread_id=thread_id).delete()
            GraphCheckpoint.objects.filter(thread_id=thread_id).delete()

    @_releases_worker_connection
    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune the threads: ``"keep_latest"`` keeps each namespace's latest checkpoint, ``"delete"`` deletes them.

        See :meth:`_prune` for what each strategy keeps and refuses.
        """
        self._prune(thread_ids, strategy, None)

    @_releases_worker_connection
    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, blob and write of a thread to a thread that has none, in one transaction."""
        self._copy_thread(source_thread_id, target_thread_id, None)

    @_releases_worker_connection
    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata ``run_id`` is one of ``run_ids``, with their writes, in one transaction."""
        self._delete_for_runs(run_ids, None)

    def _prune(self, thread_ids: Sequence[str], strategy: str, snapshot: dict[str, Any] | None) -> None:
        """``prune`` as LangGraph's own ``PostgresSaver`` does it.

        ``"delete"`` deletes every checkpoint, blob and write of the threads in
        one transaction. ``"keep_latest"`` keeps the latest checkpoint of each
        namespace with its writes and the blobs it references, and deletes the
        rest, each thread in its own transaction; a kept checkpoint whose parent
        is deleted is left without a parent, and a subgraph call's namespace
        (``node:<task id>``) goes with the root checkpoint it started from once
        that one is deleted. Only checkpoints older than the latest one read are
        deleted, and only blobs a deleted checkpoint used, so a run saving to the
        thread meanwhile loses nothing. ``"keep_latest"`` refuses
        (``NotImplementedError``, nothing pruned) a thread that uses a
        ``DeltaChannel``: its latest value is rebuilt from older checkpoints.
        """
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread ids, not a str.")
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"Unknown prune strategy: {strategy!r} (one of {', '.join(PRUNE_STRATEGIES)}).")
        threads = [str(thread_id) for thread_id in thread_ids]
        for thread_id in threads:
            self._check_thread(thread_id)
        if not threads:
            return
        if strategy == "delete":
            with transaction.atomic():
                self._fence_and_save_turn(snapshot)
                for model in (GraphWrite, GraphBlob, GraphCheckpoint):
                    model.objects.filter(thread_id__in=threads).delete()
            return
        delta = [thread_id for thread_id in threads if _uses_delta_channel(thread_id)]
        if delta:
            raise NotImplementedError(f"keep_latest can't prune threads that use a DeltaChannel: {', '.join(sorted(delta))}")
        for thread_id in threads:
            with transaction.atomic():
                self._fence_and_save_turn(snapshot)
                if _uses_delta_channel(thread_id):  # started using one since the check above
                    raise NotImplementedError(f"keep_latest can't prune threads that use a DeltaChannel: {thread_id}")
                self._keep_latest(thread_id)

    def _keep_latest(self, thread_id: str) -> None:
        rows = GraphCheckpoint.objects.filter(thread_id=thread_id)
        heads: dict[str, str] = {}
        #: Subgraph call namespace -> the saved root checkpoint the call started from.
        roots: dict[str, str] = {}
        for namespace in rows.values_list("checkpoint_ns", flat=True).distinct().order_by():
            heads[namespace], metadata = (
                rows.filter(checkpoint_ns=namespace).order_by("-checkpoint_id").values_list("checkpoint_id", "metadata")[0]
            )
            parents = metadata.get("parents") if isinstance(metadata, dict) else None
            root = parents.get("") if isinstance(parents, dict) else None
            # A call's namespace has its task id after a ":" (a ``checkpointer=True`` subgraph's has none: its
            # state outlives each call). Runs save in the background, so a call may be saved before its root.
            if ":" in namespace and isinstance(root, str) and rows.filter(checkpoint_ns="", checkpoint_id=root).exists():
                roots[namespace] = root
        for namespace, head_id in heads.items():
            namespace_rows = rows.filter(checkpoint_ns=namespace)
            if namespace in roots and roots[namespace] != heads.get(""):
                doomed = namespace_rows  # the call goes with the root checkpoint it started from
            else:
                doomed = namespace_rows.filter(checkpoint_id__lt=head_id)
            self._delete_checkpoints(thread_id, namespace, list(doomed.values_list("checkpoint_id", flat=True)))

    def _versions_of(self, rows: QuerySet[Any]) -> set[tuple[str, str]]:
        """The (channel, version) pairs the checkpoints ``rows`` reference."""
        versions: set[tuple[str, str]] = set()
        for checkpoint_type, data in rows.values_list("checkpoint_type", "checkpoint").iterator(chunk_size=100):
            checkpoint = self.serde.loads_typed((checkpoint_type, _bytes(data)))
            versions.update((channel, str(version)) for channel, version in (checkpoint.get("channel_versions") or {}).items())
        return versions

    def _delete_checkpoints(self, thread_id: str, checkpoint_ns: str, checkpoint_ids: list[str]) -> None:
        """Delete these checkpoints of a namespace, their writes, and the blobs no other checkpoint of it references.

        Only blobs a deleted checkpoint used are candidates, so the blobs of a
        checkpoint saved meanwhile (new versions) are never touched.
        """
        if not checkpoint_ids:
            return
        rows = GraphCheckpoint.objects.filter(thread_id=thread_id, checkpoint_ns=checkpoint_ns)
        freed: set[tuple[str, str]] = set()
        for start in range(0, len(checkpoint_ids), ID_BATCH):
            batch = checkpoint_ids[start:start + ID_BATCH]
            freed |= self._versions_of(rows.filter(checkpoint_id__in=batch))
            GraphWrite.objects.filter(thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id__in=batch).delete()
            rows.filter(checkpoint_id__in=batch).delete()
            rows.filter(parent_checkpoint_id__in=batch).update(parent_checkpoint_id=None)
        garbage: dict[str, list[str]] = {}
        for channel, version in freed - self._versions_of(rows):
            garbage.setdefault(channel, []).append(version)
        for channel, versions in garbage.items():
            for start in range(0, len(versions), ID_BATCH):
                GraphBlob.objects.filter(
                    thread_id=thread_id, checkpoint_ns=checkpoint_ns, channel=channel, version__in=versions[start:start + ID_BATCH]
                ).delete()

    def _copy_thread(self, source_thread_id: str, target_thread_id: str, snapshot: dict[str, Any] | None) -> None:
        """Every checkpoint (same ids, parents, metadata), blob and write of the source, under the target thread id.

        The target must have no checkpoint (``Validation``, code
        ``thread_not_empty``): two histories are never merged. A source without
        checkpoints copies nothing. A saver bound to a turn copies only within
        its conversation's thread, so it never reads another thread into it.
        """
        source, target = str(source_thread_id), str(target_thread_id)
        self._check_thread(source)
        self._check_thread(target)
        owner = self._owner_fields()
        with transaction.atomic():
            self._fence_and_save_turn(snapshot)
            if GraphCheckpoint.objects.filter(thread_id=target).exists():
                raise Validation(
                    "The target thread already has checkpoints.", code="thread_not_empty", field="target_thread_id"
                )
            for model, fields in COPIED_FIELDS.items():
                rows = model.objects.filter(thread_id=source).order_by("pk").values_list(*fields)
                batch: list[Any] = []
                for values in rows.iterator(chunk_size=ID_BATCH):
                    row = model(thread_id=target, **dict(zip(fields, values)), **owner)
                    if model is GraphCheckpoint:
                        row.epoch, row.message_id = self.epoch, self.message_id
                    batch.append(row)
                    if len(batch) >= ID_BATCH:
                        model.objects.bulk_create(batch)
                        batch = []
                if batch:
                    model.objects.bulk_create(batch)

    def _delete_for_runs(self, run_ids: Sequence[str], snapshot: dict[str, Any] | None) -> None:
        """Delete the checkpoints of these runs (metadata ``run_id``) in every thread and namespace, with their writes.

        A checkpoint whose parent is deleted is left without a parent; blobs no
        remaining checkpoint of the namespace references are deleted. A saver
        bound to a turn deletes only in its conversation's thread.
        """
        if isinstance(run_ids, str):
            raise TypeError("run_ids must be a sequence of run ids, not a str.")
        wanted = {str(run_id) for run_id in run_ids}
        if not wanted:
            return
        rows = GraphCheckpoint.objects.filter(metadata__run_id__in=sorted(wanted))
        if self.bound:
            rows = rows.filter(thread_id=str(self.conversation_id))
        with transaction.atomic():
            self._fence_and_save_turn(snapshot)
            doomed: dict[tuple[str, str], list[str]] = {}
            for thread_id, checkpoint_ns, checkpoint_id, metadata in rows.values_list(
                "thread_id", "checkpoint_ns", "checkpoint_id", "metadata"
            ).iterator(chunk_size=ID_BATCH):
                if isinstance(metadata, dict) and str(metadata.get("run_id")) in wanted:
                    doomed.setdefault((thread_id, checkpoint_ns), []).append(checkpoint_id)
            for (thread_id, checkpoint_ns), checkpoint_ids in doomed.items():
                self._delete_checkpoints(thread_id, checkpoint_ns, checkpoint_ids)

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """Monotonic string versions (as LangGraph's own savers use): a counter and a random tie-break."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- async twins: the snapshot of the turn is taken on the event loop, the queries run in the sync thread --------

    def _snapshot(self) -> dict[str, Any] | None:
        return self.turn_snapshot() if self.turn_snapshot is not None else None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await sync_to_async(self._get_tuple)(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await sync_to_async(self._list)(config, filter=filter, before=before, limit=limit)
        for item in found:
            yield item

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        return await sync_to_async(self._put)(config, checkpoint, metadata, new_versions, self._snapshot())

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await sync_to_async(self._put_writes)(config, writes, task_id, task_path, self._snapshot())

    async def adelete_thread(self, thread_id: str) -> None:
        await sync_to_async(self._delete_thread)(thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await sync_to_async(self._prune)(thread_ids, strategy, self._snapshot())

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await sync_to_async(self._copy_thread)(source_thread_id, target_thread_id, self._snapshot())

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await sync_to_async(self._delete_for_runs)(run_ids, self._snapshot())

    # -- queries the bridge uses ----------------------------------------------------------------

    def written_by(self, thread_id: str, message_id: uuid.UUID) -> bool:
        """Whether the thread has a checkpoint written by the turn ``message_id``."""
        return GraphCheckpoint.objects.filter(thread_id=str(thread_id), message_id=message_id).exists()

    async def awritten_by(self, thread_id: str, message_id: uuid.UUID) -> bool:
        return await sync_to_async(self.written_by)(thread_id, message_id)
