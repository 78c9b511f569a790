"""The in-memory task store: background tasks, each visible to its owner only."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from ...conf import app_settings
from ...exceptions import NotFound, StorageLimit
from ...ids import uuid7
from ...models import Task, TaskStatus
from ...scope import Scope
from ..protocols import TaskStoreProtocol
from ..rules.base import (
    UNSET,
    Page,
    check_scope,
    clean_order,
    clean_paging,
    clean_text,
    clean_with_total,
    json_size,
    lookup_id,
    parse_id,
)
from ..rules.tasks import (
    MAX_NAME_LENGTH,
    clean_callback_url,
    clean_description,
    clean_error,
    clean_metadata,
    clean_result,
    clean_status,
    clean_title,
)
from ..twins import twins_of
from .conversations import page_of, past_cursors
from .database import DEFAULT_DATABASE, MemoryDatabase, clone

CLEANERS = {
    "title": clean_title,
    "description": clean_description,
    "status": clean_status,
    "callback_url": clean_callback_url,
    "metadata": clean_metadata,
    "error": clean_error,
}


class MemoryTaskStore(twins_of(TaskStoreProtocol)):
    """Background tasks in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    def _owned(self, scope: Scope, task_id: Any) -> Task:
        task = self.db.tasks.get(lookup_id(task_id, "task"))
        if task is None or (task.tenant, task.owner) != (scope.tenant, scope.user):
            raise NotFound("No such task.")
        return task

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
        check_scope(scope)
        now = timezone.now()
        task = Task(
            id=uuid7(),
            tenant=scope.tenant,
            owner=scope.user,
            title=clean_title(title),
            description=clean_description(description),
            agent=clean_text(agent, "agent", max_length=MAX_NAME_LENGTH, null=True),
            status=clean_status(status),
            callback_url=clean_callback_url(callback_url),
            metadata=clean_metadata(metadata),
            created_at=now,
            updated_at=now,
        )
        with self.db.lock:
            if conversation_id is not None:
                task.conversation_id = self.db.writable_conversation(scope, conversation_id).pk
            self.db.tasks[task.pk] = task
            return clone(task)

    def get(self, scope: Scope, task_id: Any) -> Task:
        check_scope(scope)
        with self.db.lock:
            return clone(self._owned(scope, task_id))

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
        check_scope(scope)
        limit, offset = clean_paging(limit, offset)
        order = clean_order(order, "desc")
        conversation_pk = None if conversation_id is None else parse_id(conversation_id, "conversation_id")
        status = None if status is None else clean_status(status)
        with_total = clean_with_total(with_total, before, after)
        with self.db.lock:
            # The cursors may name any task of the listing before its status filter (see TaskStore.list).
            tasks = [
                task
                for task in self.db.tasks.values()
                if (task.tenant, task.owner) == (scope.tenant, scope.user)
                and (conversation_pk is None or task.conversation_id == conversation_pk)
            ]
            listed = [task for task in tasks if status is None or task.status == status]
            listed = past_cursors(
                listed, tasks, lambda task: (task.created_at, task.pk), before=before, after=after, what="task"
            )
            listed.sort(key=lambda task: (task.created_at, task.pk), reverse=order == "desc")
            return page_of(listed, limit, offset, with_total=with_total)

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
        check_scope(scope)
        pk = lookup_id(task_id, "task")
        fields = {
            "title": title,
            "description": description,
            "status": status,
            "callback_url": callback_url,
            "metadata": metadata,
            "error": error,
        }
        changes = {name: CLEANERS[name](value) for name, value in fields.items() if value is not UNSET}
        with self.db.lock:
            if conversation_id is not None and conversation_id is not UNSET:
                conversation_id = self.db.writable_conversation(scope, conversation_id).pk
            if conversation_id is not UNSET:
                changes["conversation_id"] = conversation_id
            task = self._owned(scope, pk)
            for name, value in changes.items():
                setattr(task, name, value)
            task.updated_at = timezone.now()
            return clone(task)

    def add_comment(self, scope: Scope, task_id: Any, text: str, *, author: str | None = None) -> Task:
        check_scope(scope)
        pk = lookup_id(task_id, "task")
        text = clean_text(text, "text", max_length=app_settings.MAX_MESSAGE_BYTES)
        author = clean_text(author, "author", max_length=MAX_NAME_LENGTH, null=True)
        now = timezone.now()
        comment = {"id": str(uuid7()), "text": text, "author": author, "created_at": now.isoformat()}
        with self.db.lock:
            task = self._owned(scope, pk)
            comments = [*task.comments, comment]
            if json_size(comments) > app_settings.MAX_STATE_BYTES:
                raise StorageLimit(
                    f"The comments of this task would exceed {app_settings.MAX_STATE_BYTES} bytes.",
                    field="comments",
                    limit=app_settings.MAX_STATE_BYTES,
                )
            task.comments, task.updated_at = comments, now
            return clone(task)

    def set_result(self, scope: Scope, task_id: Any, result: Any) -> Task:
        check_scope(scope)
        pk = lookup_id(task_id, "task")
        result = clean_result(result)
        now = timezone.now()
        with self.db.lock:
            task = self._owned(scope, pk)
            task.result, task.result_at, task.updated_at = result, None if result is None else now, now
            return clone(task)

    def get_result(self, scope: Scope, task_id: Any) -> Any:
        return self.get(scope, task_id).result

    def delete(self, scope: Scope, task_id: Any) -> None:
        check_scope(scope)
        with self.db.lock:
            del self.db.tasks[self._owned(scope, task_id).pk]
