"""The operators' admin in real headless Chromium: the dashboard, a conversation list and a conversation page.

A live Django server (pytest-django's, which serves the admin's static files)
shows rows the test made; the browser checks what a person would see (the
dashboard's counts are the rows', each live status fits on one line, the
transcript reads as text with its tool calls) and takes the screenshots of
``docs/img/admin/``. To refresh those::

    AP_ADMIN_SCREENSHOTS=docs/img/admin .venv/bin/python -m pytest tests/browser/test_admin_screens.py
"""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from agent_persistence import models
from tests.browser.cdp import Chromium, Tab, chromium_path

pytestmark = [
    pytest.mark.skipif(chromium_path() is None and not os.environ.get("CI"), reason="Chromium is not installed (apt-get install chromium)"),
    pytest.mark.django_db(transaction=True),
]

#: Generous, so a loaded machine cannot turn a live turn dead between the seeding and the page.
DEAD_AFTER = 30.0
LIVE_HEARTBEAT_AGE = 0.4


def conversation(title: str | None, owner: str, agent: str, *, tenant: str = "acme", **fields: Any) -> models.Conversation:
    return models.Conversation.objects.create(title=title, owner=owner, agent=agent, tenant=tenant, **fields)


def supervise(conversation: models.Conversation, replica: str, *, age: float, status: str = "running") -> models.Run:
    """A turn of ``conversation`` on ``replica`` whose last heartbeat is ``age`` seconds old."""
    message_id = uuid.uuid4()
    finished = status != "running"
    run = models.Run.objects.create(
        conversation=conversation,
        message_id=message_id,
        name=conversation.agent,
        epoch=1,
        status="completed" if finished else "running",
        finished_at=timezone.now() if finished else None,
    )
    models.TurnSupervision.objects.create(
        conversation=conversation, message_id=message_id, run_id=run.pk, epoch=1, replica=replica, status=status,
        heartbeat_at=timezone.now() - timedelta(seconds=age),
    )  # fmt: skip
    models.Conversation.objects.filter(pk=conversation.pk).update(epoch=1, last_turn_status="running" if not finished else "complete")
    return run


def seed() -> dict[str, Any]:
    """Seven conversations: two live and two dead turns over two replicas, one waiting for an approval."""
    lyon = conversation("Weekend in Lyon", "alice", "travel")
    run = supervise(lyon, "web-1:4242", age=LIVE_HEARTBEAT_AGE)
    transcript = [
        {"role": "user", "content": "What will the weather be in Lyon this weekend? Book a table if it is sunny."},
        {
            "role": "assistant",
            "content": "Sunny on Saturday, up to 24 °C. I found a terrace at Le Kitchen Café and asked for your approval to book it.",
            "tool_calls": [
                {"id": "call-1", "name": "get_weather", "arguments": {"city": "Lyon", "days": 2}, "result": {"saturday": "sunny, 24 °C", "sunday": "showers, 19 °C"}},
                {"id": "call-2", "name": "book_table", "arguments": {"place": "Le Kitchen Café", "time": "Sat 12:30", "people": 2}},
            ],
        },
        {"role": "tool", "content": [{"type": "text", "text": "saturday: sunny, 24 °C; sunday: showers, 19 °C"}], "name": "get_weather", "tool_call_id": "call-1"},
    ]
    for position, message in enumerate(transcript):
        models.Message.objects.create(conversation=lyon, position=position, run=run, **message)
    models.Interrupt.objects.create(
        run=run, conversation=lyon, kind="tool_approval",
        payload={"tool_call_id": "call-2", "name": "book_table", "arguments": {"place": "Le Kitchen Café", "time": "Sat 12:30", "people": 2}},
    )  # fmt: skip
    for seq, event_type in enumerate(["turn_started", "tool_called", "interrupt_requested"], start=1):
        models.Event.objects.create(conversation=lyon, seq=seq, type=event_type, run_id=run.pk, data={"message_id": str(run.message_id)})
    models.Conversation.objects.filter(pk=lyon.pk).update(next_position=len(transcript), last_event_seq=3)

    supervise(conversation("Refund for order 1042", "bob", "support"), "web-2:4317", age=LIVE_HEARTBEAT_AGE)
    supervise(conversation("Quarterly report draft", "carol", "writer", tenant="globex"), "web-1:4242", age=95)
    supervise(conversation("Translate the onboarding guide", "dave", "translator"), "web-2:4317", age=412)
    supervise(conversation(None, "alice", "travel"), "web-2:4317", age=3600, status="done")
    conversation("Gift ideas for Sam", "erin", "shopping", shared=True)
    return {"lyon": lyon, "live": {"web-1:4242": 1, "web-2:4317": 1}, "dead": {"web-1:4242": 1, "web-2:4317": 1}, "pending": 1}


def heartbeat_live_turns() -> None:
    """What the live producers would be doing: stamp their heartbeat (from a worker thread, whose connection it closes)."""
    try:
        models.TurnSupervision.objects.filter(status="running", heartbeat_at__gte=timezone.now() - timedelta(seconds=60)).update(
            heartbeat_at=timezone.now() - timedelta(seconds=LIVE_HEARTBEAT_AGE)
        )
    finally:
        connection.close()


def screenshot_dir(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("AP_ADMIN_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


DASHBOARD_COUNTS = """(() => {
  const board = document.getElementById('ap-dashboard');
  const rows = {};
  for (const row of board.querySelectorAll('tr[data-replica]')) {
    rows[row.dataset.replica] = {live: +row.querySelector('[data-count=live]').textContent, dead: +row.querySelector('[data-count=dead]').textContent};
  }
  const total = name => board.querySelector('.ap-totals [data-count=' + name + ']').textContent.trim();
  return {rows, live: total('live'), dead: total('dead'), pending: total('pending-interrupts'), oldest: total('oldest-heartbeat')};
})()"""

# Lines each live-status cell takes, and the tallest row of the list in lines.
LIST_LAYOUT = """(() => {
  const lines = el => el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight);
  const cells = [...document.querySelectorAll('#result_list td.field-live_turn > span')];
  const rows = [...document.querySelectorAll('#result_list tbody tr')];
  const rowLines = r => r.getBoundingClientRect().height / parseFloat(getComputedStyle(r.querySelector('td')).lineHeight);
  return {cells: cells.map(lines), tallest: Math.max(...rows.map(rowLines)),
          titles: rows.map(r => r.querySelector('.field-title_column').textContent.trim()),
          overflow: (r => r.scrollWidth > r.clientWidth)(document.querySelector('#changelist .results'))};
})()"""

TRANSCRIPT = """(() => ({
  texts: [...document.querySelectorAll('.ap-transcript .ap-text')].map(e => e.textContent),
  tools: [...document.querySelectorAll('.ap-transcript .ap-tool-calls li')].map(e => e.textContent.replace(/\\s+/g, ' ').trim()),
  live: document.querySelector('.field-live_turn .ap-live').textContent,
  save: !!document.querySelector('input[name=_save]'),
  editable: [...document.querySelectorAll('#conversation_form input:not([type=hidden]), #conversation_form textarea, #conversation_form select')].map(e => e.name).filter(n => !n.startsWith('_')),
}))()"""


def test_dashboard_list_and_conversation_page_in_chromium(live_server: Any, settings: Any, tmp_path: Path) -> None:
    settings.AGENT_PERSISTENCE = {**django_settings.AGENT_PERSISTENCE, "DEAD_AFTER": DEAD_AFTER}
    scene = seed()
    User.objects.create_superuser("operator", "operator@example.com", "x")
    client = Client()
    client.login(username="operator", password="x")
    cookie = client.cookies["sessionid"].value
    shots = screenshot_dir(tmp_path)
    base = live_server.url

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        with Chromium() as browser:
            async with Tab(browser.new_tab()) as tab:
                await tab.set_cookie(base, "sessionid", cookie)
                await tab.call("Emulation.setDeviceMetricsOverride", width=960, height=520, deviceScaleFactor=1, mobile=False)

                await asyncio.to_thread(heartbeat_live_turns)
                await tab.goto(base + "/admin/agent_persistence/")
                await tab.wait_for("!!document.getElementById('ap-dashboard')")
                seen["dashboard"] = await tab.evaluate(DASHBOARD_COUNTS)
                await tab.screenshot(shots / "dashboard.png")

                await tab.call("Emulation.setDeviceMetricsOverride", width=1440, height=560, deviceScaleFactor=1, mobile=False)
                await asyncio.to_thread(heartbeat_live_turns)
                await tab.goto(base + "/admin/agent_persistence/conversation/")
                await tab.wait_for("!!document.getElementById('result_list')")
                seen["list"] = await tab.evaluate(LIST_LAYOUT)
                await tab.screenshot(shots / "conversations.png")

                await tab.call("Emulation.setDeviceMetricsOverride", width=1200, height=1160, deviceScaleFactor=1, mobile=False)
                await asyncio.to_thread(heartbeat_live_turns)
                await tab.goto(base + f"/admin/agent_persistence/conversation/{scene['lyon'].pk}/change/")
                await tab.wait_for("!!document.querySelector('.ap-transcript')")
                seen["page"] = await tab.evaluate(TRANSCRIPT)
                await tab.screenshot(shots / "conversation.png")
        return seen

    seen = asyncio.run(scenario())

    board = seen["dashboard"]
    assert board["rows"] == {replica: {"live": scene["live"][replica], "dead": scene["dead"][replica]} for replica in scene["live"]}
    assert (board["live"], board["dead"], board["pending"]) == ("2", "2", "1")
    assert board["oldest"].endswith(" s") and float(board["oldest"][:-2]) < DEAD_AFTER

    listing = seen["list"]
    assert len(listing["cells"]) == 6 and all(lines < 1.5 for lines in listing["cells"]), listing  # each status on one line
    assert listing["tallest"] < 2.5, listing  # no row wraps onto several lines
    assert not listing["overflow"], "the conversation list is wider than the window"
    assert "Weekend in Lyon" in listing["titles"] and "(untitled)" in listing["titles"]

    page = seen["page"]
    assert page["texts"][1].startswith("Sunny on Saturday") and not page["texts"][1].startswith('"')
    assert page["texts"][2] == "saturday: sunny, 24 °C; sunday: showers, 19 °C"
    # (PostgreSQL's jsonb keeps an object's keys in its own order.)
    assert page["tools"][0].startswith("get_weather({") and '"city": "Lyon"' in page["tools"][0]
    assert '}) → {' in page["tools"][0] and '"saturday": "sunny, 24 °C"' in page["tools"][0]
    assert page["tools"][1].startswith("book_table(")
    assert page["live"].startswith("alive 0.") and "web-1:4242" in page["live"]
    assert page["save"] and set(page["editable"]) == {"title", "shared"}

    for name in ("dashboard", "conversations", "conversation"):
        assert 10_000 < (shots / f"{name}.png").stat().st_size < 400_000
