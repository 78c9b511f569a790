"""A small Chrome DevTools Protocol client: headless Chromium driven over its debugging websocket.

Enough for the demo's browser checks: open a tab, set a cookie, navigate,
evaluate JavaScript, take a screenshot. Uses the ``websockets`` and ``httpx``
packages the test suite already has; Chromium comes from Debian's package.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import websockets

from agent_persistence.testing.network import free_port

CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1000,900",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")



class Chromium:
    """A headless Chromium process with a debugging port; ``with Chromium() as browser``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="ap-chromium-")
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "Chromium":
        path = chromium_path()
        assert path, "Chromium is not installed (Debian package: chromium)"
        self.process = subprocess.Popen(
            [path, *CHROMIUM_FLAGS, f"--remote-debugging-port={self.port}", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/json/version", timeout=1).raise_for_status()
                return self
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("Chromium did not open its debugging port.")

    def __exit__(self, *exc: Any) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def new_tab(self) -> str:
        """The debugging websocket URL of a new blank tab."""
        response = httpx.put(f"http://127.0.0.1:{self.port}/json/new?about:blank", timeout=10)
        return response.json()["webSocketDebuggerUrl"]


class Tab:
    """One page, driven over its debugging websocket: ``async with Tab(url) as tab``."""

    def __init__(self, debugger_url: str) -> None:
        self.debugger_url = debugger_url
        self.ids = itertools.count(1)

    async def __aenter__(self) -> "Tab":
        self.socket = await websockets.connect(self.debugger_url, max_size=64 * 1024 * 1024)
        await self.call("Page.enable")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.socket.close()

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        await self.socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            reply = json.loads(await asyncio.wait_for(self.socket.recv(), 30))
            if reply.get("id") == call_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    async def set_cookie(self, url: str, name: str, value: str) -> None:
        await self.call("Network.setCookie", url=url, name=name, value=value)

    async def goto(self, url: str) -> None:
        await self.call("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'")

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.1)
        raise AssertionError(f"Timed out in the browser waiting for: {expression}")

    async def screenshot(self, path: Path) -> Path:
        await self.call("Page.bringToFront")  # a background tab paints nothing
        data = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(data["data"]))
        return path
