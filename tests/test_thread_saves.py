"""Issue 21 item 7: whole-thread saves (PUT replace, PATCH merge) never race the running turn.

(a) a save that includes the streaming assistant message, (b) ``PUT []`` mid-turn:
409 ``turn_running`` and nothing written, on the ORM and in-memory families; the
turn then seals its own answer after its question. (d) a counted page's
``total`` / ``has_more`` and its items come from one snapshot, under a real
writer thread. (c) If-Match is in tests/api/test_thread_preconditions.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agent_persistence.exceptions import Conflict, PreconditionFailed
from agent_persistence.stores.conversations import thread_tag
from agent_persistence.testing.actors import ALICE
from agent_persistence.testing.concurrency import run_in_threads
from agent_persistence.testing.family import Stores, memory_stores, orm_stores
from agent_persistence.testing.turns import COMPLETED


def begin(stores: Stores) -> tuple[Any, Any]:
    conversation = stores.conversations.create(ALICE, agent="echo")
    stores.conversations.append_message(ALICE, conversation.pk, role="user", content="earlier")
    plan = stores.turns.begin(ALICE, conversation.pk, content="question", known_agents={"echo"}, agent="echo")
    return conversation, plan


def seal(stores: Stores, plan: Any, text: str = "the answer") -> bool:
    return stores.turns.seal(ALICE, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id,
                             epoch=plan.epoch, message={"content": text}, seal=COMPLETED, stop_reason="end_turn")


def thread_of(stores: Stores, conversation: Any) -> list[tuple[str, Any]]:
    page = stores.conversations.list_messages(ALICE, conversation.pk, limit=100)
    return [(message.role, message.content) for message in page.items]


def saves_mid_turn(stores: Stores) -> None:
    conversation, plan = begin(stores)
    before = thread_of(stores, conversation)
    stored = stores.conversations.list_messages(ALICE, conversation.pk, limit=100).items
    posted = [{"id": str(m.pk), "role": m.role, "content": m.content} for m in stored]
    streaming = {"id": str(plan.message_id), "role": "assistant", "content": "the ans"}
    attempts = {
        "PUT with the streaming answer": lambda: stores.conversations.replace_messages(ALICE, conversation.pk,
                                                                                      [*posted, streaming]),
        "PATCH with the streaming answer": lambda: stores.conversations.merge_messages(ALICE, conversation.pk,
                                                                                      [*posted, streaming]),
        "PUT []": lambda: stores.conversations.replace_messages(ALICE, conversation.pk, []),
        "PUT without the question": lambda: stores.conversations.replace_messages(ALICE, conversation.pk, posted[:1]),
        "PATCH appending": lambda: stores.conversations.merge_messages(ALICE, conversation.pk,
                                                                      [{"role": "user", "content": "more"}]),
    }
    for name, attempt in attempts.items():
        with pytest.raises(Conflict) as caught:
            attempt()
        assert caught.value.code == "turn_running", name
        assert caught.value.details.get("message_id") == str(plan.message_id), name
        assert thread_of(stores, conversation) == before, name
    assert stores.conversations.merge_messages(ALICE, conversation.pk, []) is not None  # an empty merge writes nothing
    assert seal(stores, plan) is True
    assert thread_of(stores, conversation) == [("user", "earlier"), ("user", "question"), ("assistant", "the answer")]
    # Once sealed the thread is the client's again.
    saved = stores.conversations.replace_messages(ALICE, conversation.pk, [{"role": "user", "content": "fresh"}])
    assert [(m.role, m.content) for m in saved] == [("user", "fresh")]


def test_orm_saves_mid_turn_are_turn_running(db: Any) -> None:
    saves_mid_turn(orm_stores())


def test_memory_saves_mid_turn_are_turn_running() -> None:
    saves_mid_turn(memory_stores())


ROUNDS = 150


def counted_pages_are_one_snapshot(stores: Stores) -> None:
    conversation = stores.conversations.create(ALICE, agent="echo")
    for n in range(5):
        stores.conversations.append_message(ALICE, conversation.pk, role="user", content=str(n))
    done = threading.Event()

    def write() -> int:
        n = 0
        while not done.is_set():
            message = stores.conversations.append_message(ALICE, conversation.pk, role="user", content="w")
            stores.conversations.delete_message(ALICE, conversation.pk, message.pk)
            n += 1
        return n

    def read() -> list[tuple[int, int, bool]]:
        wrong = []
        try:
            for _ in range(ROUNDS):
                for offset in (0, 4, 5):
                    page = stores.conversations.list_messages(ALICE, conversation.pk, limit=5, offset=offset,
                                                              with_total=True)
                    expected = max(0, min(5, page.total - offset))
                    if len(page.items) != expected or page.has_more != (offset + len(page.items) < page.total):
                        wrong.append((offset, page.total, len(page.items)))
        finally:
            done.set()
        return wrong

    writes, wrong = run_in_threads(2, lambda index: write() if index == 0 else read(), timeout=120)
    assert not isinstance(writes, BaseException) and not isinstance(wrong, BaseException), (writes, wrong)
    assert writes > 0 and wrong == [], f"{len(wrong)} of {ROUNDS * 3} pages mixed two snapshots: {wrong[:5]}"


def test_orm_counted_pages_are_one_snapshot(transactional_db: Any) -> None:
    counted_pages_are_one_snapshot(orm_stores())


def test_memory_counted_pages_are_one_snapshot() -> None:
    counted_pages_are_one_snapshot(memory_stores())


def test_a_taken_id_is_still_message_exists_not_turn_running(db: Any) -> None:
    stores = orm_stores()
    conversation = stores.conversations.create(ALICE, agent="echo")
    other = stores.conversations.create(ALICE, agent="echo")
    taken = stores.conversations.append_message(ALICE, other.pk, role="user", content="x")
    with pytest.raises(Conflict) as caught:
        stores.conversations.replace_messages(ALICE, conversation.pk, [{"id": str(taken.pk), "role": "user",
                                                                         "content": "y"}])
    assert caught.value.code == "message_exists"



RACE_ROUNDS = 8


def saves_race_turns(stores: Stores) -> None:
    """Real threads: one starts and seals turns, the other keeps saving the thread it last read (PUT and PATCH).

    Every save is written (its If-Match tag still current, no turn running), 409
    turn_running, or 412 (a turn began and sealed since the read); every seal
    succeeds and every question is followed by its own answer at the end.
    """
    conversation = stores.conversations.create(ALICE, agent="echo")
    done = threading.Event()

    def produce() -> list[bool]:
        sealed = []
        try:
            for n in range(RACE_ROUNDS):
                plan = stores.turns.begin(ALICE, conversation.pk, content=f"q{n}", known_agents={"echo"}, agent="echo")
                sealed.append(seal(stores, plan, f"a{n}"))
        finally:
            done.set()
        return sealed

    def save() -> dict[str, int]:
        outcomes = {"saved": 0, "turn_running": 0, "stale": 0}
        methods = [stores.conversations.replace_messages, stores.conversations.merge_messages]
        while not done.is_set():
            attempt = methods[sum(outcomes.values()) % 2]  # PUT and PATCH in turn, each from a fresh read
            tag = thread_tag(stores.conversations.get(ALICE, conversation.pk))  # read before the thread, as the API does
            items = stores.conversations.list_messages(ALICE, conversation.pk, limit=100).items
            posted = [{"id": str(m.pk), "role": m.role, "content": m.content} for m in items]
            try:
                saved = attempt(ALICE, conversation.pk, posted, if_match=tag)
                if posted:  # an empty merge writes nothing and answers the thread as it is now
                    assert [m.pk for m in saved] == [m.pk for m in items]
                outcomes["saved"] += 1
            except Conflict as error:
                assert error.code == "turn_running", error.code
                outcomes["turn_running"] += 1
            except PreconditionFailed:
                outcomes["stale"] += 1  # a turn started and sealed between the read and the save
        return outcomes

    sealed, outcomes = run_in_threads(2, lambda index: produce() if index == 0 else save(), timeout=120)
    assert not isinstance(sealed, BaseException) and not isinstance(outcomes, BaseException), (sealed, outcomes)
    assert sealed == [True] * RACE_ROUNDS, sealed
    thread = thread_of(stores, conversation)
    assert thread == [pair for n in range(RACE_ROUNDS) for pair in (("user", f"q{n}"), ("assistant", f"a{n}"))]
    assert sum(outcomes.values()) > 0, outcomes
    # Quiet again: a save with the current tag is written and keeps every question and answer.
    items = stores.conversations.list_messages(ALICE, conversation.pk, limit=100).items
    saved = stores.conversations.replace_messages(
        ALICE, conversation.pk, [{"id": str(m.pk), "role": m.role, "content": m.content} for m in items],
        if_match=thread_tag(stores.conversations.get(ALICE, conversation.pk)))
    assert [m.pk for m in saved] == [m.pk for m in items]


def test_orm_saves_race_turns(transactional_db: Any) -> None:
    for _ in range(3):
        saves_race_turns(orm_stores())


def test_memory_saves_race_turns() -> None:
    for _ in range(3):
        saves_race_turns(memory_stores())
