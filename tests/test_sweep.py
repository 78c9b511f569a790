"""``manage.py sweep`` removes what retention says, in batches, and keeps the rest."""

from __future__ import annotations

import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from agent_persistence.models import Event, Interrupt, StoredFile, StreamRecording, TurnSupervision
from agent_persistence.stores import conversation_store, event_store, file_store, interrupt_store, run_store

pytestmark = pytest.mark.django_db


def sweep(*args: str) -> str:
    out = StringIO()
    call_command("sweep", *args, stdout=out)
    return out.getvalue()


def test_sweep_removes_expired_files_and_content_in_batches(alice: Any, django_capture_on_commit_callbacks: Any) -> None:
    conversation = conversation_store().create(alice)
    past, future = timezone.now() - timedelta(minutes=1), timezone.now() + timedelta(days=1)
    expired = [file_store().save(alice, conversation_id=conversation.pk, content=b"x", name=f"{i}.txt", expires_at=past) for i in range(5)]
    kept = file_store().save(alice, conversation_id=conversation.pk, content=b"y", name="kept.txt", expires_at=future)
    names = [f.content.name for f in expired]
    storage = expired[0].content.storage
    with django_capture_on_commit_callbacks(execute=True):
        assert "files: 5" in sweep("--only", "files", "--batch-size", "2")
    assert list(StoredFile.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not any(storage.exists(name) for name in names)


def test_sweep_prunes_events_past_retention_only_when_configured(alice: Any) -> None:
    conversation = conversation_store().create(alice)
    event_store().append(alice, conversation.pk, [{"type": "a"}, {"type": "b"}])
    Event.objects.filter(seq=1).update(created_at=timezone.now() - timedelta(hours=2))
    assert "events: 0" in sweep("--only", "events")
    with override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, "EVENT_RETENTION": 3600}):
        assert "events: 1" in sweep("--only", "events")
    assert list(Event.objects.values_list("seq", flat=True)) == [2]


def test_sweep_purges_recordings_of_finished_turns_and_cancels_lapsed_interrupts(alice: Any) -> None:
    conversation = conversation_store().create(alice)
    message_id = uuid.uuid4()
    TurnSupervision.objects.create(conversation=conversation, message_id=message_id, epoch=1, status="done")
    StreamRecording.objects.create(conversation=conversation, message_id=message_id, index=3)
    StreamRecording.objects.filter(pk=conversation.pk).update(updated_at=timezone.now() - timedelta(days=2))
    run = run_store().create_or_resume(alice, conversation.pk, id=uuid.uuid4(), message_id=message_id)
    lapsed = interrupt_store().create(
        alice, conversation.pk, id=uuid.uuid4(), run_id=run.pk, kind="generic", expires_at=timezone.now() - timedelta(seconds=1)
    )
    output = sweep("--only", "recordings", "--only", "interrupts")
    assert "recordings: 1" in output and "interrupts: 1" in output
    assert not StreamRecording.objects.exists()
    assert Interrupt.objects.get(pk=lapsed.pk).status == "cancelled"


def test_sweep_clears_expired_oauth_pendings_and_deletes_empty_records() -> None:
    from agent_persistence.fields import digest
    from agent_persistence.models import McpIntegration

    McpIntegration.objects.create(
        user="alice", server="calendar", pending_state_digest=digest("s1"), pending_code_verifier="v",
        pending_expires_at=timezone.now() - timedelta(minutes=1),
    )
    kept = McpIntegration.objects.create(user="bob", server="calendar", access_token="t")
    assert "oauth: 1" in sweep("--only", "oauth")
    assert list(McpIntegration.objects.values_list("pk", flat=True)) == [kept.pk]
