"""The file endpoints: upload (and its size limit), list, metadata, streamed download, delete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from agent_persistence.models import StoredFile
from agent_persistence.stores import conversation_store, file_store

pytestmark = pytest.mark.django_db


def url(name: str, *args: Any) -> str:
    return reverse(f"agent_persistence:{name}", args=args)


def stored_paths() -> set[Path]:
    root = Path(StoredFile._meta.get_field("content").storage.location)
    return {path for path in root.rglob("*") if path.is_file()} if root.exists() else set()


@pytest.fixture
def conversation(alice_scope: Any) -> Any:
    return conversation_store().create(alice_scope, agent="echo")


@pytest.fixture
def stored(alice_scope: Any, conversation: Any) -> Any:
    return file_store().save(
        alice_scope, conversation_id=conversation.pk, content=b"hello world", name="notes.txt", content_type="text/plain"
    )


def close_download(response: Any) -> None:
    """Read a download to its end: the test client then closes its file.

    (``response.close()`` after the request would also close the test's database connection.)
    """
    if response.streaming:
        b"".join(response.streaming_content)


def upload(name: str = "report.csv", data: bytes = b"a,b\n1,2\n", content_type: str = "text/csv") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type=content_type)


def test_upload_is_201_with_the_record(alice_client: Any, alice_user: Any, conversation: Any) -> None:
    response = alice_client.post(
        url("file-list", conversation.pk),
        {"file": upload(), "expires_at": "2030-01-01T00:00:00Z"},
        format="multipart",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "report.csv" and body["content_type"] == "text/csv" and body["size"] == 8
    assert body["conversation_id"] == str(conversation.pk) and body["uploader"] == str(alice_user.pk)
    assert body["expires_at"] == "2030-01-01T00:00:00Z" and body["message_id"] is None


def test_upload_attached_to_a_message(alice_client: Any, alice_scope: Any, conversation: Any) -> None:
    message = conversation_store().append_message(alice_scope, conversation.pk, role="user", content="x")
    response = alice_client.post(
        url("file-list", conversation.pk), {"file": upload(), "message_id": str(message.pk)}, format="multipart"
    )
    assert response.status_code == 201
    assert response.json()["message_id"] == str(message.pk)


def test_upload_over_max_file_bytes_is_413_and_stores_nothing(alice_client: Any, conversation: Any, settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_FILE_BYTES": 1000}
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 100  # Django would spool to a temporary file
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100  # and this limit must not turn it into a 400
    before = stored_paths()
    response = alice_client.post(url("file-list", conversation.pk), {"file": upload(data=b"x" * 5000)}, format="multipart")
    assert response.status_code == 413
    assert response.json()["code"] == "too_large"
    assert StoredFile.objects.count() == 0
    assert stored_paths() == before


def test_upload_at_max_file_bytes_is_accepted(alice_client: Any, conversation: Any, settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_FILE_BYTES": 1000}
    response = alice_client.post(url("file-list", conversation.pk), {"file": upload(data=b"x" * 1000)}, format="multipart")
    assert response.status_code == 201
    assert response.json()["size"] == 1000


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ({}, "invalid"),
        ({"file": "not a file"}, "invalid"),
        ({"message_id": "nope"}, "invalid"),
        ({"expires_at": "soon"}, "invalid"),
        ({"expires_at": "2030-01-01T00:00:00"}, "invalid"),
        ({"colour": "red"}, "unknown_field"),
    ],
)
def test_upload_with_bad_fields_is_400_and_stores_nothing(
    alice_client: Any, conversation: Any, data: dict[str, Any], code: str
) -> None:
    if data.keys() - {"file"}:
        data = {"file": upload(), **data}  # a good file with one bad field
    response = alice_client.post(url("file-list", conversation.pk), data, format="multipart")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code
    assert StoredFile.objects.count() == 0


def test_upload_as_json_is_415(alice_client: Any, conversation: Any) -> None:
    response = alice_client.post(url("file-list", conversation.pk), {"file": "x"}, format="json")
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


def test_upload_with_a_message_of_another_conversation_is_404(alice_client: Any, alice_scope: Any, conversation: Any) -> None:
    other = conversation_store().create(alice_scope)
    message = conversation_store().append_message(alice_scope, other.pk, role="user", content="x")
    response = alice_client.post(
        url("file-list", conversation.pk), {"file": upload(), "message_id": str(message.pk)}, format="multipart"
    )
    assert response.status_code == 404
    assert StoredFile.objects.count() == 0


def test_list_files(alice_client: Any, alice_scope: Any, conversation: Any, stored: Any) -> None:
    second = file_store().save(alice_scope, conversation_id=conversation.pk, content=b"2", name="two.bin")
    body = alice_client.get(url("file-list", conversation.pk)).json()
    assert [f["id"] for f in body["items"]] == [str(stored.pk), str(second.pk)] and body["total"] == 2
    body = alice_client.get(url("file-list", conversation.pk), {"order": "desc", "limit": 1}).json()
    assert [f["id"] for f in body["items"]] == [str(second.pk)] and body["has_more"] is True
    assert alice_client.get(url("file-list", conversation.pk), {"limit": "x"}).status_code == 400


def test_list_files_by_cursor(alice_client: Any, bob_client: Any, alice_scope: Any, conversation: Any) -> None:
    """``before`` / ``after`` a file id: strict, uncounted unless asked; a cursor that is not a file of it is 404."""
    saved = [str(file_store().save(alice_scope, conversation_id=conversation.pk, content=b"x", name=f"f{i}").pk) for i in range(4)]
    path = url("file-list", conversation.pk)
    response = alice_client.get(path, {"after": saved[0], "limit": 2})
    assert response.status_code == 200
    body = response.json()
    assert ([f["id"] for f in body["items"]], body["total"], body["has_more"]) == (saved[1:3], None, True)
    body = alice_client.get(path, {"before": saved[3], "order": "desc", "total": "true"}).json()
    assert ([f["id"] for f in body["items"]], body["total"], body["has_more"]) == (saved[2::-1], 3, False)
    foreign = file_store().save(alice_scope, conversation_id=conversation_store().create(alice_scope).pk, content=b"x", name="f")
    for cursor in (str(foreign.pk), "01900000-0000-7000-8000-000000000001", "nope", "1"):
        for direction in ("before", "after"):
            response = alice_client.get(path, {direction: cursor})
            assert (response.status_code, response.json()["code"]) == (404, "not_found"), (direction, cursor)
    assert bob_client.get(path, {"after": saved[0]}).status_code == 404
    conversation_store().share(alice_scope, conversation.pk)
    assert [f["id"] for f in bob_client.get(path, {"after": saved[0]}).json()["items"]] == saved[1:]


def test_metadata_download_and_delete(alice_client: Any, stored: Any) -> None:
    response = alice_client.get(url("file-detail", stored.pk))
    assert response.status_code == 200 and response.json()["name"] == "notes.txt" and response.json()["size"] == 11

    response = alice_client.get(url("file-content", stored.pk))
    assert response.status_code == 200
    assert response.streaming
    assert b"".join(response.streaming_content) == b"hello world"  # read to the end: closes the file
    assert response["Content-Type"] == "text/plain"
    assert response["Content-Disposition"] == 'attachment; filename="notes.txt"'
    assert response["Content-Length"] == "11"

    assert alice_client.delete(url("file-detail", stored.pk)).status_code == 204
    assert alice_client.get(url("file-detail", stored.pk)).status_code == 404
    assert alice_client.get(url("file-content", stored.pk)).status_code == 404
    assert alice_client.delete(url("file-detail", stored.pk)).status_code == 404


def test_download_of_missing_content_is_404_file_content_missing(alice_client: Any, stored: Any) -> None:
    stored.content.storage.delete(stored.content.name)
    response = alice_client.get(url("file-content", stored.pk))
    assert response.status_code == 404
    assert response.json()["code"] == "file_content_missing"


@pytest.mark.parametrize("file_id", ["nope", "01900000-0000-7000-8000-000000000001"])
def test_bad_or_unknown_file_ids_are_404(alice_client: Any, file_id: str) -> None:
    for response in (
        alice_client.get(url("file-detail", file_id)),
        alice_client.get(url("file-content", file_id)),
        alice_client.delete(url("file-detail", file_id)),
        alice_client.post(url("file-list", file_id), {"file": upload()}, format="multipart"),
    ):
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


# -- the authorization matrix -----------------------------------------------------------------

ENDPOINTS: list[tuple[str, str, Any, Any]] = [
    ("list", "get", lambda c, f: url("file-list", c), None),
    ("upload", "post", lambda c, f: url("file-list", c), "upload"),
    ("metadata", "get", lambda c, f: url("file-detail", f), None),
    ("download", "get", lambda c, f: url("file-content", f), None),
    ("delete", "delete", lambda c, f: url("file-detail", f), None),
]
# owner, other user of the tenant, reader of the shared conversation, other tenant, anonymous
EXPECTED = {
    "list": (200, 404, 200, 404, 403),
    "upload": (201, 404, 403, 404, 403),
    "metadata": (200, 404, 200, 404, 403),
    "download": (200, 404, 200, 404, 403),
    "delete": (204, 404, 403, 404, 403),
}
ACTORS = ["owner", "tenant user", "shared reader", "other tenant", "anonymous"]


@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize(("name", "method", "path", "body"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_authorization_matrix(
    name: str, method: str, path: Any, body: Any, actor: str,
    alice_user: Any, bob_user: Any, mallory_user: Any, alice_scope: Any, client_for: Any,
) -> None:
    conversation = conversation_store().create(alice_scope, shared=actor == "shared reader")
    stored = file_store().save(alice_scope, conversation_id=conversation.pk, content=b"data", name="a.txt")
    user = {"owner": alice_user, "tenant user": bob_user, "shared reader": bob_user,
            "other tenant": mallory_user, "anonymous": None}[actor]
    client = client_for(user)
    target = path(conversation.pk, stored.pk)
    if body == "upload":
        response = client.post(target, {"file": upload()}, format="multipart")
    else:
        response = getattr(client, method)(target)
    expected = EXPECTED[name][ACTORS.index(actor)]
    close_download(response)
    assert response.status_code == expected
    if expected >= 400:
        assert StoredFile.objects.count() == 1
        assert set(response.json()) >= {"code", "message"}
