"""The shipped TurnStore against its contract suite, and the sealed turn its signal carries."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agent_persistence.runtime import hooks
from agent_persistence.signals import conversation_updated
from agent_persistence.stores.turns import TurnStore
from agent_persistence.testing.family import frozen_clock
from agent_persistence.testing.turns import AGENTS, CANCELLED, COMPLETED, ERRORED, OWNER, TurnStoreContract


class TestTurnStore(TurnStoreContract):
    pass


TOOL_CALLS = [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": 1}"}}]


def sealed_views(capture: Any, seal_it: Any) -> list[Any]:
    """The store's view of the sealed turn, as a receiver of each ``conversation_updated`` sent while
    ``seal_it()`` runs and commits reads it; the signal itself carries ids only."""
    views: list[Any] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        assert set(kwargs) == {"signal", "tenant", "conversation_id", "message_id", "run_id"}
        views.append(hooks.sealed_view(kwargs["message_id"]))

    conversation_updated.connect(receiver)
    try:
        with capture(execute=True):
            seal_it()
    finally:
        conversation_updated.disconnect(receiver)
    return views


@pytest.mark.django_db
@pytest.mark.parametrize(
    "seal, message, error",
    [
        (COMPLETED, {"content": "the answer"}, None),
        (COMPLETED, {"content": "", "tool_calls": TOOL_CALLS}, None),
        (CANCELLED, {"content": "half"}, None),
        (ERRORED, {"content": "half"}, {"code": "agent_error", "message": "boom"}),
    ],
)
def test_the_signal_carries_the_sealed_turn_exactly_as_read_turn_reads_it(
    django_capture_on_commit_callbacks: Any, seal: Any, message: dict[str, Any], error: Any
) -> None:
    """Followers in the producer's process apply the signal's view instead of reading: it must be the read."""
    store = TurnStore()
    plan = store.begin(OWNER, uuid.uuid4(), content="hello", known_agents=AGENTS, agent="helper")
    stop_reason = "errored" if error else "completed"
    (view,) = sealed_views(django_capture_on_commit_callbacks, lambda: store.seal(
        OWNER, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=plan.epoch,
        message=message, seal=seal, stop_reason=stop_reason, error=error,
    ))
    read = store.read_turn(OWNER, plan.conversation_id)
    assert view.final is not None and view.record is None
    assert hooks.sealed_view(plan.message_id) is None  # only during the announcement
    assert dataclasses.replace(read, record=None, replica="", heartbeat_age=None) == view


@pytest.mark.django_db
def test_a_closed_out_turn_carries_its_new_epoch_and_partial_answer(django_capture_on_commit_callbacks: Any) -> None:
    store = TurnStore()
    with frozen_clock(timezone.now() - timedelta(minutes=1)):
        plan = store.begin(OWNER, uuid.uuid4(), content="hello", known_agents=AGENTS, agent="helper")
    (view,) = sealed_views(django_capture_on_commit_callbacks, lambda: store.close_out(
        OWNER, plan.conversation_id, seal=CANCELLED, stop_reason="cancelled",
    ))
    read = store.read_turn(OWNER, plan.conversation_id)
    assert view.epoch == plan.epoch + 1
    assert dataclasses.replace(read, record=None, replica="", heartbeat_age=None) == view


@pytest.mark.django_db
@pytest.mark.parametrize("width", [3, 12])
def test_a_batch_of_held_turns_is_released_in_statements_that_do_not_grow_with_it(width: int) -> None:
    """A drain's batch: the supervision rows, conversations and runs in one pass each, whatever the batch's size
    (eight round trips a turn, one turn at a time, took a replica's thirty turns 0.35-0.47 s); only the event
    append is one per turn."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    store = TurnStore()
    plans = [store.begin(OWNER, uuid.uuid4(), content="hi", agent="helper", known_agents=AGENTS) for _ in range(width)]
    items = [{"scope": plan.scope, "conversation_id": plan.conversation_id, "message_id": plan.message_id,
              "run_id": plan.run_id, "epoch": plan.epoch} for plan in plans]
    with CaptureQueriesContext(connection) as queries:
        assert store.hand_off_many(items) == {plan.conversation_id: plan.epoch + 1 for plan in plans}
    touching = {table: sum(1 for query in queries if f'"agent_persistence_{table}"' in query["sql"].split(" WHERE ")[0])
                for table in ("turnsupervision", "run")}
    # One turn at a time (the fallback) would lock, fence and update each row on its own: 2 + 2 x width.
    assert touching == {"turnsupervision": 2, "run": 1}, [query["sql"][:120] for query in queries]


@pytest.mark.django_db
@pytest.mark.parametrize("width", [3, 12])
def test_a_listener_s_share_of_handed_off_turns_is_claimed_in_statements_that_do_not_grow_with_it(width: int) -> None:
    """The locks, previous runs, supervision rows, epochs and new runs in one pass each; per turn only its event
    append and its plan's reads (one claim at a time made eighteen round trips a turn)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    store = TurnStore()
    plans = [store.begin(OWNER, uuid.uuid4(), content="hi", agent="helper", known_agents=AGENTS) for _ in range(width)]
    store.hand_off_many([{"scope": plan.scope, "conversation_id": plan.conversation_id, "message_id": plan.message_id,
                          "run_id": plan.run_id, "epoch": plan.epoch} for plan in plans])
    with CaptureQueriesContext(connection) as queries:
        claimed = store.resume_many([{"conversation_id": plan.conversation_id, "message_id": plan.message_id}
                                     for plan in plans], replica="replica-b")
    assert {pk: plan.epoch for pk, plan in claimed.items()} == {plan.conversation_id: plan.epoch + 2 for plan in plans}
    touching = Counter(table_of(query["sql"]) for query in queries)
    # One turn at a time (the fallback) would read, lock and write each turn's rows on its own.
    assert (touching["turnsupervision"], touching["run"]) == (2, 3), [query["sql"][:120] for query in queries]


def table_of(sql: str) -> str:
    """The table a statement reads or writes first (``FROM``, ``UPDATE``, ``INSERT INTO``)."""
    import re

    match = re.search(r'(?:FROM|UPDATE|INTO) "agent_persistence_(\w+)"', sql)
    return match.group(1) if match else ""
