"""Issue 24 part 3 over REST: what TanStack's conformance suite found missing, as the endpoints expose it."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from agent_persistence.ids import uuid7

pytestmark = pytest.mark.django_db


def url(name: str, *args: Any) -> str:
    return reverse(f"agent_persistence:{name}", args=args)


def test_generation_run_artifact_refs_are_patched_and_read(alice_client: Any) -> None:
    run_id = str(uuid7())
    created = alice_client.post(url("generation-run-list"), {"id": run_id, "slot": "hero", "kind": "image"}, format="json")
    assert created.status_code == 200 and created.json()["artifacts"] == []
    refs = [{"artifactId": str(uuid7()), "blobKey": "artifacts/x/1", "mediaType": "image/png"}]
    patched = alice_client.patch(url("generation-run-detail", run_id), {"artifacts": refs, "status": "completed"},
                                 format="json")
    assert patched.status_code == 200, patched.content
    assert patched.json()["artifacts"] == refs
    assert alice_client.get(url("generation-run-detail", run_id)).json()["artifacts"] == refs
    assert alice_client.get(url("generation-run-latest"), {"slot": "hero"}).json()["artifacts"] == refs
    for bad in ({"artifacts": "refs"}, {"artifacts": ["a"]}, {"artifacts": [1]}, {"artifacts": None}):
        response = alice_client.patch(url("generation-run-detail", run_id), bad, format="json")
        assert response.status_code == 400, (bad, response.content)
        assert response.json()["details"]["field"].startswith("artifacts"), response.json()
    assert alice_client.get(url("generation-run-detail", run_id)).json()["artifacts"] == refs


def test_record_only_artifacts_are_read_and_downloaded(alice_client: Any, alice_scope: Any) -> None:
    from agent_persistence.stores import artifact_store, blob_store, generation_run_store

    run = generation_run_store().create_or_resume(alice_scope, id=uuid7(), slot="hero", kind="image")
    blob_store().put(alice_scope.tenant, "uploads/hero.png", b"\x89PNG", content_type="image/png")
    stored = artifact_store().save_record(alice_scope, id=uuid7(), run_id=run.pk, blob_key="uploads/hero.png",
                                          media_type="image/png")
    hosted = artifact_store().save_record(alice_scope, id=uuid7(), run_id=run.pk, source_url="https://cdn.example/a.png")
    body = alice_client.get(url("artifact-detail", stored.pk)).json()
    assert (body["id"], body["blob_key"], body["source_url"], body["size"]) == (str(stored.pk), "uploads/hero.png", "", 4)
    content = alice_client.get(url("artifact-content", stored.pk))
    assert content.status_code == 200 and b"".join(content.streaming_content) == b"\x89PNG"
    partial = alice_client.get(url("artifact-content", stored.pk), HTTP_RANGE="bytes=1-2")
    assert partial.status_code == 206 and b"".join(partial.streaming_content) == b"PN"
    body = alice_client.get(url("artifact-detail", hosted.pk)).json()
    assert (body["source_url"], body["blob_key"], body["size"]) == ("https://cdn.example/a.png", "", None)
    external = alice_client.get(url("artifact-content", hosted.pk))
    assert (external.status_code, external.json()["code"]) == (404, "artifact_content_external")
    assert external.json()["details"]["source_url"] == "https://cdn.example/a.png"
    listed = alice_client.get(url("run-artifacts", run.pk)).json()
    assert {item["id"] for item in listed["items"]} == {str(stored.pk), str(hosted.pk)}


@pytest.mark.django_db(transaction=True)
def test_cancelling_the_last_pending_interrupt_continues_the_turn(
    alice_client: Any, alice_scope: Any, drained_producer_loop: None
) -> None:
    """One approval answered by a partial batch, the other cancelled on its own: the cancel is the last settlement.

    Before: the cancel endpoint never drove the turn on, so the turn stayed parked with nothing left to answer.
    """
    import uuid

    from agent_persistence.models import Interrupt, Run
    from tests.api import test_turns as turns

    conversation_id = uuid.uuid4()
    plan, (first, second) = turns.waiting_turn(alice_scope, conversation_id, questions=2)
    answered = alice_client.post(turns.url("conversations", conversation_id, "interrupts"),
                          {"answers": [{"id": str(first), "response": "yes"}]}, format="json")
    assert answered.status_code == 200 and answered.json()["continued"] is None
    cancelled = alice_client.post(url("interrupt-cancel", second))
    assert cancelled.status_code == 200, cancelled.content
    assert cancelled.json()["status"] == "cancelled"
    assert Interrupt.objects.get(pk=second).status == "cancelled"
    turns.wait_until_idle(alice_client, conversation_id)
    runs = Run.objects.filter(conversation_id=conversation_id).order_by("started_at", "id")
    assert [run.status for run in runs] == ["completed", "completed"], [(r.pk, r.status) for r in runs]
    assert runs[0].pk == plan.run_id
    # Cancelling it again is a repeat: the interrupt as it is, and no second continuation.
    again = alice_client.post(url("interrupt-cancel", second))
    assert again.status_code == 200 and Run.objects.filter(conversation_id=conversation_id).count() == 2
