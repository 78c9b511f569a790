"""Views of tasks: list and create, read, change, delete, comment, and the one result."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ...models.tasks import TaskStatus
from ...stores import task_store
from ..pagination import page_body, paging
from ..schema import extend_schema
from ..serializers.base import error_responses, representation
from ..serializers.tasks import (
    TaskCommentInputSerializer,
    TaskCreateInputSerializer,
    TaskPageSerializer,
    TaskResultInputSerializer,
    TaskResultSerializer,
    TaskSerializer,
    TaskUpdateInputSerializer,
)
from .base import ScopedAPIView
from .conversations import READ_ERRORS, WRITE_ERRORS, keyset_paging_parameters, order_param, text_param, validated


task_body = representation(TaskSerializer)
result_body = representation(TaskResultSerializer)


class TaskListView(ScopedAPIView):
    """The caller's tasks, newest first; create one."""

    @extend_schema(
        operation_id="tasks_list",
        parameters=[
            *keyset_paging_parameters("tasks", "task", "created_at"),
            OpenApiParameter("conversation_id", str, description="Only the tasks of this conversation."),
            OpenApiParameter("status", str, enum=TaskStatus.values, description="Only tasks in this status."),
        ],
        responses={200: TaskPageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        page = task_store().list(
            self.scope,
            conversation_id=text_param(request, "conversation_id"),
            status=text_param(request, "status"),
            **paging(request),
            order=order_param(request) or "desc",
            before=text_param(request, "before"),
            after=text_param(request, "after"),
        )
        return Response(page_body(page, task_body))

    @extend_schema(
        operation_id="tasks_create",
        request=TaskCreateInputSerializer,
        responses={201: TaskSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        task = task_store().create(self.scope, **validated(TaskCreateInputSerializer, request))
        return Response(task_body(task), status=status.HTTP_201_CREATED)


class TaskDetailView(ScopedAPIView):
    """One task: read, change, delete."""

    @extend_schema(operation_id="tasks_retrieve", responses={200: TaskSerializer, **error_responses(401, 403, 404)})
    def get(self, request: Request, task_id: str) -> Response:
        return Response(task_body(task_store().get(self.scope, task_id)))

    @extend_schema(
        operation_id="tasks_partial_update",
        request=TaskUpdateInputSerializer,
        responses={200: TaskSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def patch(self, request: Request, task_id: str) -> Response:
        changes = validated(TaskUpdateInputSerializer, request)
        return Response(task_body(task_store().update(self.scope, task_id, **changes)))

    @extend_schema(
        operation_id="tasks_destroy",
        request=None,
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, task_id: str) -> Response:
        task_store().delete(self.scope, task_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TaskCommentView(ScopedAPIView):
    """Append a comment to a task."""

    @extend_schema(
        operation_id="tasks_comment",
        request=TaskCommentInputSerializer,
        responses={201: TaskSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, task_id: str) -> Response:
        data = validated(TaskCommentInputSerializer, request)
        task = task_store().add_comment(self.scope, task_id, data["text"], author=data.get("author"))
        return Response(task_body(task), status=status.HTTP_201_CREATED)


class TaskResultView(ScopedAPIView):
    """A task's one result: read it, replace it (null clears it)."""

    @extend_schema(operation_id="tasks_result", responses={200: TaskResultSerializer, **error_responses(401, 403, 404)})
    def get(self, request: Request, task_id: str) -> Response:
        return Response(result_body(task_store().get(self.scope, task_id)))

    @extend_schema(
        operation_id="tasks_set_result",
        request=TaskResultInputSerializer,
        responses={200: TaskResultSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def put(self, request: Request, task_id: str) -> Response:
        data = validated(TaskResultInputSerializer, request)
        return Response(result_body(task_store().set_result(self.scope, task_id, data["result"])))
