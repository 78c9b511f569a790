"""The worker tier (``TURN_RUNNER = "tasks"``): web servers accept and stream, worker processes run the producers.

Real processes on the test database (SQLite or PostgreSQL, whichever the suite runs on): a uvicorn
server (lifespan on, its reaper on) and the workers of one of two task backends, all with
``TURN_RUNNER = "tasks"``: django-tasks-db ``db_worker`` processes (the database task backend), or
Celery workers through django-tasks-celery (Django 6, Python 3.12+) on a real Redis broker. A turn
started over the websocket is claimed by the web process for the replica ``queued`` and enqueued
once committed; the follower sees ``queued`` until a worker takes it, then the whole answer once.
A worker SIGTERMed mid-turn hands the turn off and another worker finishes it without making its
tool call again; a rolling restart of two workers (each SIGTERMed and replaced in turn) under six live
turns hands every turn off, with each character once and no tool call made twice. On the database backend also: a task enqueued twice drives one producer; a worker
SIGKILLed mid-turn is recovered by another process's reaper (through the queue).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store, run_store, supervision_store
from tests.agents import ANSWER, CHUNKS, TOOL_AT
from tests.realtime.client import StreamClient
from tests.realtime.servers import ROOT, Server, logged_in_session, receive, send, server_env, socket_to

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60), pytest.mark.e2e]

REAPER_INTERVAL = 0.25
GRACE = 0.3
TASKS_TABLE = "django_tasks_database_dbtaskresult"


class Worker:
    """One worker process of the tier on the test database, its output in ``TMPDIR``; a backend's subclass names its command."""

    #: The start of its name and of its log's.
    kind = "worker"

    def __init__(self, env: dict[str, str], name: str) -> None:
        self.name = name
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"agent_persistence_{self.kind}_{os.getpid()}_{name}.log"
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(self.command(), cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, text=True)

    def command(self) -> list[str]:
        raise NotImplementedError

    def signal(self, number: int) -> None:
        self.process.send_signal(number)

    def wait(self, timeout: float = 20) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def output(self) -> str:
        return self.log_path.read_text()[-5000:]

    #: What the worker logs once it takes tasks and stops gracefully on SIGTERM.
    ready_line = ""

    def wait_ready(self, timeout: float = 30) -> None:
        """Until the worker logs :attr:`ready_line` (a SIGTERM before that kills a process still starting)."""
        deadline = time.monotonic() + timeout
        while self.ready_line not in self.log_path.read_text():
            assert self.process.poll() is None and time.monotonic() < deadline, f"{self.name} did not start: {self.output()}"
            time.sleep(0.05)


class DbWorker(Worker):
    """One ``manage.py db_worker`` process (``python -m django db_worker``)."""

    ready_line = "Starting worker"  # logged once its signal handlers are in place

    def command(self) -> list[str]:
        return [sys.executable, "-m", "django", "db_worker", "--interval", "0.05", "--no-startup-delay", "--worker-id", self.name]


class CeleryWorker(Worker):
    """One ``celery -A tests.realtime.celery_app worker --pool solo`` process (the task runs in the worker process)."""

    kind = "celery"
    ready_line = " ready."  # celery@name ready. (worker_ready, at INFO)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "celery", "-A", "tests.realtime.celery_app", "worker", "--pool", "solo", "-n",
                f"{self.name}@%h", "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"]


def tier_env(tool_log: Path) -> dict[str, str]:
    env = server_env(str(connection.settings_dict["NAME"]), redis=bool(os.environ.get("REDIS_URL")))
    env.update({"AP_TURN_RUNNER": "tasks", "AP_REAPER_INTERVAL": str(REAPER_INTERVAL), "AP_SHUTDOWN_GRACE": str(GRACE),
                "AP_TOOL_LOG": str(tool_log)})
    return env


@dataclass
class Tier:
    """One tier's environment and the processes a test started in it (stopped, last first, by :meth:`stop`)."""

    backend: str
    env: dict[str, str]
    tool_log: Path
    worker_class: type[Worker]
    started: list[Any] = field(default_factory=list)

    def web(self) -> Server:
        server = Server(self.env, f"web-{len(self.started)}", lifespan="on")
        self.started.append(server)
        server.wait_ready()
        return server

    def worker(self) -> Worker:
        process = self.worker_class(self.env, f"{self.worker_class.kind}-{len(self.started)}")
        self.started.append(process)
        return process

    def stop(self) -> None:
        for process in reversed(self.started):
            if os.environ.get("AP_SHOW_LOGS"):
                print(f"--- {process.name}\n{process.output()}")
            process.stop()


@pytest.fixture(params=["db_worker", "celery"])
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tier]:
    """The tier on one backend; the processes a test starts are stopped after.

    ``db_worker``: the task table migrated and empty. ``celery``: the broker is a private Redis
    server on a free port (the layer is REDIS_URL's, when set); it skips without
    django-tasks-celery, except under ``AP_REQUIRE_CELERY`` (CI's workers leg, ``.ci/run``), where
    a missing package is a failure.
    """
    broker = None
    if request.param == "db_worker":
        pytest.importorskip("django_tasks_db")
        env = tier_env(tmp_path / "tool.log")
        # Setup, not the subject: the system checks (half of this command's CPU) run in every worker the test starts.
        subprocess.run([sys.executable, "-m", "django", "migrate", "django_tasks_database", "-v", "0", "--skip-checks"], cwd=ROOT,
                       env=env, check=True, capture_output=True, timeout=60)
        with connection.cursor() as cursor:  # the test process does not know the table: it is not flushed between tests
            cursor.execute(f"DELETE FROM {TASKS_TABLE}")
        worker_class: type[Worker] = DbWorker
    else:
        if os.environ.get("AP_REQUIRE_CELERY"):
            import django_tasks_celery  # noqa: F401
        else:
            pytest.importorskip("django_tasks_celery")
        from tests.realtime.redis_server import RedisServer

        broker = RedisServer()
        broker.start()
        env = tier_env(tmp_path / "tool.log")
        env["AP_CELERY_BROKER"] = broker.url
        worker_class = CeleryWorker
    tier = Tier(request.param, env, tmp_path / "tool.log", worker_class)
    try:
        yield tier
    finally:
        tier.stop()
        if broker is not None:
            broker.stop()


#: For the tests of what only the database backend shows (its task table, its queue read by the reaper's resume).
ON_DB_WORKER = pytest.mark.parametrize("tier", ["db_worker"], indirect=True)


@pytest.fixture
def session() -> tuple[str, uuid.UUID, Scope]:
    key, user, conversation_id = logged_in_session("worker-alice")
    return key, conversation_id, Scope(tenant="", user=str(user.pk))


def tasks_of(conversation_id: uuid.UUID) -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT status, return_value FROM {TASKS_TABLE} ORDER BY enqueued_at")
        # The return value is JSON: text on SQLite, decoded already by psycopg on PostgreSQL.
        return [(status, json.loads(value) if isinstance(value, str) and value.startswith('"') else value)
                for status, value in cursor.fetchall()]


def tool_runs(tool_log: Path) -> list[str]:
    return tool_log.read_text().splitlines() if tool_log.exists() else []


async def follow_until(connection_: Any, client: StreamClient, frames: list[dict[str, Any]], *, text: int | None = None,
                       timeout: float = 20, state: str | None = None) -> None:
    """Apply frames (recorded in ``frames``) until the final one, until the client holds ``text`` characters, or until a
    status frame of ``state``."""
    deadline = time.monotonic() + timeout
    while client.final is None and (text is None or len(client.text) < text) and not (
            state is not None and frames and frames[-1]["type"] == "status" and frames[-1]["state"] == state):
        try:
            frame = json.loads(await asyncio.wait_for(connection_.recv(), max(0.01, deadline - time.monotonic())))
        except TimeoutError:
            raise AssertionError(f"no final frame within {timeout} s; frames: {frames}") from None
        frames.append(frame)
        client.apply(frame)


async def attach_and_start(socket: Any) -> StreamClient:
    """Attach to the conversation, then start a turn ("go"): the client holds the status sent on attach."""
    await send(socket, {"type": "attach"})
    client = await receive(socket, StreamClient(), until="status")
    await send(socket, {"type": "start", "content": "go"})
    return client


def assert_once(frames: list[dict[str, Any]]) -> None:
    """Every delta starts exactly where the text so far ends: each character once, none missing."""
    text = ""
    for frame in frames:
        if frame["type"] == "delta" and frame.get("text"):
            assert frame["offset"] == len(text), (frame["offset"], len(text))
            text += frame["text"]
    assert text == ANSWER


async def test_a_turn_waits_queued_then_a_worker_streams_it_whole_to_the_follower(tier: Tier, session: Any) -> None:
    key, conversation_id, scope = session
    web = await sync_to_async(tier.web)()
    frames: list[dict[str, Any]] = []
    async with socket_to(web, conversation_id, key) as socket:
        client = await attach_and_start(socket)
        # No worker runs yet: the turn is claimed and enqueued, and waits.
        await follow_until(socket, client, frames, state="queued", timeout=10)
        status = await supervision_store().astatus(scope, conversation_id)
        assert (status.state, status.replica) == ("queued", "queued")
        enqueued_at = time.monotonic()
        worker = await sync_to_async(tier.worker)()
        await follow_until(socket, client, frames, text=1, timeout=30)
        first_delta = time.monotonic() - enqueued_at
        await follow_until(socket, client, frames, timeout=30)
    assert client.final["stop_reason"] == "completed" and client.final_text == ANSWER, client.final
    assert_once(frames)
    states = [f["state"] for f in frames if f["type"] == "status"]
    assert states.index("queued") < states.index("alive"), states
    runs = (await run_store().alist(scope, conversation_id)).items
    assert [run.status for run in runs] == ["completed"]
    row = await supervision_store().aread(conversation_id)
    assert row.replica.endswith(f":{worker.process.pid}"), row.replica  # the worker took it (its first heartbeat)
    if tier.backend == "db_worker":
        assert await sync_to_async(tasks_of)(conversation_id) == [("SUCCESSFUL", "started")]
    print(f"\n{tier.backend} start to first delta: {first_delta * 1000:.0f} ms (includes the worker's start-up)")


@ON_DB_WORKER
async def test_a_task_enqueued_twice_drives_one_producer(tier: Tier, session: Any) -> None:
    key, conversation_id, scope = session
    web = await sync_to_async(tier.web)()
    frames: list[dict[str, Any]] = []
    async with socket_to(web, conversation_id, key) as socket:
        client = await attach_and_start(socket)
        await receive(socket, client, until="started")
        row = await supervision_store().aread(conversation_id)
        # The same run enqueued again (a broker's redelivery, an operator), from a process of the tier: two workers race.
        arguments = {"conversation_id": str(conversation_id), "message_id": str(row.message_id), "run_id": str(row.run_id),
                     "epoch": row.epoch, "tenant": "", "user": scope.user, "agent": "scripted", "resumed": False}
        script = ("import django, json, sys; django.setup(); from agent_persistence.runtime.workers import enqueue; "
                  "enqueue(json.loads(sys.argv[1]))")
        await sync_to_async(subprocess.run)([sys.executable, "-c", script, json.dumps(arguments)], cwd=ROOT, env=tier.env,
                                            check=True, capture_output=True, timeout=30)
        await sync_to_async(tier.worker)()
        await sync_to_async(tier.worker)()
        await follow_until(socket, client, frames)
    assert client.final_text == ANSWER
    assert_once(frames)
    assert sorted(value for _, value in await sync_to_async(tasks_of)(conversation_id)) == ["not_queued", "started"]
    assert tool_runs(tier.tool_log) == ["start q1", "done q1"]


@ON_DB_WORKER
async def test_a_worker_killed_mid_turn_is_recovered_by_another_process_reaper(tier: Tier, session: Any) -> None:
    key, conversation_id, scope = session
    web = await sync_to_async(tier.web)()
    first = await sync_to_async(tier.worker)()
    frames: list[dict[str, Any]] = []
    async with socket_to(web, conversation_id, key) as socket:
        client = await attach_and_start(socket)
        await follow_until(socket, client, frames, text=len("".join(CHUNKS[: TOOL_AT + 5])))
        await sync_to_async(first.signal)(signal.SIGKILL)
        await sync_to_async(first.wait)()
        await sync_to_async(tier.worker)()  # the reaper (web's or this worker's) enqueues the resume; this runs it
        await follow_until(socket, client, frames, timeout=30)
    assert client.final["stop_reason"] == "completed" and client.final_text == ANSWER, client.final
    runs = (await run_store().alist(scope, conversation_id)).items
    assert sorted((run.status, (run.error or {}).get("code")) for run in runs) == [
        ("aborted", "producer_lost"), ("completed", None)]


async def test_a_worker_sigtermed_mid_turn_hands_it_to_another_worker_without_repeating_its_tool_call(
    tier: Tier, session: Any
) -> None:
    key, conversation_id, scope = session
    web = await sync_to_async(tier.web)()
    first = await sync_to_async(tier.worker)()
    frames: list[dict[str, Any]] = []
    async with socket_to(web, conversation_id, key) as socket:
        client = await attach_and_start(socket)
        await follow_until(socket, client, frames, text=len("".join(CHUNKS[: TOOL_AT + 5])), timeout=30)
        await sync_to_async(tier.worker)()  # the survivor
        await sync_to_async(first.signal)(signal.SIGTERM)
        exit_status = await sync_to_async(first.wait)(30)
        await follow_until(socket, client, frames, timeout=30)
    assert exit_status == 0, first.output()
    assert "Worker shut down: 1 turn(s) handed off" in first.output(), first.output()
    assert client.final["stop_reason"] == "completed" and client.final_text == ANSWER, client.final
    assert_once(frames)
    assert tool_runs(tier.tool_log) == ["start q1", "done q1"]  # made once, before the hand-off
    runs = (await run_store().alist(scope, conversation_id)).items
    assert sorted((run.status, (run.error or {}).get("code")) for run in runs)[-1] == ("completed", None)
    assert len(runs) == 2, [(run.status, run.error) for run in runs]


#: The rolling restart's turns, and the pace of their answers (60 chunks: about 9 s a turn).
ROLLING_TURNS = 6
ROLLING_CHUNK_DELAY = "0.15"


@pytest.mark.timeout(150)
async def test_a_rolling_restart_of_two_workers_hands_every_turn_off_and_loses_repeats_and_duplicates_nothing(
    tier: Tier, session: Any
) -> None:
    """Two workers, six live turns followed on the web server; each worker SIGTERMed in turn and replaced.

    Every turn completes with each character once; no tool call is made twice (the second worker stops
    after the tool calls); no turn is taken over as dead (each moves by a hand-off); printed: the hand-offs
    and the per-turn stall (the longest gap between two deltas of a turn).
    """
    key, first_conversation, scope = session
    conversations = [first_conversation] + [
        (await conversation_store().acreate(scope, agent="scripted")).pk for _ in range(ROLLING_TURNS - 1)]
    tier.env["AP_CHUNK_DELAY"] = ROLLING_CHUNK_DELAY
    web = await sync_to_async(tier.web)()
    old = [await sync_to_async(tier.worker)(), await sync_to_async(tier.worker)()]
    for worker in old:
        await sync_to_async(worker.wait_ready)()
    timed: dict[uuid.UUID, list[tuple[float, dict[str, Any]]]] = {conversation: [] for conversation in conversations}
    clients: dict[uuid.UUID, StreamClient] = {}

    async def follow(conversation_id: uuid.UUID) -> None:
        async with socket_to(web, conversation_id, key) as socket:
            client = clients[conversation_id] = await attach_and_start(socket)
            while client.final is None:
                frame = json.loads(await asyncio.wait_for(socket.recv(), 60))
                timed[conversation_id].append((time.monotonic(), frame))
                client.apply(frame)

    followers = [asyncio.create_task(follow(conversation)) for conversation in conversations]
    try:
        deadline = time.monotonic() + 60
        while not all(len(clients[c].text) >= len("".join(CHUNKS[:3])) for c in conversations if c in clients) or len(
                clients) < len(conversations):
            assert time.monotonic() < deadline, "the turns did not start streaming"
            await asyncio.sleep(0.05)
        exits = []
        for worker in old:
            await sync_to_async(worker.signal)(signal.SIGTERM)
            exits.append(await sync_to_async(worker.wait)(30))
            replacement = await sync_to_async(tier.worker)()
            await sync_to_async(replacement.wait_ready)()  # up before the next old one stops, as a deploy does
        await asyncio.wait_for(asyncio.gather(*followers), 90)
    finally:
        for follower in followers:
            follower.cancel()
    outputs = [worker.output() for worker in old]
    assert exits == [0, 0], outputs
    handed_off = sum(int(count) for output in outputs for count in re.findall(r"Worker shut down: (\d+) turn\(s\) handed off", output))
    assert handed_off >= 1, outputs
    for conversation in conversations:
        client = clients[conversation]
        assert client.final["stop_reason"] == "completed" and client.final_text == ANSWER, client.final
        assert_once([frame for _, frame in timed[conversation]])
    runs = tool_runs(tier.tool_log)
    assert (runs.count("start q1"), runs.count("done q1")) == (ROLLING_TURNS, ROLLING_TURNS), runs  # none made twice
    errors = [(run.error or {}).get("code") for c in conversations for run in (await run_store().alist(scope, c)).items]
    assert "producer_lost" not in errors, errors  # no turn was taken over as dead
    stalls = sorted(max(b - a for (a, _), (b, _) in zip(deltas, deltas[1:])) for deltas in (
        [(at, frame) for at, frame in timed[c] if frame["type"] == "delta"] for c in conversations))
    print(f"\n{tier.backend}: {handed_off} hand-offs over 2 worker restarts, {ROLLING_TURNS} turns; longest gap between "
          f"two deltas per turn p50 {stalls[len(stalls) // 2] * 1000:.0f} ms, max {stalls[-1] * 1000:.0f} ms "
          f"(the pace is {float(ROLLING_CHUNK_DELAY) * 1000:.0f} ms)")
