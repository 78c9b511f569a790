"""``make demo PORT=...``, the README's first command: it serves the demo on the port asked for, and a
port that is taken stops it with a clear message and a non-zero exit (daphne's runserver alone
would log "Listen failure" and run on without listening).

Both run the Makefile for real, on this test run's own virtualenv (``-o`` keeps make from
reinstalling it) and with the demo's database in a temporary folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from agent_persistence.testing.network import free_port

ROOT = Path(__file__).resolve().parents[2]


def make_demo(port: int) -> list[str]:
    venv = Path(sys.prefix)
    return ["make", "--no-print-directory", "-o", f"{venv}/.installed", "demo", f"PORT={port}", f"VENV={venv}"]


def demo_env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "AGENT_PERSISTENCE_VAR_DIR": str(tmp_path)}
    for name in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    return env


def test_a_taken_port_stops_make_demo_with_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(make_demo(port), cwd=ROOT, env=demo_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert f"make demo: port {port} on 127.0.0.1 is taken; stop what listens there, or run: make demo PORT=8001" in result.stderr
    assert not (tmp_path / "db.sqlite3").exists(), "nothing may run once the port is known to be taken"


def test_make_demo_serves_the_port_it_is_given(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "demo.log"
    with log.open("w") as output:
        demo = subprocess.Popen(make_demo(port), cwd=ROOT, env=demo_env(tmp_path), stdout=output,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert demo.poll() is None, f"make demo exited with {demo.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the demo did not answer on port {port}:\n{log.read_text()}"
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/admin/login/", timeout=30)
                break
            except httpx.HTTPError:
                time.sleep(0.5)
        assert page.status_code == 200
        assert "Created superuser demo / demo." in log.read_text()
        # The demo page imports the TypeScript client's committed ESM build: served as a static file, no bundler.
        for name in ("index.js", "client.js", "emitter.js"):
            module = httpx.get(f"http://127.0.0.1:{port}/static/agent_persistence/client/{name}", timeout=30)
            assert module.status_code == 200 and "javascript" in module.headers["content-type"], (name, module.status_code)
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        try:
            demo.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(10)
