"""A private, throwaway redis-server on a free port, that a test may stop and start again.

Never the machine's shared Redis: fault tests stop this one. It keeps nothing
on disk (``--save "" --appendonly no``), so a restart loses every group
membership, as a Redis restart without persistence does in production.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from agent_persistence.testing.network import free_port

REDIS_SERVER = shutil.which("redis-server")


def require_redis_server() -> str:
    """The redis-server binary; skips the test without one (fails in CI, where it must run)."""
    if REDIS_SERVER is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but redis-server is not installed: the Redis fault tests must run in CI.")
        pytest.skip("redis-server is not installed")
    return REDIS_SERVER


class RedisServer:
    def __init__(self) -> None:
        self.binary = require_redis_server()
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="agent_persistence_redis_")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--logfile", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"redis-server on port {self.port} exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as connection:
                    connection.sendall(b"PING\r\n")
                    if connection.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"redis-server on port {self.port} did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
