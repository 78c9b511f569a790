"""The in-memory run store: create-or-resume, status moves, usage and cancellation under the family's lock."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from ...exceptions import Conflict, ConversationNotOwned
from ...models import Conversation, Run, RunStatus
from ...scope import Scope
from ..protocols import RunStoreProtocol
from ..rules.base import (
    Page,
    check_scope,
    clean_datetime,
    clean_epoch,
    clean_order,
    clean_paging,
    clean_text,
    clean_with_total,
    parse_id,
)
from ..rules.runs import (
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
from ..rules.times import clean_caller_time
from ..twins import twins_of
from .conversations import page_of, past_cursors
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


class MemoryRunStore(twins_of(RunStoreProtocol)):
    """Runs of the agent loop, in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    # -- lookups (the caller holds the lock) --------------------------------------------------

    def _readable(self, scope: Scope, run_id: Any) -> Run:
        check_scope(scope)
        run = self.db.runs.get(clean_run_id(run_id))
        conversation = None if run is None else self.db.conversations.get(run.conversation_id)
        if conversation is None or not self.db.may_read(scope, conversation):
            raise run_not_found()
        return run

    def _writable(self, scope: Scope, run_id: Any, epoch: int | None) -> Run:
        run = self._readable(scope, run_id)
        if self.db.conversations[run.conversation_id].owner != scope.user:
            raise ConversationNotOwned()
        if epoch is not None:
            self.db.fence(run.conversation_id, epoch, timezone.now())
        return run

    def _open(self, run: Run) -> Run:
        if run.status not in OPEN_RUN_STATUSES:
            raise run_finished(run.pk, run.status)
        return run

    def _producer_conversation(self, scope: Scope, conversation_id: Any, epoch: int | None) -> Conversation:
        conversation = self.db.writable_conversation(scope, conversation_id)
        if epoch is not None:
            self.db.fence(conversation.pk, epoch, timezone.now())
        return conversation

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
        run_id = parse_id(id, "id")
        started_at = clean_caller_time(started_at, field="started_at")
        turn_id = parse_id(message_id, "message_id")
        name = clean_text(name, "name", max_length=Run._meta.get_field("name").max_length) or ""
        parent_pk = clean_run_id(parent_id, "parent run") if parent_id is not None else None
        epoch = clean_epoch(epoch)
        with self.db.lock:
            conversation = self._producer_conversation(scope, conversation_id, epoch)
            existing = self.db.runs.get(run_id)
            if existing is not None:
                if existing.conversation_id != conversation.pk:
                    raise Conflict("A run with this id belongs to another conversation.", code="run_id_taken")
                return clone(existing)
            parent = None if parent_pk is None else self.db.runs.get(parent_pk)
            if parent_pk is not None and (parent is None or parent.conversation_id != conversation.pk):
                raise run_not_found("parent run")
            run = Run(
                id=run_id,
                conversation_id=conversation.pk,
                message_id=turn_id,
                parent_id=parent_pk,
                name=name,
                status=RunStatus.RUNNING,
                started_at=started_at or timezone.now(),
                epoch=epoch or 0,
            )
            self.db.runs[run_id] = run
            return clone(run)

    # -- reading ----------------------------------------------------------------------------

    def get(self, scope: Scope, run_id: Any) -> Run:
        with self.db.lock:
            return clone(self._readable(scope, run_id))

    def _runs_of(self, conversation_pk: Any) -> list[Run]:
        runs = [run for run in self.db.runs.values() if run.conversation_id == conversation_pk]
        return sorted(runs, key=lambda run: (run.started_at, run.pk), reverse=True)

    def find_active_run(self, scope: Scope, conversation_id: Any) -> Run | None:
        with self.db.lock:
            conversation = self.db.readable_conversation(scope, conversation_id)
            running = [run for run in self._runs_of(conversation.pk) if run.status == RunStatus.RUNNING]
            return clone(running[0]) if running else None

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
        limit, offset = clean_paging(limit, offset)
        order = clean_order(order, "desc")
        turn_id = parse_id(message_id, "message_id") if message_id is not None else None
        with self.db.lock:
            conversation = self.db.readable_conversation(scope, conversation_id)
            with_total = clean_with_total(with_total, before, after)
            listed = [run for run in self._runs_of(conversation.pk) if turn_id is None or run.message_id == turn_id]
            runs = past_cursors(
                listed, listed, lambda run: (run.started_at, run.pk), before=before, after=after, what="run"
            )
            if order == "asc":
                runs.reverse()
            return page_of(runs, limit, offset, with_total=with_total)

    def children(self, scope: Scope, run_id: Any) -> list[Run]:
        with self.db.lock:
            run = self._readable(scope, run_id)
            kids = [child for child in self.db.runs.values() if child.parent_id == run.pk]
            return [clone(child) for child in sorted(kids, key=lambda child: (child.started_at, child.pk))]

    list_by_parent_run = children

    def list_reclaimable(self, older_than: Any, *, now: datetime | None = None, limit: int | None = None) -> list[Run]:
        cutoff = reclaim_cutoff(older_than, now)
        limit, _ = clean_paging(limit, 0)
        with self.db.lock:
            runs = [
                run
                for run in self.db.runs.values()
                if run.status == RunStatus.RUNNING and run.detached_since is not None and run.detached_since <= cutoff
            ]
            runs.sort(key=lambda run: (run.detached_since, run.pk))
            return [clone(run) for run in runs[:limit]]

    def is_cancel_requested(self, run_id: Any) -> bool:
        pk = parse_id(run_id, "run_id")
        with self.db.lock:
            run = self.db.runs.get(pk)
            return run is not None and run.cancel_requested

    # -- producer writes --------------------------------------------------------------------

    def add_usage(self, scope: Scope, run_id: Any, usage: dict[str, int | float], *, epoch: int | None = None) -> Run:
        usage = clean_usage(usage)
        epoch = clean_epoch(epoch)
        with self.db.lock:
            run = self._open(self._writable(scope, run_id, epoch))
            run.usage = add_counters(run.usage or {}, usage)
            return clone(run)

    def set_usage(self, scope: Scope, run_id: Any, usage: dict[str, int | float], *, epoch: int | None = None) -> Run:
        usage = clean_usage(usage)
        epoch = clean_epoch(epoch)
        with self.db.lock:
            run = self._open(self._writable(scope, run_id, epoch))
            run.usage = set_counters(usage)
            return clone(run)

    def set_status(
        self, scope: Scope, run_id: Any, status: str, *, transcript: list[dict[str, Any]] | None = None,
        epoch: int | None = None,
    ) -> Run:
        status = clean_open_status(status)
        transcript = clean_transcript(transcript)
        epoch = clean_epoch(epoch)
        with self.db.lock:
            run = self._open(self._writable(scope, run_id, epoch))
            run.status = status
            if transcript is not None:
                run.transcript = transcript
            return clone(run)

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
        status = clean_finished_status(status)
        error = clean_error(error)
        finished_at = clean_caller_time(finished_at, field="finished_at")
        transcript = clean_transcript(transcript)
        epoch = clean_epoch(epoch)
        with self.db.lock:
            run = self._open(self._writable(scope, run_id, epoch))
            run.status, run.error, run.finished_at = status, error, finish_time(run, finished_at)
            if transcript is not None:
                run.transcript = transcript
            return clone(run)

    def mark_detached(
        self, scope: Scope, run_id: Any, since: datetime | None = None, *, epoch: int | None = None
    ) -> Run:
        since = clean_datetime(since, "since") or timezone.now()
        epoch = clean_epoch(epoch)
        with self.db.lock:
            run = self._open(self._writable(scope, run_id, epoch))
            if run.detached_since is None:
                run.detached_since = since
            return clone(run)

    def clear_detached(self, scope: Scope, run_id: Any, *, epoch: int | None = None) -> Run:
        epoch = clean_epoch(epoch)
        with self.db.lock:
            run = self._open(self._writable(scope, run_id, epoch))
            run.detached_since = None
            return clone(run)

    # -- user and operator actions ----------------------------------------------------------

    def request_cancel(self, scope: Scope, run_id: Any) -> Run:
        with self.db.lock:
            run = self._writable(scope, run_id, None)
            if run.status in OPEN_RUN_STATUSES:
                run.cancel_requested = True
            return clone(run)

    def abort_stuck(self, run_id: Any, *, error: dict[str, str] | None = None) -> bool:
        run_pk = parse_id(run_id, "run_id")
        error = clean_error(error) or dict(STUCK_RUN_ERROR)
        with self.db.lock:
            run = self.db.runs.get(run_pk)
            if run is None or run.status not in OPEN_RUN_STATUSES:
                return False
            run.status, run.error, run.finished_at = RunStatus.ABORTED, error, timezone.now()
            return True
