"""The drain of a process that shuts down, in one process: refusals, the grace, step boundaries, the lifespan app.

Real producers on a real event loop (``asyncio.run``) against the real database, the scripted
agents of ``tests/agents.py``; the two-server hand-off is ``tests/realtime/test_handoff.py``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Iterator

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings

from agent_persistence.exceptions import ShuttingDown
from agent_persistence.models import Event, Message, Run, TurnSupervision
from agent_persistence.realtime.lifespan import lifespan
from agent_persistence.runtime import shutdown
from agent_persistence.runtime.lifecycle import continue_turn, reap_dead_turns, resume_turn, start_turn
from agent_persistence.runtime.producer import Outcome
from agent_persistence.stores import supervision_store
from tests.agents import ANSWER
from tests.test_runtime import FAST

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_timings(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    monkeypatch.setenv("AP_TOOL_LOG", str(tmp_path / "tools.log"))
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.01")
    with override_settings(AGENT_PERSISTENCE={**FAST, "SHUTDOWN_GRACE": 0.2}):
        yield
    shutdown.resume_taking_turns()


def tool_runs(tmp_path: Any) -> list[str]:
    log = tmp_path / "tools.log"
    return log.read_text().splitlines() if log.exists() else []


def run(coro: Any) -> Any:
    async def main() -> Any:
        try:
            return await coro
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


async def wait_for(predicate: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not await sync_to_async(predicate)():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_draining_process_refuses_starts_resumes_and_answers_with_shutting_down(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> list[str]:
        shutdown.stop_taking_turns()
        refused = []
        for attempt in (
            start_turn(alice, conversation_id, content="hello", agent="scripted"),
            resume_turn(alice, conversation_id),
            continue_turn(alice, conversation_id, []),
        ):
            with pytest.raises(ShuttingDown) as error:
                await attempt
            refused.append(error.value.code)
        assert await reap_dead_turns(resume=True) == []
        return refused

    assert run(scenario()) == ["shutting_down"] * 3
    assert not Message.objects.filter(conversation_id=conversation_id).exists()


def test_a_turn_that_ends_within_the_grace_is_sealed_here(alice: Any) -> None:
    async def scenario() -> tuple[Any, Any]:
        handle = await start_turn(alice, uuid.uuid4(), content="hello", agent="scripted")
        report = await shutdown.drain(grace=30)
        return handle, (await handle.task, report.as_dict())

    handle, (outcome, report) = run(scenario())
    assert outcome is Outcome.COMPLETED
    assert report == {"handed_off": 0, "model_calls_in_flight": 0, "tool_calls_in_flight": 0, "left": 0}
    assert TurnSupervision.objects.get(pk=handle.conversation_id).status == "done"


def test_a_tool_call_in_flight_is_let_finish_then_the_turn_is_handed_off_and_resumed_without_running_it_again(
    alice: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grace (0.6 s) runs out inside the tool call (1 s): the hand-off waits for it (another grace at most),
    stops the agent right after its checkpoint, and the resumed producer returns the recorded result."""
    monkeypatch.setenv("AP_TOOL_SECONDS", "1.0")

    async def scenario() -> Any:
        handle = await start_turn(alice, uuid.uuid4(), content="hello", agent="scripted")
        await wait_for(lambda: tool_runs(tmp_path) == ["start q1"])
        report = await shutdown.drain(grace=0.6)
        return handle, await handle.task, report

    handle, outcome, report = run(scenario())
    assert outcome is Outcome.HANDED_OFF
    assert report.as_dict() == {"handed_off": 1, "model_calls_in_flight": 0, "tool_calls_in_flight": 0, "left": 0}
    assert tool_runs(tmp_path) == ["start q1", "done q1"]
    row = TurnSupervision.objects.get(pk=handle.conversation_id)
    assert (row.status, row.epoch) == ("handed_off", handle.epoch + 1)
    event = Event.objects.get(conversation_id=handle.conversation_id, type="handed_off")
    assert "in_flight" not in event.data  # stopped right after the tool's checkpoint: nothing is made again

    shutdown.resume_taking_turns()

    async def resume() -> Any:
        resumed = await resume_turn(alice, handle.conversation_id)
        return resumed, await resumed.task

    resumed, outcome = run(resume())
    assert outcome is Outcome.COMPLETED and resumed.epoch == handle.epoch + 2
    answer = Message.objects.get(pk=handle.message_id)
    assert answer.content == ANSWER and answer.tool_calls[0]["result"] == {"answer": "result of q1"}
    assert tool_runs(tmp_path) == ["start q1", "done q1"]
    assert sorted(Run.objects.filter(conversation_id=handle.conversation_id).values_list("status", flat=True)) == [
        "aborted", "completed"
    ]


def test_a_tool_call_that_outlives_the_second_grace_is_stopped_and_counted(
    alice: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AP_TOOL_SECONDS", "5")

    async def scenario() -> Any:
        handle = await start_turn(alice, uuid.uuid4(), content="hello", agent="scripted")
        await wait_for(lambda: tool_runs(tmp_path) == ["start q1"])
        started = time.monotonic()
        report = await shutdown.drain(grace=0.1)
        return handle, await handle.task, report, time.monotonic() - started

    handle, outcome, report, took = run(scenario())
    assert outcome is Outcome.HANDED_OFF and took < 2, took  # 0.1 s of grace, 0.1 s more for the tool
    assert report.as_dict() == {"handed_off": 1, "model_calls_in_flight": 0, "tool_calls_in_flight": 1, "left": 0}
    assert tool_runs(tmp_path) == ["start q1"]
    assert Event.objects.get(conversation_id=handle.conversation_id, type="handed_off").data["in_flight"] == "tool"


def test_the_lifespan_app_starts_the_reaper_and_hands_the_turns_off_at_shutdown(alice: Any) -> None:
    async def scenario() -> tuple[list[str], Any]:
        sent: list[str] = []
        messages: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        handle = await start_turn(alice, uuid.uuid4(), content="hello", agent="scripted")
        await messages.put({"type": "lifespan.startup"})
        await messages.put({"type": "lifespan.shutdown"})

        async def send(message: dict[str, Any]) -> None:
            sent.append(message["type"])

        await lifespan({"type": "lifespan"}, messages.get, send)
        return sent, handle, await handle.task

    sent, handle, outcome = run(scenario())
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert outcome is Outcome.HANDED_OFF
    state = supervision_store().status(alice, handle.conversation_id).state
    assert state == "handing_off"


def test_a_start_over_http_on_a_draining_process_is_503_shutting_down_with_retry_after(db: Any) -> None:
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(get_user_model().objects.create_user("draining-bob"))
    shutdown.stop_taking_turns()
    conversation_id = uuid.uuid4()
    response = client.post(f"/api/conversations/{conversation_id}/turns/", {"content": "hi", "agent": "echo"},
                           format="json")
    assert response.status_code == 503, response.content
    assert response.json()["code"] == "shutting_down" and response["Retry-After"] == "1"
    assert not Message.objects.filter(conversation_id=conversation_id).exists()


@pytest.mark.e2e
def test_reap_turns_hands_the_turns_it_resumed_off_on_sigterm(alice: Any) -> None:
    """``manage.py reap_turns --resume --loop`` (a process that drives producers) drains on SIGTERM as a server does."""
    import signal
    import subprocess
    import sys
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from agent_persistence.stores import turn_store
    from agent_persistence.testing.family import frozen_clock
    from tests.realtime.servers import ROOT, server_env

    with frozen_clock(timezone.now() - timedelta(minutes=1)):
        dead = turn_store().begin(alice, uuid.uuid4(), content="hello", known_agents={"scripted"}, agent="scripted")
    # A slow answer (a chunk every 0.2 s), so the resumed turn is still running when the grace of 0.2 s ends
    # however loaded the machine is (under CI's load a fast answer ended within the grace: nothing to hand off).
    env = {**server_env(str(connection.settings_dict["NAME"]), redis=False), "AP_SHUTDOWN_GRACE": "0.2",
           "AP_REAPER_INTERVAL": "0.2", "AP_CHUNK_DELAY": "0.2"}
    command = subprocess.Popen([sys.executable, "-m", "django", "reap_turns", "--resume", "--loop"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while supervision_store().status(alice, dead.conversation_id).epoch == dead.epoch:
            assert command.poll() is None and time.monotonic() < deadline, command.stdout.read()
            time.sleep(0.05)
        command.send_signal(signal.SIGTERM)
        output, _ = command.communicate(timeout=15)
    finally:
        if command.poll() is None:
            command.kill()
    assert command.returncode == 0, output
    assert "Shut down: 1 turn(s) handed off, 0 left for a reaper." in output, output
    status = supervision_store().status(alice, dead.conversation_id)
    assert (status.state, status.epoch) == ("handing_off", dead.epoch + 2), output


def test_a_turn_asked_to_hand_off_before_its_task_first_runs_is_handed_off_without_running_its_agent(alice: Any) -> None:
    from agent_persistence.runtime.lifecycle import begin_turn, launch
    from agent_persistence.runtime.producer import Supervisor

    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        plan = await sync_to_async(begin_turn)(alice, conversation_id, content="hello", agent="scripted")
        handle = launch(plan)
        Supervisor.current().get(conversation_id).request_hand_off()  # no await since launch: the task never ran
        return handle, await handle.task

    handle, outcome = run(scenario())
    assert outcome is Outcome.HANDED_OFF
    assert TurnSupervision.objects.get(pk=conversation_id).status == "handed_off"
    assert "in_flight" not in Event.objects.get(conversation_id=conversation_id, type="handed_off").data
    assert not Message.objects.filter(pk=handle.message_id).exists()


def test_a_turn_claimed_while_the_drain_begins_is_handed_off_not_left_without_a_producer(alice: Any) -> None:
    """A claim in flight (its transaction committed, its producer not launched yet) when SIGTERM comes.

    Before, the drain saw no producer and returned at once: the process exited with the turn claimed for it
    and no producer, so it read dead only after DEAD_AFTER (CI, under load: ``reap_turns`` resumed a turn
    and was told to stop in that window, "0 turn(s) handed off").
    """
    from agent_persistence.runtime.lifecycle import begin_turn, launch
    from agent_persistence.runtime.producer import claiming

    conversation_id = uuid.uuid4()
    plan = begin_turn(alice, conversation_id, content="hello", agent="scripted")  # committed, before the drain

    async def scenario() -> Any:
        with claiming():
            drained = asyncio.ensure_future(shutdown.drain(grace=0.05))
            await asyncio.sleep(0.3)  # well past the grace: the drain waits for the claim's producer
            assert not drained.done(), "the drain returned with a claim in flight"
            handle = launch(plan)
        return handle, await drained, await handle.task

    handle, report, outcome = run(scenario())
    assert outcome is Outcome.HANDED_OFF and report.handed_off == 1
    assert TurnSupervision.objects.get(pk=conversation_id).status == "handed_off"


def test_the_turns_drained_together_are_handed_off_together_and_one_bad_turn_leaves_only_itself_behind(
    alice: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Four turns stop at once: their hand-offs are written in one call (runtime.handoff_writes). One turn's
    checkpoint is over MAX_STATE_BYTES, so that call fails; the four are written again one at a time: three
    are handed off (fenced, at epoch + 1, resumable at once), the bad one is left running for a reaper."""
    from agent_persistence.runtime.producer import Supervisor

    monkeypatch.setenv("AP_CHUNK_DELAY", "0.3")
    ids = [uuid.uuid4() for _ in range(4)]

    async def scenario() -> Any:
        handles = [await start_turn(alice, conversation_id, content="hello", agent="scripted") for conversation_id in ids]
        await asyncio.sleep(0.1)  # every agent is in its first chunk's sleep
        Supervisor.current().get(ids[0]).turn.state["blob"] = "x" * 5000
        report = await shutdown.drain(grace=0.05)
        return handles, [await handle.task for handle in handles], report.as_dict()

    with override_settings(AGENT_PERSISTENCE={**FAST, "SHUTDOWN_GRACE": 0.2, "MAX_STATE_BYTES": 4000}):
        handles, outcomes, report = run(scenario())
    assert outcomes == [Outcome.HANDED_OFF] * 4
    assert "Writing 4 hand-offs together failed" in caplog.text
    rows = {row.pk: row for row in TurnSupervision.objects.filter(pk__in=ids)}
    assert rows[ids[0]].status == "running" and rows[ids[0]].epoch == handles[0].epoch  # left for a reaper
    for handle in handles[1:]:
        assert (rows[handle.conversation_id].status, rows[handle.conversation_id].epoch) == ("handed_off", handle.epoch + 1)
        assert Event.objects.filter(conversation_id=handle.conversation_id, type="handed_off").count() == 1
    assert report["handed_off"] == 3

    shutdown.resume_taking_turns()
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.01")

    async def resume_all() -> list[Any]:
        resumed = [await resume_turn(alice, handle.conversation_id) for handle in handles[1:]]
        return [await handle.task for handle in resumed]

    assert run(resume_all()) == [Outcome.COMPLETED] * 3
    for handle in handles[1:]:
        assert Message.objects.get(pk=handle.message_id).content == ANSWER


def test_a_listener_s_share_of_hand_offs_is_claimed_together_and_each_turn_finishes_here(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a hand-off listener does with its share of an announcement (``take_handed_off_many``): the turns still
    handed off are claimed and driven here to their end; one another process took first is left out."""
    from agent_persistence.runtime.lifecycle import take_handed_off_many

    monkeypatch.setenv("AP_CHUNK_DELAY", "0.3")
    ids = [uuid.uuid4() for _ in range(6)]

    async def drain_them() -> list[Any]:
        handles = [await start_turn(alice, conversation_id, content="hello", agent="scripted") for conversation_id in ids]
        await asyncio.sleep(0.1)
        await shutdown.drain(grace=0.05)
        return [await handle.task for handle in handles]

    assert run(drain_them()) == [Outcome.HANDED_OFF] * 6
    shutdown.resume_taking_turns()
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.01")
    taken = turn_store_resume(alice, ids[0])  # another process was first for this one

    claims = [(row.pk, row.message_id) for row in TurnSupervision.objects.filter(pk__in=ids)]

    async def take() -> list[Any]:
        handles = await take_handed_off_many(claims)
        return [(handle.conversation_id, await handle.task) for handle in handles]

    with override_settings(AGENT_PERSISTENCE={**FAST, "SHUTDOWN_GRACE": 0.2, "REAPER_ENABLED": True}):
        finished = run(take())
    assert sorted(str(pk) for pk, _ in finished) == sorted(str(pk) for pk in ids[1:])
    assert {outcome for _, outcome in finished} == {Outcome.COMPLETED}
    for conversation_id in ids[1:]:
        run_rows = Run.objects.filter(conversation_id=conversation_id).order_by("started_at")
        assert [(r.status, (r.error or {}).get("code")) for r in run_rows] == [("aborted", "handed_off"), ("completed", None)]
    row = TurnSupervision.objects.get(pk=ids[0])
    assert (row.status, row.run_id, row.replica) == ("running", taken.run_id, "elsewhere")


def turn_store_resume(scope: Any, conversation_id: uuid.UUID) -> Any:
    from agent_persistence.stores import turn_store

    return turn_store().resume(scope, conversation_id, replica="elsewhere")
