"""Crash tests with real OS processes: SIGKILL the producer, resume in another process.

Process A starts a long scripted turn (``tests/turn_process.py``), the test
kills it at a chosen point, waits past the dead threshold and has process B
resume the turn. The final assistant message must equal the scripted answer
exactly (nothing lost, nothing duplicated) and no tool may complete twice.
A SIGSTOPped producer that wakes after a takeover must have every write refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from django.db import connection

from agent_persistence.models import AgentCheckpoint, Event, Interrupt, Message, Run, StreamRecording, TurnSupervision
from tests.agents import ANSWER

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
DEAD_AFTER = 1.0  # AP_FAST_TIMINGS in tests/settings.py


@pytest.fixture
def turn_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AP_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
            "AP_FAST_TIMINGS": "1",
            "AP_TOOL_LOG": str(tmp_path / "tools.log"),
            "AP_CHUNK_DELAY": "0.04",
            "AP_TOOL_SECONDS": "0.8",
            "DJANGO_SETTINGS_MODULE": "tests.settings",
        }
    )
    return env


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.turn_process", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 60) -> dict[str, Any]:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {key: value for line in lines for key, value in line.items()}


def wait_for(condition: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"Timed out waiting for {what}.")


def tool_log(env: dict[str, str]) -> list[str]:
    path = Path(env["AP_TOOL_LOG"])
    return path.read_text().splitlines() if path.exists() else []


def checkpoint_next(conversation_id: uuid.UUID) -> int:
    checkpoint = AgentCheckpoint.objects.filter(pk=conversation_id).first()
    return checkpoint.state.get("agent", {}).get("next", 0) if checkpoint else -1


def start_a(env: dict[str, str], alice: Any, agent: str = "scripted") -> tuple[subprocess.Popen[str], uuid.UUID, uuid.UUID]:
    conversation_id, message_id = uuid.uuid4(), uuid.uuid4()
    process = spawn(env, "start", alice.tenant, alice.user, str(conversation_id), str(message_id), agent)
    wait_for(lambda: TurnSupervision.objects.filter(pk=conversation_id).exists(), what="A to claim the turn")
    return process, conversation_id, message_id


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=10)  # reaps it and closes its pipes


def resume_in_b(env: dict[str, str], alice: Any, conversation_id: uuid.UUID, message_id: uuid.UUID) -> dict[str, Any]:
    time.sleep(DEAD_AFTER + 0.3)  # past the dead threshold
    return finish(spawn(env, "resume", alice.tenant, alice.user, str(conversation_id), str(message_id)))


def assert_exact_answer(conversation_id: uuid.UUID, message_id: uuid.UUID) -> None:
    answers = list(Message.objects.filter(conversation_id=conversation_id, role="assistant"))
    assert len(answers) == 1
    assert answers[0].id == message_id
    assert answers[0].content == ANSWER
    assert Run.objects.filter(conversation_id=conversation_id, status="aborted", error__code="producer_lost").count() == 1
    assert Event.objects.filter(conversation_id=conversation_id, type="producer_lost").count() == 1


@pytest.mark.parametrize(
    "kill_point",
    ["before_first_checkpoint", "between_checkpoints", "during_tool_call"],
)
def test_sigkill_mid_answer_then_resume_in_another_process(kill_point: str, turn_env: dict[str, str], alice: Any) -> None:
    process, conversation_id, message_id = start_a(turn_env, alice)
    if kill_point == "before_first_checkpoint":
        wait_for(lambda: StreamRecording.objects.filter(pk=conversation_id, index__gte=3).exists(), what="streaming")
        assert not AgentCheckpoint.objects.filter(pk=conversation_id).exists()
    elif kill_point == "between_checkpoints":
        wait_for(lambda: checkpoint_next(conversation_id) >= 30, what="a checkpoint after the tool")
        time.sleep(0.2)
    else:
        wait_for(lambda: "start q1" in tool_log(turn_env), what="the tool to start")
    kill(process)
    result = resume_in_b(turn_env, alice, conversation_id, message_id)
    assert result["outcome"] == "completed"
    assert_exact_answer(conversation_id, message_id)
    assert tool_log(turn_env).count("done q1") == 1


def test_a_pending_interrupt_survives_the_producers_death(turn_env: dict[str, str], alice: Any) -> None:
    process, conversation_id, message_id = start_a(turn_env, alice, agent="approval")
    pending = wait_for(lambda: Interrupt.objects.filter(conversation_id=conversation_id, status="pending").first(), what="the approval")
    kill(process)
    time.sleep(DEAD_AFTER + 0.3)  # the person answers after the producer is known dead
    answer = json.dumps([{"id": str(pending.pk), "response": {"approved": True}}])
    result = finish(spawn(turn_env, "continue", alice.tenant, alice.user, str(conversation_id), answer))
    assert result["outcome"] == "completed"
    (message,) = Message.objects.filter(conversation_id=conversation_id, role="assistant")
    assert message.id == message_id and message.content == ANSWER
    assert tool_log(turn_env).count("done q1") == 1


def test_a_paused_producer_is_fenced_after_a_takeover(turn_env: dict[str, str], alice: Any) -> None:
    process, conversation_id, message_id = start_a(turn_env, alice)
    wait_for(lambda: checkpoint_next(conversation_id) >= 5, what="a first checkpoint")
    process.send_signal(signal.SIGSTOP)
    try:
        time.sleep(DEAD_AFTER + 0.3)
        resumer = spawn(turn_env, "resume", alice.tenant, alice.user, str(conversation_id), str(message_id))
        claimed = wait_for(
            lambda: TurnSupervision.objects.filter(pk=conversation_id, epoch__gte=2).first(), what="B's claim"
        )
        assert claimed.epoch == 2
    finally:
        process.send_signal(signal.SIGCONT)
    a_result = finish(process)
    b_result = finish(resumer)
    assert a_result["outcome"] == "fenced"
    assert b_result["outcome"] == "completed"
    assert_exact_answer(conversation_id, message_id)
    # Every record of the turn carries B's epoch: nothing A attempted after waking landed.
    assert StreamRecording.objects.get(pk=conversation_id).epoch == 2
    assert AgentCheckpoint.objects.get(pk=conversation_id).epoch == 2
    assert TurnSupervision.objects.get(pk=conversation_id).epoch == 2
    first_run = Run.objects.get(conversation_id=conversation_id, epoch=1)
    assert first_run.status == "aborted" and first_run.error["code"] == "producer_lost"


def reap(resume: bool) -> list[Any]:
    """What ``manage.py reap_turns`` does, in this process, with the crash tests' timings."""
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections
    from django.test import override_settings

    from agent_persistence.runtime.producer import Supervisor
    from agent_persistence.runtime.lifecycle import reap_dead_turns

    async def main() -> list[Any]:
        try:
            handled = await reap_dead_turns(resume=resume)
            producers = list(Supervisor.current().producers.values())
            await asyncio.gather(*(p.task for p in producers if p.task is not None))
            return handled
        finally:
            await sync_to_async(connections.close_all)()

    timings = {"HEARTBEAT_INTERVAL": 0.2, "DEAD_AFTER": DEAD_AFTER, "RECORDING_FLUSH_INTERVAL": 0.1, "CHECKPOINT_INTERVAL": 0.5}
    from django.conf import settings

    with override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, **timings}):
        return asyncio.run(main())


def test_the_reaper_resumes_a_dead_turn(turn_env: dict[str, str], alice: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    process, conversation_id, message_id = start_a(turn_env, alice)
    wait_for(lambda: checkpoint_next(conversation_id) >= 10, what="a checkpoint")
    kill(process)
    assert reap(resume=True) == []  # not dead yet: the heartbeat is fresh
    time.sleep(DEAD_AFTER + 0.3)
    monkeypatch.setenv("AP_TOOL_LOG", turn_env["AP_TOOL_LOG"])
    assert reap(resume=True) == [conversation_id]
    assert_exact_answer(conversation_id, message_id)
    assert tool_log(turn_env).count("done q1") == 1


def test_the_reaper_closes_out_a_dead_turn_with_its_partial_answer(turn_env: dict[str, str], alice: Any) -> None:
    process, conversation_id, message_id = start_a(turn_env, alice)
    wait_for(lambda: StreamRecording.objects.filter(pk=conversation_id, index__gte=10).exists(), what="streaming")
    kill(process)
    time.sleep(DEAD_AFTER + 0.3)
    partial = StreamRecording.objects.get(pk=conversation_id).message["content"]
    assert reap(resume=False) == [conversation_id]
    (answer,) = Message.objects.filter(conversation_id=conversation_id, role="assistant")
    assert answer.id == message_id and answer.content == partial and ANSWER.startswith(partial)
    assert TurnSupervision.objects.get(pk=conversation_id).status == "errored"
    assert Run.objects.get(conversation_id=conversation_id).status == "failed"


def test_the_in_process_reaper_resumes_a_dead_turn(turn_env: dict[str, str], alice: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With REAPER_ENABLED, a process hosting producers resumes dead turns by itself."""
    import asyncio

    from asgiref.sync import sync_to_async
    from django.conf import settings
    from django.db import connections
    from django.test import override_settings

    from agent_persistence.runtime.lifecycle import supervisor as current_supervisor

    process, conversation_id, message_id = start_a(turn_env, alice)
    wait_for(lambda: checkpoint_next(conversation_id) >= 10, what="a checkpoint")
    kill(process)
    monkeypatch.setenv("AP_TOOL_LOG", turn_env["AP_TOOL_LOG"])
    reaper = {"REAPER_ENABLED": True, "REAPER_INTERVAL": 0.2, "HEARTBEAT_INTERVAL": 0.2, "DEAD_AFTER": DEAD_AFTER}

    def wait_for_answer() -> None:
        try:
            wait_for(
                lambda: Message.objects.filter(conversation_id=conversation_id, role="assistant").exists(),
                20,
                "the reaper to finish the turn",
            )
        finally:
            connections.close_all()  # this worker thread's own connection

    async def host() -> None:
        supervisor = current_supervisor()  # what any turn start or stop in this process does first
        try:
            await asyncio.to_thread(wait_for_answer)
        finally:
            background = [task for task in (supervisor._reaper, supervisor._ticker) if task is not None]
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await sync_to_async(connections.close_all)()

    with override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, **reaper}):
        asyncio.run(host())
    connections.close_all()
    assert_exact_answer(conversation_id, message_id)


def test_resuming_a_live_or_finished_turn_is_refused(turn_env: dict[str, str], alice: Any) -> None:
    from agent_persistence.exceptions import Busy, Gone
    from agent_persistence.runtime.lifecycle import begin_resume

    process, conversation_id, message_id = start_a(turn_env, alice)
    wait_for(lambda: StreamRecording.objects.filter(pk=conversation_id).exists(), what="streaming")
    with pytest.raises(Busy):
        begin_resume(alice, conversation_id, message_id=message_id)
    assert finish(process)["outcome"] == "completed"
    with pytest.raises(Gone):
        begin_resume(alice, conversation_id, message_id=message_id)
    assert Run.objects.filter(conversation_id=conversation_id).count() == 1
