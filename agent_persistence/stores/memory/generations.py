"""The in-memory generation run store: generation runs in the family's memory, cleaned as the ORM store cleans them."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from ...exceptions import Conflict, ConversationNotOwned, NotFound, Validation
from ...models import GenerationRun
from ...scope import Scope
from ..protocols import GenerationRunStoreProtocol
from ..rules.base import UNSET, check_scope, clean_object, clean_text, lookup_id, parse_id
from ..rules.generations import MAX_METADATA_BYTES, changes_of, clean_kind, clean_slot, generation_not_found
from ..rules.times import clean_caller_time
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


def visible_generation_run(db: MemoryDatabase, scope: Scope, run_id: Any) -> GenerationRun | None:
    """The stored run if ``scope`` may read it, else None (the caller holds the lock): the rules of stores.generations."""
    check_scope(scope)
    run = db.generation_runs.get(lookup_id(run_id, "generation run"))
    if run is None:
        return None
    if (run.tenant, run.owner) == (scope.tenant, scope.user):
        return run
    conversation = None if run.conversation_id is None else db.conversations.get(run.conversation_id)
    return run if conversation is not None and db.may_read(scope, conversation) else None


def writable_generation_run(db: MemoryDatabase, scope: Scope, run_id: Any) -> GenerationRun:
    """The stored run if ``scope`` created it; ConversationNotOwned for a reader, else NotFound."""
    run = visible_generation_run(db, scope, run_id)
    if run is None:
        raise generation_not_found()
    if (run.tenant, run.owner) != (scope.tenant, scope.user):
        raise ConversationNotOwned()
    return run


class MemoryGenerationRunStore(twins_of(GenerationRunStoreProtocol)):
    """Generation runs in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    # -- the store ------------------------------------------------------------------------------

    def create_or_resume(
        self,
        scope: Scope,
        *,
        id: Any,
        slot: Any,
        kind: Any,
        provider: Any = "",
        model: Any = "",
        conversation_id: Any = None,
        started_at: Any = None,
        metadata: Any = None,
    ) -> GenerationRun:
        check_scope(scope)
        run_id = parse_id(id, "id")
        fields = {
            "slot": clean_slot(slot),
            "kind": clean_kind(kind),
            "provider": clean_text(provider, "provider", max_length=255) or "",
            "model": clean_text(model, "model", max_length=255) or "",
            "started_at": clean_caller_time(started_at, field="started_at") or timezone.now(),
            "metadata": clean_object(metadata, "metadata", max_bytes=MAX_METADATA_BYTES),
        }
        with self.db.lock:
            conversation_pk = None
            if conversation_id is not None:
                conversation_pk = self.db.writable_conversation(scope, conversation_id).pk
            existing = self.db.generation_runs.get(run_id)
            if existing is not None:
                if (existing.tenant, existing.owner) != (scope.tenant, scope.user):
                    raise Conflict("This id is already taken; choose another.", code="generation_run_id_taken")
                return clone(existing)
            run = GenerationRun(id=run_id, tenant=scope.tenant, owner=scope.user, conversation_id=conversation_pk, **fields)
            self.db.generation_runs[run_id] = run
            return clone(run)

    def get(self, scope: Scope, run_id: Any) -> GenerationRun:
        with self.db.lock:
            run = visible_generation_run(self.db, scope, run_id)
            if run is None:
                raise generation_not_found()
            return clone(run)

    def update(
        self,
        scope: Scope,
        run_id: Any,
        *,
        status: Any = UNSET,
        finished_at: Any = UNSET,
        error: Any = UNSET,
        result: Any = UNSET,
        usage: Any = UNSET,
        metadata: Any = UNSET,
        artifacts: Any = UNSET,
    ) -> GenerationRun | None:
        try:
            uuid_of = parse_id(run_id, "generation run")
        except Validation:
            return None
        with self.db.lock:
            try:
                run = writable_generation_run(self.db, scope, uuid_of)
            except NotFound:
                return None
            changes = changes_of(
                run, status=status, finished_at=finished_at, error=error, result=result, usage=usage, metadata=metadata,
                artifacts=artifacts,
            )
            for name, value in changes.items():
                setattr(run, name, value)
            return clone(run)

    def latest(self, scope: Scope, slot: Any) -> GenerationRun | None:
        check_scope(scope)
        slot = clean_slot(slot)
        with self.db.lock:
            runs = [
                run
                for run in self.db.generation_runs.values()
                if (run.tenant, run.owner, run.slot) == (scope.tenant, scope.user, slot)
            ]
            return clone(max(runs, key=lambda run: (run.started_at, run.pk))) if runs else None

    def delete(self, scope: Scope, run_id: Any) -> None:
        with self.db.lock:
            run = writable_generation_run(self.db, scope, run_id)
            del self.db.generation_runs[run.pk]
            self.db.delete_artifacts(lambda row: row.generation_run_id == run.pk)
