"""The generation run store: records of non-chat generations (image, audio, speech, video, transcription).

A generation run is keyed by the caller's run id and filed under a ``slot``
(what TanStack AI calls a generation's ``threadId``: "product-42-hero"), so a
reload finds the latest run of a slot. It belongs to its creator (tenant and
owner) and, optionally, to one of their conversations: then whoever may read
that conversation may read the run, and deleting the conversation deletes it.
Only result metadata lives here; the bytes are the run's artifacts
(:mod:`agent_persistence.stores.artifacts`), kept in the blob store.

``create_or_resume`` is insert-if-absent: a second call with the same id
returns the stored record unchanged, whatever else it says. ``update`` is a
patch of the mutable fields; an id that names no run the caller can see is a
no-op (None), as TanStack's ``update`` of a missing run is.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from ..exceptions import Conflict, ConversationNotOwned, NotFound, Validation
from ..models import Conversation, GenerationRun
from ..scope import Scope
from .base import (
    UNSET,
    check_scope,
    clean_object,
    clean_text,
    lookup_id,
    parse_id,
    readable,
    writable_conversation,
)
from .protocols import GenerationRunStoreProtocol
from .rules.generations import (  # re-exported: these rules moved to agent_persistence/stores/rules/generations.py
    MAX_ARTIFACT_REFS as MAX_ARTIFACT_REFS,
    clean_artifact_refs as clean_artifact_refs,
    clean_error as clean_error,
    clean_generation_status as clean_generation_status,
)
from .rules.generations import (
    MAX_METADATA_BYTES,
    changes_of,
    clean_kind,
    clean_slot,
    generation_not_found,
)
from .times import clean_caller_time
from .twins import twins_of

# -- cleaning input ---------------------------------------------------------------------------


def visible_generation_runs(scope: Scope) -> Any:
    """The generation runs ``scope`` may read: its own, and those of conversations it may read."""
    return GenerationRun.objects.filter(
        Q(tenant=scope.tenant, owner=scope.user) | Q(conversation__in=Conversation.objects.filter(readable(scope)))
    )


def writable_generation_run(scope: Scope, run_id: Any, *, for_update: bool = False) -> GenerationRun:
    """The run if ``scope`` created it; ConversationNotOwned for a reader of its conversation, else NotFound."""
    check_scope(scope)
    runs = visible_generation_runs(scope).filter(pk=lookup_id(run_id, "generation run"))
    if for_update:
        runs = runs.select_for_update()
    run = runs.first()
    if run is None:
        raise generation_not_found()
    if (run.tenant, run.owner) != (scope.tenant, scope.user):
        raise ConversationNotOwned()
    return run


# -- the store ----------------------------------------------------------------------------------


class GenerationRunStore(twins_of(GenerationRunStoreProtocol)):
    """Generation runs through the ORM; see ``docs/reference/stores/generations.md``."""

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
        """The run ``id``, inserted as running if it does not exist yet; otherwise the stored one, unchanged.

        An id already used by another tenant's or user's run is
        Conflict("generation_run_id_taken").
        """
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
        with transaction.atomic():
            conversation_pk = None
            if conversation_id is not None:
                conversation_pk = writable_conversation(scope, conversation_id, for_update=True).pk
            existing = GenerationRun.objects.filter(pk=run_id).first()
            if existing is not None:
                return self._original(scope, existing)
            try:
                with transaction.atomic():
                    return GenerationRun.objects.create(
                        id=run_id, tenant=scope.tenant, owner=scope.user, conversation_id=conversation_pk, **fields
                    )
            except IntegrityError:
                # Another transaction inserted this id between our read and our insert.
                existing = GenerationRun.objects.filter(pk=run_id).first()
                if existing is None:
                    raise Conflict("The generation run could not be stored; retry.", code="generation_run_conflict") from None
                return self._original(scope, existing)

    def _original(self, scope: Scope, run: GenerationRun) -> GenerationRun:
        if (run.tenant, run.owner) != (scope.tenant, scope.user):
            raise Conflict("This id is already taken; choose another.", code="generation_run_id_taken")
        return run

    def get(self, scope: Scope, run_id: Any) -> GenerationRun:
        """The run if ``scope`` may read it; NotFound("generation_run_not_found") otherwise."""
        check_scope(scope)
        run = visible_generation_runs(scope).filter(pk=lookup_id(run_id, "generation run")).first()
        if run is None:
            raise generation_not_found()
        return run

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
        """Patch the given fields of the run; None (nothing written) when no run of ``scope`` has this id.

        A reader of the run's conversation is refused with ConversationNotOwned.
        """
        try:
            uuid_of = parse_id(run_id, "generation run")
        except Validation:
            return None
        with transaction.atomic():
            try:
                run = writable_generation_run(scope, uuid_of, for_update=True)
            except NotFound:
                return None
            changes = changes_of(
                run, status=status, finished_at=finished_at, error=error, result=result, usage=usage, metadata=metadata,
                artifacts=artifacts,
            )
            if changes:
                GenerationRun.objects.filter(pk=run.pk, tenant=scope.tenant, owner=scope.user).update(**changes)
                for name, value in changes.items():
                    setattr(run, name, value)
            return run

    def latest(self, scope: Scope, slot: Any) -> GenerationRun | None:
        """The scope's latest run of ``slot`` (greatest ``started_at``, then id); None when the slot has none."""
        check_scope(scope)
        slot = clean_slot(slot)
        return (
            GenerationRun.objects.filter(tenant=scope.tenant, owner=scope.user, slot=slot)
            .order_by("-started_at", "-id")
            .first()
        )

    def delete(self, scope: Scope, run_id: Any) -> None:
        """Delete the run with its artifacts and their blobs (bytes once that commits). Owner only."""
        with transaction.atomic():
            run = writable_generation_run(scope, run_id)
            deleted, _ = GenerationRun.objects.filter(pk=run.pk).delete()
            if not deleted:
                raise generation_not_found()
