"""The admin lists and shows every model, and never shows a secret."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from agent_persistence import models
from agent_persistence.fields import digest

SECRETS = ["access-token-SECRET-1", "refresh-token-SECRET-2", "verifier-SECRET-3", "client-secret-SECRET-4"]


@pytest.fixture
def rows(db: Any) -> dict[str, Any]:
    conversation = models.Conversation.objects.create(tenant="acme", owner="alice", title="Trip", agent="helper")
    message = models.Message.objects.create(conversation=conversation, position=0, role="user", content="hi")
    run = models.Run.objects.create(conversation=conversation, message_id=uuid.uuid4(), name="helper")
    interrupt = models.Interrupt.objects.create(run=run, conversation=conversation, kind="tool_approval")
    models.Event.objects.create(conversation=conversation, seq=1, type="status_running")
    models.TurnSupervision.objects.create(conversation=conversation, message_id=run.message_id, epoch=1)
    models.StreamRecording.objects.create(conversation=conversation, message_id=run.message_id, index=3)
    models.AgentCheckpoint.objects.create(conversation=conversation, state={"next": 3})
    lease = models.Lease.objects.create(key="k", holder="h", expires_at=timezone.now() + timedelta(minutes=1))
    task = models.Task.objects.create(tenant="acme", owner="alice", title="Book", conversation=conversation)
    integration = models.McpIntegration.objects.create(
        tenant="acme",
        user="alice",
        server="calendar",
        access_token=SECRETS[0],
        refresh_token=SECRETS[1],
        pending_code_verifier=SECRETS[2],
        pending_state_digest=digest("state"),
    )
    client = models.McpClientInfo.objects.create(tenant="acme", server="calendar", client_id="cid", client_secret=SECRETS[3])
    return {
        "conversation": conversation,
        "message": message,
        "run": run,
        "interrupt": interrupt,
        "lease": lease,
        "task": task,
        "mcpintegration": integration,
        "mcpclientinfo": client,
    }


def test_every_model_of_the_app_is_registered() -> None:
    from django.apps import apps

    for model in apps.get_app_config("agent_persistence").get_models():
        assert admin.site.is_registered(model), model


@pytest.mark.parametrize("model", [m._meta.model_name for m in admin.site._registry if m._meta.app_label == "agent_persistence"])
def test_changelists_render_without_secrets(admin_client: Any, rows: dict[str, Any], model: str) -> None:
    response = admin_client.get(reverse(f"admin:agent_persistence_{model}_changelist"))
    assert response.status_code == 200
    body = response.content.decode()
    assert not any(secret in body for secret in SECRETS)


@pytest.mark.parametrize("name", ["conversation", "message", "run", "interrupt", "lease", "task", "mcpintegration", "mcpclientinfo"])
def test_change_pages_render_without_secrets(admin_client: Any, rows: dict[str, Any], name: str) -> None:
    obj = rows[name]
    response = admin_client.get(reverse(f"admin:agent_persistence_{name}_change", args=[obj.pk]))
    assert response.status_code == 200
    body = response.content.decode()
    assert not any(secret in body for secret in SECRETS)
    if name == "conversation":
        assert "status_running" in body and "tool_approval" in body  # events and interrupts inline


def test_secrets_are_encrypted_in_the_table(rows: dict[str, Any]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT access_token, refresh_token, pending_code_verifier FROM agent_persistence_mcpintegration")
        stored = cursor.fetchone()
    assert all(value and value not in SECRETS for value in stored)
    rows["mcpintegration"].refresh_from_db()
    assert rows["mcpintegration"].access_token == SECRETS[0]


def running_turn(alice_scope: Any, *, heartbeat_age: float = 0.0, partial: str = "") -> tuple[Any, Any]:
    """A turn claimed and recorded but driven by no process (as after a crash when aged)."""
    from agent_persistence.runtime.turns import begin_turn

    conversation_id = uuid.uuid4()
    plan = begin_turn(alice_scope, conversation_id, content="go", agent="echo")
    models.TurnSupervision.objects.filter(pk=conversation_id).update(heartbeat_at=timezone.now() - timedelta(seconds=heartbeat_age))
    if partial:
        models.StreamRecording.objects.create(conversation_id=conversation_id, message_id=plan.message_id, index=1, message={"content": partial}, epoch=plan.epoch)
    return conversation_id, plan


def change_page(admin_client: Any, conversation_id: Any) -> str:
    return admin_client.get(reverse("admin:agent_persistence_conversation_change", args=[conversation_id])).content.decode()


def test_the_live_status_is_computed_at_read_time(admin_client: Any, alice: Any) -> None:
    conversation_id, plan = running_turn(alice)
    assert "alive (heartbeat" in change_page(admin_client, conversation_id)
    models.TurnSupervision.objects.filter(pk=conversation_id).update(heartbeat_at=timezone.now() - timedelta(seconds=10))
    page = change_page(admin_client, conversation_id)
    assert "dead (heartbeat 10." in page and f"epoch {plan.epoch}" in page
    assert models.TurnSupervision.objects.get(pk=conversation_id).status == "running"  # nothing "dead" is stored


def run_action(admin_client: Any, model: str, action: str, pk: Any) -> None:
    url = reverse(f"admin:agent_persistence_{model}_changelist")
    response = admin_client.post(url, {"action": action, "_selected_action": [str(pk)]})
    assert response.status_code == 302


def test_force_release_fences_the_producer_and_ends_the_turn_as_errored(admin_client: Any, alice: Any) -> None:
    from agent_persistence.exceptions import Fenced
    from agent_persistence.stores.supervision import fence

    conversation_id, plan = running_turn(alice)
    run_action(admin_client, "conversation", "force_release_turns", conversation_id)
    assert models.TurnSupervision.objects.get(pk=conversation_id).status == "errored"
    assert models.Run.objects.get(pk=plan.run_id).error["code"] == "force_released"
    assert models.Conversation.objects.get(pk=conversation_id).last_turn_status == "errored"
    with pytest.raises(Fenced):
        fence(conversation_id, plan.epoch)


def test_abort_stuck_runs(admin_client: Any, alice: Any) -> None:
    conversation_id, plan = running_turn(alice)
    run_action(admin_client, "run", "abort_stuck_runs", plan.run_id)
    assert models.Run.objects.get(pk=plan.run_id).status == "aborted"


def test_cancel_closes_out_a_dead_turn_with_its_partial_answer(admin_client: Any, alice: Any) -> None:
    conversation_id, plan = running_turn(alice, heartbeat_age=10, partial="half an ans")
    run_action(admin_client, "conversation", "cancel_turns", conversation_id)
    answer = models.Message.objects.get(conversation_id=conversation_id, role="assistant")
    assert answer.content == "half an ans" and answer.id == plan.message_id
    assert models.Conversation.objects.get(pk=conversation_id).last_turn_status == "cancelled"


def test_cancel_flags_a_live_turn_for_its_producer(admin_client: Any, alice: Any) -> None:
    conversation_id, plan = running_turn(alice)
    run_action(admin_client, "conversation", "cancel_turns", conversation_id)
    assert models.Run.objects.get(pk=plan.run_id).cancel_requested is True
    assert not models.Message.objects.filter(conversation_id=conversation_id, role="assistant").exists()
