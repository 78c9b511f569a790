"""AG-UI streams served by a real uvicorn process (``tests/api/agui_settings.py``): what a stream holds while open.

- a stream holds no pooled database connection between reads (PostgreSQL with Django's psycopg pool):
  3x the pool's size of streams of one user are open while the same user's REST calls answer at once;
- ``SSE_MAX_PER_USER``: the stream past the cap is 429 ``too_many_streams``, before any query;
- a reader whose conversation is unshared mid-turn gets ``RUN_ERROR not_found`` within
  ``WEBSOCKET_ACCESS_CHECK_INTERVAL``, as the same reader's websocket is closed 4404.

The turn is produced in the test process (the paced agent of ``tests/realtime/agents.py``); the
server's streams follow it through the recording, as a replica that is not the producer's does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Iterator

import httpx
import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection

from agent_persistence.runtime import loop
from agent_persistence.runtime.lifecycle import cancel_turn, start_turn
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from agent_persistence.models import TurnSupervision
from tests.realtime.servers import ROOT, Server, server_env, start_servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180), pytest.mark.e2e]  # real server processes

ON_POSTGRESQL = os.environ.get("DATABASE_URL", "").startswith("postgres")


@pytest.fixture(autouse=True)
def paced_agent(settings: Any, drained_producer_loop: None) -> None:
    """The test process produces the turns: it knows the paced agent too."""
    agents = {**settings.AGENT_PERSISTENCE.get("AGENTS", {}), "paced": "tests.realtime.agents.PacedAgent"}
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "AGENTS": agents}


def make_user(name: str) -> tuple[Scope, str]:
    """A user and a session key of theirs (the server authenticates the cookie)."""
    user = get_user_model().objects.create_user(name)
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    return Scope(tenant="", user=str(user.pk)), store.session_key


@contextlib.contextmanager
def agui_server(**extra: str) -> Iterator[Server]:
    env = server_env(str(connection.settings_dict["NAME"]), redis=False)
    env.pop("AP_FAST_TIMINGS", None)  # the default timings: reads of the recording every 0.5 s
    env.update({"DJANGO_SETTINGS_MODULE": "tests.api.agui_settings", **extra})
    (server,) = start_servers(env, count=1)  # a process of its own (the suite's tiers count it e2e)
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def paced_turn(scope: Scope, conversation_id: uuid.UUID, chunks: int = 400, every: float = 0.05) -> Iterator[None]:
    """A turn of the paced agent (``chunks * every`` seconds), stopped when the block ends."""
    loop.run(start_turn(scope, conversation_id, content=json.dumps({"chunks": chunks, "every": every})))
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            loop.run(cancel_turn(scope, conversation_id))


class Stream:
    """One open AG-UI stream: its response and the AG-UI events read so far."""

    def __init__(self, stack: contextlib.ExitStack, client: httpx.Client, url: str, key: str) -> None:
        began = time.monotonic()
        self.response = stack.enter_context(client.stream("GET", url, headers={"Cookie": f"sessionid={key}"}))
        self.opened_after = time.monotonic() - began
        self.status = self.response.status_code
        self.lines = self.response.iter_lines()
        self.events: list[dict[str, Any]] = []

    def body(self) -> Any:
        return json.loads(self.response.read())

    def read_until(self, kind: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for line in self.lines:
            if line.startswith("data: "):
                self.events.append(json.loads(line[6:]))
                if self.events[-1]["type"] == kind:
                    return self.events[-1]
            if time.monotonic() > deadline:
                break
        raise AssertionError(f"no {kind} within {timeout} s: {self.events[-3:]}")


def agui_url(server: Server, conversation_id: Any) -> str:
    return f"http://127.0.0.1:{server.port}/api/conversations/{conversation_id}/agui/"


POOL_SIZE = 4


@pytest.mark.skipif(not ON_POSTGRESQL, reason="Django's connection pool is PostgreSQL's (psycopg_pool); SQLite has none")
def test_streams_hold_no_pooled_connection_so_3x_the_pool_of_streams_leave_rest_calls_fast() -> None:
    """Pool of 4 (3 s wait): 12 streams of one user open, each receives the turn, and REST calls answer under a second."""
    scope, key = make_user("pool-alice")
    conversation_id = conversation_store().create(scope, agent="paced").id
    with agui_server(AP_DB_POOL=f"1,{POOL_SIZE},3") as server, paced_turn(scope, conversation_id), \
            httpx.Client(timeout=httpx.Timeout(60)) as client, contextlib.ExitStack() as stack:
        streams: list[Stream] = []
        for _ in range(3 * POOL_SIZE):
            stream = Stream(stack, client, agui_url(server, conversation_id), key)
            streams.append(stream)
            assert stream.status == 200, (len(streams), stream.status, round(stream.opened_after, 2), stream.response.read()[:300])
            try:
                stream.read_until("RUN_STARTED")
            except AssertionError as exc:
                raise AssertionError(f"stream {len(streams)}: {exc}\n{server.output()}") from None
        latencies = []
        for _ in range(5):
            began = time.monotonic()
            response = client.get(f"http://127.0.0.1:{server.port}/api/conversations/", headers={"Cookie": f"sessionid={key}"})
            latencies.append(time.monotonic() - began)
            assert response.status_code == 200, response.text[:300]
        print(f"\n{len(streams)} streams open (pool {POOL_SIZE}); REST latencies: {[round(x, 3) for x in latencies]} s;"
              f" slowest stream open {max(s.opened_after for s in streams):.3f} s")
        assert max(latencies) < 2.5, latencies  # before: each waited out the pool's 3 s timeout, then 500
        for stream in streams:  # every stream still follows the turn
            stream.read_until("TEXT_MESSAGE_CONTENT")


def test_the_stream_past_the_cap_is_429_and_a_client_that_leaves_frees_its_place_on_a_real_server() -> None:
    """SSE_MAX_PER_USER 3 under uvicorn: the 4th stream is 429 too_many_streams; a client that disconnects frees its place."""
    scope, key = make_user("cap-alice")
    conversation_id = conversation_store().create(scope, agent="paced").id
    with agui_server(AP_SSE_MAX_PER_USER="3") as server, paced_turn(scope, conversation_id), \
            httpx.Client(timeout=httpx.Timeout(30)) as client, contextlib.ExitStack() as stack:
        held = [Stream(stack, client, agui_url(server, conversation_id), key) for _ in range(3)]
        for stream in held:
            assert stream.status == 200
            stream.read_until("RUN_STARTED")
        with httpx.Client(timeout=httpx.Timeout(30)) as other, contextlib.ExitStack() as refused_stack:
            refused = Stream(refused_stack, other, agui_url(server, conversation_id), key)
            assert refused.status == 429, refused.status
            assert refused.response.headers["content-type"].startswith("application/json")
            assert refused.body()["code"] == "too_many_streams"
        held[0].response.close()  # the client leaves
        deadline = time.monotonic() + 10
        while True:
            with httpx.Client(timeout=httpx.Timeout(30)) as other, contextlib.ExitStack() as again_stack:
                again = Stream(again_stack, other, agui_url(server, conversation_id), key)
                if again.status == 200:
                    again.read_until("TEXT_MESSAGE_CONTENT")
                    break
            assert time.monotonic() < deadline, "a departed client's place was never freed"
            time.sleep(0.2)


ACCESS_CHECK_INTERVAL = 0.5


def test_a_reader_whose_conversation_is_unshared_gets_run_error_not_found_within_the_access_check_interval() -> None:
    """Bob reads alice's shared conversation mid-turn; she unshares it: his stream ends RUN_ERROR not_found within
    WEBSOCKET_ACCESS_CHECK_INTERVAL (0.5 s here) and receives no more text (before: the whole turn, then RUN_FINISHED)."""
    alice, _ = make_user("unshare-alice")
    _, bob_key = make_user("unshare-bob")
    conversation_id = conversation_store().create(alice, agent="paced").id
    conversation_store().share(alice, conversation_id)
    with agui_server(AP_ACCESS_CHECK_INTERVAL=str(ACCESS_CHECK_INTERVAL)) as server, paced_turn(alice, conversation_id), \
            httpx.Client(timeout=httpx.Timeout(30)) as client, contextlib.ExitStack() as stack:
        stream = Stream(stack, client, agui_url(server, conversation_id), bob_key)
        assert stream.status == 200
        stream.read_until("TEXT_MESSAGE_CONTENT")
        conversation_store().share(alice, conversation_id, shared=False)
        unshared = time.monotonic()
        ended = stream.read_until("RUN_ERROR", timeout=15)
        elapsed = time.monotonic() - unshared
        print(f"\nRUN_ERROR {ended['code']} {elapsed:.2f} s after the unshare (interval {ACCESS_CHECK_INTERVAL} s)")
        assert ended["code"] == "not_found"
        assert elapsed < 4 * ACCESS_CHECK_INTERVAL + 2, elapsed  # room for a loaded machine; before: never
        assert not any(event["type"] == "RUN_FINISHED" for event in stream.events)


def test_a_reader_of_a_dead_turn_is_ended_too_when_the_conversation_is_unshared() -> None:
    """The producer is SIGKILLed: bob's stream shows the turn dead and would stay open (keep-alives) until someone
    resumes it; alice unshares: RUN_ERROR not_found within the interval all the same."""
    alice, _ = make_user("dead-alice")
    _, bob_key = make_user("dead-bob")
    conversation_id, message_id = uuid.uuid4(), uuid.uuid4()
    env = {**os.environ, "AP_TEST_DB_NAME": str(connection.settings_dict["NAME"]), "AP_CHUNK_DELAY": "0.1",
           "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    producer = subprocess.Popen(
        [sys.executable, "-m", "tests.turn_process", "start", alice.tenant, alice.user, str(conversation_id), str(message_id), "scripted"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not TurnSupervision.objects.filter(pk=conversation_id).exists():
            assert time.monotonic() < deadline and producer.poll() is None, "the producer never claimed the turn"
            time.sleep(0.05)
        conversation_store().share(alice, conversation_id)
        with agui_server(AP_ACCESS_CHECK_INTERVAL=str(ACCESS_CHECK_INTERVAL)) as server, \
                httpx.Client(timeout=httpx.Timeout(30)) as client, contextlib.ExitStack() as stack:
            stream = Stream(stack, client, agui_url(server, conversation_id), bob_key)
            assert stream.status == 200
            stream.read_until("TEXT_MESSAGE_CONTENT")
            producer.send_signal(signal.SIGKILL)
            producer.wait(timeout=10)
            while True:  # the follower notices the dead producer (DEAD_AFTER 3 s)
                snapshot = stream.read_until("STATE_SNAPSHOT", timeout=20)
                if snapshot["snapshot"]["turn"]["state"] == "dead":
                    break
            conversation_store().share(alice, conversation_id, shared=False)
            unshared = time.monotonic()
            ended = stream.read_until("RUN_ERROR", timeout=15)
            elapsed = time.monotonic() - unshared
            print(f"\ndead turn: RUN_ERROR {ended['code']} {elapsed:.2f} s after the unshare")
            assert ended["code"] == "not_found" and elapsed < 4 * ACCESS_CHECK_INTERVAL + 2, (ended, elapsed)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait(timeout=10)
