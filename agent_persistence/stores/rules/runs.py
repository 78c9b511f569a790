"""The backend-neutral rules of the runs concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.runs`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from ...conf import app_settings
from ...exceptions import Conflict, NotFound, StorageLimit, Validation
from ...models import FINISHED_RUN_STATUSES, Run, RunStatus
from .base import clean_datetime, clean_json, clean_text, json_size, lookup_id
from .times import check_not_before

#: A run in one of these may still change; the others are final.
OPEN_RUN_STATUSES = (RunStatus.RUNNING, RunStatus.INTERRUPTED)


#: The most messages a run's own transcript (a subagent's) may hold.
MAX_TRANSCRIPT_MESSAGES = 1000


#: The fields a transcript message may carry (a model message's; the id and position are the list's).
TRANSCRIPT_FIELDS = ("role", "content", "name", "tool_call_id", "tool_calls", "metadata")


#: What :meth:`RunStore.abort_stuck` records when the operator gives no reason.
STUCK_RUN_ERROR = {"message": "The run stopped making progress and was aborted.", "code": "run_stuck"}


ERROR_KEYS = frozenset({"message", "code"})


#: The code a run error is stored with when its writer gave none (TanStack's ``RunError.code`` is optional).
DEFAULT_ERROR_CODE = "unspecified"


#: The largest usage counter kept; far beyond any real count, it keeps sums portable across databases.
MAX_COUNTER = 2**63 - 1


def run_not_found(what: str = "run") -> NotFound:
    return NotFound(f"No such {what}.", code="run_not_found")


def run_finished(run_id: uuid.UUID, status: str) -> Conflict:
    return Conflict("The run has finished; it stays as it is.", code="run_finished", run_id=str(run_id), status=status)


def clean_finished_status(value: Any) -> str:
    if value not in FINISHED_RUN_STATUSES:
        raise Validation("status must be completed, failed or aborted.", field="status")
    return str(value)


def clean_open_status(value: Any) -> str:
    if value not in OPEN_RUN_STATUSES:
        raise Validation("status must be running or interrupted.", field="status")
    return str(value)


def clean_error(value: Any) -> dict[str, str] | None:
    """``{"message": str, "code": str}`` or None; anything else is Validation, over MAX_EVENT_BYTES StorageLimit.

    ``code`` may be left out (or None), as TanStack's ``RunError.code`` may:
    the error is stored with :data:`DEFAULT_ERROR_CODE`, so a failure is never
    lost for want of a code. Given, it is non-empty text.
    """
    if value is None:
        return None
    if not isinstance(value, dict) or "message" not in value or not set(value) <= ERROR_KEYS:
        raise Validation('error must be an object with "message" and, optionally, "code".', field="error")
    value = {"message": value["message"], "code": DEFAULT_ERROR_CODE if value.get("code") is None else value["code"]}
    for key in sorted(ERROR_KEYS):
        if not isinstance(value[key], str):
            raise Validation(f"error.{key} must be a string.", field="error")
    if not value["code"]:
        raise Validation("error.code may not be empty; leave it out for the default.", field="error")
    return clean_json(value, "error", max_bytes=app_settings.MAX_EVENT_BYTES)


def is_counter(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def clean_usage(value: Any) -> dict[str, int | float]:
    """Named counters to add: ``{name: number}``, each finite and 0 or more."""
    if not isinstance(value, dict):
        raise Validation("usage must be an object of numbers.", field="usage")
    for name, amount in value.items():
        clean_text(name, "usage", max_length=255)
        if not is_counter(amount) or not 0 <= amount <= MAX_COUNTER:
            raise Validation(f"usage[{name!r}] must be a finite number, 0 or more.", field="usage")
    return dict(value)


def set_counters(added: dict[str, int | float]) -> dict[str, int | float]:
    """The totals ``set_usage`` stores: the cleaned counters themselves (already within MAX_COUNTER)."""
    return dict(added)


def add_counters(stored: dict[str, Any], added: dict[str, int | float]) -> dict[str, Any]:
    total = dict(stored)
    for name, amount in added.items():
        previous = total.get(name, 0)
        if not is_counter(previous):
            raise Conflict(f"The stored usage[{name!r}] is not a number.", code="usage_not_numeric", field="usage")
        total[name] = previous + amount
        if not is_counter(total[name]) or total[name] > MAX_COUNTER:
            raise Validation(f"usage[{name!r}] would overflow.", field="usage")
    return total


def clean_age(value: Any, field_name: str = "older_than") -> timedelta:
    """A duration, 0 or more: a ``timedelta`` or a number of seconds."""
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise Validation(f"{field_name} must not be negative.", field=field_name)
        return value
    if not is_counter(value) or value < 0:
        raise Validation(f"{field_name} must be a number of seconds, 0 or more.", field=field_name)
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise Validation(f"{field_name} is too large.", field=field_name) from None


def reclaim_cutoff(older_than: Any, now: Any) -> datetime:
    """The latest ``detached_since`` a reclaimable run may have: ``now - older_than``."""
    age = clean_age(older_than)
    moment = clean_datetime(now, "now") or timezone.now()
    try:
        return moment - age
    except OverflowError:
        raise Validation("older_than reaches before the first representable date.", field="older_than") from None


def clean_transcript(messages: Any) -> list[dict[str, Any]] | None:
    """A run's own transcript as it is stored: model messages, each checked as a transcript message is.

    None means "leave the stored transcript as it is". Each message is an
    object with ``role`` and ``content`` and, optionally, ``name``,
    ``tool_call_id``, ``tool_calls`` and ``metadata``; a field left empty is
    not stored.
    """
    from .conversations import clean_message

    if messages is None:
        return None
    if not isinstance(messages, (list, tuple)):
        raise Validation("transcript must be a list of messages.", field="transcript")
    if len(messages) > MAX_TRANSCRIPT_MESSAGES:
        raise Validation(f"transcript holds at most {MAX_TRANSCRIPT_MESSAGES} messages.", field="transcript")
    cleaned = []
    for message in messages:
        if not isinstance(message, dict):
            raise Validation("Each transcript message must be an object.", field="transcript")
        unknown = sorted(str(key) for key in message if key not in TRANSCRIPT_FIELDS)
        if unknown:
            raise Validation(f"A transcript message has unknown fields: {', '.join(unknown)[:200]}.", field="transcript")
        if "role" not in message:
            raise Validation("Each transcript message needs a role.", field="transcript")
        fields = clean_message(**{key: message.get(key) for key in TRANSCRIPT_FIELDS}).fields
        stored = {"role": fields["role"], "content": fields["content"]}
        stored.update({key: fields[key] for key in TRANSCRIPT_FIELDS[2:] if fields.get(key)})
        cleaned.append(stored)
    limit = app_settings.MAX_STATE_BYTES
    if json_size(cleaned) > limit:
        raise StorageLimit(f"The transcript is larger than {limit} bytes.", field="transcript", limit=limit)
    return cleaned


def finish_time(run: Run, finished_at: datetime | None) -> datetime:
    """When the run finishes: the caller's ``finished_at`` (never before ``started_at``), else now.

    The clock is never written before the run's start: an imported start may
    lie ahead of this server's clock by up to ``IMPORT_CLOCK_SKEW``.
    """
    if finished_at is None:
        return max(timezone.now(), run.started_at)
    check_not_before(finished_at, run.started_at, field="finished_at", after="started_at")
    return finished_at


def clean_run_id(value: Any, what: str = "run") -> uuid.UUID:
    """The id of a run to look up: text that is no UUID names no run (NotFound)."""
    try:
        return lookup_id(value, what)
    except NotFound:
        raise run_not_found(what) from None
