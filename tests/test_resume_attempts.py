"""MAX_RESUME_ATTEMPTS: the reaper stops resuming a turn whose resumes keep ending without a seal.

Real database transactions, the real reaper (``reap_dead_turns(resume=True)``) and real producers on
this process's loop. A resumed producer "dies" as a lost replica's does: its task is cancelled
mid-answer (outcome abandoned, nothing written, no more heartbeats), so the turn reads dead again
after ``DEAD_AFTER``. A second case is the issue's loop: the answer's id taken after the start, so
every seal fails.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.test import override_settings

from agent_persistence.models import Message, Run, TurnSupervision
from agent_persistence.runtime import lifecycle
from agent_persistence.runtime.producer import Supervisor
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.agents import ANSWER

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

DEAD_AFTER = 0.6
TIMINGS = {"HEARTBEAT_INTERVAL": 0.1, "DEAD_AFTER": DEAD_AFTER, "RECORDING_FLUSH_INTERVAL": 0.05,
           "CHECKPOINT_INTERVAL": 0.2, "MAX_RESUME_ATTEMPTS": 2}


def fast() -> Any:
    return override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, **TIMINGS})


async def kill_producers() -> None:
    """Cancel this loop's producers mid-answer, as a lost replica's stop: nothing sealed, no heartbeat."""
    await asyncio.sleep(0.15)
    producers = list(Supervisor.current().producers.values())
    for producer in producers:
        producer.task.cancel()
    await asyncio.gather(*(p.task for p in producers), return_exceptions=True)


def test_a_turn_whose_resumes_keep_dying_is_closed_out_after_max_resume_attempts(caplog: pytest.LogCaptureFixture) -> None:
    scope = Scope(tenant="", user="alice")
    conversation_id = conversation_store().create(scope, agent="scripted").pk

    async def main() -> tuple[list[list[uuid.UUID]], uuid.UUID]:
        try:
            handle = await lifecycle.start_turn(scope, conversation_id, content="go")
            await kill_producers()
            sweeps = []
            for _ in range(6):
                await asyncio.sleep(DEAD_AFTER + 0.2)
                sweeps.append(await lifecycle.reap_dead_turns(resume=True))
                await kill_producers()
            return sweeps, handle.message_id
        finally:
            await sync_to_async(connections.close_all)()

    with fast():
        sweeps, message_id = asyncio.run(main())
    # Two resumes (both died), then the third sweep closes it out; nothing more after that.
    assert sweeps[:3] == [[conversation_id]] * 3 and sweeps[3:] == [[], [], []]
    runs = list(Run.objects.filter(conversation_id=conversation_id, parent__isnull=True).order_by("started_at"))
    assert len(runs) == 3  # the original run and two resumes: no third resume
    assert [run.error["code"] for run in runs[:2]] == ["producer_lost", "producer_lost"]
    assert runs[2].status == "failed" and runs[2].error["code"] == "resume_attempts_exhausted"
    assert "MAX_RESUME_ATTEMPTS is 2" in runs[2].error["message"]
    assert TurnSupervision.objects.get(pk=conversation_id).status == "errored"
    answer = Message.objects.get(pk=message_id)
    assert answer.content and ANSWER.startswith(answer.content)  # the partial answer is kept
    assert "failed 2 resumes" in caplog.text


def test_a_turn_whose_seal_always_fails_stops_being_resumed() -> None:
    """The issue's loop: the answer's id is taken once the turn runs, so every seal fails."""
    scope = Scope(tenant="", user="alice")
    other = Scope(tenant="", user="mallory")
    conversation_id = conversation_store().create(scope, agent="echo").pk
    other_id = conversation_store().create(other, agent="echo").pk
    message_id = uuid.uuid4()

    async def main() -> list[list[uuid.UUID]]:
        try:
            plan = await sync_to_async(lifecycle.begin_turn)(scope, conversation_id, content="go", message_id=message_id)
            # Taken between the start's check and the seal (a turn start refuses the id; an append of a message
            # under it does not check runs): the seal of every run fails with a Conflict.
            await sync_to_async(conversation_store().append_message)(other, other_id, role="user", content="mine", id=message_id)
            handle = lifecycle.launch(plan)
            await asyncio.gather(handle.task, return_exceptions=True)
            sweeps = []
            for _ in range(6):
                await asyncio.sleep(DEAD_AFTER + 0.2)
                sweeps.append(await lifecycle.reap_dead_turns(resume=True))
                producers = list(Supervisor.current().producers.values())
                await asyncio.gather(*(p.task for p in producers), return_exceptions=True)
            return sweeps
        finally:
            await sync_to_async(connections.close_all)()

    with fast():
        sweeps = asyncio.run(main())
    handled = [sweep for sweep in sweeps if conversation_id in sweep]
    assert len(handled) == 3, sweeps  # two resumes, then the guard ends it
    assert TurnSupervision.objects.get(pk=conversation_id).status == "errored"
    assert Run.objects.filter(conversation_id=conversation_id, parent__isnull=True).count() == 3
    assert not Run.objects.filter(conversation_id=conversation_id, status="running").exists()
    # The close-out could not store the answer either, so the turn was force released with the same reason.
    last = Run.objects.filter(conversation_id=conversation_id, parent__isnull=True).order_by("-started_at", "-id").first()
    assert last.error["code"] == "resume_attempts_exhausted", last.error
