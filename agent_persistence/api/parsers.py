"""Request body parsers: JSON through the app's JSON policy, multipart only where files are uploaded.

Every view of the API reads its body with :class:`JSONBodyParser` (set on
:class:`~agent_persistence.api.views.base.ScopedAPIView`), so a body is
refused the same way on every endpoint, and the same way as a websocket frame:
text that is not JSON, or nests deeper than ``JSON_MAX_DEPTH``, is 400
``malformed_request`` before it is decoded; lone surrogates, NUL and numbers
out of range are 400 ``invalid`` (see :mod:`agent_persistence.json_policy`).
Any other content type is 415 ``unsupported_media_type``: form-encoded bodies
are not accepted anywhere, multipart only by the file upload
(:class:`UploadParser`).
"""

from __future__ import annotations

import codecs
from typing import IO, Any

from django.conf import settings
from django.http.multipartparser import MultiPartParserError
from rest_framework.parsers import DataAndFiles, JSONParser, MultiPartParser

from .. import json_policy
from ..exceptions import Validation


class JSONBodyParser(JSONParser):
    """``application/json`` parsed by :func:`agent_persistence.json_policy.parse`.

    A subclass of DRF's JSONParser so DRF reads the body through
    ``request.body``, which enforces ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (413).
    """

    def parse(self, stream: IO[bytes], media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        raw = stream.read()
        try:
            codec = codecs.lookup(encoding)
        except LookupError:
            raise Validation(f"Unknown charset {encoding!r}.", code="malformed_request", field="body") from None
        if codec.name != "utf-8":
            try:
                raw = raw.decode(codec.name)
            except UnicodeDecodeError:
                raise Validation(f"The body is not {encoding} text.", code="malformed_request", field="body") from None
        return json_policy.parse(raw)


class UploadParser(MultiPartParser):
    """``multipart/form-data`` for file uploads; a body Django cannot read is 400 ``malformed_request``.

    Django's multipart parser reports a body with no parts (only the closing
    boundary) or a broken one as ``MultiPartParserError``; DRF would answer it
    with its own message, this gives the app's error body.
    """

    def parse(
        self, stream: IO[bytes], media_type: str | None = None, parser_context: dict[str, Any] | None = None
    ) -> DataAndFiles:
        try:
            return super().parse(stream, media_type, parser_context)
        except Exception as error:
            if isinstance(error, MultiPartParserError) or isinstance(error.__cause__, MultiPartParserError):
                raise Validation("The multipart body cannot be read.", code="malformed_request", field="body") from None
            raise
