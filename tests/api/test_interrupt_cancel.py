"""POST interrupts/<id>/cancel/ continues the turn only when this call settled the last pending question (review of 84c05cc).

A repeat cancel of an interrupt cancelled long ago used to continue the turn whenever nothing was
pending: continue_turn(scope, conversation, []) then took over a dead producer's turn and resumed it
from the request process (outside the reaper's MAX_RESUME_ATTEMPTS guard).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agent_persistence.models import Interrupt, Run, TurnSupervision
from agent_persistence.scope import Scope
from agent_persistence.stores import interrupt_store
from tests.api.test_turns import FAST, dead_turn, url, wait_until_idle, waiting_turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_turns(settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, **FAST}
    monkeypatch.setenv("AP_TOOL_LOG", str(tmp_path / "tools.log"))
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.002")


@pytest.fixture(autouse=True)
def drained(drained_producer_loop: None) -> None:
    """Every test here waits for its producers (conftest's drained_producer_loop)."""


@pytest.fixture
def alice(client_for: Callable[[Any], APIClient], alice_user: Any) -> APIClient:
    return client_for(alice_user)


def supervision(conversation_id: uuid.UUID) -> tuple[Any, ...]:
    row = TurnSupervision.objects.get(pk=conversation_id)
    return (row.status, row.epoch, row.message_id, row.replica, row.heartbeat_at)


def test_a_repeat_cancel_does_not_resume_a_dead_turn(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    plan = dead_turn(alice_scope, conversation_id)
    interrupt_id = uuid.uuid4()
    interrupt_store().create(
        alice_scope, conversation_id, id=interrupt_id, run_id=plan.run_id, kind="generic", payload={"question": "ok?"}
    )
    interrupt_store().cancel(alice_scope, interrupt_id)  # cancelled long ago; the producer died since
    runs, before = Run.objects.filter(conversation_id=conversation_id).count(), supervision(conversation_id)

    response = alice.post(url("interrupts", interrupt_id, "cancel"), format="json")

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"
    assert Run.objects.filter(conversation_id=conversation_id).count() == runs  # no run of a take-over
    assert supervision(conversation_id) == before  # not claimed: the reaper still decides about this turn


def test_the_cancel_that_settles_the_last_question_continues_the_turn_once(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    plan, (first, second) = waiting_turn(alice_scope, conversation_id, questions=2)

    assert alice.post(url("interrupts", first, "cancel"), format="json").status_code == 200
    assert Run.objects.filter(conversation_id=conversation_id).count() == 1  # one still pending: parked
    response = alice.post(url("interrupts", second, "cancel"), format="json")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"
    final = wait_until_idle(alice, conversation_id)
    assert final["state"] == "done"
    runs = list(Run.objects.filter(conversation_id=conversation_id).order_by("started_at"))
    assert [run.status for run in runs] == ["completed", "completed"] and runs[0].pk == plan.run_id
    again = alice.post(url("interrupts", second, "cancel"), format="json")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    assert Run.objects.filter(conversation_id=conversation_id).count() == 2
    assert set(Interrupt.objects.filter(conversation_id=conversation_id).values_list("status", flat=True)) == {"cancelled"}


def test_a_lapsed_question_can_still_be_cancelled_and_that_continues_the_turn(alice: APIClient, alice_scope: Scope) -> None:
    """A batch refuses a lapsed question (410 interrupt_expired); the cancel endpoint settles it, as before."""
    conversation_id = uuid.uuid4()
    _, (interrupt_id,) = waiting_turn(alice_scope, conversation_id, expired=True)
    response = alice.post(url("interrupts", interrupt_id, "cancel"), format="json")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"
    assert wait_until_idle(alice, conversation_id)["state"] == "done"
    assert Run.objects.filter(conversation_id=conversation_id).count() == 2
