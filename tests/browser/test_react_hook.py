"""The React hook ``useConversation`` in real headless Chromium: stream, approve from the page, reloads.

``tests/browser/react_hook/`` is a page of its own (its own package.json and
lockfile: React 19 and esbuild, ``npm ci`` from the lockfile); ``build.mjs``
bundles its ``app.tsx``, which renders the hook from ``clients/typescript/src``,
into one file. The example project serves it as static files (settings
:mod:`tests.browser.react_hook_settings`), under uvicorn, from the same origin
as the API and the websocket, as for ``make demo``. A reloaded page shows every
answer once (mid-answer, before and after the approval, and after the end),
which a MutationObserver installed before the page's own scripts checks at every
change.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.cdp import Chromium, Tab, chromium_path
from tests.browser.servers import example_server
from tests.browser.test_demo import ANSWER, COPIES, COUNT_COPIES, INTRO_MARKER, OUTRO_MARKER, session_cookie
from tests.npm import npm_ci

PAGE = Path(__file__).resolve().parent / "react_hook"

pytestmark = pytest.mark.skipif(
    chromium_path() is None and not os.environ.get("CI"), reason="Chromium is not installed (apt-get install chromium)"
)


def node(*command: str, timeout: float) -> None:
    result = subprocess.run(command, check=False, cwd=PAGE, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page, bundled: ``npm ci`` (when node_modules is missing or stale against the lockfile), then ``build.mjs``."""
    npm_ci(PAGE)
    out = tmp_path_factory.mktemp("react-hook-page")
    node("node", "build.mjs", str(out), timeout=300)
    return out


@pytest.fixture(scope="module")
def hook_server(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with example_server(
        tmp_path_factory.mktemp("react-hook"), "tests.browser.react_hook_settings", AP_REACT_HOOK_PAGE=str(bundle)
    ) as base:
        yield base


def new_conversation(base: str, cookie: str) -> str:
    """A new conversation of the demo user (the demo page's ``/`` makes one and redirects to ``/?c=<id>``)."""
    response = httpx.get(base + "/", cookies={"sessionid": cookie})
    assert response.status_code == 302, response.status_code
    return response.headers["location"].split("c=", 1)[1]


STATUS = "(document.getElementById('status')?.textContent || 'connecting')"
LIVE = "(document.getElementById('live')?.textContent || '')"
ANSWERS = "[...document.querySelectorAll('#transcript .msg.assistant')].map(e => e.textContent)"
APPROVE_SHOWN = "document.getElementById('approve') !== null"


async def reload(tab: Tab) -> None:
    """Reload the page and wait until the new one is connected."""
    await tab.evaluate("window.beforeReload = true")
    await tab.call("Page.reload")
    await tab.wait_for("!window.beforeReload && document.readyState === 'complete'")
    await tab.wait_for(STATUS + " !== 'connecting'", timeout=60)


def test_the_hook_shows_every_answer_once_across_reloads(hook_server: str) -> None:
    """Start a turn, reload mid-answer (before and after approving from the page) and after the end."""
    cookie = session_cookie(hook_server)
    conversation = new_conversation(hook_server, cookie)

    async def scenario() -> None:
        with Chromium() as browser:
            tab = await Tab(browser.new_tab()).__aenter__()
            await tab.call(
                "Page.addScriptToEvaluateOnNewDocument", source=COUNT_COPIES % json.dumps([INTRO_MARKER, OUTRO_MARKER])
            )
            await tab.set_cookie(hook_server, "sessionid", cookie)
            await tab.goto(f"{hook_server}/static/react-hook/index.html?c={conversation}")
            await tab.wait_for(STATUS + " !== 'connecting'", timeout=60)
            await tab.evaluate("document.getElementById('send').click()")
            await tab.wait_for(LIVE + ".length > 30", timeout=60)

            await reload(tab)  # mid-answer: the catch-up continues the live answer
            await tab.wait_for(APPROVE_SHOWN, timeout=60)  # the interrupt is shown again on the new page
            assert "book_table" in await tab.evaluate("document.getElementById('interrupts').textContent")
            assert json.loads(await tab.evaluate(COPIES)) == {INTRO_MARKER: 1, OUTRO_MARKER: 0}
            await tab.evaluate("document.getElementById('approve').click()")  # approve the tool from the page
            await tab.wait_for("document.getElementById('transcript').textContent.includes('Everything')", timeout=60)

            await reload(tab)  # mid-answer (or just after the end on a fast machine), after the approval
            await tab.wait_for(STATUS + " === 'done' && " + LIVE + " === ''", timeout=60)
            await tab.wait_for(ANSWERS + ".includes(" + json.dumps(ANSWER) + ")", timeout=60)
            assert json.loads(await tab.evaluate(COPIES)) == {INTRO_MARKER: 1, OUTRO_MARKER: 1}
            assert await tab.evaluate("document.getElementById('interrupts').textContent") == ""

            await reload(tab)  # after the end: the attach replays the final frame of a stored answer
            # Connected is not attached yet: wait for the attach's status as for the transcript read.
            await tab.wait_for(STATUS + " === 'done' && " + ANSWERS + ".includes(" + json.dumps(ANSWER) + ")", timeout=60)
            assert await tab.evaluate(ANSWERS) == [ANSWER]
            assert await tab.evaluate("document.querySelectorAll('#transcript .msg').length") == 2  # the question, the answer
            assert await tab.evaluate("document.getElementById('live')") is None
            assert json.loads(await tab.evaluate(COPIES)) == {INTRO_MARKER: 1, OUTRO_MARKER: 1}
            assert await tab.evaluate("document.getElementById('error').textContent") == ""
            await tab.__aexit__()

    asyncio.run(scenario())
