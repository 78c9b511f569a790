"""The demo page in real headless Chromium: stream, approve, a second tab, a reconnect, stop, reloads.

The page runs on the TypeScript client served as a static asset; a reloaded
page shows every answer once (mid-answer and after the end), which a
MutationObserver installed before the page's own scripts checks at every change.

The example project runs as it does for ``make demo`` (SQLite, in-memory
channel layer), under uvicorn, in its own folder; Chromium is Debian's.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from example_project.demo.agents import INTRO, OUTRO, words
from tests.browser.cdp import Chromium, Tab, chromium_path
from tests.browser.servers import example_server

ANSWER = "".join(words(INTRO)) + "".join(words(OUTRO))

pytestmark = pytest.mark.skipif(
    chromium_path() is None and not os.environ.get("CI"), reason="Chromium is not installed (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with example_server(tmp_path_factory.mktemp("demo")) as base:
        yield base


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


# The last answer shown (the live one while a turn streams), parenthesized so that `.includes(...)` applies to it.
LAST_ANSWER = "([...document.querySelectorAll('#transcript .msg.assistant')].map(e => e.textContent).pop() || '')"
LIVE = "(document.getElementById('live')?.textContent || '')"
APPROVAL_SHOWN = "document.getElementById('approval').style.display === 'block'"
DONE = "Boolean(demo.state.final) && document.getElementById('status').textContent === 'done'"


def test_stream_approve_second_tab_and_reconnect(demo_server: str, tmp_path: Path) -> None:
    cookie = session_cookie(demo_server)

    async def scenario() -> None:
        with Chromium() as browser:
            first = await open_tab(browser, demo_server, cookie)
            conversation = await first.evaluate("location.search")
            await first.evaluate("document.getElementById('send').requestSubmit()")
            await first.wait_for(LIVE + ".length > 20")
            second = await open_tab(browser, demo_server, cookie, "/" + conversation)  # joins mid-turn
            await second.wait_for(LIVE + ".length > 0")
            await first.wait_for(APPROVAL_SHOWN)
            await second.wait_for(APPROVAL_SHOWN)
            await first.evaluate("document.getElementById('approve').click()")
            await first.wait_for(LIVE + ".includes('Everything')")
            await first.evaluate("document.getElementById('reconnect').click()")  # drops the socket mid-answer
            for tab in (first, second):
                await tab.wait_for(DONE)
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
            await tab.wait_for(LIVE + ".length > 30")
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
                # Generous waits: a server process imports a framework on its first turn (seconds on a loaded machine).
                await tab.wait_for(APPROVAL_SHOWN, timeout=120)
                await tab.evaluate("document.getElementById('approve').click()")
                await tab.wait_for(DONE, timeout=120)
                assert (await tab.evaluate(LAST_ANSWER)).strip() == answer.strip(), agent
                await tab.__aexit__()

    asyncio.run(scenario())


#: Installed before the page's own scripts: the most copies of each marker the transcript ever showed.
COUNT_COPIES = """
window.maxCopies = {};
new MutationObserver(() => {
  const text = document.getElementById("transcript")?.textContent || "";
  for (const marker of %s) {
    window.maxCopies[marker] = Math.max(window.maxCopies[marker] || 0, text.split(marker).length - 1);
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""
INTRO_MARKER, OUTRO_MARKER = "Let me plan your evening", "Everything is set"
COPIES = "JSON.stringify(window.maxCopies)"


async def reload(tab: Tab) -> None:
    """Reload the page and wait until the new one is connected and shows its state."""
    await tab.evaluate("window.beforeReload = true")
    await tab.call("Page.reload")
    await tab.wait_for("!window.beforeReload && document.readyState === 'complete'")
    await tab.wait_for("!['connecting', 'disconnected'].includes(document.getElementById('status').textContent)")


def test_a_reloaded_page_shows_every_answer_once(demo_server: str) -> None:
    """Reload mid-answer (before the approval and after it) and after the end: each answer appears exactly once."""
    import json

    cookie = session_cookie(demo_server)

    async def scenario() -> None:
        with Chromium() as browser:
            tab = await Tab(browser.new_tab()).__aenter__()
            await tab.call("Page.addScriptToEvaluateOnNewDocument", source=COUNT_COPIES % json.dumps([INTRO_MARKER, OUTRO_MARKER]))
            await tab.set_cookie(demo_server, "sessionid", cookie)
            await tab.goto(demo_server + "/")
            await tab.wait_for("document.getElementById('status').textContent !== 'connecting'")
            await tab.evaluate("document.getElementById('send').requestSubmit()")
            await tab.wait_for(LIVE + ".length > 30")

            await reload(tab)  # mid-answer: the catch-up continues the live answer
            await tab.wait_for(APPROVAL_SHOWN)  # the approval is asked again on the new page
            assert json.loads(await tab.evaluate(COPIES)) == {INTRO_MARKER: 1, OUTRO_MARKER: 0}
            await tab.evaluate("document.getElementById('approve').click()")  # approve the tool from the page
            await tab.wait_for(LIVE + ".includes('Everything')")

            await reload(tab)  # mid-answer, after the approval
            await tab.wait_for(DONE)
            assert await tab.evaluate(LAST_ANSWER) == ANSWER
            assert json.loads(await tab.evaluate(COPIES)) == {INTRO_MARKER: 1, OUTRO_MARKER: 1}
            tools = await tab.evaluate("[...document.querySelectorAll('#transcript small.tool')].map(e => e.textContent)")
            assert len(tools) == 1 and "book_table" in tools[0] and '"booked":true' in tools[0], tools

            await reload(tab)  # after the end: the attach replays the final frame of a stored answer
            await tab.wait_for("document.getElementById('log').textContent === 'turn completed'")
            await tab.wait_for("document.getElementById('live') === null")
            assert json.loads(await tab.evaluate(COPIES)) == {INTRO_MARKER: 1, OUTRO_MARKER: 1}
            assert await tab.evaluate(LAST_ANSWER) == ANSWER
            assert await tab.evaluate("document.querySelectorAll('#transcript .msg').length") == 2  # the question, the answer
            await tab.__aexit__()

    asyncio.run(scenario())
