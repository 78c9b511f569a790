"""The interrupt store: questions a run asks a person (or the client), answered in one batch.

An interrupt is created insert-if-absent and born pending; only a commit moves
it (resolved or cancelled by the entries of :meth:`InterruptStore.commit_batch`,
cancelled by :meth:`~InterruptStore.cancel`, :meth:`~InterruptStore.cancel_pending`
or the lapse sweep :meth:`~InterruptStore.expire_lapsed`). A resume batch must
settle pending interrupts of the conversation (all of them, or some while the
others wait), each entry resolving or cancelling one; it is validated whole before anything is written
and committed in one transaction, so it lands entirely or not at all. Each
write is a conditional UPDATE with ``status="pending"`` in its filter and its row count checked: a batch that
loses a race is rolled back and judged again against what the winner wrote,
so a repeated identical answer (a double click, a retry) returns the first
outcome and a different one is Conflict("already_answered").

Reads follow the conversation's read rule; writes are the owner's. A write
that passes ``epoch`` is a producer write and is fenced (see
:mod:`agent_persistence.stores.supervision`) before it takes any other lock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, Validation
from ..models import FINISHED_RUN_STATUSES, Conversation, Interrupt, InterruptStatus, Run
from ..scope import Scope
from .base import (
    check_scope,
    clean_datetime,
    clean_epoch,
    clean_text,
    parse_id,
    readable,
    readable_conversation,
    writable_conversation,
)
from .fencing import guard, producer_conversation
from .protocols import InterruptStoreProtocol
from .rules.interrupts import (  # re-exported: these rules moved to agent_persistence/stores/rules/interrupts.py
    ENTRY_KEYS as ENTRY_KEYS,
    entry_status as entry_status,
    expired as expired,
    is_lapsed as is_lapsed,
    same_json as same_json,
)
from .rules.interrupts import (
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
from .runs import clean_run_id, readable_run, run_finished, run_not_found
from .times import clean_caller_time
from .twins import twins_of

#: How often a batch that lost a race is judged again before giving up.
COMMIT_ATTEMPTS = 3


# -- errors -----------------------------------------------------------------------------------


class LostRace(Exception):
    """A conditional write matched no row: another commit moved the interrupt first."""


# -- cleaning input ---------------------------------------------------------------------------


# -- judging a batch --------------------------------------------------------------------------


def check_not_empty(conversation: Conversation, batch: list[Answer]) -> None:
    """An empty batch while questions wait settles nothing: Validation("unanswered_interrupts") naming them.

    A batch that names some of the pending interrupts is a partial settlement
    (TanStack's ``resolve(interruptId)`` of one of several): it lands, and the
    others stay pending, so the turn stays parked until the last is settled.
    """
    if batch:
        return
    unanswered = list(
        Interrupt.objects.filter(conversation=conversation, status=InterruptStatus.PENDING)
        .order_by("requested_at", "id")
        .values_list("pk", flat=True)
    )
    if unanswered:
        raise Validation(
            "The batch answers none of the pending interrupts.",
            code="unanswered_interrupts",
            ids=[str(pk) for pk in unanswered],
        )


class InterruptStore(twins_of(InterruptStoreProtocol)):
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
        requested_at: datetime | None = None,
        epoch: int | None = None,
    ) -> Interrupt:
        """The interrupt ``id``, inserted as pending if it does not exist yet (else returned unchanged).

        The run must be an open run of the conversation. An id already used in
        another conversation is Conflict("interrupt_id_taken"). The payload
        must be what ``kind`` documents (:func:`clean_payload`);
        ``requested_at`` (an import's) defaults to now.
        """
        interrupt_id = parse_id(id, "id")
        run_pk = clean_run_id(run_id)
        kind = clean_kind(kind)
        payload = clean_payload(kind, payload)
        expires_at = clean_datetime(expires_at, "expires_at")
        requested_at = clean_caller_time(requested_at, field="requested_at")
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
                        requested_at=requested_at or timezone.now(),
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
        self, scope: Scope, conversation_id: Any = None, *, status: str | None = None, run_id: Any = None
    ) -> list[Interrupt]:
        """The interrupts of a conversation, of a run, or of that run in that conversation, oldest first.

        At least one of ``conversation_id`` and ``run_id`` is needed; a run
        named alone is looked up (NotFound when the scope may not read it).
        ``status`` keeps one status.
        """
        status = clean_status(status)
        if conversation_id is None and run_id is None:
            raise Validation("Name a conversation or a run.", field="conversation_id")
        interrupts = Interrupt.objects.order_by("requested_at", "id")
        if conversation_id is not None:
            run_pk = parse_id(run_id, "run_id") if run_id is not None else None
            interrupts = interrupts.filter(conversation=readable_conversation(scope, conversation_id))
            if run_pk is not None:
                interrupts = interrupts.filter(run_id=run_pk)
        else:
            interrupts = interrupts.filter(run=readable_run(scope, run_id))
        if status is not None:
            interrupts = interrupts.filter(status=status)
        return list(interrupts)

    def pending(self, scope: Scope, conversation_id: Any = None, *, run_id: Any = None) -> list[Interrupt]:
        """The pending interrupts of a conversation or of a run, oldest first (see :meth:`list`)."""
        return self.list(scope, conversation_id, status=InterruptStatus.PENDING, run_id=run_id)

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
        resolved_at: datetime | None = None,
    ) -> list[Interrupt]:
        """Settle the interrupts ``answers`` name, all or nothing; the others of the conversation stay pending.

        A batch may settle every pending interrupt at once or some of them (one
        answer while others wait); an empty batch while some wait is
        Validation("unanswered_interrupts"). Each entry resolves (``{"id", "response"}``, optionally with
        ``"status": "resolved"``) or cancels (``{"id", "status": "cancelled"}``)
        one interrupt; the outcome comes back in the batch's order.
        ``resolved_by`` defaults to the acting user, ``now`` (which decides
        what has lapsed) to the clock, ``resolved_at`` (an import's) to ``now``.
        """
        check_scope(scope)
        batch = clean_answers(answers)
        resolved_by = clean_text(resolved_by, "resolved_by", max_length=255, null=True) or scope.user
        now = clean_datetime(now, "now") or timezone.now()
        resolved_at = clean_caller_time(resolved_at, field="resolved_at")
        for _ in range(COMMIT_ATTEMPTS):
            try:
                return self._commit(scope, conversation_id, batch, resolved_by, now, resolved_at)
            except LostRace:
                continue  # rolled back whole; judge the batch again against the winner's answers
        raise Conflict("The interrupts kept changing; retry.", code="interrupts_contended")

    def _commit(
        self,
        scope: Scope,
        conversation_id: Any,
        batch: list[Answer],
        resolved_by: str,
        now: datetime,
        resolved_at: datetime | None,
    ) -> list[Interrupt]:
        ids = [answer.id for answer in batch]
        with transaction.atomic():
            conversation = writable_conversation(scope, conversation_id, for_update=True)
            stored = {
                interrupt.pk: interrupt
                for interrupt in Interrupt.objects.select_for_update().filter(conversation=conversation, pk__in=ids)
            }
            fresh = answers_to_write(batch, stored, now)
            check_not_empty(conversation, batch)
            if resolved_at is not None:
                check_resolved_at(resolved_at, [stored[answer.id] for answer in fresh])
            for answer in fresh:
                written = Interrupt.objects.filter(
                    pk=answer.id, conversation=conversation, status=InterruptStatus.PENDING
                ).update(**settled_values(answer, resolved_at or now, resolved_by))
                if written != 1:
                    raise LostRace()
            outcome = Interrupt.objects.in_bulk(ids)
        return [outcome[pk] for pk in ids]

    # -- cancelling -------------------------------------------------------------------------

    def cancel(
        self,
        scope: Scope,
        interrupt_id: Any,
        *,
        resolved_by: str | None = None,
        resolved_at: datetime | None = None,
        epoch: int | None = None,
    ) -> Interrupt:
        """Cancel one pending interrupt; one already cancelled is returned unchanged.

        A resolved interrupt is Conflict("already_answered"). This settles one
        question only: the turn that asked goes on when a batch settles the
        rest (:meth:`commit_batch`). ``resolved_at`` (an import's) defaults to now.
        """
        check_scope(scope)
        pk = clean_interrupt_id(interrupt_id)
        resolved_by = clean_text(resolved_by, "resolved_by", max_length=255, null=True) or scope.user
        resolved_at = clean_caller_time(resolved_at, field="resolved_at")
        epoch = clean_epoch(epoch)
        interrupt = self.get(scope, pk)
        with transaction.atomic():
            conversation = producer_conversation(scope, interrupt.conversation_id, epoch)
            interrupt = Interrupt.objects.select_for_update().filter(pk=pk, conversation=conversation).first()
            if interrupt is None:  # deleted with its conversation meanwhile
                raise interrupt_not_found()
            if interrupt.status == InterruptStatus.PENDING:
                if resolved_at is not None:
                    check_resolved_at(resolved_at, [interrupt])
                cancelled = Answer(id=pk, response=None, status=InterruptStatus.CANCELLED)
                Interrupt.objects.filter(pk=pk, status=InterruptStatus.PENDING).update(
                    **settled_values(cancelled, resolved_at or timezone.now(), resolved_by)
                )
                # Whether this write or a concurrent commit moved it, the outcome is judged on what is stored now.
                interrupt = Interrupt.objects.get(pk=pk)
            if interrupt.status == InterruptStatus.RESOLVED:
                raise already_answered(interrupt)
            return interrupt

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
