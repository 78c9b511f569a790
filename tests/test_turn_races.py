"""Races of turn starts across two real server processes, and ATOMIC_REQUESTS hosts.

Many clients start the first turn of one new conversation at the same moment (on PostgreSQL also
with Django's psycopg connection pool in the servers),
split across two uvicorn processes on one database: exactly one start wins
(202), every other one is 409 ``conversation_busy``, none is a 5xx (the
deadlock PostgreSQL used to report), and a refused start stores nothing.
"""

from __future__ import annotations

import os
import ssl
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from agent_persistence.models import Event, Message, Run
from agent_persistence.statuses import RunStatus
from tests.realtime.servers import Server, server_env, start_servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

ROUNDS = 60
PASSWORD = "race-secret"
#: The servers speak plain HTTP; each client would still load the CA bundle into a TLS context of its own
#: (about 20 ms of CPU, for some 600 clients a run): they share this one.
UNUSED_TLS = ssl.create_default_context()


#: The servers' database connections: one per thread, as Django opens them, or (PostgreSQL) Django's psycopg
#: pool, as the example project runs on PostgreSQL: each claim's transaction then runs on a connection the
#: pool lends for the request and takes back, and the websocket's reads on other ones.
CONNECTIONS = ["per-thread", pytest.param("pool", marks=pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"), reason="Django's connection pool is PostgreSQL's"))]


@pytest.fixture(params=CONNECTIONS)
def servers(request: pytest.FixtureRequest) -> Iterator[list[Server]]:
    env = server_env(str(connection.settings_dict["NAME"]), redis=False)
    env["AP_CHUNK_DELAY"] = "0.1"  # each winning turn stays live (about 6 s) well past its round
    # The default timings (heartbeat 1 s, dead after 3 s): a loaded machine must not make a live turn look dead.
    env.pop("AP_FAST_TIMINGS", None)
    if request.param == "pool":
        # A pool smaller than a round's 16 clients per server: starts wait for a connection, none holds one long.
        env.update({"DJANGO_SETTINGS_MODULE": "tests.api.agui_settings", "AP_DB_POOL": "2,6,10"})
    running = start_servers(env)
    try:
        yield running
    finally:
        for server in running:
            server.stop()


def start_all(servers: list[Server], conversation_id: uuid.UUID, count: int) -> list[httpx.Response | Exception]:
    """``count`` starts of the conversation's first turn, released at once, alternating between the servers."""
    barrier = threading.Barrier(count)

    def start(index: int) -> httpx.Response | Exception:
        server = servers[index % len(servers)]
        url = f"http://127.0.0.1:{server.port}/api/conversations/{conversation_id}/turns/"
        with httpx.Client(auth=("race-alice", PASSWORD), timeout=60, verify=UNUSED_TLS) as client:
            barrier.wait()
            try:
                return client.post(url, json={"content": f"start {index}", "agent": "scripted"})
            except httpx.HTTPError as exc:
                return exc

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(start, range(count)))


def test_concurrent_first_starts_on_two_servers_admit_exactly_one(servers: list[Server], request: pytest.FixtureRequest) -> None:
    get_user_model().objects.create_user("race-alice", password=PASSWORD)
    tally: Counter[str] = Counter()
    pooled = "pool" in request.node.callspec.id
    for round_number in range(ROUNDS // 2 if pooled else ROUNDS):  # the race's rules need no second 60 rounds
        conversation_id = uuid.uuid4()
        count = 4 + round_number % 13  # 4 .. 16 clients
        responses = start_all(servers, conversation_id, count)
        failures = [response for response in responses if isinstance(response, Exception)]
        assert not failures, failures
        statuses = Counter(response.status_code for response in responses)  # type: ignore[union-attr]
        codes = Counter(response.json().get("code") for response in responses if response.status_code != 202)  # type: ignore[union-attr]
        tally.update({"rounds": 1, "202": statuses[202], "409": statuses[409],
                      "5xx": sum(n for status, n in statuses.items() if status >= 500)})
        if statuses != {202: 1, 409: count - 1}:
            events = list(Event.objects.filter(conversation_id=conversation_id).values_list("type", "data"))
            raise AssertionError(f"round {round_number}: {statuses} {codes} events={events}")
        assert codes == {"conversation_busy": count - 1}, codes
        user_messages = Message.objects.filter(conversation_id=conversation_id, role="user").count()
        assert user_messages == 1, f"round {round_number}: {user_messages} user messages stored"
    print(f"\nturn start race on {connection.vendor} ({'pool' if pooled else 'a connection per thread'}): {dict(tally)}")
    assert tally["5xx"] == 0


@pytest.mark.django_db(transaction=True)
def test_turn_endpoints_work_under_atomic_requests(settings: Any, client: Any) -> None:
    """A host with ATOMIC_REQUESTS: start, answer and cancel still hand their transitions to the producer loop."""
    from django.db import connections

    settings.DATABASES["default"]["ATOMIC_REQUESTS"] = True
    connections["default"].settings_dict["ATOMIC_REQUESTS"] = True
    try:
        user = get_user_model().objects.create_user("atomic-alice", password=PASSWORD)
        client.force_login(user)
        conversation_id = uuid.uuid4()
        started = client.post(
            f"/api/conversations/{conversation_id}/turns/", {"content": "approve it", "agent": "approval"},
            content_type="application/json",
        )
        assert started.status_code == 202, started.content
        interrupts = wait_for_interrupts(client, conversation_id)
        # Answered before the producer parks, the live producer goes on itself (continued is None); wait
        # for the park so the answer must start the continuation under ATOMIC_REQUESTS.
        wait_for_parked_run(conversation_id)
        answered = client.post(
            f"/api/conversations/{conversation_id}/interrupts/",
            {"answers": [{"id": interrupts[0]["id"], "response": {"approved": True}}]},
            content_type="application/json",
        )
        assert answered.status_code == 200, answered.content
        assert answered.json()["continued"] is not None
        wait_until_idle(client, conversation_id)
        detail = client.get(f"/api/conversations/{conversation_id}/")
        assert detail.json()["last_turn_status"] == "complete"
        again = client.post(
            f"/api/conversations/{conversation_id}/turns/", {"content": "once more", "agent": "scripted"},
            content_type="application/json",
        )
        assert again.status_code == 202, again.content
        cancelled = client.post(f"/api/conversations/{conversation_id}/turns/cancel/", content_type="application/json")
        assert cancelled.status_code == 202, cancelled.content
        wait_until_idle(client, conversation_id)
    finally:
        connections["default"].settings_dict["ATOMIC_REQUESTS"] = False


def wait_until_idle(client: Any, conversation_id: uuid.UUID, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get(f"/api/conversations/{conversation_id}/stream/").json()["state"] in ("done", "errored"):
            return
        time.sleep(0.05)
    raise AssertionError("the turn did not end")


def wait_for_parked_run(conversation_id: uuid.UUID, timeout: float = 20) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Run.objects.filter(conversation_id=conversation_id, status=RunStatus.INTERRUPTED).exists():
            return
        time.sleep(0.05)
    raise AssertionError("the run was never parked")


def wait_for_interrupts(client: Any, conversation_id: uuid.UUID, timeout: float = 20) -> list[dict[str, Any]]:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = client.get(f"/api/conversations/{conversation_id}/interrupts/").json()["interrupts"]
        if pending:
            return pending
        time.sleep(0.05)
    raise AssertionError("no interrupt was raised")
