"""A live ASGI server for tests: uvicorn in its own OS process, on the test's database.

Usage (the test must use ``django_db(transaction=True)`` so the server sees its rows)::

    with live_server() as base_url:
        httpx.get(f"{base_url}/api/schema/")

The server runs ``tests.asgi:application`` with ``tests.settings`` and
``AP_TEST_DB_NAME`` set to the test database's name, on a free loopback port.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx
from django.db import connection

from agent_persistence.testing.network import free_port

ROOT = Path(__file__).resolve().parent.parent.parent



def server_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AP_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def wait_until_serving(base_url: str, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"The live server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            httpx.get(f"{base_url}/api/schema/", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"The live server did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def live_server(*, workers: int = 1, env: dict[str, str] | None = None, timeout: float = 30) -> Iterator[str]:
    """Start uvicorn on a free port; yield its base URL; stop it (SIGTERM, then SIGKILL)."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with tempfile.NamedTemporaryFile("w+b", prefix="live_server_", suffix=".log", delete=False) as log_file:
        log = Path(log_file.name)
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "tests.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--lifespan",
                "off",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=server_environment(env),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_serving(base_url, process, log, timeout)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.unlink(missing_ok=True)
