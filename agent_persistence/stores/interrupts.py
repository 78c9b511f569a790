"""The interrupt store: questions a run asks a person (or the client), answered in one batch.

An interrupt is created insert-if-absent and born pending; only a commit moves
it (resolved by :meth:`InterruptStore.commit_batch`, cancelled by
:meth:`~InterruptStore.cancel_pending` or by the lapse sweep
:meth:`~InterruptStore.expire_lapsed`). A resume batch must answer every
pending interrupt of the conversation exactly once; it is validated whole
before anything is written and committed in one transaction, so it lands
entirely or not at all. Each write is a conditional UPDATE with
``status="pending"`` in its filter and its row count checked: a batch that
loses a race is rolled back and judged again against what the winner wrote,
so a repeated identical answer (a double click, a retry) returns the first
outcome and a different one is Conflict("already_answered").

Reads follow the conversation's read rule; writes are the owner's. A write
that passes ``epoch`` is a producer write and is fenced (see
:mod:`agent_persistence.stores.supervision`) before it takes any other lock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, Gone, NotFound, Validation
from ..models import FINISHED_RUN_STATUSES, Conversation, Interrupt, InterruptKind, InterruptStatus, Run
from ..scope import Scope
from .base import (
    async_twin,
    check_scope,
    clean_datetime,
    clean_epoch,
    clean_json,
    clean_object,
    clean_text,
    lookup_id,
    parse_id,
    readable,
    readable_conversation,
    writable_conversation,
)
from .fencing import guard, producer_conversation
from .runs import clean_run_id, run_finished, run_not_found

#: The response the lapse sweep records on the interrupts it cancels.
EXPIRED_RESPONSE = {"expired": True}

ANSWER_KEYS = frozenset({"id", "response"})

#: How often a batch that lost a race is judged again before giving up.
COMMIT_ATTEMPTS = 3


# -- errors -----------------------------------------------------------------------------------


def interrupt_not_found(interrupt_id: Any = None) -> NotFound:
    details = {"id": str(interrupt_id)} if interrupt_id is not None else {}
    return NotFound("No such interrupt.", code="interrupt_not_found", **details)


class LostRace(Exception):
    """A conditional write matched no row: another commit moved the interrupt first."""


# -- cleaning input ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One cleaned entry of a resume batch."""

    id: uuid.UUID
    response: Any


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


def clean_status(value: Any) -> str | None:
    if value is not None and value not in InterruptStatus.values:
        raise Validation(f"status must be one of {', '.join(InterruptStatus.values)}.", field="status")
    return value


def clean_answers(answers: Any) -> list[Answer]:
    """The batch as :class:`Answer` objects; a malformed entry or a repeated id is Validation."""
    if not isinstance(answers, (list, tuple)):
        raise Validation("answers must be a list.", field="answers")
    cleaned: list[Answer] = []
    seen: set[uuid.UUID] = set()
    for index, answer in enumerate(answers):
        if not isinstance(answer, dict) or set(answer) != ANSWER_KEYS:
            raise Validation('Each answer is an object with exactly "id" and "response".', field="answers", index=index)
        interrupt_id = clean_interrupt_id(answer["id"])
        if interrupt_id in seen:
            raise Validation(
                "The batch answers this interrupt twice.",
                code="duplicate_answer",
                field="answers",
                id=str(interrupt_id),
            )
        seen.add(interrupt_id)
        response = clean_json(answer["response"], "response", max_bytes=app_settings.MAX_MESSAGE_BYTES)
        cleaned.append(Answer(id=interrupt_id, response=response))
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


# -- judging a batch --------------------------------------------------------------------------


def answers_to_write(batch: list[Answer], stored: dict[uuid.UUID, Interrupt], now: datetime) -> list[Answer]:
    """The answers that resolve a pending interrupt; repeats of the stored answer are dropped.

    Raises the batch's refusal: NotFound for an interrupt not of this
    conversation, Gone for a lapsed one, Conflict for one answered otherwise.
    """
    fresh: list[Answer] = []
    for answer in batch:
        interrupt = stored.get(answer.id)
        if interrupt is None:
            raise interrupt_not_found(answer.id)
        if interrupt.status == InterruptStatus.PENDING:
            if is_lapsed(interrupt, now):
                raise Gone("The interrupt has expired.", code="interrupt_expired", id=str(interrupt.pk))
            fresh.append(answer)
        elif interrupt.status == InterruptStatus.RESOLVED:
            if not same_json(interrupt.response, answer.response):
                raise Conflict(
                    "The interrupt was already answered differently.", code="already_answered", id=str(interrupt.pk)
                )
        elif same_json(interrupt.response, EXPIRED_RESPONSE):
            raise Gone("The interrupt has expired.", code="interrupt_expired", id=str(interrupt.pk))
        else:
            raise Conflict("The interrupt was cancelled.", code="interrupt_cancelled", id=str(interrupt.pk))
    return fresh


def check_all_answered(conversation: Conversation, batch: list[Answer]) -> None:
    unanswered = list(
        Interrupt.objects.filter(conversation=conversation, status=InterruptStatus.PENDING)
        .exclude(pk__in=[answer.id for answer in batch])
        .order_by("requested_at", "id")
        .values_list("pk", flat=True)
    )
    if unanswered:
        raise Validation(
            "The batch must answer every pending interrupt.",
            code="unanswered_interrupts",
            ids=[str(pk) for pk in unanswered],
        )


class InterruptStore:
    """Interrupts: insert-if-absent creation, atomic batch answers, cancellation and the lapse sweep."""

    # -- creating ---------------------------------------------------------------------------

    def create(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        id: Any,
        run_id: Any,
        kind: str,
        payload: dict[str, Any] | None = None,
        expires_at: datetime | None = None,
        epoch: int | None = None,
    ) -> Interrupt:
        """The interrupt ``id``, inserted as pending if it does not exist yet (else returned unchanged).

        The run must be an open run of the conversation. An id already used in
        another conversation is Conflict("interrupt_id_taken").
        """
        interrupt_id = parse_id(id, "id")
        run_pk = clean_run_id(run_id)
        kind = clean_kind(kind)
        payload = clean_object(payload, "payload", max_bytes=app_settings.MAX_MESSAGE_BYTES)
        expires_at = clean_datetime(expires_at, "expires_at")
        epoch = clean_epoch(epoch)
        with transaction.atomic():
            # The conversation's lock also orders creates against commits of the same conversation.
            conversation = producer_conversation(scope, conversation_id, epoch)
            existing = Interrupt.objects.filter(pk=interrupt_id).first()
            if existing is not None:
                return self._original(existing, conversation)
            run = Run.objects.filter(pk=run_pk, conversation=conversation).first()
            if run is None:
                raise run_not_found()
            if run.status in FINISHED_RUN_STATUSES:
                raise run_finished(run.pk, run.status)
            try:
                with transaction.atomic():
                    return Interrupt.objects.create(
                        id=interrupt_id,
                        run=run,
                        conversation=conversation,
                        kind=kind,
                        payload=payload,
                        expires_at=expires_at,
                        epoch=epoch or 0,
                    )
            except IntegrityError:
                existing = Interrupt.objects.filter(pk=interrupt_id).first()
                if existing is None:
                    raise Conflict("The interrupt could not be stored; retry.", code="interrupt_conflict") from None
                return self._original(existing, conversation)

    def _original(self, interrupt: Interrupt, conversation: Conversation) -> Interrupt:
        if interrupt.conversation_id != conversation.pk:
            raise Conflict("An interrupt with this id belongs to another conversation.", code="interrupt_id_taken")
        return interrupt

    # -- reading ----------------------------------------------------------------------------

    def get(self, scope: Scope, interrupt_id: Any) -> Interrupt:
        check_scope(scope)
        interrupt = (
            Interrupt.objects.filter(pk=clean_interrupt_id(interrupt_id))
            .filter(conversation__in=Conversation.objects.filter(readable(scope)))
            .first()
        )
        if interrupt is None:
            raise interrupt_not_found()
        return interrupt

    def list(
        self, scope: Scope, conversation_id: Any, *, status: str | None = None, run_id: Any = None
    ) -> list[Interrupt]:
        """The conversation's interrupts, oldest first, optionally of one status and one run."""
        status = clean_status(status)
        run_pk = parse_id(run_id, "run_id") if run_id is not None else None
        conversation = readable_conversation(scope, conversation_id)
        interrupts = Interrupt.objects.filter(conversation=conversation).order_by("requested_at", "id")
        if status is not None:
            interrupts = interrupts.filter(status=status)
        if run_pk is not None:
            interrupts = interrupts.filter(run_id=run_pk)
        return list(interrupts)

    def pending(self, scope: Scope, conversation_id: Any) -> list[Interrupt]:
        return self.list(scope, conversation_id, status=InterruptStatus.PENDING)

    def has_pending(self, conversation_id: Any) -> bool:
        """Whether the conversation waits on an answer: the runtime's cheap check before new input."""
        return Interrupt.objects.filter(
            conversation_id=parse_id(conversation_id, "conversation_id"), status=InterruptStatus.PENDING
        ).exists()

    # -- answering --------------------------------------------------------------------------

    def commit_batch(
        self,
        scope: Scope,
        conversation_id: Any,
        answers: list[dict[str, Any]],
        *,
        resolved_by: str | None = None,
        now: datetime | None = None,
    ) -> list[Interrupt]:
        """Resolve every pending interrupt of the conversation with ``answers``, all or nothing.

        ``answers`` is ``[{"id": interrupt id, "response": JSON}, ...]``; the
        outcome comes back in the batch's order. ``resolved_by`` defaults to
        the acting user, ``now`` (which decides what has lapsed) to the clock.
        """
        check_scope(scope)
        batch = clean_answers(answers)
        resolved_by = clean_text(resolved_by, "resolved_by", max_length=255, null=True) or scope.user
        now = clean_datetime(now, "now") or timezone.now()
        for _ in range(COMMIT_ATTEMPTS):
            try:
                return self._commit(scope, conversation_id, batch, resolved_by, now)
            except LostRace:
                continue  # rolled back whole; judge the batch again against the winner's answers
        raise Conflict("The interrupts kept changing; retry.", code="interrupts_contended")

    def _commit(
        self, scope: Scope, conversation_id: Any, batch: list[Answer], resolved_by: str, now: datetime
    ) -> list[Interrupt]:
        ids = [answer.id for answer in batch]
        with transaction.atomic():
            conversation = writable_conversation(scope, conversation_id, for_update=True)
            stored = {
                interrupt.pk: interrupt
                for interrupt in Interrupt.objects.select_for_update().filter(conversation=conversation, pk__in=ids)
            }
            fresh = answers_to_write(batch, stored, now)
            check_all_answered(conversation, batch)
            for answer in fresh:
                written = Interrupt.objects.filter(
                    pk=answer.id, conversation=conversation, status=InterruptStatus.PENDING
                ).update(
                    status=InterruptStatus.RESOLVED, response=answer.response, resolved_at=now, resolved_by=resolved_by
                )
                if written != 1:
                    raise LostRace()
            outcome = Interrupt.objects.in_bulk(ids)
        return [outcome[pk] for pk in ids]

    # -- cancelling -------------------------------------------------------------------------

    def cancel_pending(
        self, scope: Scope, conversation_id: Any, *, run_id: Any = None, epoch: int | None = None
    ) -> int:
        """Cancel the conversation's pending interrupts (only ``run_id``'s when given); returns how many."""
        run_pk = parse_id(run_id, "run_id") if run_id is not None else None
        epoch = clean_epoch(epoch)
        with transaction.atomic():
            conversation = writable_conversation(scope, conversation_id)
            guard(conversation.pk, epoch)
            pending = Interrupt.objects.filter(conversation=conversation, status=InterruptStatus.PENDING)
            if run_pk is not None:
                pending = pending.filter(run_id=run_pk)
            return pending.update(status=InterruptStatus.CANCELLED, resolved_at=timezone.now())

    def expire_lapsed(self, *, now: datetime | None = None, limit: int | None = None) -> int:
        """System sweep: cancel pending interrupts with ``expires_at <= now``, earliest first.

        Works in batches of ``SWEEP_BATCH_SIZE``, one transaction each, and
        stops after ``limit`` interrupts (None: all); returns how many it cancelled.
        """
        now = clean_datetime(now, "now") or timezone.now()
        limit = clean_limit(limit)
        batch_size = app_settings.SWEEP_BATCH_SIZE
        expired = 0
        while limit is None or expired < limit:
            size = batch_size if limit is None else min(batch_size, limit - expired)
            with transaction.atomic():
                lapsed = list(
                    Interrupt.objects.filter(status=InterruptStatus.PENDING, expires_at__lte=now)
                    .order_by("expires_at", "id")
                    .values_list("pk", flat=True)[:size]
                )
                expired += Interrupt.objects.filter(pk__in=lapsed, status=InterruptStatus.PENDING).update(
                    status=InterruptStatus.CANCELLED, response=EXPIRED_RESPONSE, resolved_at=now
                )
            if len(lapsed) < size:
                break
        return expired

    acreate = async_twin("create")
    aget = async_twin("get")
    alist = async_twin("list")
    apending = async_twin("pending")
    ahas_pending = async_twin("has_pending")
    acommit_batch = async_twin("commit_batch")
    acancel_pending = async_twin("cancel_pending")
    aexpire_lapsed = async_twin("expire_lapsed")
