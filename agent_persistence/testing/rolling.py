"""The rolling-restart harness: live turns on several replicas, each replica restarted in turn with SIGTERM.

A deploy is not a crash: a replica told to stop hands its turns off
(:mod:`agent_persistence.runtime.shutdown`) and a survivor goes on with them. This harness
proves it end to end, with real server processes:

1. ``replicas`` uvicorn processes (``--lifespan on``) serve the project's ASGI application, on
   the caller's database and channel layer (the caller's settings, plus the overrides it passes);
2. ``turns`` turns are started, spread over the replicas, each followed over the websocket from
   another replica than the one that started it (its producer);
3. while they stream, each replica in turn gets SIGTERM; once it has exited, a replacement is
   started on the same port, and the next replica goes once the replacement serves. A follower
   whose socket the stopping replica closes (1012) reconnects to another replica and attaches
   from its position, as a careful client does;
4. once every turn has ended, the :class:`RollingReport` says what the followers saw and what
   the store recorded: characters lost and duplicated, tool calls repeated (counted by the tool
   itself when the agent is :class:`RollingAgent`, and by the hand-offs that stopped a tool call),
   model calls repeated (the hand-offs whose model call was in flight, ``handed_off`` events'
   ``in_flight``), and the stall of each hand-off as a follower saw it (its last delta of the
   stopped producer to its first delta of the next one, reconnect included).

``manage.py crash_test --deploy``, ``python -m benchmarks deploy`` and
``tests/realtime/test_rolling_restart.py`` run it. The servers run the in-process runner; the
replicas are described by :class:`ReplicaSpec`, so another runner (a worker tier) can add its own
processes beside them.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runtime.agents import Agent
from ..runtime.turn import Turn

#: The environment variables the server factory reads (set by :class:`Replica`).
APP_ENV = "AGENT_PERSISTENCE_ROLLING_APP"
SETTINGS_ENV = "AGENT_PERSISTENCE_ROLLING_SETTINGS"
#: The environment of :class:`RollingAgent` (in the server processes).
TOOL_LOG_ENV = "AGENT_PERSISTENCE_ROLLING_TOOL_LOG"
CHUNKS_ENV = "AGENT_PERSISTENCE_ROLLING_CHUNKS"
DELAY_ENV = "AGENT_PERSISTENCE_ROLLING_DELAY"
TOOL_SECONDS_ENV = "AGENT_PERSISTENCE_ROLLING_TOOL_SECONDS"
#: A tool call every this many chunks.
TOOL_EVERY = 25


# -- the agent -------------------------------------------------------------------------------------

def rolling_chunks(count: int | None = None) -> list[str]:
    """The deterministic answer of :class:`RollingAgent`, chunk by chunk."""
    count = int(os.environ.get(CHUNKS_ENV, "150")) if count is None else count
    return [f"chunk{index:04d} " for index in range(count)]


async def witness(conversation: str, call: str) -> dict[str, Any]:
    """The tool of :class:`RollingAgent`: notes each execution (start and end) in the file of ``TOOL_LOG_ENV``."""
    log = os.environ.get(TOOL_LOG_ENV)
    if log:
        with open(log, "a") as handle:  # noqa: ASYNC230 - O_APPEND, one short line: one write, whole, across processes
            handle.write(f"{conversation} {call} start\n")
    await asyncio.sleep(float(os.environ.get(TOOL_SECONDS_ENV, "0.2")))
    if log:
        with open(log, "a") as handle:  # noqa: ASYNC230
            handle.write(f"{conversation} {call} done\n")
    return {"witnessed": call}


class RollingAgent(Agent):
    """Streams :func:`rolling_chunks` (``DELAY_ENV`` seconds apart: the model), with a counted tool call every
    :data:`TOOL_EVERY` chunks. ``turn.state`` remembers how far it got, so a resumed producer goes on from there."""

    async def run(self, turn: Turn) -> None:
        chunks = rolling_chunks()
        delay = float(os.environ.get(DELAY_ENV, "0.1"))
        for index in range(turn.state.get("next", 0), len(chunks)):
            if index and index % TOOL_EVERY == 0:
                call = f"witness-{index // TOOL_EVERY}"
                await turn.tool(call, "witness", {"conversation": str(turn.conversation_id), "call": call}, witness)
            turn.stream(chunks[index])
            turn.state["next"] = index + 1
            await asyncio.sleep(delay)


def tool_executions(log: Path) -> Counter[tuple[str, str]]:
    """How often each (conversation, call) of :class:`RollingAgent` started, from its tool log."""
    counts: Counter[tuple[str, str]] = Counter()
    if log.exists():
        for line in log.read_text().splitlines():
            conversation, call, what = line.split()
            if what == "start":
                counts[(conversation, call)] += 1
    return counts


# -- the server processes --------------------------------------------------------------------------

def server_application() -> Any:
    """``uvicorn --factory`` entry point: the ASGI application ``APP_ENV`` names, with ``SETTINGS_ENV`` applied.

    ``SETTINGS_ENV`` is a JSON object merged into ``AGENT_PERSISTENCE`` (its ``AGENTS`` merged into the
    project's), so the harness can shorten ``SHUTDOWN_GRACE`` or register :class:`RollingAgent` without a
    settings module of its own.
    """
    import django
    from django.conf import settings
    from django.test.utils import override_settings
    from django.utils.module_loading import import_string

    django.setup()
    overrides = json.loads(os.environ.get(SETTINGS_ENV) or "{}")
    if overrides:
        current = dict(getattr(settings, "AGENT_PERSISTENCE", {}))
        agents = {**current.get("AGENTS", {}), **overrides.pop("AGENTS", {})}
        override_settings(AGENT_PERSISTENCE={**current, **overrides, "AGENTS": agents}).enable()
    return import_string(os.environ.get(APP_ENV) or settings.ASGI_APPLICATION)


@dataclass
class ReplicaSpec:
    """What a replica runs: the ASGI application (a dotted path), the environment, ``AGENT_PERSISTENCE`` overrides."""

    app: str
    env: dict[str, str]
    overrides: dict[str, Any] = field(default_factory=dict)
    log_dir: Path = field(default_factory=lambda: Path(os.environ.get("TMPDIR", "/tmp")))


class Replica:
    """One uvicorn process of a :class:`ReplicaSpec` on a fixed loopback port; :meth:`start` again to replace it."""

    def __init__(self, name: str, port: int, spec: ReplicaSpec) -> None:
        self.name, self.port, self.spec = name, port, spec
        self.log_path = spec.log_dir / f"agent_persistence_rolling_{os.getpid()}_{name}.log"
        self.log_path.write_text("")
        self.process: subprocess.Popen[bytes] | None = None
        self.generation = 0
        self.started_at = 0  # where this generation's output starts in the log

    def start(self) -> None:
        self.generation += 1
        env = {**self.spec.env, APP_ENV: self.spec.app, SETTINGS_ENV: json.dumps(self.spec.overrides),
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        with self.log_path.open("a") as log:
            log.write(f"--- {self.name} generation {self.generation}\n")
            log.flush()
            self.started_at = log.tell()
            self.process = subprocess.Popen(self.command(), env=env, stdout=log, stderr=subprocess.STDOUT)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "uvicorn", "--factory", f"{__name__}:server_application", "--host", "127.0.0.1",
                "--port", str(self.port), "--log-level", "warning", "--lifespan", "on"]

    def wait_serving(self, timeout: float = 60) -> None:
        """Return once the server answers HTTP (uvicorn listens once the lifespan startup is done)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"Replica {self.name} exited with {self.process.returncode}: {self.output()}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=1).close()
                return
            except urllib.error.HTTPError:  # any HTTP answer: it serves
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"Replica {self.name} did not serve within {timeout:.0f} s.")

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self) -> None:
        """SIGTERM and wait; SIGKILL if it does not exit within 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def url(self, conversation_id: uuid.UUID) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/conversations/{conversation_id}/"

    def output(self) -> str:
        return self.log_path.read_text()[-5000:]


class TaskWorker(Replica):
    """One worker process of a worker tier (``TURN_RUNNER = "tasks"``), restarted as a replica is.

    ``backend`` ``"db"``: django-tasks-db's ``db_worker`` (``python -m django db_worker``);
    ``"celery"``: a Celery worker (``celery -A CELERY_APP worker --pool solo``, the producers in the
    worker process). Its settings are the environment's ``DJANGO_SETTINGS_MODULE``: a worker is not
    made by :func:`server_application`, so that module must read :data:`SETTINGS_ENV` itself (as
    ``benchmarks/settings.py`` does) for the spec's overrides to apply. It has no port: it serves no
    one, it takes tasks; :meth:`wait_serving` waits for the line it logs once it does.
    """

    #: What each backend's worker logs once it takes tasks (and stops gracefully on SIGTERM).
    READY = {"db": "Starting worker", "celery": " ready."}

    def __init__(self, name: str, spec: ReplicaSpec, backend: str, celery_app: str = "") -> None:
        if backend not in self.READY:
            raise ValueError(f"No worker backend {backend!r}: one of {', '.join(self.READY)}.")
        super().__init__(name, 0, spec)
        self.backend, self.celery_app = backend, celery_app

    def command(self) -> list[str]:
        if self.backend == "db":
            return [sys.executable, "-m", "django", "db_worker", "--interval", "0.05", "--no-startup-delay",
                    "--worker-id", self.name]
        return [sys.executable, "-m", "celery", "-A", self.celery_app, "worker", "--pool", "solo", "-n", f"{self.name}@%h",
                "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"]

    def wait_serving(self, timeout: float = 60) -> None:
        """Return once this generation logged that it takes tasks (a SIGTERM before that kills a worker still starting)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"Worker {self.name} exited with {self.process.returncode}: {self.output()}")
            with self.log_path.open() as log:
                log.seek(self.started_at)
                if self.READY[self.backend] in log.read():
                    return
            time.sleep(0.05)
        raise RuntimeError(f"Worker {self.name} did not take tasks within {timeout:.0f} s.")

    def url(self, conversation_id: uuid.UUID) -> str:
        raise TypeError("A worker serves no websocket.")


# -- the clients -----------------------------------------------------------------------------------

class TurnClient:
    """One turn: started on its producer replica, followed from another, reconnecting as a careful client does."""

    def __init__(self, conversation_id: uuid.UUID, cookie: str, cookie_name: str, agent: str, replicas: list[Replica],
                 producer: int, follower: int) -> None:
        self.conversation_id, self.agent, self.replicas = conversation_id, agent, replicas
        self.producer, self.follower = producer, follower
        self.cookie = f"{cookie_name}={cookie}"
        self.message_id: str | None = None
        self.text = ""
        self.index = 0
        self.epoch = 0
        self.final: dict[str, Any] | None = None
        self.deltas: list[float] = []  # time.monotonic() of each delta that added text
        self.markers: list[float] = []  # arrivals of a change of producer (a `handing_off` status)
        self.claimed_at: list[float] = []  # arrivals of an `alive` status after a `handing_off`
        self.state = ""
        self.resent = 0  # characters received again at offsets already held (dropped by offset)
        self.gaps = 0  # deltas that started past the text held: characters missing
        self.handing_off = 0  # `handing_off` statuses seen
        self.reconnects = 0
        self.disconnected_at: list[float] = []
        self.errors: list[str] = []

    def headers(self, replica: Replica) -> dict[str, str]:
        return {"Cookie": self.cookie, "Origin": f"http://127.0.0.1:{replica.port}"}

    async def start(self, deadline: float) -> None:
        """Send ``start`` to the producer replica (or, refused or unreachable, the next one) until it is ``started``."""
        import websockets

        at = self.producer
        while time.monotonic() < deadline:
            replica = self.replicas[at]
            try:
                async with websockets.connect(replica.url(self.conversation_id), additional_headers=self.headers(replica),
                                              open_timeout=10, close_timeout=1) as socket:
                    await socket.send(json.dumps({"type": "start", "content": "rolling restart", "agent": self.agent}))
                    while True:
                        frame = json.loads(await asyncio.wait_for(socket.recv(), max(0.1, deadline - time.monotonic())))
                        if frame["type"] == "started":
                            self.message_id, self.producer = frame["message_id"], at
                            return
                        if frame["type"] == "error":
                            self.errors.append(f"start refused on {replica.name}: {frame['code']}")
                            break
            except (OSError, TimeoutError, websockets.ConnectionClosed):
                pass
            at = (at + 1) % len(self.replicas)
            await asyncio.sleep(0.1)
        raise TimeoutError(f"No replica started the turn of conversation {self.conversation_id}.")

    async def follow(self, deadline: float) -> None:
        """Follow the turn to its ``final``, reconnecting to the next replica whenever the socket closes."""
        import websockets

        at = self.follower
        while self.final is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"The turn of conversation {self.conversation_id} did not end in time.")
            replica = self.replicas[at]
            try:
                async with websockets.connect(replica.url(self.conversation_id), additional_headers=self.headers(replica),
                                              max_size=None, open_timeout=5, close_timeout=1) as socket:
                    attach: dict[str, Any] = {"type": "attach"}
                    if self.message_id is not None and self.text:
                        attach.update(message_id=self.message_id, last_index=self.index, offset=len(self.text))
                    await socket.send(json.dumps(attach))
                    while self.final is None:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self.apply(json.loads(await asyncio.wait_for(socket.recv(), remaining)))
                    if self.final is not None:
                        return
            except (OSError, TimeoutError, websockets.ConnectionClosed, websockets.InvalidHandshake):
                pass
            self.reconnects += 1
            self.disconnected_at.append(time.monotonic())
            at = (at + 1) % len(self.replicas)
            await asyncio.sleep(0.05)

    def apply(self, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        now = time.monotonic()
        if kind == "status":
            if self.message_id is None or frame.get("message_id") == self.message_id:
                self.message_id = frame.get("message_id") or self.message_id
                state, epoch = frame.get("state") or "", int(frame.get("epoch") or 0)
                if state == "handing_off":
                    self.handing_off += 1
                    self.markers.append(now)
                elif epoch > self.epoch > 0 and self.state != "handing_off":
                    self.markers.append(now)  # a change of producer this socket was not told of (a reconnect)
                if state == "alive" and self.state == "handing_off":
                    self.claimed_at.append(now)
                self.state = state
                self.epoch = max(self.epoch, epoch)
        elif kind == "delta":
            if frame["message_id"] != self.message_id:
                return
            self.index = max(self.index, int(frame["index"]))
            offset, text = int(frame["offset"]), frame["text"]
            if offset > len(self.text):
                self.gaps += 1
                offset = len(self.text)  # what was missing is lost: counted by the comparison with the answer
            self.resent += min(len(text), len(self.text) - offset)
            added = text[len(self.text) - offset:]
            if added:
                self.text += added
                self.deltas.append(now)
        elif kind == "final":
            if frame["message_id"] == self.message_id:
                self.final = frame
        elif kind == "error":
            self.errors.append(f"{frame.get('code')}: {frame.get('message')}")

    def stalls(self) -> list[Stall]:
        """Each change of producer this follower saw: its last delta before the change to its first after it.

        The change is the ``handing_off`` status (or, for a socket that missed it, a status with a
        higher epoch); changes with no delta between them are one stall.
        """
        stalls: dict[tuple[int, int], Stall] = {}
        for marker in self.markers:
            after = bisect.bisect_right(self.deltas, marker)
            if after == 0 or after == len(self.deltas):
                continue  # before the first delta or after the last: no stall a reader saw
            if (after - 1, after) in stalls:
                continue
            before, first = self.deltas[after - 1], self.deltas[after]
            claimed = next((at for at in self.claimed_at if marker <= at <= first), None)
            stalls[(after - 1, after)] = Stall(first - before, before, marker - before,
                                               None if claimed is None else claimed - marker,
                                               None if claimed is None else first - claimed)
        return list(stalls.values())


@dataclass
class Stall:
    """One hand-off as a follower saw it: ``seconds`` from its last delta before to its first after, in parts."""

    seconds: float
    last_delta_at: float  # time.monotonic() of the stopped producer's last delta (this follower's)
    release: float  # last delta of the stopped producer to the `handing_off` status
    claim: float | None  # `handing_off` to the new producer's `alive` (None: not seen, e.g. a reconnect)
    resume: float | None  # `alive` to the new producer's first delta


# -- the report ------------------------------------------------------------------------------------

def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


@dataclass
class RollingReport:
    replicas: int = 0
    workers: int = 0
    restarted: str = "replicas"  # what was restarted in turn: "replicas", or the tier's "workers"
    turns: int = 0
    restarts: int = 0
    answer_chars: int = 0
    lost: int = 0
    filled_by_final: int = 0  # characters the final frame carried that no delta had (not lost)
    duplicated: int = 0
    resent: int = 0
    unfinished: int = 0
    stop_reasons: Counter[str] = field(default_factory=Counter)
    handed_off: int = 0
    model_calls_repeated: int = 0
    tool_calls_in_flight: int = 0
    tool_executions: int | None = None  # counted by the tool (RollingAgent), when it is the agent
    tool_calls: int | None = None  # distinct (turn, call) the tool saw
    turns_lost: int = 0  # runs recorded producer_lost: a takeover after DEAD_AFTER, not a hand-off
    stalls: list[Stall] = field(default_factory=list)
    reconnects: int = 0
    streamed_after_sigterm: list[float] = field(default_factory=list)  # SIGTERM to a stall's last delta
    intervals: list[float] = field(default_factory=list)  # between two deltas of a follower: the load
    restart_seconds: list[float] = field(default_factory=list)
    drain_seconds: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def tool_calls_repeated(self) -> int:
        """Executions beyond one per call when the tool counts them; else the hand-offs that stopped a tool call."""
        if self.tool_executions is not None and self.tool_calls is not None:
            return self.tool_executions - self.tool_calls
        return self.tool_calls_in_flight

    @property
    def passed(self) -> bool:
        return (self.lost == 0 and self.duplicated == 0 and self.tool_calls_repeated == 0 and self.unfinished == 0
                and self.stop_reasons == Counter({"completed": self.turns}))

    def lines(self) -> list[str]:
        stalls = [stall.seconds for stall in self.stalls]
        release = [stall.release for stall in self.stalls]
        claim = [stall.claim for stall in self.stalls if stall.claim is not None]
        resume = [stall.resume for stall in self.stalls if stall.resume is not None]
        if self.tool_executions is not None:
            tools = (f"{self.tool_calls_repeated} ({self.tool_executions} executions of {self.tool_calls} calls, counted by "
                     f"the tool; {self.tool_calls_in_flight} hand-offs with a tool call in flight)")
        else:
            tools = f"{self.tool_calls_repeated} (hand-offs with a tool call in flight)"
        return [
            (f"replicas               {self.replicas} (each restarted once with SIGTERM: {self.restarts} restarts)"
             if self.restarted == "replicas" else
             f"replicas               {self.replicas} (not restarted), workers {self.workers} (each restarted once with "
             f"SIGTERM: {self.restarts} restarts)"),
            f"turns                  {self.turns} ({self.answer_chars} characters of answers)",
            f"lost characters        {self.lost}",
            *(f"filled by the final    {self.filled_by_final} characters (no delta carried them; the final frame did)"
              for _ in [0] if self.filled_by_final),
            f"duplicated characters  {self.duplicated} ({self.resent} re-sent at offsets already held, dropped by offset)",
            f"turns handed off       {self.handed_off} hand-offs ({self.turns_lost} turns taken over as dead instead)",
            f"tool calls repeated    {tools}",
            f"model calls repeated   {self.model_calls_repeated} (hand-offs with the model call in flight: made again)",
            (f"stall per hand-off     p50 {percentile(stalls, 0.5) * 1000:.0f} ms, p99 {percentile(stalls, 0.99) * 1000:.0f} ms, "
             f"max {max(stalls, default=0) * 1000:.0f} ms ({len(stalls)} seen by followers)"),
            (f"  of which (p50)       release {percentile(release, 0.5) * 1000:.0f} ms (last delta to `handing_off`), "
             f"claim {percentile(claim, 0.5) * 1000:.0f} ms (to `alive`), resume {percentile(resume, 0.5) * 1000:.0f} ms "
             "(to the first delta)"),
            (f"  streamed on for      p50 {percentile(self.streamed_after_sigterm, 0.5) * 1000:.0f} ms after SIGTERM "
             "(to the stopped producer's last delta: the server's closing, then SHUTDOWN_GRACE)"),
            f"follower reconnects    {self.reconnects}",
            (f"delta interval         p50 {percentile(self.intervals, 0.5) * 1000:.0f} ms, "
             f"p99 {percentile(self.intervals, 0.99) * 1000:.0f} ms (every delta a follower got: the agent's pace, and load)"),
            (f"restart (SIGTERM to replacement serving) p50 {percentile(self.restart_seconds, 0.5):.2f} s, "
             f"max {max(self.restart_seconds, default=0):.2f} s (drain p50 {percentile(self.drain_seconds, 0.5):.2f} s)"),
            f"stop reasons           {', '.join(f'{reason} {count}' for reason, count in sorted(self.stop_reasons.items()))}",
            *(f"unfinished turns       {self.unfinished}" for _ in [0] if self.unfinished),
            *self.notes,
            "PASSED" if self.passed else "FAILED",
        ]


# -- the run ---------------------------------------------------------------------------------------

async def run_rolling_restart(
    spec: ReplicaSpec,
    *,
    usernames: list[str],
    agent: str,
    turns: int,
    replicas: int = 3,
    restart_after_chars: int = 100,
    timeout: float = 120.0,
    tool_log: Path | None = None,
    progress: Callable[[str], None] = lambda line: None,
    workers: int = 0,
    backend: str = "db",
    celery_app: str = "",
) -> RollingReport:
    """Start ``replicas`` servers of ``spec``, ``turns`` turns of ``agent`` (the users in turn), restart every replica.

    Runs in a process with Django set up on the same database as the servers (it creates the
    conversations and sessions, and reads the runs and events after). ``tool_log``: the file of
    ``TOOL_LOG_ENV`` when the agent is :class:`RollingAgent` (its executions are then counted).

    ``workers``: a worker tier (the spec's settings say ``TURN_RUNNER = "tasks"``): that many
    :class:`TaskWorker` processes of ``backend`` run the producers beside the replicas, and the
    workers, not the replicas, are restarted in turn (the replicas only accept and stream).
    """
    from asgiref.sync import sync_to_async
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from ..conf import app_settings
    from ..scope import Scope
    from ..stores import conversation_store, event_store, run_store
    from .crash import CrashReport, compare, free_port, session_for

    report = RollingReport(replicas=replicas, workers=workers, turns=turns)
    scopes: dict[str, Scope] = {}
    cookies: dict[str, str] = {}
    user_model = get_user_model()
    for username in usernames:
        user = await sync_to_async(user_model._default_manager.get)(**{user_model.USERNAME_FIELD: username})
        scopes[username] = Scope(tenant="", user=str(user.pk))
        cookies[username] = await sync_to_async(session_for)(username)
    servers = [Replica(chr(ord("a") + i), free_port(), spec) for i in range(replicas)]
    tier = [TaskWorker(f"worker-{chr(ord('a') + i)}", spec, backend, celery_app) for i in range(workers)]
    restarted: list[Replica] = tier or servers
    report.restarted = "workers" if tier else "replicas"
    clients: list[tuple[Scope, TurnClient]] = []
    sigterms: list[float] = []
    try:
        for server in [*servers, *tier]:
            server.start()
        for server in [*servers, *tier]:
            await asyncio.to_thread(server.wait_serving)
        progress(f"{replicas} replicas serving on ports {', '.join(str(s.port) for s in servers)}"
                 + (f", {workers} {backend} workers taking tasks" if tier else ""))
        for number in range(turns):
            username = usernames[number % len(usernames)]
            conversation = await conversation_store().acreate(scopes[username], id=uuid.uuid4(), agent=agent,
                                                              title="rolling restart")
            producer = number % replicas
            clients.append((scopes[username], TurnClient(
                conversation.pk, cookies[username], settings.SESSION_COOKIE_NAME, agent, servers,
                producer=producer, follower=(producer + 1) % replicas,
            )))
        deadline = time.monotonic() + timeout
        await asyncio.gather(*(client.start(deadline) for _, client in clients))
        followers = [asyncio.ensure_future(client.follow(deadline)) for _, client in clients]
        progress(f"{turns} turns started and followed")
        # Restart once every turn streams (or has ended).
        while any(len(c.text) < restart_after_chars and c.final is None for _, c in clients):
            if time.monotonic() > deadline or all(f.done() for f in followers):
                break
            await asyncio.sleep(0.05)
        grace = float(spec.overrides.get("SHUTDOWN_GRACE", app_settings.SHUTDOWN_GRACE))
        for server in restarted:
            live = sum(1 for _, c in clients if c.final is None)
            sigterm_at = time.monotonic()
            sigterms.append(sigterm_at)
            server.terminate()
            status = await asyncio.to_thread(server.wait, 2 * grace + 30)
            report.drain_seconds.append(time.monotonic() - sigterm_at)
            if status not in (0, -signal.SIGTERM):
                report.notes.append(f"replica {server.name} exited with {status}")
            server.start()
            await asyncio.to_thread(server.wait_serving)
            report.restart_seconds.append(time.monotonic() - sigterm_at)
            report.restarts += 1
            progress(f"{'' if tier else 'replica '}{server.name} restarted in {report.restart_seconds[-1]:.2f} s ({live} turns live)")
        results = await asyncio.gather(*followers, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                report.notes.append(f"a follower failed: {result.__class__.__name__}: {result}")
    finally:
        for server in [*tier, *servers]:
            await asyncio.to_thread(server.stop)

    executions = tool_executions(tool_log) if tool_log is not None else None
    if executions is not None:
        report.tool_executions, report.tool_calls = sum(executions.values()), len(executions)
    for scope, client in clients:
        report.reconnects += client.reconnects
        report.resent += client.resent
        for stall in client.stalls():
            report.stalls.append(stall)
            sent = [at for at in sigterms if at <= stall.last_delta_at]
            if sent:
                report.streamed_after_sigterm.append(stall.last_delta_at - sent[-1])
        report.intervals.extend(later - earlier for earlier, later in zip(client.deltas, client.deltas[1:]))
        if client.final is None:
            report.unfinished += 1
            report.stop_reasons["unfinished"] += 1
            continue
        report.stop_reasons[client.final.get("stop_reason") or "none"] += 1
        answer = client.final["message"]["content"]
        if executions is not None:  # the agent is deterministic: the stored answer must be its answer too
            expected = "".join(rolling_chunks(len(answer) // len(rolling_chunks(1)[0])))
            if answer != expected:
                report.notes.append(f"conversation {client.conversation_id}: the stored answer is not the agent's")
        partial = CrashReport()
        compare(partial, answer, client.text)
        report.answer_chars += len(answer)
        report.duplicated += partial.duplicated
        # The final frame is the authority (docs/reference/websocket.md): text it carries that no delta did
        # (a socket attached as its turn ended gets the final, not a catch-up past the recording) is not lost.
        if partial.lost and not partial.duplicated and not client.gaps and client.final is not None:
            report.filled_by_final += partial.lost
        else:
            report.lost += partial.lost
        if partial.lost or partial.duplicated or client.gaps:
            report.notes.append(
                f"conversation {client.conversation_id}: followed {len(client.text)} of {len(answer)} characters, "
                f"{partial.lost} lost, {partial.duplicated} duplicated, {client.gaps} gaps, {client.reconnects} reconnects")
        events = (await event_store().alist(scope, client.conversation_id, types=["handed_off"],
                                            limit=app_settings.MAX_PAGE_SIZE)).events
        report.handed_off += len(events)
        report.model_calls_repeated += sum(1 for event in events if event.data.get("in_flight") == "model")
        report.tool_calls_in_flight += sum(1 for event in events if event.data.get("in_flight") == "tool")
        runs = (await run_store().alist(scope, client.conversation_id, limit=app_settings.MAX_PAGE_SIZE)).items
        report.turns_lost += sum(1 for run in runs if (run.error or {}).get("code") == "producer_lost")
        for error in client.errors:
            report.notes.append(f"conversation {client.conversation_id}: {error}")
    if report.handed_off and not report.stalls:
        report.notes.append("no follower saw a change of producer: the stall could not be measured")
    return report


__all__ = ["Replica", "ReplicaSpec", "RollingAgent", "RollingReport", "TaskWorker", "TurnClient", "percentile", "run_rolling_restart",
           "server_application", "tool_executions"]
