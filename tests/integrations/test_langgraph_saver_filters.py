"""DjangoCheckpointSaver: metadata filter keys are data, never ORM lookups; the sync API works inside an event loop.

A ``list(filter=...)`` key is compared with the stored metadata's keys as a
plain string, whatever it looks like: a number (``"123"``, which a JSON path
reads as an array index), a ``__`` (which Django reads as a lookup), a quote,
a dot, a dollar, SQL. The answer is the one LangGraph's ``InMemorySaver`` gives
for the same rows (its filter is ``metadata.get(key) == value``). Then the sync
API called from inside ``async def`` (``graph.invoke()`` in an async view),
which peer savers support.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from agent_persistence.integrations.langgraph_store import DjangoCheckpointSaver
from tests.integrations.test_langgraph_checkpointer import Mode, approval_graph, thread

#: The async list and the sync API inside a loop query from other threads: those two commit their rows.
pytestmark = pytest.mark.django_db

HOSTILE_KEYS = [
    "123", "0", "-1", "a__b", "a__contains", "step__gt", "__", "x__isnull", "has__key", 'q"uote', "it's", "a.b", "$", "$.a",
    "[0]", "a[0]", "*", "%", "_", "a b", "' OR 1=1 --", "\\", "ünï", "",
]


def saved_rows(saver: Any) -> list[dict[str, Any]]:
    """The same six checkpoints in ``saver``; their metadata use the hostile keys."""
    rows = [
        {"123": "num", "a__b": 1, "a": {"b": 1}, 'q"uote': "x", "a.b": True, "$": None, "": "empty"},
        {"123": "other", "a__b": 2, "a": {"b": 2}, "step__gt": 0, "it's": "y", "a b": [1, 2]},
        {"0": 5, "-1": 5.0, "a__contains": "z", "x__isnull": False, "[0]": "arr", "a[0]": "arr", "%": "%", "_": "_"},
        {"__": "dunder", "has__key": {"n": [1]}, "$.a": "path", "*": "star", "' OR 1=1 --": "sql", "\\": "\\", "ünï": "ü"},
        {"step": 1, "source": "loop"},
        {"a": [{"b": 1}], "step": 2, "source": "loop"},
    ]
    for index, metadata in enumerate(rows):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"1ef0000{index}-0000-6000-8000-000000000000"
        saver.put(thread("hostile"), checkpoint, metadata, {})
    return rows


def listed(saver: Any, filter: dict[str, Any]) -> list[str]:
    return [item.checkpoint["id"] for item in saver.list(thread("hostile"), filter=filter)]


FILTERS = [
    {"123": "num"}, {"123": "other"}, {"123": "none"}, {"0": 5}, {"-1": 5}, {"-1": 5.0}, {"a__b": 1}, {"a__b": 2},
    {"a__contains": "z"}, {"step__gt": 0}, {"x__isnull": False}, {"__": "dunder"}, {"has__key": {"n": [1]}},
    {'q"uote': "x"}, {"it's": "y"}, {"a.b": True}, {"a.b": 1}, {"$": None}, {"$.a": "path"}, {"[0]": "arr"},
    {"a[0]": "arr"}, {"*": "star"}, {"%": "%"}, {"_": "_"}, {"%": "x"}, {"a b": [1, 2]}, {"' OR 1=1 --": "sql"},
    {"\\": "\\"}, {"ünï": "ü"}, {"": "empty"}, {"a": {"b": 1}}, {"a": [{"b": 1}]}, {"step": 1, "source": "loop"},
    {"123": "num", "a__b": 1}, {"123": "num", "a__b": 2}, {"nul\x00key": "x"}, {"k": "nul\x00value"},
    {"big": 2**70}, {"a__b": 10**30},
]


@pytest.mark.parametrize("filter", FILTERS, ids=[repr(f) for f in FILTERS])
def test_a_filter_key_is_data_and_the_answer_is_the_in_memory_savers(filter: dict[str, Any]) -> None:
    ours, reference = DjangoCheckpointSaver(), InMemorySaver()
    saved_rows(ours)
    saved_rows(reference)
    assert listed(ours, filter) == listed(reference, filter)


def test_a_numeric_key_and_a_dunder_key_match_their_rows() -> None:
    saver = DjangoCheckpointSaver()
    saved_rows(saver)
    assert listed(saver, {"123": "num"}) == ["1ef00000-0000-6000-8000-000000000000"]
    assert listed(saver, {"a__b": 2}) == ["1ef00001-0000-6000-8000-000000000000"]
    assert listed(saver, {"a__contains": "z"}) == ["1ef00002-0000-6000-8000-000000000000"]
    assert listed(saver, {"123": "num"}) != listed(saver, {"123": "nothing"})


@pytest.mark.django_db(transaction=True)
def test_the_async_list_takes_the_same_filter() -> None:
    saver = DjangoCheckpointSaver()
    saved_rows(saver)
    mode = Mode(saver, use_async=True)
    found = mode.list(thread("hostile"), filter={"a__b": 1, "123": "num"})
    assert [item.checkpoint["id"] for item in found] == ["1ef00000-0000-6000-8000-000000000000"]


@pytest.mark.django_db(transaction=True)
def test_the_sync_api_works_inside_a_running_event_loop() -> None:
    """``graph.invoke()`` (and the saver's sync methods) called from ``async def``, as with peer savers."""
    saver = DjangoCheckpointSaver()
    graph = approval_graph(saver)
    config = {"configurable": {"thread_id": "sync-in-loop"}}

    async def view() -> tuple[Any, Any, list[Any], Any]:
        try:
            first = graph.invoke({"request": "refund"}, config)
            final = graph.invoke(Command(resume="ok"), config)
            history = list(graph.get_state_history(config))
            return first, final, history, saver.get_tuple(config)
        finally:
            await sync_to_async(connections.close_all)()

    first, final, history, latest = asyncio.run(view())
    assert first["__interrupt__"][0].value == {"question": "approve refund?"}
    assert final["log"] == ["asked", "acted:ok"]
    assert [snapshot.metadata["step"] for snapshot in history] == [2, 1, 0, -1]
    assert latest.checkpoint["channel_values"]["log"] == ["asked", "acted:ok"]
