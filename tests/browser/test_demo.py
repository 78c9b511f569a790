"""The demo page in real headless Chromium: stream, approve, a second tab, a reconnect, stop.

The example project runs as it does for ``make demo`` (SQLite, in-memory
channel layer), under uvicorn, in its own folder; Chromium is Debian's.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from example_project.demo.agents import INTRO, OUTRO, words
from tests.browser.cdp import Chromium, Tab, chromium_path, free_port

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "".join(words(INTRO)) + "".join(words(OUTRO))

pytestmark = pytest.mark.skipif(
    chromium_path() is None and not os.environ.get("CI"), reason="Chromium is not installed (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {**os.environ, "AGENT_PERSISTENCE_VAR_DIR": str(tmp_path_factory.mktemp("demo")), "DJANGO_SETTINGS_MODULE": "example_project.settings"}
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
        server.wait(10)


def session_cookie(base: str) -> str:
    with httpx.Client(base_url=base) as client:
        page = client.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        client.post("/admin/login/", data={"username": "demo", "password": "demo", "csrfmiddlewaretoken": token})
        return client.cookies["sessionid"]


async def open_tab(browser: Chromium, base: str, cookie: str, path: str = "/") -> Tab:
    tab = await Tab(browser.new_tab()).__aenter__()
    await tab.set_cookie(base, "sessionid", cookie)
    await tab.goto(base + path)
    await tab.wait_for("document.getElementById('status').textContent !== 'connecting'")
    return tab


LAST_ANSWER = "[...document.querySelectorAll('#transcript .msg.assistant')].map(e => e.textContent).pop() || ''"


def test_stream_approve_second_tab_and_reconnect(demo_server: str, tmp_path: Path) -> None:
    cookie = session_cookie(demo_server)

    async def scenario() -> None:
        with Chromium() as browser:
            first = await open_tab(browser, demo_server, cookie)
            conversation = await first.evaluate("location.search")
            await first.evaluate("document.getElementById('send').requestSubmit()")
            await first.wait_for("document.getElementById('live').textContent.length > 20")
            second = await open_tab(browser, demo_server, cookie, "/" + conversation)  # joins mid-turn
            await second.wait_for("document.getElementById('live').textContent.length > 0")
            await first.wait_for("document.getElementById('approval').style.display === 'block'")
            await second.wait_for("document.getElementById('approval').style.display === 'block'")
            await first.evaluate("document.getElementById('approve').click()")
            await first.wait_for("document.getElementById('live').textContent.includes('Everything')")
            await first.evaluate("document.getElementById('reconnect').click()")  # drops the socket mid-answer
            for tab in (first, second):
                await tab.wait_for(LAST_ANSWER + ".includes('carries on')")
                assert await tab.evaluate(LAST_ANSWER) == ANSWER
                assert await tab.evaluate("document.body.dataset.streamMatched") == "true"
            await first.screenshot(Path(os.environ.get("AP_DEMO_SCREENSHOT", tmp_path / "demo.png")))
            await first.__aexit__()
            await second.__aexit__()

    asyncio.run(scenario())
    assert Path(os.environ.get("AP_DEMO_SCREENSHOT", tmp_path / "demo.png")).stat().st_size > 10_000


def test_stop_keeps_the_partial_answer(demo_server: str) -> None:
    cookie = session_cookie(demo_server)

    async def scenario() -> None:
        with Chromium() as browser:
            tab = await open_tab(browser, demo_server, cookie)
            await tab.evaluate("document.getElementById('send').requestSubmit()")
            await tab.wait_for("document.getElementById('live').textContent.length > 30")
            await tab.evaluate("document.getElementById('stop').click()")
            await tab.wait_for("document.getElementById('log').textContent === 'turn cancelled'")
            partial = await tab.evaluate(LAST_ANSWER)
            assert partial and ANSWER.startswith(partial) and partial != ANSWER
            await tab.__aexit__()

    asyncio.run(scenario())


def test_the_demo_page_runs_each_framework_agent(demo_server: str) -> None:
    """Pick the LangGraph, Pydantic AI or OpenAI Agents SDK agent on the page, approve its tool, read its answer."""
    from tests.integrations.test_example_agents import EXPECTED

    cookie = session_cookie(demo_server)

    async def scenario() -> None:
        with Chromium() as browser:
            for agent, answer in sorted(EXPECTED.items()):
                tab = await open_tab(browser, demo_server, cookie)
                options = await tab.evaluate("[...document.querySelectorAll('#agent option')].map(o => o.value).join(',')")
                assert agent in options.split(","), options
                await tab.evaluate(f"document.getElementById('agent').value = {agent!r}")
                await tab.evaluate("document.getElementById('send').requestSubmit()")
                await tab.wait_for("document.getElementById('approval').style.display === 'block'")
                await tab.evaluate("document.getElementById('approve').click()")
                await tab.wait_for(LAST_ANSWER + f".includes({answer.strip()!r})")
                assert (await tab.evaluate(LAST_ANSWER)).strip() == answer.strip(), agent
                await tab.__aexit__()

    asyncio.run(scenario())
