"""The turn, run and interrupt endpoints over HTTP, with real producers on the process's producer loop.

Turns started, answered, resumed and cancelled through the API run on
``agent_persistence.runtime.loop`` (another thread, another connection), so
every test is transactional; an autouse fixture waits for the producers to
finish and closes that thread's connection before the database is flushed.
A dead producer is simulated with ``begin_turn`` (claim and run, no producer)
and a heartbeat aged past ``DEAD_AFTER``.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any, Callable

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agent_persistence.models import Conversation, Interrupt, Message, Run, TurnSupervision
from agent_persistence.runtime.lifecycle import begin_turn
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store, interrupt_store, run_store, supervision_store
from tests.agents import ANSWER

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {"HEARTBEAT_INTERVAL": 0.1, "DEAD_AFTER": 0.6, "RECORDING_FLUSH_INTERVAL": 0.05, "CHECKPOINT_INTERVAL": 0.2}


@pytest.fixture(autouse=True)
def fast_turns(settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, **FAST}
    monkeypatch.setenv("AP_TOOL_LOG", str(tmp_path / "tools.log"))
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.002")


@pytest.fixture(autouse=True)
def drained(drained_producer_loop: None) -> None:
    """Every test here waits for its producers (conftest's drained_producer_loop)."""


def url(*parts: Any) -> str:
    return "/api/" + "".join(f"{part}/" for part in parts)


def wait_for(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def wait_until_idle(client: APIClient, conversation_id: Any) -> dict[str, Any]:
    """Poll the stream status endpoint until the conversation's turn is no longer running."""

    def finished() -> dict[str, Any] | None:
        body = client.get(url("conversations", conversation_id, "stream")).json()
        return body if body["state"] in ("done", "errored") else None

    return wait_for(finished)


def dead_turn(scope: Scope, conversation_id: uuid.UUID, agent: str = "scripted") -> Any:
    """A turn claimed and run by a producer that died: no task, a heartbeat a minute old."""
    plan = begin_turn(scope, conversation_id, content="hello", agent=agent)
    TurnSupervision.objects.filter(conversation_id=conversation_id).update(heartbeat_at=timezone.now() - timedelta(minutes=1))
    return plan


def waiting_turn(scope: Scope, conversation_id: uuid.UUID, *, questions: int = 1, expired: bool = False) -> tuple[Any, list[uuid.UUID]]:
    """A turn parked on pending interrupts, as a producer leaves it (run interrupted, supervision done)."""
    plan = begin_turn(scope, conversation_id, content="hello", agent="scripted")
    ids = [uuid.uuid4() for _ in range(questions)]
    for interrupt_id in ids:
        interrupt_store().create(
            scope, conversation_id, id=interrupt_id, run_id=plan.run_id, kind="generic", payload={"question": "ok?"},
            expires_at=timezone.now() - timedelta(seconds=1) if expired else None,
        )
    run_store().set_status(scope, plan.run_id, "interrupted")
    supervision_store().finish(conversation_id, epoch=plan.epoch, message_id=plan.message_id, status="done")
    return plan, ids


@pytest.fixture
def alice(client_for: Callable[[Any], APIClient], alice_user: Any) -> APIClient:
    return client_for(alice_user)


@pytest.fixture
def conversation(alice_scope: Scope) -> Conversation:
    return conversation_store().create(alice_scope, agent="echo", title="Plans")


# -- start -----------------------------------------------------------------------------------------


def test_a_turn_started_over_http_is_202_and_completes_after_the_response(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    response = alice.post(url("conversations", conversation_id, "turns"), {"content": "hello", "agent": "scripted"}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert set(body) == {"conversation_id", "message_id", "run_id", "epoch"}
    assert body["conversation_id"] == str(conversation_id) and body["epoch"] == 1
    final = wait_until_idle(alice, conversation_id)
    assert final["state"] == "done" and final["message_id"] == body["message_id"]
    answer = Message.objects.get(pk=body["message_id"])
    assert answer.role == "assistant" and answer.content == ANSWER
    assert Conversation.objects.get(pk=conversation_id).owner == alice_scope.user
    assert Run.objects.get(pk=body["run_id"]).status == "completed"


def test_a_turn_takes_the_client_chosen_ids_and_metadata(alice: APIClient, conversation: Conversation) -> None:
    message_id, user_message_id = uuid.uuid4(), uuid.uuid4()
    response = alice.post(
        url("conversations", conversation.pk, "turns"),
        {"content": [{"type": "text", "text": "hi"}], "message_id": str(message_id), "user_message_id": str(user_message_id),
         "metadata": {"client": "web"}},
        format="json",
    )
    assert response.status_code == 202, response.content
    assert response.json()["message_id"] == str(message_id)
    wait_until_idle(alice, conversation.pk)
    user_message = Message.objects.get(pk=user_message_id)
    assert user_message.content == [{"type": "text", "text": "hi"}] and user_message.metadata == {"client": "web"}
    assert Message.objects.get(pk=message_id).role == "assistant"  # answered by the conversation's agent (echo)


@pytest.mark.parametrize("taken", ["own_earlier", "other_tenant", "user_message_id"])
def test_a_taken_message_id_is_409_message_exists_before_anything_runs(
    alice: APIClient, conversation: Conversation, taken: str, tenants: None, mallory_user: Any,
) -> None:
    """An answer could never be stored under a taken id: the start is refused, not run and left to loop."""
    if taken == "own_earlier":
        first = alice.post(url("conversations", conversation.pk, "turns"), {"content": "one"}, format="json")
        assert first.status_code == 202, first.content
        wait_until_idle(alice, conversation.pk)
        message_id = first.json()["message_id"]
    elif taken == "other_tenant":
        theirs = Scope(tenant="other", user=str(mallory_user.pk))
        foreign = conversation_store().create(theirs, agent="echo")
        message_id = str(conversation_store().append_message(theirs, foreign.pk, role="user", content="theirs").pk)
    else:
        message_id = str(uuid.uuid4())
    messages, runs = Message.objects.count(), Run.objects.count()
    supervision = list(TurnSupervision.objects.filter(conversation_id=conversation.pk).values_list("epoch", "status"))
    body = {"content": "two", "message_id": message_id}
    if taken == "user_message_id":
        body["user_message_id"] = message_id
    response = alice.post(url("conversations", conversation.pk, "turns"), body, format="json")
    assert response.status_code == 409, response.content
    assert response.json()["code"] == "message_exists"
    assert (Message.objects.count(), Run.objects.count()) == (messages, runs)
    assert list(TurnSupervision.objects.filter(conversation_id=conversation.pk).values_list("epoch", "status")) == supervision


def test_a_turn_while_one_runs_is_409_conversation_busy_naming_the_occupant(
    alice: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.05")
    conversation_id = uuid.uuid4()
    first = alice.post(url("conversations", conversation_id, "turns"), {"content": "one", "agent": "scripted"}, format="json").json()
    messages_before = Message.objects.filter(conversation_id=conversation_id).count()
    response = alice.post(url("conversations", conversation_id, "turns"), {"content": "two"}, format="json")
    assert response.status_code == 409
    error = response.json()
    assert error["code"] == "conversation_busy"
    occupant = error["details"]["occupant"]
    assert occupant["message_id"] == first["message_id"] and occupant["run_id"] == first["run_id"]
    assert occupant["epoch"] == 1 and occupant["heartbeat_age"] >= 0
    assert Message.objects.filter(conversation_id=conversation_id).count() == messages_before
    assert alice.post(url("conversations", conversation_id, "turns", "cancel"), format="json").status_code == 202


def test_start_refuses_bad_input_with_a_stable_code_and_writes_nothing(alice: APIClient, conversation: Conversation) -> None:
    new_id = uuid.uuid4()
    cases = [
        (url("conversations", new_id, "turns"), {"content": "hi", "agent": "scripted", "colour": "red"}, 400, "unknown_field"),
        (url("conversations", new_id, "turns"), {"agent": "scripted"}, 400, "invalid"),
        (url("conversations", new_id, "turns"), {"content": "hi", "agent": 7}, 400, "invalid"),
        (url("conversations", new_id, "turns"), {"content": "hi", "agent": "scripted", "metadata": [1]}, 400, "invalid"),
        (url("conversations", new_id, "turns"), {"content": "hi", "agent": "scripted", "message_id": "x"}, 400, "invalid"),
        (url("conversations", new_id, "turns"), {"content": "hi", "agent": "nobody"}, 400, "unknown_agent"),
        (url("conversations", new_id, "turns"), {"content": "hi"}, 400, "unknown_agent"),
        (url("conversations", "not-a-uuid", "turns"), {"content": "hi", "agent": "scripted"}, 400, "invalid_id"),
        (url("conversations", new_id, "turns"), ["content"], 400, "invalid"),
    ]
    for path, body, status, code in cases:
        response = alice.post(path, body, format="json")
        assert (response.status_code, response.json()["code"]) == (status, code), (body, response.content)
    malformed = alice.post(url("conversations", new_id, "turns"), data=b"{not json", content_type="application/json")
    assert (malformed.status_code, malformed.json()["code"]) == (400, "malformed_request")
    form = alice.post(url("conversations", new_id, "turns"), {"content": "hi", "agent": "scripted"})
    assert (form.status_code, form.json()["code"]) == (415, "unsupported_media_type")
    assert not Conversation.objects.filter(pk=new_id).exists()
    assert Conversation.objects.count() == 1 and Message.objects.count() == 0 and Run.objects.count() == 0


def test_a_message_over_the_size_limit_is_413_and_nothing_is_written(alice: APIClient, settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_MESSAGE_BYTES": 1000}
    conversation_id = uuid.uuid4()
    response = alice.post(url("conversations", conversation_id, "turns"), {"content": "x" * 2000, "agent": "scripted"}, format="json")
    assert (response.status_code, response.json()["code"]) == (413, "too_large")
    assert not Conversation.objects.filter(pk=conversation_id).exists()


def test_start_on_a_conversation_waiting_for_answers_is_409_interrupts_pending(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    _, ids = waiting_turn(alice_scope, conversation_id)
    response = alice.post(url("conversations", conversation_id, "turns"), {"content": "more"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "interrupts_pending"
    assert response.json()["details"]["pending"] == [str(ids[0])]
    assert Message.objects.filter(conversation_id=conversation_id).count() == 1


# -- stream status -------------------------------------------------------------------------------------------


def test_stream_status_of_a_conversation_without_turns_is_idle(alice: APIClient, conversation: Conversation) -> None:
    response = alice.get(url("conversations", conversation.pk, "stream"))
    assert response.status_code == 200
    assert response.json() == {
        "state": "idle", "message_id": None, "run_id": None, "epoch": 0, "replica": "", "heartbeat_age": None, "recording": None,
    }


def test_stream_status_names_the_live_turn_and_its_recording(alice: APIClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.05")
    conversation_id = uuid.uuid4()
    started = alice.post(url("conversations", conversation_id, "turns"), {"content": "hi", "agent": "scripted"}, format="json").json()

    def recorded() -> dict[str, Any] | None:
        body = alice.get(url("conversations", conversation_id, "stream")).json()
        return body if body["recording"] else None

    body = wait_for(recorded)
    assert body["state"] == "alive"
    assert (body["message_id"], body["run_id"], body["epoch"]) == (started["message_id"], started["run_id"], 1)
    assert body["replica"] and 0 <= body["heartbeat_age"] < 1
    assert body["recording"]["index"] >= 1 and body["recording"]["message"]["content"].startswith("word00")
    alice.post(url("conversations", conversation_id, "turns", "cancel"), format="json")


def test_stream_status_of_a_dead_producer_is_dead(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    plan = dead_turn(alice_scope, conversation_id)
    body = alice.get(url("conversations", conversation_id, "stream")).json()
    assert body["state"] == "dead" and body["message_id"] == str(plan.message_id) and body["heartbeat_age"] > 30


def test_stream_status_of_an_unknown_or_malformed_conversation_is_404(alice: APIClient) -> None:
    for conversation_id in (uuid.uuid4(), "nope"):
        response = alice.get(url("conversations", conversation_id, "stream"))
        assert (response.status_code, response.json()["code"]) == (404, "not_found")


# -- resume ----------------------------------------------------------------------------------------------------


def test_a_dead_turn_is_resumed_over_http_and_completes(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    plan = dead_turn(alice_scope, conversation_id)
    response = alice.post(url("conversations", conversation_id, "turns", "resume"), {}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["message_id"] == str(plan.message_id) and body["epoch"] == 2 and body["run_id"] != str(plan.run_id)
    assert wait_until_idle(alice, conversation_id)["state"] == "done"
    assert Message.objects.get(pk=plan.message_id).content == ANSWER
    assert Run.objects.get(pk=plan.run_id).status == "aborted"
    assert Run.objects.get(pk=body["run_id"]).status == "completed"


def test_resume_names_the_turn_by_message_id(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    plan = dead_turn(alice_scope, conversation_id)
    other = alice.post(url("conversations", conversation_id, "turns", "resume"), {"message_id": str(uuid.uuid4())}, format="json")
    assert (other.status_code, other.json()["code"]) == (410, "turn_not_resumable")
    response = alice.post(url("conversations", conversation_id, "turns", "resume"), {"message_id": str(plan.message_id)}, format="json")
    assert response.status_code == 202
    wait_until_idle(alice, conversation_id)


def test_resume_of_a_live_turn_is_409_and_of_a_finished_or_missing_one_410(alice: APIClient, alice_scope: Scope, conversation: Conversation) -> None:
    resume = url("conversations", conversation.pk, "turns", "resume")
    none = alice.post(resume, {}, format="json")
    assert (none.status_code, none.json()["code"]) == (410, "turn_not_resumable")
    plan = begin_turn(alice_scope, conversation.pk, content="hi")  # claimed, heartbeat fresh: alive
    alive = alice.post(resume, {}, format="json")
    assert (alive.status_code, alive.json()["code"]) == (409, "conversation_busy")
    supervision_store().finish(conversation.pk, epoch=plan.epoch, message_id=plan.message_id, status="done")
    finished = alice.post(resume, {}, format="json")
    assert (finished.status_code, finished.json()["code"]) == (410, "turn_not_resumable")
    assert Run.objects.get(pk=plan.run_id).status == "running"  # nothing written by the refusals
    bad = alice.post(resume, {"message_id": "x"}, format="json")
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid")
    unknown = alice.post(resume, {"turn": 1}, format="json")
    assert (unknown.status_code, unknown.json()["code"]) == (400, "unknown_field")


# -- cancel -------------------------------------------------------------------------------------------------------


def test_a_turn_is_cancelled_over_http_and_keeps_its_partial_answer(alice: APIClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.05")
    conversation_id = uuid.uuid4()
    started = alice.post(url("conversations", conversation_id, "turns"), {"content": "hi", "agent": "scripted"}, format="json").json()
    wait_for(lambda: alice.get(url("conversations", conversation_id, "stream")).json()["recording"])
    response = alice.post(url("conversations", conversation_id, "turns", "cancel"), format="json")
    assert response.status_code == 202
    assert response.json() == {"run_id": started["run_id"]}
    assert wait_until_idle(alice, conversation_id)["state"] == "done"
    answer = Message.objects.get(pk=started["message_id"])
    assert answer.metadata["stop_reason"] == "cancelled"
    assert answer.content and answer.content != ANSWER
    assert Run.objects.get(pk=started["run_id"]).status == "aborted"


def test_cancel_of_a_dead_producers_turn_closes_it_out(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    plan = dead_turn(alice_scope, conversation_id)
    response = alice.post(url("conversations", conversation_id, "turns", "cancel"), format="json")
    assert response.status_code == 202 and response.json() == {"run_id": str(plan.run_id)}
    assert alice.get(url("conversations", conversation_id, "stream")).json()["state"] == "done"
    assert Message.objects.get(pk=plan.message_id).metadata["stop_reason"] == "cancelled"


def test_cancel_without_a_running_turn_is_409_no_turn_running(alice: APIClient, conversation: Conversation) -> None:
    response = alice.post(url("conversations", conversation.pk, "turns", "cancel"), format="json")
    assert (response.status_code, response.json()["code"]) == (409, "no_turn_running")
    unknown = alice.post(url("conversations", conversation.pk, "turns", "cancel"), {"now": True}, format="json")
    assert (unknown.status_code, unknown.json()["code"]) == (400, "unknown_field")
    missing = alice.post(url("conversations", uuid.uuid4(), "turns", "cancel"), format="json")
    assert missing.status_code == 404


# -- runs ----------------------------------------------------------------------------------------------------------


def test_runs_are_listed_newest_first_with_paging_and_a_turn_filter(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    first = dead_turn(alice_scope, conversation_id)
    second = begin_turn(alice_scope, conversation_id, content="again")  # takes over the dead turn
    response = alice.get(url("conversations", conversation_id, "runs"))
    assert response.status_code == 200
    body = response.json()
    assert [run["id"] for run in body["items"]] == [str(second.run_id), str(first.run_id)]
    assert (body["total"], body["offset"], body["has_more"]) == (2, 0, False)
    assert body["items"][1]["status"] == "aborted" and body["items"][1]["error"]["code"] == "producer_lost"
    assert set(body["items"][0]) == {
        "id", "conversation_id", "message_id", "parent_id", "name", "status", "started_at", "finished_at", "usage", "error",
        "detached_since", "cancel_requested", "epoch",
    }
    paged = alice.get(url("conversations", conversation_id, "runs"), {"limit": 1, "offset": 1}).json()
    assert [run["id"] for run in paged["items"]] == [str(first.run_id)] and paged["limit"] == 1
    one_turn = alice.get(url("conversations", conversation_id, "runs"), {"message_id": str(first.message_id)}).json()
    assert [run["id"] for run in one_turn["items"]] == [str(first.run_id)]
    for params, code in (
        ({"limit": "x"}, "invalid_parameter"), ({"limit": 0}, "invalid"), ({"offset": -1}, "invalid"), ({"message_id": "x"}, "invalid_id"),
    ):
        bad = alice.get(url("conversations", conversation_id, "runs"), params)
        assert (bad.status_code, bad.json()["code"]) == (400, code), params


def test_a_run_is_read_with_its_children(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    plan = begin_turn(alice_scope, conversation_id, content="hi", agent="scripted")
    child = run_store().create_or_resume(
        alice_scope, conversation_id, id=uuid.uuid4(), message_id=plan.message_id, name="researcher", parent_id=plan.run_id
    )
    body = alice.get(url("runs", plan.run_id)).json()
    assert body["id"] == str(plan.run_id) and body["status"] == "running" and body["parent_id"] is None
    assert [c["id"] for c in body["children"]] == [str(child.pk)]
    assert body["children"][0]["parent_id"] == str(plan.run_id) and body["children"][0]["name"] == "researcher"
    assert alice.get(url("runs", child.pk)).json()["children"] == []
    for run_id in (uuid.uuid4(), "nope"):
        missing = alice.get(url("runs", run_id))
        assert missing.status_code == 404 and missing.json()["code"] in ("run_not_found", "not_found")


# -- interrupts ----------------------------------------------------------------------------------------------------


def test_an_approval_is_answered_over_http_and_the_turn_goes_on(alice: APIClient, tmp_path: Any) -> None:
    conversation_id = uuid.uuid4()
    started = alice.post(url("conversations", conversation_id, "turns"), {"content": "do it", "agent": "approval"}, format="json").json()
    pending = wait_for(lambda: alice.get(url("conversations", conversation_id, "interrupts")).json()["interrupts"])
    assert len(pending) == 1
    interrupt = pending[0]
    assert interrupt["kind"] == "tool_approval" and interrupt["status"] == "pending"
    assert interrupt["run_id"] == started["run_id"] and interrupt["conversation_id"] == str(conversation_id)
    wait_for(lambda: Run.objects.get(pk=started["run_id"]).status == "interrupted")
    response = alice.post(
        url("conversations", conversation_id, "interrupts"),
        {"answers": [{"id": interrupt["id"], "response": {"approved": True}}]},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert [(i["id"], i["status"], i["response"]) for i in body["interrupts"]] == [(interrupt["id"], "resolved", {"approved": True})]
    continued = body["continued"]
    assert continued["message_id"] == started["message_id"] and continued["run_id"] != started["run_id"]
    assert continued["epoch"] == 2
    assert wait_until_idle(alice, conversation_id)["state"] == "done"
    assert Message.objects.get(pk=started["message_id"]).content == ANSWER
    assert (tmp_path / "tools.log").read_text().splitlines() == ["start q1", "done q1"]
    assert alice.get(url("conversations", conversation_id, "interrupts")).json() == {"interrupts": []}
    everything = alice.get(url("conversations", conversation_id, "interrupts"), {"status": "all"}).json()["interrupts"]
    assert [i["status"] for i in everything] == ["resolved"]
    resolved = alice.get(url("conversations", conversation_id, "interrupts"), {"status": "resolved"}).json()["interrupts"]
    assert [i["id"] for i in resolved] == [interrupt["id"]]
    again = alice.post(
        url("conversations", conversation_id, "interrupts"),
        {"answers": [{"id": interrupt["id"], "response": {"approved": True}}]},
        format="json",
    )
    assert again.status_code == 200 and again.json()["continued"] is None  # a repeat: the first outcome, nothing started
    different = alice.post(
        url("conversations", conversation_id, "interrupts"),
        {"answers": [{"id": interrupt["id"], "response": {"approved": False}}]},
        format="json",
    )
    assert (different.status_code, different.json()["code"]) == (409, "already_answered")


def test_a_lapsed_interrupt_is_410_and_nothing_is_written(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    _, ids = waiting_turn(alice_scope, conversation_id, expired=True)
    response = alice.post(
        url("conversations", conversation_id, "interrupts"), {"answers": [{"id": str(ids[0]), "response": "yes"}]}, format="json"
    )
    assert (response.status_code, response.json()["code"]) == (410, "interrupt_expired")
    assert Interrupt.objects.get(pk=ids[0]).status == "pending"


def test_a_batch_that_does_not_fit_is_refused_whole(alice: APIClient, alice_scope: Scope) -> None:
    conversation_id = uuid.uuid4()
    plan, (first, second) = waiting_turn(alice_scope, conversation_id, questions=2)
    answers = url("conversations", conversation_id, "interrupts")
    cases = [
        ({"answers": [{"id": str(first), "response": 1}, {"id": str(first), "response": 1}, {"id": str(second), "response": 1}]},
         400, "duplicate_answer"),
        ({"answers": [{"id": str(first), "response": 1}, {"id": str(second), "response": 1}, {"id": str(uuid.uuid4()), "response": 1}]},
         404, "interrupt_not_found"),
        ({"answers": []}, 400, "invalid"),
        ({"answers": [{"id": str(first)}]}, 400, "invalid"),
        ({"answers": [{"id": "x", "response": 1}]}, 400, "invalid"),
        ({"answers": [{"id": str(first), "response": 1, "note": "hi"}]}, 400, "unknown_field"),
        ({"answers": {"id": str(first)}}, 400, "invalid"),
        ({"replies": []}, 400, "unknown_field"),
    ]
    for body, status, code in cases:
        response = alice.post(answers, body, format="json")
        assert (response.status_code, response.json()["code"]) == (status, code), (body, response.content)
    assert set(Interrupt.objects.values_list("status", flat=True)) == {"pending"}
    assert Run.objects.get(pk=plan.run_id).status == "interrupted"
    both = alice.post(
        answers, {"answers": [{"id": str(second), "response": None}, {"id": str(first), "response": [1]}]}, format="json"
    )
    assert both.status_code == 200
    assert [i["id"] for i in both.json()["interrupts"]] == [str(second), str(first)]
    assert both.json()["continued"]["message_id"] == str(plan.message_id)
    wait_until_idle(alice, conversation_id)


def test_one_answer_of_two_is_kept_and_the_turn_stays_parked_until_the_last(alice: APIClient, alice_scope: Scope) -> None:
    """Issue 24: TanStack's resolve(interruptId) of one of a batch; before, 400 unanswered_interrupts and nothing kept."""
    conversation_id = uuid.uuid4()
    plan, (first, second) = waiting_turn(alice_scope, conversation_id, questions=2)
    answers = url("conversations", conversation_id, "interrupts")
    one = alice.post(answers, {"answers": [{"id": str(first), "response": "yes"}]}, format="json")
    assert one.status_code == 200, one.content
    assert one.json()["continued"] is None and [i["status"] for i in one.json()["interrupts"]] == ["resolved"]
    assert Interrupt.objects.get(pk=second).status == "pending"
    assert Run.objects.get(pk=plan.run_id).status == "interrupted"
    last = alice.post(answers, {"answers": [{"id": str(second), "response": "no"}]}, format="json")
    assert last.status_code == 200 and last.json()["continued"]["message_id"] == str(plan.message_id)
    wait_until_idle(alice, conversation_id)


def test_interrupts_listing_refuses_a_bad_status(alice: APIClient, conversation: Conversation) -> None:
    assert alice.get(url("conversations", conversation.pk, "interrupts")).json() == {"interrupts": []}
    bad = alice.get(url("conversations", conversation.pk, "interrupts"), {"status": "maybe"})
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid")
    assert alice.get(url("conversations", "nope", "interrupts")).status_code == 404


# -- who may do what ---------------------------------------------------------------------------------------------------


def _stream(client: APIClient, setup: dict[str, Any]) -> Any:
    return client.get(url("conversations", setup["conversation_id"], "stream"))


def _runs(client: APIClient, setup: dict[str, Any]) -> Any:
    return client.get(url("conversations", setup["conversation_id"], "runs"))


def _run(client: APIClient, setup: dict[str, Any]) -> Any:
    return client.get(url("runs", setup["run_id"]))


def _interrupts(client: APIClient, setup: dict[str, Any]) -> Any:
    return client.get(url("conversations", setup["conversation_id"], "interrupts"))


def _start(client: APIClient, setup: dict[str, Any]) -> Any:
    return client.post(url("conversations", setup["conversation_id"], "turns"), {"content": "hi"}, format="json")


def _resume(client: APIClient, setup: dict[str, Any]) -> Any:
    return client.post(url("conversations", setup["conversation_id"], "turns", "resume"), {}, format="json")


def _cancel(client: APIClient, setup: dict[str, Any]) -> Any:
    return client.post(url("conversations", setup["conversation_id"], "turns", "cancel"), format="json")


def _answer(client: APIClient, setup: dict[str, Any]) -> Any:
    answers = [{"id": str(setup["interrupt_id"]), "response": "yes"}]
    return client.post(url("conversations", setup["conversation_id"], "interrupts"), {"answers": answers}, format="json")


def setup_for(endpoint: str, scope: Scope) -> dict[str, Any]:
    """A conversation of alice's in the state the endpoint acts on."""
    conversation_id = uuid.uuid4()
    if endpoint == "start":
        conversation_store().create(scope, id=conversation_id, agent="echo")
        return {"conversation_id": conversation_id}
    if endpoint in ("resume", "cancel"):
        plan = dead_turn(scope, conversation_id, agent="echo")
        return {"conversation_id": conversation_id, "run_id": plan.run_id}
    plan, ids = waiting_turn(scope, conversation_id)
    return {"conversation_id": conversation_id, "run_id": plan.run_id, "interrupt_id": ids[0]}


READS = {"stream": _stream, "runs": _runs, "run": _run, "interrupts": _interrupts}
WRITES = {"start": (_start, 202), "resume": (_resume, 202), "cancel": (_cancel, 202), "answer": (_answer, 200)}
ACTORS = ["owner", "tenant_user", "shared_reader", "other_tenant", "anonymous"]
EXPECTED = {
    **{name: {"owner": 200, "tenant_user": 404, "shared_reader": 200, "other_tenant": 404, "anonymous": 403} for name in READS},
    **{
        name: {"owner": ok, "tenant_user": 404, "shared_reader": 403, "other_tenant": 404, "anonymous": 403}
        for name, (_, ok) in WRITES.items()
    },
}
# A start without an agent takes the conversation's only when the caller may read it: for anyone else the id
# names nothing, exactly like an unknown one (400 unknown_agent), so the answer never tells that it exists.
EXPECTED["start"].update({"tenant_user": 400, "other_tenant": 400})


@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize("endpoint", [*READS, *WRITES])
def test_authorization_matrix(
    endpoint: str, actor: str, alice_scope: Scope, alice_user: Any, bob_user: Any, mallory_user: Any,
    client_for: Callable[[Any], APIClient],
) -> None:
    """Every endpoint against the owner, another user of the tenant, a reader of a shared conversation,
    a user of another tenant (carrying the owner's user id) and an anonymous client."""
    setup = setup_for(endpoint, alice_scope)
    if actor == "shared_reader":
        conversation_store().share(alice_scope, setup["conversation_id"])
    user = {"owner": alice_user, "tenant_user": bob_user, "shared_reader": bob_user, "other_tenant": mallory_user, "anonymous": None}[actor]
    call = READS.get(endpoint) or WRITES[endpoint][0]
    messages_before = Message.objects.count()
    response = call(client_for(user), setup)
    expected = EXPECTED[endpoint][actor]
    assert response.status_code == expected, response.content
    body = response.json()
    if expected >= 400:
        assert set(body) <= {"code", "message", "details"} and body["code"] and body["message"]
        assert Message.objects.count() == messages_before
        expected_code = {403: "conversation_not_owned" if actor == "shared_reader" else "not_authenticated"}.get(expected)
        if expected_code:
            assert body["code"] == expected_code
    if expected < 300 and endpoint in WRITES:
        wait_until_idle(client_for(alice_user), setup["conversation_id"])
