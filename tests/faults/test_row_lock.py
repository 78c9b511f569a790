"""A row lock held on one conversation stalls that turn only, never the heartbeats of the others.

Three turns stream in one process. Another client holds ``SELECT ... FOR
UPDATE`` on the first conversation's supervision and conversation rows for 30
seconds (``AP_FAULT_LOCK_SECONDS``), thirty times ``DEAD_AFTER``. The other
two turns must never read dead meanwhile (so no reaper would take them over
and run their agent twice), and once the lock goes, all three end with the
exact answer, each by its one run.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.test import override_settings

from agent_persistence.models import Conversation, Message, Run, TurnSupervision
from agent_persistence.runtime.lifecycle import start_turn
from agent_persistence.stores.supervision import status_of
from tests.agents import ANSWER

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

DEAD_AFTER = 1.0
HOLD = float(os.environ.get("AP_FAULT_LOCK_SECONDS", "30"))
TIMINGS = {"HEARTBEAT_INTERVAL": 0.2, "DEAD_AFTER": DEAD_AFTER, "RECORDING_FLUSH_INTERVAL": 0.1,
           "CHECKPOINT_INTERVAL": 0.5, "PRODUCER_LOCK_TIMEOUT": 0.2}


def hold_locks(conversation_id: uuid.UUID, held: threading.Event) -> None:
    """Another client's transaction that locks the conversation's rows for HOLD seconds."""
    settings = connection.settings_dict
    with psycopg.connect(dbname=settings["NAME"], user=settings["USER"], host=settings["HOST"],
                         port=settings["PORT"] or 5432, password=settings["PASSWORD"] or None) as locker:
        with locker.transaction():
            locker.execute(f"SELECT 1 FROM {TurnSupervision._meta.db_table} WHERE conversation_id = %s FOR UPDATE", [conversation_id])
            locker.execute(f"SELECT 1 FROM {Conversation._meta.db_table} WHERE id = %s FOR UPDATE", [conversation_id])
            held.set()
            time.sleep(HOLD)


def watch(conversation_ids: list[uuid.UUID], until: threading.Event) -> list[str]:
    """The states the given turns read in, every 0.1 s, from a connection of this thread's own."""
    seen: list[str] = []
    try:
        while not until.is_set():
            for row in TurnSupervision.objects.filter(conversation_id__in=conversation_ids):
                seen.append(status_of(row).state)
            time.sleep(0.1)
    finally:
        connections.close_all()
    return seen


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL (SQLite locks the whole database)")
def test_a_locked_conversation_stalls_only_its_own_turn(alice: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.1")  # turns of about 6 s
    monkeypatch.setenv("AP_TOOL_LOG", str(tmp_path / "tools.log"))
    conversation_ids = [uuid.uuid4() for _ in range(3)]
    locked, others = conversation_ids[0], conversation_ids[1:]

    async def main() -> list[str]:
        handles = [await start_turn(alice, cid, content="go", agent="scripted") for cid in conversation_ids]
        await asyncio.sleep(0.5)
        held, released = threading.Event(), threading.Event()
        locker = asyncio.create_task(asyncio.to_thread(hold_locks, locked, held))
        await asyncio.to_thread(held.wait, 10)
        watcher = asyncio.create_task(asyncio.to_thread(watch, others, released))
        await locker
        released.set()
        states = await watcher
        await asyncio.wait_for(asyncio.gather(*(handle.task for handle in handles)), 60)
        await sync_to_async(connections.close_all)()
        return states

    with override_settings(AGENT_PERSISTENCE={**override_timings()}):
        states = asyncio.run(main())
    assert states and "dead" not in states, f"the unlocked turns read {sorted(set(states))} during the lock"
    for cid in conversation_ids:
        answers = list(Message.objects.filter(conversation_id=cid, role="assistant").values_list("content", flat=True))
        assert answers == [ANSWER], (cid == locked, answers)
        assert Run.objects.filter(conversation_id=cid).count() == 1


def override_timings() -> dict[str, Any]:
    from django.conf import settings

    return {**settings.AGENT_PERSISTENCE, **TIMINGS}
