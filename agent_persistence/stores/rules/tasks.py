"""The backend-neutral rules of the tasks concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.tasks`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from ...conf import app_settings
from ...exceptions import Validation
from ...models import TaskStatus
from .base import clean_json, clean_object, clean_text

MAX_TITLE_LENGTH = 500


MAX_CALLBACK_URL_LENGTH = 2000


MAX_NAME_LENGTH = 255


_http_url = URLValidator(schemes=["http", "https"])


def clean_title(title: Any) -> str:
    title = clean_text(title, "title", max_length=MAX_TITLE_LENGTH)
    if not title.strip():
        raise Validation("title may not be blank.", field="title")
    return title


def clean_description(description: Any) -> str | None:
    # A description is prose like a message, so it shares the message size limit.
    return clean_text(description, "description", max_length=app_settings.MAX_MESSAGE_BYTES, null=True)


def clean_status(status: Any, field_name: str = "status") -> str:
    if status not in TaskStatus.values:
        raise Validation(f"{field_name} must be one of {', '.join(TaskStatus.values)}.", field=field_name)
    return str(status)


def clean_callback_url(url: Any) -> str | None:
    url = clean_text(url, "callback_url", max_length=MAX_CALLBACK_URL_LENGTH, null=True)
    if url is None:
        return None
    try:
        _http_url(url)
    except ValidationError:
        raise Validation("callback_url must be an http or https URL.", field="callback_url") from None
    return url


def clean_metadata(metadata: Any) -> dict[str, Any]:
    return clean_object(metadata, "metadata", max_bytes=app_settings.MAX_MESSAGE_BYTES)


def clean_error(error: Any) -> Any:
    return clean_json(error, "error", max_bytes=app_settings.MAX_MESSAGE_BYTES)


def clean_result(result: Any) -> Any:
    return clean_json(result, "result", max_bytes=app_settings.MAX_STATE_BYTES)
