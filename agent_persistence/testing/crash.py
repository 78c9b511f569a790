"""The crash test: two real server processes, one shared store, a producer killed mid-answer.

Server A produces a long turn; a client follows it on server B over the
websocket protocol; A is SIGKILLed mid-answer; the client asks B to resume
the dead turn and follows it to the end. The report says what a user would
have seen: characters lost or duplicated, how many producers finished the
turn, and how long the takeover took. ``manage.py crash_test`` runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

import websockets
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model

from ..conf import app_settings
from ..scope import Scope
from ..stores import conversation_store, run_store
from .network import free_port


@dataclass
class CrashReport:
    answer: str = ""
    received: str = ""
    lost: int = 0
    duplicated: int = 0
    frames: int = 0
    finished_runs: int = 0
    lost_runs: int = 0
    kill_at_chars: int = 0
    takeover_seconds: float = 0.0
    stop_reason: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.finished_runs == 1 and self.stop_reason == "completed"

    def lines(self) -> list[str]:
        return [
            f"answer length          {len(self.answer)} characters",
            f"killed server A after  {self.kill_at_chars} characters",
            f"lost characters        {self.lost}",
            f"duplicated characters  {self.duplicated}",
            f"frames received        {self.frames}",
            f"runs that finished     {self.finished_runs} (duplicate producers: {max(0, self.finished_runs - 1)})",
            f"runs recorded as lost  {self.lost_runs}",
            f"takeover time          {self.takeover_seconds:.2f} s (SIGKILL to the first frame of the new producer)",
            f"stop reason            {self.stop_reason}",
            *self.notes,
            "PASSED" if self.passed else "FAILED",
        ]



class ServerProcess:
    """``uvicorn`` serving the project's ASGI_APPLICATION on a loopback port."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = free_port()
        module, _, attribute = settings.ASGI_APPLICATION.rpartition(".")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", f"{module}:{attribute}", "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "warning", "--lifespan", "off"],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Server {self.name} exited with {self.process.returncode}.")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"Server {self.name} did not start.")

    def url(self, conversation_id: uuid.UUID) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/conversations/{conversation_id}/"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


def session_for(username: str) -> str:
    """A session cookie value for ``username`` (what a login would give), for the websocket handshake."""
    user_model = get_user_model()
    user = user_model._default_manager.get(**{user_model.USERNAME_FIELD: username})
    engine = import_module(settings.SESSION_ENGINE)
    session = engine.SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key


class Follower:
    """A careful websocket client: it keeps the text it holds and appends only what it lacks."""

    def __init__(self, report: CrashReport) -> None:
        self.report = report
        self.text = ""
        self.final: dict[str, Any] | None = None
        self.killed_at: float | None = None
        self.first_delta_after_kill: float | None = None

    def apply(self, frame: dict[str, Any]) -> None:
        self.report.frames += 1
        if frame["type"] == "delta":
            if self.killed_at is not None and self.first_delta_after_kill is None:
                self.first_delta_after_kill = time.monotonic()
            offset, text = frame["offset"], frame["text"]
            if offset > len(self.text):
                self.report.notes.append(f"a gap: a frame at offset {offset} while holding {len(self.text)} characters")
                offset = len(self.text)
            self.text += text[len(self.text) - offset :]
        elif frame["type"] == "final":
            self.final = frame


def compare(report: CrashReport, answer: str, received: str) -> None:
    """Lost: characters of the answer the client never got; duplicated: characters it got too many."""
    common = 0
    for x, y in zip(answer, received):
        if x != y:
            break
        common += 1
    report.answer, report.received = answer, received
    report.lost = len(answer) - common
    report.duplicated = len(received) - common


async def run_crash_test(*, username: str, agent: str, kill_after_chars: int, timeout: float) -> CrashReport:
    report = CrashReport(kill_at_chars=kill_after_chars)
    user_model = get_user_model()
    user = await sync_to_async(user_model._default_manager.get)(**{user_model.USERNAME_FIELD: username})
    scope = Scope(tenant="", user=str(user.pk))
    conversation = await conversation_store().acreate(scope, id=uuid.uuid4(), agent=agent, title="crash test")
    cookie = await sync_to_async(session_for)(username)
    servers = [ServerProcess("A"), ServerProcess("B")]
    try:
        for server in servers:
            server.wait_ready()
        a, b = servers
        headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}", "Origin": f"http://127.0.0.1:{b.port}"}
        follower = Follower(report)
        async with websockets.connect(b.url(conversation.pk), additional_headers=headers) as on_b:
            await on_b.send(json.dumps({"type": "attach"}))
            on_a = await websockets.connect(
                a.url(conversation.pk), additional_headers={**headers, "Origin": f"http://127.0.0.1:{a.port}"}, close_timeout=0.1
            )
            await on_a.send(json.dumps({"type": "start", "content": "crash test", "agent": agent}))
            await follow_until(on_b, follower, lambda: len(follower.text) >= kill_after_chars, timeout)
            a.kill()
            follower.killed_at = time.monotonic()
            report.kill_at_chars = len(follower.text)
            await resume_when_dead(on_b, follower, timeout)
            await follow_until(on_b, follower, lambda: follower.final is not None, timeout)
            on_a.transport.abort()
        if follower.first_delta_after_kill is not None:
            report.takeover_seconds = follower.first_delta_after_kill - follower.killed_at
        report.stop_reason = follower.final.get("stop_reason", "") if follower.final else "none"
        compare(report, follower.final["message"]["content"] if follower.final else "", follower.text)
        runs = (await run_store().alist(scope, conversation.pk, limit=app_settings.MAX_PAGE_SIZE)).items
        report.finished_runs = sum(1 for run in runs if run.status == "completed")
        report.lost_runs = sum(1 for run in runs if run.error and run.error.get("code") == "producer_lost")
    finally:
        for server in servers:
            server.kill()
    return report


async def follow_until(socket: Any, follower: Follower, done: Any, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("The crash test timed out waiting for frames.")
        follower.apply(json.loads(await asyncio.wait_for(socket.recv(), remaining)))
    return time.monotonic()


async def resume_when_dead(socket: Any, follower: Follower, timeout: float) -> None:
    """Ask B to resume the turn until it may (the producer is judged dead after DEAD_AFTER)."""
    deadline = time.monotonic() + timeout + app_settings.DEAD_AFTER
    while time.monotonic() < deadline:
        await socket.send(json.dumps({"type": "resume"}))
        while True:
            frame = json.loads(await asyncio.wait_for(socket.recv(), timeout))
            if frame["type"] in ("resumed", "error"):
                break
            follower.apply(frame)
        if frame["type"] == "resumed":
            return
        await asyncio.sleep(0.2)
    raise TimeoutError("Server B never resumed the turn.")
