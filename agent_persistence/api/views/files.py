"""Views of a conversation's files: multipart upload, listing, metadata, streamed download, delete.

Uploads pass through :class:`SizeLimitedUploadHandler` before Django's own
handlers, so a file over ``MAX_FILE_BYTES`` stops the upload as soon as the
limit is crossed, before it is spooled to disk or memory in full; the view
then answers 413 ``too_large`` and nothing is stored.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload, load_handler
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ...conf import app_settings
from ...exceptions import StorageLimit
from ...stores import file_store
from ..pagination import page_body, paging
from ..parsers import UploadParser
from ..schema import extend_schema
from ..serializers.base import error_responses, representation
from ..serializers.files import FilePageSerializer, FileSerializer, FileUploadInputSerializer
from .base import ScopedAPIView, download_filename
from .conversations import READ_ERRORS, keyset_paging_parameters, order_param, text_param, validated


class SizeLimitedUploadHandler(FileUploadHandler):
    """Stops the upload once a file passes ``MAX_FILE_BYTES``, and remembers that it did.

    StopUpload lets Django close the other handlers' partial files; the view
    turns ``exceeded`` into StorageLimit (413).
    """

    exceeded = False

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        if start + len(raw_data) > app_settings.MAX_FILE_BYTES:
            self.exceeded = True
            raise StopUpload(connection_reset=True)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler (memory or temporary file) builds the upload


file_body = representation(FileSerializer)


class ConversationFileListView(ScopedAPIView):
    """A conversation's files, oldest first; upload one (multipart/form-data, field ``file``)."""

    parser_classes = [UploadParser]
    size_limit: SizeLimitedUploadHandler | None = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # Before authentication, which may read the body (the CSRF check of session auth).
        if request.method == "POST" and not hasattr(request._request, "_files"):
            self.size_limit = SizeLimitedUploadHandler(request._request)
            request._request.upload_handlers = [
                self.size_limit,
                *(load_handler(path, request._request) for path in settings.FILE_UPLOAD_HANDLERS),
            ]
        super().initial(request, *args, **kwargs)

    def check_upload_size(self, request: Request) -> None:
        request.data  # parse the body, through the size-limited handler
        if self.size_limit is not None and self.size_limit.exceeded:
            limit = app_settings.MAX_FILE_BYTES
            raise StorageLimit(f"The file is larger than {limit} bytes.", limit=limit)

    @extend_schema(
        operation_id="files_list",
        parameters=keyset_paging_parameters("files", "file", "created_at"),
        responses={200: FilePageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        page = file_store().list(
            self.scope,
            conversation_id,
            **paging(request),
            order=order_param(request) or "asc",
            before=text_param(request, "before"),
            after=text_param(request, "after"),
        )
        return Response(page_body(page, file_body))

    @extend_schema(
        operation_id="files_create",
        request={"multipart/form-data": FileUploadInputSerializer},
        responses={201: FileSerializer, **error_responses(400, 401, 403, 404, 413, 415)},
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        self.check_upload_size(request)
        data = validated(FileUploadInputSerializer, request)
        upload = data["file"]
        record = file_store().save(
            self.scope,
            conversation_id=conversation_id,
            message_id=data.get("message_id"),
            content=upload,
            name=upload.name,
            content_type=upload.content_type or None,
            expires_at=data.get("expires_at"),
        )
        return Response(file_body(record), status=status.HTTP_201_CREATED)


class FileDetailView(ScopedAPIView):
    """A file's record; delete the file."""

    @extend_schema(operation_id="files_retrieve", responses={200: FileSerializer, **error_responses(401, 403, 404)})
    def get(self, request: Request, file_id: str) -> Response:
        return Response(file_body(file_store().get(self.scope, file_id)))

    @extend_schema(
        operation_id="files_destroy",
        request=None,
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, file_id: str) -> Response:
        file_store().delete(self.scope, file_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class FileContentView(ScopedAPIView):
    """A file's content, streamed, as an attachment with its stored name and type."""

    @extend_schema(
        operation_id="files_content",
        responses={
            (200, "*/*"): OpenApiResponse(OpenApiTypes.BINARY, description="The content."),
            **error_responses(401, 403, 404),
        },
    )
    def get(self, request: Request, file_id: str) -> FileResponse:
        store = file_store()
        record = store.get(self.scope, file_id)
        stream = store.open(self.scope, record.pk)
        response = FileResponse(stream, as_attachment=True, filename=download_filename(record.name, str(record.pk)), content_type=record.content_type)
        response["Content-Length"] = str(record.size)
        return response
