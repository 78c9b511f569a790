"""The admin shows blobs, artifacts and generation runs, and changes none of them."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from agent_persistence.ids import uuid7
from agent_persistence.stores import artifact_store, conversation_store, generation_run_store, run_store

pytestmark = pytest.mark.django_db


def test_pages_render_and_offer_no_add_change_or_delete(admin_client: Any, alice: Any) -> None:
    conversation = conversation_store().create(alice, agent="echo")
    run = run_store().create_or_resume(alice, conversation.pk, id=uuid7(), message_id=uuid7())
    artifact = artifact_store().save(alice, run_id=run.pk, content=b"PNG", media_type="image/png", name="chart.png")
    generation = generation_run_store().create_or_resume(alice, id=uuid7(), slot="product-42-hero", kind="image")
    for model, row in (("blob", artifact.blob), ("artifact", artifact), ("generationrun", generation)):
        listing = admin_client.get(reverse(f"admin:agent_persistence_{model}_changelist"))
        assert listing.status_code == 200
        page = admin_client.get(reverse(f"admin:agent_persistence_{model}_change", args=[row.pk]))
        assert page.status_code == 200
        body = page.content.decode()
        assert 'name="_save"' not in body and "deletelink" not in body
        assert admin_client.get(reverse(f"admin:agent_persistence_{model}_add")).status_code == 403
    assert "product-42-hero" in admin_client.get(reverse("admin:agent_persistence_generationrun_changelist")).content.decode()
