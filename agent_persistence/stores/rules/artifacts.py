"""The backend-neutral rules of the artifacts concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.artifacts`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from ...exceptions import Conflict, NotFound, Validation
from ...models import Artifact
from .base import lookup_id
from .blobs import clean_key
from .files import clean_file_name

#: The deterministic order of every listing: oldest first, then by id.
ORDERING = ("created_at", "id")


def artifact_blob_key(run_id: uuid.UUID, artifact_id: uuid.UUID) -> str:
    """Where an artifact's bytes live in the blob store (TanStack's ``artifacts/<runId>/<artifactId>``)."""
    return f"artifacts/{run_id}/{artifact_id}"


def clean_artifact_name(name: Any) -> str:
    return "" if name is None or name == "" else clean_file_name(name)


#: The longest ``source_url`` of a record-only artifact.
MAX_SOURCE_URL_LENGTH = 2048


_source_url = URLValidator(schemes=["http", "https"])


def clean_location(blob_key: Any, source_url: Any) -> tuple[str, str]:
    """A record-only artifact's ``(blob_key, source_url)``: at least one, a valid blob key and an http(s) URL."""
    blob_key = "" if blob_key is None or blob_key == "" else clean_key(blob_key, "blob_key")
    if source_url is None or source_url == "":
        source_url = ""
    elif not isinstance(source_url, str) or len(source_url) > MAX_SOURCE_URL_LENGTH:
        raise Validation(f"source_url must be a URL of at most {MAX_SOURCE_URL_LENGTH} characters.", field="source_url")
    else:
        try:
            _source_url(source_url)
        except ValidationError:
            raise Validation("source_url must be an http or https URL.", field="source_url") from None
    if not blob_key and not source_url:
        raise Validation("A record-only artifact needs a blob_key or a source_url.", field="blob_key")
    return blob_key, source_url


def clean_size(size: Any) -> int | None:
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise Validation("size must be a whole number of bytes, 0 or more.", field="size")
    return size


def content_external(artifact: Artifact) -> NotFound:
    return NotFound("The artifact's bytes are at its source_url.", code="artifact_content_external",
                    source_url=artifact.source_url)


def content_missing() -> NotFound:
    return NotFound("The content of this artifact is missing.", code="artifact_content_missing")


def artifact_id_taken() -> Conflict:
    return Conflict("An artifact with this id belongs to someone else.", code="artifact_id_taken")


def artifact_not_found() -> NotFound:
    return NotFound("No such artifact.", code="artifact_not_found")


def run_not_found() -> NotFound:
    return NotFound("No such run.", code="run_not_found")


def run_pk(run_id: Any) -> uuid.UUID:
    try:
        return lookup_id(run_id, "run")
    except NotFound:
        raise run_not_found() from None


def artifact_pk(artifact_id: Any) -> uuid.UUID:
    try:
        return lookup_id(artifact_id, "artifact")
    except NotFound:
        raise artifact_not_found() from None
