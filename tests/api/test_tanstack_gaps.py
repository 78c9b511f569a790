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
