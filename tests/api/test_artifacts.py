"""The artifact and generation-run endpoints: listing, downloads with Range, deletes and erasure, hostile input."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.urls import reverse

from agent_persistence.ids import uuid7
from agent_persistence.stores import artifact_store, blob_store, conversation_store, generation_run_store, run_store

pytestmark = pytest.mark.django_db

CONTENT = b"0123456789abcdef"


def url(name: str, *args: Any) -> str:
    return reverse(f"agent_persistence:{name}", args=args)


def body_of(response: Any) -> bytes:
    """A download's bytes, read to the end (the test client then closes the stream)."""
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.fixture
def conversation(alice_scope: Any) -> Any:
    return conversation_store().create(alice_scope, agent="echo")


@pytest.fixture
def run(alice_scope: Any, conversation: Any) -> Any:
    return run_store().create_or_resume(alice_scope, conversation.pk, id=uuid7(), message_id=uuid7())


@pytest.fixture
def artifact(alice_scope: Any, run: Any) -> Any:
    return artifact_store().save(alice_scope, run_id=run.pk, content=CONTENT, media_type="image/png", name="chart.png")


# -- listing and reading ------------------------------------------------------------------------------


def test_lists_and_record(alice_client: Any, artifact: Any, run: Any, conversation: Any) -> None:
    for path in (url("conversation-artifacts", conversation.pk), url("run-artifacts", run.pk)):
        page = alice_client.get(path).json()
        assert [item["id"] for item in page["items"]] == [str(artifact.pk)] and page["total"] == 1
    record = alice_client.get(url("artifact-detail", artifact.pk)).json()
    assert record == {
        "id": str(artifact.pk),
        "run_id": str(run.pk),
        "run_kind": "chat",
        "conversation_id": str(conversation.pk),
        "name": "chart.png",
        "media_type": "image/png",
        "size": len(CONTENT),
        "blob_key": "",
        "source_url": "",
        "metadata": {},
        "created_at": record["created_at"],
    }


def test_a_whole_download(alice_client: Any, artifact: Any) -> None:
    response = alice_client.get(url("artifact-content", artifact.pk), HTTP_ACCEPT="image/png")
    assert response.status_code == 200
    assert body_of(response) == CONTENT
    assert response["Content-Type"] == "image/png" and response["Content-Length"] == str(len(CONTENT))
    assert response["Accept-Ranges"] == "bytes" and response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Disposition"].startswith("attachment") and "chart.png" in response["Content-Disposition"]
    assert response["ETag"].startswith('"') and "Content-Range" not in response


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [("bytes=0-3", 0, 3), ("bytes=10-", 10, 15), ("bytes=-4", 12, 15), ("bytes=14-99999999999999999999", 14, 15),
     ("bytes=-100", 0, 15), ("bytes=5-5", 5, 5)],
)
def test_one_range_is_206(alice_client: Any, artifact: Any, header: str, first: int, last: int) -> None:
    response = alice_client.get(url("artifact-content", artifact.pk), HTTP_RANGE=header)
    assert response.status_code == 206
    assert body_of(response) == CONTENT[first : last + 1]
    assert response["Content-Range"] == f"bytes {first}-{last}/{len(CONTENT)}"
    assert response["Content-Length"] == str(last - first + 1) and response["Accept-Ranges"] == "bytes"


@pytest.mark.parametrize("header", ["bytes=16-", "bytes=99999999999999999999-", "bytes=-0"])
def test_a_range_past_the_end_is_416(alice_client: Any, artifact: Any, header: str) -> None:
    response = alice_client.get(url("artifact-content", artifact.pk), HTTP_RANGE=header, HTTP_ACCEPT="image/png")
    assert response.status_code == 416
    assert response["Content-Range"] == f"bytes */{len(CONTENT)}"
    assert response.json()["code"] == "range_not_satisfiable"


@pytest.mark.parametrize(
    "header",
    ["bytes=3-1", "bytes=0-1,4-5", "items=0-1", "bytes=", "bytes=a-", "bytes=0-1\x00", "bytes=--1", "bytes=" + "9" * 40 + "-",
     "bytes=0-" + "1" * 500, "\u00e9\u00e9"],
)
def test_ranges_this_app_does_not_serve_get_the_whole_content(alice_client: Any, artifact: Any, header: str) -> None:
    response = alice_client.get(url("artifact-content", artifact.pk), HTTP_RANGE=header)
    assert response.status_code == 200 and body_of(response) == CONTENT


def test_if_range(alice_client: Any, artifact: Any) -> None:
    first = alice_client.get(url("artifact-content", artifact.pk))
    body_of(first)
    etag = first["ETag"]
    matching = alice_client.get(url("artifact-content", artifact.pk), HTTP_RANGE="bytes=0-1", HTTP_IF_RANGE=etag)
    assert matching.status_code == 206 and body_of(matching) == CONTENT[:2]
    stale = alice_client.get(url("artifact-content", artifact.pk), HTTP_RANGE="bytes=0-1", HTTP_IF_RANGE='"other"')
    assert stale.status_code == 200 and body_of(stale) == CONTENT


def test_an_empty_artifact(alice_client: Any, alice_scope: Any, run: Any) -> None:
    empty = artifact_store().save(alice_scope, run_id=run.pk, content=b"")
    whole = alice_client.get(url("artifact-content", empty.pk))
    assert whole.status_code == 200 and body_of(whole) == b"" and whole["Content-Length"] == "0"
    assert alice_client.get(url("artifact-content", empty.pk), HTTP_RANGE="bytes=0-").status_code == 416


@pytest.mark.parametrize("bad", ["nope", "00000000-0000-0000-0000-000000000000", "%00", "%2E%2E", "..;", "x" * 400])
def test_bad_ids_are_404(alice_client: Any, bad: str) -> None:
    for name in ("artifact-detail", "artifact-content"):
        response = alice_client.get(f"/api/artifacts/{bad}/" + ("content/" if name == "artifact-content" else ""))
        assert response.status_code == 404 and response.json()["code"].endswith("not_found")
    assert alice_client.get(f"/api/runs/{bad}/artifacts/").status_code == 404


def test_others_do_not_see_it(bob_client: Any, artifact: Any, run: Any) -> None:
    for path in (url("artifact-detail", artifact.pk), url("artifact-content", artifact.pk), url("run-artifacts", run.pk)):
        response = bob_client.get(path)
        assert response.status_code == 404, path


# -- deleting ------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_deletes_remove_records_and_bytes(alice_client: Any, alice_scope: Any, artifact: Any, run: Any,
                                          conversation: Any) -> None:
    key = artifact.blob.key
    assert alice_client.delete(url("artifact-detail", artifact.pk)).status_code == 204
    assert alice_client.get(url("artifact-content", artifact.pk)).status_code == 404
    assert blob_store().head(alice_scope.tenant, key) is None
    more = [artifact_store().save(alice_scope, run_id=run.pk, content=b"x") for _ in range(2)]
    assert alice_client.delete(url("run-artifacts", run.pk)).status_code == 204
    assert alice_client.get(url("run-artifacts", run.pk)).json()["total"] == 0
    last = artifact_store().save(alice_scope, run_id=run.pk, content=b"y")
    assert alice_client.delete(url("conversation-detail", conversation.pk)).status_code == 204
    for gone in (*more, last):
        assert blob_store().head(alice_scope.tenant, gone.blob.key) is None


# -- generation runs ------------------------------------------------------------------------------------


def test_generation_run_lifecycle(alice_client: Any, alice_scope: Any) -> None:
    run_id = str(uuid7())
    created = alice_client.post(url("generation-run-list"), {"id": run_id, "slot": "hero", "kind": "image",
                                                            "provider": "openai", "model": "gpt-image-1"}, format="json")
    assert created.status_code == 200 and created.json()["status"] == "running"
    again = alice_client.post(url("generation-run-list"), {"id": run_id, "slot": "other", "kind": "video"}, format="json")
    assert again.status_code == 200 and again.json() == created.json()
    artifact = artifact_store().save(alice_scope, run_id=run_id, content=b"PNG", media_type="image/png")
    patched = alice_client.patch(url("generation-run-detail", run_id),
                                 {"status": "completed", "result": {"artifacts": [str(artifact.pk)]}}, format="json")
    assert patched.status_code == 200
    assert patched.json()["finished_at"] is not None and patched.json()["result"] == {"artifacts": [str(artifact.pk)]}
    latest = alice_client.get(url("generation-run-latest"), {"slot": "hero"})
    assert latest.status_code == 200 and latest.json()["id"] == run_id
    listed = alice_client.get(url("run-artifacts", run_id)).json()["items"]
    assert [(item["id"], item["run_kind"]) for item in listed] == [(str(artifact.pk), "generation")]
    assert alice_client.delete(url("generation-run-detail", run_id)).status_code == 204
    assert alice_client.get(url("generation-run-detail", run_id)).status_code == 404
    assert alice_client.get(url("artifact-detail", artifact.pk)).status_code == 404
    assert alice_client.get(url("generation-run-latest"), {"slot": "hero"}).json()["code"] == "generation_run_not_found"


def test_generation_run_of_someone_else(alice_client: Any, bob_client: Any) -> None:
    run_id = str(uuid7())
    alice_client.post(url("generation-run-list"), {"id": run_id, "slot": "hero", "kind": "image"}, format="json")
    taken = bob_client.post(url("generation-run-list"), {"id": run_id, "slot": "hero", "kind": "image"}, format="json")
    assert taken.status_code == 409 and taken.json()["code"] == "generation_run_id_taken"
    assert bob_client.patch(url("generation-run-detail", run_id), {"status": "failed"}, format="json").status_code == 404
    assert bob_client.get(url("generation-run-latest"), {"slot": "hero"}).status_code == 404
    assert alice_client.patch(url("generation-run-detail", uuid.uuid4()), {"status": "failed"}, format="json").status_code == 404


def raw_post(client: Any, path: str, text: str, content_type: str = "application/json") -> Any:
    return client.generic("POST", path, text.encode("utf-8", "surrogatepass"), content_type=content_type)


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ('{"id": "%s", "slot": "a\\u0000b", "kind": "image"}', 400),
        ('{"id": "%s", "slot": "\\ud800", "kind": "image"}', 400),
        ('{"id": "%s", "slot": "s", "kind": "chat"}', 400),
        ('{"id": "%s", "slot": "s", "kind": "image", "extra": 1}', 400),
        ('{"id": "%s", "slot": "s", "kind": "image", "metadata": {"n": 1e999}}', 400),
        ('{"id": "%s", "slot": "s", "kind": "image", "metadata": {"n": 123456789012345678901234567890}}', 400),
        ('{"id": "%s", "slot": "s", "kind": "image", "metadata": ' + "[" * 100 + "]" * 100 + "}", 400),
        ('{"id": "%s", "slot": "s", "kind": "image", "started_at": "2026-01-01T00:00:00"}', 400),
        ('{"id": "not-a-uuid", "slot": "s", "kind": "image"}', 400),
        ('{"id": "%s", "slot": 5, "kind": "image"}', 400),
        ('{"id": "%s", "slot": "' + "s" * 300 + '", "kind": "image"}', 400),
        ("[1, 2]", 400),
        ("{", 400),
    ],
)
def test_hostile_generation_run_bodies(alice_client: Any, text: str, status: int) -> None:
    run_id = str(uuid7())
    response = raw_post(alice_client, url("generation-run-list"), text.replace("%s", run_id))
    assert response.status_code == status, response.content
    assert isinstance(response.json()["code"], str)
    assert alice_client.get(url("generation-run-detail", run_id)).status_code == 404


def test_wrong_content_type_and_hostile_patches(alice_client: Any, alice_scope: Any) -> None:
    assert raw_post(alice_client, url("generation-run-list"), "id=1", "application/x-www-form-urlencoded").status_code == 415
    run_id = str(uuid7())
    alice_client.post(url("generation-run-list"), {"id": run_id, "slot": "hero", "kind": "audio"}, format="json")
    for patch in ({"status": "done"}, {"finished_at": "2026-01-01T00:00:00"}, {"error": "boom"}, {"usage": [1]},
                  {"started_at": "2026-01-01T00:00:00Z"}, {"result": {"text": "a\u0000"}}):
        response = alice_client.generic("PATCH", url("generation-run-detail", run_id), json.dumps(patch),
                                        content_type="application/json")
        assert response.status_code == 400, (patch, response.content)
    assert alice_client.get(url("generation-run-detail", run_id)).json()["status"] == "running"
    assert alice_client.get(url("generation-run-latest")).status_code == 400
    assert alice_client.get(url("generation-run-latest"), {"slot": "a\x00"}).status_code == 400
    assert generation_run_store().latest(alice_scope, "hero").pk == uuid.UUID(run_id)
