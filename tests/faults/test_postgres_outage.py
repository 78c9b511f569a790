"""PostgreSQL restarted, and stopped for 100 s, under streaming turns on two real server processes.

The servers run on a private PostgreSQL cluster of the test's own (never the
machine's shared one). Three turns stream on server a, each followed by a
socket on server b (no shared channel layer: b follows the recording). The
database is then restarted, or stopped for ``AP_FAULT_OUTAGE_SECONDS`` (100 by
default). Afterwards: every turn ends with the exact answer stored, nothing
committed is lost, every follower ends with exactly that text, and with the
clients gone the servers run no more transactions (no leaked follower).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any, Iterator

import pytest
from asgiref.sync import async_to_sync

from agent_persistence.testing.faults import PrivatePostgres
from tests.agents import ANSWER
from tests.realtime.client import StreamClient
from tests.realtime.servers import ROOT, Server, receive, send, socket_to

pytestmark = [
    pytest.mark.timeout(600),
    # It starts a PostgreSQL of its own whatever the suite runs on: once per CI run, in the PostgreSQL leg.
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="the PostgreSQL outage scenarios run with the PostgreSQL suite (DATABASE_URL=postgres://...)",
    ),
]

TURNS = 3
OUTAGE = float(os.environ.get("AP_FAULT_OUTAGE_SECONDS", "100"))


@pytest.fixture(scope="module")
def database() -> Iterator[PrivatePostgres]:
    with PrivatePostgres() as server:
        yield server


def django_env(server: PrivatePostgres, name: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL", "AP_TEST_DB_NAME")}
    env.update({
        "DATABASE_URL": server.url(name),
        "DJANGO_SETTINGS_MODULE": "tests.realtime.server_settings",
        "PYTHONPATH": str(ROOT),
        "AP_FAST_TIMINGS": "1",
        "AP_CHUNK_DELAY": "0.1",
    })
    return env


def prepared(server: PrivatePostgres, name: str) -> tuple[dict[str, str], dict[str, Any]]:
    server.create_database(name)
    env = django_env(server, name)
    subprocess.run([sys.executable, "-m", "django", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True,
                   timeout=180)
    made = subprocess.run([sys.executable, "-m", "tests.faults.prepare", str(TURNS)], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True, timeout=120)
    return env, json.loads(made.stdout.strip().splitlines()[-1])


def stored_answers(server: PrivatePostgres, name: str) -> dict[str, list[tuple[str, Any, Any]]]:
    with server.connect(name) as connection:
        rows = connection.execute(
            "SELECT conversation_id::text, role, content, metadata FROM agent_persistence_message ORDER BY position"
        ).fetchall()
    answers: dict[str, list[tuple[str, Any, Any]]] = {}
    for conversation_id, role, content, metadata in rows:
        answers.setdefault(conversation_id, []).append((role, content, (metadata or {}).get("stop_reason")))
    return answers


@pytest.mark.parametrize("outage", [0.0, OUTAGE], ids=["restart", "stopped"])
def test_turns_and_followers_survive_a_postgres_outage(database: PrivatePostgres, outage: float) -> None:
    name = f"faults_{int(outage)}"
    env, made = prepared(database, name)
    servers = [Server(env, "fault-a"), Server(env, "fault-b")]
    try:
        for server in servers:
            server.wait_ready()
        figures = async_to_sync(drive)(database, servers, made, outage)
    finally:
        for server in servers:
            server.stop()
    answers = stored_answers(database, name)
    for conversation_id in made["conversations"]:
        assert answers[conversation_id] == [
            ("user", "go", None), ("assistant", ANSWER, "completed"),
        ], answers.get(conversation_id)
    print(f"\npostgres {'restart' if not outage else f'stopped {outage:.0f} s'}: {figures}")


async def drive(database: PrivatePostgres, servers: list[Server], made: dict[str, Any], outage: float) -> dict[str, Any]:
    a, b = servers
    key, conversation_ids = made["session"], made["conversations"]
    clients = [StreamClient() for _ in conversation_ids]
    async with _sockets(b, conversation_ids, key) as followers, _sockets(a, conversation_ids, key) as producers:
        for follower, client in zip(followers, clients):
            await send(follower, {"type": "attach"})
            await receive(follower, client, until="status")
        for producer in producers:
            await send(producer, {"type": "start", "content": "go"})
        await asyncio.gather(*(receive(f, c, min_text=len(ANSWER) // 4, timeout=60) for f, c in zip(followers, clients)))
        database.stop("immediate" if outage else "fast")
        await asyncio.sleep(outage)
        database.start()
        restarted = time.monotonic()
        await asyncio.gather(*(receive(f, c, until="final", timeout=outage + 120) for f, c in zip(followers, clients)))
        recovered = time.monotonic() - restarted
    for client in clients:
        assert client.text == ANSWER and client.final_text == ANSWER, (len(client.text), client.final_text)
    lost = sum(max(0, len(ANSWER) - len(client.text)) for client in clients)
    name = f"faults_{int(outage)}"
    await asyncio.sleep(2)  # the sockets' followers wind down
    before = database.commits(name)
    await asyncio.sleep(3)
    idle_commits = database.commits(name) - before
    assert idle_commits <= 5, f"{idle_commits} transactions in 3 s with no client and no turn: a follower leaked"
    return {"turns": len(clients), "chars_lost": lost, "chars_duplicated": 0, "recovered_s": round(recovered, 1),
            "idle_commits_3s": idle_commits}


class _sockets:
    """One socket per conversation to ``server``, closed together."""

    def __init__(self, server: Server, conversation_ids: list[str], key: str) -> None:
        self.contexts = [socket_to(server, conversation_id, key) for conversation_id in conversation_ids]

    async def __aenter__(self) -> list[Any]:
        return [await context.__aenter__() for context in self.contexts]

    async def __aexit__(self, *exc_info: Any) -> None:
        for context in self.contexts:
            await context.__aexit__(*exc_info)
