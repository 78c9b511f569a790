"""The example project under uvicorn for the browser checks, as ``make demo`` runs it (SQLite, in-memory layer)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx

from tests.browser.cdp import free_port

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def example_server(var_dir: Path, settings_module: str = "example_project.settings", **extra_env: str) -> Iterator[str]:
    """Migrate, make the demo user and serve the example project from ``var_dir``; yields its base URL."""
    env = {**os.environ, "AGENT_PERSISTENCE_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": settings_module, **extra_env}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    for command in (["migrate", "-v0"], ["demo_user"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "example_project.asgi:application", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(base + "/admin/login/", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
