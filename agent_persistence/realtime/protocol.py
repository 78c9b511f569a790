"""The websocket protocol: parsing and validating client frames, building server frames.

Every frame is a JSON object with a ``type``. See ``docs/reference/websocket.md``.
"""

from __future__ import annotations

import uuid
from typing import Any

from .. import json_policy
from ..conf import app_settings

# Close codes (sent after the handshake, so the client sees them).
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404  # at connect, and when the conversation stops being readable
CLOSE_TOO_MANY_SOCKETS = 4429  # over WEBSOCKET_MAX_PER_USER in this server process
CLOSE_INTERNAL_ERROR = 1011  # the server could not open the socket (e.g. its database is down)
CLOSE_TICKET_REFUSED = 4403  # ?ticket= expired, spent, tampered or for another conversation (realtime/tickets.py)

CLIENT_TYPES = frozenset({"attach", "start", "stop", "answer", "resume"})
# The fields each client frame may carry besides ``type``.
FIELDS = {
    "attach": frozenset({"last_index", "offset", "message_id"}),
    "start": frozenset({"content", "agent", "message_id"}),
    "stop": frozenset(),
    "answer": frozenset({"answers"}),
    "resume": frozenset({"message_id"}),
}


class ProtocolError(Exception):
    """A client frame the server refuses; answered with an error frame, the socket stays open."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field


def max_frame_bytes() -> int:
    """A start frame carries a whole user message: its limit plus room for the envelope."""
    return app_settings.MAX_MESSAGE_BYTES + 64 * 1024


def parse_frame(text: str | None, data: bytes | None) -> dict[str, Any]:
    """The validated client frame; ProtocolError, or Validation from the JSON policy, otherwise.

    The text goes through :func:`agent_persistence.json_policy.parse`, as REST
    bodies do: ``malformed_request`` when it is not JSON or nests deeper than
    ``JSON_MAX_DEPTH`` (measured before decoding), ``invalid`` for lone
    surrogates, NUL and numbers out of range.
    """
    if text is None:
        raise ProtocolError("invalid_frame", "Frames are JSON text, not binary.")
    if len(text) > max_frame_bytes() or len(text.encode("utf-8", "surrogatepass")) > max_frame_bytes():
        raise ProtocolError("frame_too_large", f"Frames are limited to {max_frame_bytes()} bytes.")
    frame = json_policy.parse(text, field_name="frame")
    if not isinstance(frame, dict):
        raise ProtocolError("invalid_frame", "A frame is a JSON object.")
    kind = frame.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("invalid_frame", "A frame needs a string 'type'.", "type")
    if kind not in CLIENT_TYPES:
        raise ProtocolError("unknown_type", f"Unknown frame type {kind[:50]!r}.", "type")
    unknown = set(frame) - FIELDS[kind] - {"type"}
    if unknown:
        raise ProtocolError("unknown_field", f"Unknown field {sorted(unknown)[0][:50]!r} in a {kind} frame.", sorted(unknown)[0][:50])
    for name in ("last_index", "offset"):
        if name in frame:
            value = frame[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ProtocolError("invalid_frame", f"{name} must be a whole number, 0 or more.", name)
    if "message_id" in frame and frame["message_id"] is not None:
        frame["message_id"] = uuid_field(frame["message_id"], "message_id")
    if kind == "start":
        if "content" not in frame:
            raise ProtocolError("invalid_frame", "A start frame needs 'content'.", "content")
        if frame.get("agent") is not None and not isinstance(frame["agent"], str):
            raise ProtocolError("invalid_frame", "agent must be a string.", "agent")
    if kind == "answer":
        answers = frame.get("answers")
        if not isinstance(answers, list) or not answers or not all(isinstance(answer, dict) for answer in answers):
            raise ProtocolError("invalid_frame", "answers must be a non-empty list of {id, response} objects.", "answers")
    return frame


def uuid_field(value: Any, name: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value)) if isinstance(value, str) else _raise()
    except ValueError:
        raise ProtocolError("invalid_frame", f"{name} must be a UUID.", name) from None


def _raise() -> uuid.UUID:
    raise ValueError


def error(code: str, message: str, field: str | None = None, details: dict[str, Any] | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if field:
        frame["field"] = field
    if details:
        frame["details"] = details
    return frame


def ids(value: Any) -> str | None:
    return str(value) if value is not None else None
