"""Erasure and export of one user's data (or one tenant's), on the Django ORM.

Owners are stored as the scope's user string (``str(user.pk)`` under the default
scope resolver), with no foreign key to ``AUTH_USER_MODEL``: deleting a Django
user leaves its rows behind unless something erases them. This module is that
something:

- :func:`erase_user` deletes every row of one user (in one tenant, or in every
  tenant) and the stored bytes of its files and blobs, in one transaction;
- :func:`erase_tenant` deletes every row of one tenant;
- :func:`export_user` collects the same rows as a JSON document, plus the bytes
  of the files and blobs, which :meth:`UserExport.write` puts in a folder or a zip.

What belongs to a user (:func:`user_rows`, shared by erase and export):

- its conversations (``tenant``, ``owner``) and everything that hangs off them:
  messages, runs, interrupts, events, activities, files, tasks, supervision,
  recording, checkpoint, LangGraph history, generation runs and artifacts;
- its own tasks, generation runs and artifacts (``owner``) outside them;
- the blobs its artifacts own, and the blobs its record-only artifacts name by
  key when no other artifact names them;
- metadata entries and leases whose key names one of its conversations, and its
  MCP token-refresh leases (``mcp-refresh:<user>:``);
- its websocket tickets (by scope user, by Django account, or bound to one of its
  conversations) and its MCP integrations (OAuth records).

In conversations of *other* users (a shared conversation), what the user did
is kept but no longer names it: ``StoredFile.uploader`` and
``Interrupt.resolved_by`` are set to NULL. Tenant-wide rows that name no user
(other blobs, metadata entries, MCP client registrations) are the tenant's: only
:func:`erase_tenant` deletes them.

A conversation whose turn is running (its supervision row says ``running``, live
or dead and not yet closed out) makes an erasure refuse with
``Conflict(code="turn_running")`` and nothing is deleted, unless ``force=True``:
then the conversation is deleted with the turn's rows, and the producer, whose
fence finds no supervision row any more, can write nothing after it.

Locks follow the documented order (docs/topics/concurrency-and-fencing.md): for
each conversation, in id order, its supervision row, then the conversation row;
only then the rows that hang off it are deleted, in the same transaction.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import models, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from .exceptions import Conflict, Validation
from .models import (
    Activity,
    AgentCheckpoint,
    Artifact,
    Blob,
    Conversation,
    Event,
    GenerationRun,
    GraphBlob,
    GraphCheckpoint,
    GraphWrite,
    Interrupt,
    Lease,
    McpClientInfo,
    McpIntegration,
    Message,
    MetadataEntry,
    Run,
    StoredFile,
    StreamRecording,
    SupervisionStatus,
    Task,
    TurnSupervision,
    WebsocketTicket,
)
from .stores.fencing import lock_turn

__all__ = [
    "EXPORT_FORMAT",
    "UserExport",
    "erase_tenant",
    "erase_user",
    "export_user",
    "user_rows",
]

#: The ``format`` of an export document; ``version`` rises with incompatible changes.
EXPORT_FORMAT = "agent_persistence.user_export"
EXPORT_VERSION = 1

#: Columns an export never contains: credentials, not the user's data (they would only leak).
SECRET_COLUMNS = {
    "McpIntegration": {"pending_code_verifier", "access_token", "refresh_token", "pending_state_digest"},
}

#: How many conversation ids one ``key LIKE`` disjunction names.
_CHUNK = 200


def _clean_scope_string(value: Any, name: str, *, allow_none: bool = False) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise Validation(f"{name} must be a string.", code="invalid_scope", field=name)
    if len(value) > 255:
        raise Validation(f"{name} is longer than 255 characters.", code="invalid_scope", field=name)
    return value


def _in_tenant(tenant: str | None) -> Q:
    return Q() if tenant is None else Q(tenant=tenant)


def _keys_naming(ids: list[str]) -> Q | None:
    """``key`` contains one of ``ids`` (None when there are none)."""
    if not ids:
        return None
    condition = Q()
    for value in ids:
        condition |= Q(key__contains=value)
    return condition


def _filter_keys(queryset: QuerySet[Any], ids: list[str]) -> list[Any]:
    """Primary keys of the rows of ``queryset`` whose key names one of ``ids``, in chunks."""
    found: list[Any] = []
    for start in range(0, len(ids), _CHUNK):
        condition = _keys_naming(ids[start : start + _CHUNK])
        if condition is not None:
            found.extend(queryset.filter(condition).values_list("pk", flat=True))
    return found


def user_rows(tenant: str | None, user: str, *, account: str | None = None) -> dict[type[models.Model], QuerySet[Any]]:
    """Every row of ``user`` (in ``tenant``, or in every tenant when None), one queryset per model.

    ``account`` (a Django user's primary key, as text) also selects the websocket
    tickets issued to that account whatever scope user they act for.
    """
    tenant = _clean_scope_string(tenant, "tenant", allow_none=True)
    user = _clean_scope_string(user, "user")
    if user == "":
        raise Validation("user must not be empty.", code="invalid_scope", field="user")
    where = _in_tenant(tenant)
    conversations = Conversation.objects.filter(where, owner=user)
    conversation_ids = list(conversations.values_list("pk", flat=True))
    id_strings = [str(pk) for pk in conversation_ids]
    in_conversations = Q(conversation_id__in=conversation_ids)

    generation_runs = GenerationRun.objects.filter(in_conversations | (where & Q(owner=user)))
    generation_run_ids = list(generation_runs.values_list("pk", flat=True))
    artifacts = Artifact.objects.filter(
        in_conversations | Q(generation_run_id__in=generation_run_ids) | (where & Q(owner=user))
    )
    artifact_ids = list(artifacts.values_list("pk", flat=True))
    owned_blobs = list(artifacts.exclude(blob_id=None).values_list("blob_id", flat=True))
    # Record-only artifacts name a caller's blob by key; it goes when no other artifact names it.
    named: set[tuple[str, str]] = set(artifacts.exclude(blob_key="").values_list("tenant", "blob_key"))
    named_blobs: list[Any] = []
    for blob_tenant, key in sorted(named):
        others = Artifact.objects.filter(tenant=blob_tenant, blob_key=key).exclude(pk__in=artifact_ids).exists()
        if not others:
            named_blobs.extend(Blob.objects.filter(tenant=blob_tenant, key=key).values_list("pk", flat=True))

    graph = in_conversations | Q(conversation__isnull=True, thread_id__in=id_strings)
    metadata_ids = _filter_keys(MetadataEntry.objects.filter(where), id_strings)
    lease_ids = _filter_keys(Lease.objects.filter(where), id_strings)
    lease_ids += list(Lease.objects.filter(where, key__startswith=f"mcp-refresh:{user}:").values_list("pk", flat=True))
    tickets = where & Q(user=user) | Q(conversation_id__in=conversation_ids)
    if account:
        tickets |= Q(account=account)

    return {
        Conversation: conversations,
        Message: Message.objects.filter(in_conversations),
        Run: Run.objects.filter(in_conversations),
        Interrupt: Interrupt.objects.filter(in_conversations),
        Event: Event.objects.filter(in_conversations),
        Activity: Activity.objects.filter(in_conversations),
        StoredFile: StoredFile.objects.filter(in_conversations),
        Task: Task.objects.filter(in_conversations | (where & Q(owner=user))),
        TurnSupervision: TurnSupervision.objects.filter(in_conversations),
        StreamRecording: StreamRecording.objects.filter(in_conversations),
        AgentCheckpoint: AgentCheckpoint.objects.filter(in_conversations),
        GraphCheckpoint: GraphCheckpoint.objects.filter(graph),
        GraphBlob: GraphBlob.objects.filter(graph),
        GraphWrite: GraphWrite.objects.filter(graph),
        GenerationRun: generation_runs,
        Artifact: artifacts,
        Blob: Blob.objects.filter(pk__in=owned_blobs + named_blobs),
        MetadataEntry: MetadataEntry.objects.filter(pk__in=metadata_ids),
        Lease: Lease.objects.filter(pk__in=lease_ids),
        WebsocketTicket: WebsocketTicket.objects.filter(tickets),
        McpIntegration: McpIntegration.objects.filter(where, user=user),
    }


def _lock_conversations(conversation_ids: list[uuid.UUID], *, force: bool) -> None:
    """Take locks 1 and 2 of every conversation, in id order; refuse a running turn unless ``force``."""
    for pk in sorted(conversation_ids):
        supervision, _ = lock_turn(pk)
        if supervision is not None and supervision.status == SupervisionStatus.RUNNING and not force:
            raise Conflict(
                "A turn is running in one of the conversations; stop it (or let the reaper close it out) "
                "and erase again, or erase with force.",
                code="turn_running",
                conversation_id=str(pk),
                message_id=str(supervision.message_id),
            )


def _counts(deleted: dict[str, int], more: dict[str, int]) -> None:
    for label, count in more.items():
        if count:
            deleted[label] = deleted.get(label, 0) + count


def erase_user(tenant: str | None, user: str, *, account: str | None = None, force: bool = False) -> dict[str, int]:
    """Delete every row of ``user`` in ``tenant`` (every tenant when None); the rows deleted per model label.

    One transaction: a refusal (``Conflict`` ``turn_running``, ``Validation``
    ``invalid_scope``) deletes nothing. The bytes of deleted files and blobs are
    removed from their storages once the transaction commits.
    """
    force = _clean_flag(force)
    deleted: dict[str, int] = {}
    with transaction.atomic():
        locked: set[uuid.UUID] = set()
        while True:  # until no conversation of the user appeared meanwhile (each one is locked)
            rows = user_rows(tenant, user, account=account)
            appeared = set(rows[Conversation].values_list("pk", flat=True)) - locked
            if not appeared:
                break
            _lock_conversations(list(appeared), force=force)
            locked |= appeared
        # Roots first: their cascades (and the file/blob/artifact receivers) take the rest.
        for model in (GraphWrite, GraphBlob, GraphCheckpoint, Conversation, GenerationRun, Artifact, Task, Blob,
                      MetadataEntry, Lease, WebsocketTicket, McpIntegration):
            _, per_model = rows[model].delete()
            _counts(deleted, per_model)
        # What the user did in other users' conversations stays, without its name.
        where = Q() if tenant is None else Q(conversation__tenant=tenant)
        anonymised = StoredFile.objects.filter(where, uploader=user).update(uploader=None)
        anonymised += Interrupt.objects.filter(where, resolved_by=user).update(resolved_by=None)
        if anonymised:
            deleted["anonymised"] = anonymised
    return deleted


def erase_tenant(tenant: str, *, force: bool = False) -> dict[str, int]:
    """Delete every row of ``tenant`` (all its users' and its tenant-wide ones); the rows deleted per model label."""
    tenant = _clean_scope_string(tenant, "tenant")
    force = _clean_flag(force)
    deleted: dict[str, int] = {}
    with transaction.atomic():
        conversation_ids = list(Conversation.objects.filter(tenant=tenant).values_list("pk", flat=True))
        _lock_conversations(conversation_ids, force=force)
        threads = [str(pk) for pk in conversation_ids]
        for model in (GraphWrite, GraphBlob, GraphCheckpoint):
            for start in range(0, len(threads), _CHUNK):
                chunk = threads[start : start + _CHUNK]
                _, per_model = model.objects.filter(conversation__isnull=True, thread_id__in=chunk).delete()
                _counts(deleted, per_model)
        for model in (Conversation, GenerationRun, Artifact, Task, Blob, MetadataEntry, Lease, WebsocketTicket,
                      McpIntegration, McpClientInfo):
            _, per_model = model.objects.filter(tenant=tenant).delete()
            _counts(deleted, per_model)
    return deleted


def _clean_flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Validation("force must be true or false.", code="invalid", field="force")
    return value


# -- export ------------------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def _row(instance: models.Model, hidden: set[str]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for model_field in instance._meta.concrete_fields:
        if model_field.name in hidden:
            continue
        value = getattr(instance, model_field.attname)
        if isinstance(model_field, models.FileField):
            value = value.name if value else ""
        row[model_field.attname] = _json_value(value)
    return row


@dataclass
class UserExport:
    """One user's export: a JSON document and the bytes it refers to (``files/<id>``, ``blobs/<id>``)."""

    document: dict[str, Any]
    #: (path inside the export, the stored file to copy there).
    contents: list[tuple[str, Any]] = field(default_factory=list)

    def write(self, destination: str | Path) -> Path:
        """Write ``export.json`` and the bytes to a folder, or to a zip when ``destination`` ends in ``.zip``.

        The folder must not exist or be empty, the zip must not exist: nothing is overwritten.
        """
        path = Path(destination)
        text = json.dumps(self.document, indent=2, ensure_ascii=False, sort_keys=True)
        if path.suffix.lower() == ".zip":
            if path.exists():
                raise Validation(f"{path} exists; name a new zip file.", code="export_exists", field="destination")
            with zipfile.ZipFile(path, "x", compression=zipfile.ZIP_DEFLATED) as archive:
                archive.writestr("export.json", text)
                for name, stored in self.contents:
                    with stored.open("rb") as source, archive.open(name, "w") as target:
                        for chunk in iter(lambda: source.read(1024 * 1024), b""):
                            target.write(chunk)
            return path
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise Validation(f"{path} exists and is not an empty folder.", code="export_exists", field="destination")
        path.mkdir(parents=True, exist_ok=True)
        (path / "export.json").write_text(text, encoding="utf-8")
        for name, stored in self.contents:
            target = path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with stored.open("rb") as source, target.open("wb") as out:
                for chunk in iter(lambda: source.read(1024 * 1024), b""):
                    out.write(chunk)
        return path


def export_user(tenant: str | None, user: str, *, account: str | None = None) -> UserExport:
    """Every row of ``user`` (the rows :func:`erase_user` deletes) as a JSON document, and their bytes.

    The document: ``{"format", "version", "exported_at", "scope": {"tenant", "user"},
    "tables": {"<model name>": [row, ...]}}``; a row has every column (binary
    ones as ``{"base64": ...}``) except credentials (OAuth tokens and verifiers).
    A file's row has ``export_path`` (``files/<id>``), a blob's too (``blobs/<id>``):
    where its bytes are in the export. The rows are read in one transaction; a user who
    is still active may write between the reads of two tables, so export an account
    that is deactivated (or quiet) for an exact copy.
    """
    contents: list[tuple[str, Any]] = []
    tables: dict[str, list[dict[str, Any]]] = {}
    with transaction.atomic():
        rows = user_rows(tenant, user, account=account)
        for model, queryset in rows.items():
            hidden = SECRET_COLUMNS.get(model.__name__, set())
            listed = []
            for instance in queryset.order_by("pk"):
                row = _row(instance, hidden)
                if isinstance(instance, (StoredFile, Blob)) and instance.content.name:
                    folder = "files" if isinstance(instance, StoredFile) else "blobs"
                    row["export_path"] = f"{folder}/{instance.pk}"
                    contents.append((row["export_path"], instance.content))
                listed.append(row)
            tables[model.__name__] = listed
    document = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "exported_at": timezone.now().isoformat(),
        "scope": {"tenant": tenant, "user": user},
        "tables": tables,
    }
    return UserExport(document=document, contents=contents)
