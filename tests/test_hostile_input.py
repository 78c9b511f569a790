"""Hostile values given straight to the stores: each is Validation (a domain error), never a driver error.

The stores clean every value with the JSON policy (``agent_persistence.json_policy.check``)
before it reaches a column, so a lone surrogate, NUL, an out-of-range number or a
value nested 200,000 deep is refused before any write, on SQLite and PostgreSQL
alike; and every listing pages through one ``paginate``, so an offset as large as
a 64-bit ``OFFSET`` holds is an empty page and a larger one is Validation.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from agent_persistence.exceptions import Validation
from agent_persistence.models import Conversation, Message, Task
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store, file_store, lease_store, run_store, task_store

pytestmark = pytest.mark.django_db

DEEP: Any = "leaf"
for _ in range(200_000):
    DEEP = [DEEP]

HOSTILE_VALUES = [
    pytest.param({"k": "\ud800"}, id="lone-surrogate"),
    pytest.param({"\udfff": 1}, id="surrogate-key"),
    pytest.param({"k": ["a\x00b"]}, id="nul"),
    pytest.param({"k\x00": 1}, id="nul-key"),
    pytest.param({"n": 2**63}, id="int-too-large"),
    pytest.param({"n": -(2**63) - 1}, id="int-too-small"),
    pytest.param({"n": float("inf")}, id="infinite"),
    pytest.param({"deep": DEEP}, id="200k-deep"),
]


def refused(call: Any, *args: Any, **kwargs: Any) -> Validation:
    with pytest.raises(Validation) as caught:
        call(*args, **kwargs)
    return caught.value


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_every_json_value_a_store_writes_is_checked_by_the_policy(alice: Scope, value: Any) -> None:
    conversations, tasks = conversation_store(), task_store()
    conversation = conversations.create(alice, title="Mine")
    message = conversations.append_message(alice, conversation.pk, role="user", content="hello")
    task = tasks.create(alice, title="A task")
    before = (Conversation.objects.count(), Message.objects.count(), Task.objects.count())
    calls = [
        (conversations.create, (alice,), {"metadata": value}),
        (conversations.create, (alice,), {"state": value}),
        (conversations.update, (alice, conversation.pk), {"metadata": value}),
        (conversations.update, (alice, conversation.pk), {"state": value}),
        (conversations.append_message, (alice, conversation.pk), {"role": "user", "content": value}),
        (conversations.append_message, (alice, conversation.pk), {"role": "user", "content": "x", "metadata": value}),
        (conversations.update_message, (alice, conversation.pk, message.pk), {"content": value}),
        (conversations.update_message, (alice, conversation.pk, message.pk), {"metadata": value}),
        (tasks.create, (alice,), {"title": "t", "metadata": value}),
        (tasks.update, (alice, task.pk), {"metadata": value}),
        (tasks.set_result, (alice, task.pk, value), {}),
    ]
    for call, args, kwargs in calls:
        assert refused(call, *args, **kwargs).code == "invalid", (call.__name__, kwargs)
    assert (Conversation.objects.count(), Message.objects.count(), Task.objects.count()) == before
    assert conversations.get(alice, conversation.pk).metadata == {}
    assert conversations.list_messages(alice, conversation.pk).items[0].content == "hello"


@pytest.mark.parametrize("text", ["\ud800", "a\x00b", "tail \udfff"])
def test_text_columns_refuse_lone_surrogates_and_nul(alice: Scope, text: str) -> None:
    conversations = conversation_store()
    conversation = conversations.create(alice)
    assert refused(conversations.create, alice, title=text).code == "invalid"
    assert refused(conversations.update, alice, conversation.pk, title=text).code == "invalid"
    assert refused(conversations.append_message, alice, conversation.pk, role="user", content="x", name=text).code == "invalid"
    assert refused(task_store().create, alice, title=text).code == "invalid"
    assert refused(task_store().create, alice, title="t", description=text).code == "invalid"


def test_every_listing_takes_the_largest_offset_as_an_empty_page_and_refuses_a_larger_one(alice: Scope) -> None:
    conversation = conversation_store().create(alice)
    conversation_store().append_message(alice, conversation.pk, role="user", content="x")
    file_store().save(alice, conversation_id=conversation.pk, content=io.BytesIO(b"x"), name="a.txt")
    task_store().create(alice, title="t")
    lease_store().acquire(alice.tenant, "job:1", "worker", ttl=60)
    listings = [
        lambda offset: conversation_store().list(alice, offset=offset),
        lambda offset: conversation_store().list_messages(alice, conversation.pk, offset=offset),
        lambda offset: file_store().list(alice, conversation.pk, offset=offset),
        lambda offset: task_store().list(alice, offset=offset),
        lambda offset: run_store().list(alice, conversation.pk, offset=offset),
        lambda offset: lease_store().list_live(alice.tenant, "job:", offset=offset),
        lambda offset: lease_store().list_expired(alice.tenant, "job:", offset=offset),
    ]
    for listing in listings:
        page = listing(2**63 - 1)
        assert page.items == [] and page.has_more is False and page.offset == 2**63 - 1
        for offset in (2**63, 10**30, -1):
            assert refused(listing, offset).details["field"] == "offset"
