"""Issue 21 item 10: every 400 of the API names the offending field in ``details.field``, in path form.

A nested value's path is ``activities[0].content`` (list index in brackets, keys
after dots); a top-level field is its name; an error of the body as a whole is
``body``. The sweep covers the endpoints whose bodies nest serializers
(activities, whole-thread saves, interrupt answers) and a few flat ones.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from agent_persistence.ids import uuid7
from agent_persistence.stores import conversation_store

pytestmark = pytest.mark.django_db

FUTURE = (timezone.now() + timedelta(days=30)).isoformat()


def url(name: str, *args: Any) -> str:
    return reverse(f"agent_persistence:{name}", args=args)


def message(**fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": "hi", **fields}


CASES = [
    # (route, method, body, code, field)
    ("conversation-activities", "put", {"activities": [{"activity_type": "x", "content": 5}]}, "invalid",
     "activities[0].content"),
    ("conversation-activities", "put",
     {"activities": [{"activity_type": "x"}, {"activity_type": "y", "content": []}]}, "invalid",
     "activities[1].content"),
    ("conversation-activities", "put", {"activities": [{"activity_type": 7}]}, "invalid",
     "activities[0].activity_type"),
    ("conversation-activities", "put", {"activities": [{"activity_type": "x", "bogus": 1}]}, "unknown_field",
     "activities[0].bogus"),
    ("conversation-activities", "put", {"activities": "nope"}, "invalid", "activities"),
    ("conversation-activities", "put", {}, "invalid", "activities"),
    ("conversation-activities", "put", {"activities": [{"activity_type": "x", "id": "not-a-uuid"}]}, "invalid",
     "activities[0].id"),
    ("message-list", "put", {"messages": [message(), message(role="wizard")]}, "invalid", "messages[1].role"),
    ("message-list", "put", {"messages": [message(created_at=FUTURE)]}, "future_time", "messages[0].created_at"),
    ("message-list", "put", {"messages": [message(created_at="2024-01-01T00:00:00")]}, "naive_time",
     "messages[0].created_at"),
    ("message-list", "patch", {"messages": [message(extra=1)]}, "unknown_field", "messages[0].extra"),
    ("message-list", "patch", {"messages": [message(), message(metadata=[1])]}, "invalid", "messages[1].metadata"),
    ("message-list", "put", {"messages": [message()], "bogus": True}, "unknown_field", "bogus"),
    ("conversation-interrupts", "post", {"answers": [{"id": "nope"}]}, "invalid", "answers[0].id"),
    ("conversation-interrupts", "post", {"answers": [{"id": str(uuid7()), "status": "maybe"}]}, "invalid",
     "answers[0].status"),
    ("conversation-interrupts", "post", {"answers": []}, "invalid", "answers"),
    ("conversation-detail", "patch", {"title": 5}, "invalid", "title"),
]


@pytest.fixture
def conversation(alice_scope: Any) -> Any:
    return conversation_store().create(alice_scope, agent="echo")


@pytest.mark.parametrize(("route", "method", "body", "code", "field"), CASES)
def test_a_400_names_its_field_in_path_form(alice_client: Any, conversation: Any, route: str, method: str,
                                            body: dict[str, Any], code: str, field: str) -> None:
    response = getattr(alice_client, method)(url(route, conversation.pk), body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()
    assert (error["code"], error.get("details", {}).get("field")) == (code, field), error
    assert isinstance(error["message"], str) and error["message"]


def test_a_malformed_body_is_field_body(alice_client: Any, conversation: Any) -> None:
    response = alice_client.generic("PUT", url("conversation-activities", conversation.pk), "{not json",
                                    content_type="application/json")
    assert response.status_code == 400
    assert (response.json()["code"], response.json()["details"]["field"]) == ("malformed_request", "body")


def test_nothing_is_written_by_a_refused_save(alice_client: Any, alice_scope: Any, conversation: Any) -> None:
    response = alice_client.put(url("message-list", conversation.pk),
                                {"messages": [message(content="kept?"), message(role="wizard")]}, format="json")
    assert response.status_code == 400
    assert conversation_store().list_messages(alice_scope, conversation.pk).items == []
