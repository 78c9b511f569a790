"""A seal made in another process reaches a websocket follower on every server within a second.

Two real uvicorn processes (A produces, B follows), the producer SIGKILLed mid-answer, then the
turn is ended by a third OS process: ``manage.py reap_turns`` (close-out), ``manage.py reap_turns
--resume`` (a resume run from a management command), ``cancel_turn`` under ``asyncio.run`` and
``close_out_dead_turn`` from plain sync code. With Redis the seal is pushed over the layer; with the
in-memory layer the follower of a dead turn reads it at a bounded pace.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from typing import Any, Iterator

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from tests.agents import ANSWER
from tests.realtime.client import StreamClient
from tests.realtime.servers import ROOT, Server, logged_in_session, receive, send, server_env, socket_to, start_servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

REDIS_MISSING = not os.environ.get("REDIS_URL") and not os.environ.get("CI")

#: How long after the other process exits the follower must have the final frame (the issue's second, and slack
#: for a loaded two-core machine).
WITHIN = 1.5

CANCEL = """
import asyncio, django, sys, faulthandler; faulthandler.dump_traceback_later(40, exit=True)
django.setup()
from agent_persistence.runtime.turns import cancel_turn
from agent_persistence.scope import Scope
asyncio.run(cancel_turn(Scope(tenant="", user=sys.argv[1]), sys.argv[2]))
"""

CLOSE_OUT = """
import django, sys, uuid
django.setup()
from agent_persistence.runtime.turns import close_out_dead_turn
from agent_persistence.scope import Scope
assert close_out_dead_turn(Scope(tenant="", user=sys.argv[1]), uuid.UUID(sys.argv[2]))
"""


@pytest.fixture(params=["recording", pytest.param("redis", marks=pytest.mark.skipif(REDIS_MISSING, reason="REDIS_URL is not set"))])
def layer(request: pytest.FixtureRequest) -> str:
    if request.param == "redis" and not os.environ.get("REDIS_URL"):
        pytest.fail("CI is set but REDIS_URL is not: the Redis variant must run in CI.")
    return request.param


@pytest.fixture
def env(layer: str) -> dict[str, str]:
    return server_env(str(connection.settings_dict["NAME"]), redis=layer == "redis")


@pytest.fixture
def servers(env: dict[str, str]) -> Iterator[list[Server]]:
    running = start_servers(env)
    try:
        yield running
    finally:
        for server in running:
            server.stop()


@pytest.fixture
def session() -> tuple[str, str, uuid.UUID]:
    key, user, conversation_id = logged_in_session("seal-alice")
    return key, str(user.pk), conversation_id


def command(how: str, user: str, conversation_id: uuid.UUID) -> list[str]:
    if how == "reap_close":
        return [sys.executable, "manage.py", "reap_turns"]
    if how == "reap_resume":
        return [sys.executable, "manage.py", "reap_turns", "--resume"]
    if how == "cancel":
        return [sys.executable, "-c", CANCEL, user, str(conversation_id)]
    return [sys.executable, "-c", CLOSE_OUT, user, str(conversation_id)]


@pytest.mark.parametrize("how", ["reap_close", "reap_resume", "cancel", "close_out"])
async def test_a_seal_made_in_another_process_reaches_the_follower_on_b(
    servers: list[Server], session: Any, env: dict[str, str], how: str
) -> None:
    a, b = servers
    key, user, conversation_id = session
    async with socket_to(b, conversation_id, key) as follower_socket:
        await send(follower_socket, {"type": "attach"})
        client = await receive(follower_socket, StreamClient(), until="status")
        async with socket_to(a, conversation_id, key) as producer_socket:
            await send(producer_socket, {"type": "start", "content": "go"})
            await receive(follower_socket, client, min_text=len(ANSWER) // 3)
            await sync_to_async(a.kill)()
        while "dead" not in client.states:
            await receive(follower_socket, client, until="status", timeout=10)
        # A follower that went quiet on a dead turn (its idle reads backed off) is the case that failed.
        await asyncio.sleep(3)
        done = await asyncio.to_thread(
            subprocess.run, command(how, user, conversation_id), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr[-3000:]
        exited = time.monotonic()
        if client.final is None:
            await receive(follower_socket, client, until="final", timeout=10)
        late = time.monotonic() - exited
    expected = {"reap_close": "errored", "reap_resume": "completed", "cancel": "cancelled", "close_out": "errored"}[how]
    assert client.final["stop_reason"] == expected
    if how == "reap_resume":
        assert client.final_text == ANSWER
    else:
        assert ANSWER.startswith(client.final_text) and client.final_text
    assert late < WITHIN, f"the follower on B had the final {late:.1f} s after the {how} process exited"
