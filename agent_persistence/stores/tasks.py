"""The task store: background tasks with a status, comments, a callback URL and one result.

A task belongs to the (tenant, user) that created it and is invisible to
everyone else (NotFound, whether or not it exists). It may sit in a
conversation, which must then be one its owner may write. Comments are
appended under the task's row lock, so concurrent comments are all kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import NotFound, StorageLimit
from ..ids import uuid7
from ..models import Task, TaskStatus
from ..scope import Scope
from .base import (
    UNSET,
    Page,
    check_scope,
    clean_order,
    clean_paging,
    clean_text,
    json_size,
    keyset_page,
    lookup_id,
    parse_id,
    writable_conversation,
)
from .protocols import TaskStoreProtocol
from .rules.tasks import (  # re-exported: these rules moved to agent_persistence/stores/rules/tasks.py
    MAX_CALLBACK_URL_LENGTH as MAX_CALLBACK_URL_LENGTH,
    MAX_TITLE_LENGTH as MAX_TITLE_LENGTH,
    _http_url as _http_url,
)
from .rules.tasks import (
    MAX_NAME_LENGTH,
    clean_callback_url,
    clean_description,
    clean_error,
    clean_metadata,
    clean_result,
    clean_status,
    clean_title,
)
from .twins import twins_of

# -- cleaning input ---------------------------------------------------------------------------


# -- the store --------------------------------------------------------------------------------


@contextmanager
def conversation_kept() -> Iterator[None]:
    """A transaction in which a task's conversation deleted before commit is NotFound.

    The conversation is locked while the task is written, but foreign keys are
    checked at commit, so a writer that skipped the lock surfaces there.
    """
    try:
        with transaction.atomic():
            yield
    except IntegrityError:
        raise NotFound("No such conversation.") from None


def owned_tasks(scope: Scope) -> Any:
    """The tasks ``scope`` may see and change: its own, in its tenant."""
    return Task.objects.filter(tenant=scope.tenant, owner=scope.user)


class TaskStore(twins_of(TaskStoreProtocol)):
    """Background tasks, each visible to its owner only."""

    def create(
        self,
        scope: Scope,
        *,
        title: str,
        description: str | None = None,
        conversation_id: Any = None,
        agent: str | None = None,
        status: str = TaskStatus.PENDING,
        callback_url: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Task:
        """A new task of ``scope``, in the conversation if one is given."""
        check_scope(scope)
        task = Task(
            tenant=scope.tenant,
            owner=scope.user,
            title=clean_title(title),
            description=clean_description(description),
            agent=clean_text(agent, "agent", max_length=MAX_NAME_LENGTH, null=True),
            status=clean_status(status),
            callback_url=clean_callback_url(callback_url),
            metadata=clean_metadata(metadata),
        )
        with conversation_kept():
            if conversation_id is not None:
                task.conversation_id = writable_conversation(scope, conversation_id, for_update=True).pk
            try:
                with transaction.atomic():
                    task.save(force_insert=True)
            except IntegrityError:
                raise NotFound("No such conversation.") from None
        return task

    def get(self, scope: Scope, task_id: Any) -> Task:
        """The task, if it is ``scope``'s; otherwise NotFound."""
        check_scope(scope)
        pk = lookup_id(task_id, "task")
        try:
            return owned_tasks(scope).get(pk=pk)
        except Task.DoesNotExist:
            raise NotFound("No such task.") from None

    def list(
        self,
        scope: Scope,
        *,
        conversation_id: Any = None,
        status: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        order: str = "desc",
        before: Any = None,
        after: Any = None,
        with_total: bool | None = None,
    ) -> Page[Task]:
        """``scope``'s tasks, newest first (``order="asc"``: oldest first), optionally filtered.

        ``before`` / ``after`` are strict task-id cursors on ``(created_at, id)``:
        only tasks created before / after that task (the id breaks ties),
        whatever ``order`` shows them in. A cursor must be a task of ``scope``
        (of the conversation, with ``conversation_id``), else NotFound; the
        ``status`` filter is the page's only, so a task whose status moved on
        still marks a place. A cursor read is not counted unless ``with_total=True``.
        """
        check_scope(scope)
        limit, offset = clean_paging(limit, offset)
        order = clean_order(order, "desc")
        tasks = owned_tasks(scope)
        if conversation_id is not None:
            tasks = tasks.filter(conversation_id=parse_id(conversation_id, "conversation_id"))
        listed = tasks if status is None else tasks.filter(status=clean_status(status))
        ordering = ("-created_at", "-id") if order == "desc" else ("created_at", "id")
        return keyset_page(
            listed.order_by(*ordering),
            key="created_at",
            cursor_rows=tasks,
            before=before,
            after=after,
            what="task",
            limit=limit,
            offset=offset,
            with_total=with_total,
        )

    def update(
        self,
        scope: Scope,
        task_id: Any,
        *,
        title: Any = UNSET,
        description: Any = UNSET,
        status: Any = UNSET,
        conversation_id: Any = UNSET,
        callback_url: Any = UNSET,
        metadata: Any = UNSET,
        error: Any = UNSET,
    ) -> Task:
        """Change the fields passed (``None`` clears an optional one); always moves ``updated_at``."""
        check_scope(scope)
        pk = lookup_id(task_id, "task")
        changes = self._cleaned_changes(
            title=title,
            description=description,
            status=status,
            callback_url=callback_url,
            metadata=metadata,
            error=error,
        )
        with conversation_kept():
            if conversation_id is not None and conversation_id is not UNSET:
                conversation_id = writable_conversation(scope, conversation_id, for_update=True).pk
            if conversation_id is not UNSET:
                changes["conversation_id"] = conversation_id
            changes["updated_at"] = timezone.now()
            try:
                with transaction.atomic():
                    updated = owned_tasks(scope).filter(pk=pk).update(**changes)
            except IntegrityError:
                raise NotFound("No such conversation.") from None
            if not updated:
                raise NotFound("No such task.")
            return owned_tasks(scope).get(pk=pk)

    def add_comment(self, scope: Scope, task_id: Any, text: str, *, author: str | None = None) -> Task:
        """Append a comment ``{id, text, author, created_at}``; concurrent comments are all kept."""
        check_scope(scope)
        pk = lookup_id(task_id, "task")
        text = clean_text(text, "text", max_length=app_settings.MAX_MESSAGE_BYTES)
        author = clean_text(author, "author", max_length=MAX_NAME_LENGTH, null=True)
        now = timezone.now()
        comment = {"id": str(uuid7()), "text": text, "author": author, "created_at": now.isoformat()}
        with transaction.atomic():
            task = self._locked(scope, pk)
            comments = [*task.comments, comment]
            # The list only grows, so it is bounded like the other large JSON values.
            if json_size(comments) > app_settings.MAX_STATE_BYTES:
                raise StorageLimit(
                    f"The comments of this task would exceed {app_settings.MAX_STATE_BYTES} bytes.",
                    field="comments",
                    limit=app_settings.MAX_STATE_BYTES,
                )
            task.comments = comments
            task.updated_at = now
            task.save(update_fields=["comments", "updated_at"])
        return task

    def set_result(self, scope: Scope, task_id: Any, result: Any) -> Task:
        """Replace the task's one result and stamp ``result_at``; ``None`` clears both."""
        check_scope(scope)
        pk = lookup_id(task_id, "task")
        result = clean_result(result)
        now = timezone.now()
        with transaction.atomic():
            updated = owned_tasks(scope).filter(pk=pk).update(
                result=result, result_at=None if result is None else now, updated_at=now
            )
            if not updated:
                raise NotFound("No such task.")
            return owned_tasks(scope).get(pk=pk)

    def get_result(self, scope: Scope, task_id: Any) -> Any:
        """The task's result, or ``None`` when it has none."""
        return self.get(scope, task_id).result

    def delete(self, scope: Scope, task_id: Any) -> None:
        """Delete the task."""
        check_scope(scope)
        pk = lookup_id(task_id, "task")
        deleted, _ = owned_tasks(scope).filter(pk=pk).delete()
        if not deleted:
            raise NotFound("No such task.")


    # -- internals ----------------------------------------------------------------------------

    def _locked(self, scope: Scope, pk: Any) -> Task:
        task = owned_tasks(scope).select_for_update().filter(pk=pk).first()
        if task is None:
            raise NotFound("No such task.")
        return task

    def _cleaned_changes(self, **fields: Any) -> dict[str, Any]:
        cleaners = {
            "title": clean_title,
            "description": clean_description,
            "status": clean_status,
            "callback_url": clean_callback_url,
            "metadata": clean_metadata,
            "error": clean_error,
        }
        return {name: cleaners[name](value) for name, value in fields.items() if value is not UNSET}
