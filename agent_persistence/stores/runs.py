"""The run store: runs of the agent loop (one turn has one or more), their usage and outcome.

A run is created insert-if-absent (:meth:`RunStore.create_or_resume`): a second
call with the same id returns the stored row as it is, so a finished run is
never resurrected. It moves running <-> interrupted while it lives and ends
exactly once as completed, failed or aborted; every move is a conditional
UPDATE with the open statuses in its filter and its row count checked, so of
two concurrent finishers exactly one wins and the other gets
Conflict("run_finished").

Reads follow the conversation's read rule (owner, or anyone of the tenant
when shared); writes are the owner's. A write that passes ``epoch`` is a
producer write: it runs :func:`~agent_persistence.stores.supervision.fence`
inside its transaction first and is refused (Fenced) once a newer epoch holds
the conversation. ``epoch=None`` is an operator or API action and is not
fenced. Locks are taken in the order the supervision store declares
(supervision row, then conversation, then run or interrupt rows), so a claim
and a producer write never wait on each other on PostgreSQL.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from ..exceptions import Conflict, ConversationNotOwned
from ..models import Conversation, Run, RunStatus
from ..scope import Scope
from .base import (
    Page,
    check_scope,
    clean_datetime,
    clean_epoch,
    clean_order,
    clean_paging,
    clean_text,
    keyset_page,
    lookup_id,
    may_read,
    parse_id,
    readable,
    readable_conversation,
)
from .fencing import guard, producer_conversation
from .protocols import RunStoreProtocol
from .rules.runs import (  # re-exported: these rules moved to agent_persistence/stores/rules/runs.py
    DEFAULT_ERROR_CODE as DEFAULT_ERROR_CODE,
    ERROR_KEYS as ERROR_KEYS,
    MAX_COUNTER as MAX_COUNTER,
    MAX_TRANSCRIPT_MESSAGES as MAX_TRANSCRIPT_MESSAGES,
    TRANSCRIPT_FIELDS as TRANSCRIPT_FIELDS,
    clean_age as clean_age,
    is_counter as is_counter,
)
from .rules.runs import (
    OPEN_RUN_STATUSES,
    STUCK_RUN_ERROR,
    add_counters,
    clean_error,
    clean_finished_status,
    clean_open_status,
    clean_run_id,
    clean_transcript,
    clean_usage,
    finish_time,
    reclaim_cutoff,
    run_finished,
    run_not_found,
    set_counters,
)
from .times import clean_caller_time
from .twins import twins_of

# -- errors -----------------------------------------------------------------------------------


# -- cleaning input ---------------------------------------------------------------------------


# -- scoped lookups ---------------------------------------------------------------------------


def visible_runs(scope: Scope) -> QuerySet[Run]:
    """The runs of the conversations ``scope`` may read."""
    check_scope(scope)
    return Run.objects.filter(conversation__in=Conversation.objects.filter(readable(scope)))


def readable_run(scope: Scope, run_id: Any) -> Run:
    run = visible_runs(scope).filter(pk=clean_run_id(run_id)).first()
    if run is None:
        raise run_not_found()
    return run


def writable_run(scope: Scope, run_id: Any) -> Run:
    """The run if ``scope`` owns its conversation; a reader of a shared one gets ConversationNotOwned."""
    run = visible_runs(scope).select_related("conversation").filter(pk=clean_run_id(run_id)).first()
    if run is None:
        raise run_not_found()
    if run.conversation.owner != scope.user:
        raise ConversationNotOwned()
    return run


def transcript_change(transcript: Any) -> dict[str, Any]:
    """``{"transcript": cleaned}`` to write, or nothing when the caller leaves it as it is."""
    cleaned = clean_transcript(transcript)
    return {} if cleaned is None else {"transcript": cleaned}


def update_open_run(run: Run, **changes: Any) -> None:
    """Write ``changes`` iff the run is still open; a finished run is Conflict("run_finished")."""
    if not Run.objects.filter(pk=run.pk, status__in=OPEN_RUN_STATUSES).update(**changes):
        raise run_finished(run.pk, current_status(run.pk))


def current_status(run_id: uuid.UUID) -> str:
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None:  # deleted with its conversation meanwhile
        raise run_not_found()
    return status


class RunStore(twins_of(RunStoreProtocol)):
    """Runs of the agent loop: create-or-resume, status moves, usage, cancellation."""

    # -- creating ---------------------------------------------------------------------------

    def create_or_resume(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        id: Any,
        message_id: Any,
        name: str = "",
        parent_id: Any = None,
        started_at: datetime | None = None,
        epoch: int | None = None,
    ) -> Run:
        """The run ``id`` of the conversation, inserted as running if it does not exist yet.

        A run that exists is returned unchanged, whatever the other arguments
        say (a finished run stays finished). An id already used by a run of
        another conversation is Conflict("run_id_taken"). ``started_at`` (an
        import's) defaults to now.
        """
        run_id = parse_id(id, "id")
        started_at = clean_caller_time(started_at, field="started_at")
        turn_id = parse_id(message_id, "message_id")
        name = clean_text(name, "name", max_length=Run._meta.get_field("name").max_length) or ""
        parent_pk = clean_run_id(parent_id, "parent run") if parent_id is not None else None
        epoch = clean_epoch(epoch)
        with transaction.atomic():
            conversation = producer_conversation(scope, conversation_id, epoch)
            existing = Run.objects.filter(pk=run_id).first()
            if existing is not None:
                return self._original(existing, conversation)
            if parent_pk is not None and not Run.objects.filter(pk=parent_pk, conversation=conversation).exists():
                raise run_not_found("parent run")
            try:
                with transaction.atomic():
                    return Run.objects.create(
                        id=run_id,
                        conversation=conversation,
                        message_id=turn_id,
                        parent_id=parent_pk,
                        name=name,
                        status=RunStatus.RUNNING,
                        started_at=started_at or timezone.now(),
                        epoch=epoch or 0,
                    )
            except IntegrityError:
                # Another transaction inserted this id between our read and our insert.
                existing = Run.objects.filter(pk=run_id).first()
                if existing is None:
                    raise Conflict("The run could not be stored; retry.", code="run_conflict") from None
                return self._original(existing, conversation)

    def _original(self, run: Run, conversation: Conversation) -> Run:
        if run.conversation_id != conversation.pk:
            raise Conflict("A run with this id belongs to another conversation.", code="run_id_taken")
        return run

    # -- reading ----------------------------------------------------------------------------

    def get(self, scope: Scope, run_id: Any) -> Run:
        return readable_run(scope, run_id)

    def find_active_run(self, scope: Scope, conversation_id: Any) -> Run | None:
        """The newest running run of the conversation (interrupted ones are parked, not active)."""
        conversation = readable_conversation(scope, conversation_id)
        return (
            Run.objects.filter(conversation=conversation, status=RunStatus.RUNNING)
            .order_by("-started_at", "-id")
            .first()
        )

    def list(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        message_id: Any = None,
        limit: int | None = None,
        offset: int = 0,
        order: str = "desc",
        before: Any = None,
        after: Any = None,
        with_total: bool | None = None,
    ) -> Page[Run]:
        """The conversation's runs (subagents included), newest first; ``message_id`` keeps one turn's.

        ``before`` / ``after`` are strict run-id cursors on ``(started_at, id)``:
        only runs that start before / after that run (the id breaks ties),
        whatever ``order`` shows them in. A cursor must be a run of this listing
        (of the turn, with ``message_id``), else NotFound. A cursor read is
        uncounted unless ``with_total=True``; uncounted, the page is one
        statement on the ``(conversation, started_at, id)`` index, the access
        check and the cursors' start times as its subqueries.
        """
        limit, offset = clean_paging(limit, offset)
        order = clean_order(order, "desc")
        turn_id = parse_id(message_id, "message_id") if message_id is not None else None
        check_scope(scope)
        pk = lookup_id(conversation_id)
        runs = Run.objects.filter(conversation_id=pk)
        if turn_id is not None:
            runs = runs.filter(message_id=turn_id)
        ordering = ("-started_at", "-id") if order == "desc" else ("started_at", "id")
        return keyset_page(
            # A listing never shows a subagent's transcript (its card does): it is not read.
            runs.defer("transcript").order_by(*ordering),
            key="started_at",
            cursor_rows=runs,
            before=before,
            after=after,
            what="run",
            limit=limit,
            offset=offset,
            with_total=with_total,
            access=may_read(scope, pk),
            check_access=lambda: readable_conversation(scope, pk),
        )

    def children(self, scope: Scope, run_id: Any) -> list[Run]:
        """The run's child runs (subagents), oldest first."""
        run = readable_run(scope, run_id)
        return list(Run.objects.filter(parent=run).order_by("started_at", "id"))

    #: The seed's (TanStack AI's) name for :meth:`children`.
    list_by_parent_run = children

    def list_reclaimable(self, older_than: Any, *, now: datetime | None = None, limit: int | None = None) -> list[Run]:
        """System sweep: running runs detached at ``now - older_than`` or earlier, longest detached first.

        What a takeover or a reaper acts on: nobody has followed them for at
        least ``older_than`` (a ``timedelta`` or seconds). Interrupted and
        finished runs are never reclaimable. ``limit`` as a listing's
        (default ``DEFAULT_PAGE_SIZE``).
        """
        cutoff = reclaim_cutoff(older_than, now)
        limit, _ = clean_paging(limit, 0)
        runs = Run.objects.filter(status=RunStatus.RUNNING, detached_since__lte=cutoff)
        return list(runs.order_by("detached_since", "id")[:limit])

    def is_cancel_requested(self, run_id: Any) -> bool:
        """Whether a stop was asked for the run: the producer's cheap poll (False for an unknown run)."""
        return Run.objects.filter(pk=parse_id(run_id, "run_id"), cancel_requested=True).exists()

    # -- producer writes --------------------------------------------------------------------

    def add_usage(self, scope: Scope, run_id: Any, usage: dict[str, int | float], *, epoch: int | None = None) -> Run:
        """Add ``usage`` to the run's counters (a missing counter starts at 0); the sum of every call is kept."""
        usage = clean_usage(usage)
        epoch = clean_epoch(epoch)
        with transaction.atomic():
            run = writable_run(scope, run_id)
            guard(run.conversation_id, epoch)
            locked = Run.objects.select_for_update().get(pk=run.pk)
            if locked.status not in OPEN_RUN_STATUSES:
                raise run_finished(run.pk, locked.status)
            update_open_run(run, usage=add_counters(locked.usage or {}, usage))
            return Run.objects.get(pk=run.pk)

    def set_usage(self, scope: Scope, run_id: Any, usage: dict[str, int | float], *, epoch: int | None = None) -> Run:
        """Replace the run's counters with ``usage``, absolute totals (TanStack's ``update(runId, {usage})``).

        For a writer that reports cumulative totals: writing the same totals
        twice (a resumed run re-reporting them) counts them once, where
        :meth:`add_usage` would add them again. Counters not named are dropped.
        Fenced and owner-only like ``add_usage``; a finished run is
        Conflict("run_finished") and keeps its usage.
        """
        usage = clean_usage(usage)
        epoch = clean_epoch(epoch)
        with transaction.atomic():
            run = writable_run(scope, run_id)
            guard(run.conversation_id, epoch)
            update_open_run(run, usage=set_counters(usage))
            return Run.objects.get(pk=run.pk)

    def set_status(
        self, scope: Scope, run_id: Any, status: str, *, transcript: list[dict[str, Any]] | None = None,
        epoch: int | None = None,
    ) -> Run:
        """Move an open run between running and interrupted (a pause at an interrupt, a continuation).

        ``transcript`` (a subagent's messages so far) replaces the run's own
        transcript in the same statement; None leaves it as it is.
        """
        status = clean_open_status(status)
        changes = transcript_change(transcript)
        epoch = clean_epoch(epoch)
        with transaction.atomic():
            run = writable_run(scope, run_id)
            guard(run.conversation_id, epoch)
            update_open_run(run, status=status, **changes)
            return Run.objects.get(pk=run.pk)

    def finish(
        self,
        scope: Scope,
        run_id: Any,
        status: str,
        *,
        error: dict[str, str] | None = None,
        finished_at: datetime | None = None,
        transcript: list[dict[str, Any]] | None = None,
        epoch: int | None = None,
    ) -> Run:
        """End an open run as completed, failed or aborted, once; a finished run is Conflict("run_finished").

        Its usage is kept, whatever the status. ``finished_at`` (an import's)
        defaults to now and may not be before the run's ``started_at``.
        ``transcript`` (a subagent's messages) replaces the run's own
        transcript in the same statement; None leaves it as it is.
        """
        status = clean_finished_status(status)
        error = clean_error(error)
        finished_at = clean_caller_time(finished_at, field="finished_at")
        changes = transcript_change(transcript)
        epoch = clean_epoch(epoch)
        with transaction.atomic():
            run = writable_run(scope, run_id)
            guard(run.conversation_id, epoch)
            update_open_run(run, status=status, error=error, finished_at=finish_time(run, finished_at), **changes)
            return Run.objects.get(pk=run.pk)

    def mark_detached(
        self, scope: Scope, run_id: Any, since: datetime | None = None, *, epoch: int | None = None
    ) -> Run:
        """Record that nobody follows the open run any more; the first ``since`` is kept."""
        since = clean_datetime(since, "since") or timezone.now()
        epoch = clean_epoch(epoch)
        with transaction.atomic():
            run = writable_run(scope, run_id)
            guard(run.conversation_id, epoch)
            marked = Run.objects.filter(pk=run.pk, status__in=OPEN_RUN_STATUSES, detached_since__isnull=True).update(
                detached_since=since
            )
            if not marked:
                status = current_status(run.pk)
                if status not in OPEN_RUN_STATUSES:
                    raise run_finished(run.pk, status)
            return Run.objects.get(pk=run.pk)

    def clear_detached(self, scope: Scope, run_id: Any, *, epoch: int | None = None) -> Run:
        """Record that the open run is followed (or taken over) again."""
        epoch = clean_epoch(epoch)
        with transaction.atomic():
            run = writable_run(scope, run_id)
            guard(run.conversation_id, epoch)
            update_open_run(run, detached_since=None)
            return Run.objects.get(pk=run.pk)

    # -- user and operator actions ----------------------------------------------------------

    def request_cancel(self, scope: Scope, run_id: Any) -> Run:
        """Ask the producer to stop the run (it polls :meth:`is_cancel_requested`).

        Not fenced: a stop comes from a user or an operator on any process. A
        run that already finished is returned unchanged, since there is nothing
        left to stop.
        """
        with transaction.atomic():
            run = writable_run(scope, run_id)
            Run.objects.filter(pk=run.pk, status__in=OPEN_RUN_STATUSES).update(cancel_requested=True)
            return Run.objects.get(pk=run.pk)

    def abort_stuck(self, run_id: Any, *, error: dict[str, str] | None = None) -> bool:
        """Operator or system action: abort an open run; False when it had already finished or is unknown."""
        run_pk = parse_id(run_id, "run_id")
        error = clean_error(error) or dict(STUCK_RUN_ERROR)
        aborted = Run.objects.filter(pk=run_pk, status__in=OPEN_RUN_STATUSES).update(
            status=RunStatus.ABORTED, error=error, finished_at=timezone.now()
        )
        return aborted == 1
