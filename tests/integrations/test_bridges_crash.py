"""The bridges across real OS processes: SIGKILL mid-answer and resume elsewhere; an approval answered elsewhere.

Process A (``tests/turn_process.py`` with ``tests.integrations.settings``)
runs a framework agent; the test kills it with SIGKILL at a chosen point and
process B resumes the turn. A follower in this process watches the whole turn
as a browser tab would. The stored answer must equal the scripted one, the
follower must end with exactly that text, the tool must have run once (its
log file survives the kill) and a model call that had completed before the
kill must not be made again (the model log).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.test import override_settings

from agent_persistence.models import Interrupt, Message, Run, StreamRecording, TurnSupervision
from tests.agents import ANSWER
from tests.integrations.script import PART1
from tests.integrations.settings import AGENT_PERSISTENCE as BRIDGE_SETTINGS
from tests.realtime.client import StreamClient

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
DEAD_AFTER = 1.0
TIMINGS = {"HEARTBEAT_INTERVAL": 0.2, "DEAD_AFTER": DEAD_AFTER, "RECORDING_FLUSH_INTERVAL": 0.1, "CHECKPOINT_INTERVAL": 0.5}
FRAMEWORKS = ["langgraph", "pydantic-ai", "openai-agents"]
TOOL_STEP = {"langgraph": "langgraph tool", "pydantic-ai": "pydantic-ai tool", "openai-agents": "openai-agents tool"}


@pytest.fixture
def turn_env(tmp_path: Path) -> Any:
    env = dict(os.environ)
    env.update(
        {
            "AP_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
            "AP_FAST_TIMINGS": "1",
            "AP_TOOL_LOG": str(tmp_path / "tools.log"),
            "AP_MODEL_LOG": str(tmp_path / "model.log"),
            "AP_CHUNK_DELAY": "0.04",
            "AP_TOOL_SECONDS": "0.3",
            "DJANGO_SETTINGS_MODULE": "tests.integrations.settings",
        }
    )
    with override_settings(AGENT_PERSISTENCE={**BRIDGE_SETTINGS, **TIMINGS}):
        yield env


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.turn_process", *args], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 90) -> dict[str, Any]:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {key: value for line in lines for key, value in line.items()}


def wait_for(condition: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"Timed out waiting for {what}.")


def log_lines(env: dict[str, str], name: str) -> list[str]:
    path = Path(env[name])
    return path.read_text().splitlines() if path.exists() else []


def recorded_text(conversation_id: uuid.UUID) -> str:
    record = StreamRecording.objects.filter(pk=conversation_id).first()
    return record.message.get("content", "") if record else ""


class FollowerThread(threading.Thread):
    """A follower of the conversation on its own event loop, as a browser tab on this replica would be."""

    def __init__(self, scope: Any, conversation_id: uuid.UUID) -> None:
        super().__init__(daemon=True)
        self.scope, self.conversation_id = scope, conversation_id
        self.client = StreamClient()
        self.error: BaseException | None = None

    def run(self) -> None:
        from agent_persistence.realtime.follower import Follower

        async def send(frame: dict[str, Any]) -> None:
            self.client.apply(frame)

        async def main() -> None:
            follower = Follower(self.scope, self.conversation_id, send)
            try:
                await follower.attach(last_index=None, offset=None, message_id=None)
                deadline = time.monotonic() + 120
                while self.client.final is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
            finally:
                await follower.close()
                await sync_to_async(connections.close_all)()

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def start_a(env: dict[str, str], alice: Any, agent: str) -> tuple[subprocess.Popen[str], uuid.UUID, uuid.UUID]:
    conversation_id, message_id = uuid.uuid4(), uuid.uuid4()
    process = spawn(env, "start", alice.tenant, alice.user, str(conversation_id), str(message_id), agent)
    wait_for(lambda: TurnSupervision.objects.filter(pk=conversation_id).exists(), what="A to claim the turn")
    return process, conversation_id, message_id


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_sigkill_mid_answer_then_resume_on_another_process(framework: str, turn_env: dict[str, str], alice: Any) -> None:
    """Killed while the second model call streams: B replays the first call and the tool, and
    makes the second call again, streaming only what the answer lacks."""
    process, conversation_id, message_id = start_a(turn_env, alice, framework)
    follower = FollowerThread(alice, conversation_id)
    follower.start()
    wait_for(lambda: "done q1" in log_lines(turn_env, "AP_TOOL_LOG"), what="the tool to finish")
    wait_for(lambda: len(recorded_text(conversation_id)) > len(PART1) + 40, what="A to stream after the tool")
    streamed_by_a = recorded_text(conversation_id)
    assert 0 < len(streamed_by_a) < len(ANSWER)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=10)

    time.sleep(DEAD_AFTER + 0.3)  # past the dead threshold
    result = finish(spawn(turn_env, "resume", alice.tenant, alice.user, str(conversation_id), str(message_id)))
    assert result["outcome"] == "completed"

    (answer,) = Message.objects.filter(conversation_id=conversation_id, role="assistant")
    assert answer.id == message_id and answer.content == ANSWER
    assert Run.objects.filter(conversation_id=conversation_id, status="aborted", error__code="producer_lost").count() == 1
    tools = log_lines(turn_env, "AP_TOOL_LOG")
    assert tools.count("done q1") == 1 and tools.count("start q1") == 1
    model_calls = log_lines(turn_env, "AP_MODEL_LOG")
    # The model call that asked for the tool had completed: B replayed it, it did not ask again;
    # the call cut off by the kill was made again.
    assert model_calls.count(TOOL_STEP[framework]) == 1, model_calls
    assert model_calls.count(TOOL_STEP[framework].replace("tool", "answer")) == 2, model_calls
    follower.join(timeout=60)
    assert follower.error is None, follower.error
    assert follower.client.text == ANSWER
    assert follower.client.final_text == ANSWER


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_approval_asked_in_one_process_is_answered_and_run_in_another(framework: str, turn_env: dict[str, str], alice: Any,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The turn runs here until the framework asks for approval; another process answers and finishes it."""
    for name in ("AP_TOOL_LOG", "AP_MODEL_LOG", "AP_CHUNK_DELAY"):
        monkeypatch.setenv(name, turn_env[name])
    conversation_id, message_id = uuid.uuid4(), uuid.uuid4()

    async def ask() -> Any:
        from agent_persistence.runtime.lifecycle import start_turn

        try:
            handle = await start_turn(alice, conversation_id, content="go", agent=f"{framework}-approval", message_id=message_id)
            return await handle.task
        finally:
            await sync_to_async(connections.close_all)()

    assert asyncio.run(ask()).value == "interrupted"
    (pending,) = Interrupt.objects.filter(conversation_id=conversation_id, status="pending")
    assert log_lines(turn_env, "AP_TOOL_LOG") == []
    streamed_before = recorded_text(conversation_id)

    answer = json.dumps([{"id": str(pending.pk), "response": {"approved": True}}])
    result = finish(spawn(turn_env, "continue", alice.tenant, alice.user, str(conversation_id), answer))
    assert result["outcome"] == "completed"
    (message,) = Message.objects.filter(conversation_id=conversation_id, role="assistant")
    assert message.id == message_id and message.content == ANSWER
    assert message.content.startswith(streamed_before)
    assert log_lines(turn_env, "AP_TOOL_LOG") == ["start q1", "done q1"]
    assert log_lines(turn_env, "AP_MODEL_LOG").count(TOOL_STEP[framework]) == 1
