"""The real ``ai`` and ``@ai-sdk/react`` packages (useChat) against the AI SDK endpoints, in headless Chromium.

``tests/browser/ai_sdk/`` is a page of its own (its own package.json and lockfile: ``ai``,
``@ai-sdk/react``, React 19 and esbuild at exact versions, ``npm ci`` from the lockfile);
``build.mjs`` bundles its ``app.tsx`` into one file, which the example project serves as static
files (settings :mod:`tests.browser.ai_sdk_settings`) under uvicorn, from the same origin as the
API, as for ``make demo``. The page uses ``DefaultChatTransport`` as it comes, with only ``api``
set, and ``useChat({ resume: true })``.

- stream the demo agent's answer, approve its tool from the page (``addToolApprovalResponse``),
  reload mid-answer before and after the approval and after the end: a MutationObserver installed
  before the page's own scripts counts the copies of each part of the answer at every change of
  the DOM: never more than 1;
- stop mid-answer (``stop()`` and ``POST turns/cancel/``): the turn ends cancelled with its partial
  answer, and the page shows exactly that;
- SIGKILL the producer's server mid-answer, start another server process on the same port (the
  page's origin), reload: the resume stream takes the dead turn over on the new process, and the
  page ends with the whole answer, each part shown at most once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from example_project.demo.agents import LONG_ANSWER
from tests.browser.cdp import Chromium, Tab, chromium_path, free_port
from tests.browser.servers import ROOT, example_server
from tests.browser.test_demo import ANSWER, COPIES, COUNT_COPIES, INTRO_MARKER, OUTRO_MARKER, session_cookie
from tests.example_db import copy_example_db, example_env
from tests.npm import npm_ci

PAGE = Path(__file__).resolve().parent / "ai_sdk"

pytestmark = pytest.mark.skipif(
    chromium_path() is None and not os.environ.get("CI"), reason="Chromium is not installed (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page, bundled: ``npm ci`` (when node_modules is missing or stale against the lockfile), then ``build.mjs``."""
    npm_ci(PAGE)
    out = tmp_path_factory.mktemp("ai-sdk-page")
    result = subprocess.run(["node", "build.mjs", str(out)], check=False, cwd=PAGE, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"build.mjs failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def page_server(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with example_server(tmp_path_factory.mktemp("ai-sdk"), "tests.browser.ai_sdk_settings", AP_AI_SDK_PAGE=str(bundle)) as base:
        yield base


def new_conversation(base: str, cookie: str) -> str:
    """A new conversation of the demo user (the demo page's ``/`` makes one and redirects to ``/?c=<id>``)."""
    response = httpx.get(base + "/", cookies={"sessionid": cookie})
    assert response.status_code == 302, response.status_code
    return response.headers["location"].split("c=", 1)[1]


STATUS = "(document.getElementById('status')?.textContent || 'loading')"
ASSISTANT = "[...document.querySelectorAll('#transcript .msg.assistant .text')].map(e => e.textContent)"
LAST_TEXT = f"({ASSISTANT}.at(-1) || '')"
APPROVE_SHOWN = "document.getElementById('approve') !== null"


async def open_page(browser: Chromium, base: str, cookie: str, conversation: str, agent: str) -> Tab:
    tab = await Tab(browser.new_tab()).__aenter__()
    await tab.call("Page.addScriptToEvaluateOnNewDocument", source=COUNT_COPIES % json.dumps([INTRO_MARKER, OUTRO_MARKER]))
    await tab.set_cookie(base, "sessionid", cookie)
    await tab.goto(f"{base}/static/ai-sdk/index.html?c={conversation}&agent={agent}")
    await tab.wait_for(STATUS + " !== 'loading'", timeout=30)
    return tab


async def reload(tab: Tab) -> None:
    """Reload the page and wait until the new one has read the transcript and mounted the chat."""
    await tab.evaluate("window.beforeReload = true")
    await tab.call("Page.reload")
    await tab.wait_for("!window.beforeReload && document.readyState === 'complete'")
    await tab.wait_for(STATUS + " !== 'loading'", timeout=30)


def test_use_chat_streams_approves_a_tool_and_shows_every_character_once_across_reloads(page_server: str) -> None:
    cookie = session_cookie(page_server)
    conversation = new_conversation(page_server, cookie)

    async def scenario() -> None:
        with Chromium() as browser:
            tab = await open_page(browser, page_server, cookie, conversation, "demo")
            await tab.evaluate("document.getElementById('send').click()")
            await tab.wait_for(LAST_TEXT + ".length > 30", timeout=30)

            await reload(tab)  # mid-answer, before the approval: useChat's resume replays the turn in flight
            await tab.wait_for(APPROVE_SHOWN, timeout=30)  # the approval request, on the new page
            assert await tab.evaluate("document.querySelector('.tool').dataset.state") == "approval-requested"
            assert json.loads(await tab.evaluate(COPIES)) == {INTRO_MARKER: 1, OUTRO_MARKER: 0}
            assert await tab.evaluate("document.querySelectorAll('#transcript .msg').length") == 2  # the question, the answer
            await tab.evaluate("document.getElementById('approve').click()")  # addToolApprovalResponse: the turn goes on
            await tab.wait_for(LAST_TEXT + ".includes('Everything')", timeout=30)
            assert await tab.evaluate("document.querySelector('.tool').dataset.state") == "output-available"

            await reload(tab)  # mid-answer (or just after the end on a fast machine), after the approval
            await tab.wait_for(STATUS + " === 'ready' && " + LAST_TEXT + " === " + json.dumps(ANSWER), timeout=30)
            assert json.loads(await tab.evaluate(COPIES)) == {INTRO_MARKER: 1, OUTRO_MARKER: 1}
            metadata = json.loads(await tab.evaluate("document.querySelector('#transcript .msg.assistant').dataset.metadata"))
            if metadata is not None:  # the streamed message (a reload just after the end shows the stored one)
                assert metadata["conversationId"] == conversation and metadata["state"] == "done", metadata

            await reload(tab)  # after the end: the stored transcript, and the resume stream is 204
            await tab.wait_for(STATUS + " === 'ready' && " + LAST_TEXT + " === " + json.dumps(ANSWER), timeout=30)
            assert await tab.evaluate(ASSISTANT) == [ANSWER]
            assert await tab.evaluate("document.querySelectorAll('#transcript .msg').length") == 2
            assert json.loads(await tab.evaluate(COPIES)) == {INTRO_MARKER: 1, OUTRO_MARKER: 1}
            assert await tab.evaluate("document.getElementById('error').textContent") == ""
            await tab.__aexit__()

    asyncio.run(scenario())


def test_stop_ends_the_turn_cancelled_and_the_page_keeps_exactly_the_partial_answer(page_server: str) -> None:
    cookie = session_cookie(page_server)
    conversation = new_conversation(page_server, cookie)

    async def scenario() -> None:
        with Chromium() as browser:
            tab = await open_page(browser, page_server, cookie, conversation, "long")
            await tab.evaluate("document.getElementById('send').click()")
            await tab.wait_for(LAST_TEXT + ".length > 100", timeout=30)
            await tab.evaluate("document.getElementById('stop').click()")
            await tab.wait_for(STATUS + " === 'ready'", timeout=30)
            with httpx.Client(base_url=page_server, cookies={"sessionid": cookie}, timeout=10) as client:
                deadline = asyncio.get_running_loop().time() + 15
                while client.get(f"/api/conversations/{conversation}/").json()["last_turn_status"] == "running":
                    assert asyncio.get_running_loop().time() < deadline, "the turn was not stopped"
                    await asyncio.sleep(0.1)
                assert client.get(f"/api/conversations/{conversation}/").json()["last_turn_status"] == "cancelled"
                stored = client.get(f"/api/conversations/{conversation}/messages/").json()["items"][-1]["content"]
            assert 100 <= len(stored) < len(LONG_ANSWER) and LONG_ANSWER.startswith(stored)
            shown = await tab.evaluate(LAST_TEXT)
            assert stored.startswith(shown), "the page shows no text the turn did not keep"
            await reload(tab)  # the stored partial answer, once
            await tab.wait_for(STATUS + " === 'ready' && " + LAST_TEXT + " === " + json.dumps(stored), timeout=30)
            assert await tab.evaluate(ASSISTANT) == [stored]
            await tab.__aexit__()

    asyncio.run(scenario())


class PageServer:
    """The example project under uvicorn on a fixed port, that can be SIGKILLed and started again (a new process)."""

    def __init__(self, var_dir: Path, bundle: Path) -> None:
        self.env = example_env(var_dir, "tests.browser.ai_sdk_settings", AP_AI_SDK_PAGE=str(bundle))
        copy_example_db(var_dir, "tests.browser.ai_sdk_settings", AP_AI_SDK_PAGE=str(bundle))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "example_project.asgi:application", "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "warning"], cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(self.base + "/admin/login/", timeout=1)
                return
            except httpx.HTTPError:
                assert time.monotonic() < deadline and self.process.poll() is None, "the server did not start"
                time.sleep(0.1)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@contextlib.contextmanager
def page_server_process(var_dir: Path, bundle: Path) -> Iterator[PageServer]:
    server = PageServer(var_dir, bundle)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_after_a_sigkill_of_the_producers_server_a_reload_resumes_the_turn_on_a_new_process(
    bundle: Path, tmp_path: Path
) -> None:
    with page_server_process(tmp_path, bundle) as server:
        cookie = session_cookie(server.base)
        conversation = new_conversation(server.base, cookie)

        async def scenario() -> None:
            with Chromium() as browser:
                tab = await open_page(browser, server.base, cookie, conversation, "demo")
                await tab.evaluate("document.getElementById('send').click()")
                await tab.wait_for(LAST_TEXT + ".length > 30", timeout=30)
                server.kill()  # the producer dies mid-answer, its heartbeat with it
                killed = time.monotonic()
                server.start()  # another process on the page's origin
                await reload(tab)
                await tab.wait_for(APPROVE_SHOWN, timeout=30)  # the rest of the intro, from the new process
                print(f"\nSIGKILL to the approval request on the new process: {time.monotonic() - killed:.2f} s")
                await tab.evaluate("document.getElementById('approve').click()")
                await tab.wait_for(STATUS + " === 'ready' && " + LAST_TEXT + " === " + json.dumps(ANSWER), timeout=30)
                assert json.loads(await tab.evaluate(COPIES)) == {INTRO_MARKER: 1, OUTRO_MARKER: 1}
                assert await tab.evaluate("document.getElementById('error').textContent") == ""
                metadata = json.loads(await tab.evaluate("document.querySelector('#transcript .msg.assistant').dataset.metadata"))
                assert metadata["epoch"] >= 2, metadata  # the runs after the takeover
                await tab.__aexit__()

        asyncio.run(scenario())
        with httpx.Client(base_url=server.base, cookies={"sessionid": cookie}, timeout=10) as client:
            stored = client.get(f"/api/conversations/{conversation}/messages/").json()["items"]
        assert [message["content"] for message in stored if message["role"] == "assistant"] == [ANSWER]
