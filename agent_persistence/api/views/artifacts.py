"""Views of artifacts (list, read, download with ``Range``, delete) and generation runs (create, read, patch, latest).

Downloads answer ``Accept-Ranges: bytes``. One byte range is served as 206
with ``Content-Range``; a range that starts past the end is 416 with
``Content-Range: bytes */<size>``; several ranges, another unit or a
malformed header are served whole (200), as RFC 9110 allows. ``If-Range``
other than the download's own ``ETag`` serves the whole content too. The
content is always an attachment with ``X-Content-Type-Options: nosniff``, so
an artifact stored as ``text/html`` never runs as a page of this site.
"""

from __future__ import annotations

from typing import IO, Any

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ...exceptions import RangeNotSatisfiable
from ...stores import artifact_store, generation_run_store
from ...stores.blobs import parse_range_header
from ...stores.generations import generation_not_found
from ..pagination import page_body, paging
from ..schema import NO_NUL_PATTERN, extend_schema
from ..serializers.artifacts import (
    ArtifactPageSerializer,
    ArtifactSerializer,
    GenerationRunCreateInputSerializer,
    GenerationRunSerializer,
    GenerationRunUpdateInputSerializer,
)
from ..serializers.base import ErrorSerializer, error_responses
from .base import ScopedAPIView, download_filename
from .conversations import LIMIT, OFFSET, READ_ERRORS, TOTAL, WRITE_ERRORS, text_param, validated

PAGING = [LIMIT, OFFSET, TOTAL]
RANGE = OpenApiParameter(
    "Range", str, OpenApiParameter.HEADER, required=False, description="One byte range, e.g. bytes=0-1023 or bytes=-500."
)
IF_RANGE = OpenApiParameter(
    "If-Range", str, OpenApiParameter.HEADER, required=False, description="Serve the range only if the ETag still matches."
)
SLOT = OpenApiParameter(
    "slot",
    {"type": "string", "minLength": 1, "maxLength": 255, "pattern": NO_NUL_PATTERN},
    required=True,
    description="The slot whose latest generation run to return (1 to 255 characters, no NUL).",
)


def artifact_body(artifact: Any) -> dict[str, Any]:
    return ArtifactSerializer(artifact).data


def generation_body(run: Any) -> dict[str, Any]:
    return GenerationRunSerializer(run).data


# -- artifacts ----------------------------------------------------------------------------------


class ConversationArtifactListView(ScopedAPIView):
    """The artifacts of a conversation (its chat runs' and the generation runs filed in it), oldest first."""

    @extend_schema(
        operation_id="conversation_artifacts_list",
        parameters=PAGING,
        responses={200: ArtifactPageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        page = artifact_store().list_by_conversation(self.scope, conversation_id, **paging(request))
        return Response(page_body(page, artifact_body))


class RunArtifactListView(ScopedAPIView):
    """The artifacts of a run (a chat run or a generation run), oldest first; delete them all."""

    @extend_schema(
        operation_id="run_artifacts_list",
        parameters=PAGING,
        responses={200: ArtifactPageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, run_id: str) -> Response:
        page = artifact_store().list_by_run(self.scope, run_id, **paging(request))
        return Response(page_body(page, artifact_body))

    @extend_schema(
        operation_id="run_artifacts_destroy",
        request=None,
        responses={204: OpenApiResponse(description="Deleted, with their bytes."), **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, run_id: str) -> Response:
        artifact_store().delete_for_run(self.scope, run_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ArtifactDetailView(ScopedAPIView):
    """An artifact's record; delete it with its bytes."""

    @extend_schema(operation_id="artifacts_retrieve", responses={200: ArtifactSerializer, **error_responses(401, 403, 404)})
    def get(self, request: Request, artifact_id: str) -> Response:
        return Response(artifact_body(artifact_store().get(self.scope, artifact_id)))

    @extend_schema(
        operation_id="artifacts_destroy",
        request=None,
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, artifact_id: str) -> Response:
        artifact_store().delete(self.scope, artifact_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class LimitedReader:
    """The next ``remaining`` bytes of ``stream``, then its end; closes the stream."""

    def __init__(self, stream: IO[bytes], remaining: int) -> None:
        self.stream, self.remaining = stream, remaining

    def read(self, size: int = -1) -> bytes:
        if self.remaining <= 0:
            return b""
        chunk = self.stream.read(self.remaining if size is None or size < 0 else min(size, self.remaining))
        self.remaining -= len(chunk)
        return chunk

    def close(self) -> None:
        self.stream.close()


def etag_of(artifact: Any) -> str:
    # Every put names new bytes after a fresh UUID: that name is a strong validator of these bytes.
    return '"{}"'.format(artifact.blob.content.name.rsplit("/", 1)[-1])


class ArtifactContentView(ScopedAPIView):
    """An artifact's bytes, as an attachment; one byte range with ``Range`` (206)."""

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # The bytes are not rendered: an Accept naming only their media type must not be 406.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        operation_id="artifacts_content",
        parameters=[RANGE, IF_RANGE],
        responses={
            (200, "*/*"): OpenApiResponse(OpenApiTypes.BINARY, description="The whole content."),
            (206, "*/*"): OpenApiResponse(OpenApiTypes.BINARY, description="The requested byte range."),
            **error_responses(401, 403, 404),
            416: OpenApiResponse(
                ErrorSerializer, description="The range starts past the end (range_not_satisfiable); see Content-Range."
            ),
        },
    )
    def get(self, request: Request, artifact_id: str) -> Any:
        artifact, stream = artifact_store().open(self.scope, artifact_id)
        try:
            return self.content_response(request, artifact, stream)
        except BaseException:
            stream.close()
            raise

    def content_response(self, request: Request, artifact: Any, stream: IO[bytes]) -> Any:
        size, etag = artifact.blob.size, etag_of(artifact)
        byte_range = parse_range_header(request.headers.get("Range"))
        if byte_range is not None and request.headers.get("If-Range", etag) != etag:
            byte_range = None
        offset, length, answer = 0, size, status.HTTP_200_OK
        if byte_range is not None:
            try:
                offset, length = byte_range.resolve(size)
            except RangeNotSatisfiable as exc:
                stream.close()
                headers = {"Content-Range": f"bytes */{size}", "Accept-Ranges": "bytes"}
                return Response(exc.as_dict(), status=status.HTTP_416_REQUESTED_RANGE_NOT_SATISFIABLE, headers=headers)
            answer = status.HTTP_206_PARTIAL_CONTENT
        if offset:
            stream.seek(offset)
        response = FileResponse(
            LimitedReader(stream, length),
            status=answer,
            as_attachment=True,
            filename=download_filename(artifact.name, str(artifact.pk)),
            content_type=artifact.media_type,
        )
        response["Content-Length"] = str(length)
        response["Accept-Ranges"] = "bytes"
        response["ETag"] = etag
        response["X-Content-Type-Options"] = "nosniff"
        if answer == status.HTTP_206_PARTIAL_CONTENT:
            response["Content-Range"] = f"bytes {offset}-{offset + length - 1}/{size}"
        return response


# -- generation runs --------------------------------------------------------------------------------


class GenerationRunListView(ScopedAPIView):
    """Create a generation run, or resume it: a second create with its id returns the stored run unchanged."""

    @extend_schema(
        operation_id="generation_runs_create",
        request=GenerationRunCreateInputSerializer,
        responses={200: GenerationRunSerializer, **error_responses(*WRITE_ERRORS, 409)},
    )
    def post(self, request: Request) -> Response:
        data = validated(GenerationRunCreateInputSerializer, request)
        run = generation_run_store().create_or_resume(self.scope, **data)
        return Response(generation_body(run))


class GenerationRunLatestView(ScopedAPIView):
    """The caller's latest generation run of a slot; 404 when the slot has none."""

    @extend_schema(
        operation_id="generation_runs_latest",
        parameters=[SLOT],
        responses={200: GenerationRunSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        run = generation_run_store().latest(self.scope, text_param(request, "slot"))
        if run is None:
            raise generation_not_found()
        return Response(generation_body(run))


class GenerationRunDetailView(ScopedAPIView):
    """A generation run: read it, patch its mutable fields, delete it with its artifacts."""

    @extend_schema(
        operation_id="generation_runs_retrieve",
        responses={200: GenerationRunSerializer, **error_responses(401, 403, 404)},
    )
    def get(self, request: Request, generation_run_id: str) -> Response:
        return Response(generation_body(generation_run_store().get(self.scope, generation_run_id)))

    @extend_schema(
        operation_id="generation_runs_update",
        request=GenerationRunUpdateInputSerializer,
        responses={200: GenerationRunSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def patch(self, request: Request, generation_run_id: str) -> Response:
        data = validated(GenerationRunUpdateInputSerializer, request)
        run = generation_run_store().update(self.scope, generation_run_id, **data)
        if run is None:
            raise generation_not_found()
        return Response(generation_body(run))

    @extend_schema(
        operation_id="generation_runs_destroy",
        request=None,
        responses={204: OpenApiResponse(description="Deleted, with its artifacts."), **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, generation_run_id: str) -> Response:
        generation_run_store().delete(self.scope, generation_run_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
