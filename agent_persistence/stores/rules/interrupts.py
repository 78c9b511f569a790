"""The backend-neutral rules of the interrupts concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.interrupts`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...conf import app_settings
from ...exceptions import Conflict, Gone, NotFound, Validation
from ...models import Interrupt, InterruptKind, InterruptStatus
from .base import clean_json, clean_object, lookup_id
from .times import check_not_before

#: The response the lapse sweep records on the interrupts it cancels.
EXPIRED_RESPONSE = {"expired": True}


#: The keys an entry of a batch may have: a resolving entry has a response, a cancelling one none.
ENTRY_KEYS = {
    InterruptStatus.RESOLVED: (frozenset({"id", "response"}), frozenset({"id", "status", "response"})),
    InterruptStatus.CANCELLED: (frozenset({"id", "status"}),),
}


def interrupt_not_found(interrupt_id: Any = None) -> NotFound:
    details = {"id": str(interrupt_id)} if interrupt_id is not None else {}
    return NotFound("No such interrupt.", code="interrupt_not_found", **details)


@dataclass(frozen=True)
class Answer:
    """One cleaned entry of a resume batch: resolve with ``response``, or cancel (``response`` None)."""

    id: uuid.UUID
    response: Any
    status: str = InterruptStatus.RESOLVED


def clean_interrupt_id(value: Any) -> uuid.UUID:
    """The id of an interrupt to look up: text that is no UUID names no interrupt (NotFound)."""
    try:
        return lookup_id(value, "interrupt")
    except NotFound:
        raise interrupt_not_found(value) from None


def clean_kind(value: Any) -> str:
    if value not in InterruptKind.values:
        raise Validation(f"kind must be one of {', '.join(InterruptKind.values)}.", field="kind")
    return str(value)


def clean_payload(kind: str, payload: Any) -> dict[str, Any]:
    """The payload of an interrupt of ``kind``, checked against what that kind documents.

    ``tool_approval`` and ``client_tool`` name the tool call: ``tool_call_id``
    and ``name`` (non-empty text up to 255) and ``arguments`` (an object);
    ``generic`` takes any object. Other keys are kept as they are.
    """
    cleaned = clean_object(payload, "payload", max_bytes=app_settings.MAX_MESSAGE_BYTES)
    if kind == InterruptKind.GENERIC:
        return cleaned
    for key in ("tool_call_id", "name"):
        value = cleaned.get(key)
        if not isinstance(value, str) or not 1 <= len(value) <= 255:
            raise Validation(f"A {kind} payload needs {key}: text of 1 to 255 characters.", field="payload", key=key)
    if not isinstance(cleaned.get("arguments"), dict):
        raise Validation(f"A {kind} payload needs arguments: an object.", field="payload", key="arguments")
    return cleaned


def clean_status(value: Any) -> str | None:
    if value is not None and value not in InterruptStatus.values:
        raise Validation(f"status must be one of {', '.join(InterruptStatus.values)}.", field="status")
    return value


def entry_status(entry: Any, index: int) -> str:
    """Whether a batch entry resolves or cancels; Validation for an entry of neither shape."""
    if isinstance(entry, dict):
        status = entry.get("status", InterruptStatus.RESOLVED)
        if isinstance(status, str) and status in ENTRY_KEYS and frozenset(entry) in ENTRY_KEYS[status]:
            return status
    raise Validation(
        'Each entry is {"id", "response"} (or with "status": "resolved") to resolve, or {"id", "status": "cancelled"} '
        "to cancel.",
        field="answers",
        index=index,
    )


def clean_answers(answers: Any) -> list[Answer]:
    """The batch as :class:`Answer` objects; a malformed entry or a repeated id is Validation."""
    if not isinstance(answers, (list, tuple)):
        raise Validation("answers must be a list.", field="answers")
    cleaned: list[Answer] = []
    seen: set[uuid.UUID] = set()
    for index, answer in enumerate(answers):
        status = entry_status(answer, index)
        interrupt_id = clean_interrupt_id(answer["id"])
        if interrupt_id in seen:
            raise Validation(
                "The batch answers this interrupt twice.",
                code="duplicate_answer",
                field="answers",
                id=str(interrupt_id),
            )
        seen.add(interrupt_id)
        response = None
        if status == InterruptStatus.RESOLVED:
            response = clean_json(answer["response"], "response", max_bytes=app_settings.MAX_MESSAGE_BYTES)
        cleaned.append(Answer(id=interrupt_id, response=response, status=status))
    return cleaned


def clean_limit(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise Validation("limit must be a whole number, 1 or more.", field="limit")
    return value


def same_json(left: Any, right: Any) -> bool:
    """JSON value equality: object keys in any order, numbers by value, true is not 1."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same_json(left[key], right[key]) for key in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same_json(a, b) for a, b in zip(left, right))
    return type(left) is type(right) and left == right


def is_lapsed(interrupt: Interrupt, now: datetime) -> bool:
    return interrupt.expires_at is not None and interrupt.expires_at <= now


def already_answered(interrupt: Interrupt) -> Conflict:
    return Conflict("The interrupt was already answered differently.", code="already_answered", id=str(interrupt.pk))


def expired(interrupt: Interrupt) -> Gone:
    return Gone("The interrupt has expired.", code="interrupt_expired", id=str(interrupt.pk))


def answers_to_write(batch: list[Answer], stored: dict[uuid.UUID, Interrupt], now: datetime) -> list[Answer]:
    """The entries that move a pending interrupt; repeats of the stored outcome are dropped.

    Raises the batch's refusal: NotFound for an interrupt not of this
    conversation, Gone for a lapsed one, Conflict for one settled otherwise
    (resolved with another response, or cancelled where this entry resolves).
    """
    fresh: list[Answer] = []
    for answer in batch:
        interrupt = stored.get(answer.id)
        if interrupt is None:
            raise interrupt_not_found(answer.id)
        if interrupt.status == InterruptStatus.PENDING:
            if is_lapsed(interrupt, now):
                raise expired(interrupt)
            fresh.append(answer)
        elif interrupt.status == InterruptStatus.RESOLVED:
            if answer.status != InterruptStatus.RESOLVED or not same_json(interrupt.response, answer.response):
                raise already_answered(interrupt)
        elif same_json(interrupt.response, EXPIRED_RESPONSE):
            raise expired(interrupt)
        elif answer.status != InterruptStatus.CANCELLED:
            raise Conflict("The interrupt was cancelled.", code="interrupt_cancelled", id=str(interrupt.pk))
    return fresh


def check_resolved_at(resolved_at: datetime, interrupts: Any) -> None:
    """Validation when a caller's ``resolved_at`` is before the request of an interrupt it settles."""
    for interrupt in interrupts:
        check_not_before(resolved_at, interrupt.requested_at, field="resolved_at", after="requested_at")


def settled_values(answer: Answer, resolved_at: datetime, resolved_by: str) -> dict[str, Any]:
    """The columns an entry writes on its pending interrupt."""
    return {
        "status": answer.status,
        "response": answer.response,
        "resolved_at": resolved_at,
        "resolved_by": resolved_by,
    }
