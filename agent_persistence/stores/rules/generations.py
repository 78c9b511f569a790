"""The backend-neutral rules of the generations concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.generations`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from ...conf import app_settings
from ...exceptions import NotFound, Validation
from ...statuses import FINISHED_GENERATION_STATUSES, GenerationKind, GenerationStatus
from .base import UNSET, clean_datetime, clean_json, clean_object, clean_text

#: The largest metadata, usage, error or artifact-refs value, in bytes of JSON.
MAX_METADATA_BYTES = 64 * 1024


#: The most artifact refs a generation run keeps.
MAX_ARTIFACT_REFS = 1000


def clean_slot(slot: Any) -> str:
    slot = clean_text(slot, "slot", max_length=255)
    if not slot:
        raise Validation("slot may not be empty.", field="slot")
    return slot


def clean_kind(kind: Any) -> str:
    if kind not in GenerationKind.values:
        raise Validation(f"kind must be one of {', '.join(GenerationKind.values)}.", field="kind")
    return kind


def clean_generation_status(status: Any) -> str:
    if status not in GenerationStatus.values:
        raise Validation(f"status must be one of {', '.join(GenerationStatus.values)}.", field="status")
    return status


def clean_error(error: Any) -> dict[str, Any] | None:
    if error is None:
        return None
    return clean_object(error, "error", max_bytes=MAX_METADATA_BYTES)


def clean_artifact_refs(artifacts: Any) -> list[dict[str, Any]]:
    """A list of JSON objects (refs to the run's artifacts, as the caller shapes them), at most MAX_ARTIFACT_REFS.

    Anything else is Validation with field ``artifacts``; over MAX_METADATA_BYTES of JSON, StorageLimit.
    """
    if not isinstance(artifacts, (list, tuple)):
        raise Validation("artifacts must be a list of objects.", field="artifacts")
    if len(artifacts) > MAX_ARTIFACT_REFS:
        raise Validation(f"artifacts may hold at most {MAX_ARTIFACT_REFS} refs.", field="artifacts")
    if not all(isinstance(ref, dict) for ref in artifacts):
        raise Validation("Each of artifacts must be a JSON object.", field="artifacts")
    return clean_json(list(artifacts), "artifacts", max_bytes=MAX_METADATA_BYTES)


def changes_of(run: Any, **given: Any) -> dict[str, Any]:
    """The cleaned fields of an update (only those given), with ``finished_at`` kept consistent with ``status``.

    Moving to a finished status without a ``finished_at`` stamps now; moving
    back to running clears it; a ``finished_at`` before ``started_at`` or on a
    running run is Validation. ``run`` is the stored record.
    """
    changes: dict[str, Any] = {}
    if given["status"] is not UNSET:
        changes["status"] = clean_generation_status(given["status"])
    if given["finished_at"] is not UNSET:
        changes["finished_at"] = clean_datetime(given["finished_at"], "finished_at")
    if given["error"] is not UNSET:
        changes["error"] = clean_error(given["error"])
    if given["result"] is not UNSET:
        changes["result"] = clean_json(given["result"], "result", max_bytes=app_settings.MAX_MESSAGE_BYTES)
    if given["usage"] is not UNSET:
        changes["usage"] = clean_object(given["usage"], "usage", max_bytes=MAX_METADATA_BYTES)
    if given["metadata"] is not UNSET:
        changes["metadata"] = clean_object(given["metadata"], "metadata", max_bytes=MAX_METADATA_BYTES)
    if given.get("artifacts", UNSET) is not UNSET:
        changes["artifact_refs"] = clean_artifact_refs(given["artifacts"])
    status = changes.get("status", run.status)
    if status in FINISHED_GENERATION_STATUSES:
        finished_at = changes.get("finished_at", run.finished_at) or max(timezone.now(), run.started_at)
        if finished_at < run.started_at:
            raise Validation("finished_at may not be before started_at.", field="finished_at")
    elif changes.get("finished_at") is not None:
        raise Validation("A running generation has no finished_at.", field="finished_at")
    else:
        finished_at = None
    if finished_at != run.finished_at:
        changes["finished_at"] = finished_at
    elif "finished_at" in changes:
        del changes["finished_at"]
    return changes


def generation_not_found() -> NotFound:
    return NotFound("No such generation run.", code="generation_run_not_found")
