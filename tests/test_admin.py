"""The admin: every model browsable, runtime rows read-only, operator actions behind change permission,
secrets never shown (not even under a lost key), and the dashboard of the app index."""

from __future__ import annotations

import logging
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse
from django.utils import timezone

from agent_persistence import models
from agent_persistence.fields import DecryptionFailed, digest
from agent_persistence.stores.supervision import status_of

SECRETS = ["access-token-SECRET-1", "refresh-token-SECRET-2", "verifier-SECRET-3", "client-secret-SECRET-4"]
RUNTIME_MODELS = ["run", "interrupt", "turnsupervision", "streamrecording", "agentcheckpoint", "event", "message", "lease"]


def url(name: str, *args: Any) -> str:
    return reverse(f"admin:agent_persistence_{name}", args=args)


@pytest.fixture
def rows(db: Any) -> dict[str, Any]:
    conversation = models.Conversation.objects.create(tenant="acme", owner="alice", title="Trip", agent="helper")
    message = models.Message.objects.create(conversation=conversation, position=0, role="user", content="hi")
    run = models.Run.objects.create(conversation=conversation, message_id=uuid.uuid4(), name="helper")
    interrupt = models.Interrupt.objects.create(run=run, conversation=conversation, kind="tool_approval")
    event = models.Event.objects.create(conversation=conversation, seq=1, type="status_running")
    supervision = models.TurnSupervision.objects.create(conversation=conversation, message_id=run.message_id, epoch=1)
    recording = models.StreamRecording.objects.create(conversation=conversation, message_id=run.message_id, index=3)
    checkpoint = models.AgentCheckpoint.objects.create(conversation=conversation, state={"next": 3})
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
        "event": event,
        "turnsupervision": supervision,
        "streamrecording": recording,
        "agentcheckpoint": checkpoint,
        "lease": lease,
        "task": task,
        "mcpintegration": integration,
        "mcpclientinfo": client,
    }


def staff(*codenames: str) -> Client:
    """A logged-in staff user (not a superuser) holding exactly these permissions of the app."""
    user = User.objects.create_user(f"staff-{uuid.uuid4().hex[:8]}", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="agent_persistence", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def browser_form(page: str) -> dict[str, str]:
    """What a browser submits from a change form: its inputs' values, checkboxes only when checked."""
    form = {}
    for tag in re.findall(r"<input [^>]*>", page):
        attributes = dict(re.findall(r'([a-z_-]+)="([^"]*)"', tag))
        if "name" not in attributes or attributes.get("type") in ("submit", "button"):
            continue
        if attributes.get("type") == "checkbox" and "checked" not in tag:
            continue
        form[attributes["name"]] = attributes.get("value", "on")
    return form


def ciphertexts() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT access_token, refresh_token, pending_code_verifier FROM agent_persistence_mcpintegration")
        stored = list(cursor.fetchone())
        cursor.execute("SELECT client_secret FROM agent_persistence_mcpclientinfo")
        stored += list(cursor.fetchone())
    return stored


# -- every model, no secret ---------------------------------------------------------------------


def test_every_model_of_the_app_is_registered() -> None:
    from django.apps import apps

    for model in apps.get_app_config("agent_persistence").get_models():
        assert admin.site.is_registered(model), model


@pytest.mark.parametrize("model", [m._meta.model_name for m in admin.site._registry if m._meta.app_label == "agent_persistence"])
def test_changelists_render_without_secrets(admin_client: Any, rows: dict[str, Any], model: str) -> None:
    response = admin_client.get(url(f"{model}_changelist"))
    assert response.status_code == 200
    body = response.content.decode()
    assert not any(secret in body for secret in SECRETS + ciphertexts())


@pytest.mark.parametrize("name", ["conversation", "message", "run", "interrupt", "event", "turnsupervision", "streamrecording", "agentcheckpoint", "lease", "task", "mcpintegration", "mcpclientinfo"])
def test_change_pages_render_without_secrets(admin_client: Any, rows: dict[str, Any], name: str) -> None:
    response = admin_client.get(url(f"{name}_change", rows[name].pk))
    assert response.status_code == 200
    body = response.content.decode()
    assert not any(secret in body for secret in SECRETS + ciphertexts())
    if name == "conversation":
        assert "status_running" in body and "tool_approval" in body  # events and interrupts inline


def test_secrets_are_encrypted_in_the_table(rows: dict[str, Any]) -> None:
    assert all(value and value not in SECRETS for value in ciphertexts())
    rows["mcpintegration"].refresh_from_db()
    assert rows["mcpintegration"].access_token == SECRETS[0]


def test_secret_columns_say_set_or_not_set(admin_client: Any, rows: dict[str, Any]) -> None:
    models.McpIntegration.objects.filter(pk=rows["mcpintegration"].pk).update(refresh_token=None)
    body = admin_client.get(url("mcpintegration_changelist")).content.decode()
    cells = re.findall(r'<td class="field-(access_token_state|refresh_token_state)">([^<]*)</td>', body)
    assert cells == [("access_token_state", "set"), ("refresh_token_state", "not set")]


# -- a lost encryption key ----------------------------------------------------------------------


@pytest.fixture
def lost_key(rows: dict[str, Any]) -> Any:
    """ENCRYPTION_KEYS replaced by a key that decrypts none of the stored secrets."""
    with override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, "ENCRYPTION_KEYS": [Fernet.generate_key().decode()]}):
        yield rows


@pytest.mark.parametrize("name", ["mcpintegration", "mcpclientinfo"])
def test_a_lost_key_leaves_the_pages_readable_and_says_unreadable(
    admin_client: Any, lost_key: dict[str, Any], name: str, caplog: pytest.LogCaptureFixture
) -> None:
    stored = ciphertexts()
    with pytest.raises(DecryptionFailed):  # the model itself cannot load the row any more
        type(lost_key[name]).objects.get(pk=lost_key[name].pk)
    caplog.set_level(logging.DEBUG)
    for page in (url(f"{name}_changelist"), url(f"{name}_change", lost_key[name].pk), url(f"{name}_delete", lost_key[name].pk)):
        response = admin_client.get(page)
        assert response.status_code == 200, page
        body = response.content.decode()
        assert not any(secret in body for secret in SECRETS + stored)
    assert "unreadable" in admin_client.get(url(f"{name}_changelist")).content.decode()
    assert "unreadable" in admin_client.get(url(f"{name}_change", lost_key[name].pk)).content.decode()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert not any(secret in logged for secret in SECRETS + stored)


def test_under_a_lost_key_client_info_can_be_corrected_and_integrations_deleted(admin_client: Any, lost_key: dict[str, Any]) -> None:
    client, integration = lost_key["mcpclientinfo"], lost_key["mcpintegration"]
    stored = ciphertexts()
    form = {"tenant": "acme", "server": "calendar", "client_id": "new-cid", "registration": "{}", "_save": "Save"}
    assert admin_client.post(url("mcpclientinfo_change", client.pk), form).status_code == 302
    assert models.McpClientInfo.objects.filter(pk=client.pk).values_list("client_id", flat=True).get() == "new-cid"
    assert ciphertexts()[3] == stored[3]  # the secret column was not rewritten
    assert admin_client.post(url("mcpintegration_delete", integration.pk), {"post": "yes"}).status_code == 302
    assert not models.McpIntegration.objects.filter(pk=integration.pk).exists()
    history = " ".join(f"{entry.object_repr} {entry.change_message}" for entry in LogEntry.objects.all())
    assert "Client id" in history and not any(secret in history for secret in SECRETS + stored)


# -- read-only runtime rows ---------------------------------------------------------------------


@pytest.mark.parametrize("name", RUNTIME_MODELS)
def test_runtime_rows_have_no_add_no_save_and_no_delete(admin_client: Any, rows: dict[str, Any], name: str) -> None:
    obj = rows[name]
    page = admin_client.get(url(f"{name}_change", obj.pk)).content.decode()
    assert 'name="_save"' not in page and 'name="_continue"' not in page and "deletelink" not in page
    assert admin_client.get(url(f"{name}_add")).status_code == 403
    assert admin_client.get(url(f"{name}_delete", obj.pk)).status_code == 403
    changelist = admin_client.get(url(f"{name}_changelist")).content.decode()
    assert url(f"{name}_add") not in changelist and "delete_selected" not in changelist


def test_staff_cannot_edit_an_interrupts_status_or_response(admin_client: Any, rows: dict[str, Any]) -> None:
    interrupt = rows["interrupt"]
    form = {"status": "resolved", "response": '{"approved": true}', "resolved_at_0": "2030-01-01", "resolved_at_1": "00:00:00", "_save": "Save"}
    assert admin_client.post(url("interrupt_change", interrupt.pk), form).status_code == 403
    interrupt.refresh_from_db()
    assert (interrupt.status, interrupt.response, interrupt.resolved_at) == ("pending", None, None)


@pytest.mark.parametrize("name", ["run", "event", "turnsupervision", "interrupt", "message"])
def test_staff_cannot_add_runtime_rows(admin_client: Any, rows: dict[str, Any], name: str) -> None:
    model = type(rows[name])
    before = model.objects.count()
    form = {"conversation": str(rows["conversation"].pk), "message_id": str(uuid.uuid4()), "epoch": "5", "seq": "2", "type": "x", "run": str(rows["run"].pk), "role": "user"}
    assert admin_client.post(url(f"{name}_add"), form).status_code == 403
    assert model.objects.count() == before


def test_a_conversation_lets_staff_change_only_title_and_shared(admin_client: Any, rows: dict[str, Any]) -> None:
    conversation, run = rows["conversation"], rows["run"]
    page = admin_client.get(url("conversation_change", conversation.pk)).content.decode()
    editable = set(re.findall(r'<(?:input|select|textarea)[^>]*name="([a-z_]+)"', page)) - {"csrfmiddlewaretoken", "_save", "_continue", "_addanother"}
    assert editable <= {"title", "shared"} and "title" in editable
    form = {
        **browser_form(page),
        "title": "Renamed",
        "shared": "on",
        "state": '{"hacked": true}',
        "last_turn_status": "complete",
        "epoch": "99",
        "version": "42",
        "metadata": '{"pinned": true}',
        "runs-0-id": str(run.pk),
        "runs-0-status": "completed",
        "interrupts-0-status": "resolved",
        "_save": "Save",
    }
    assert admin_client.post(url("conversation_change", conversation.pk), form).status_code == 302
    conversation.refresh_from_db()
    assert (conversation.title, conversation.shared) == ("Renamed", True)
    assert conversation.version == 1  # bumped once, by the store, as an owner's update is
    assert (conversation.state, conversation.last_turn_status, conversation.epoch, conversation.metadata, conversation.pinned) == ({}, None, 0, {}, False)
    assert models.Run.objects.get(pk=run.pk).status == "running"
    assert models.Interrupt.objects.get(pk=rows["interrupt"].pk).status == "pending"


def test_a_long_conversation_inlines_only_its_latest_runs_and_events(admin_client: Any, rows: dict[str, Any]) -> None:
    conversation = rows["conversation"]
    models.Event.objects.filter(conversation=conversation).delete()
    models.Event.objects.bulk_create(models.Event(conversation=conversation, seq=seq, type=f"type_{seq}") for seq in range(1, 61))
    models.Run.objects.bulk_create(
        models.Run(conversation=conversation, message_id=uuid.uuid4(), name=f"run-{n}", started_at=timezone.now() - timedelta(minutes=n)) for n in range(1, 60)
    )
    models.Conversation.objects.filter(pk=conversation.pk).update(last_event_seq=60)
    page = change_page(admin_client, conversation.pk)
    events = re.findall(r'<td class="field-type">\s*<p>(type_\d+)</p>', page)
    assert events == [f"type_{seq}" for seq in range(11, 61)]
    assert 'name="runs-INITIAL_FORMS" value="50"' in page and "run-49" in page and "run-50" not in page
    assert "60 events</a>" in page and "60 runs</a>" in page and f"?conversation__id__exact={conversation.pk}" in page
    form = {**browser_form(page), "title": "Still editable", "_save": "Save"}
    assert admin_client.post(url("conversation_change", conversation.pk), form).status_code == 302
    assert models.Conversation.objects.get(pk=conversation.pk).title == "Still editable"


def test_conversations_are_not_added_in_the_admin(admin_client: Any, db: Any) -> None:
    assert admin_client.get(url("conversation_add")).status_code == 403


def test_deleting_a_conversation_deletes_what_it_owns(admin_client: Any, rows: dict[str, Any]) -> None:
    conversation = rows["conversation"]
    confirm = admin_client.get(url("conversation_delete", conversation.pk)).content.decode()
    assert "permission to delete" not in confirm and 'name="post"' in confirm
    assert admin_client.post(url("conversation_delete", conversation.pk), {"post": "yes"}).status_code == 302
    assert not models.Conversation.objects.filter(pk=conversation.pk).exists()
    assert not models.Run.objects.exists() and not models.Event.objects.exists() and not models.TurnSupervision.objects.exists()


# -- operator actions ---------------------------------------------------------------------------


def running_turn(alice_scope: Any, *, heartbeat_age: float = 0.0, partial: str = "") -> tuple[Any, Any]:
    """A turn claimed and recorded but driven by no process (as after a crash when aged)."""
    from agent_persistence.runtime.lifecycle import begin_turn

    conversation_id = uuid.uuid4()
    plan = begin_turn(alice_scope, conversation_id, content="go", agent="echo")
    models.TurnSupervision.objects.filter(pk=conversation_id).update(heartbeat_at=timezone.now() - timedelta(seconds=heartbeat_age))
    if partial:
        models.StreamRecording.objects.create(conversation_id=conversation_id, message_id=plan.message_id, index=1, message={"content": partial}, epoch=plan.epoch)
    return conversation_id, plan


def change_page(client: Any, conversation_id: Any) -> str:
    return client.get(url("conversation_change", conversation_id)).content.decode()


def test_the_live_status_is_computed_at_read_time(admin_client: Any, alice: Any) -> None:
    conversation_id, plan = running_turn(alice)
    assert re.search(r"<b>alive</b> \d\.\d s · epoch", change_page(admin_client, conversation_id))
    models.TurnSupervision.objects.filter(pk=conversation_id).update(heartbeat_at=timezone.now() - timedelta(seconds=10))
    page = change_page(admin_client, conversation_id)
    assert "<b>dead</b> 10." in page and f"epoch {plan.epoch}" in page
    assert models.TurnSupervision.objects.get(pk=conversation_id).status == "running"  # nothing "dead" is stored


def run_action(client: Any, model: str, action: str, pk: Any) -> Any:
    response = client.post(url(f"{model}_changelist"), {"action": action, "_selected_action": [str(pk)], "index": "0"})
    assert response.status_code in (200, 302)
    return response


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
    assert LogEntry.objects.filter(object_id=str(conversation_id), change_message__contains="Force released").exists()


def test_force_release_from_the_supervision_list(admin_client: Any, alice: Any) -> None:
    conversation_id, _ = running_turn(alice, heartbeat_age=10)
    run_action(admin_client, "turnsupervision", "force_release_turns", conversation_id)
    assert models.TurnSupervision.objects.get(pk=conversation_id).status == "errored"


def test_abort_stuck_runs(admin_client: Any, alice: Any) -> None:
    _, plan = running_turn(alice)
    run_action(admin_client, "run", "abort_stuck_runs", plan.run_id)
    run = models.Run.objects.get(pk=plan.run_id)
    assert (run.status, run.error["code"]) == ("aborted", "run_stuck")


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


VIEW_ONLY = ("view_conversation", "view_run", "view_turnsupervision", "view_interrupt", "view_event", "view_message")


@pytest.mark.parametrize(
    "model,action",
    [("conversation", "cancel_turns"), ("conversation", "force_release_turns"), ("turnsupervision", "cancel_turns"), ("turnsupervision", "force_release_turns"), ("run", "abort_stuck_runs")],
)
def test_view_only_staff_get_neither_the_action_nor_its_effect(db: Any, alice: Any, model: str, action: str) -> None:
    conversation_id, plan = running_turn(alice)
    client = staff(*VIEW_ONLY)
    changelist = client.get(url(f"{model}_changelist"))
    assert changelist.status_code == 200 and f'value="{action}"' not in changelist.content.decode()
    pk = plan.run_id if model == "run" else conversation_id
    run_action(client, model, action, pk)  # posted directly, as a crafted form would
    run = models.Run.objects.get(pk=plan.run_id)
    assert (run.status, run.cancel_requested) == ("running", False)
    assert models.TurnSupervision.objects.get(pk=conversation_id).status == "running"
    assert models.Conversation.objects.get(pk=conversation_id).last_turn_status == "running"
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize(
    "model,action,permission",
    [("conversation", "force_release_turns", "change_conversation"), ("turnsupervision", "force_release_turns", "change_turnsupervision"), ("run", "abort_stuck_runs", "change_run")],
)
def test_the_models_change_permission_grants_its_actions(db: Any, alice: Any, model: str, action: str, permission: str) -> None:
    conversation_id, plan = running_turn(alice)
    client = staff(*VIEW_ONLY, permission)
    assert f'value="{action}"' in client.get(url(f"{model}_changelist")).content.decode()
    run_action(client, model, action, plan.run_id if model == "run" else conversation_id)
    assert models.Run.objects.get(pk=plan.run_id).status == "aborted"


def test_change_permission_on_a_runtime_row_still_edits_nothing(rows: dict[str, Any]) -> None:
    client = staff("view_interrupt", "change_interrupt", "view_run", "change_run")
    interrupt = rows["interrupt"]
    assert 'name="_save"' not in client.get(url("interrupt_change", interrupt.pk)).content.decode()
    assert client.post(url("interrupt_change", interrupt.pk), {"status": "resolved", "_save": "Save"}).status_code == 403
    assert models.Interrupt.objects.get(pk=interrupt.pk).status == "pending"


# -- readable pages -----------------------------------------------------------------------------


def test_the_conversation_list_shows_title_owner_short_id_and_live_status(admin_client: Any, alice: Any) -> None:
    conversation_id, _ = running_turn(alice)
    models.Conversation.objects.filter(pk=conversation_id).update(title="Weekend in Lyon")
    models.Conversation.objects.create(owner="bob")  # no title, no turn yet
    body = admin_client.get(url("conversation_changelist")).content.decode()
    assert '<td class="field-live_turn"><span class="ap-live ap-live-idle">idle</span></td>' in body and "(untitled)" in body
    row = re.search(r'<tr>.*?Weekend in Lyon.*?</tr>', body, re.DOTALL).group(0)
    assert conversation_id.hex[-8:] in row and "alice" in row and "acme" in row
    assert re.search(r'<span class="ap-live ap-live-alive" title="alive · heartbeat [\d.]+ s ago · epoch \d+ · [^"]+"><b>alive</b>', row)
    assert "agent_persistence/admin.css" in body  # the stylesheet that keeps the status on one line


def test_messages_read_as_text_with_their_tool_calls(admin_client: Any, rows: dict[str, Any]) -> None:
    conversation = rows["conversation"]
    models.Message.objects.create(
        conversation=conversation,
        position=1,
        role="assistant",
        content='It is "sunny" in Lyon.',
        tool_calls=[{"id": "call-1", "name": "get_weather", "arguments": {"city": "Lyon"}, "result": {"sky": "sunny"}}],
    )
    models.Message.objects.create(conversation=conversation, position=2, role="tool", content=[{"type": "text", "text": "sunny, 24 °C"}], name="get_weather", tool_call_id="call-1")
    page = change_page(admin_client, conversation.pk)
    assert '<div class="ap-text">It is &quot;sunny&quot; in Lyon.</div>' in page  # text, not the JSON string '"It is \"sunny\"..."'
    assert '<div class="ap-text">sunny, 24 °C</div>' in page
    assert '<code class="ap-tool-name">get_weather</code>(<code>{&quot;city&quot;: &quot;Lyon&quot;}</code>)' in page
    assert "→ {&quot;sky&quot;: &quot;sunny&quot;}" in page
    listing = admin_client.get(url("message_changelist")).content.decode()
    assert "It is &quot;sunny&quot; in Lyon. [+1 tool call]" in listing


# -- the dashboard ------------------------------------------------------------------------------


def supervised(replica: str, *, heartbeat_age: float, status: str = "running") -> models.TurnSupervision:
    conversation = models.Conversation.objects.create(tenant="acme", owner="alice", title=f"{replica} {heartbeat_age}")
    return models.TurnSupervision.objects.create(
        conversation=conversation, message_id=uuid.uuid4(), epoch=1, replica=replica, status=status, heartbeat_at=timezone.now() - timedelta(seconds=heartbeat_age)
    )


def dashboard_counts(body: str) -> dict[str, Any]:
    section = re.search(r'<div class="module ap-dashboard".*?</table>', body, re.DOTALL).group(0)
    totals = dict(re.findall(r'data-count="([a-z-]+)">([^<]*)<', section.split("<table")[0]))
    replicas = {}
    for replica, cells in re.findall(r'<tr data-replica="([^"]*)">(.*?)</tr>', section, re.DOTALL):
        counts = dict(re.findall(r'data-count="(live|dead)">(?:<a [^>]*>)?(\d+)', cells))
        replicas[replica] = (int(counts["live"]), int(counts["dead"]))
    return {"totals": totals, "replicas": replicas}


def test_the_app_index_dashboard_counts_what_is_true_now(admin_client: Any, db: Any) -> None:
    rows = [
        supervised("web-1:101", heartbeat_age=0.5),
        supervised("web-1:101", heartbeat_age=1.5),
        supervised("web-1:101", heartbeat_age=40),
        supervised("web-2:202", heartbeat_age=0.2),
        supervised("web-2:202", heartbeat_age=600),
        supervised("web-2:202", heartbeat_age=900),
        supervised("web-2:202", heartbeat_age=1, status="done"),
        supervised("web-3:303", heartbeat_age=1, status="errored"),
    ]
    run = models.Run.objects.create(conversation=rows[0].conversation, message_id=rows[0].message_id)
    for expires_in in (None, 60, -60):
        models.Interrupt.objects.create(run=run, conversation=run.conversation, expires_at=None if expires_in is None else timezone.now() + timedelta(seconds=expires_in))
    models.Interrupt.objects.create(run=run, conversation=run.conversation, status="resolved", resolved_at=timezone.now())

    body = admin_client.get(reverse("admin:app_list", args=["agent_persistence"])).content.decode()
    counts = dashboard_counts(body)
    assert counts["replicas"] == {"web-1:101": (2, 1), "web-2:202": (1, 2)}
    assert (counts["totals"]["live"], counts["totals"]["dead"], counts["totals"]["pending-interrupts"]) == ("3", "3", "3")
    assert "(1 lapsed)" in body
    assert re.fullmatch(r"1\.[5-9] s|[2-3]\.\d s", counts["totals"]["oldest-heartbeat"]), counts["totals"]
    # The same verdict as every other reader's:
    verdicts = [status_of(row).state for row in rows]
    assert (verdicts.count("alive"), verdicts.count("dead")) == (3, 3)


def test_the_dashboard_links_to_the_dead_turns(admin_client: Any, db: Any) -> None:
    alive, dead = supervised("web-1", heartbeat_age=0), supervised("web-1", heartbeat_age=60)
    body = admin_client.get(url("turnsupervision_changelist") + "?live=dead").content.decode()
    assert dead.conversation.title in body and alive.conversation.title not in body
    body = admin_client.get(url("conversation_changelist") + "?live=alive").content.decode()
    assert alive.conversation.title in body and dead.conversation.title not in body
    handed_off = supervised("web-2", heartbeat_age=0, status="handed_off")
    body = admin_client.get(url("turnsupervision_changelist") + "?live=handing_off").content.decode()
    assert handed_off.conversation.title in body and alive.conversation.title not in body and dead.conversation.title not in body
    body = admin_client.get(url("conversation_changelist") + "?live=handing_off").content.decode()
    assert handed_off.conversation.title in body and alive.conversation.title not in body


def test_the_dashboard_needs_view_permission_on_supervision_and_costs_other_pages_nothing(admin_client: Any, db: Any) -> None:
    supervised("web-1", heartbeat_age=0)
    app_index = reverse("admin:app_list", args=["agent_persistence"])
    assert "ap-dashboard" not in staff("view_conversation").get(app_index).content.decode()
    assert "ap-dashboard" in staff("view_turnsupervision").get(app_index).content.decode()
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(url("conversation_changelist")).status_code == 200
    assert not any("agent_persistence_interrupt" in query["sql"] for query in queries.captured_queries)


def test_a_runs_page_shows_its_transcript_escaped_and_not_as_a_form_field(admin_client: Any, rows: dict[str, Any]) -> None:
    run = rows["run"]
    models.Run.objects.filter(pk=run.pk).update(transcript=[{"role": "assistant", "content": "<script>alert(1)</script>"}])
    page = admin_client.get(url("run_change", run.pk)).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert 'name="transcript"' not in page
