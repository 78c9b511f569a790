"""The run lifecycle over REST: subagent runs under a run, a run's interrupts, cancelling one, mixed batches.

Who may call each endpoint is the authorization matrix's (test_authorization.py);
here: what they answer, their refusals, and hostile input, which is a 4xx with
the app's JSON error body and writes nothing.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from agent_persistence.models import Interrupt
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store, interrupt_store, run_store
from agent_persistence.testing.interrupts import TOOL_CALL

pytestmark = pytest.mark.django_db

NS = "agent_persistence"


def url(name: str, *args: Any) -> str:
    return reverse(f"{NS}:{name}", args=args)


@pytest.fixture
def world(alice_scope: Scope) -> dict[str, Any]:
    """alice's conversation: a parent run with two subagent runs, the second asking two questions."""
    conversation = conversation_store().create(alice_scope, agent="echo")
    turn = uuid.uuid4()
    parent = run_store().create_or_resume(alice_scope, conversation.pk, id=uuid.uuid4(), message_id=turn)
    children = [
        run_store().create_or_resume(
            alice_scope, conversation.pk, id=uuid.uuid4(), message_id=turn, parent_id=parent.pk, name=name
        )
        for name in ("researcher", "writer")
    ]
    asked = [
        interrupt_store().create(
            alice_scope, conversation.pk, id=uuid.uuid4(), run_id=children[1].pk, kind=kind, payload=payload
        )
        for kind, payload in (("tool_approval", TOOL_CALL), ("generic", {"question": "Which tone?"}))
    ]
    return {"conversation": conversation, "parent": parent, "children": children, "asked": asked}


def test_runs_are_listed_by_cursor(alice_client: Any, bob_client: Any, alice_scope: Scope) -> None:
    """``before`` / ``after`` a run id: strict on (started_at, id), uncounted unless asked; a run of another
    conversation, or no run at all, is 404."""
    conversation = conversation_store().create(alice_scope)
    started = timezone.now() - timedelta(minutes=5)
    runs = [
        str(run_store().create_or_resume(
            alice_scope, conversation.pk, id=uuid.uuid4(), message_id=uuid.uuid4(), started_at=started + timedelta(seconds=n)
        ).pk)
        for n in range(4)
    ]
    path = url("conversation-runs", conversation.pk)
    response = alice_client.get(path, {"before": runs[3], "limit": 2})
    assert response.status_code == 200
    body = response.json()
    assert ([r["id"] for r in body["items"]], body["total"], body["has_more"]) == ([runs[2], runs[1]], None, True)
    body = alice_client.get(path, {"after": runs[0], "order": "asc", "total": "true"}).json()
    assert ([r["id"] for r in body["items"]], body["total"], body["has_more"]) == (runs[1:], 3, False)
    other = conversation_store().create(alice_scope)
    foreign = run_store().create_or_resume(alice_scope, other.pk, id=uuid.uuid4(), message_id=uuid.uuid4())
    for cursor in (str(foreign.pk), "01900000-0000-7000-8000-000000000001", "nope", "1"):
        for direction in ("before", "after"):
            response = alice_client.get(path, {direction: cursor})
            assert (response.status_code, response.json()["code"]) == (404, "not_found"), (direction, cursor)
    assert bob_client.get(path, {"before": runs[3]}).status_code == 404
    assert alice_client.get(path, {"order": "up"}).status_code == 400


def test_children_lists_a_runs_subagent_runs_oldest_first(alice_client: Any, world: dict[str, Any]) -> None:
    response = alice_client.get(url("run-children", world["parent"].pk))
    assert response.status_code == 200
    runs = response.json()["runs"]
    assert [run["id"] for run in runs] == [str(child.pk) for child in world["children"]]
    assert [(run["name"], run["parent_id"]) for run in runs] == [
        ("researcher", str(world["parent"].pk)), ("writer", str(world["parent"].pk))
    ]
    assert alice_client.get(url("run-children", world["children"][0].pk)).json() == {"runs": []}


def test_run_interrupts_lists_one_runs_questions(alice_client: Any, alice_scope: Scope, world: dict[str, Any]) -> None:
    writer = world["children"][1]
    pending = alice_client.get(url("run-interrupts", writer.pk)).json()["interrupts"]
    assert [i["id"] for i in pending] == [str(i.pk) for i in world["asked"]]
    assert pending[0]["kind"] == "tool_approval" and pending[0]["payload"] == TOOL_CALL
    assert alice_client.get(url("run-interrupts", world["children"][0].pk)).json() == {"interrupts": []}
    interrupt_store().cancel(alice_scope, world["asked"][0].pk)
    assert [i["id"] for i in alice_client.get(url("run-interrupts", writer.pk)).json()["interrupts"]] == [
        str(world["asked"][1].pk)
    ]
    every = alice_client.get(url("run-interrupts", writer.pk), {"status": "all"}).json()["interrupts"]
    assert [i["status"] for i in every] == ["cancelled", "pending"]
    response = alice_client.get(url("run-interrupts", writer.pk), {"status": "open"})
    assert response.status_code == 400 and response.json()["code"] == "invalid"


def test_cancel_cancels_one_interrupt_once(alice_client: Any, alice_scope: Scope, world: dict[str, Any]) -> None:
    first, second = world["asked"]
    response = alice_client.post(url("interrupt-cancel", first.pk), format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["response"], body["resolved_by"]) == ("cancelled", None, alice_scope.user)
    again = alice_client.post(url("interrupt-cancel", first.pk), format="json")
    assert again.status_code == 200 and again.json()["resolved_at"] == body["resolved_at"]
    assert Interrupt.objects.get(pk=second.pk).status == "pending"
    interrupt_store().commit_batch(alice_scope, world["conversation"].pk, [{"id": second.pk, "response": "warm"}])
    refused = alice_client.post(url("interrupt-cancel", second.pk), format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "already_answered"
    assert Interrupt.objects.get(pk=second.pk).status == "resolved"


@pytest.mark.django_db(transaction=True)
def test_a_mixed_batch_over_rest_resolves_and_cancels(
    alice_client: Any, world: dict[str, Any], drained_producer_loop: None
) -> None:
    approve, dismiss = world["asked"]
    body = {"answers": [{"id": str(approve.pk), "response": {"approved": True}},
                        {"id": str(dismiss.pk), "status": "cancelled"}]}
    response = alice_client.post(url("conversation-interrupts", world["conversation"].pk), body, format="json")
    assert response.status_code == 200, response.json()
    assert [(i["status"], i["response"]) for i in response.json()["interrupts"]] == [
        ("resolved", {"approved": True}), ("cancelled", None)
    ]


@pytest.mark.parametrize(
    "entry",
    [
        {"status": "cancelled", "response": "no"},
        {"status": "resolved"},
        {"status": "expired"},
        {},
    ],
)
@pytest.mark.django_db(transaction=True)
def test_a_malformed_mixed_entry_is_400_and_writes_nothing(
    alice_client: Any, world: dict[str, Any], entry: dict[str, Any], drained_producer_loop: None
) -> None:
    approve, dismiss = world["asked"]
    body = {"answers": [{"id": str(approve.pk), "response": True}, {"id": str(dismiss.pk), **entry}]}
    response = alice_client.post(url("conversation-interrupts", world["conversation"].pk), body, format="json")
    assert response.status_code == 400 and isinstance(response.json()["code"], str)
    assert set(Interrupt.objects.values_list("status", flat=True)) == {"pending"}


# -- hostile input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path_id",
    ["not-a-uuid", "%00", "\u0000", "00000000-0000-0000-0000-000000000000", "x" * 5000, "%F0%9F%92%A9"],
)
def test_hostile_path_ids_are_404(alice_client: Any, world: dict[str, Any], path_id: str) -> None:
    for method, path in (
        ("get", f"/api/runs/{path_id}/children/"),
        ("get", f"/api/runs/{path_id}/interrupts/"),
        ("post", f"/api/interrupts/{path_id}/cancel/"),
    ):
        response = getattr(alice_client, method)(path)
        assert response.status_code == 404, (path, response.status_code)
        assert response.json()["code"].endswith("not_found")


@pytest.mark.parametrize(
    "raw, content_type, status",
    [
        (b'{"reason": "\\ud800"}', "application/json", 400),
        (b'{"x": "\\u0000"}', "application/json", 400),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", 400),
        (b'{"n": 1e999999}', "application/json", 400),
        (b'{"n": 123456789012345678901234567890}', "application/json", 400),
        (b"{not json", "application/json", 400),
        (b"reason=no", "application/x-www-form-urlencoded", 415),
        (b"<cancel/>", "application/xml", 415),
    ],
)
def test_hostile_cancel_bodies_are_refused_and_write_nothing(
    alice_client: Any, world: dict[str, Any], raw: bytes, content_type: str, status: int
) -> None:
    interrupt = world["asked"][0]
    response = alice_client.generic("POST", url("interrupt-cancel", interrupt.pk), raw, content_type=content_type)
    assert response.status_code == status, response.content[:200]
    assert response["Content-Type"].startswith("application/json") and isinstance(response.json()["code"], str)
    assert Interrupt.objects.get(pk=interrupt.pk).status == "pending"


@pytest.mark.parametrize("status_param", ["%00", "%ED%A0%80", "%FF", "pending" * 1000, "ALL"])
def test_hostile_status_filters_are_400(alice_client: Any, world: dict[str, Any], status_param: str) -> None:
    response = alice_client.get(f"{url('run-interrupts', world['children'][1].pk)}?status={status_param}")
    assert response.status_code == 400 and isinstance(response.json()["code"], str)


@pytest.mark.parametrize(
    "entry",
    [
        {"status": "\u0000"},
        {"status": "cancelled", "id": "\ud800"},
        {"status": ["cancelled"]},
        {"status": {"$ne": "resolved"}},
        {"status": 1},
    ],
)
@pytest.mark.django_db(transaction=True)
def test_hostile_batch_entries_are_400(
    alice_client: Any, world: dict[str, Any], entry: dict[str, Any], drained_producer_loop: None
) -> None:
    approve, dismiss = world["asked"]
    answers = [{"id": str(approve.pk), "response": True}, {"id": str(dismiss.pk), **entry}]
    raw = json.dumps({"answers": answers}).encode()  # escaped as an attacker's client sends it ("\\ud800")
    response = alice_client.generic(
        "POST", url("conversation-interrupts", world["conversation"].pk), raw, content_type="application/json"
    )
    assert 400 <= response.status_code < 500 and isinstance(response.json()["code"], str)
    assert set(Interrupt.objects.values_list("status", flat=True)) == {"pending"}
