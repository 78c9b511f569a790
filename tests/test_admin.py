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
