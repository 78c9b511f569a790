"""The example project under uvicorn for the browser checks, as ``make demo`` runs it (SQLite, in-memory layer)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx

from tests.browser.cdp import free_port
from tests.example_db import copy_example_db, example_env

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def example_server(var_dir: Path, settings_module: str = "example_project.settings", **extra_env: str) -> Iterator[str]:
    """Put a migrated database with the demo user in ``var_dir`` and serve the example project from ``var_dir``; yields its base URL."""
    env = example_env(var_dir, settings_module, **extra_env)
    copy_example_db(var_dir, settings_module, **extra_env)
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
