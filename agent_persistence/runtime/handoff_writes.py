"""The hand-off writes of a draining process: the turns of one loop stopped together are written together.

A producer stopped for a hand-off (:meth:`.producer.Producer._hand_off`) flushes its recording,
saves its checkpoint and releases its turn as ``handed_off`` at epoch + 1, fenced. One at a time,
a replica's thirty turns made three round trips each on the producer thread, and the last waited
for ninety. :func:`hand_off_together` gathers the hand-offs that reach it within a few loop
iterations (a drain stops its producers in one pass) and writes them in one call, on a writer
thread of its own: the recordings (``put_many``), the checkpoints (``save_many``), then the
releases (``TurnStore.hand_off_many``). A producer's earlier writes still queued elsewhere are
fenced by the release, as any write of an older epoch is.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

from ..exceptions import Fenced, NotFound
from ..stores import checkpoint_store, recording_store, turn_store
from ..stores.twins import healed

logger = logging.getLogger(__name__)


class _HandOffs:
    """The hand-offs of one event loop that wait for their write (see :func:`hand_off_together`)."""

    def __init__(self) -> None:
        self.waiting: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any], asyncio.Future[int | None]]] = []
        self.writer: asyncio.Task[None] | None = None

    async def write_all(self) -> None:
        # The producers a drain stopped in one pass reach their hand-off within the next few loop iterations.
        for _ in range(JOIN_ITERATIONS):
            await asyncio.sleep(0)
        while self.waiting:
            taken, self.waiting = self.waiting, []
            try:
                # On a thread of its own: on the shared one the write queued behind the sync work of every socket
                # the shutdown closed at the same moment (a release took 2 s in one run of 100 turns in five).
                results = await sync_to_async(healed(write_hand_offs_and_close), thread_sensitive=False,
                                              executor=_writer())(
                    [item[0] for item in taken], [item[1] for item in taken], [item[2] for item in taken]
                )
            except BaseException as exc:  # noqa: BLE001 - every waiting producer sees the failure
                for *_, future in taken:
                    if not future.done():
                        future.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for record, _, _, future in taken:
                result = results[record["conversation_id"]]
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)


#: Loop iterations the first hand-off of a batch waits for the others stopped with it.
JOIN_ITERATIONS = 3

_hand_offs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _HandOffs]" = weakref.WeakKeyDictionary()


async def hand_off_together(producer: Any) -> int | None:
    """Flush ``producer``'s recording and checkpoint and release its turn, with the other hand-offs of its loop.

    ``producer`` is a :class:`.producer.Producer` (its recording, checkpoint, plan, epoch and in_flight).

    The epoch the turn is released at; None when it was fenced or its conversation is gone (nothing
    of it written then). The turns a drain stops at once are written in one call on the writer
    thread: the recordings (``put_many``), the checkpoints (``save_many``), then the releases
    (``TurnStore.hand_off_many``, each fenced in a savepoint of its own), where one at a time made a
    process's thirty hand-offs wait ninety round trips for the last. A batch the database refuses
    is written again one turn at a time, so one bad turn leaves only itself to a reaper. Raises
    what the database raised for this turn.
    """
    loop = asyncio.get_running_loop()
    batch = _hand_offs.get(loop)
    if batch is None:
        batch = _hand_offs[loop] = _HandOffs()
    plan = producer.plan
    checkpoint = producer.checkpoint()
    release = {"scope": plan.scope, "conversation_id": producer.conversation_id, "message_id": plan.message_id,
               "run_id": plan.run_id, "epoch": producer.epoch, "in_flight": producer.in_flight}
    future: asyncio.Future[int | None] = loop.create_future()
    batch.waiting.append((producer.recording(), checkpoint, release, future))
    if batch.writer is None or batch.writer.done():
        batch.writer = loop.create_task(batch.write_all(), name="agent_persistence.hand_offs")
    return await asyncio.shield(future)


_writers: list[Any] = []


def _writer() -> Any:
    """The process's hand-off writer thread (made on first use: a process that never drains has none)."""
    import concurrent.futures

    if not _writers:
        _writers.append(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agent_persistence.hand_offs"))
    return _writers[0]


def write_hand_offs_and_close(records: list[dict[str, Any]], checkpoints: list[dict[str, Any]],
                              releases: list[dict[str, Any]]) -> dict[uuid.UUID, int | None | BaseException]:
    """:func:`write_hand_offs`, then the writer thread's connection given back (a drain is the end of the process)."""
    try:
        return write_hand_offs(records, checkpoints, releases)
    finally:
        connections.close_all()


def write_hand_offs(records: list[dict[str, Any]], checkpoints: list[dict[str, Any]],
                    releases: list[dict[str, Any]]) -> dict[uuid.UUID, int | None | BaseException]:
    """The writes of :func:`hand_off_together` (sync): ``{conversation_id: released_at, None or the error}``.

    A recording or checkpoint left unwritten in the batch (fenced, or older than the stored one)
    needs no check of its own: the release fences the same epoch, and refuses it when fenced.
    """
    try:
        recording_store().put_many(records)
        checkpoint_store().save_many(checkpoints)
        released = turn_store().hand_off_many(releases)
        return {release["conversation_id"]: released.get(release["conversation_id"]) for release in releases}
    except Exception:
        if len(releases) == 1:
            return {releases[0]["conversation_id"]: _write_one(records[0], checkpoints[0], releases[0])}
        logger.warning("Writing %d hand-offs together failed; writing them one at a time.", len(releases),
                       exc_info=True)
    return {release["conversation_id"]: _write_one(record, checkpoint, release)
            for record, checkpoint, release in zip(records, checkpoints, releases)}


def _write_one(record: dict[str, Any], checkpoint: dict[str, Any], release: dict[str, Any]) -> int | None | BaseException:
    try:
        recording_store().put(**record)
        checkpoint = dict(checkpoint)
        checkpoint_store().save(checkpoint.pop("conversation_id"), **checkpoint)
        return turn_store().hand_off(**release)
    except (Fenced, NotFound):
        return None
    except Exception as exc:  # noqa: BLE001 - this turn's producer logs it; the turn reads dead after DEAD_AFTER
        return exc


__all__ = ["hand_off_together", "write_hand_offs"]
