"""The in-memory interrupt store: insert-if-absent creation and all-or-nothing batch answers under the family's lock."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from ...exceptions import Conflict, Validation
from ...models import FINISHED_RUN_STATUSES, Interrupt, InterruptStatus
from ...scope import Scope
from ..protocols import InterruptStoreProtocol
from ..rules.base import check_scope, clean_datetime, clean_epoch, clean_text, parse_id
from ..rules.interrupts import (
    EXPIRED_RESPONSE,
    Answer,
    already_answered,
    answers_to_write,
    check_resolved_at,
    clean_answers,
    clean_interrupt_id,
    clean_kind,
    clean_limit,
    clean_payload,
    clean_status,
    interrupt_not_found,
    settled_values,
)
from ..rules.runs import clean_run_id, run_finished, run_not_found
from ..rules.times import clean_caller_time
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone
from .runs import MemoryRunStore


def by_request(interrupts: Any) -> list[Interrupt]:
    return sorted(interrupts, key=lambda interrupt: (interrupt.requested_at, interrupt.pk))


class MemoryInterruptStore(twins_of(InterruptStoreProtocol)):
    """Interrupts in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE
        self._runs = MemoryRunStore(self.db)

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
        requested_at: datetime | None = None,
        epoch: int | None = None,
    ) -> Interrupt:
        interrupt_id = parse_id(id, "id")
        run_pk = clean_run_id(run_id)
        kind = clean_kind(kind)
        payload = clean_payload(kind, payload)
        expires_at = clean_datetime(expires_at, "expires_at")
        requested_at = clean_caller_time(requested_at, field="requested_at")
        epoch = clean_epoch(epoch)
        with self.db.lock:
            conversation = self._runs._producer_conversation(scope, conversation_id, epoch)
            existing = self.db.interrupts.get(interrupt_id)
            if existing is not None:
                if existing.conversation_id != conversation.pk:
                    raise Conflict("An interrupt with this id belongs to another conversation.", code="interrupt_id_taken")
                return clone(existing)
            run = self.db.runs.get(run_pk)
            if run is None or run.conversation_id != conversation.pk:
                raise run_not_found()
            if run.status in FINISHED_RUN_STATUSES:
                raise run_finished(run.pk, run.status)
            interrupt = Interrupt(
                id=interrupt_id,
                run_id=run.pk,
                conversation_id=conversation.pk,
                kind=kind,
                payload=payload,
                requested_at=requested_at or timezone.now(),
                expires_at=expires_at,
                epoch=epoch or 0,
            )
            self.db.interrupts[interrupt_id] = interrupt
            return clone(interrupt)

    def get(self, scope: Scope, interrupt_id: Any) -> Interrupt:
        check_scope(scope)
        pk = clean_interrupt_id(interrupt_id)
        with self.db.lock:
            interrupt = self.db.interrupts.get(pk)
            conversation = None if interrupt is None else self.db.conversations.get(interrupt.conversation_id)
            if conversation is None or not self.db.may_read(scope, conversation):
                raise interrupt_not_found()
            return clone(interrupt)

    def list(
        self, scope: Scope, conversation_id: Any = None, *, status: str | None = None, run_id: Any = None
    ) -> list[Interrupt]:
        status = clean_status(status)
        if conversation_id is None and run_id is None:
            raise Validation("Name a conversation or a run.", field="conversation_id")
        with self.db.lock:
            if conversation_id is not None:
                run_pk = parse_id(run_id, "run_id") if run_id is not None else None
                conversation_pk = self.db.readable_conversation(scope, conversation_id).pk
            else:
                run = self._runs._readable(scope, run_id)
                run_pk, conversation_pk = run.pk, run.conversation_id
            interrupts = [
                interrupt
                for interrupt in self.db.interrupts.values()
                if interrupt.conversation_id == conversation_pk
                and (status is None or interrupt.status == status)
                and (run_pk is None or interrupt.run_id == run_pk)
            ]
            return [clone(interrupt) for interrupt in by_request(interrupts)]

    def pending(self, scope: Scope, conversation_id: Any = None, *, run_id: Any = None) -> list[Interrupt]:
        return self.list(scope, conversation_id, status=InterruptStatus.PENDING, run_id=run_id)

    def has_pending(self, conversation_id: Any) -> bool:
        pk = parse_id(conversation_id, "conversation_id")
        with self.db.lock:
            return any(
                interrupt.conversation_id == pk and interrupt.status == InterruptStatus.PENDING
                for interrupt in self.db.interrupts.values()
            )

    def commit_batch(
        self,
        scope: Scope,
        conversation_id: Any,
        answers: list[dict[str, Any]],
        *,
        resolved_by: str | None = None,
        now: datetime | None = None,
        resolved_at: datetime | None = None,
    ) -> list[Interrupt]:
        check_scope(scope)
        batch = clean_answers(answers)
        resolved_by = clean_text(resolved_by, "resolved_by", max_length=255, null=True) or scope.user
        now = clean_datetime(now, "now") or timezone.now()
        resolved_at = clean_caller_time(resolved_at, field="resolved_at")
        ids = [answer.id for answer in batch]
        with self.db.lock:
            conversation = self.db.writable_conversation(scope, conversation_id)
            stored = {
                pk: self.db.interrupts[pk]
                for pk in ids
                if pk in self.db.interrupts and self.db.interrupts[pk].conversation_id == conversation.pk
            }
            fresh = answers_to_write(batch, stored, now)
            # A partial batch lands and leaves the rest pending; an empty one while questions wait settles nothing.
            unanswered = [
                interrupt.pk
                for interrupt in by_request(self.db.interrupts.values())
                if interrupt.conversation_id == conversation.pk
                and interrupt.status == InterruptStatus.PENDING
                and not batch
            ]
            if unanswered:
                raise Validation(
                    "The batch answers none of the pending interrupts.",
                    code="unanswered_interrupts",
                    ids=[str(pk) for pk in unanswered],
                )
            if resolved_at is not None:
                check_resolved_at(resolved_at, [stored[answer.id] for answer in fresh])
            for answer in fresh:
                interrupt = stored[answer.id]
                for name, value in settled_values(answer, resolved_at or now, resolved_by).items():
                    setattr(interrupt, name, value)
            return [clone(stored[pk]) for pk in ids]

    def cancel(
        self,
        scope: Scope,
        interrupt_id: Any,
        *,
        resolved_by: str | None = None,
        resolved_at: datetime | None = None,
        epoch: int | None = None,
    ) -> Interrupt:
        check_scope(scope)
        pk = clean_interrupt_id(interrupt_id)
        resolved_by = clean_text(resolved_by, "resolved_by", max_length=255, null=True) or scope.user
        resolved_at = clean_caller_time(resolved_at, field="resolved_at")
        epoch = clean_epoch(epoch)
        with self.db.lock:
            self.get(scope, pk)
            interrupt = self.db.interrupts[pk]
            self._runs._producer_conversation(scope, interrupt.conversation_id, epoch)
            if interrupt.status == InterruptStatus.RESOLVED:
                raise already_answered(interrupt)
            if interrupt.status == InterruptStatus.PENDING:
                if resolved_at is not None:
                    check_resolved_at(resolved_at, [interrupt])
                cancelled = Answer(id=pk, response=None, status=InterruptStatus.CANCELLED)
                for name, value in settled_values(cancelled, resolved_at or timezone.now(), resolved_by).items():
                    setattr(interrupt, name, value)
            return clone(interrupt)

    def cancel_pending(
        self, scope: Scope, conversation_id: Any, *, run_id: Any = None, epoch: int | None = None
    ) -> int:
        run_pk = parse_id(run_id, "run_id") if run_id is not None else None
        epoch = clean_epoch(epoch)
        with self.db.lock:
            conversation = self._runs._producer_conversation(scope, conversation_id, epoch)
            pending = [
                interrupt
                for interrupt in self.db.interrupts.values()
                if interrupt.conversation_id == conversation.pk
                and interrupt.status == InterruptStatus.PENDING
                and (run_pk is None or interrupt.run_id == run_pk)
            ]
            now = timezone.now()
            for interrupt in pending:
                interrupt.status, interrupt.resolved_at = InterruptStatus.CANCELLED, now
            return len(pending)

    def expire_lapsed(self, *, now: datetime | None = None, limit: int | None = None) -> int:
        now = clean_datetime(now, "now") or timezone.now()
        limit = clean_limit(limit)
        with self.db.lock:
            lapsed = sorted(
                (
                    interrupt
                    for interrupt in self.db.interrupts.values()
                    if interrupt.status == InterruptStatus.PENDING
                    and interrupt.expires_at is not None
                    and interrupt.expires_at <= now
                ),
                key=lambda interrupt: (interrupt.expires_at, interrupt.pk),
            )
            if limit is not None:
                lapsed = lapsed[:limit]
            for interrupt in lapsed:
                interrupt.status, interrupt.response, interrupt.resolved_at = (
                    InterruptStatus.CANCELLED,
                    dict(EXPIRED_RESPONSE),
                    now,
                )
            return len(lapsed)
