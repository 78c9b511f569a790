"""Two real uvicorn servers on a fresh database, for clients written in other languages (the TypeScript client's tests).

``python -m tests.clients.serve`` (from the repository root) migrates a fresh
database (a new SQLite file, or a new PostgreSQL database named after
``AGENT_PERSISTENCE_TEST_DB_SUFFIX`` when ``DATABASE_URL`` is set), creates a
user and a logged-in session, starts two servers of ``tests.realtime.asgi``
(``AP_FAST_TIMINGS=1``, Redis when ``REDIS_URL`` is set) and prints one JSON
line::

    {"servers": {"a": 41001, "b": 41002}, "control": 41003, "cookie": "sessionid=...", "database": "sqlite"}

The control port takes ``POST /conversations?agent=scripted`` (a new
conversation of the user: ``{"id": ...}``), ``POST /servers/<name>/kill``
(SIGKILL), ``POST /servers/<name>/stop`` (SIGTERM) and ``POST
/servers/<name>/start`` (again, on the same port). SIGTERM (or the parent
process going away) stops the servers and drops the database.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from agent_persistence.testing.network import free_port

ROOT = Path(__file__).resolve().parent.parent.parent


class ServerProcess:
    """One uvicorn process of ``tests.realtime.asgi`` that can be killed and started again on its port."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.env = env
        self.port = free_port()
        self.log_path = log_dir / f"server-{name}.log"
        self.process: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 30) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "tests.realtime.asgi:application", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning", "--ws", "websockets-sansio", "--lifespan", "off"],
            cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=log, text=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server {self.name} exited: {self.log_path.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"server {self.name} did not start within {timeout} s")

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def prepare_database(work_dir: Path) -> tuple[str, str]:
    """A fresh, migrated database: (its NAME for ``AP_TEST_DB_NAME``, its vendor)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        import psycopg

        name = f"agent_persistence_clients{os.environ.get('AGENT_PERSISTENCE_TEST_DB_SUFFIX', '')}"
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            connection.execute(f'CREATE DATABASE "{name}"')
        vendor = "postgresql"
    else:
        name, vendor = str(work_dir / "db.sqlite3"), "sqlite"
    os.environ["AP_TEST_DB_NAME"] = name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.realtime.server_settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    return name, vendor


def drop_database(name: str) -> None:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_session() -> tuple[Any, str]:
    """A user and the key of a logged-in session of theirs."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    user = get_user_model().objects.create_user("ts-client")
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    return user, str(store.session_key)


def make_conversation(user: Any, agent: str) -> str:
    from django.db import close_old_connections

    from agent_persistence.scope import Scope
    from agent_persistence.stores import conversation_store

    try:
        return str(conversation_store().create(Scope(tenant="", user=str(user.pk)), agent=agent).pk)
    finally:
        close_old_connections()


def server_environment(database_name: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "AP_TEST_DB_NAME": database_name,
        "AP_FAST_TIMINGS": "1",
        "AP_CHUNK_DELAY": os.environ.get("AP_CHUNK_DELAY", "0.04"),
        "DJANGO_SETTINGS_MODULE": "tests.realtime.server_settings",
        "PYTHONPATH": str(ROOT),
    })
    return env


def control_handler(user: Any, servers: dict[str, ServerProcess]) -> type[BaseHTTPRequestHandler]:
    class Control(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            url = urlparse(self.path)
            parts = [part for part in url.path.split("/") if part]
            try:
                if parts == ["conversations"]:
                    agent = parse_qs(url.query).get("agent", ["scripted"])[0]
                    self.answer(200, {"id": make_conversation(user, agent)})
                elif len(parts) == 3 and parts[0] == "servers" and parts[1] in servers:
                    server = servers[parts[1]]
                    if parts[2] == "kill":
                        server.signal(signal.SIGKILL)
                    elif parts[2] == "stop":
                        server.signal(signal.SIGTERM)
                    elif parts[2] == "start":
                        server.start()
                    else:
                        raise LookupError(parts[2])
                    self.answer(200, {"name": server.name, "port": server.port})
                else:
                    self.answer(404, {"error": f"no such control: {url.path}"})
            except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with it
                self.answer(500, {"error": repr(exc)})

        def answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Control


def main() -> None:
    work_dir = Path(tempfile.mkdtemp(prefix="agent_persistence_clients_"))
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    parent = os.getppid()
    database_name, vendor = prepare_database(work_dir)
    servers: dict[str, ServerProcess] = {}
    control = None
    try:
        user, session_key = make_session()
        env = server_environment(database_name)
        servers = {name: ServerProcess(name, env, work_dir) for name in ("a", "b")}
        for server in servers.values():
            server.start()
        control = ThreadingHTTPServer(("127.0.0.1", 0), control_handler(user, servers))
        threading.Thread(target=control.serve_forever, daemon=True).start()
        print(json.dumps({
            "servers": {name: server.port for name, server in servers.items()},
            "control": control.server_address[1],
            "cookie": f"sessionid={session_key}",
            "database": vendor,
            "redis": bool(os.environ.get("REDIS_URL")),
            "logs": str(work_dir),
        }), flush=True)
        while not stopping.wait(0.5):
            if os.getppid() != parent:
                break  # the test runner went away without stopping us
    finally:
        if control is not None:
            control.shutdown()
        for server in servers.values():
            server.signal(signal.SIGTERM)
        drop_database(database_name)
        if not os.environ.get("AP_KEEP_LOGS"):
            shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
